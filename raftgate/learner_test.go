package raftgate

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/shardproof/shardproof/internal/errcode"
)

// A member whose directory was lost and that rejoins under its old ID
// (README's "Replacing a dead member") is a learner until it caught up: it
// grants no vote and no pre-vote, even for a term above its own, so it
// cannot vote a second time in a term its lost directory had voted in, nor
// for a candidate whose log lacks what its old acknowledgements committed.
// Before, it started with term 0 and an empty configuration and granted the
// first vote it was asked for. The leader demotes the old voter to a
// nonvoter (the cluster keeps its quorum and takes writes meanwhile),
// promotes it once it caught up, and then it votes: the cluster survives
// the loss of another member with it.
func TestReplacedMemberRejoinsAsLearner(t *testing.T) {
	ctx := ctxT(t, 90*time.Second)
	c := MakeCluster(t, 3)
	cl := c.Client()
	registerVerified(t, ctx, cl, "before", 2, 0, 0)
	leader := c.Leader(10 * time.Second)
	var victim, other int = -1, -1
	for i, n := range c.Nodes {
		switch {
		case n == leader:
		case victim < 0:
			victim = i
		default:
			other = i
		}
	}
	c.Stop(victim)
	if err := os.RemoveAll(c.Configs[victim].DataDir); err != nil {
		t.Fatal(err)
	}

	// The join goes through a proxy to the leader that holds it until
	// released: the replacement's Raft serves meanwhile.
	arrived, release := make(chan struct{}), make(chan struct{})
	target, _ := url.Parse(leader.URL())
	rp := httputil.NewSingleHostReverseProxy(target)
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/join" {
			select {
			case arrived <- struct{}{}:
			default:
			}
			<-release
		}
		rp.ServeHTTP(w, r)
	}))
	defer proxy.Close()
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	cfg := c.Configs[victim]
	cfg.Join = proxy.Listener.Addr().String()
	n := NewNode(cfg)
	t.Cleanup(func() { n.Shutdown() })
	started := make(chan error, 1)
	go func() { started <- n.Start(ctx) }()
	select {
	case <-arrived:
	case err := <-started:
		t.Fatalf("start returned before its join was answered: %v", err)
	case <-ctx.Done():
		t.Fatal("no join")
	}

	// A candidate of a term above every member's, with a log longer than
	// any, asks the replacement for its vote and its pre-vote. The
	// replacement learnt the cluster's identity before it asked to join:
	// a connection without it is refused at its handshake, before the
	// vote gate or Raft read a byte; one with it, as a member's, reaches
	// the vote gate, which refuses the vote.
	if id := leader.ClusterID(); id == "" || n.ClusterID() != id {
		t.Fatalf("the replacement's cluster ID %q, the leader's %q", n.ClusterID(), id)
	}
	cand := c.Nodes[other]
	term := leader.Raft().CurrentTerm() + 5
	hdr := raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte(cand.ID()), Addr: []byte(cand.RaftAddr())}
	raw, err := raft.NewTCPTransport("127.0.0.1:0", nil, 1, 5*time.Second, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	var rawVote raft.RequestVoteResponse
	if err := raw.RequestVote(raft.ServerID(n.ID()), raft.ServerAddress(cfg.RaftAddr), &raft.RequestVoteRequest{
		RPCHeader: hdr, Term: term, LastLogIndex: 1 << 40, LastLogTerm: term - 1, LeadershipTransfer: true,
	}, &rawVote); err == nil || rawVote.Granted || refusedConns(t, n, errcode.ClusterIDMismatch) == 0 {
		t.Fatalf("a vote request without the cluster identity: %v, granted %v, %d refusals counted; want it refused at the handshake", err, rawVote.Granted, refusedConns(t, n, errcode.ClusterIDMismatch))
	}
	s, err := listenTCPStream("127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	trans := raft.NewNetworkTransport(identityStream(s, leader.ClusterID()), 1, 5*time.Second, io.Discard)
	defer trans.Close()
	var vote raft.RequestVoteResponse
	if err := trans.RequestVote(raft.ServerID(n.ID()), raft.ServerAddress(cfg.RaftAddr), &raft.RequestVoteRequest{
		RPCHeader: hdr, Term: term, LastLogIndex: 1 << 40, LastLogTerm: term - 1, LeadershipTransfer: true,
	}, &vote); err != nil {
		t.Fatalf("request vote: %v", err)
	}
	var pre raft.RequestPreVoteResponse
	if err := trans.RequestPreVote(raft.ServerID(n.ID()), raft.ServerAddress(cfg.RaftAddr), &raft.RequestPreVoteRequest{
		RPCHeader: hdr, Term: term, LastLogIndex: 1 << 40, LastLogTerm: term - 1,
	}, &pre); err != nil {
		t.Fatalf("request pre-vote: %v", err)
	}
	if vote.Granted || pre.Granted || n.Raft().CurrentTerm() >= term {
		t.Fatalf("the replacement of %s on an empty directory granted vote %v, pre-vote %v, and is at term %d (asked for term %d): it may vote twice in a term", n.ID(), vote.Granted, pre.Granted, n.Raft().CurrentTerm(), term)
	}
	// The cluster takes writes while the replacement waits.
	registerVerified(t, ctx, cl, "during", 2, 0, 0)

	close(release)
	if err := <-started; err != nil {
		t.Fatalf("start: %v", err)
	}
	WaitPromoted(t, n, 10*time.Second)
	c.Nodes[victim] = n

	// The leader's log: the old voter became a nonvoter, then a voter.
	leader = c.Leader(10 * time.Second)
	seq := slices.Compact(suffrageAlong(leader, n.ID()))
	if len(seq) < 3 || seq[len(seq)-3] != raft.Voter || seq[len(seq)-2] != raft.Nonvoter || seq[len(seq)-1] != raft.Voter {
		t.Fatalf("%s's suffrage along the leader's log: %v, want voter, nonvoter, voter", n.ID(), seq)
	}
	if _, err := os.Stat(cfg.DataDir + "/" + learnerFile); !os.IsNotExist(err) {
		t.Fatalf("learner marker after the promotion: %v", err)
	}

	// Promoted, it counts: the third member stops, and the leader and the
	// replacement are 2 of 3.
	c.Stop(other)
	cl2 := NewClient(leader.URL() + "," + n.URL())
	defer cl2.Close()
	registerVerified(t, ctx, cl2, "after", 2, 0, 0)
}

// cutStream is a Raft stream layer whose links can be cut: while cut, it
// dials nothing, hangs up on what it accepts, and its open connections
// fail, so its member neither reaches the others nor is reached.
type cutStream struct {
	raft.StreamLayer
	cut  atomic.Bool
	mu   sync.Mutex
	open []net.Conn
}

func (s *cutStream) track(c net.Conn) net.Conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.open = append(s.open, c)
	return c
}

func (s *cutStream) Accept() (net.Conn, error) {
	for {
		c, err := s.StreamLayer.Accept()
		if err != nil || !s.cut.Load() {
			if err == nil {
				c = s.track(c)
			}
			return c, err
		}
		c.Close()
	}
}

func (s *cutStream) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	if s.cut.Load() {
		return nil, errors.New("link cut")
	}
	c, err := s.StreamLayer.Dial(address, timeout)
	if err != nil {
		return nil, err
	}
	return s.track(c), nil
}

// setCut cuts the links (closing those open) or heals them.
func (s *cutStream) setCut(on bool) {
	s.cut.Store(on)
	if !on {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.open {
		c.Close()
	}
	s.open = nil
}

// A learner whose promotion reaches it only in a snapshot votes once it
// installed the snapshot: node3, a learner that found its nonvoter entry,
// is cut off from the others' Raft (its API still answers), the leader
// promotes it, and compacts its log past the promotion; healed, node3
// gets the snapshot, whose configuration makes it a voter. Before, it
// looked for its promotion in its log's entries only, and stayed a voter
// that refused every vote for good: the leader promotes only nonvoters.
func TestLearnerPromotedInASnapshotVotes(t *testing.T) {
	c := MakeCluster(t, 2, func(cfg *Config) { cfg.SnapshotThreshold = 16 })
	for _, n := range c.Nodes {
		n.promoting.Store(true) // no promotion until the test says so
	}
	cfg := TestConfig(t.TempDir(), "node3")
	cfg.SnapshotThreshold, cfg.Bootstrap, cfg.Join = 16, false, c.Nodes[0].HTTPAddr()
	cs := &cutStream{}
	cfg.WrapStream = func(s raft.StreamLayer) raft.StreamLayer { cs.StreamLayer = s; return cs }
	n3 := NewNode(cfg)
	if err := n3.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n3.Shutdown() })
	waitFor(t, "node3 to find its nonvoter entry and catch up", func() bool {
		l := n3.learner.status()
		return l != nil && l.NonvoterAt > 0 && n3.Raft().LastIndex() >= c.Leader(10*time.Second).Raft().CommitIndex()
	})
	cs.setCut(true)
	for _, n := range c.Nodes {
		n.promoting.Store(false)
	}
	var promotedAt uint64
	waitFor(t, "the leader to promote node3", func() bool {
		l := c.Leader(10 * time.Second)
		for _, v := range l.voters() {
			if v.ID == "node3" && v.Suffrage == "Voter" {
				promotedAt = l.Raft().LastIndex()
				return true
			}
		}
		return false
	})
	// Entries past the promotion, and a snapshot on both members that
	// compacts it away (an apply that lost its leader is retried: a
	// prune of nothing changes nothing).
	for i := 0; i < 64; {
		_, err := c.Leader(10 * time.Second).Apply(&Prune{OlderThanMs: 1 << 40})
		switch errcode.Of(err) {
		case "":
			i++
		case errcode.NotLeader, errcode.Indeterminate:
		default:
			t.Fatal(err)
		}
	}
	for _, n := range c.Nodes {
		if err := n.Raft().Snapshot().Error(); err != nil {
			t.Fatal(err)
		}
		if first, _ := n.store.FirstIndex(); first <= promotedAt {
			t.Fatalf("%s's log starts at %d, not past the promotion at or before %d", n.ID(), first, promotedAt)
		}
	}
	if l := n3.learner.status(); l == nil {
		t.Fatal("node3 found its promotion while cut off")
	}
	cs.setCut(false)
	waitFor(t, "node3 to install the leader's snapshot", func() bool { return n3.Raft().CommitIndex() >= promotedAt })
	WaitPromoted(t, n3, 10*time.Second)
	if _, err := os.Stat(filepath.Join(cfg.DataDir, learnerFile)); !os.IsNotExist(err) {
		t.Fatalf("learner marker after the promotion: %v", err)
	}
}

// A joiner whose join a follower of a build before learners forwards
// (which passes on no X-Shardproof-Nonvoter-Index) is a learner all the
// same: the answer's body, which every follower passes on as it is, names
// the nonvoter entry too. Before, the joiner took the missing header for a
// leader of a build before learners, dropped its marker at once and
// granted votes as a nonvoter at term 0, the double vote learners exist to
// prevent; and the leader promoted it without its nonvoter entry.
func TestLearnerJoinedThroughAFollowerBeforeLearners(t *testing.T) {
	c := MakeCluster(t, 2)
	for _, n := range c.Nodes {
		n.promoting.Store(true) // the joiner stays a learner meanwhile
	}
	leader := c.Leader(10 * time.Second)
	target, _ := url.Parse(leader.URL())
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.ModifyResponse = func(r *http.Response) error {
		r.Header.Del(nonvoterIndexHeader) // what an older follower's forward passes on
		return nil
	}
	old := httptest.NewServer(rp)
	defer old.Close()
	cfg := TestConfig(t.TempDir(), "node3")
	cfg.Bootstrap, cfg.Join = false, old.Listener.Addr().String()
	n3 := NewNode(cfg)
	if err := n3.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n3.Shutdown() })
	l := n3.learner.status()
	if l == nil || l.Since == 0 {
		t.Fatalf("node3 joined through a follower before learners: learner status %+v, want a learner that knows its nonvoter entry", l)
	}
	if _, err := os.Stat(filepath.Join(cfg.DataDir, learnerFile)); err != nil {
		t.Fatalf("learner marker: %v", err)
	}
	for _, n := range c.Nodes {
		n.promoting.Store(false)
	}
	WaitPromoted(t, n3, 10*time.Second)
}

// heldTerm is a stable store whose term writes, once armed, wait for the
// test to let them go, and record what the store answered.
type heldTerm struct {
	raft.StableStore
	armed   atomic.Bool
	entered chan struct{}
	let     chan struct{}
	err     chan error
}

func (h *heldTerm) SetUint64(key []byte, v uint64) error {
	if string(key) != "CurrentTerm" || !h.armed.CompareAndSwap(true, false) {
		return h.StableStore.SetUint64(key, v)
	}
	close(h.entered)
	<-h.let
	err := h.StableStore.SetUint64(key, v)
	h.err <- err
	// What raft panics at ("failed to save current term"), reported by
	// the test instead.
	return nil
}

// Shutdown closes the store only once the heartbeats Raft handles on the
// transport's goroutines are done: a heartbeat of a higher term, whose
// term write is held, is still in flight when Raft and the transport are
// shut down, and its write, let go then, finds the store open. Before,
// Shutdown closed the store under it, and raft panicked: "failed to save
// current term: database not open".
func TestShutdownWaitsForAHeartbeatInFlight(t *testing.T) {
	h := &heldTerm{entered: make(chan struct{}), let: make(chan struct{}), err: make(chan error, 1)}
	cfg := TestConfig(t.TempDir(), "node1")
	cfg.wrapStable = func(s raft.StableStore) raft.StableStore { h.StableStore = s; return h }
	n := StartTestNode(t, cfg)
	c := &TestCluster{t: t, Nodes: []*Node{n}}
	c.Leader(10 * time.Second)
	// The heartbeat carries the cluster's identity, which the node checks
	// once its raise recorded it: a raw one is refused at the handshake
	// and never reaches the store (the test waited for it for good).
	waitFor(t, "the raise to record the cluster identity", func() bool { return n.ClusterID() != "" })
	s, err := listenTCPStream("127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	trans := raft.NewNetworkTransport(identityStream(s, n.ClusterID()), 1, 5*time.Second, io.Discard)
	defer trans.Close()
	h.armed.Store(true)
	go func() {
		var resp raft.AppendEntriesResponse
		trans.AppendEntries(raft.ServerID(n.ID()), raft.ServerAddress(n.RaftAddr()), &raft.AppendEntriesRequest{
			RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("other"), Addr: []byte(trans.LocalAddr())},
			Term:      n.Raft().CurrentTerm() + 10,
		}, &resp)
	}()
	<-h.entered

	down := make(chan struct{})
	go func() {
		n.Shutdown()
		close(down)
	}()
	// Shutdown returned, or waits for the heartbeat (its write lock is
	// pending: no read lock is to be had).
	waitFor(t, "Shutdown to return or wait for the heartbeat", func() bool {
		select {
		case <-down:
			return true
		default:
		}
		if n.beats.TryRLock() {
			n.beats.RUnlock()
			return false
		}
		return true
	})
	close(h.let)
	if err := <-h.err; err != nil {
		t.Fatalf("the heartbeat's term write after Shutdown: %v", err)
	}
	<-down
}
