package raftgate

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
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
	c, old, index := haltOldMember(t, ctx)
	cl := c.Client()
	// The others go on without it.
	if _, err := cl.AdvanceFence(ctx, FenceTombstone, 6); err != nil {
		t.Fatalf("a command after the halt: %v", err)
	}
	waitApplied(t, c.Nodes[:2])
	for _, n := range c.Nodes[:2] {
		fs := fencesOf(n)
		if fs.Tombstone != 6 {
			t.Fatalf("%s: tombstone %d, want 6", n.ID(), fs.Tombstone)
		}
	}
	waitFor(t, "the old member's Raft to shut down", func() bool { return old.Raft().State().String() == "Shutdown" })
	fs := fencesOf(old)
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
	fs = fencesOf(up)
	if fs.Tombstone != 6 || up.Halted() != nil {
		t.Fatalf("the upgraded member: tombstone %d, halted %v; want 6 and running", fs.Tombstone, up.Halted())
	}
}

// haltOldMember makes a cluster of three whose third member is an older
// build than the others, has it apply a fence advance to 1, then has the
// leader commit a newer build's command (a fence advance to 5 with a field
// the old member does not know), at index, where the old member halts.
func haltOldMember(t *testing.T, ctx context.Context) (c *TestCluster, old *Node, index uint64) {
	t.Helper()
	c = MakeCluster(t, 3, func(cfg *Config) {
		if cfg.ID != "node3" {
			cfg.decode = newerDecode
		}
	})
	old = c.Nodes[2]
	cl := c.Client()
	defer cl.Close()
	if _, err := cl.AdvanceFence(ctx, FenceTombstone, 1); err != nil {
		t.Fatal(err)
	}
	waitApplied(t, c.Nodes)

	raw := []byte(fmt.Sprintf(`{"type":"advanceFence","now":%d,"kind":"tombstone","value":5,"spareChecked":true,"future":"x"}`, time.Now().UnixMilli()))
	f := c.Leader(10*time.Second).Raft().Apply(raw, 5*time.Second)
	if err := f.Error(); err != nil {
		t.Fatal(err)
	}
	index = f.Index()
	waitFor(t, "the old member to halt", func() bool { return old.Halted() != nil })
	if h := old.Halted(); h.Index != index || errcode.Of(h) != errcode.GateHalted {
		t.Fatalf("halt: %v at index %d, want GATE_HALTED at %d", h, h.Index, index)
	}
	return c, old, index
}

// A halted member answered every API request but its probes as if it
// were healthy: it forwarded them to the leader it still knew until its
// Raft was down, then answered NOT_LEADER, which clients retry with
// backoff. It answers GATE_HALTED at once now, naming the entry and what
// to do, and serves /v1/status and /metrics; a client that lists it first
// skips it, without retrying it, and its write and read reach the others;
// a client that lists only halted members gets GATE_HALTED rather than
// retrying for RetryFor.
func TestHaltedMemberServesNoClient(t *testing.T) {
	ctx := ctxT(t, time.Minute)
	c, old, index := haltOldMember(t, ctx)
	waitFor(t, "the old member's Raft to shut down", func() bool { return old.Raft().State() == raft.Shutdown })

	cmd, err := EncodeCommand(&AdvanceFence{Kind: FenceTombstone, Value: 9})
	if err != nil {
		t.Fatal(err)
	}
	for _, req := range []struct {
		method, path string
		body         []byte
	}{
		{http.MethodPost, "/v1/commands", cmd},
		{http.MethodPost, "/v1/remove", []byte(`{"id":"node1"}`)},
		{http.MethodPost, "/v1/record", []byte(`{"type":"join","id":"node3","raftAddr":"127.0.0.1:1","httpAddr":"127.0.0.1:2"}`)},
		{http.MethodGet, "/v1/fences", nil},
		{http.MethodGet, "/v1/state", nil},
		{http.MethodGet, "/v1/runs/r/wait?timeout=300000", nil},
		{http.MethodGet, "/readyz", nil},
	} {
		status, code, b := rawRequest(t, ctx, req.method, old.URL()+req.path, req.body)
		if status != http.StatusServiceUnavailable || code != errcode.GateHalted {
			t.Fatalf("%s %s on the halted member: HTTP %d %s %s, want 503 GATE_HALTED", req.method, req.path, status, code, b)
		}
		for _, want := range []string{fmt.Sprintf("at entry %d", index), "upgrade it", "restart it on its data directory"} {
			if !bytes.Contains(b, []byte(want)) {
				t.Fatalf("%s %s on the halted member: %s, want it to say %q", req.method, req.path, b, want)
			}
		}
	}
	if status, _, b := rawRequest(t, ctx, http.MethodGet, old.URL()+"/v1/status", nil); status != http.StatusOK || !bytes.Contains(b, []byte(`"halted"`)) {
		t.Fatalf("/v1/status of the halted member: HTTP %d %s", status, b)
	}

	var urls []string
	for _, n := range c.Nodes {
		urls = append(urls, n.URL())
	}
	// The halted member first, and a RetryFor no test waits out: a
	// client that retried it would fail with the test's context.
	slices.Reverse(urls)
	cl := NewClient(strings.Join(urls, ","))
	defer cl.Close()
	cl.RetryFor = time.Hour
	if _, err := cl.AdvanceFence(ctx, FenceTombstone, 9); err != nil {
		t.Fatalf("a fence advance through a client that lists the halted member first: %v", err)
	}
	f, err := cl.Fences(ctx)
	if err != nil || f.Tombstone != 9 {
		t.Fatalf("fences read through that client: %+v, %v; want tombstone 9", f, err)
	}
	fs := fencesOf(old)
	if fs.Tombstone != 1 {
		t.Fatalf("the halted member's tombstone fence: %d, want 1", fs.Tombstone)
	}
	if v := metricValue(t, old, "shardproof_gate_forwarded_total"); v != "0" {
		t.Fatalf("requests the halted member forwarded: %s, want 0", v)
	}

	only := NewClient(old.URL())
	defer only.Close()
	only.RetryFor = time.Hour
	if _, err := only.AdvanceFence(ctx, FenceTombstone, 10); errcode.Of(err) != errcode.GateHalted {
		t.Fatalf("a fence advance through the halted member alone: %v, want GATE_HALTED", err)
	}
	if _, err := only.Fences(ctx); errcode.Of(err) != errcode.GateHalted {
		t.Fatalf("a read through the halted member alone: %v, want GATE_HALTED", err)
	}
}

// Between its FSM's halt and the shutdown of its Raft, a halted follower
// still knows the leader: it forwarded a client's write there, holding it
// in flight as a healthy member would. It forwards nothing now; the
// client takes the write to the next member.
func TestHaltedFollowerForwardsNothing(t *testing.T) {
	ctx := ctxT(t, time.Minute)
	c := MakeCluster(t, 3)
	leader := c.Leader(10 * time.Second)
	var f *Node
	var urls []string
	for _, n := range c.Nodes {
		if n != leader && f == nil {
			f = n
			continue
		}
		urls = append(urls, n.URL())
	}
	waitFor(t, "the follower to know the leader's HTTP address", func() bool { return f.leaderHTTP() == leader.HTTPAddr() })
	// The moment between the halt and the shutdown: the halt recorded,
	// watchHalt not yet told.
	f.fsm.mu.Lock()
	f.fsm.halted = &HaltError{Index: f.Raft().LastIndex() + 1, Err: errcode.New(errcode.BadDocument, "a newer build's command")}
	f.fsm.mu.Unlock()

	cmd, err := EncodeCommand(&AdvanceFence{Kind: FenceTombstone, Value: 4})
	if err != nil {
		t.Fatal(err)
	}
	if status, code, b := rawRequest(t, ctx, http.MethodPost, f.URL()+"/v1/commands", cmd); status != http.StatusServiceUnavailable || code != errcode.GateHalted {
		t.Fatalf("a command sent to the halted follower: HTTP %d %s %s, want 503 GATE_HALTED", status, code, b)
	}
	cl := NewClient(strings.Join(append([]string{f.URL()}, urls...), ","))
	defer cl.Close()
	cl.RetryFor = time.Hour
	if _, err := cl.AdvanceFence(ctx, FenceTombstone, 5); err != nil {
		t.Fatalf("a fence advance through a client that lists the halted follower first: %v", err)
	}
	fs := fencesOf(leader)
	if fs.Tombstone != 5 {
		t.Fatalf("the leader's tombstone fence: %d, want 5", fs.Tombstone)
	}
	if v := metricValue(t, f, "shardproof_gate_forwarded_total"); v != "0" {
		t.Fatalf("requests the halted follower forwarded: %s, want 0", v)
	}
}

// A long-poll on a leader that halts while it waits answers GATE_HALTED
// at the halt, which the client takes to another member, instead of
// waiting out its timeout on a state that no longer moves and answering
// from it.
func TestLongPollEndsAtHalt(t *testing.T) {
	ctx := ctxT(t, time.Minute)
	c := MakeCluster(t, 1)
	n := c.Nodes[0]
	cl := c.Client()
	runOfOneRank(t, ctx, cl, 300_000)
	// A wait longer than the test's context: only the halt ends it.
	done := longPoll(ctx, n.URL()+"/v1/runs/r/wait?timeout=300000")
	// A command committed while the poll waits, then a newer build's, at
	// which the node halts.
	registerVerified(t, ctx, cl, "other", 2, 0, 0)
	raw := []byte(fmt.Sprintf(`{"type":"advanceFence","now":%d,"kind":"tombstone","value":5,"spareChecked":true,"future":"x"}`, time.Now().UnixMilli()))
	if err := n.Raft().Apply(raw, 5*time.Second).Error(); err != nil {
		t.Fatal(err)
	}
	// GATE_HALTED; NOT_LEADER naming the halt if the poll's first,
	// linearizable read met it (ReadConsistent); either way at once, and
	// clients take both to another member.
	a := <-done
	if code := a.body.Error.Code; a.err != nil || a.status != http.StatusServiceUnavailable ||
		code != errcode.GateHalted && !(code == errcode.NotLeader && strings.Contains(a.body.Error.Message, "halted at entry")) {
		t.Fatalf("a long-poll on a leader that halted: HTTP %d %+v (%v), want 503 GATE_HALTED", a.status, a.body.Error, a.err)
	}
}

// pollAnswer is the answer to a long-poll: its HTTP status and error
// body, or the error that kept it from them.
type pollAnswer struct {
	status int
	body   ErrorBody
	err    error
}

// longPoll sends GET url, a long-poll, in a goroutine of its own; its
// answer arrives on the channel it returns.
func longPoll(ctx context.Context, url string) <-chan pollAnswer {
	answered := make(chan pollAnswer, 1)
	go func() {
		var a pollAnswer
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := http.DefaultClient.Do(req)
		if a.err = err; err == nil {
			a.status = resp.StatusCode
			a.err = json.NewDecoder(resp.Body).Decode(&a.body)
			resp.Body.Close()
		}
		answered <- a
	}()
	return answered
}

// rawGet gets url and returns the HTTP status and the error code.
func rawGet(t *testing.T, url string) (int, errcode.Code) {
	t.Helper()
	resp, err := http.Get(url)
	return answerCode(t, resp, err)
}

// answerCode returns the HTTP status and the error code of resp, the
// answer to a request; err, when not nil, is why there is none.
func answerCode(t *testing.T, resp *http.Response, err error) (int, errcode.Code) {
	t.Helper()
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
		return fencesOf(up).Tombstone == 7
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
	stopOnSnapshot(t, n, bytes.Replace(good, []byte(`{`), []byte(`{"future":1,`), 1))

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

// stopOnSnapshot shuts n down and writes state to its data directory as
// its newest snapshot, at the last index of its log and with its Raft
// configuration, as a snapshot it took would be: its next start restores
// state.
func stopOnSnapshot(t *testing.T, n *Node, state []byte) {
	t.Helper()
	conf := n.Raft().GetConfiguration()
	if err := conf.Error(); err != nil {
		t.Fatal(err)
	}
	last := n.Raft().LastIndex()
	if err := n.Shutdown(); err != nil {
		t.Fatal(err)
	}
	snaps, err := raft.NewFileSnapshotStore(n.cfg.DataDir, 2, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	_, trans := raft.NewInmemTransport("")
	sink, err := snaps.Create(raft.SnapshotVersionMax, last, 2, conf.Configuration(), 1, trans)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sink.Write(state); err != nil {
		t.Fatal(err)
	}
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}
}

// A leader that halts is still the leader to the followers until its Raft
// is down (watchHalt) and they elect another: they forward requests to it
// meanwhile and pass its answer on as theirs. It answered them
// GATE_HALTED, so a client took each follower that passed it on for a
// halted member, and one that lists the followers failed GATE_HALTED at
// once ("every member halted") where they were about to elect a leader;
// a long-poll forwarded to it ended the same way. To a forwarded request
// it answers NOT_LEADER now, naming the halt, which the client retries
// with backoff until a leader serves.
func TestHaltedLeaderAnswersForwardersNotLeader(t *testing.T) {
	ctx := ctxT(t, time.Minute)
	c := MakeCluster(t, 3)
	cl := c.Client()
	defer cl.Close()
	runOfOneRank(t, ctx, cl, 300_000)
	leader := c.Leader(10 * time.Second)
	var followers []*Node
	var urls []string
	for _, n := range c.Nodes {
		if n != leader {
			followers = append(followers, n)
			urls = append(urls, n.URL())
			waitFor(t, "a follower to know the leader's HTTP address", func() bool { return n.leaderHTTP() == leader.HTTPAddr() })
		}
	}
	forwarded := func() int {
		sum := 0
		for _, f := range followers {
			v, _ := strconv.Atoi(metricValue(t, f, "shardproof_gate_forwarded_total"))
			sum += v
		}
		return sum
	}

	polled := longPoll(ctx, followers[1].URL()+"/v1/runs/r/wait?timeout=300000")
	waitFor(t, "the follower to forward the long-poll", func() bool { return forwarded() >= 1 })

	// The leader's FSM halts; watchHalt is not told yet, so its Raft
	// leads on and the followers still forward to it.
	leader.fsm.mu.Lock()
	leader.fsm.halted = &HaltError{Index: leader.Raft().LastIndex() + 1, Err: errcode.New(errcode.BadDocument, "a newer build's command")}
	leader.fsm.mu.Unlock()

	cmd, err := EncodeCommand(&AdvanceFence{Kind: FenceTombstone, Value: 4})
	if err != nil {
		t.Fatal(err)
	}
	if status, code, b := rawRequest(t, ctx, http.MethodPost, followers[0].URL()+"/v1/commands", cmd); status != http.StatusServiceUnavailable || code != errcode.NotLeader {
		t.Fatalf("a command forwarded to the halted leader: HTTP %d %s %s, want 503 NOT_LEADER", status, code, b)
	}
	if status, code, b := rawRequest(t, ctx, http.MethodGet, followers[0].URL()+"/v1/fences", nil); status != http.StatusServiceUnavailable || code != errcode.NotLeader {
		t.Fatalf("a read forwarded to the halted leader: HTTP %d %s %s, want 503 NOT_LEADER", status, code, b)
	}

	fc := NewClient(strings.Join(urls, ","))
	defer fc.Close()
	fc.RetryFor = time.Hour
	done := make(chan error, 1)
	base := forwarded()
	go func() {
		_, err := fc.AdvanceFence(ctx, FenceTombstone, 5)
		done <- err
	}()
	var early error
	waitFor(t, "the client to ask both followers", func() bool {
		select {
		case early = <-done:
			return true
		default:
			return forwarded() >= base+3
		}
	})
	if early != nil {
		t.Fatalf("a fence advance through the followers while the leader is halted ended: %v, want it retried until a leader serves", early)
	}

	// The halt as it happens: watchHalt shuts the leader's Raft down, and
	// the followers elect one of them.
	leader.fsm.mu.Lock()
	close(leader.fsm.haltCh)
	leader.fsm.mu.Unlock()
	a := <-polled
	if a.err != nil || a.status != http.StatusServiceUnavailable || a.body.Error.Code != errcode.NotLeader {
		t.Fatalf("a long-poll forwarded to a leader that halted: HTTP %d %+v (%v), want 503 NOT_LEADER", a.status, a.body.Error, a.err)
	}
	if err := <-done; err != nil {
		t.Fatalf("a fence advance through the followers once they elected a leader: %v", err)
	}
	fs := fencesOf(c.Leader(10 * time.Second))
	if fs.Tombstone != 5 {
		t.Fatalf("the new leader's tombstone fence: %d, want 5", fs.Tombstone)
	}
}
