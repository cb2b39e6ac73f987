package raftgate

import (
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/shardproof/shardproof/internal/errcode"
)

// rpcTimeoutNow is the first byte hashicorp/raft's network transport
// writes for a TimeoutNow request, the message that ends a leadership
// transfer.
const rpcTimeoutNow = 3

// holdTimeoutNow is a Raft stream layer whose connections, once armed,
// hold the leader's TimeoutNow request: the write blocks until released,
// so raft's leadership transfer stays in progress (it ends only once that
// write returns) and no timer decides what the test sees.
type holdTimeoutNow struct {
	raft.StreamLayer
	armed   chan struct{} // closed to arm
	seen    chan struct{} // closed once a TimeoutNow is held
	release chan struct{} // closed to let it through
	once    sync.Once
}

func newHoldTimeoutNow() *holdTimeoutNow {
	return &holdTimeoutNow{armed: make(chan struct{}), seen: make(chan struct{}), release: make(chan struct{})}
}

func (h *holdTimeoutNow) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	c, err := h.StreamLayer.Dial(address, timeout)
	if err != nil {
		return nil, err
	}
	return &holdConn{Conn: c, h: h}, nil
}

type holdConn struct {
	net.Conn
	h *holdTimeoutNow
}

func (c *holdConn) Write(b []byte) (int, error) {
	select {
	case <-c.h.armed:
		if len(b) > 0 && b[0] == rpcTimeoutNow {
			c.h.once.Do(func() { close(c.h.seen) })
			<-c.h.release
		}
	default:
	}
	return c.Conn.Write(b)
}

// A remove that raft refuses because a leadership transfer is in
// progress appended nothing: it is NOT_LEADER, as a command refused for
// the same reason is, which clients retry, and the member stays. The
// gate answered INDETERMINATE, which told the operator the removal might
// have happened.
func TestRemoveDuringLeadershipTransferIsNotLeader(t *testing.T) {
	ctx := ctxT(t, time.Minute)
	var mu sync.Mutex
	holds := map[string]*holdTimeoutNow{}
	c := MakeCluster(t, 3, func(cfg *Config) {
		h := newHoldTimeoutNow()
		mu.Lock()
		holds[cfg.ID] = h
		mu.Unlock()
		cfg.WrapStream = func(s raft.StreamLayer) raft.StreamLayer { h.StreamLayer = s; return h }
	})
	leader := c.Leader(10 * time.Second)
	var target, other *Node
	for _, n := range c.Nodes {
		switch {
		case n == leader:
		case target == nil:
			target = n
		default:
			other = n
		}
	}
	h := holds[leader.ID()]
	close(h.armed)
	released := false
	defer func() {
		if !released {
			close(h.release)
		}
	}()
	transfer := make(chan error, 1)
	go func() {
		transfer <- leader.Raft().LeadershipTransferToServer(raft.ServerID(target.ID()), raft.ServerAddress(target.RaftAddr())).Error()
	}()
	select {
	case <-h.seen:
	case <-ctx.Done():
		t.Fatal("the leader sent no TimeoutNow")
	}

	status, code, b := rawRequest(t, ctx, http.MethodPost, leader.URL()+"/v1/remove", []byte(`{"id":"`+other.ID()+`"}`))
	if code != errcode.NotLeader {
		t.Fatalf("remove of %s during a leadership transfer: HTTP %d %s, want NOT_LEADER", other.ID(), status, b)
	}
	if _, err := leader.Apply(&AdvanceFence{Kind: FenceTombstone, Value: 1}); errcode.Of(err) != errcode.NotLeader {
		t.Fatalf("a command during the transfer: %v, want NOT_LEADER as the remove", err)
	}
	close(h.release)
	released = true
	<-transfer
	for _, n := range c.Nodes {
		found := false
		for _, sv := range n.Raft().GetConfiguration().Configuration().Servers {
			found = found || string(sv.ID) == other.ID() && sv.Suffrage == raft.Voter
		}
		if !found {
			t.Fatalf("%s's configuration lacks %s after a remove answered NOT_LEADER", n.ID(), other.ID())
		}
	}
}
