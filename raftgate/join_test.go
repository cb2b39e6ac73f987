package raftgate

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// A join whose outcome is unknown to the joiner (INDETERMINATE: the
// leader lost its leadership while committing it, as one on FastTiming's
// 100 ms lease did on a loaded machine when the new voter answered late,
// or the answer was lost) is asked again, and the node starts as a voter.
// Its start failed with INDETERMINATE, though asking again is safe. Here
// the first join's connection breaks after the request is sent, before
// (not applied) or after (applied) the leader handled it.
func TestJoinAskedAgainWhenIndeterminate(t *testing.T) {
	for _, applied := range []bool{false, true} {
		name := map[bool]string{false: "not applied", true: "applied"}[applied]
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			first := StartTestNode(t, TestConfig(dir, "node1"))
			waitLeader(t, first)
			var joins atomic.Int32
			via := breakFirst(t, first.HTTPAddr(), "/v1/join", applied, &joins)
			cfg := TestConfig(dir, "node2")
			cfg.Join, cfg.Bootstrap = via, false
			second := StartTestNode(t, cfg)
			if n := joins.Load(); n != 2 {
				t.Fatalf("%d joins asked, want the broken one and one more", n)
			}
			f := first.Raft().GetConfiguration()
			if err := f.Error(); err != nil {
				t.Fatal(err)
			}
			var voters []string
			for _, s := range f.Configuration().Servers {
				voters = append(voters, string(s.ID)+"@"+string(s.Address))
			}
			if len(voters) != 2 || voters[1] != "node2@"+second.RaftAddr() {
				t.Fatalf("voters %v, want node1 and node2@%s", voters, second.RaftAddr())
			}
		})
	}
}

// breakFirst returns the address of a proxy to target that breaks the
// connection of the first POST to path without answering: after passing
// it on and reading the answer when applied is set, before otherwise.
// posts counts the POSTs to path it saw.
func breakFirst(t *testing.T, target, path string, applied bool, posts *atomic.Int32) string {
	t.Helper()
	proxy := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: target})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != path || posts.Add(1) > 1 {
			proxy.ServeHTTP(w, r)
			return
		}
		if applied {
			rec := &lostAnswer{h: http.Header{}}
			proxy.ServeHTTP(rec, r)
			if rec.status != http.StatusOK {
				t.Errorf("the first POST %s, passed on: status %d", path, rec.status)
			}
		}
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			conn.Close()
		}
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// lostAnswer is a ResponseWriter that keeps only the status.
type lostAnswer struct {
	h      http.Header
	status int
}

func (a *lostAnswer) Header() http.Header { return a.h }
func (a *lostAnswer) Write(b []byte) (int, error) {
	if a.status == 0 {
		a.status = http.StatusOK
	}
	return len(b), nil
}
func (a *lostAnswer) WriteHeader(status int) { a.status = status }

// A joiner that gets the entry making it a nonvoter, committed, before
// the answer to its join names that entry takes it for its nonvoter entry
// once the answer arrives. It read the entry before, and passed it, since
// it could not tell it from an older configuration that listed its ID;
// the leader then found it caught up without its entry and made it a
// nonvoter a second time (a second configuration entry, and a second or
// more before the promotion). Here a proxy holds the leader's answer until
// the joiner committed the entry and its log watcher ran twice after.
func TestLearnerFindsItsNonvoterEntryCommittedBeforeTheAnswer(t *testing.T) {
	ctx := ctxT(t, time.Minute)
	dir := t.TempDir()
	first := StartTestNode(t, TestConfig(dir, "node1"))
	waitLeader(t, first)
	cfg := TestConfig(dir, "node2")
	cfg.Bootstrap = false
	second := NewNode(cfg)
	t.Cleanup(func() { second.Shutdown() })
	var held atomic.Bool
	startJoiningThroughHeldAnswer(t, ctx, first, second, func(j Join, index uint64) {
		// The joiner committed the entry, and its watcher ran a whole
		// pass after that: it saw the entry before the answer.
		jc := NewClient("http://" + j.HTTPAddr)
		defer jc.Close()
		for index > 0 {
			st, err := jc.Status(ctx)
			if err != nil {
				t.Errorf("the joiner's status: %v", err)
				break
			}
			if st.CommitIndex >= index {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		for p := second.learner.passes.Load() + 2; second.learner.passes.Load() < p && ctx.Err() == nil; {
			time.Sleep(10 * time.Millisecond)
		}
		held.Store(index > 0)
	})
	if !held.Load() {
		t.Fatal("the join's answer was not held: no nonvoter index in it")
	}
	WaitPromoted(t, second, 10*time.Second)

	// Along the leader's log: node2 a nonvoter once, then a voter.
	nonvoterOnceThenVoter(t, first, "node2")
}

// A joiner whose nonvoter entry its log no longer holds when the answer to
// its join arrives (compacted into a snapshot meanwhile) takes the newest
// snapshot's configuration, which lists it as a nonvoter, for its
// nonvoter entry. Here a proxy holds the leader's answer until node2
// committed the entry, the leader appended more, node2 took a snapshot
// that compacted the entry away, and its log watcher ran twice after
// (it read the snapshot's configuration before the answer named the
// entry). The leader's periodic look is an hour apart: only the watch
// after the join promotes, which makes no learner a nonvoter again.
// Before, node2 found no nonvoter entry and was never promoted.
func TestLearnerFindsItsNonvoterEntryCompactedBeforeTheAnswer(t *testing.T) {
	ctx := ctxT(t, time.Minute)
	dir := t.TempDir()
	cfg1 := TestConfig(dir, "node1")
	cfg1.promoteInterval = time.Hour
	first := StartTestNode(t, cfg1)
	waitLeader(t, first)
	cfg := TestConfig(dir, "node2")
	cfg.Bootstrap, cfg.SnapshotThreshold = false, 8
	second := NewNode(cfg)
	t.Cleanup(func() { second.Shutdown() })
	var held atomic.Bool
	startJoiningThroughHeldAnswer(t, ctx, first, second, func(_ Join, index uint64) {
		if index == 0 {
			return
		}
		for i := 0; i < 32; i++ {
			if _, err := first.Apply(&Prune{OlderThanMs: 1 << 40}); err != nil {
				t.Errorf("prune: %v", err)
				return
			}
		}
		last := first.Raft().LastIndex()
		for second.Raft().AppliedIndex() < last && ctx.Err() == nil {
			time.Sleep(10 * time.Millisecond)
		}
		if err := second.Raft().Snapshot().Error(); err != nil {
			t.Errorf("node2's snapshot: %v", err)
			return
		}
		if fi, _ := second.store.FirstIndex(); fi <= index {
			t.Errorf("node2's log starts at %d, not past its nonvoter entry at %d", fi, index)
			return
		}
		for p := second.learner.passes.Load() + 2; second.learner.passes.Load() < p && ctx.Err() == nil; {
			time.Sleep(10 * time.Millisecond)
		}
		held.Store(true)
	})
	if !held.Load() {
		t.Fatal("the join's answer was not held until node2 compacted its nonvoter entry")
	}
	WaitPromoted(t, second, 10*time.Second)
	// Along the leader's log: node2 a nonvoter once, then a voter.
	nonvoterOnceThenVoter(t, first, "node2")
}

// startJoiningThroughHeldAnswer starts joiner, a node made but not
// started, joining leader through a proxy that passes every request on
// and holds the leader's answer to the join until hold, given the join
// and the nonvoter index the answer names (0: none), returns. The proxy
// serves until the test ends.
func startJoiningThroughHeldAnswer(t *testing.T, ctx context.Context, leader, joiner *Node, hold func(j Join, index uint64)) {
	t.Helper()
	target, _ := url.Parse(leader.URL())
	rp := httputil.NewSingleHostReverseProxy(target)
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/join" {
			rp.ServeHTTP(w, r)
			return
		}
		b, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(b))
		var j Join
		if err := json.Unmarshal(b, &j); err != nil {
			t.Errorf("join body: %v", err)
		}
		rec := httptest.NewRecorder()
		rp.ServeHTTP(rec, r)
		index, _ := strconv.ParseUint(rec.Header().Get(nonvoterIndexHeader), 10, 64)
		hold(j, index)
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		w.Write(rec.Body.Bytes())
	}))
	t.Cleanup(proxy.Close)
	joiner.cfg.Join = proxy.Listener.Addr().String()
	if err := joiner.Start(ctx); err != nil {
		t.Fatalf("start: %v", err)
	}
}

// A learner is promoted once it caught up, by the leader that added it,
// which watches for that after the join; it waited for the leader's
// periodic look for learners, a second later (and one more for each
// learner that joined at once). Here that look never comes (an hour
// apart): the joiners are promoted all the same, one after the other.
func TestJoinerPromotedOnceCaughtUp(t *testing.T) {
	dir := t.TempDir()
	hour := func(cfg *Config) { cfg.promoteInterval = time.Hour }
	cfg := TestConfig(dir, "node1")
	hour(&cfg)
	first := StartTestNode(t, cfg)
	waitLeader(t, first)
	for _, id := range []string{"node2", "node3"} {
		cfg := TestConfig(dir, id)
		cfg.Join, cfg.Bootstrap = first.HTTPAddr(), false
		hour(&cfg)
		StartTestNode(t, cfg) // returns once the node votes (WaitPromoted)
	}
	vs := first.voters()
	for _, v := range vs {
		if len(vs) != 3 || v.Suffrage != raft.Voter.String() {
			t.Fatalf("the leader's configuration: %+v", vs)
		}
	}
}

// A learner's /v1/status reads its log up to the commit index it reports
// first, so the leader never finds it caught up, with its nonvoter entry
// committed, and without the entry noted: it took such a learner for one
// that got the entry in a snapshot, and made it a nonvoter again (an entry
// more, and its promotion a look later), when the learner's own pass
// over its log, 50 ms apart, had not come yet. Here that pass never comes
// (an hour apart): the learner is promoted after one nonvoter entry.
func TestLearnerStatusReadsItsLogFirst(t *testing.T) {
	ctx := ctxT(t, time.Minute)
	dir := t.TempDir()
	first := StartTestNode(t, TestConfig(dir, "node1"))
	waitLeader(t, first)
	cfg := TestConfig(dir, "node2")
	cfg.Join, cfg.Bootstrap = first.HTTPAddr(), false
	cfg.learnerScanInterval = time.Hour
	second := NewNode(cfg)
	t.Cleanup(func() { second.Shutdown() })
	if err := second.Start(ctx); err != nil {
		t.Fatal(err)
	}
	// The leader's configuration makes node2 a voter; then node2 finds
	// that in a status of its own too.
	sc := NewClient(second.URL())
	defer sc.Close()
	waitFor(t, "node2 to vote", func() bool {
		st, err := sc.Status(ctx)
		return err == nil && st.Learner == nil
	})
	nonvoterOnceThenVoter(t, first, "node2")
}

// nonvoterOnceThenVoter fails t unless leader's log holds exactly two
// configuration entries that list id: a nonvoter, then a voter.
func nonvoterOnceThenVoter(t *testing.T, leader *Node, id string) {
	t.Helper()
	seq := suffrageAlong(leader, id)
	if len(seq) != 2 || seq[0] != raft.Nonvoter || seq[1] != raft.Voter {
		t.Fatalf("%s's suffrage in the leader's configuration entries: %v, want one nonvoter entry, then a voter", id, seq)
	}
}

// suffrageAlong is id's suffrage in each configuration entry of n's log
// that lists it, in log order.
func suffrageAlong(n *Node, id string) []raft.ServerSuffrage {
	var seq []raft.ServerSuffrage
	firstIndex, _ := n.store.FirstIndex()
	lastIndex, _ := n.store.LastIndex()
	for i := firstIndex; i <= lastIndex; i++ {
		var l raft.Log
		if err := n.store.GetLog(i, &l); err != nil || l.Type != raft.LogConfiguration {
			continue
		}
		for _, sv := range raft.DecodeConfiguration(l.Data).Servers {
			if sv.ID == raft.ServerID(id) {
				seq = append(seq, sv.Suffrage)
			}
		}
	}
	return seq
}
