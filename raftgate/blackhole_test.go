package raftgate

import (
	"context"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
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
	root := registerVerified(t, ctx, cl, "r1", 2, 0, 0)
	if _, err := cl.Publish(ctx, "main", root, 0, 0); err != nil {
		t.Fatal(err)
	}

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
	var voters []string
	for _, v := range l.voters() {
		voters = append(voters, v.ID+" "+v.Suffrage)
	}
	if got := strings.Join(voters, ", "); got != "node1 Voter, node2 Voter, node3 Voter" {
		t.Fatalf("the leader's configuration once node3 joined: %s", got)
	}
}
