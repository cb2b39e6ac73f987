package raftgate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/shardproof/shardproof/internal/errcode"
)

// newerDecode is DecodeCommand of a build that added the field "future"
// to every command.
func newerDecode(b []byte) (Command, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	delete(m, "future")
	b, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	return DecodeCommand(b)
}

// A member on an older build than the leader's, given a committed command
// with a field it does not know, skipped it and applied the entries after
// it: its state parted from the others' for good, it said it was ready,
// and it could lead and answer from that state. It halts now: it applies
// nothing from that entry on, leaves the cluster (Raft shut down), and
// /healthz, /readyz and /v1/status say GATE_HALTED with the entry's index;
// the others go on. Upgraded and restarted on its directory, it applies
// the entry and catches up.
func TestUndecodableCommandHaltsMember(t *testing.T) {
	ctx := ctxT(t, time.Minute)
	c := MakeCluster(t, 3, func(cfg *Config) {
		if cfg.ID != "node3" {
			cfg.decode = newerDecode
		}
	})
	old := c.Nodes[2]
	cl := c.Client()
	if _, err := cl.AdvanceFence(ctx, FenceTombstone, 1); err != nil {
		t.Fatal(err)
	}
	waitApplied(t, c.Nodes)

	raw := []byte(fmt.Sprintf(`{"type":"advanceFence","now":%d,"kind":"tombstone","value":5,"spareChecked":true,"future":"x"}`, time.Now().UnixMilli()))
	f := c.Leader(10*time.Second).Raft().Apply(raw, 5*time.Second)
	if err := f.Error(); err != nil {
		t.Fatal(err)
	}
	index := f.Index()
	waitFor(t, "the old member to halt", func() bool { return old.Halted() != nil })
	if h := old.Halted(); h.Index != index || errcode.Of(h) != errcode.GateHalted {
		t.Fatalf("halt: %v at index %d, want GATE_HALTED at %d", h, h.Index, index)
	}
	// The others go on without it.
	if _, err := cl.AdvanceFence(ctx, FenceTombstone, 6); err != nil {
		t.Fatalf("a command after the halt: %v", err)
	}
	waitApplied(t, c.Nodes[:2])
	for _, n := range c.Nodes[:2] {
		var fs Fences
		n.FSM().Read(func(s *State) { fs = s.Fences })
		if fs.Tombstone != 6 {
			t.Fatalf("%s: tombstone %d, want 6", n.ID(), fs.Tombstone)
		}
	}
	waitFor(t, "the old member's Raft to shut down", func() bool { return old.Raft().State().String() == "Shutdown" })
	var fs Fences
	old.FSM().Read(func(s *State) { fs = s.Fences })
	if fs.Tombstone != 1 {
		t.Fatalf("the halted member's tombstone fence: %d, want 1 (nothing applied from entry %d on)", fs.Tombstone, index)
	}
	for _, probe := range []string{"/healthz", "/readyz"} {
		status, code := rawGet(t, old.URL()+probe)
		if status != http.StatusServiceUnavailable || code != errcode.GateHalted {
			t.Fatalf("%s of the halted member: HTTP %d %s, want 503 GATE_HALTED", probe, status, code)
		}
	}
	oc := NewClient(old.URL())
	defer oc.Close()
	st, err := oc.StatusDigest(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Halted == nil || st.Halted.Index != index || st.Halted.Code != errcode.GateHalted || st.StateIndex >= index {
		t.Fatalf("status of the halted member: halted %+v, state index %d, want GATE_HALTED at %d and a state before it", st.Halted, st.StateIndex, index)
	}

	// Upgraded, it replays the entry and catches up.
	c.Configs[2].decode = newerDecode
	up := c.Restart(2)
	waitApplied(t, c.Nodes)
	up.FSM().Read(func(s *State) { fs = s.Fences })
	if fs.Tombstone != 6 || up.Halted() != nil {
		t.Fatalf("the upgraded member: tombstone %d, halted %v; want 6 and running", fs.Tombstone, up.Halted())
	}
}

// rawGet gets url and returns the HTTP status and the error code.
func rawGet(t *testing.T, url string) (int, errcode.Code) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var eb ErrorBody
	json.NewDecoder(resp.Body).Decode(&eb)
	return resp.StatusCode, eb.Error.Code
}

// A command the leader commits at or after the entry its FSM halts at is
// in the log, and the other members (or this one, upgraded) apply it: its
// answer is INDETERMINATE, which the client may retry, not GATE_HALTED,
// a definite failure the leader answered while the command took effect.
// Here the leader's own build cannot decode the fence advance to 7 (in a
// real cluster: the entry a newer leader wrote, followed by the commands
// this leader committed in the same batch before its Raft shut down).
func TestCommandCommittedAfterHaltIsIndeterminate(t *testing.T) {
	ctx := ctxT(t, time.Minute)
	olderDecode := func(b []byte) (Command, error) {
		c, err := DecodeCommand(b)
		if f, ok := c.(*AdvanceFence); ok && f.Value == 7 {
			return nil, errcode.New(errcode.BadDocument, "advanceFence command: a field this build does not know")
		}
		return c, err
	}
	c := MakeCluster(t, 1, func(cfg *Config) { cfg.decode = olderDecode })
	cl := c.Client()
	cl.RetryFor = time.Millisecond
	_, err := cl.AdvanceFence(ctx, FenceTombstone, 7)
	if errcode.Of(err) != errcode.Indeterminate || !IsIndeterminate(err) {
		t.Fatalf("a fence advance committed as the leader halted: %v, want INDETERMINATE", err)
	}
	waitFor(t, "the leader to halt", func() bool { return c.Nodes[0].Halted() != nil })

	// Upgraded, the member applies it: the command did take effect.
	c.Configs[0].decode = nil
	up := c.Restart(0)
	waitFor(t, "the upgraded member to apply the log", func() bool {
		var fs Fences
		up.FSM().Read(func(s *State) { fs = s.Fences })
		return fs.Tombstone == 7
	})
}

// Between its FSM's halt and watchHalt's shutdown of Raft, a node may
// still lead: it must neither answer a linearizable read from the state
// it stopped at (the entry it halted at may be a write another leader
// acknowledged) nor propose a command it would answer with its halt.
// Both are NOT_LEADER, which clients take to another member, and the
// log does not grow.
func TestHaltedLeaderNeitherReadsNorProposes(t *testing.T) {
	c := MakeCluster(t, 1)
	n := c.Leader(10 * time.Second)
	// The moment between the halt and the shutdown: the halt recorded,
	// watchHalt not yet told.
	n.fsm.mu.Lock()
	n.fsm.halted = &HaltError{Index: n.Raft().LastIndex() + 1, Err: errcode.New(errcode.BadDocument, "a newer build's command")}
	n.fsm.mu.Unlock()
	if !n.IsLeader() {
		t.Fatal("the node stopped leading")
	}
	if err := n.ReadConsistent(func(*State) {}); errcode.Of(err) != errcode.NotLeader {
		t.Fatalf("a linearizable read on a halted leader: %v, want NOT_LEADER", err)
	}
	last := n.Raft().LastIndex()
	if _, err := n.Apply(&AdvanceFence{Kind: FenceTombstone, Value: 3}); errcode.Of(err) != errcode.NotLeader {
		t.Fatalf("a command on a halted leader: %v, want NOT_LEADER", err)
	}
	if got := n.Raft().LastIndex(); got != last {
		t.Fatalf("the halted leader's log grew from %d to %d", last, got)
	}
}

// A member whose newest snapshot is a newer build's (an unknown field)
// does not start, on a plain start or with Recover, and says GATE_HALTED
// naming the snapshot, rather than an internal error or, restoring an
// older snapshot, a state behind the cluster's.
func TestStartHaltsAtUndecodableSnapshot(t *testing.T) {
	ctx := ctxT(t, time.Minute)
	cfg := TestConfig(t.TempDir(), "gate1")
	n := NewNode(cfg)
	if err := n.Start(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a leader", n.IsLeader)
	cl := NewClient(n.URL())
	defer cl.Close()
	for v := uint64(1); v <= 3; v++ {
		if _, err := cl.AdvanceFence(ctx, FenceTombstone, v); err != nil {
			t.Fatal(err)
		}
	}
	// A good snapshot first, older than the newer build's one.
	if err := n.Raft().Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	good, err := n.FSM().Encode()
	if err != nil {
		t.Fatal(err)
	}
	conf := n.Raft().GetConfiguration()
	if err := conf.Error(); err != nil {
		t.Fatal(err)
	}
	last := n.Raft().LastIndex()
	if err := n.Shutdown(); err != nil {
		t.Fatal(err)
	}
	snaps, err := raft.NewFileSnapshotStore(cfg.DataDir, 2, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	_, trans := raft.NewInmemTransport("")
	sink, err := snaps.Create(raft.SnapshotVersionMax, last, 2, conf.Configuration(), 1, trans)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sink.Write(bytes.Replace(good, []byte(`{`), []byte(`{"future":1,`), 1)); err != nil {
		t.Fatal(err)
	}
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}

	for _, recover := range []bool{false, true} {
		c := cfg
		c.Bootstrap, c.Recover = false, recover
		n := NewNode(c)
		err := n.Start(ctx)
		if err == nil {
			n.Shutdown()
		}
		var h *HaltError
		if errcode.Of(err) != errcode.GateHalted || !errors.As(err, &h) || !h.Snapshot {
			t.Fatalf("recover=%v: start on a newer build's snapshot: %v, want GATE_HALTED at a snapshot", recover, err)
		}
	}
}
