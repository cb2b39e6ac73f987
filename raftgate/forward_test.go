package raftgate

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/internal/testnet"
)

// rawRequest sends one request with a client that has no timeout of its
// own, as curl has none, and returns the HTTP status and the error code
// of the answer. ctx only keeps a regression from hanging the test.
func rawRequest(t *testing.T, ctx context.Context, method, url string, body []byte) (int, errcode.Code, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Transport: &http.Transport{}}
	defer hc.CloseIdleConnections()
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: no answer: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	var eb ErrorBody
	json.Unmarshal(b, &eb)
	return resp.StatusCode, eb.Error.Code, b
}

// A follower forwarded to its leader's HTTP address with the client's
// own context and nothing else: when that address answered nothing, a
// client without a timeout (curl) held the request, a goroutine, its
// body's share of the request memory and a connection to the leader on
// the follower for ever. The forward is bounded now: a command whose
// request was written is INDETERMINATE, a read or a long-poll NOT_LEADER
// (retrying is safe), and the follower closes its connections to the
// silent address.
func TestForwardToSilentLeaderIsBounded(t *testing.T) {
	ctx := ctxT(t, time.Minute)
	dir := t.TempDir()
	hole := testnet.NewSilent(t, true)
	lcfg := TestConfig(dir, "leader")
	lcfg.ApplyTimeout = time.Second
	// Raft between the two is real and healthy; only the HTTP address
	// members forward to answers nothing.
	lcfg.HTTPAdvertise = hole.Addr
	leader := StartTestNode(t, lcfg)
	fcfg := TestConfig(dir, "follower")
	fcfg.ApplyTimeout = time.Second
	fcfg.Bootstrap, fcfg.Join = false, leader.ln.Addr().String()
	follower := StartTestNode(t, fcfg)
	waitFor(t, "the follower to know the leader's HTTP address", func() bool { return follower.leaderHTTP() == hole.Addr })
	if !leader.IsLeader() {
		t.Fatal("the bootstrapped node lost its leadership")
	}

	base := "http://" + follower.ln.Addr().String()
	cmd, err := EncodeCommand(&AdvanceFence{Kind: FenceTombstone, Value: 7})
	if err != nil {
		t.Fatal(err)
	}
	if status, code, b := rawRequest(t, ctx, http.MethodPost, base+"/v1/commands", cmd); status != http.StatusGatewayTimeout || code != errcode.Indeterminate {
		t.Fatalf("command forwarded to a silent leader: HTTP %d %s %s, want 504 INDETERMINATE", status, code, b)
	}
	if status, code, b := rawRequest(t, ctx, http.MethodGet, base+"/v1/fences", nil); status != http.StatusServiceUnavailable || code != errcode.NotLeader {
		t.Fatalf("read forwarded to a silent leader: HTTP %d %s %s, want 503 NOT_LEADER", status, code, b)
	}
	if status, code, b := rawRequest(t, ctx, http.MethodGet, base+"/v1/runs/r/wait?timeout=500", nil); status != http.StatusServiceUnavailable || code != errcode.NotLeader {
		t.Fatalf("long-poll forwarded to a silent leader: HTTP %d %s %s, want 503 NOT_LEADER", status, code, b)
	}
	waitFor(t, "the follower to close its connections to the silent address", func() bool { return hole.Open() == 0 })
	// The command never reached the leader.
	f := fencesOf(leader)
	if f.Tombstone != 0 {
		t.Fatalf("fences after a command that reached no leader: %+v", f)
	}
}

// The forward's bound does not cut a long-poll that waits as long as it
// asked: a follower's answer comes from the leader after the poll, well
// past the bound of a plain read.
func TestForwardedLongPollIsNotCut(t *testing.T) {
	ctx := ctxT(t, time.Minute)
	c := MakeCluster(t, 2, func(cfg *Config) { cfg.ApplyTimeout = time.Second })
	cl := c.Client()
	runOfOneRank(t, ctx, cl, 120_000)
	leader := c.Leader(10 * time.Second)
	follower := followerOf(c, leader)
	waitApplied(t, c.Nodes)
	poll := 3 * time.Second // more than twice the apply timeout
	var (
		start  time.Time
		status int
		code   errcode.Code
		b      []byte
	)
	// A follower that has lost sight of its leader for a moment (short
	// test timeouts on a loaded machine) answers NOT_LEADER at once:
	// not what this test is about, so it asks again once it knows one.
	for attempt := 0; attempt < 5; attempt++ {
		waitFor(t, "the follower to know its leader", func() bool { return follower.leaderHTTP() != "" && follower.leaderHTTP() != follower.HTTPAddr() })
		start = time.Now()
		status, code, b = rawRequest(t, ctx, http.MethodGet, follower.URL()+"/v1/runs/r/wait?timeout=3000", nil)
		if status != http.StatusServiceUnavailable || code != errcode.NotLeader {
			break
		}
	}
	if status != http.StatusOK {
		t.Fatalf("long-poll through a follower: HTTP %d %s %s", status, code, b)
	}
	var sum RunSummary
	if err := json.Unmarshal(b, &sum); err != nil || sum.ID != "r" || sum.Barrier == BarrierOpen {
		t.Fatalf("long-poll answer: %+v %v", sum, err)
	}
	if d := time.Since(start); d < poll {
		t.Fatalf("the long-poll answered after %s, before the %s it asked for", d, poll)
	}
}

// cutProxy stands between members and a leader's HTTP API and passes its
// answers on up to the end of their headers and keep bytes of their body,
// then nothing more, holding the connections open: a leader that froze
// in the middle of an answer. target is set once the leader listens.
type cutProxy struct {
	addr   string
	target atomic.Value // string
	keep   int
}

func newCutProxy(t *testing.T, keep int) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{addr: ln.Addr().String(), keep: keep}
	var mu sync.Mutex
	var conns []net.Conn
	hold := func(c ...net.Conn) {
		mu.Lock()
		defer mu.Unlock()
		conns = append(conns, c...)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			target, _ := p.target.Load().(string)
			m, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			hold(c, m)
			go io.Copy(m, c)
			go func() {
				// The head, then keep bytes of the body.
				br := bufio.NewReader(m)
				var head bytes.Buffer
				for !bytes.HasSuffix(head.Bytes(), []byte("\r\n\r\n")) {
					b, err := br.ReadByte()
					if err != nil {
						return
					}
					head.WriteByte(b)
				}
				c.Write(head.Bytes())
				io.CopyN(c, br, int64(p.keep))
				io.Copy(io.Discard, br)
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return p
}

// A follower read its leader's whole answer into memory (up to 1 GiB,
// outside the request-memory budget) before it wrote a byte of it. It
// passes the answer on as it comes now: the leader's status and the bytes
// it sent reach the client while the rest is still awaited, and when the
// rest does not come the client's connection is cut, so a read is a
// broken answer and a command INDETERMINATE (it was applied: the leader
// answered it), never a short answer that parses.
//
// That holds for an answer the leader gave while the follower knew it as
// its leader. On FastTiming, on a loaded machine, the leader missed its
// 100 ms lease and stepped down, or the follower timed out and lost
// sight of it or took over: the follower then answered itself (a clean
// answer, NOT_LEADER) or forwarded to a node that led no more, which is
// not the case under test. The follower never campaigns now and the
// leader's lease is a second; whether the leadership moved still is
// read from the changes of leader the two nodes' Raft reported
// (leaderChanges), not from a wait, and the test starts over on a new
// pair, up to five times.
func TestForwardStreamsTheLeadersAnswer(t *testing.T) {
	ctx := ctxT(t, 2*time.Minute)
	for attempt := 1; ; attempt++ {
		moved := forwardAnswerCut(t, ctx)
		if moved == "" {
			return
		}
		if attempt == 5 {
			t.Fatalf("the leadership moved in each of five attempts, the last: %s", moved)
		}
		t.Logf("attempt %d: %s; again on a new pair", attempt, moved)
	}
}

// forwardAnswerCut is one attempt of TestForwardStreamsTheLeadersAnswer
// on a new pair of nodes. It returns what moved, without asserting on
// the answers, when either node saw a change of leader before an answer
// was checked, and "" once every assertion passed.
func forwardAnswerCut(t *testing.T, ctx context.Context) string {
	dir := t.TempDir()
	const keep = 5
	proxy := newCutProxy(t, keep)
	lcfg := TestConfig(dir, "leader")
	lcfg.ApplyTimeout = time.Second
	lcfg.HTTPAdvertise = proxy.addr
	lcfg.Timing.Heartbeat, lcfg.Timing.Election, lcfg.Timing.LeaderLease = time.Second, time.Second, time.Second
	leader := StartTestNode(t, lcfg)
	defer leader.Shutdown()
	proxy.target.Store(leader.ln.Addr().String())
	fcfg := TestConfig(dir, "follower")
	fcfg.ApplyTimeout = time.Second
	fcfg.Bootstrap, fcfg.Join = false, leader.ln.Addr().String()
	neverCampaigns(&fcfg)
	follower := StartTestNode(t, fcfg)
	defer follower.Shutdown()
	waitFor(t, "the follower to know the leader's HTTP address", func() bool { return follower.leaderHTTP() == proxy.addr })
	// From here on: a leader that stepped down, a follower that lost
	// sight of it (a pre-vote changes no term) or took over, each
	// reports a change of leader.
	changes := leaderChanges(leader, follower)
	moved := func() string {
		if n := changes(); n > 0 || !leader.IsLeader() {
			return fmt.Sprintf("%d changes of leader seen, the bootstrapped node leading: %v", n, leader.IsLeader())
		}
		return ""
	}
	if m := moved(); m != "" {
		return m
	}

	// A read: status 200 and the first bytes the leader sent, then a
	// broken body.
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, follower.URL()+"/v1/fences", nil)
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Transport: &http.Transport{}}
	defer hc.CloseIdleConnections()
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("read through the follower: %v", err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if m := moved(); m != "" {
		return "around the read: " + m
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("read through the follower: HTTP %d %s, want the leader's 200 before its answer ends", resp.StatusCode, b)
	}
	if len(b) < keep {
		t.Fatalf("the first %d bytes the leader sent: %q, %v", keep, b, err)
	}
	if err == nil {
		t.Fatalf("the answer the leader never finished ended cleanly: %q", b)
	}
	if want := `{"tom`; string(b[:keep]) != want {
		t.Fatalf("first bytes %q, want %q", b[:keep], want)
	}

	// A command: applied by the leader, its answer cut, INDETERMINATE.
	cl := NewClient(follower.URL())
	defer cl.Close()
	cl.RetryFor = -1
	_, err = cl.AdvanceFence(ctx, FenceTombstone, 7)
	if m := moved(); m != "" {
		return fmt.Sprintf("around the command (%v): %s", err, m)
	}
	if code := errcode.Of(err); code != errcode.Indeterminate {
		t.Fatalf("command whose forwarded answer was cut: %v (code %s), want INDETERMINATE", err, code)
	}
	f := fencesOf(leader)
	if f.Tombstone != 7 {
		t.Fatalf("the leader's fences: %+v, want the command applied", f)
	}
	return ""
}

// leaderChanges returns the number of changes of leader the nodes' Raft
// reported from now on: a leader stepping down, a follower losing sight
// of its leader (a failed pre-vote changes no term) or learning a new
// one. Raft counts what it reports, taken or dropped.
func leaderChanges(nodes ...*Node) func() uint64 {
	var obs []*raft.Observer
	for _, n := range nodes {
		o := raft.NewObserver(make(chan raft.Observation, 1), false, func(o *raft.Observation) bool {
			_, ok := o.Data.(raft.LeaderObservation)
			return ok
		})
		n.Raft().RegisterObserver(o)
		obs = append(obs, o)
	}
	return func() uint64 {
		var sum uint64
		for _, o := range obs {
			sum += o.GetNumObserved() + o.GetNumDropped()
		}
		return sum
	}
}
