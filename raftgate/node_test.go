package raftgate

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/internal/testnet"
	"github.com/shardproof/shardproof/manifest"
)

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// registerVerified registers a VERIFIED release through the client. A
// register whose outcome is unknown (INDETERMINATE: on a loaded machine
// a leader on FastTiming's 100 ms lease loses its leadership while
// committing it) is sent again, as the client's contract allows: the
// same report again is a retry.
func registerVerified(t *testing.T, ctx context.Context, cl *Client, label string, shards int, tw, bf uint64) manifest.Digest {
	t.Helper()
	root := dig(label)
	for attempt := 1; ; attempt++ {
		_, err := cl.Register(ctx, &Register{Root: root, Shards: shardsOf(label, shards), Report: &ReportSummary{
			Digest: dig("report/" + label), Verdict: manifest.Verified, DatasetSnapshot: dig("snap"),
			TombstoneWatermark: tw, BenchmarkFence: bf,
		}})
		if err == nil {
			return root
		}
		if !IsIndeterminate(err) || attempt == 5 {
			t.Fatalf("register %s (attempt %d): %v", label, attempt, err)
		}
	}
}

// registerVerified sends a register again when its outcome is unknown.
func TestRegisterVerifiedRetriesIndeterminate(t *testing.T) {
	ctx := ctxT(t, time.Minute)
	n := StartTestNode(t, TestConfig(t.TempDir(), "n1"))
	waitLeader(t, n)
	var posts atomic.Int32
	cl := NewClient("http://" + breakFirst(t, n.HTTPAddr(), "/v1/commands", true, &posts))
	defer cl.Close()
	root := registerVerified(t, ctx, cl, "rel", 2, 0, 0)
	if p := posts.Load(); p != 2 {
		t.Fatalf("%d registers sent, want the one whose answer was lost and one more", p)
	}
	good := NewClient(n.URL())
	defer good.Close()
	if rel, err := good.Release(ctx, root); err != nil || rel.State != ReleaseVerified {
		t.Fatalf("release after the retried register: %+v %v", rel, err)
	}
}

// stateBytes reads a node's local state encoding.
func stateBytes(t *testing.T, n *Node) []byte {
	t.Helper()
	b, err := n.FSM().Encode()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// waitSelfRecorded waits until n's state records node id's addresses as n
// serves them.
func waitSelfRecorded(t *testing.T, n *Node, id string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		var ok bool
		n.FSM().Read(func(s *State) {
			ni := s.Nodes[id]
			ok = ni != nil && ni.HTTPAddr == n.HTTPAddr() && ni.RaftAddr == n.RaftAddr()
		})
		if ok {
			return
		}
	}
	t.Fatalf("node %s's addresses never recorded in its state", id)
}

// waitApplied waits until every running node has applied the same index.
func waitApplied(t *testing.T, nodes []*Node) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		var idx []uint64
		for _, n := range nodes {
			idx = append(idx, n.Raft().AppliedIndex())
		}
		same := true
		for _, i := range idx {
			same = same && i == idx[0] && i >= nodes[0].Raft().CommitIndex()
		}
		if same {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("nodes did not converge")
}

func TestSingleNodeRestartKeepsState(t *testing.T) {
	ctx := ctxT(t, 60*time.Second)
	cfg := TestConfig(t.TempDir(), "solo")
	n := StartTestNode(t, cfg)
	cfg.RaftAddr, cfg.HTTPAddr = n.RaftAddr(), n.HTTPAddr()
	cl := NewClient(n.URL())
	defer cl.Close()

	r1 := registerVerified(t, ctx, cl, "r1", 4, 10, 10)
	r2 := registerVerified(t, ctx, cl, "r2", 4, 20, 10)
	if _, err := cl.Publish(ctx, "main", r1, 0, 3); err != nil {
		t.Fatal(err)
	}
	// Snapshot half-way, so the restart restores a snapshot and replays a log tail.
	if err := n.Raft().Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Publish(ctx, "main", r2, 1, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.AdvanceFence(ctx, FenceTombstone, 15); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.CreateRun(ctx, &CreateRun{Run: "job", Alias: "main", WorldSize: 2}); err != nil {
		t.Fatal(err)
	}
	s2 := shardsOf("r2", 4)
	if _, err := cl.Attest(ctx, "job", 0, r2, []manifest.Digest{s2[0], s2[2]}); err != nil {
		t.Fatal(err)
	}
	// The leader records its own addresses from its sweep loop; wait for
	// that entry, or the restart would seem to add it (a flake, 1 run in
	// about 8 under load).
	waitSelfRecorded(t, n, cfg.ID)
	waitRaised(t, n)
	before := stateBytes(t, n)
	if err := n.Shutdown(); err != nil {
		t.Fatal(err)
	}

	StartTestNode(t, cfg)
	got, err := cl.State(ctx) // linearizable: waits for the restarted node to lead and catch up
	if err != nil {
		t.Fatal(err)
	}
	after, _ := EncodeState(got)
	if !bytes.Equal(before, after) {
		t.Fatalf("state changed across restart:\nbefore %s\nafter  %s", before, after)
	}
	if a := got.Aliases["main"]; a.Generation != 2 || a.Root != r2 || got.Fences.Tombstone != 15 {
		t.Fatalf("alias/fences after restart: %+v %+v", a, got.Fences)
	}
	if p := got.Permits[got.Aliases["main"].History[0].Permit]; p.State != PermitSuperseded {
		t.Fatalf("generation-1 permit after restart: %s", p.State)
	}
	if r := got.Runs["job"]; r.Attested != 1 || r.Root != r2 {
		t.Fatalf("run after restart: %+v", r.Summary())
	}
	// And it keeps working.
	s, err := cl.Attest(ctx, "job", 1, r2, []manifest.Digest{s2[1], s2[3]})
	if err != nil || s.Barrier != BarrierOpen {
		t.Fatalf("attest after restart: %+v %v", s, err)
	}
}

func TestHTTPAPI(t *testing.T) {
	ctx := ctxT(t, 60*time.Second)
	n, cl := soloGate(t, "api")
	for _, p := range []string{"/healthz", "/readyz"} {
		deadline := time.Now().Add(10 * time.Second)
		for {
			resp, err := http.Get(n.URL() + p)
			if err == nil {
				resp.Body.Close()
			}
			if err == nil && resp.StatusCode == 200 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s never became 200: %v", p, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	root := publishedRelease(t, ctx, cl, "rel", 3)
	// A rejection carries its code through HTTP and the client.
	_, err := cl.Publish(ctx, "main", root, 5, 0)
	if !errors.Is(err, ErrGenerationConflict) {
		t.Fatalf("stale publish over HTTP: %v", err)
	}
	// Malformed commands never reach the log. (The leader records its
	// own address, and raises the cluster version with the cluster's
	// identity, in commands of its own once it leads: wait for both, or
	// one may land between the two reads of the index, as the raise did
	// under load.)
	waitSelfRecorded(t, n, "api")
	waitRaised(t, n)
	before := n.Raft().LastIndex()
	// A command with a stray ']' or '}' after it too: it is no command.
	for _, bad := range []string{`{"type":"publish","alias":"x","evil":1}`,
		`{"type":"advanceFence","kind":"tombstone","value":9}]`, `{"type":"advanceFence","kind":"tombstone","value":9}}`} {
		resp, err := http.Post(n.URL()+"/v1/commands", "application/json", strings.NewReader(bad))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !bytes.Contains(body, []byte(errcode.BadDocument)) {
			t.Fatalf("bad command %s: HTTP %d %s", bad, resp.StatusCode, body)
		}
	}
	if n.Raft().LastIndex() != before {
		t.Fatal("a malformed command was appended to the log")
	}
	// A rejection that changes state returns the changed run.
	if _, err := cl.CreateRun(ctx, &CreateRun{Run: "job", Alias: "main", WorldSize: 1}); err != nil {
		t.Fatal(err)
	}
	s, err := cl.Attest(ctx, "job", 0, dig("foreign"), nil)
	if !errors.Is(err, ErrRootMismatch) || s.State != RunFailed {
		t.Fatalf("foreign attest: %+v %v", s, err)
	}
	if _, err := cl.WaitRun(ctx, "job"); errcode.Of(err) != errcode.RootMismatch {
		t.Fatalf("wait on a failed run: %v", err)
	}
	if _, err := cl.Run(ctx, "nope"); errcode.Of(err) != errcode.UnknownRun {
		t.Fatalf("unknown run: %v", err)
	}
	if _, err := cl.CreateRun(ctx, &CreateRun{Run: "ok", Alias: "main", WorldSize: 1}); err != nil {
		t.Fatal(err)
	}
	for _, d := range []time.Duration{100 * time.Millisecond, 600 * time.Millisecond} {
		wctx, cancel := context.WithTimeout(ctx, d)
		_, err := cl.WaitRun(wctx, "ok")
		cancel()
		if errcode.Of(err) != errcode.BarrierClosed {
			t.Fatalf("wait %s on a closed barrier: %v, want BARRIER_CLOSED", d, err)
		}
	}
	// A wait that never got an answer says nothing of the barrier: it was
	// BARRIER_CLOSED, which a launcher reads as "ranks missing".
	down := NewClient("http://127.0.0.1:1")
	wctx, cancel := context.WithTimeout(ctx, 600*time.Millisecond)
	if s, err := down.WaitRun(wctx, "ok"); errcode.Of(err) != errcode.GateUnavailable || s != nil {
		t.Fatalf("wait with no gate reachable: %+v, %v; want GATE_UNAVAILABLE", s, err)
	}
	cancel()
	down.Close()
	if s, err := cl.Attest(ctx, "ok", 0, root, shardsOf("rel", 3)); err != nil || s.Barrier != BarrierOpen {
		t.Fatalf("attest: %+v %v", s, err)
	}
	resp, err := http.Get(n.URL() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`shardproof_gate_commands_total{code="OK",type="publish"} 1`,
		`shardproof_gate_commands_total{code="GENERATION_CONFLICT",type="publish"} 1`,
		`shardproof_gate_run_failures_total{code="ROOT_MISMATCH",release="` + root.String() + `"} 1`,
		`shardproof_gate_barrier_wait_seconds_count{release="` + root.String() + `"} 1`,
		"shardproof_gate_leader 1",
	} {
		if !bytes.Contains(body, []byte(want)) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// dropAfterForward is a decorator around a real gate: it forwards each
// request to the gate, then drops the client's connection instead of
// answering, so the client cannot know the outcome.
func dropAfterForward(t *testing.T, target string) string {
	u, _ := url.Parse(target)
	proxy := httputil.NewSingleHostReverseProxy(u)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		proxy.ServeHTTP(&discardWriter{h: http.Header{}}, r)
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close()
		}
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String()
}

type discardWriter struct{ h http.Header }

func (d *discardWriter) Header() http.Header         { return d.h }
func (d *discardWriter) Write(b []byte) (int, error) { return len(b), nil }
func (d *discardWriter) WriteHeader(int)             {}

func TestClientIndeterminateThenSafeRetry(t *testing.T) {
	ctx := ctxT(t, 60*time.Second)
	n, good := soloGate(t, "ind")
	root := registerVerified(t, ctx, good, "rel", 2, 0, 0)

	flaky := NewClient(dropAfterForward(t, n.URL()))
	flaky.RetryFor = time.Second
	defer flaky.Close()
	_, err := flaky.Publish(ctx, "main", root, 0, 0)
	if !IsIndeterminate(err) || errcode.Of(err).Exit() != errcode.ExitIndeterminate {
		t.Fatalf("lost answer: got %v, want INDETERMINATE", err)
	}
	// The command did commit; retrying it is safe and returns the original result.
	a, err := good.Alias(ctx, "main")
	if err != nil || a.Generation != 1 {
		t.Fatalf("after indeterminate publish: %+v %v", a, err)
	}
	r, err := good.Publish(ctx, "main", root, 0, 0)
	if err != nil || r.Generation != 1 || r.Permit != a.Permit {
		t.Fatalf("retry: %+v %v", r, err)
	}
	// Reads through the same decorator are retried, then reported unreachable.
	if _, err := flaky.Alias(ctx, "main"); errcode.Of(err) != errcode.GateUnavailable {
		t.Fatalf("read through a dropping proxy: %v", err)
	}
	// Nothing listening: unreachable, not indeterminate.
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	dead := ln.Addr().String()
	ln.Close()
	cl := NewClient(dead)
	cl.RetryFor = 300 * time.Millisecond
	if _, err := cl.Publish(ctx, "main", root, 1, 0); errcode.Of(err) != errcode.GateUnavailable {
		t.Fatalf("dead gate: %v", err)
	}
}

func TestClusterFailoverKeepsAcknowledgedPublishes(t *testing.T) {
	if testing.Short() {
		t.Skip("3-node cluster")
	}
	ctx := ctxT(t, 90*time.Second)
	c := MakeCluster(t, 3)
	cl := c.Client()

	const total = 40
	roots := make([]manifest.Digest, total)
	for i := range roots {
		roots[i] = registerVerified(t, ctx, cl, fmt.Sprintf("rel%d", i), 2, 0, 0)
	}
	// Writes and reads through a follower are forwarded to the leader.
	leader := c.Leader(5 * time.Second)
	follower := followerOf(c, leader)
	fc := NewClient(follower.URL())
	defer fc.Close()
	if _, err := fc.Publish(ctx, "side", roots[0], 0, 0); err != nil {
		t.Fatalf("publish via follower: %v", err)
	}
	if a, err := fc.Alias(ctx, "side"); err != nil || a.Generation != 1 {
		t.Fatalf("read via follower: %+v %v", a, err)
	}

	// The publisher runs while the leader is killed under it.
	acked := map[uint64]manifest.Digest{}
	indeterminate := 0
	progress := make(chan int, total)
	done := make(chan error, 1)
	go func() {
		for i := 0; i < total; i++ {
			for {
				r, err := cl.Publish(ctx, "main", roots[i], uint64(i), 0)
				if IsIndeterminate(err) {
					// Safe to retry: the same (alias, generation, root).
					indeterminate++
					continue
				}
				if err != nil {
					done <- fmt.Errorf("publish %d: %w", i, err)
					return
				}
				if prev, dup := acked[r.Generation]; dup {
					done <- fmt.Errorf("generation %d acknowledged twice (%s and %s)", r.Generation, prev, r.Root)
					return
				}
				acked[r.Generation] = r.Root
				progress <- i
				break
			}
		}
		done <- nil
	}()
	for i := range progress {
		if i == total/3 {
			for j, n := range c.Nodes {
				if n.IsLeader() {
					c.Stop(j)
				}
			}
			break
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	t.Logf("%d publishes acknowledged, %d indeterminate outcomes retried", len(acked), indeterminate)

	check := func(when string) *State {
		t.Helper()
		s, err := cl.State(ctx)
		if err != nil {
			t.Fatalf("%s: %v", when, err)
		}
		a := s.Aliases["main"]
		if a.Generation != total {
			t.Fatalf("%s: generation %d, want %d", when, a.Generation, total)
		}
		for g, root := range acked {
			if a.History[g-1].Root != root {
				t.Fatalf("%s: generation %d is %s, acknowledged %s", when, g, a.History[g-1].Root, root)
			}
		}
		// Every root was published once: a retried command never made a
		// second generation, and every generation has its own permit.
		roots, permits := map[manifest.Digest]bool{}, map[string]bool{}
		for _, h := range a.History {
			if roots[h.Root] || permits[h.Permit] {
				t.Fatalf("%s: generation %d repeats root %s or permit %s", when, h.Generation, h.Root, h.Permit)
			}
			roots[h.Root], permits[h.Permit] = true, true
		}
		return s
	}
	check("after failover")

	// Restart every node from disk; the state is the same on all three.
	for i := range c.Nodes {
		c.Stop(i)
	}
	for i := range c.Nodes {
		c.Restart(i)
	}
	want, _ := EncodeState(check("after full restart"))
	waitApplied(t, c.Nodes)
	for _, n := range c.Nodes {
		if got := stateBytes(t, n); !bytes.Equal(got, want) {
			t.Fatalf("node %s differs after restart", n.ID())
		}
	}
}

func TestLeaderLostMidCommitIsIndeterminate(t *testing.T) {
	if testing.Short() {
		t.Skip("3-node cluster")
	}
	ctx := ctxT(t, 60*time.Second)
	// A lease long enough that the leader is still leading when the write
	// arrives after its followers are stopped.
	c := MakeCluster(t, 3, func(cfg *Config) {
		cfg.Timing = Timing{Heartbeat: 500 * time.Millisecond, Election: 500 * time.Millisecond, LeaderLease: 500 * time.Millisecond}
	})
	leader := c.Leader(5 * time.Second)
	cl := NewClient(leader.URL())
	defer cl.Close()
	cl.RetryFor = time.Second
	if _, err := cl.AdvanceFence(ctx, FenceTombstone, 1); err != nil {
		t.Fatal(err)
	}
	// Cut the leader off from its quorum: it appends the entry, cannot
	// commit it, and steps down after its lease.
	for i, n := range c.Nodes {
		if n != leader {
			c.Stop(i)
		}
	}
	_, err := cl.AdvanceFence(ctx, FenceTombstone, 2)
	if !IsIndeterminate(err) {
		t.Fatalf("write on a leader that lost its quorum: %v, want INDETERMINATE", err)
	}
	// Bring the quorum back and repeat the same command: it is safe.
	for i, n := range c.Nodes {
		if n == nil {
			c.Restart(i)
		}
	}
	all := c.Client()
	r, err := all.AdvanceFence(ctx, FenceTombstone, 2)
	if err != nil || r.Fences.Tombstone != 2 {
		t.Fatalf("retry after indeterminate: %+v %v", r, err)
	}
}

// With PruneOlderThan set, the leader prunes by itself: a cancelled run
// disappears without anyone sending a prune command.
func TestLeaderPrunes(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	cfg := TestConfig(t.TempDir(), "solo")
	cfg.PruneOlderThan, cfg.PruneInterval = time.Millisecond, 50*time.Millisecond
	n := StartTestNode(t, cfg)
	cl := NewClient(n.URL())
	defer cl.Close()
	root := publishedRelease(t, ctx, cl, "r", 2)
	if _, err := cl.CreateRun(ctx, &CreateRun{Run: "job", Alias: "main", WorldSize: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.CancelRun(ctx, "job", "done"); err != nil {
		t.Fatal(err)
	}
	for {
		s, err := cl.State(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if s.Runs["job"] == nil {
			if s.Aliases["main"] == nil || s.Releases[root.String()].Pruned {
				t.Fatalf("prune took what the alias holds: %+v", s.Aliases["main"])
			}
			return
		}
		select {
		case <-ctx.Done():
			t.Fatal("the leader never pruned the cancelled run")
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// The HTTP status of each kind of answer, as the package doc lists them:
// rejections (a recheck's hits included) 409, bad input 400, unknown
// names 404, a pruned run 410, no leader 503, unknown outcome 504.
func TestHTTPStatusOfCodes(t *testing.T) {
	for code, want := range map[errcode.Code]int{
		errcode.PublishConflict: http.StatusConflict, errcode.FenceRegression: http.StatusConflict,
		errcode.TombstoneHit: http.StatusConflict, errcode.BenchmarkHit: http.StatusConflict,
		errcode.BadInput: http.StatusBadRequest, errcode.BadDocument: http.StatusBadRequest,
		errcode.UnknownAlias: http.StatusNotFound, errcode.UnknownRun: http.StatusNotFound,
		errcode.RunPruned: http.StatusGone,
		errcode.NotLeader: http.StatusServiceUnavailable, errcode.Indeterminate: http.StatusGatewayTimeout,
		errcode.Internal: http.StatusInternalServerError,
	} {
		if got := httpStatus(code); got != want {
			t.Errorf("%s: HTTP %d, want %d", code, got, want)
		}
	}
}

// A node bound to every interface must be told which address to
// advertise: other members cannot dial 0.0.0.0. With the advertise address
// set it starts and advertises it.
func TestRaftBindNeedsAdvertisableAddress(t *testing.T) {
	dir := t.TempDir()
	cfg := TestConfig(dir, "any")
	cfg.RaftAddr = "0.0.0.0:0"
	n := NewNode(cfg)
	err := n.Start(t.Context())
	if err == nil {
		n.Shutdown()
		t.Fatal("a node bound to 0.0.0.0 without an advertise address started")
	}
	if errcode.Of(err) != errcode.IO || !strings.Contains(err.Error(), "advertis") {
		t.Fatalf("error %v (code %s), want an IO error naming the advertise address", err, errcode.Of(err))
	}

	cfg = TestConfig(dir, "adv")
	cfg.RaftAddr, cfg.RaftAdvertise = "0.0.0.0:0", "127.0.0.1:7999"
	n = StartTestNode(t, cfg)
	if got := n.RaftAddr(); got != "127.0.0.1:7999" {
		t.Fatalf("RaftAddr() = %s, want the advertise address", got)
	}
}

// A second node started on a running node's data directory fails within
// the lock wait with DATA_DIR_IN_USE, where bbolt waited for the lock for
// ever and the second gate hung without a word; the running node keeps
// serving, and once it stops the directory opens with its state intact.
func TestDataDirInUse(t *testing.T) {
	dir := t.TempDir()
	cfg := TestConfig(dir, "a")
	a := StartTestNode(t, cfg)
	c := NewClient("http://" + a.HTTPAddr())
	if _, err := c.AdvanceFence(t.Context(), FenceTombstone, 7); err != nil {
		t.Fatal(err)
	}

	second := TestConfig(dir, "a") // same DataDir, its own listeners
	b := NewNode(second)
	start := time.Now()
	err := b.Start(t.Context())
	if err == nil {
		b.Shutdown()
		t.Fatal("a second node started on a data directory in use")
	}
	if errcode.Of(err) != errcode.DataDirInUse || !strings.Contains(err.Error(), filepath.Join(cfg.DataDir, "raft.db")) {
		t.Fatalf("second node: %v (code %s), want DATA_DIR_IN_USE naming raft.db", err, errcode.Of(err))
	}
	if waited := time.Since(start); waited > dataLockWait+5*time.Second {
		t.Fatalf("the second node gave up after %s, lock wait %s", waited, dataLockWait)
	}
	if st, err := c.State(t.Context()); err != nil || st.Fences.Tombstone != 7 {
		t.Fatalf("the running node after the refused start: %+v, %v", st, err)
	}

	a.Shutdown()
	b = StartTestNode(t, second)
	if st, err := NewClient("http://" + b.HTTPAddr()).State(t.Context()); err != nil || st.Fences.Tombstone != 7 {
		t.Fatalf("the directory reopened after the first node stopped: %+v, %v", st, err)
	}
}

// A second node started on a running node's data directory and on its
// ports fails DATA_DIR_IN_USE naming raft.db, the true cause, where it
// failed IO on the port it bound first (the ports are bound before
// anything in DIR is touched) and sent the operator looking for the
// process on the port, when the same gate was running already. It binds
// the HTTP port after the Raft one: the HTTP port alone in use says the
// same. The running node's data is untouched. A port held by something
// else, with raft.db locked by no one (that gate stopped), stays IO.
func TestDataDirInUseOnItsPorts(t *testing.T) {
	dir := t.TempDir()
	cfg := TestConfig(dir, "a")
	a := StartTestNode(t, cfg)
	// The founder writes cluster-id when it applies its raise of the
	// cluster version, which its leader loop proposes after Start: the
	// FSM applies it, and writes the file, under the lock ClusterVersion
	// reads under. Listed before that, the directory gained the file
	// while the refused starts ran (on a loaded machine).
	waitFor(t, "a to raise the cluster version to its build's", func() bool { return a.ClusterVersion() == a.BuildVersion() })
	c := NewClient("http://" + a.HTTPAddr())
	if _, err := c.AdvanceFence(t.Context(), FenceTombstone, 7); err != nil {
		t.Fatal(err)
	}
	listing := func() []string {
		t.Helper()
		var names []string
		err := filepath.WalkDir(cfg.DataDir, func(p string, _ os.DirEntry, err error) error {
			names = append(names, p)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return names
	}
	before := listing()
	db := filepath.Join(cfg.DataDir, "raft.db")
	for _, c := range []struct{ name, raftAddr string }{
		{"both ports", a.RaftAddr()},
		{"the HTTP port", "127.0.0.1:0"},
	} {
		second := TestConfig(dir, "a")
		second.RaftAddr, second.HTTPAddr = c.raftAddr, a.HTTPAddr()
		b := NewNode(second)
		err := b.Start(t.Context())
		if err == nil {
			b.Shutdown()
			t.Fatalf("%s in use: a second node started on a data directory in use", c.name)
		}
		if errcode.Of(err) != errcode.DataDirInUse || !strings.Contains(err.Error(), db) {
			t.Fatalf("%s in use by the node serving the same data directory: %v (code %s), want DATA_DIR_IN_USE naming %s", c.name, err, errcode.Of(err), db)
		}
	}
	if st, err := c.State(t.Context()); err != nil || st.Fences.Tombstone != 7 {
		t.Fatalf("the running node after the refused starts: %+v, %v", st, err)
	}
	if after := listing(); !slices.Equal(after, before) {
		t.Fatalf("the running node's directory changed: %v, was %v", after, before)
	}

	httpAddr := a.HTTPAddr()
	a.Shutdown()
	held, err := net.Listen("tcp", httpAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	second := TestConfig(dir, "a")
	second.HTTPAddr = httpAddr
	err = NewNode(second).Start(t.Context())
	if errcode.Of(err) != errcode.IO || !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("the HTTP port held by another program, raft.db by no one: %v (code %s), want IO naming the port", err, errcode.Of(err))
	}
	held.Close()
	b := StartTestNode(t, second)
	if st, err := NewClient("http://" + b.HTTPAddr()).State(t.Context()); err != nil || st.Fences.Tombstone != 7 {
		t.Fatalf("the directory reopened after the first node stopped: %+v, %v", st, err)
	}
}

// A start that made its DIR and fails removes it while it still holds
// raft.db's lock (see removeMade), and a start beside it that waited for
// that lock, on the file it had opened before the removal, stops (IO)
// instead of running on a raft.db no path names, whose state a restart
// would not find. Whatever the order the two meet in, a second start
// that succeeds keeps its state across a restart, and one that fails
// leaves no DIR.
func TestStartBesideAFailedStartThatMadeTheDir(t *testing.T) {
	atStatus, release := make(chan struct{}), make(chan struct{})
	notGate := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(atStatus)
		<-release
		http.NotFound(w, r)
	}))
	defer notGate.Close()
	dir := t.TempDir()
	first := TestConfig(dir, "a")
	first.Bootstrap, first.Join = false, notGate.Listener.Addr().String()
	a := NewNode(first)
	failed := make(chan error, 1)
	go func() { failed <- a.Start(ctxT(t, 20*time.Second)) }()
	<-atStatus // a made DIR, holds raft.db's lock and asks for a status

	second := TestConfig(dir, "a")
	b := NewNode(second)
	t.Cleanup(func() { b.Shutdown() })
	started := make(chan error, 1)
	go func() { started <- b.Start(ctxT(t, 20*time.Second)) }()
	time.Sleep(300 * time.Millisecond) // b waits for the lock, most often
	close(release)
	if err := <-failed; errcode.Of(err) != errcode.Usage {
		t.Fatalf("the start joining via no gate: %v, want USAGE", err)
	}
	err := <-started
	if err != nil {
		t.Logf("the start beside it: %v", err)
		if _, serr := os.Stat(second.DataDir); !errors.Is(serr, os.ErrNotExist) {
			t.Fatalf("the start beside the failed one failed (%v) and left DIR: %v", err, serr)
		}
		return
	}
	waitLeader(t, b)
	if _, err := NewClient("http://"+b.HTTPAddr()).AdvanceFence(t.Context(), FenceTombstone, 7); err != nil {
		t.Fatal(err)
	}
	b.Shutdown()
	second.Bootstrap = false
	c := StartTestNode(t, second)
	waitLeader(t, c)
	got := fencesOf(c).Tombstone
	if got != 7 {
		t.Fatalf("the start beside the failed one served, and its restart finds tombstone fence %d, want 7", got)
	}
}

// What retrying cannot fix is not retried: a URL that is no http(s) gate,
// a 4xx that is not the gate's own answer, and names that cannot be
// addressed. RetryFor < 0 tries each endpoint once.
func TestClientRefusesWhatRetryingCannotFix(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	var hits atomic.Int64
	notFound := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		http.NotFound(w, r)
	}))
	defer notFound.Close()
	busy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		http.Error(w, "busy", http.StatusServiceUnavailable)
	}))
	defer busy.Close()

	c := NewClient(notFound.URL)
	if _, err := c.Status(ctx); errcode.Of(err) != errcode.Usage || hits.Load() != 1 {
		t.Fatalf("a plain 404: %v after %d requests, want USAGE after 1", err, hits.Load())
	}
	hits.Store(0)
	c = NewClient(busy.URL + "," + busy.URL)
	c.RetryFor = -1
	if _, err := c.Status(ctx); errcode.Of(err) != errcode.GateUnavailable || hits.Load() != 2 {
		t.Fatalf("503 without retries: %v after %d requests, want GATE_UNAVAILABLE after 2", err, hits.Load())
	}
	hits.Store(0)
	c = NewClient("ftp://" + strings.TrimPrefix(busy.URL, "http://"))
	if _, err := c.Status(ctx); errcode.Of(err) != errcode.Usage || hits.Load() != 0 {
		t.Fatalf("an ftp URL: %v after %d requests, want USAGE before any", err, hits.Load())
	}

	hostPort := strings.TrimPrefix(busy.URL, "http://")
	for _, typo := range []string{"http//" + hostPort, "http:/" + hostPort, "HTTPS//" + hostPort, "https:" + hostPort} {
		c = NewClient(typo)
		_, err := c.Status(ctx)
		if errcode.Of(err) != errcode.Usage || hits.Load() != 0 || !strings.Contains(err.Error(), "://"+hostPort+"?") {
			t.Fatalf("gate URL %s: %v after %d requests, want USAGE suggesting ://%s before any", typo, err, hits.Load(), hostPort)
		}
	}
	// Nothing listening: the error says what to start.
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	closed := ln.Addr().String()
	ln.Close()
	c = NewClient(closed)
	c.RetryFor = -1
	if _, err := c.Status(ctx); errcode.Of(err) != errcode.GateUnavailable || !strings.Contains(err.Error(), "gate serve --data DIR --bootstrap") {
		t.Fatalf("nothing at %s: %v, want GATE_UNAVAILABLE with a hint", closed, err)
	}

	_, g := soloGate(t, "names")
	root := registerVerified(t, ctx, g, "rel", 2, 0, 0)
	for _, name := range []string{".", ".."} {
		if _, err := g.Publish(ctx, name, root, 0, 0); errcode.Of(err) != errcode.BadInput {
			t.Fatalf("publish alias %q: %v, want BAD_INPUT", name, err)
		}
		if _, err := g.Alias(ctx, name); errcode.Of(err) != errcode.Usage {
			t.Fatalf("read alias %q: %v, want USAGE", name, err)
		}
		if _, err := g.Run(ctx, name); errcode.Of(err) != errcode.Usage {
			t.Fatalf("read run %q: %v, want USAGE", name, err)
		}
	}
	if _, err := g.Publish(ctx, "main", root, 0, 0); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{".", ".."} {
		if _, err := g.CreateRun(ctx, &CreateRun{Run: name, Alias: "main", WorldSize: 1}); errcode.Of(err) != errcode.BadInput {
			t.Fatalf("create run %q: %v, want BAD_INPUT", name, err)
		}
	}
	if _, err := g.WaitRun(ctx, ""); errcode.Of(err) != errcode.Usage {
		t.Fatalf("wait for run \"\": %v, want USAGE", err)
	}
}

// A register whose report summary names no report digest is refused
// BAD_INPUT when it is proposed, and nothing is logged: Apply took the
// zero digest for a retry of a release's report, and (below cluster
// version 2) recorded a new root STAGED on the way to refusing it.
func TestRegisterWithoutReportDigestIsRefused(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	_, g := soloGate(t, "g")
	registerVerified(t, ctx, g, "rel", 2, 0, 0)
	before, err := g.StatusDigest(ctx)
	if err != nil {
		t.Fatal(err)
	}
	root := dig("no-report-digest")
	_, err = g.Register(ctx, &Register{Root: root, Shards: shardsOf("no-report-digest", 1), Report: &ReportSummary{Verdict: manifest.Verified, DatasetSnapshot: dig("snap")}})
	if errcode.Of(err) != errcode.BadInput || !strings.Contains(err.Error(), "names no report digest") {
		t.Fatalf("register without a report digest: %v, want BAD_INPUT", err)
	}
	after, err := g.StatusDigest(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if after.StateIndex != before.StateIndex || *after.StateDigest != *before.StateDigest {
		t.Fatalf("the refused register changed the state: index %d → %d", before.StateIndex, after.StateIndex)
	}
	if _, err := g.Release(ctx, root); errcode.Of(err) != errcode.UnknownRelease {
		t.Fatalf("release of the refused register: %v, want UNKNOWN_RELEASE", err)
	}
}

// A node started on another member's data directory (its address under
// another ID) is refused with the members it holds, where it used to
// serve and answer every write NOT_LEADER; with the right ID the same
// directory starts, state intact.
func TestRestartWithAnotherIDIsRefused(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	dir := t.TempDir()
	cfg := TestConfig(dir, "gate-a")
	n := StartTestNode(t, cfg)
	cfg.RaftAddr, cfg.HTTPAddr = n.RaftAddr(), n.HTTPAddr()
	cl := NewClient(n.URL())
	defer cl.Close()
	registerVerified(t, ctx, cl, "r1", 2, 0, 0)
	waitSelfRecorded(t, n, cfg.ID)
	waitRaised(t, n)
	before := stateBytes(t, n)
	if err := n.Shutdown(); err != nil {
		t.Fatal(err)
	}
	other := cfg
	other.ID = "gate-b"
	err := NewNode(other).Start(ctx)
	if errcode.Of(err) != errcode.Usage || !strings.Contains(err.Error(), "gate-a") {
		t.Fatalf("start with another ID: %v, want USAGE naming gate-a", err)
	}
	// Another ID at another address is a node that was killed while
	// joining, before the configuration naming it reached it: it starts,
	// and waits for the leader to add it.
	joining := other
	joining.RaftAddr, joining.HTTPAddr = "127.0.0.1:0", "127.0.0.1:0"
	jn := NewNode(joining)
	if err := jn.Start(ctx); err != nil {
		t.Fatalf("start of a node not yet in the configuration: %v", err)
	}
	if err := jn.Shutdown(); err != nil {
		t.Fatal(err)
	}
	again := StartTestNode(t, cfg)
	waitSelfRecorded(t, again, cfg.ID)
	if after := stateBytes(t, again); !bytes.Equal(after, before) {
		t.Fatalf("state after the refused start differs:\n%s\n%s", before, after)
	}
}

// A gate from before GET /v1/fences answers it with a plain 404: Fences
// reads them from the whole state instead, so publish works against it
// during a rolling upgrade.
func TestFencesFromAnOlderGate(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	n, g := soloGate(t, "old")
	if _, err := g.AdvanceFence(ctx, FenceBenchmark, 7); err != nil {
		t.Fatal(err)
	}
	target, _ := url.Parse(n.URL())
	proxy := httputil.NewSingleHostReverseProxy(target)
	var asked atomic.Int64
	old := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/fences" {
			asked.Add(1)
			http.NotFound(w, r)
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	defer old.Close()
	c := NewClient(old.URL)
	defer c.Close()
	f, err := c.Fences(ctx)
	if err != nil || f.Benchmark != 7 || asked.Load() != 1 {
		t.Fatalf("fences from an older gate: %+v %v (asked /v1/fences %d times)", f, err, asked.Load())
	}
	if f, err := g.Fences(ctx); err != nil || f.Benchmark != 7 {
		t.Fatalf("fences: %+v %v", f, err)
	}
}

// Replacing a dead member by one with a new ID: without removing the dead
// one, the newcomer is a fourth voter and losing one more member loses the
// quorum (2 of 4); removed first, the cluster of three survives it. A
// remove of a non-member or of the last member is BAD_INPUT and changes
// nothing; status shows each node's Raft configuration.
func TestRemoveMemberReplacesADeadOne(t *testing.T) {
	if testing.Short() {
		t.Skip("4 nodes")
	}
	ctx := ctxT(t, 90*time.Second)
	c := MakeCluster(t, 3)
	cl := c.Client()
	registerVerified(t, ctx, cl, "before", 2, 0, 0)
	c.Stop(2) // node3 dies for good

	if err := cl.RemoveMember(ctx, "node9"); errcode.Of(err) != errcode.BadInput || !strings.Contains(err.Error(), "node3") {
		t.Fatalf("remove of a non-member: %v, want BAD_INPUT listing the members", err)
	}
	// With node3 gone, FastTiming's 100 ms lease may depose the leader
	// mid-commit on a loaded machine: INDETERMINATE, and the remove is
	// made again unless the configuration shows it committed.
	for try := 1; ; try++ {
		err := cl.RemoveMember(ctx, "node3")
		if err == nil {
			break
		}
		if code := errcode.Of(err); (code != errcode.Indeterminate && code != errcode.NotLeader) || try == 5 {
			t.Fatalf("remove node3: %v", err)
		}
		gone := true
		for _, sv := range c.Leader(10 * time.Second).Raft().GetConfiguration().Configuration().Servers {
			gone = gone && sv.ID != "node3"
		}
		if gone {
			break
		}
	}
	cfg := TestConfig(t.TempDir(), "node4")
	cfg.Join, cfg.Bootstrap = c.Configs[0].HTTPAddr+","+c.Configs[1].HTTPAddr, false
	n4 := StartTestNode(t, cfg)
	leader := c.Leader(10 * time.Second)
	st, err := NewClient(leader.URL()).Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, v := range st.Voters {
		ids = append(ids, v.ID+"/"+v.Suffrage)
	}
	if got := strings.Join(ids, ","); got != "node1/Voter,node2/Voter,node4/Voter" {
		t.Fatalf("leader's configuration %s, want node1, node2, node4", got)
	}
	// node2 dies too: node1 and node4 are 2 of 3.
	c.Stop(1)
	cl4 := NewClient(n4.URL() + "," + c.Nodes[0].URL())
	defer cl4.Close()
	registerVerified(t, ctx, cl4, "after", 2, 0, 0)

	// The last member cannot be removed.
	solo, sc := soloGate(t, "solo")
	for !solo.IsLeader() {
		time.Sleep(20 * time.Millisecond)
	}
	if err := sc.RemoveMember(ctx, "solo"); errcode.Of(err) != errcode.BadInput {
		t.Fatalf("remove the only member: %v, want BAD_INPUT", err)
	}
	if st, err := sc.Status(ctx); err != nil || len(st.Voters) != 1 {
		t.Fatalf("after the refused remove: %+v %v", st, err)
	}
}

// A join the gate refuses changes nothing: not the state, not the Raft
// configuration. Before, POST /v1/join added the voter first and checked
// the command after, so a body naming no reachable member left a single
// node a candidate for good (and a 3-node cluster one loss from stopping).
func TestRefusedJoinChangesNothing(t *testing.T) {
	ctx := ctxT(t, 60*time.Second)
	n, cl := soloGate(t, "solo")
	registerVerified(t, ctx, cl, "r1", 2, 0, 0)
	// A Raft listener that answers the cluster's identity handshake
	// (the leader's probe runs it), with no gate beside it, once the
	// raise recorded the identity.
	waitFor(t, "the raise to record the cluster identity", func() bool { return n.ClusterID() != "" })
	waitRaised(t, n)
	before := stateBytes(t, n)
	s, err := listenTCPStream("127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	listening := raft.NewNetworkTransport(identityStream(s, n.ClusterID()), 1, 2*time.Second, io.Discard)
	defer listening.Close()
	free := func() string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		return l.Addr().String()
	}()
	for _, c := range []struct{ name, path, body, want string }{
		{"no httpAddr", "/v1/join", `{"type":"join","id":"evil","raftAddr":"127.0.0.1:1","httpAddr":""}`, "httpAddr"},
		{"not host:port", "/v1/join", `{"type":"join","id":"evil","raftAddr":"nonsense","httpAddr":"nonsense"}`, "raftAddr"},
		{"port 0", "/v1/join", `{"type":"join","id":"evil","raftAddr":"127.0.0.1:0","httpAddr":"127.0.0.1:80"}`, "port 0"},
		{"nothing at raftAddr", "/v1/join", `{"type":"join","id":"evil","raftAddr":"` + free + `","httpAddr":"` + free + `"}`, "nothing accepts"},
		{"no gate at httpAddr", "/v1/join", `{"type":"join","id":"evil","raftAddr":"` + string(listening.LocalAddr()) + `","httpAddr":"` + free + `"}`, "cannot reach its httpAddr"},
		{"another gate's address", "/v1/join", `{"type":"join","id":"evil","raftAddr":"` + n.RaftAddr() + `","httpAddr":"` + n.HTTPAddr() + `"}`, "is solo"},
		{"garbage through commands", "/v1/commands", `{"type":"join","id":"solo","raftAddr":"nonsense","httpAddr":"nonsense"}`, "raftAddr"},
	} {
		t.Run(c.name, func(t *testing.T) {
			resp, err := http.Post(n.URL()+c.path, "application/json", strings.NewReader(c.body))
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			// Unreachable is 503 GATE_UNAVAILABLE (the joiner retries
			// it), the rest 400 BAD_INPUT.
			status, code := http.StatusBadRequest, "BAD_INPUT"
			if strings.HasPrefix(c.name, "no gate") {
				status, code = http.StatusServiceUnavailable, "GATE_UNAVAILABLE"
			}
			if resp.StatusCode != status || !strings.Contains(string(b), code) || !strings.Contains(string(b), c.want) {
				t.Fatalf("%s: %d %s; want %d %s naming %q", c.body, resp.StatusCode, b, status, code, c.want)
			}
			st, err := cl.Status(ctx)
			if err != nil || len(st.Voters) != 1 || st.Voters[0].ID != "solo" || !n.IsLeader() {
				t.Fatalf("after the refused join: %+v %v, leader %v", st, err, n.IsLeader())
			}
		})
	}
	if after := stateBytes(t, n); !bytes.Equal(after, before) {
		t.Fatalf("state changed by refused joins:\n%s\n%s", before, after)
	}
	registerVerified(t, ctx, cl, "r2", 2, 0, 0)
}

// Something other than a gate answering 200 (a wrong --gate) is USAGE,
// not INTERNAL; a run whose lists do not match its world size is
// BAD_DOCUMENT, which the worker relies on.
func TestClientRefusesNonGateAnswers(t *testing.T) {
	ctx := ctxT(t, 10*time.Second)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/v1/runs/") {
			io.WriteString(w, `{"id":"r1","worldSize":2,"assignment":[[0]],"attestations":[null]}`)
			return
		}
		io.WriteString(w, "<html>hello</html>")
	}))
	defer srv.Close()
	c := NewClient(srv.URL)
	defer c.Close()
	if _, err := c.Fences(ctx); errcode.Of(err) != errcode.Usage || !strings.Contains(err.Error(), "not a gate's answer") {
		t.Fatalf("fences from a web page: %v, want USAGE", err)
	}
	if _, err := c.AdvanceFence(ctx, FenceTombstone, 5); errcode.Of(err) != errcode.Usage {
		t.Fatalf("write answered by a web page: %v, want USAGE", err)
	}
	if _, err := c.Run(ctx, "r1"); errcode.Of(err) != errcode.BadDocument {
		t.Fatalf("malformed run: %v, want BAD_DOCUMENT", err)
	}
}

// A cluster that lost a majority for good: the survivor cannot elect a
// leader; restarted with Recover it is a single-node cluster holding every
// command it had, and takes writes and new members.
func TestRecoverAfterLosingTheMajority(t *testing.T) {
	if testing.Short() {
		t.Skip("3-node cluster")
	}
	ctx := ctxT(t, 60*time.Second)
	c := MakeCluster(t, 3)
	cl := c.Client()
	registerVerified(t, ctx, cl, "kept", 2, 0, 0)
	leader := c.Leader(5 * time.Second)
	var survivor int
	for i, n := range c.Nodes {
		if n != leader {
			survivor = i
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for stateBytes(t, c.Nodes[survivor]) == nil || !bytes.Equal(stateBytes(t, c.Nodes[survivor]), stateBytes(t, leader)) {
		if time.Now().After(deadline) {
			t.Fatal("the survivor did not catch up")
		}
		time.Sleep(20 * time.Millisecond)
	}
	want := stateBytes(t, leader)
	for i := range c.Nodes {
		if i != survivor {
			c.Stop(i)
		}
	}
	cfg := c.Configs[survivor]
	c.Stop(survivor)
	// A plain restart waits for a quorum that never comes.
	plain := NewNode(cfg)
	if err := plain.Start(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	if plain.IsLeader() {
		t.Fatal("one member of three became leader alone")
	}
	if err := plain.Shutdown(); err != nil {
		t.Fatal(err)
	}
	cfg.Recover = true
	n := StartTestNode(t, cfg)
	deadline = time.Now().Add(10 * time.Second)
	for !n.IsLeader() {
		if time.Now().After(deadline) {
			t.Fatal("the recovered node did not become leader")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := stateBytes(t, n); !bytes.Equal(got, want) {
		t.Fatalf("state after recovery differs:\n%s\n%s", want, got)
	}
	rc := NewClient(n.URL())
	defer rc.Close()
	registerVerified(t, ctx, rc, "after", 2, 0, 0)
	st, err := rc.Status(ctx)
	if err != nil || len(st.Voters) != 1 {
		t.Fatalf("configuration after recovery: %+v %v", st, err)
	}
	// A second --recover (left in the restart command) is refused: with
	// members rejoined, it would split the cluster again.
	if err := n.Shutdown(); err != nil {
		t.Fatal(err)
	}
	err = NewNode(cfg).Start(ctx)
	if errcode.Of(err) != errcode.Usage || !strings.Contains(err.Error(), "recovered already") {
		t.Fatalf("second recover: %v, want USAGE", err)
	}
	cfg.Recover = false
	StartTestNode(t, cfg)
}

// With RaftLogJSON, hashicorp/raft's own lines (a fresh single node warns
// that its heartbeat timed out before it elects itself) are JSON objects.
func TestRaftLogJSON(t *testing.T) {
	var buf syncBuf
	cfg := TestConfig(t.TempDir(), "json")
	cfg.RaftLog, cfg.RaftLogJSON = &buf, true
	n := StartTestNode(t, cfg)
	deadline := time.Now().Add(10 * time.Second)
	for !n.IsLeader() || buf.String() == "" {
		if time.Now().After(deadline) {
			t.Fatalf("no raft line logged (leader %v)", n.IsLeader())
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil || m["@level"] == nil || m["@module"] != "raft" {
			t.Fatalf("raft line %q is not hclog JSON (%v)", l, err)
		}
	}
}

// syncBuf is a bytes.Buffer safe for raft's logger and the test at once.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A member that accepts connections and never answers held every request
// sent to it for good, while the members after it in the list answered:
// a worker sidecar stayed READY on a cancelled run, and `run checkpoint`
// never returned. Each attempt is bounded now: reads move on to the next
// member (even once RetryFor has passed), writes already sent are
// INDETERMINATE, and a long-poll gets its wait on top of the bound.
func TestClientSkipsSilentMember(t *testing.T) {
	ctx := ctxT(t, 60*time.Second)
	n, good := soloGate(t, "live")
	root := runOfOneRank(t, ctx, good, 60_000)

	// The bound is a second: the live member's answers, which must come
	// within one attempt, had 300 ms, and a loaded machine can take
	// that.
	c := NewClient(testnet.NewSilent(t, true).Addr + "," + n.URL())
	defer c.Close()
	c.AttemptTimeout = time.Second
	c.RetryFor = 50 * time.Millisecond // shorter than one attempt: the next member still gets its turn
	start := time.Now()
	run, err := c.Run(ctx, "r")
	if err != nil || run.Root != root {
		t.Fatalf("read past a silent member: %+v %v", run, err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("read took %s", d)
	}

	// A write sent to the silent member may or may not have reached a
	// leader behind it: INDETERMINATE, not a hang.
	w := NewClient(testnet.NewSilent(t, true).Addr + "," + n.URL())
	defer w.Close()
	w.AttemptTimeout = time.Second
	if _, err := w.CancelRun(ctx, "r", "x"); !IsIndeterminate(err) {
		t.Fatalf("write to a silent member: %v, want INDETERMINATE", err)
	}

	// A long-poll is not cut at the attempt bound: the server holds it
	// for the poll asked, and the answer comes back. The poll goes
	// through a proxy that says when it arrived; the barrier opens three
	// attempt bounds later, and no retry may hide a cut poll. (It waited
	// for a closed barrier's answer at the poll's end before, with 200 ms
	// for the answer to come, which a loaded machine took.)
	polled := make(chan struct{}, 1)
	target, _ := url.Parse(n.URL())
	rp := httputil.NewSingleHostReverseProxy(target)
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/wait") {
			select {
			case polled <- struct{}{}:
			default:
			}
		}
		rp.ServeHTTP(w, r)
	}))
	defer proxy.Close()
	lp := NewClient(proxy.URL)
	defer lp.Close()
	lp.AttemptTimeout = 200 * time.Millisecond
	lp.RetryFor = -1
	waited := make(chan error, 1)
	go func() {
		s, err := lp.WaitRun(ctx, "r")
		if err == nil && s.Barrier != BarrierOpen {
			err = fmt.Errorf("barrier %s", s.Barrier)
		}
		waited <- err
	}()
	select {
	case <-polled:
	case err := <-waited:
		t.Fatalf("the long-poll ended before it reached the gate: %v", err)
	}
	time.Sleep(3 * lp.AttemptTimeout)
	if _, err := good.Attest(ctx, "r", 0, root, shardsOf("rel", 2)); err != nil {
		t.Fatal(err)
	}
	if err := <-waited; err != nil {
		t.Fatalf("long-poll with a short attempt bound, answered when the barrier opened %s after it began: %v, want the open barrier", 3*lp.AttemptTimeout, err)
	}
}
