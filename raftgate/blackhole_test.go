package raftgate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// blackHole is a member's HTTP listener that, once on, swallows what it
// accepts: the connection stays open and nothing answers, as from a host
// whose API hangs. Each request swallowed is sent on held.
type blackHole struct {
	net.Listener
	on   atomic.Bool
	held chan heldRequest
	mu   sync.Mutex
	open []net.Conn
}

// heldRequest is a request a blackHole swallowed: its first bytes, and a
// channel closed once its client hung up (gave up waiting).
type heldRequest struct {
	first string
	gone  chan struct{}
}

func newBlackHole(t *testing.T) *blackHole {
	b := &blackHole{held: make(chan heldRequest, 16)}
	t.Cleanup(func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		for _, c := range b.open {
			c.Close()
		}
	})
	return b
}

func (b *blackHole) wrap(l net.Listener) net.Listener {
	b.Listener = l
	return b
}

func (b *blackHole) Accept() (net.Conn, error) {
	for {
		c, err := b.Listener.Accept()
		if err != nil || !b.on.Load() {
			return c, err
		}
		b.mu.Lock()
		b.open = append(b.open, c)
		b.mu.Unlock()
		go func() {
			buf := make([]byte, 512)
			n, _ := c.Read(buf)
			r := heldRequest{first: string(buf[:n]), gone: make(chan struct{})}
			b.held <- r
			io.Copy(io.Discard, c)
			close(r.gone)
		}()
	}
}

// A member whose HTTP API hangs holds the leader's poll of the members'
// versions until it gives up (3 s by default; 20 s here, the client's
// attempt timeout, below the minute the test sets), and neither a barrier
// deadline sweep nor a join waits for it: with node1 black-holed while
// the cluster is at version 1 (node1's build), the leader's poll to it is
// still outstanding (its client never hung up) when the run whose
// deadline passed has been failed BARRIER_TIMEOUT by the sweep, and when
// node3 has joined as a voter; no second poll started meanwhile. Before,
// the leader loop polled in line, so the sweep waited for the poll, and
// a join waited for it on the lock the poll held.
func TestBlackHoledMemberHoldsNoSweepOrJoin(t *testing.T) {
	ctx := ctxT(t, 2*time.Minute)
	hole := newBlackHole(t)
	c := MakeCluster(t, 2, func(cfg *Config) {
		cfg.versionPollTimeout = time.Minute
		if cfg.ID == "node1" {
			OlderBuild(1)(cfg)
			cfg.wrapHTTP = hole.wrap
		}
	})
	older, l := c.Nodes[0], c.Nodes[1]
	lead(t, l, c.Nodes...)
	// The older build stands for election no more: the newer leads
	// throughout, and polls it.
	rc := older.Raft().ReloadableConfig()
	rc.HeartbeatTimeout, rc.ElectionTimeout = time.Hour, time.Hour
	if err := older.Raft().ReloadConfig(rc); err != nil {
		t.Fatal(err)
	}
	cl := NewClient(l.URL())
	defer cl.Close()
	publishedRelease(t, ctx, cl, "r1", 2)

	hole.on.Store(true)
	var poll heldRequest
	select {
	case poll = <-hole.held:
	case <-ctx.Done():
		t.Fatal("the leader never asked node1 for its version")
	}
	if !strings.HasPrefix(poll.first, "GET /v1/status ") {
		t.Fatalf("the request node1 swallowed: %q, want the leader's GET /v1/status", poll.first)
	}
	outstanding := func(what string) {
		t.Helper()
		select {
		case <-poll.gone:
			t.Fatalf("the poll of node1 ended before %s; the test wants it held meanwhile", what)
		default:
		}
		if len(hole.held) != 0 {
			t.Fatalf("another poll of node1 started before %s, with the first still held", what)
		}
	}

	if _, err := cl.CreateRun(ctx, &CreateRun{Run: "late", Alias: "main", WorldSize: 2, BarrierTimeoutMs: 1}); err != nil {
		t.Fatal(err)
	}
	var failed string
	for failed == "" {
		select {
		case <-poll.gone:
			t.Fatal("the poll of node1 ended before the sweep failed the run: the sweep waited for it")
		case <-ctx.Done():
			t.Fatal("the run whose deadline passed was never failed")
		case <-time.After(10 * time.Millisecond):
		}
		l.FSM().Read(func(s *State) {
			if r := s.Runs["late"]; r.State == RunFailed {
				failed = r.FailCode
			}
		})
	}
	if failed != "BARRIER_TIMEOUT" {
		t.Fatalf("the run failed %s, want BARRIER_TIMEOUT", failed)
	}
	outstanding("the sweep")

	cfg3 := TestConfig(t.TempDir(), "node3")
	cfg3.Join, cfg3.Bootstrap = l.HTTPAddr(), false
	n3 := NewNode(cfg3)
	startCtx, cancelStart := context.WithCancel(ctx)
	joined := make(chan struct{})
	var joinErr error
	go func() {
		defer close(joined)
		joinErr = n3.Start(startCtx)
	}()
	// A join the test gave up on ends before its node shuts down.
	t.Cleanup(func() {
		cancelStart()
		<-joined
		n3.Shutdown()
	})
	select {
	case <-joined:
		if joinErr != nil {
			t.Fatalf("node3's join: %v", joinErr)
		}
	case <-poll.gone:
		t.Fatal("the poll of node1 ended before node3 joined: the join waited for it")
	case <-ctx.Done():
		t.Fatal("node3 never joined")
	}
	outstanding("node3 joined")
	// A learner first, promoted once caught up.
	WaitPromoted(t, n3, 10*time.Second)
	var voters []string
	for _, v := range l.voters() {
		voters = append(voters, v.ID+" "+v.Suffrage)
	}
	if got := strings.Join(voters, ", "); got != "node1 Voter, node2 Voter, node3 Voter" {
		t.Fatalf("the leader's configuration once node3 joined: %s", got)
	}
}

// holdLine is a member's HTTP listener that, once on, holds each request
// it reads until the test lets it through: the member answers, late. A
// request on a kept-alive connection is held too. Each request held is
// sent on held, with the channel that lets it go and the one that says
// its client hung up.
type holdLine struct {
	net.Listener
	on   atomic.Bool
	held chan heldLine
}

type heldLine struct {
	first string
	let   chan struct{}
	// gone is closed once the client closed the connection the request
	// came on: a member client closes it once it read the whole answer.
	gone <-chan struct{}
}

// heldLines are the held requests a test has yet to let through.
type heldLines struct{ let []chan struct{} }

func (h *heldLines) add(l heldLine) { h.let = append(h.let, l.let) }

// letAllGo lets every held request through (each once).
func (h *heldLines) letAllGo() {
	for _, ch := range h.let {
		select {
		case <-ch:
		default:
			close(ch)
		}
	}
	h.let = nil
}

func (h *holdLine) wrap(l net.Listener) net.Listener {
	h.Listener = l
	return h
}

func (h *holdLine) Accept() (net.Conn, error) {
	c, err := h.Listener.Accept()
	if err != nil {
		return c, err
	}
	return &heldConn{Conn: c, line: h, gone: make(chan struct{})}, nil
}

// heldConn reports the bytes of each read from the client, while its line
// is on, and waits to be let through before the server sees them.
type heldConn struct {
	net.Conn
	line    *holdLine
	pending []byte
	gone    chan struct{}
	hungUp  sync.Once
}

func (c *heldConn) Read(p []byte) (int, error) {
	if len(c.pending) == 0 {
		buf := make([]byte, 4096)
		n, err := c.Conn.Read(buf)
		if n == 0 {
			// The client's close, not the server's own deadline (its
			// read beside a handler ends with one) or close.
			if errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) {
				c.hungUp.Do(func() { close(c.gone) })
			}
			return 0, err
		}
		if c.line.on.Load() {
			l := heldLine{first: string(buf[:n]), let: make(chan struct{}), gone: c.gone}
			c.line.held <- l
			<-l.let
		}
		c.pending = buf[:n]
	}
	n := copy(p, c.pending)
	c.pending = c.pending[n:]
	return n, nil
}

// A raise commits only while the Raft configuration is the one its poll
// asked, now that a join no longer waits for the poll: node4, a build of
// version 1, joins the cluster at version 1 while the leader's poll of
// node2 and node3 (both of version 2, node1 of version 1 removed) is held
// at node3; the poll then hears version 2 from each member it asked, and
// the version stays 1, so node4 does not halt. The next poll asks node4
// and keeps it there. Without the comparison of the configurations, the
// raise to 2 commits and node4 halts at it.
func TestRaiseWaitsForAVoterAddedDuringItsPoll(t *testing.T) {
	ctx := ctxT(t, 2*time.Minute)
	line := &holdLine{held: make(chan heldLine, 16)}
	c := MakeCluster(t, 3, func(cfg *Config) {
		// A held poll waits for the test, not for a timeout.
		cfg.versionPollTimeout = time.Minute
		switch cfg.ID {
		case "node1":
			OlderBuild(1)(cfg)
		case "node3":
			cfg.wrapHTTP = line.wrap
		}
	})
	l, n3 := c.Nodes[1], c.Nodes[2]
	lead(t, l, c.Nodes...)
	still(t, c.Nodes[0])
	still(t, n3)
	if v := l.ClusterVersion(); v != 1 {
		t.Fatalf("cluster version with node1 on version 1: %d", v)
	}
	var n4 *Node
	n4Halted := func() error {
		if n4 == nil {
			return nil
		}
		return n4.Halted()
	}
	var held heldLines
	t.Cleanup(held.letAllGo)
	nextPoll := func(what string) heldLine {
		t.Helper()
		for {
			select {
			case h := <-line.held:
				held.add(h)
				if !strings.HasPrefix(h.first, "GET /v1/status ") {
					t.Fatalf("%s: node3 held %q, want the leader's GET /v1/status", what, h.first)
				}
				return h
			case <-ctx.Done():
				t.Fatalf("%s: the leader never asked node3", what)
			case <-time.After(20 * time.Millisecond):
			}
			if v := l.ClusterVersion(); v != 1 {
				l.vers.mu.Lock()
				asked := versionList(l.vers.last)
				l.vers.mu.Unlock()
				t.Fatalf("%s: cluster version %d, want 1 (node4 runs version 1, halted: %v); the leader's last poll heard %s", what, v, n4Halted(), asked)
			}
		}
	}

	line.on.Store(true)
	// The poll held first may have asked node1 too.
	p0 := nextPoll("before node1's removal")
	cl := NewClient(l.URL())
	defer cl.Close()
	if err := cl.RemoveMember(ctx, "node1"); err != nil {
		t.Fatal(err)
	}
	c.Stop(0)
	close(p0.let)
	p1 := nextPoll("the poll of node2 and node3")

	cfg4 := TestConfig(t.TempDir(), "node4")
	cfg4.Join, cfg4.Bootstrap = l.HTTPAddr(), false
	OlderBuild(1)(&cfg4)
	n4 = StartTestNode(t, cfg4)
	still(t, n4)
	if got := l.voters(); len(got) != 3 || got[2].ID != "node4" {
		t.Fatalf("the leader's configuration once node4 joined: %+v", got)
	}

	close(p1.let)
	// The next poll is held once the one let through has ended, raise
	// or not, and before it asks anyone: the leader's answers are p1's.
	nextPoll("the poll after node4 joined")
	l.vers.mu.Lock()
	asked := versionList(l.vers.last)
	l.vers.mu.Unlock()
	if want := fmt.Sprintf("node2: %d, node3: %d", CommandVersion, CommandVersion); asked != want {
		t.Fatalf("the poll held during the join heard %s, want %s", asked, want)
	}
	if v := l.ClusterVersion(); v != 1 {
		t.Fatalf("cluster version after a poll that did not ask node4 (version 1), a voter since: %d, want 1", v)
	}
	line.on.Store(false)
	held.letAllGo()
	running := []*Node{l, n3, n4}
	askVersions(t, &TestCluster{t: t, Nodes: running}, 1, map[string]string{"node3": fmt.Sprint(CommandVersion), "node4": "1"})
	waitApplied(t, running)
	for _, n := range running {
		if n.Halted() != nil || n.ClusterVersion() != 1 {
			t.Fatalf("%s: halted %v, cluster version %d; want running at 1", n.ID(), n.Halted(), n.ClusterVersion())
		}
	}
}

// still makes n, a follower, stand for election no more: the leader the
// test chose keeps its term.
func still(t *testing.T, n *Node) {
	t.Helper()
	rc := n.Raft().ReloadableConfig()
	rc.HeartbeatTimeout, rc.ElectionTimeout = time.Hour, time.Hour
	if err := n.Raft().ReloadConfig(rc); err != nil {
		t.Fatal(err)
	}
}

// A raise commits only if the leader changed no member while it polled,
// even one added back as it was: node4, of version 2, answers the
// leader's poll (node2 leads; node1, of version 1, which kept the cluster
// at 1, removed), and while the poll is held at node3, node4 is removed
// and replaced at the same ID and addresses, with an empty data
// directory, by a build of version 1, which joins as the cluster is at 1.
// The configuration's servers are then those the poll asked and every
// one answered version 2, yet the version stays 1 and the new node4 does
// not halt; the next poll asks it and keeps the version there. Comparing
// only the servers, the raise to 2 commits and node4 halts at it.
//
// The test's polls are the leader's only ones: its loop starts none
// while one is marked in flight, so each answer held is known to be of
// the poll the test started.
func TestRaiseWaitsForAMemberReplacedDuringItsPoll(t *testing.T) {
	ctx := ctxT(t, 2*time.Minute)
	line3 := &holdLine{held: make(chan heldLine, 16)}
	line4 := &holdLine{held: make(chan heldLine, 16)}
	c := MakeCluster(t, 4, func(cfg *Config) {
		// A held poll waits for the test, not for a timeout.
		cfg.versionPollTimeout = time.Minute
		switch cfg.ID {
		case "node1":
			OlderBuild(1)(cfg)
		case "node3":
			cfg.wrapHTTP = line3.wrap
		case "node4":
			cfg.wrapHTTP = line4.wrap
		}
	})
	l, n3 := c.Nodes[1], c.Nodes[2]
	lead(t, l, c.Nodes...)
	for _, n := range []*Node{c.Nodes[0], n3, c.Nodes[3]} {
		still(t, n)
	}
	if v := l.ClusterVersion(); v != 1 {
		t.Fatalf("cluster version with node1 on version 1: %d", v)
	}
	for !l.vers.polling.CompareAndSwap(false, true) {
		select {
		case <-ctx.Done():
			t.Fatal("the leader's loop never ended its poll")
		case <-time.After(10 * time.Millisecond):
		}
	}
	var held heldLines
	t.Cleanup(held.letAllGo)
	asked := func(line *holdLine, id string) heldLine {
		t.Helper()
		for {
			select {
			case h := <-line.held:
				held.add(h)
				if strings.HasPrefix(h.first, "GET /v1/status ") {
					return h
				}
				// Not the poll (a follower's record request): it
				// goes on.
				close(h.let)
			case <-ctx.Done():
				t.Fatalf("the leader's poll never asked %s", id)
			}
		}
	}

	cl := NewClient(l.URL())
	defer cl.Close()
	if err := cl.RemoveMember(ctx, "node1"); err != nil {
		t.Fatal(err)
	}
	c.Stop(0)
	servers := func() string {
		var s []string
		for _, v := range l.voters() {
			s = append(s, v.ID+" "+v.RaftAddr+" "+v.Suffrage)
		}
		return strings.Join(s, ", ")
	}
	before := servers()
	term := l.Raft().CurrentTerm()

	line3.on.Store(true)
	line4.on.Store(true)
	type raise struct {
		cv      uint64
		members []MemberVersion
		err     error
	}
	raised := make(chan raise, 1)
	go func() {
		cv, members, err := l.raiseClusterVersion(ctx)
		raised <- raise{cv, members, err}
	}()
	h3, h4 := asked(line3, "node3"), asked(line4, "node4")
	line4.on.Store(false)
	close(h4.let)
	// The leader's client closes its connection once it read the whole
	// answer: version 2, from the node4 about to be replaced.
	select {
	case <-h4.gone:
	case <-ctx.Done():
		t.Fatal("the leader's poll never read node4's answer")
	}

	if err := cl.RemoveMember(ctx, "node4"); err != nil {
		t.Fatal(err)
	}
	c.Stop(3)
	cfg4 := c.Configs[3]
	cfg4.DataDir = filepath.Join(t.TempDir(), "node4")
	cfg4.Join, cfg4.wrapHTTP = l.HTTPAddr(), nil
	OlderBuild(1)(&cfg4)
	// Never a candidate: the leader's term stays, so the test shows the
	// configuration changes counted, not the term.
	cfg4.Timing.Heartbeat, cfg4.Timing.Election = time.Hour, time.Hour
	n4 := StartTestNode(t, cfg4)
	c.Nodes[3] = n4
	if after := servers(); after != before {
		t.Fatalf("the leader's configuration once node4 joined again: %s, want the one it polled, %s", after, before)
	}

	close(h3.let)
	var r raise
	select {
	case r = <-raised:
	case <-ctx.Done():
		t.Fatal("the poll never ended")
	}
	if r.err != nil {
		t.Fatalf("the poll: %v", r.err)
	}
	if got, want := versionList(r.members), fmt.Sprintf("node2: %d, node3: %d, node4: %d", CommandVersion, CommandVersion, CommandVersion); got != want {
		t.Fatalf("the poll held while node4 was replaced heard %s, want %s (node4's answer from its old process)", got, want)
	}
	if v := l.ClusterVersion(); r.cv != 1 || v != 1 {
		// Until node4 applied the raise, or halted at it.
		for end := l.Raft().CommitIndex(); n4.Halted() == nil && n4.Raft().AppliedIndex() < end && ctx.Err() == nil; {
			time.Sleep(10 * time.Millisecond)
		}
		t.Fatalf("cluster version %d (the raise returned %d) after a poll whose node4 was replaced by a build of version 1 (halted: %v), want 1", v, r.cv, n4.Halted())
	}
	if !l.IsLeader() || l.Raft().CurrentTerm() != term {
		t.Fatalf("%s's term moved from %d to %d during the poll (leader: %v); the test wants one term", l.ID(), term, l.Raft().CurrentTerm(), l.IsLeader())
	}

	line3.on.Store(false)
	held.letAllGo()
	cv, members, err := l.raiseClusterVersion(ctx)
	if want := fmt.Sprintf("node2: %d, node3: %d, node4: 1", CommandVersion, CommandVersion); err != nil || cv != 1 || versionList(members) != want {
		t.Fatalf("the next poll heard %s: version %d, %v; want %s and version 1", versionList(members), cv, err, want)
	}
	l.vers.polling.Store(false)
	running := []*Node{l, n3, n4}
	waitApplied(t, running)
	for _, n := range running {
		if n.Halted() != nil || n.ClusterVersion() != 1 {
			t.Fatalf("%s: halted %v, cluster version %d; want running at 1", n.ID(), n.Halted(), n.ClusterVersion())
		}
	}
}
