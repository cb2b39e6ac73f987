package trainer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/shardproof/shardproof/internal/canon"
	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/objstore"
	"github.com/shardproof/shardproof/objstore/faults"
	"github.com/shardproof/shardproof/raftgate"
	"github.com/shardproof/shardproof/stage"
	"github.com/shardproof/shardproof/stage/stagetest"
)

// env is a real file store with two synthetic releases and a real
// single-node gate on loopback.
type env struct {
	t          *testing.T
	ctx        context.Context
	store      objstore.Store
	gate       *raftgate.Client
	gen1, gen2 stage.Result
}

func newEnv(t *testing.T, options ...func(*raftgate.Config)) *env {
	t.Helper()
	e := &env{t: t, ctx: context.Background(), store: stagetest.Store(t)}
	e.gen1 = stagetest.Synth(t, e.store, 2000, 8, 1)
	e.gen2 = stagetest.Synth(t, e.store, 2000, 8, 2)
	cfg := raftgate.TestConfig(t.TempDir(), "gate1")
	for _, o := range options {
		o(&cfg)
	}
	n := raftgate.StartTestNode(t, cfg)
	e.gate = raftgate.NewClient(n.URL())
	t.Cleanup(e.gate.Close)
	// Leading, and at its build's cluster version (which it raises soon
	// after it leads), so that a test runs against the version it names.
	deadline := time.Now().Add(10 * time.Second)
	for !n.IsLeader() || n.ClusterVersion() != n.BuildVersion() {
		if time.Now().After(deadline) {
			t.Fatalf("gate did not lead at cluster version %d (leader %v, cluster version %d)", n.BuildVersion(), n.IsLeader(), n.ClusterVersion())
		}
		time.Sleep(20 * time.Millisecond)
	}
	return e
}

// register records res as VERIFIED at the current fences. The gate only
// sees report summaries; these tests exercise the worker, so the report
// digest stands for a report the publish tests produce for real.
func (e *env) register(res stage.Result, tomb uint64) {
	e.t.Helper()
	shards := make([]manifest.Digest, len(res.Release.Shards))
	for i, s := range res.Release.Shards {
		shards[i] = s.Digest
	}
	_, err := e.gate.Register(e.ctx, &raftgate.Register{Root: res.Root, Shards: shards, Report: &raftgate.ReportSummary{
		Digest: manifest.Sum([]byte("report of " + res.Root.String())), Verdict: manifest.Verified,
		DatasetSnapshot: res.Snapshot, TombstoneWatermark: tomb,
	}})
	if err != nil {
		e.t.Fatalf("register: %v", err)
	}
}

func (e *env) publish(res stage.Result, expected uint64) {
	e.t.Helper()
	e.register(res, 0)
	if _, err := e.gate.Publish(e.ctx, "main", res.Root, expected, 0); err != nil {
		e.t.Fatalf("publish: %v", err)
	}
}

func (e *env) createRun(id string, world int, timeout time.Duration) *raftgate.RunSummary {
	e.t.Helper()
	s, err := e.gate.CreateRun(e.ctx, &raftgate.CreateRun{Run: id, Alias: "main", WorldSize: world, BarrierTimeoutMs: timeout.Milliseconds()})
	if err != nil {
		e.t.Fatalf("create run: %v", err)
	}
	return s
}

func (e *env) worker(run string, rank int, s objstore.Store, g Gate) *Worker {
	e.t.Helper()
	c, err := OpenCache(e.t.TempDir())
	if err != nil {
		e.t.Fatal(err)
	}
	if s == nil {
		s = e.store
	}
	if g == nil {
		g = e.gate
	}
	return NewWorker(Config{
		Gate: g, Store: s, Cache: c, Run: run, Rank: rank, PollInterval: 50 * time.Millisecond, Verify: DecodeVerifier(s),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
}

// runAll runs workers in once mode concurrently and returns their errors.
func runAll(ctx context.Context, ws ...*Worker) []error {
	errs := make([]error, len(ws))
	var wg sync.WaitGroup
	for i, w := range ws {
		wg.Go(func() { errs[i] = w.Run(ctx, true) })
	}
	wg.Wait()
	return errs
}

func wantCode(t *testing.T, err error, code errcode.Code) {
	t.Helper()
	if got := errcode.Of(err); got != code {
		t.Fatalf("code %s (%v), want %s", got, err, code)
	}
}

func TestFourRanksAttestAndBarrierOpens(t *testing.T) {
	e := newEnv(t)
	e.publish(e.gen1, 0)
	e.createRun("r1", 4, 20*time.Second)
	var ws []*Worker
	for r := range 4 {
		ws = append(ws, e.worker("r1", r, nil, nil))
	}
	readyFile := filepath.Join(t.TempDir(), "ready.json")
	ws[0].cfg.ReadyFile = readyFile
	srv := httptest.NewServer(ws[0].Handler())
	defer srv.Close()
	if code, _ := get(t, srv.URL+"/readyz"); code != http.StatusServiceUnavailable {
		t.Fatalf("/readyz before the barrier: %d, want 503", code)
	}
	for r, err := range runAll(e.ctx, ws...) {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	run, err := e.gate.Run(e.ctx, "r1")
	if err != nil {
		t.Fatal(err)
	}
	if run.Barrier != raftgate.BarrierOpen || run.Attested != 4 {
		t.Fatalf("barrier %s with %d attested", run.Barrier, run.Attested)
	}
	label := e.gen1.Root.String()
	seen := map[manifest.Digest]bool{}
	for r, w := range ws {
		st := w.Status()
		if st.State != StateReady || st.Root != e.gen1.Root || len(st.Shards) != 2 {
			t.Fatalf("rank %d status %+v", r, st)
		}
		for _, d := range st.Shards {
			seen[d] = true
			if _, err := os.Stat(w.cfg.Cache.Path(d)); err != nil {
				t.Fatalf("rank %d: shard %s not in the cache: %v", r, d, err)
			}
		}
		if v := value(w.Metrics().VerifiedShardRatio.WithLabelValues(label)); v != 1 {
			t.Fatalf("rank %d verified ratio %v", r, v)
		}
	}
	if len(seen) != 8 {
		t.Fatalf("ranks cover %d distinct shards, want 8", len(seen))
	}
	b, err := os.ReadFile(readyFile)
	if err != nil {
		t.Fatalf("ready file: %v", err)
	}
	var rf Status
	if err := json.Unmarshal(b, &rf); err != nil || rf.State != StateReady || rf.Root != e.gen1.Root || len(rf.Files) != 2 {
		t.Fatalf("ready file %s: %v", b, err)
	}
	for _, f := range rf.Files {
		if got, _ := os.ReadFile(f.Path); manifest.Sum(got) != f.Digest {
			t.Fatalf("ready file names %s for %s, which does not hold its bytes", f.Path, f.ID)
		}
	}
	if code, body := get(t, srv.URL+"/readyz"); code != http.StatusOK || !strings.Contains(body, label) {
		t.Fatalf("/readyz after the barrier: %d %q", code, body)
	}
	_, body := get(t, srv.URL+"/metrics")
	for _, m := range []string{
		`shardproof_worker_verified_shard_ratio{release="` + label + `"} 1`,
		`shardproof_worker_read_bytes_total{release="` + label + `"}`,
		// Series of the release are there from the start, at zero.
		`shardproof_worker_cache_corruptions_total{release="` + label + `"} 0`,
		`shardproof_worker_cache_kept_total{release="` + label + `"} 0`,
		`shardproof_worker_cache_evictions_total{release="` + label + `"} 0`,
		`shardproof_worker_cache_evicted_bytes_total{release="` + label + `"} 0`,
		`shardproof_worker_barrier_wait_seconds{release="` + label + `"}`,
		`shardproof_worker_ready{release="` + label + `"} 1`,
	} {
		if !strings.Contains(body, m) {
			t.Errorf("/metrics lacks %s", m)
		}
	}
	if _, err := e.gate.AdmitCheckpoint(e.ctx, "r1", 0, e.gen1.Root); err != nil {
		t.Fatalf("checkpoint at step 0: %v", err)
	}
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// Workers started before an alias switch and workers added or replaced
// after it all read the run's root, never the alias's.
func TestAliasSwitchScaleOutAndRecoveryReadRunRoot(t *testing.T) {
	e := newEnv(t)
	e.publish(e.gen1, 0)
	e.createRun("r1", 2, 20*time.Second)
	// Ranks 0 and 1 are sidecars started before the alias switch.
	var wg sync.WaitGroup
	defer wg.Wait()
	before := make([]*Worker, 2)
	stop := make([]context.CancelFunc, 2)
	for r := range before {
		ctx, cancel := context.WithCancel(e.ctx)
		stop[r] = cancel
		defer cancel()
		before[r] = e.worker("r1", r, nil, nil)
		wg.Go(func() {
			if err := before[r].Run(ctx, false); err != nil {
				t.Errorf("sidecar rank %d: %v", r, err)
			}
		})
	}
	for _, w := range before {
		waitState(t, w, StateReady)
	}
	e.publish(e.gen2, 1)
	if al, _ := e.gate.Alias(e.ctx, "main"); al.Root != e.gen2.Root {
		t.Fatal("alias did not move to generation 2")
	}

	// Scale out to 4 ranks after the switch: the sidecars re-verify their
	// new assignments, the added ranks verify theirs, all against the
	// run's root.
	assignment := [][]int{{0, 4}, {1, 5}, {2, 6}, {3, 7}}
	if _, err := e.gate.Reassign(e.ctx, &raftgate.Reassign{Run: "r1", WorldSize: 4, Assignment: assignment}); err != nil {
		t.Fatal(err)
	}
	added := []*Worker{e.worker("r1", 2, nil, nil), e.worker("r1", 3, nil, nil)}
	for r, err := range runAll(e.ctx, added...) {
		if err != nil {
			t.Fatalf("added rank %d: %v", r+2, err)
		}
	}
	for _, w := range before {
		waitState(t, w, StateReady)
	}

	// Rank 1 dies; its replacement starts with an empty cache.
	stop[1]()
	if _, err := e.gate.Reassign(e.ctx, &raftgate.Reassign{Run: "r1", WorldSize: 4, Assignment: assignment, Reset: []int{1}}); err != nil {
		t.Fatal(err)
	}
	repl := e.worker("r1", 1, nil, nil)
	if err := repl.Run(e.ctx, true); err != nil {
		t.Fatalf("replacement: %v", err)
	}
	// before[0] is a sidecar polling every 50 ms: it sees the barrier
	// open again at its next poll, not at once.
	waitState(t, before[0], StateReady)
	for i, w := range []*Worker{before[0], added[0], added[1], repl} {
		if st := w.Status(); st.Root != e.gen1.Root || st.State != StateReady || len(st.Shards) != 2 {
			t.Fatalf("worker %d: %+v, want READY on generation 1's root %s", i, st, e.gen1.Root)
		}
	}
	if st := before[1].Status(); st.Root != e.gen1.Root {
		t.Fatalf("dead rank 1 had read %s", st.Root)
	}
	run, _ := e.gate.Run(e.ctx, "r1")
	if run.Barrier != raftgate.BarrierOpen || run.Root != e.gen1.Root || run.Epoch != 2 {
		t.Fatalf("run barrier %s root %s epoch %d", run.Barrier, run.Root, run.Epoch)
	}
	stop[0]()
}

// misdirected is a gate whose run reads name another root, as a worker
// that followed the alias instead of its run would.
type misdirected struct {
	Gate
	root manifest.Digest
}

func (m misdirected) Run(ctx context.Context, id string) (*raftgate.Run, error) {
	r, err := m.Gate.Run(ctx, id)
	if err == nil && r.State != raftgate.RunFailed {
		r.Root = m.root
	}
	return r, err
}

func TestWorkerReportingAnotherRootFailsRunBeforeStepZero(t *testing.T) {
	e := newEnv(t)
	e.publish(e.gen1, 0)
	e.publish(e.gen2, 1)
	if _, err := e.gate.Rollback(e.ctx, "main", e.gen1.Root, 2); err != nil {
		t.Fatal(err)
	}
	e.createRun("r1", 2, 20*time.Second)
	good := e.worker("r1", 0, nil, nil)
	bad := e.worker("r1", 1, nil, misdirected{e.gate, e.gen2.Root})
	errs := runAll(e.ctx, good, bad)
	wantCode(t, errs[1], errcode.RootMismatch)
	wantCode(t, errs[0], errcode.RootMismatch)
	run, _ := e.gate.Run(e.ctx, "r1")
	if run.State != raftgate.RunFailed || run.FailCode != string(errcode.RootMismatch) || run.Barrier == raftgate.BarrierOpen {
		t.Fatalf("run %s/%s barrier %s", run.State, run.FailCode, run.Barrier)
	}
	_, err := e.gate.AdmitCheckpoint(e.ctx, "r1", 0, e.gen1.Root)
	wantCode(t, err, errcode.RunFailed)
	if n := value(bad.Metrics().RootMismatches.WithLabelValues(e.gen2.Root.String())); n != 1 {
		t.Fatalf("root mismatches on the misdirected worker: %v", n)
	}
	if st := good.Status(); st.State != StateFailed || st.Code != string(errcode.RootMismatch) {
		t.Fatalf("good worker status %+v", st)
	}
}

func TestBarrierTimeoutWithOneRankMissing(t *testing.T) {
	e := newEnv(t)
	e.publish(e.gen1, 0)
	// The deadline runs from the run's creation, and a loaded machine may
	// reach it before both ranks have verified their shards. Such a try
	// says nothing of a barrier with two ranks waiting: try again with a
	// deadline twice as far.
	for timeout := 1500 * time.Millisecond; ; timeout *= 2 {
		id := fmt.Sprintf("r-%d", timeout.Milliseconds())
		e.createRun(id, 3, timeout)
		errs := runAll(e.ctx, e.worker(id, 0, nil, nil), e.worker(id, 1, nil, nil))
		run, err := e.gate.Run(e.ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if run.Attested < 2 && timeout < time.Minute {
			t.Logf("%s: %d of 2 ranks attested within %s (%v); again with a longer deadline", id, run.Attested, timeout, errs)
			continue
		}
		for _, err := range errs {
			wantCode(t, err, errcode.BarrierTimeout)
		}
		if run.State != raftgate.RunFailed || run.Attested != 2 || run.FailCode != string(errcode.BarrierTimeout) {
			t.Fatalf("run %s (%s) with %d attested", run.State, run.FailCode, run.Attested)
		}
		return
	}
}

// A shard whose stored bytes are truncated or swapped is found by the
// worker that reads it; that rank never attests, so the barrier cannot
// open, and the other ranks are unaffected.
func TestTruncatedOrSwappedShardDiscoveredByWorker(t *testing.T) {
	e0 := newEnv(t)
	e0.publish(e0.gen1, 0)
	for _, tc := range []struct {
		name string
		wrap func(objstore.Store, string) objstore.Store
		code errcode.Code
	}{
		{"truncated", func(s objstore.Store, key string) objstore.Store {
			return &faults.Truncate{Store: s, Match: func(k string) bool { return k == key }, N: 1000}
		}, errcode.SizeMismatch},
		{"swapped", func(s objstore.Store, key string) objstore.Store {
			return &swap{Store: s, key: key, with: e0.gen1.Release.Shards[5]}
		}, errcode.SizeMismatch},
		{"bit flip", func(s objstore.Store, key string) objstore.Store {
			return &faults.BitFlip{Store: s, Match: func(k string) bool { return k == key }, Offset: 500, Bit: 0}
		}, errcode.DigestMismatch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := e0
			run := "r-" + strings.ReplaceAll(tc.name, " ", "-")
			e.createRun(run, 2, 20*time.Second)
			// Round-robin: shard 3 belongs to rank 1.
			broken := tc.wrap(e.store, e.gen1.Release.Shards[3].Digest.BlobKey())
			w0, w1 := e.worker(run, 0, broken, nil), e.worker(run, 1, broken, nil)
			// Rank 1 ends on its own, at the broken shard; rank 0 is
			// stopped once it waits at the barrier rank 1 never reaches,
			// rather than by a deadline a loaded machine may reach first.
			ctx, cancel := context.WithCancel(e.ctx)
			errs := make([]error, 2)
			var wg sync.WaitGroup
			wg.Go(func() { errs[0] = w0.Run(ctx, true) })
			defer func() { cancel(); wg.Wait() }()
			errs[1] = w1.Run(ctx, true)
			wantCode(t, errs[1], tc.code)
			waitState(t, w0, StateWaiting)
			cancel()
			wg.Wait()
			var sf *ShardsFailedError
			if !errors.As(errs[1], &sf) || len(sf.Failures) != 1 {
				t.Fatalf("rank 1 error %v: want one shard failure", errs[1])
			}
			wantCode(t, errs[0], errcode.BarrierClosed)
			r, _ := e.gate.Run(e.ctx, run)
			if r.Attested != 1 || r.Attestations[1] != nil || r.Barrier == raftgate.BarrierOpen {
				t.Fatalf("run attested=%d barrier=%s", r.Attested, r.Barrier)
			}
			if n := value(w1.Metrics().ShardFailures.WithLabelValues(e.gen1.Root.String(), string(tc.code))); n != 1 {
				t.Fatalf("shard failure metric %v", n)
			}
			if _, err := os.Stat(w1.cfg.Cache.Path(e.gen1.Release.Shards[3].Digest)); !os.IsNotExist(err) {
				t.Fatal("a bad shard reached the cache")
			}
		})
	}
}

// An old cache serving a previous release's parts: every entry is
// detected, refetched from the run's exact versions, and counted.
func TestStaleCacheFromPreviousReleaseIsRefetched(t *testing.T) {
	e := newEnv(t)
	e.publish(e.gen2, 0)
	e.createRun("r1", 1, 20*time.Second)
	w := e.worker("r1", 0, nil, nil)
	for i, d := range e.gen2.Release.Shards {
		old := stagetest.ShardBytes(t, e.store, e.gen1.Release.Shards[i])
		if err := os.WriteFile(w.cfg.Cache.Path(d.Digest), old, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// A stale listing must not matter either: the worker never lists.
	stale := &faults.StaleList{Store: e.store, Omit: func(string) bool { return true }}
	w.cfg.Store = stale
	if err := w.Run(e.ctx, true); err != nil {
		t.Fatal(err)
	}
	label := e.gen2.Root.String()
	if n := value(w.Metrics().CacheCorruptions.WithLabelValues(label)); n != 8 {
		t.Fatalf("cache corruptions %v, want 8", n)
	}
	for _, d := range e.gen2.Release.Shards {
		if res, err := w.cfg.Cache.Fill(e.ctx, e.store, d); err != nil || !res.Hit {
			t.Fatalf("%s after the run: %+v %v", d.ID, res, err)
		}
	}
	// A second start of the same rank is served from the cache.
	w2 := NewWorker(w.cfg)
	w2.cfg.Metrics = NewMetrics()
	if err := w2.Run(e.ctx, true); err != nil {
		t.Fatal(err)
	}
	if h := value(w2.Metrics().CacheHits.WithLabelValues(label)); h != 8 {
		t.Fatalf("cache hits on restart %v, want 8", h)
	}
}

// A sidecar stays ready while the run's permit is open, turns not ready
// when a fence advance closes it, ready again after a zero-hit recheck,
// re-attests when its rank is reset, and exits with the run's code when
// the run is cancelled.
func TestSidecarFollowsPermitReassignAndCancel(t *testing.T) {
	e := newEnv(t)
	e.publish(e.gen1, 0)
	e.createRun("r1", 1, 20*time.Second)
	w := e.worker("r1", 0, nil, nil)
	w.cfg.ReadyFile = filepath.Join(t.TempDir(), "ready.json")
	done := make(chan error, 1)
	go func() { done <- w.Run(e.ctx, false) }()
	waitState(t, w, StateReady)
	if _, err := os.Stat(w.cfg.ReadyFile); err != nil {
		t.Fatalf("ready file while READY: %v", err)
	}

	if _, err := e.gate.AdvanceFence(e.ctx, raftgate.FenceTombstone, 10); err != nil {
		t.Fatal(err)
	}
	waitState(t, w, StateBlocked)
	if _, err := os.Stat(w.cfg.ReadyFile); !os.IsNotExist(err) {
		t.Fatalf("ready file while BLOCKED: %v", err)
	}
	if st := w.Status(); st.Code != string(errcode.PermitClosed) {
		t.Fatalf("blocked status %+v", st)
	}
	_, err := e.gate.AdmitCheckpoint(e.ctx, "r1", 1, e.gen1.Root)
	wantCode(t, err, errcode.PermitClosed)
	if _, err := e.gate.Recheck(e.ctx, &raftgate.RecheckCmd{Root: e.gen1.Root, Kind: raftgate.FenceTombstone, Value: 10, Report: manifest.Sum([]byte("recheck at 10")), Hits: 0}); err != nil {
		t.Fatal(err)
	}
	waitState(t, w, StateReady)

	epoch := w.Status().Epoch
	if _, err := e.gate.Reassign(e.ctx, &raftgate.Reassign{Run: "r1", WorldSize: 1, Reset: []int{0}}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for w.Status().Epoch == epoch || w.Status().State != StateReady {
		if time.Now().After(deadline) {
			t.Fatalf("worker did not re-attest after reset: %+v", w.Status())
		}
		time.Sleep(20 * time.Millisecond)
	}

	// Cancelled without a reason: the error says none was given.
	if _, err := e.gate.CancelRun(e.ctx, "r1", ""); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		wantCode(t, err, errcode.RunFailed)
		if !strings.HasSuffix(err.Error(), "run r1 was cancelled: no reason given") {
			t.Fatalf("sidecar of a run cancelled without a reason: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("sidecar did not exit after the run was cancelled")
	}
}

func waitState(t *testing.T, w *Worker, state string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for w.Status().State != state {
		if time.Now().After(deadline) {
			t.Fatalf("worker state %+v, want %s", w.Status(), state)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitStates waits for w to be in one of states and returns its status.
func waitStates(t *testing.T, w *Worker, states ...string) Status {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st := w.Status()
		if slices.Contains(states, st.State) {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("worker state %+v, want one of %v", st, states)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// value reads a gauge's or counter's current value.
func value(m prometheus.Metric) float64 {
	var d dto.Metric
	if err := m.Write(&d); err != nil {
		panic(err)
	}
	if d.Gauge != nil {
		return d.Gauge.GetValue()
	}
	return d.Counter.GetValue()
}

// Mixed schemas across shards: one shard's bytes match its descriptor but
// were written with another record schema. Only decoding can tell; the
// worker holding it refuses to attest.
func TestMixedSchemaShardDiscoveredByWorker(t *testing.T) {
	e := newEnv(t)
	rows := stagetest.ShardRows(t, e.store, e.gen1, 1)
	rec := stage.BuildRows(rows)
	defer rec.Release()
	other := stage.DefaultSchema()
	other.Fields[4].Name = "language"
	od, err := canon.SchemaDigest(other)
	if err != nil {
		t.Fatal(err)
	}
	as, err := canon.ArrowSchema(other)
	if err != nil {
		t.Fatal(err)
	}
	orec := array.NewRecordBatch(as, rec.Columns(), rec.NumRows())
	defer orec.Release()
	rel := stagetest.CloneRelease(e.gen1.Release)
	rel.Shards[1] = stagetest.WriteShard(t, e.store, rel.Shards[1].ID, orec, other, od, stage.ParquetOptions{})
	mixed := stagetest.Reissue(t, e.store, e.gen1, rel, false)
	e.publish(mixed, 0)
	e.createRun("r1", 2, 20*time.Second)

	w1 := e.worker("r1", 1, nil, nil)
	ctx, cancel := context.WithTimeout(e.ctx, 5*time.Second)
	defer cancel()
	wantCode(t, w1.Run(ctx, true), errcode.SchemaMismatch)
	if run, _ := e.gate.Run(e.ctx, "r1"); run.Attestations[1] != nil {
		t.Fatal("rank 1 attested a shard with another schema")
	}
	// The bytes themselves are intact: a byte-only check would pass.
	bytesOnly := e.worker("r1", 1, nil, nil)
	bytesOnly.cfg.Verify = nil
	w0 := e.worker("r1", 0, nil, nil)
	for r, err := range runAll(ctx, w0, bytesOnly) {
		if err != nil {
			t.Fatalf("rank %d without decoding: %v", r, err)
		}
	}
}

// swap serves another shard's bytes (the latest version of with's key)
// for every read of key: a store or cache layer that mixed up two parts.
type swap struct {
	objstore.Store
	key  string
	with manifest.Shard
}

func (w *swap) Get(ctx context.Context, key string, v objstore.Version) (io.ReadCloser, error) {
	if key == w.key {
		return w.Store.Get(ctx, w.with.Digest.BlobKey(), objstore.Version(w.with.ObjectVersion))
	}
	return w.Store.Get(ctx, key, v)
}

// A reassignment that drops a rank's attestation while the rank waits at
// the barrier (scale-out during startup) makes it verify its new shards
// and attest again, rather than wait for the deadline.
func TestReassignWhileWaitingAtBarrier(t *testing.T) {
	e := newEnv(t)
	e.publish(e.gen1, 0)
	e.createRun("r1", 2, 20*time.Second)
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	w0 := e.worker("r1", 0, nil, nil)
	done := make(chan error, 1)
	go func() { done <- w0.Run(ctx, false) }()
	waitState(t, w0, StateWaiting)
	if _, err := e.gate.Reassign(e.ctx, &raftgate.Reassign{Run: "r1", WorldSize: 2, Assignment: [][]int{{0, 1, 2, 3}, {4, 5, 6, 7}}}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := e.worker("r1", 1, nil, nil).Run(e.ctx, true); err != nil {
		t.Fatalf("rank 1: %v", err)
	}
	waitState(t, w0, StateReady)
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("barrier opened after %s", d)
	}
	st := w0.Status()
	if len(st.Shards) != 4 || st.Shards[3] != e.gen1.Release.Shards[3].Digest || st.Epoch != 1 {
		t.Fatalf("rank 0 after the reassignment: %+v", st)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("sidecar: %v", err)
	}
}

// A reassignment makes a rank verify its new assignment, but the shards
// it keeps, whose cache entries are unchanged since it verified them, are
// not hashed and decoded again: a scale-out must not cost every rank a
// re-read of its whole cache. A kept entry that changed meanwhile is
// verified again. Rank 0 is an init container waiting at the barrier,
// which (unlike a ready sidecar) does not stat its entries every poll.
func TestReassignKeepsVerifiedEntries(t *testing.T) {
	e := newEnv(t)
	e.publish(e.gen1, 0)
	e.createRun("r1", 2, 20*time.Second)
	var mu sync.Mutex
	calls := map[manifest.Digest]int{}
	w0 := e.worker("r1", 0, nil, nil)
	decode := w0.cfg.Verify
	w0.cfg.Verify = func(ctx context.Context, path string, rel *manifest.Release, desc manifest.Shard) error {
		mu.Lock()
		calls[desc.Digest]++
		mu.Unlock()
		return decode(ctx, path, rel, desc)
	}
	done := make(chan error, 1)
	go func() { done <- w0.Run(e.ctx, true) }()
	waitState(t, w0, StateWaiting)
	run, err := e.gate.Run(e.ctx, "r1")
	if err != nil {
		t.Fatal(err)
	}
	old0, old1 := run.Assignment[0], run.Assignment[1]
	if len(old0) < 3 || len(old1) < 2 {
		t.Fatalf("assignment %v", run.Assignment)
	}
	// Rank 0 keeps three of its shards and takes two of rank 1's; the
	// third kept one is rewritten with the same bytes (another file)
	// while rank 0 waits, so it must be verified again.
	keep, take := old0[:3], old1[:2]
	assignment := [][]int{append(slices.Clone(keep), take...), append(slices.Clone(old0[3:]), old1[2:]...)}
	changed := w0.cfg.Cache.Path(e.gen1.Release.Shards[keep[2]].Digest)
	b, err := os.ReadFile(changed)
	if err != nil {
		t.Fatal(err)
	}
	tmp := changed + ".rewrite"
	if err := os.WriteFile(tmp, b, 0o444); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, changed); err != nil {
		t.Fatal(err)
	}
	if _, err := e.gate.Reassign(e.ctx, &raftgate.Reassign{Run: "r1", WorldSize: 2, Assignment: assignment}); err != nil {
		t.Fatal(err)
	}
	if err := e.worker("r1", 1, nil, nil).Run(e.ctx, true); err != nil {
		t.Fatalf("rank 1 after the reassignment: %v", err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("rank 0: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("rank 0 did not finish: %+v", w0.Status())
	}
	mu.Lock()
	defer mu.Unlock()
	want := map[int]int{keep[0]: 1, keep[1]: 1, keep[2]: 2, take[0]: 1, take[1]: 1}
	for i, n := range want {
		if got := calls[e.gen1.Release.Shards[i].Digest]; got != n {
			t.Errorf("shard %d verified %d times, want %d (calls %v)", i, got, n, calls)
		}
	}
	if st := w0.Status(); st.State != StateReady || st.Epoch != 1 || st.Verified != 5 || len(st.Shards) != 5 {
		t.Errorf("status %+v, want READY at epoch 1 with 5 shards verified", st)
	}
	if got := value(w0.Metrics().CacheKept.WithLabelValues(e.gen1.Root.String())); got != 2 {
		t.Errorf("shardproof_worker_cache_kept_total %v, want 2", got)
	}
}

// An init container does not let the trainer start on a run whose permit
// a fence advance closed.
func TestOnceRefusesClosedPermit(t *testing.T) {
	e := newEnv(t)
	e.publish(e.gen1, 0)
	e.createRun("r1", 1, 20*time.Second)
	if _, err := e.gate.AdvanceFence(e.ctx, raftgate.FenceBenchmark, 3); err != nil {
		t.Fatal(err)
	}
	w := e.worker("r1", 0, nil, nil)
	wantCode(t, w.Run(e.ctx, true), errcode.PermitClosed)
	if st := w.Status(); st.State != StateFailed || st.Code != string(errcode.PermitClosed) {
		t.Fatalf("status %+v", st)
	}
}

// publishedOn is an env on gate, a client of a gate the test started: a
// store with one synthetic release of four shards, gen1, published as
// main.
func publishedOn(t *testing.T, gate *raftgate.Client) *env {
	t.Helper()
	s := stagetest.Store(t)
	gen1 := stagetest.Synth(t, s, 1200, 4, 1)
	e := &env{t: t, ctx: context.Background(), store: s, gate: gate, gen1: gen1}
	e.publish(gen1, 0)
	return e
}

// rank0Waiting publishes a release through gate (publishedOn), creates
// run r1 of two ranks with the barrier timeout given, and starts rank 0
// (--once), which talks to the gate through g (nil: gate itself); it
// returns once rank 0 waits at the barrier, with the channel its Run's
// error arrives on.
func rank0Waiting(t *testing.T, gate *raftgate.Client, timeout time.Duration, g Gate) (*env, *Worker, chan error) {
	t.Helper()
	e := publishedOn(t, gate)
	e.createRun("r1", 2, timeout)
	w0 := e.worker("r1", 0, nil, g)
	done := make(chan error, 1)
	go func() { done <- w0.Run(e.ctx, true) }()
	waitState(t, w0, StateWaiting)
	return e, w0, done
}

// stillWaiting fails t if rank 0, waiting at the barrier while the gate
// is down, has ended: done, where its Run's error arrives, holds it.
func stillWaiting(t *testing.T, done chan error) {
	t.Helper()
	select {
	case err := <-done:
		t.Fatalf("rank 0 gave up while the gate was down: %v", err)
	default:
	}
}

// rank1OpensTheBarrier runs rank 1 of run (--once), which must attest
// and pass the barrier, after what happened while rank 0 waited there;
// then rank 0, whose Run's error done receives, must pass it too.
func rank1OpensTheBarrier(t *testing.T, e *env, run string, done chan error, after string) {
	t.Helper()
	if err := e.worker(run, 1, nil, nil).Run(e.ctx, true); err != nil {
		t.Fatalf("rank 1 after %s: %v", after, err)
	}
	if err := <-done; err != nil {
		t.Fatalf("rank 0 across %s: %v", after, err)
	}
}

// Workers talk to a three-node gate; the leader dies while rank 0 waits
// at the barrier. The new leader holds the attestation and the run's
// root, and rank 1 opens the barrier through it.
func TestLeaderLossWhileWaiting(t *testing.T) {
	c := raftgate.MakeCluster(t, 3)
	e, w0, done := rank0Waiting(t, c.Client(), 30*time.Second, nil)
	for i, n := range c.Nodes {
		if n != nil && n.IsLeader() {
			c.Stop(i)
		}
	}
	c.Leader(10 * time.Second)
	rank1OpensTheBarrier(t, e, "r1", done, "the leader change")
	if st := w0.Status(); st.State != StateReady || st.Root != e.gen1.Root {
		t.Fatalf("rank 0: %+v", st)
	}
}

// The only gate member is down for longer than a wait slice while rank 0
// waits at the barrier: slices that get no answer at all are no news, as
// slices that find the barrier closed are; once the member is back, rank
// 1 attests and rank 0 passes the barrier.
func TestGateOutageWhileWaiting(t *testing.T) {
	c := raftgate.MakeCluster(t, 1)
	e, w0, done := rank0Waiting(t, c.Client(), 60*time.Second, nil)
	c.Stop(0)
	time.Sleep(5 * time.Second) // more than two wait slices (2 s each)
	stillWaiting(t, done)
	c.Restart(0)
	c.Leader(10 * time.Second)
	rank1OpensTheBarrier(t, e, "r1", done, "the outage")
	if st := w0.Status(); st.State != StateReady || st.Root != e.gen1.Root {
		t.Fatalf("rank 0: %+v", st)
	}
}

// haltedGate answers WaitRun and Run GATE_HALTED while down is set, as a
// client whose every gate URL is a halted member does, counting them.
type haltedGate struct {
	Gate
	down   atomic.Bool
	failed atomic.Int64
}

func (g *haltedGate) WaitRun(ctx context.Context, id string) (*raftgate.RunSummary, error) {
	if g.down.Load() {
		g.failed.Add(1)
		return nil, errcode.New(errcode.GateHalted, "this gate member stopped applying the log at entry 9")
	}
	return g.Gate.WaitRun(ctx, id)
}

func (g *haltedGate) Run(ctx context.Context, id string) (*raftgate.Run, error) {
	if g.down.Load() {
		g.failed.Add(1)
		return nil, errcode.New(errcode.GateHalted, "this gate member stopped applying the log at entry 9")
	}
	return g.Gate.Run(ctx, id)
}

// Every gate member a rank waiting at the barrier names halts (a gate
// left on an older build): a halted member used to answer NOT_LEADER,
// which the client retried into GATE_UNAVAILABLE, no news for the rank;
// it answers GATE_HALTED now, which is no news either. The rank keeps
// waiting, and passes the barrier once the gate serves again.
func TestBarrierWaitSurvivesHaltedGate(t *testing.T) {
	cl := raftgate.MakeCluster(t, 1).Client()
	g := &haltedGate{Gate: cl}
	e, w0, done := rank0Waiting(t, cl, 60*time.Second, g)
	g.down.Store(true)
	deadline := time.Now().Add(20 * time.Second)
	for g.failed.Load() < 3 {
		select {
		case err := <-done:
			t.Fatalf("rank 0 ended while every gate member was halted: %v", err)
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d failed gate reads in 20 s", g.failed.Load())
		}
	}
	g.down.Store(false)
	rank1OpensTheBarrier(t, e, "r1", done, "the halt")
	if st := w0.Status(); st.State != StateReady || st.Root != e.gen1.Root {
		t.Fatalf("rank 0: %+v", st)
	}
}

// An init container whose ready file cannot be written fails, even with
// the barrier open: the trainer it would let start reads that file.
func TestOnceFailsWithoutItsReadyFile(t *testing.T) {
	e := newEnv(t)
	e.publish(e.gen1, 0)
	e.createRun("r1", 1, 20*time.Second)
	w := e.worker("r1", 0, nil, nil)
	w.cfg.ReadyFile = filepath.Join(t.TempDir(), "missing", "ready.json")
	err := w.Run(e.ctx, true)
	wantCode(t, err, errcode.IO)
	run, gerr := e.gate.Run(e.ctx, "r1")
	if gerr != nil || run.Barrier != raftgate.BarrierOpen {
		t.Fatalf("the barrier: %+v %v (the rank attested before the file failed)", run, gerr)
	}
}

// heldGet holds every Get while hold is set, until release is closed: a
// store whose reads are slow enough to watch the worker mid-refetch.
type heldGet struct {
	objstore.Store
	hold    sync.Mutex
	held    bool
	release chan struct{}
}

func (h *heldGet) Get(ctx context.Context, key string, v objstore.Version) (io.ReadCloser, error) {
	h.hold.Lock()
	held := h.held
	h.hold.Unlock()
	if held {
		select {
		case <-h.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return h.Store.Get(ctx, key, v)
}

// A ready sidecar notices a cache entry that changes under it: damaged in
// place, it is not ready while the entry is fetched again (counted as a
// corruption), and ready once the entry holds the shard's bytes; deleted,
// it is fetched again; replaced by the same bytes (another worker sharing
// the cache), it is kept, re-hashed, not counted.
func TestSidecarRefetchesEntryChangedWhileReady(t *testing.T) {
	e := newEnv(t)
	e.publish(e.gen1, 0)
	e.createRun("r1", 1, 20*time.Second)
	h := &heldGet{Store: e.store, release: make(chan struct{})}
	w := e.worker("r1", 0, h, nil)
	w.cfg.ReadyFile = filepath.Join(t.TempDir(), "ready.json")
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx, false) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("sidecar: %v", err)
		}
	}()
	waitState(t, w, StateReady)
	label := e.gen1.Root.String()
	m := w.Metrics()
	shards := e.gen1.Release.Shards
	want := func(d manifest.Shard) {
		t.Helper()
		if res, err := w.cfg.Cache.Fill(e.ctx, e.store, d); err != nil || !res.Hit {
			t.Fatalf("%s: entry after the refetch: %+v %v", d.ID, res, err)
		}
	}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !ok() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: status %+v, corruptions %v", what, w.Status(), value(m.CacheCorruptions.WithLabelValues(label)))
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	// Damaged in place, same size: not ready while the fetch is held.
	h.hold.Lock()
	h.held = true
	h.hold.Unlock()
	path := w.cfg.Cache.Path(shards[0].Digest)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0xff
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	waitState(t, w, StateVerifying)
	if w.Ready() || !strings.Contains(w.Status().Reason, shards[0].ID) {
		t.Fatalf("mid-refetch status %+v", w.Status())
	}
	if _, err := os.Stat(w.cfg.ReadyFile); !os.IsNotExist(err) {
		t.Fatalf("ready file while the entry is fetched again: %v", err)
	}
	h.hold.Lock()
	h.held = false
	h.hold.Unlock()
	close(h.release)
	waitState(t, w, StateReady)
	if n := value(m.CacheCorruptions.WithLabelValues(label)); n != 1 {
		t.Fatalf("cache corruptions %v, want 1", n)
	}
	want(shards[0])
	if _, err := os.Stat(w.cfg.ReadyFile); err != nil {
		t.Fatalf("ready file after the refetch: %v", err)
	}

	// Deleted: fetched again, not a corruption.
	read := value(m.ReadBytes.WithLabelValues(label))
	if err := os.Remove(w.cfg.Cache.Path(shards[1].Digest)); err != nil {
		t.Fatal(err)
	}
	waitFor("deleted entry fetched again", func() bool {
		return value(m.ReadBytes.WithLabelValues(label)) == read+float64(shards[1].Size) && w.Ready()
	})
	want(shards[1])

	// The same bytes renamed over it: re-hashed, a hit, nothing fetched.
	hits, read := value(m.CacheHits.WithLabelValues(label)), value(m.ReadBytes.WithLabelValues(label))
	p2 := w.cfg.Cache.Path(shards[2].Digest)
	same, err := os.ReadFile(p2)
	if err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(w.cfg.Cache.Dir(), "tmp", "same")
	if err := os.WriteFile(tmp, same, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, p2); err != nil {
		t.Fatal(err)
	}
	waitFor("replaced entry re-hashed", func() bool { return value(m.CacheHits.WithLabelValues(label)) == hits+1 && w.Ready() })
	if n, r := value(m.CacheCorruptions.WithLabelValues(label)), value(m.ReadBytes.WithLabelValues(label)); n != 1 || r != read {
		t.Fatalf("after a same-bytes replacement: corruptions %v (want 1), read %v bytes (want %v)", n, r, read)
	}
}

// shortAssignment is a gate whose run answers list fewer assignment rows
// and attestations than the world size, as a foreign or broken answer
// could.
type shortAssignment struct{ Gate }

func (g shortAssignment) Run(ctx context.Context, id string) (*raftgate.Run, error) {
	r, err := g.Gate.Run(ctx, id)
	if err == nil {
		r.Assignment, r.Attestations = r.Assignment[:1], r.Attestations[:1]
	}
	return r, err
}

// A malformed run from the gate fails the worker with BAD_DOCUMENT; it
// used to index the assignment by rank and panic.
func TestWorkerRefusesMalformedRun(t *testing.T) {
	e := newEnv(t)
	e.publish(e.gen1, 0)
	e.createRun("r1", 2, 20*time.Second)
	w := e.worker("r1", 1, nil, shortAssignment{e.gate})
	wantCode(t, w.Run(e.ctx, true), errcode.BadDocument)
	if st := w.Status(); st.State != StateFailed || st.Code != string(errcode.BadDocument) {
		t.Fatalf("status %+v", st)
	}
}

// A sidecar's run is cancelled and pruned between two of its polls (an
// operator's `run cancel` then `gate prune --older-than 0s`). The gate
// answers RUN_PRUNED from then on; the sidecar took that for an
// unreachable gate and stayed READY for good, /readyz green on a run
// whose permit was released. It fails with RUN_PRUNED now.
func TestSidecarFailsWhenItsRunIsPruned(t *testing.T) {
	e := newEnv(t)
	e.publish(e.gen1, 0)
	e.createRun("r1", 1, 20*time.Second)
	c, err := OpenCache(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	w := NewWorker(Config{
		Gate: e.gate, Store: e.store, Cache: c, Run: "r1", Rank: 0, PollInterval: time.Second,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	done := make(chan error, 1)
	go func() { done <- w.Run(e.ctx, false) }()
	waitState(t, w, StateReady)
	if _, err := e.gate.CancelRun(e.ctx, "r1", "done"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond) // the prune's cutoff must be past the run's end
	if res, err := e.gate.Prune(e.ctx, 0); err != nil || len(res.Runs) != 1 {
		t.Fatalf("prune: %+v %v", res, err)
	}
	select {
	case err := <-done:
		wantCode(t, err, errcode.RunPruned)
	case <-time.After(5 * time.Second):
		t.Fatalf("sidecar still %s after its run was pruned", w.Status().State)
	}
	if st := w.Status(); st.State != StateFailed || st.Code != string(errcode.RunPruned) {
		t.Fatalf("status %+v", st)
	}
}

// waitingWhenTheGateStops runs rank 0 of a 2-rank run with the given
// barrier timeout (and worker DeadlineGrace, 0 for the default) until it
// waits at the barrier, then stops the run's single gate node. The
// client retries for 300 ms, much less than the 2 s wait slice. run is
// the run's ID; done receives rank 0's result.
//
// The deadline runs from the run's creation, and a loaded machine may
// reach a short one before rank 0 has verified its shards and attested.
// Such a try says nothing of a rank waiting when the gate stops: it
// tries again, with a new run and a deadline twice as far.
func waitingWhenTheGateStops(t *testing.T, barrier, grace time.Duration) (c *raftgate.TestCluster, e *env, run string, done chan error) {
	t.Helper()
	c = raftgate.MakeCluster(t, 1)
	g := c.Client()
	g.RetryFor = 300 * time.Millisecond
	e = publishedOn(t, g)
	for try := 1; ; try, barrier = try+1, 2*barrier {
		run = fmt.Sprintf("r%d", try)
		e.createRun(run, 2, barrier)
		w0 := e.worker(run, 0, nil, nil)
		w0.cfg.DeadlineGrace = grace
		ended := make(chan error, 1)
		go func() { ended <- w0.Run(e.ctx, true) }()
		st := waitStates(t, w0, StateWaiting, StateFailed)
		if st.State == StateFailed && st.Code == string(errcode.BarrierTimeout) && barrier < time.Minute {
			<-ended
			t.Logf("%s: rank 0 attested after the %s deadline (%s); again with a longer one", run, barrier, st.Reason)
			continue
		}
		if st.State != StateWaiting {
			t.Fatalf("worker state %+v, want %s", st, StateWaiting)
		}
		c.Stop(0)
		return c, e, run, ended
	}
}

// The gate is down for longer than the client keeps retrying but shorter
// than the run's deadline, while rank 0 waits at the barrier with wait
// slices longer than the client's retries (as `worker --poll 5s` makes
// 25 s slices against 15 s of retries). The slice's request ended with
// GATE_UNAVAILABLE before the slice did, and the worker failed, where a
// slice that ran out first was no news. Both are no news now.
func TestGateOutageLongerThanRetries(t *testing.T) {
	c, e, run, done := waitingWhenTheGateStops(t, 60*time.Second, 0)
	time.Sleep(3 * time.Second)
	stillWaiting(t, done)
	c.Restart(0)
	c.Leader(10 * time.Second)
	rank1OpensTheBarrier(t, e, run, done, "the outage")
}

// A rank waiting at the barrier while the gate is gone for good gives up
// once the run's deadline and the grace have passed, with
// GATE_UNAVAILABLE, instead of waiting for ever: only a gate that answers
// could fail the run.
func TestGateGoneForGoodAtTheBarrier(t *testing.T) {
	_, _, _, done := waitingWhenTheGateStops(t, 2*time.Second, 500*time.Millisecond)
	select {
	case err := <-done:
		wantCode(t, err, errcode.GateUnavailable)
		if !strings.Contains(err.Error(), "deadline passed") {
			t.Fatalf("err = %v, want it to say the deadline passed", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("rank 0 still waits 30 s after a 2 s barrier deadline with the gate gone")
	}
}

// lostAnswers loses the answer of the first attestations it sends
// (applied, when applied is set): the leader died after committing, or
// before, and the client reports INDETERMINATE.
type lostAnswers struct {
	Gate
	lose    atomic.Int32
	applied bool
	// halted answers as a client whose every gate member halted, not
	// as one whose answer was lost with a leader.
	halted bool
}

func (g *lostAnswers) AttestEpoch(ctx context.Context, run string, rank int, epoch uint64, root manifest.Digest, shards []manifest.Digest) (*raftgate.RunSummary, error) {
	if g.lose.Add(-1) >= 0 {
		if g.applied {
			g.Gate.AttestEpoch(ctx, run, rank, epoch, root, shards)
		}
		if g.halted {
			return nil, errcode.New(errcode.GateHalted, "this gate member stopped applying the log at entry 9")
		}
		return nil, errcode.New(errcode.Indeterminate, "POST /v1/commands: connection lost after the command was sent; retrying it is safe")
	}
	return g.Gate.AttestEpoch(ctx, run, rank, epoch, root, shards)
}

// The leader dies while a rank attests (kill -9 during startup): the
// attestation's outcome is INDETERMINATE, which the client documents as
// safe to send again. The worker failed with exit 5, an init container
// that had verified every shard; it sends the attestation again and the
// barrier opens, whether the lost one was applied or not. Every gate
// member the worker names halted (GATE_HALTED, until they are upgraded)
// is no answer either.
func TestAttestationWithLostAnswerIsSentAgain(t *testing.T) {
	e := newEnv(t)
	e.publish(e.gen1, 0)
	for i, c := range []struct{ applied, halted bool }{{true, false}, {false, false}, {false, true}} {
		applied := c.applied
		run := fmt.Sprintf("r%d", i)
		e.createRun(run, 2, 30*time.Second)
		g := &lostAnswers{Gate: e.gate, applied: applied, halted: c.halted}
		g.lose.Store(2)
		errs := runAll(e.ctx, e.worker(run, 0, nil, g), e.worker(run, 1, nil, nil))
		for r, err := range errs {
			if err != nil {
				t.Fatalf("applied=%v rank %d: %v", applied, r, err)
			}
		}
		if sum, err := e.gate.WaitRun(e.ctx, run); err != nil || sum.Attested != 2 {
			t.Fatalf("applied=%v: %+v %v", applied, sum, err)
		}
	}
}

// permitsWatcher calls seen with every Permit read, before it is made.
type permitsWatcher struct {
	Gate
	seen func()
}

func (g *permitsWatcher) Permit(ctx context.Context, id string) (*raftgate.Permit, error) {
	g.seen()
	return g.Gate.Permit(ctx, id)
}

// A fence advance closed the run's permit before its barrier opened. The
// worker claimed READY (ready file written, /readyz green, ready gauge 1)
// as soon as the barrier opened and only then read the permit and turned
// BLOCKED: a trainer watching the ready file could start on a run that
// may not checkpoint. The permit is read before the state is set now.
func TestNeverReadyWithAClosedPermit(t *testing.T) {
	e := newEnv(t)
	e.publish(e.gen1, 0)
	e.createRun("r1", 1, 20*time.Second)
	if _, err := e.gate.AdvanceFence(e.ctx, raftgate.FenceBenchmark, 3); err != nil {
		t.Fatal(err)
	}
	var w *Worker
	var claimed []string
	g := &permitsWatcher{Gate: e.gate}
	g.seen = func() {
		if st := w.Status(); st.State == StateReady {
			claimed = append(claimed, "state READY")
		}
		if _, err := os.Stat(w.cfg.ReadyFile); err == nil {
			claimed = append(claimed, "ready file written")
		}
	}
	w = e.worker("r1", 0, nil, g)
	w.cfg.ReadyFile = filepath.Join(t.TempDir(), "ready.json")
	wantCode(t, w.Run(e.ctx, true), errcode.PermitClosed)
	if len(claimed) > 0 {
		t.Fatalf("before the permit was read: %v", claimed)
	}
}

// flakyPermits fails Permit reads with GATE_UNAVAILABLE while down is set.
type flakyPermits struct {
	Gate
	down atomic.Bool
}

func (g *flakyPermits) Permit(ctx context.Context, id string) (*raftgate.Permit, error) {
	if g.down.Load() {
		return nil, errcode.New(errcode.GateUnavailable, "no gate answered GET /v1/permits/%s within 15s", id)
	}
	return g.Gate.Permit(ctx, id)
}

// A ready sidecar whose permit read fails (the gate went away between its
// read of the run and of the permits, for longer than the client retries)
// failed for good with GATE_UNAVAILABLE, where a failed read of the run
// kept the last state. Both keep it now.
func TestSidecarSurvivesFailedPermitRead(t *testing.T) {
	e := newEnv(t)
	e.publish(e.gen1, 0)
	e.createRun("r1", 1, 20*time.Second)
	g := &flakyPermits{Gate: e.gate}
	w := e.worker("r1", 0, nil, g)
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx, false) }()
	waitState(t, w, StateReady)
	g.down.Store(true)
	select {
	case err := <-done:
		t.Fatalf("sidecar ended while the permit read failed: %v", err)
	case <-time.After(time.Second): // 20 polls
	}
	g.down.Store(false)
	if _, err := e.gate.AdvanceFence(e.ctx, raftgate.FenceBenchmark, 3); err != nil {
		t.Fatal(err)
	}
	waitState(t, w, StateBlocked)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// countingGate counts the WaitRun and the Run calls made through it.
type countingGate struct {
	Gate
	waitRuns, runs atomic.Int64
}

func (g *countingGate) WaitRun(ctx context.Context, id string) (*raftgate.RunSummary, error) {
	g.waitRuns.Add(1)
	return g.Gate.WaitRun(ctx, id)
}

func (g *countingGate) Run(ctx context.Context, id string) (*raftgate.Run, error) {
	g.runs.Add(1)
	return g.Gate.Run(ctx, id)
}

// A gate client that does not retry (RetryFor < 0) gives up at once while
// the gate is down: a worker waiting at the barrier took each such answer
// as no news and asked again at once, thousands of times a second. It
// waits a poll between two questions now.
func TestBarrierWaitDoesNotSpinOnAGateDown(t *testing.T) {
	c := raftgate.MakeCluster(t, 1)
	g := c.Client()
	e := publishedOn(t, g)
	e.createRun("r1", 2, 60*time.Second)
	g.RetryFor = -1
	wc := &countingGate{Gate: g}
	w0 := e.worker("r1", 0, nil, wc) // polls every 50 ms
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- w0.Run(ctx, true) }()
	waitState(t, w0, StateWaiting)
	c.Stop(0)
	n0 := wc.waitRuns.Load()
	time.Sleep(time.Second)
	if n := wc.waitRuns.Load() - n0; n > 100 {
		t.Fatalf("%d barrier waits in 1 s with the gate down and a 50 ms poll", n)
	}
	stillWaiting(t, done)
	cancel()
	<-done
}

// waitForItsReassignment waits until w, a rank outside its run's world
// size, says it waits for a reassignment that includes it.
func waitForItsReassignment(t *testing.T, w *Worker) {
	t.Helper()
	want := fmt.Sprintf("waiting for a reassignment that includes rank %d", w.cfg.Rank)
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(w.Status().Reason, want) {
		if time.Now().After(deadline) {
			t.Fatalf("rank %d before the reassignment: %+v", w.cfg.Rank, w.Status())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// An orchestrator scaling out may start a new rank before it sends the
// reassignment that includes it: the rank waits for it, without
// verifying or attesting anything meanwhile, and then joins the run. A
// rank that no reassignment includes fails with USAGE once its wait is
// over.
func TestScaleOutRankStartedBeforeReassign(t *testing.T) {
	e := newEnv(t)
	e.publish(e.gen1, 0)
	e.createRun("r1", 2, 20*time.Second)
	ctx, cancel := context.WithCancel(e.ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	side := []*Worker{e.worker("r1", 0, nil, nil), e.worker("r1", 1, nil, nil)}
	for r, w := range side {
		wg.Go(func() {
			if err := w.Run(ctx, false); err != nil {
				t.Errorf("sidecar rank %d: %v", r, err)
			}
		})
	}
	for _, w := range side {
		waitState(t, w, StateReady)
	}

	early := e.worker("r1", 2, nil, nil)
	done := make(chan error, 1)
	go func() { done <- early.Run(e.ctx, true) }()
	waitForItsReassignment(t, early)
	if st := early.Status(); st.State != StateStarting || st.Verified != 0 || len(st.Shards) != 0 {
		t.Fatalf("rank 2 waiting: %+v, want STARTING with nothing verified", st)
	}
	rec := httptest.NewRecorder()
	early.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
	if body := rec.Body.String(); rec.Code != 503 || !strings.Contains(body, "not ready: STARTING: waiting for a reassignment that includes rank 2 (world size 2)") {
		t.Fatalf("/readyz of a rank waiting for its reassignment: %d %q", rec.Code, body)
	}
	if _, err := e.gate.Reassign(e.ctx, &raftgate.Reassign{Run: "r1", WorldSize: 3, Assignment: [][]int{{0, 3, 6}, {1, 4, 7}, {2, 5}}}); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("rank 2 after the reassignment: %v", err)
	}
	st := early.Status()
	if st.State != StateReady || st.Epoch != 1 || len(st.Shards) != 2 || st.Shards[1] != e.gen1.Release.Shards[5].Digest || st.Root != e.gen1.Root {
		t.Fatalf("rank 2 after the reassignment: %+v", st)
	}

	// Rank 3 is in no reassignment.
	late := e.worker("r1", 3, nil, nil)
	late.cfg.RankWait = 300 * time.Millisecond
	err := late.Run(e.ctx, true)
	wantCode(t, err, errcode.Usage)
	if !strings.Contains(err.Error(), "world size 3") || !strings.Contains(err.Error(), "waited") {
		t.Fatalf("rank 3: %v", err)
	}
	cancel()
}

// scaleIn is a gate that removes rank 2 from the run it reads (a
// reassignment to two ranks) just before it answers its second read of
// it: while the worker verified, as far as the worker can tell.
type scaleIn struct {
	Gate
	gate  *raftgate.Client
	t     *testing.T
	reads atomic.Int32
}

func (g *scaleIn) Run(ctx context.Context, id string) (*raftgate.Run, error) {
	if g.reads.Add(1) == 2 {
		if _, err := g.gate.Reassign(ctx, &raftgate.Reassign{Run: id, WorldSize: 2, Assignment: [][]int{{0, 2, 4, 6}, {1, 3, 5, 7}}}); err != nil {
			g.t.Errorf("scale in: %v", err)
		}
	}
	return g.Gate.Run(ctx, id)
}

// A rank that was part of the run and is removed while it verifies left
// the run (a sidecar stops, DONE; an init container, whose trainer must
// not start, fails with USAGE at once): it is not a rank waiting for its
// scale-out.
func TestScaleInWhileVerifying(t *testing.T) {
	e := newEnv(t)
	e.publish(e.gen1, 0)
	e.createRun("r1", 3, 20*time.Second)
	w := e.worker("r1", 2, nil, &scaleIn{Gate: e.gate, gate: e.gate, t: t})
	if err := w.Run(e.ctx, false); err != nil {
		t.Fatalf("sidecar scaled in: %v", err)
	}
	if st := w.Status(); st.State != StateDone || st.Epoch != 1 {
		t.Fatalf("sidecar scaled in: %+v, want DONE at epoch 1", st)
	}
	e.createRun("r2", 3, 20*time.Second)
	err := e.worker("r2", 2, nil, &scaleIn{Gate: e.gate, gate: e.gate, t: t}).Run(e.ctx, true)
	wantCode(t, err, errcode.Usage)
	if !strings.Contains(err.Error(), "removed from run r2") {
		t.Fatalf("init container scaled in: %v", err)
	}
}

// flakyRuns fails Run reads with GATE_UNAVAILABLE (or halted: with
// GATE_HALTED, as a client whose every gate URL is a halted member does)
// while down is set, counting them.
type flakyRuns struct {
	Gate
	halted bool
	down   atomic.Bool
	failed atomic.Int64
}

func (g *flakyRuns) Run(ctx context.Context, id string) (*raftgate.Run, error) {
	if g.down.Load() {
		g.failed.Add(1)
		if g.halted {
			return nil, errcode.New(errcode.GateHalted, "this gate member stopped applying the log at entry 9")
		}
		return nil, errcode.New(errcode.GateUnavailable, "no gate answered GET /v1/runs/%s within 15s", id)
	}
	return g.Gate.Run(ctx, id)
}

// A rank waiting for the reassignment that includes it failed for good
// with GATE_UNAVAILABLE at the first read no gate answered (an election
// longer than the client retries, during a wait of up to --rank-wait). A
// gate that does not answer says nothing of the run: the rank keeps
// waiting, and joins once the reassignment comes. So it does through a
// gate whose members it names all halted (GATE_HALTED), until one is
// upgraded and restarted.
func TestRankWaitSurvivesGateDown(t *testing.T) {
	t.Run("unavailable", func(t *testing.T) { testRankWaitSurvivesGateDown(t, false) })
	t.Run("halted", func(t *testing.T) { testRankWaitSurvivesGateDown(t, true) })
}

func testRankWaitSurvivesGateDown(t *testing.T, halted bool) {
	e := newEnv(t)
	e.publish(e.gen1, 0)
	e.createRun("r1", 2, 20*time.Second)
	g := &flakyRuns{Gate: e.gate, halted: halted}
	w := e.worker("r1", 2, nil, g)
	done := make(chan error, 1)
	go func() { done <- w.Run(e.ctx, true) }()
	waitForItsReassignment(t, w)
	g.down.Store(true)
	deadline := time.Now().Add(10 * time.Second)
	for g.failed.Load() < 3 {
		select {
		case err := <-done:
			t.Fatalf("rank 2 ended while the gate did not answer: %v", err)
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d failed reads of the run in 10 s", g.failed.Load())
		}
	}
	if st := w.Status(); st.State != StateStarting {
		t.Fatalf("rank 2 waiting with the gate down: %+v, want STARTING", st)
	}
	g.down.Store(false)
	if _, err := e.gate.Reassign(e.ctx, &raftgate.Reassign{Run: "r1", WorldSize: 3, Assignment: [][]int{{0, 3, 6}, {1, 4, 7}, {2, 5}}}); err != nil {
		t.Fatal(err)
	}
	// Ranks 0 and 1 attest too, so that the barrier opens.
	for _, err := range runAll(e.ctx, e.worker("r1", 0, nil, nil), e.worker("r1", 1, nil, nil)) {
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := <-done; err != nil {
		t.Fatalf("rank 2 after the reassignment: %v", err)
	}
	if st := w.Status(); st.State != StateReady || st.Epoch != 1 || len(st.Shards) != 2 {
		t.Fatalf("rank 2 after the reassignment: %+v", st)
	}
}

// A ready file is there only while its worker is ready. One left at the
// path by an earlier worker (a crash, the node's previous job, another
// root) is gone before this worker verifies anything, so a trainer
// waiting for the file never takes it for this run's; a sidecar that
// stops removes its own.
func TestReadyFileOnlyWhileThisWorkerIsReady(t *testing.T) {
	e := newEnv(t)
	e.publish(e.gen1, 0)
	e.createRun("r1", 1, 20*time.Second)
	readyFile := filepath.Join(t.TempDir(), "ready.json")
	stale, err := json.Marshal(Status{State: StateReady, Run: "yesterday", Root: e.gen2.Root, Shards: []manifest.Digest{}, Files: []File{}})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(readyFile, stale, 0o644); err != nil {
		t.Fatal(err)
	}

	h := &heldGet{Store: e.store, held: true, release: make(chan struct{})}
	w := e.worker("r1", 0, h, nil)
	w.cfg.ReadyFile = readyFile
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx, false) }()
	waitState(t, w, StateVerifying) // its shard reads are held
	if _, err := os.Stat(readyFile); !os.IsNotExist(err) {
		t.Fatalf("an earlier worker's ready file while this one verifies: %v", err)
	}
	close(h.release)
	waitState(t, w, StateReady)
	b, err := os.ReadFile(readyFile)
	if err != nil {
		t.Fatalf("ready file while READY: %v", err)
	}
	var rf Status
	if err := json.Unmarshal(b, &rf); err != nil || rf.Run != "r1" || rf.Root != e.gen1.Root {
		t.Fatalf("ready file %s: %v", b, err)
	}

	cancel()
	if err := <-done; err != nil {
		t.Fatalf("sidecar stopped: %v", err)
	}
	if _, err := os.Stat(readyFile); !os.IsNotExist(err) {
		t.Fatalf("ready file after the sidecar stopped: %v", err)
	}
}

// The gate stops answering as a rank finishes verifying (an election
// longer than the client's retries, members restarted for an upgrade).
// The read of the run before the attestation failed the rank with
// GATE_UNAVAILABLE, throwing its verification away, where the
// attestation itself would have been sent again until the barrier
// deadline: it now attests at the epoch it verified, and the barrier
// opens.
func TestGateDownAfterVerifyingStillAttests(t *testing.T) {
	e := newEnv(t)
	e.publish(e.gen1, 0)
	e.createRun("r1", 1, 30*time.Second)
	h := &heldGet{Store: e.store, held: true, release: make(chan struct{})}
	g := &flakyRuns{Gate: e.gate}
	w := e.worker("r1", 0, h, g)
	done := make(chan error, 1)
	go func() { done <- w.Run(e.ctx, true) }()
	// The run read (its root pinned); every store read held.
	waitRunRead(t, w)
	g.down.Store(true)
	close(h.release)
	if err := <-done; err != nil {
		t.Fatalf("rank 0 with no answer to its run read after verifying: %v", err)
	}
	if n := g.failed.Load(); n == 0 {
		t.Fatal("the run was never read while the gate was down")
	}
	if st := w.Status(); st.State != StateReady || st.Root != e.gen1.Root || st.Epoch != 0 {
		t.Fatalf("rank 0: %+v", st)
	}
	if sum, err := e.gate.WaitRun(e.ctx, "r1"); err != nil || sum.Attested != 1 {
		t.Fatalf("run: %+v %v", sum, err)
	}
}

// waitRunRead waits until w has read its run: its root is pinned.
func waitRunRead(t *testing.T, w *Worker) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for w.Status().Root.IsZero() {
		if time.Now().After(deadline) {
			t.Fatalf("rank %d did not read its run: %+v", w.cfg.Rank, w.Status())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// heldRuns holds every Run read while hold is set, until release is
// closed.
type heldRuns struct {
	Gate
	hold    atomic.Bool
	release chan struct{}
}

func (g *heldRuns) Run(ctx context.Context, id string) (*raftgate.Run, error) {
	if g.hold.Load() {
		select {
		case <-g.release:
		case <-ctx.Done():
			return nil, errcode.Wrap(errcode.Canceled, ctx.Err(), "GET /v1/runs/%s", id)
		}
	}
	return g.Gate.Run(ctx, id)
}

// Two workers of one rank (a replacement pod started while the old one
// still ran): the old one attested at epoch 0 and waits; a reassignment
// gives the rank other shards, the replacement verifies and attests
// them, and the barrier opens at epoch 1. The old worker saw the barrier
// open and went READY with the epoch-0 file list, which no attestation
// of the run names any more: its trainer read the shards of another
// rank. A barrier open at an epoch other than the one a worker attested
// at is taken only once the rank's attestation is found to list the
// shards this worker verified; otherwise it verifies the new assignment
// and attests again.
func TestOldWorkerOfAReplacedRankDoesNotTakeTheNewAssignment(t *testing.T) {
	e, old := replacedRank(t, [][]int{{0, 1, 2, 3}, {4, 5, 6, 7}})
	run, err := e.gate.Run(e.ctx, "r1")
	if err != nil {
		t.Fatal(err)
	}
	want := make([]manifest.Digest, 4)
	for i := range want {
		want[i] = e.gen1.Release.Shards[i].Digest
	}
	st := old.Status()
	if st.State != StateReady || st.Epoch != 1 || !slices.Equal(st.Shards, want) || !slices.Equal(run.Attestations[0].Shards, want) {
		t.Fatalf("the old worker of rank 0: %+v; the run's attestation of rank 0 %+v, want shards %v", st, run.Attestations[0], want)
	}
}

// A worker restarted into a run whose barrier is open (a sidecar that
// crashed, its pod restarted) attests again; the barrier deadline the
// run was created with has long passed, and an open barrier has none.
// Its attestation's answer lost with a leader (INDETERMINATE) was not
// sent again, since the deadline it was sent again until had passed:
// the rank failed with exit 5 through a leader election.
func TestRestartedWorkerOfARunningRunSendsItsAttestationAgain(t *testing.T) {
	e := newEnv(t)
	e.publish(e.gen1, 0)
	sum := e.createRun("r1", 1, 3*time.Second)
	shards := make([]manifest.Digest, len(e.gen1.Release.Shards))
	for i, s := range e.gen1.Release.Shards {
		shards[i] = s.Digest
	}
	if _, err := e.gate.AttestEpoch(e.ctx, "r1", 0, 0, e.gen1.Root, shards); err != nil {
		t.Fatalf("the rank's first worker: %v", err)
	}
	for time.Now().UnixMilli() <= sum.Deadline+100 {
		time.Sleep(50 * time.Millisecond)
	}
	g := &lostAnswers{Gate: e.gate, applied: true}
	g.lose.Store(2)
	w := e.worker("r1", 0, nil, g)
	if err := w.Run(e.ctx, true); err != nil {
		t.Fatalf("the restarted worker: %v", err)
	}
	if g.lose.Load() >= 0 {
		t.Fatalf("%d lost answers left: the attestation was not sent again", g.lose.Load()+1)
	}
	if st := w.Status(); st.State != StateReady || st.Root != e.gen1.Root {
		t.Fatalf("the restarted worker: %+v", st)
	}
}

// failRuns fails the next n Run reads with GATE_UNAVAILABLE, counting
// them, and passes every later one through.
type failRuns struct {
	Gate
	n      atomic.Int64
	failed atomic.Int64
}

func (g *failRuns) Run(ctx context.Context, id string) (*raftgate.Run, error) {
	if g.n.Add(-1) >= 0 {
		g.failed.Add(1)
		return nil, errcode.New(errcode.GateUnavailable, "no gate answered GET /v1/runs/%s within 15s", id)
	}
	return g.Gate.Run(ctx, id)
}

// A rank that attests at the epoch it verified because no gate answered
// its read of the run after verifying, while a scale-in removed it: it
// has left the run, as it has when the read answers. A gate of version 2
// answers the attestation STALE_EPOCH; one of version 1 (and a cluster
// still at version 1) answers BAD_INPUT ("rank outside"), since it checks
// the rank against the world size before the epoch, and the worker reads
// the run again to tell the two apart.
func TestScaledInRankWhoseRunReadFailedAfterVerifyingLeaves(t *testing.T) {
	for _, gate := range []struct {
		name    string
		options []func(*raftgate.Config)
	}{
		{"gate of version 1", []func(*raftgate.Config){raftgate.OlderBuild(1)}},
		{"newest gate", nil},
	} {
		t.Run(gate.name, func(t *testing.T) { scaledInWhileRunReadFailed(t, newEnv(t, gate.options...)) })
	}
}

func scaledInWhileRunReadFailed(t *testing.T, e *env) {
	e.publish(e.gen1, 0)
	e.createRun("r1", 2, 30*time.Second)
	h := &heldGet{Store: e.store, held: true, release: make(chan struct{})}
	g := &failRuns{Gate: e.gate}
	w := e.worker("r1", 1, h, g)
	done := make(chan error, 1)
	go func() { done <- w.Run(e.ctx, false) }()
	// The run read (its root pinned); every store read held.
	waitRunRead(t, w)
	// The read after verifying is not answered.
	g.n.Store(1)
	if _, err := e.gate.Reassign(e.ctx, &raftgate.Reassign{Run: "r1", WorldSize: 1}); err != nil {
		t.Fatal(err)
	}
	close(h.release)
	if err := <-done; err != nil {
		t.Fatalf("rank 1, scaled in while it verified: %v", err)
	}
	if n := g.failed.Load(); n != 1 {
		t.Fatalf("%d failed reads of the run, want the one after verifying", n)
	}
	if st := w.Status(); st.State != StateDone || st.Epoch != 1 {
		t.Fatalf("rank 1: %+v, want DONE at epoch 1", st)
	}
}

// As above, with a reassignment that gives the replaced rank the same
// shards in another order: the old worker's list is the new attestation
// in another order, and it went READY at epoch 1 with its files in the
// order of epoch 0, where Status.Files are the rank's shards in the
// order its assignment at that epoch gives them (what its trainer reads,
// in that order, as the replacement's does). A barrier open at another
// epoch is taken only when the run assigns this rank the very shard
// indices, in order, that this worker verified.
func TestOldWorkerOfAReplacedRankTakesTheNewAssignmentsOrder(t *testing.T) {
	e, old := replacedRank(t, [][]int{{6, 4, 2, 0}, {1, 3, 5, 7}}) // rank 0 had shards 0, 2, 4, 6
	var want []manifest.Digest
	for _, i := range []int{6, 4, 2, 0} {
		want = append(want, e.gen1.Release.Shards[i].Digest)
	}
	st := old.Status()
	if st.State != StateReady || st.Epoch != 1 || !slices.Equal(st.Shards, want) {
		t.Fatalf("the old worker of rank 0: %+v, want READY at epoch 1 with shards %v", st, want)
	}
	for i, f := range st.Files {
		if f.Digest != want[i] {
			t.Fatalf("the old worker of rank 0: file %d is %s, want %s", i, f.Digest, want[i])
		}
	}
}

// A sidecar whose rank a reassignment leaves with no shards (another
// rank takes them all) watches no cache entry any more: the entries of
// its assignment before are no longer its own, and the trainer or a
// cache cleaner may delete them. It kept statting them every poll, and
// one deleted made it not ready while it fetched, from the store, a
// shard the run assigns to another rank (failing the sidecar if the
// store did not answer).
func TestSidecarWithAnEmptyAssignmentWatchesNoEntry(t *testing.T) {
	e := newEnv(t)
	e.publish(e.gen1, 0)
	e.createRun("r1", 1, 30*time.Second)
	h := &heldGet{Store: e.store, release: make(chan struct{})}
	g := &countingGate{Gate: e.gate}
	w := e.worker("r1", 0, h, g)
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx, false) }()
	defer func() {
		cancel()
		<-done
	}()
	waitState(t, w, StateReady)
	if _, err := e.gate.Reassign(e.ctx, &raftgate.Reassign{Run: "r1", WorldSize: 2, Assignment: [][]int{{}, {0, 1, 2, 3, 4, 5, 6, 7}}}); err != nil {
		t.Fatal(err)
	}
	if err := e.worker("r1", 1, nil, nil).Run(e.ctx, true); err != nil {
		t.Fatalf("rank 1: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for st := w.Status(); st.State != StateReady || st.Epoch != 1; st = w.Status() {
		if time.Now().After(deadline) {
			t.Fatalf("rank 0 after the reassignment: %+v", st)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if st := w.Status(); len(st.Files) != 0 {
		t.Fatalf("rank 0 with no shards: %+v", st)
	}
	// Any store read now hangs.
	h.hold.Lock()
	h.held = true
	h.hold.Unlock()
	if err := os.Remove(w.cfg.Cache.Path(e.gen1.Release.Shards[0].Digest)); err != nil {
		t.Fatal(err)
	}
	// Each poll stats the entries, then reads the run.
	polls, deadline := g.runs.Load()+2, time.Now().Add(10*time.Second)
	for g.runs.Load() < polls {
		if time.Now().After(deadline) {
			t.Fatalf("rank 0 stopped polling its run: %+v", w.Status())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if st := w.Status(); st.State != StateReady {
		t.Fatalf("rank 0 with no shards, after an entry of its assignment before was deleted: %+v", st)
	}
}

// replacedRank runs the old worker of rank 0 of a two-rank run (shards
// 0, 2, 4, 6) to the barrier, then, while its reads of the run wait
// until the barrier has opened (what it sees first is the barrier
// open), reassigns the run to assignment and has new workers of both
// ranks attest it. It returns once the old worker has ended without an
// error.
func replacedRank(t *testing.T, assignment [][]int) (*env, *Worker) {
	t.Helper()
	e := newEnv(t)
	e.publish(e.gen1, 0)
	e.createRun("r1", 2, 30*time.Second)
	g := &heldRuns{Gate: e.gate, release: make(chan struct{})}
	old := e.worker("r1", 0, nil, g)
	done := make(chan error, 1)
	go func() { done <- old.Run(e.ctx, true) }()
	waitState(t, old, StateWaiting)
	g.hold.Store(true)
	if _, err := e.gate.Reassign(e.ctx, &raftgate.Reassign{Run: "r1", WorldSize: 2, Assignment: assignment}); err != nil {
		t.Fatal(err)
	}
	for r, err := range runAll(e.ctx, e.worker("r1", 0, nil, nil), e.worker("r1", 1, nil, nil)) {
		if err != nil {
			t.Fatalf("rank %d at epoch 1: %v", r, err)
		}
	}
	close(g.release)
	if err := <-done; err != nil {
		t.Fatalf("the old worker of rank 0: %v", err)
	}
	return e, old
}

// TestShardsFailedErrorIsOneLine: the error line escapes newlines, so the
// failures are listed on one line, "; " between them, each with its own
// message, instead of errors.Join's newlines shown as \n.
func TestShardsFailedErrorIsOneLine(t *testing.T) {
	e := &ShardsFailedError{Failures: []error{
		errcode.New(errcode.SizeMismatch, "shard a: size 3, want 4"),
		errcode.New(errcode.DigestMismatch, "shard b: digest differs"),
	}}
	msg := e.Error()
	if strings.Contains(msg, "\n") || !strings.Contains(msg, "2 assigned shard(s)") ||
		!strings.Contains(msg, "shard a: size 3, want 4; ") || !strings.HasSuffix(msg, "shard b: digest differs") {
		t.Fatalf("ShardsFailedError: %q", msg)
	}
	if errcode.Of(e) != errcode.SizeMismatch {
		t.Fatalf("code %s, want the first failure's", errcode.Of(e))
	}
}

// TestShardsFailedErrorBounded: a rank of thousands of failed shards
// names the first 20 in its message and counts the rest, instead of a
// line of megabytes.
func TestShardsFailedErrorBounded(t *testing.T) {
	e := &ShardsFailedError{}
	for i := range 4000 {
		e.Failures = append(e.Failures, errcode.New(errcode.DigestMismatch, "shard-%05d: digest differs", i))
	}
	msg := e.Error()
	if !strings.HasPrefix(msg, "4000 assigned shard(s)") || !strings.Contains(msg, "shard-00019: digest differs; and 3980 more") ||
		strings.Contains(msg, "shard-00020") || len(msg) > 2000 {
		t.Fatalf("ShardsFailedError of 4,000 failures, %d bytes: %.300q", len(msg), msg)
	}
}

// A PollInterval outside MinPollInterval to MaxPollInterval is USAGE from
// Run before the gate is asked, and changes nothing: not even an earlier
// worker's ready file is removed. The library took any value where the
// CLI's --poll is bounded: below zero was the default in silence, 1ns
// re-read the run in a busy loop, and 1000000h made the barrier's slices
// (five polls) wrap negative. Zero is the default; both bounds are taken.
func TestWorkerPollIntervalOutOfRangeIsUsage(t *testing.T) {
	e := newEnv(t)
	e.publish(e.gen1, 0)
	for i, poll := range []time.Duration{-time.Second, time.Nanosecond, MinPollInterval - 1, MaxPollInterval + 1, 1000000 * time.Hour} {
		run := fmt.Sprintf("bad%d", i)
		e.createRun(run, 1, time.Minute)
		ready := filepath.Join(t.TempDir(), "ready.json")
		if err := os.WriteFile(ready, []byte("an earlier worker's\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		w := NewWorker(e.pollConfig(run, poll, ready))
		ctx, cancel := context.WithTimeout(e.ctx, 30*time.Second)
		err := w.Run(ctx, true)
		cancel()
		if errcode.Of(err) != errcode.Usage || !strings.Contains(err.Error(), "poll interval "+poll.String()) {
			t.Errorf("PollInterval %s: %v, want USAGE naming it", poll, err)
		}
		if st := w.Status(); st.State != StateFailed || st.Code != string(errcode.Usage) {
			t.Errorf("PollInterval %s: status %s %s, want FAILED USAGE", poll, st.State, st.Code)
		}
		if b, err := os.ReadFile(ready); err != nil || string(b) != "an earlier worker's\n" {
			t.Errorf("PollInterval %s: the ready file found holds %d other bytes (%v), want it untouched", poll, len(b), err)
		}
		rs, err := e.gate.Run(e.ctx, run)
		if err != nil {
			t.Fatal(err)
		}
		if rs.Attested != 0 {
			t.Errorf("PollInterval %s: %d ranks attested, want none", poll, rs.Attested)
		}
	}
	for _, poll := range []time.Duration{0, MinPollInterval, MaxPollInterval} {
		run := fmt.Sprintf("ok%d", poll)
		e.createRun(run, 1, time.Minute)
		if err := NewWorker(e.pollConfig(run, poll, "")).Run(e.ctx, true); err != nil {
			t.Errorf("PollInterval %s: %v", poll, err)
		}
	}
}

// pollConfig is the configuration of rank 0 of run with poll interval
// poll and ready file ready.
func (e *env) pollConfig(run string, poll time.Duration, ready string) Config {
	e.t.Helper()
	c, err := OpenCache(e.t.TempDir())
	if err != nil {
		e.t.Fatal(err)
	}
	return Config{
		Gate: e.gate, Store: e.store, Cache: c, Run: run, PollInterval: poll, ReadyFile: ready,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
}
