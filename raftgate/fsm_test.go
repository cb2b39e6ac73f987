package raftgate

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
)

// dig returns a distinct digest per label.
func dig(label string) manifest.Digest { return manifest.Sum([]byte(label)) }

// shardsOf returns n shard digests of the release named label.
func shardsOf(label string, n int) []manifest.Digest {
	out := make([]manifest.Digest, n)
	for i := range out {
		out[i] = dig(fmt.Sprintf("%s/shard-%d", label, i))
	}
	return out
}

// harness applies commands to one FSM with a controllable clock.
type harness struct {
	t   testing.TB
	f   *FSM
	now int64
}

func newHarness(t testing.TB) *harness { return &harness{t: t, f: NewFSM(), now: 1_000_000} }

// do applies c at h.now through the encoded form, as Raft would.
func (h *harness) do(c Command) *Result {
	h.t.Helper()
	c.header().Now = h.now
	b, err := EncodeCommand(c)
	if err != nil {
		h.t.Fatal(err)
	}
	res := h.f.ApplyBytes(b)
	h.f.Read(func(s *State) {
		if err := s.Validate(); err != nil {
			h.t.Fatalf("state invalid after %s: %v", commandType(c), err)
		}
	})
	return res
}

// ok applies c and fails the test on a rejection.
func (h *harness) ok(c Command) any {
	h.t.Helper()
	res := h.do(c)
	if res.Err != nil {
		h.t.Fatalf("%s: unexpected error %v", commandType(c), res.Err)
	}
	return res.Value
}

// reject applies c and checks it is rejected with code.
func (h *harness) reject(c Command, code errcode.Code) *Result {
	h.t.Helper()
	res := h.do(c)
	if got := errcode.Of(res.Err); got != code {
		h.t.Fatalf("%s: got code %q (%v), want %s", commandType(c), got, res.Err, code)
	}
	return res
}

// verified registers a VERIFIED release checked at (tw, bf).
func (h *harness) verified(label string, shards int, tw, bf uint64) manifest.Digest {
	h.t.Helper()
	root := dig(label)
	h.ok(&Register{Root: root, Shards: shardsOf(label, shards), Report: &ReportSummary{
		Digest: dig("report/" + label), Verdict: manifest.Verified, DatasetSnapshot: dig("snap"),
		TombstoneWatermark: tw, BenchmarkFence: bf,
	}})
	return root
}

func (h *harness) state() *State {
	var out *State
	h.f.Read(func(s *State) {
		b, _ := EncodeState(s)
		var err error
		if out, err = DecodeState(b); err != nil {
			h.t.Fatal(err)
		}
	})
	return out
}

func TestRegisterStates(t *testing.T) {
	h := newHarness(t)
	staged := dig("staged")
	v := h.ok(&Register{Root: staged, Shards: shardsOf("staged", 2)}).(RecheckResult)
	if v.Release.State != ReleaseStaged {
		t.Fatalf("no report: state %s, want STAGED", v.Release.State)
	}
	h.reject(&Publish{Alias: "a", Root: staged}, errcode.NotVerified)
	h.reject(&Register{Root: staged, Shards: shardsOf("other", 2)}, errcode.AlreadyExists)

	good := h.verified("staged", 2, 10, 5)
	if good != staged || h.state().Releases[staged.String()].State != ReleaseVerified {
		t.Fatalf("VERIFIED report did not move STAGED to VERIFIED")
	}

	bad := dig("bad")
	h.ok(&Register{Root: bad, Shards: shardsOf("bad", 1), Report: &ReportSummary{Digest: dig("r-bad"), Verdict: manifest.Invalid, TombstoneHits: 3}})
	if st := h.state().Releases[bad.String()].State; st != ReleaseInvalid {
		t.Fatalf("INVALID report: state %s", st)
	}
	h.reject(&Publish{Alias: "a", Root: bad}, errcode.NotVerified)
	h.reject(&Register{Root: bad, Shards: shardsOf("bad", 1), Report: &ReportSummary{Digest: dig("r-bad2"), Verdict: manifest.Verified}}, errcode.NotVerified)
	h.reject(&Register{Root: dig("x"), Shards: shardsOf("x", 1), Report: &ReportSummary{Digest: dig("r-x"), Verdict: manifest.Verified, BenchmarkHits: 1}}, errcode.BadInput)
	h.reject(&Publish{Alias: "a", Root: dig("nope")}, errcode.UnknownRelease)
}

func TestPublishCAS(t *testing.T) {
	h := newHarness(t)
	r1, r2, r3 := h.verified("r1", 3, 0, 0), h.verified("r2", 3, 0, 0), h.verified("r3", 3, 0, 0)

	first := h.ok(&Publish{Alias: "main", Root: r1, ExpectedGeneration: 0}).(PublishResult)
	if first.Generation != 1 || first.Root != r1 {
		t.Fatalf("first publish: %+v", first)
	}
	// A retry of the same command returns the same result, no new generation, no new permit.
	again := h.ok(&Publish{Alias: "main", Root: r1, ExpectedGeneration: 0}).(PublishResult)
	if again != first {
		t.Fatalf("retry: %+v, want %+v", again, first)
	}
	if s := h.state(); s.Aliases["main"].Generation != 1 || len(s.Permits) != 1 {
		t.Fatalf("retry changed state: generation %d, %d permits", s.Aliases["main"].Generation, len(s.Permits))
	}
	// Another root for the generation r1 won: a lost race.
	h.reject(&Publish{Alias: "main", Root: r2, ExpectedGeneration: 0}, errcode.PublishConflict)

	second := h.ok(&Publish{Alias: "main", Root: r2, ExpectedGeneration: 1}).(PublishResult)
	if second.Generation != 2 {
		t.Fatalf("second publish: %+v", second)
	}
	// Stale by more than one generation, and ahead of the alias.
	h.reject(&Publish{Alias: "main", Root: r3, ExpectedGeneration: 0}, errcode.GenerationConflict)
	h.reject(&Publish{Alias: "main", Root: r3, ExpectedGeneration: 7}, errcode.GenerationConflict)
	// The first publish, retried late, still returns its own result.
	if late := h.ok(&Publish{Alias: "main", Root: r1, ExpectedGeneration: 0}).(PublishResult); late != first {
		t.Fatalf("late retry: %+v", late)
	}
	h.reject(&Publish{Alias: "fresh", Root: r1, ExpectedGeneration: 3}, errcode.UnknownAlias)
	h.reject(&Publish{Alias: "bad name!", Root: r1}, errcode.BadInput)

	s := h.state()
	if p := s.Permits[first.Permit]; p.State != PermitSuperseded {
		t.Fatalf("generation-1 permit is %s, want SUPERSEDED", p.State)
	}
	if p := s.Permits[second.Permit]; p.State != PermitOpen || p.Generation != 2 || p.Root != r2 {
		t.Fatalf("generation-2 permit: %+v", p)
	}
	if got := s.Releases[r1.String()].State; got != ReleasePublished {
		t.Fatalf("r1 inside the rollback window is %s, want PUBLISHED", got)
	}
}

func TestPublishFenceBehind(t *testing.T) {
	h := newHarness(t)
	old := h.verified("old", 2, 50, 7)
	h.ok(&AdvanceFence{Kind: FenceTombstone, Value: 100})
	res := h.reject(&Publish{Alias: "main", Root: old}, errcode.FenceBehind)
	if res.Value != nil {
		t.Fatalf("rejected publish returned a value")
	}
	if len(h.state().Aliases) != 0 {
		t.Fatal("rejected publish created the alias")
	}
	fresh := h.verified("fresh", 2, 100, 7)
	h.ok(&Publish{Alias: "main", Root: fresh})
	h.ok(&AdvanceFence{Kind: FenceBenchmark, Value: 8})
	h.reject(&Publish{Alias: "main", Root: fresh, ExpectedGeneration: 1}, errcode.FenceBehind)
}

func TestAdvanceFenceClosesAndRecheckRenews(t *testing.T) {
	h := newHarness(t)
	low := h.verified("low", 4, 100, 10)
	high := h.verified("high", 4, 200, 10)
	pl := h.ok(&Publish{Alias: "a", Root: low}).(PublishResult)
	ph := h.ok(&Publish{Alias: "b", Root: high}).(PublishResult)
	run := h.ok(&CreateRun{Run: "r", Alias: "a", WorldSize: 2}).(RunSummary)

	fr := h.ok(&AdvanceFence{Kind: FenceTombstone, Value: 150}).(FenceResult)
	if want := []string{pl.Permit, run.Permit}; !slices.Equal(fr.Closed, want) {
		t.Fatalf("closed %v, want %v (permits bound below 150)", fr.Closed, want)
	}
	s := h.state()
	if s.Permits[ph.Permit].State != PermitOpen {
		t.Fatalf("permit bound at 200 was closed by an advance to 150")
	}
	if p := s.Permits[pl.Permit]; p.State != PermitClosed || p.Reason != "tombstone>=150" {
		t.Fatalf("low permit: %+v", p)
	}
	h.reject(&AdvanceFence{Kind: FenceTombstone, Value: 149}, errcode.FenceRegression)
	if again := h.ok(&AdvanceFence{Kind: FenceTombstone, Value: 150}).(FenceResult); len(again.Closed) != 0 {
		t.Fatalf("equal advance closed %v", again.Closed)
	}
	h.reject(&AdvanceFence{Kind: "moon", Value: 1}, errcode.BadInput)

	// A closed permit blocks new runs and checkpoints.
	h.reject(&CreateRun{Run: "r2", Alias: "a", WorldSize: 1}, errcode.PermitClosed)

	// A recheck below the fence proves nothing.
	h.reject(&RecheckCmd{Root: low, Kind: FenceTombstone, Value: 140, Report: dig("rc0")}, errcode.FenceBehind)
	// Zero hits at the new value renews the root's closed permits, re-bound.
	rr := h.ok(&RecheckCmd{Root: low, Kind: FenceTombstone, Value: 150, Report: dig("rc1")}).(RecheckResult)
	if want := []string{pl.Permit, run.Permit}; !slices.Equal(rr.Reopened, want) {
		t.Fatalf("reopened %v, want %v", rr.Reopened, want)
	}
	s = h.state()
	if p := s.Permits[pl.Permit]; p.State != PermitOpen || p.TombstoneWatermark != 150 {
		t.Fatalf("renewed permit: %+v", p)
	}
	h.ok(&CreateRun{Run: "r2", Alias: "a", WorldSize: 1})

	// Hits at a newer value: INVALID, permits stay closed, never publishable again.
	h.ok(&AdvanceFence{Kind: FenceBenchmark, Value: 20})
	h.reject(&RecheckCmd{Root: low, Kind: FenceBenchmark, Value: 20, Report: dig("rc2"), Hits: 2}, errcode.BenchmarkHit)
	s = h.state()
	if s.Releases[low.String()].State != ReleaseInvalid {
		t.Fatalf("release with hits is %s", s.Releases[low.String()].State)
	}
	for _, p := range s.Permits {
		if p.Root == low && p.State == PermitOpen {
			t.Fatalf("permit %s of an INVALID release is open", p.ID)
		}
	}
	h.reject(&RecheckCmd{Root: low, Kind: FenceBenchmark, Value: 21, Report: dig("rc3")}, errcode.NotVerified)
	h.reject(&Publish{Alias: "c", Root: low}, errcode.NotVerified)
	h.reject(&CreateRun{Run: "r3", Alias: "a", WorldSize: 1}, errcode.PermitClosed)
}

// A recheck, or a newer report, recorded before a fence advance already
// shows zero hits at the new value. With SpareChecked, which a node sets
// on every advance it proposes, the advance leaves those permits open,
// re-bound to the release's watermarks, instead of closing them until the
// same recheck is sent again; without it (entries from before the field)
// it closes them as it did, so old logs replay to the states they gave.
func TestAdvanceFenceSparesRechecked(t *testing.T) {
	for _, spare := range []bool{true, false} {
		h := newHarness(t)
		rel, other, newer := h.verified("rel", 2, 100, 10), h.verified("other", 2, 100, 10), h.verified("newer", 2, 100, 10)
		p := h.ok(&Publish{Alias: "a", Root: rel}).(PublishResult)
		po := h.ok(&Publish{Alias: "b", Root: other}).(PublishResult)
		pn := h.ok(&Publish{Alias: "c", Root: newer}).(PublishResult)
		run := h.ok(&CreateRun{Run: "r", Alias: "a", WorldSize: 1}).(RunSummary)
		h.ok(&RecheckCmd{Root: rel, Kind: FenceTombstone, Value: 150, Report: dig("rc")})
		h.ok(&Register{Root: newer, Shards: shardsOf("newer", 2), Report: &ReportSummary{
			Digest: dig("report2/newer"), Verdict: manifest.Verified, DatasetSnapshot: dig("snap"), TombstoneWatermark: 200, BenchmarkFence: 10,
		}})

		fr := h.ok(&AdvanceFence{Kind: FenceTombstone, Value: 150, SpareChecked: spare}).(FenceResult)
		want := []string{po.Permit}
		if !spare {
			want = []string{p.Permit, po.Permit, pn.Permit, run.Permit}
		}
		if !slices.Equal(fr.Closed, want) {
			t.Fatalf("spare=%v: closed %v, want %v", spare, fr.Closed, want)
		}
		wantSpared := []string{p.Permit, pn.Permit, run.Permit}
		slices.Sort(wantSpared)
		if !spare {
			wantSpared = nil
		}
		if !slices.Equal(fr.Spared, wantSpared) {
			t.Fatalf("spare=%v: spared %v, want %v", spare, fr.Spared, wantSpared)
		}
		s := h.state()
		if !spare {
			h.reject(&CreateRun{Run: "r2", Alias: "a", WorldSize: 1}, errcode.PermitClosed)
			continue
		}
		for id, w := range map[string]uint64{p.Permit: 150, run.Permit: 150, pn.Permit: 200} {
			if q := s.Permits[id]; q.State != PermitOpen || q.TombstoneWatermark != w || q.BenchmarkFence != 10 {
				t.Fatalf("spared permit %s: %+v, want OPEN bound at %d/10", id, q, w)
			}
		}
		h.ok(&CreateRun{Run: "r2", Alias: "a", WorldSize: 1})
		// Past what the release was checked at, its permits close.
		fr = h.ok(&AdvanceFence{Kind: FenceTombstone, Value: 151, SpareChecked: true}).(FenceResult)
		// newer's permit, bound at 200 since the first advance, was not
		// at risk: it is not listed as spared.
		if len(fr.Closed) != 3 || slices.Contains(fr.Closed, pn.Permit) || len(fr.Spared) != 0 {
			t.Fatalf("advance past the recheck closed %v and spared %v, want the three permits of %s closed and none spared", fr.Closed, fr.Spared, rel)
		}
	}
}

func TestRegisterNewerReportRenews(t *testing.T) {
	h := newHarness(t)
	root := h.verified("rel", 2, 10, 10)
	p := h.ok(&Publish{Alias: "a", Root: root}).(PublishResult)
	h.ok(&AdvanceFence{Kind: FenceTombstone, Value: 20})
	h.ok(&AdvanceFence{Kind: FenceBenchmark, Value: 30})
	rr := h.ok(&Register{Root: root, Shards: shardsOf("rel", 2), Report: &ReportSummary{
		Digest: dig("report2"), Verdict: manifest.Verified, DatasetSnapshot: dig("snap"), TombstoneWatermark: 20, BenchmarkFence: 30,
	}}).(RecheckResult)
	if !slices.Equal(rr.Reopened, []string{p.Permit}) || rr.Release.State != ReleasePublished {
		t.Fatalf("newer report: %+v", rr)
	}
	// A later INVALID report closes the permit again.
	h.ok(&Register{Root: root, Shards: shardsOf("rel", 2), Report: &ReportSummary{
		Digest: dig("report3"), Verdict: manifest.Invalid, DatasetSnapshot: dig("snap"), TombstoneWatermark: 20, BenchmarkFence: 30, TombstoneHits: 1,
	}})
	if st := h.state().Permits[p.Permit].State; st != PermitClosed {
		t.Fatalf("permit after INVALID report: %s", st)
	}
}

func TestRollback(t *testing.T) {
	h := newHarness(t)
	var roots []manifest.Digest
	for i := range 5 {
		roots = append(roots, h.verified(fmt.Sprintf("g%d", i), 2, 10, 10))
	}
	// Retain 3: after five publishes generations 3..5 are in the window.
	h.ok(&Publish{Alias: "main", Root: roots[0], Retain: 3})
	for i := 1; i < 5; i++ {
		h.ok(&Publish{Alias: "main", Root: roots[i], ExpectedGeneration: uint64(i)})
	}
	s := h.state()
	for i, want := range []string{ReleaseRetired, ReleaseRetired, ReleasePublished, ReleasePublished, ReleasePublished} {
		if got := s.Releases[roots[i].String()].State; got != want {
			t.Fatalf("g%d is %s, want %s", i, got, want)
		}
	}
	h.reject(&Rollback{Alias: "main", Root: roots[1], ExpectedGeneration: 5}, errcode.RollbackIneligible)
	h.reject(&Rollback{Alias: "main", Root: roots[4], ExpectedGeneration: 5}, errcode.RollbackIneligible)
	h.reject(&Rollback{Alias: "main", Root: roots[3], ExpectedGeneration: 4}, errcode.PublishConflict)
	h.reject(&Rollback{Alias: "main", Root: roots[3], ExpectedGeneration: 2}, errcode.GenerationConflict)
	h.reject(&Rollback{Alias: "nope", Root: roots[3], ExpectedGeneration: 5}, errcode.UnknownAlias)
	// A retired release cannot come back through publish either.
	h.reject(&Publish{Alias: "main", Root: roots[0], ExpectedGeneration: 5}, errcode.NotVerified)

	rb := h.ok(&Rollback{Alias: "main", Root: roots[2], ExpectedGeneration: 5}).(PublishResult)
	if rb.Generation != 6 || rb.Root != roots[2] || rb.Kind != CmdRollback {
		t.Fatalf("rollback: %+v", rb)
	}
	if again := h.ok(&Rollback{Alias: "main", Root: roots[2], ExpectedGeneration: 5}).(PublishResult); again != rb {
		t.Fatalf("rollback retry: %+v", again)
	}
	// A retained root that no longer satisfies the fences is ineligible.
	h.ok(&AdvanceFence{Kind: FenceTombstone, Value: 11})
	h.reject(&Rollback{Alias: "main", Root: roots[4], ExpectedGeneration: 6}, errcode.RollbackIneligible)
	if got := h.state().Aliases["main"]; got.Generation != 6 || got.Root != roots[2] {
		t.Fatalf("alias after rejected rollback: generation %d root %s", got.Generation, got.Root)
	}
}

func TestRunBarrierAndCheckpoints(t *testing.T) {
	h := newHarness(t)
	root := h.verified("rel", 5, 0, 0)
	shards := shardsOf("rel", 5)
	h.ok(&Publish{Alias: "main", Root: root})
	run := h.ok(&CreateRun{Run: "job", Alias: "main", WorldSize: 2, BarrierTimeoutMs: 60_000}).(RunSummary)
	if run.Root != root || run.Generation != 1 || run.State != RunWaiting {
		t.Fatalf("createRun: %+v", run)
	}
	if again := h.ok(&CreateRun{Run: "job", Alias: "main", WorldSize: 2, BarrierTimeoutMs: 60_000}).(RunSummary); again != run {
		t.Fatalf("createRun retry: %+v", again)
	}
	h.reject(&CreateRun{Run: "job", Alias: "main", WorldSize: 3}, errcode.AlreadyExists)
	h.reject(&CreateRun{Run: "bad", Alias: "main", WorldSize: 2, Assignment: [][]int{{0, 1}, {1, 2, 3, 4}}}, errcode.BadInput)
	h.reject(&CreateRun{Run: "bad", Alias: "main", WorldSize: 0}, errcode.BadInput)
	h.reject(&CreateRun{Run: "bad", Alias: "nope", WorldSize: 1}, errcode.UnknownAlias)

	h.reject(&AdmitCheckpoint{Run: "job", Step: 0, Root: root}, errcode.BarrierClosed)
	// Round-robin: rank 0 has shards 0,2,4 and rank 1 has 1,3; order within an attestation is free.
	h.reject(&Attest{Run: "job", Rank: 0, Root: root, Shards: []manifest.Digest{shards[0]}}, errcode.BadInput)
	s := h.ok(&Attest{Run: "job", Rank: 0, Root: root, Shards: []manifest.Digest{shards[4], shards[0], shards[2]}}).(RunSummary)
	if s.Barrier != BarrierClosed || s.Attested != 1 {
		t.Fatalf("after one of two ranks: %+v", s)
	}
	s = h.ok(&Attest{Run: "job", Rank: 1, Root: root, Shards: []manifest.Digest{shards[1], shards[3]}}).(RunSummary)
	if s.Barrier != BarrierOpen || s.State != RunRunning || s.BarrierOpened != h.now {
		t.Fatalf("after every rank: %+v", s)
	}
	h.ok(&AdmitCheckpoint{Run: "job", Step: 100, Root: root})
	h.ok(&AdmitCheckpoint{Run: "job", Step: 100, Root: root})
	h.reject(&AdmitCheckpoint{Run: "job", Step: 50, Root: root}, errcode.StepRegression)
	h.reject(&AdmitCheckpoint{Run: "job", Step: 200, Root: dig("other")}, errcode.RootMismatch)
	if got := h.state().Runs["job"]; got.Step != 100 || got.Checkpoints != 1 {
		t.Fatalf("checkpoints: step %d count %d", got.Step, got.Checkpoints)
	}
	h.ok(&AdvanceFence{Kind: FenceBenchmark, Value: 1})
	h.reject(&AdmitCheckpoint{Run: "job", Step: 200, Root: root}, errcode.PermitClosed)

	c := h.ok(&CancelRun{Run: "job", Reason: "done"}).(RunSummary)
	if c.State != RunCancelled {
		t.Fatalf("cancel: %+v", c)
	}
	if p := h.state().Permits[run.Permit]; p.State != PermitReleased {
		t.Fatalf("run permit after cancel: %s", p.State)
	}
	h.reject(&Attest{Run: "job", Rank: 0, Root: root, Shards: []manifest.Digest{shards[0], shards[2], shards[4]}}, errcode.RunFailed)
	h.reject(&CancelRun{Run: "nope"}, errcode.UnknownRun)
}

func TestAttestForeignRootFailsRun(t *testing.T) {
	h := newHarness(t)
	root := h.verified("rel", 2, 0, 0)
	other := h.verified("other", 2, 0, 0)
	h.ok(&Publish{Alias: "main", Root: root})
	run := h.ok(&CreateRun{Run: "job", Alias: "main", WorldSize: 2}).(RunSummary)
	res := h.reject(&Attest{Run: "job", Rank: 1, Root: other, Shards: shardsOf("other", 2)[1:]}, errcode.RootMismatch)
	if s := res.Value.(RunSummary); s.State != RunFailed || s.FailCode != string(errcode.RootMismatch) {
		t.Fatalf("run after foreign root: %+v", s)
	}
	st := h.state()
	if st.Permits[run.Permit].State != PermitReleased || st.Runs["job"].BarrierOpened != 0 {
		t.Fatalf("failed run still holds its permit or opened its barrier")
	}
	h.reject(&Attest{Run: "job", Rank: 0, Root: root, Shards: shardsOf("rel", 2)[:1]}, errcode.RunFailed)
	h.reject(&AdmitCheckpoint{Run: "job", Step: 0, Root: root}, errcode.RunFailed)
}

func TestAttestShardNotAssigned(t *testing.T) {
	h := newHarness(t)
	root := h.verified("rel", 4, 0, 0)
	shards := shardsOf("rel", 4)
	h.ok(&Publish{Alias: "main", Root: root})
	h.ok(&CreateRun{Run: "job", Alias: "main", WorldSize: 2, Assignment: [][]int{{0, 1}, {2, 3}}})
	// Shard 2 belongs to rank 1.
	res := h.reject(&Attest{Run: "job", Rank: 0, Root: root, Shards: []manifest.Digest{shards[0], shards[2]}}, errcode.ShardNotAssigned)
	if s := res.Value.(RunSummary); s.State != RunFailed {
		t.Fatalf("run after foreign shard: %+v", s)
	}
	h.reject(&Attest{Run: "job", Rank: 5, Root: root}, errcode.RunFailed)
}

func TestBarrierTimeout(t *testing.T) {
	h := newHarness(t)
	root := h.verified("rel", 2, 0, 0)
	h.ok(&Publish{Alias: "main", Root: root})
	h.ok(&CreateRun{Run: "job", Alias: "main", WorldSize: 2, BarrierTimeoutMs: 1000})
	h.ok(&CreateRun{Run: "late", Alias: "main", WorldSize: 2, BarrierTimeoutMs: 1000})
	h.ok(&Attest{Run: "job", Rank: 0, Root: root, Shards: shardsOf("rel", 2)[:1]})
	h.now += 1000
	if s := h.ok(&CheckBarrier{Run: "job"}).(RunSummary); s.State != RunWaiting {
		t.Fatalf("at the deadline: %+v", s)
	}
	h.now++
	res := h.reject(&CheckBarrier{Run: "job"}, errcode.BarrierTimeout)
	if s := res.Value.(RunSummary); s.State != RunFailed || s.FailCode != string(errcode.BarrierTimeout) {
		t.Fatalf("after the deadline: %+v", s)
	}
	// An attestation after the deadline fails the run too.
	h.reject(&Attest{Run: "late", Rank: 0, Root: root, Shards: shardsOf("rel", 2)[:1]}, errcode.BarrierTimeout)
	h.reject(&CheckBarrier{Run: "late"}, errcode.RunFailed)
}

func TestReassignNeverReadsAlias(t *testing.T) {
	h := newHarness(t)
	r1 := h.verified("r1", 4, 0, 0)
	r2 := h.verified("r2", 4, 0, 0)
	s1 := shardsOf("r1", 4)
	h.ok(&Publish{Alias: "main", Root: r1})
	h.ok(&CreateRun{Run: "job", Alias: "main", WorldSize: 2})
	h.ok(&Attest{Run: "job", Rank: 0, Root: r1, Shards: []manifest.Digest{s1[0], s1[2]}})
	h.ok(&Attest{Run: "job", Rank: 1, Root: r1, Shards: []manifest.Digest{s1[1], s1[3]}})
	// Move the alias, then scale out: the run stays on r1.
	h.ok(&Publish{Alias: "main", Root: r2, ExpectedGeneration: 1})
	s := h.ok(&Reassign{Run: "job", WorldSize: 3, Assignment: [][]int{{0, 2}, {1}, {3}}}).(RunSummary)
	if s.Root != r1 || s.Generation != 1 || s.Epoch != 1 {
		t.Fatalf("reassign re-read the alias or lost the pin: %+v", s)
	}
	if s.Barrier != BarrierClosed || s.Attested != 1 {
		t.Fatalf("reassign kept %d attestations, barrier %s (rank 0 is unchanged, ranks 1,2 changed)", s.Attested, s.Barrier)
	}
	// An attestation made for the replaced epoch changes nothing.
	stale := uint64(0)
	h.reject(&Attest{Run: "job", Rank: 1, Root: r1, Shards: []manifest.Digest{s1[1], s1[3]}, Epoch: &stale}, errcode.StaleEpoch)
	if s := h.ok(&CheckBarrier{Run: "job"}).(RunSummary); s.State == RunFailed || s.Attested != 1 {
		t.Fatalf("a stale-epoch attestation changed the run: %+v", s)
	}
	// A worker that re-resolves the alias attests r2 and fails the run.
	h.ok(&Attest{Run: "job", Rank: 1, Root: r1, Shards: []manifest.Digest{s1[1]}})
	s = h.ok(&Attest{Run: "job", Rank: 2, Root: r1, Shards: []manifest.Digest{s1[3]}}).(RunSummary)
	if s.Barrier != BarrierOpen || s.Root != r1 {
		t.Fatalf("barrier after the changed ranks attested: %+v", s)
	}
	// Recovery: rank 1 replaced; reset forces it to attest again.
	s = h.ok(&Reassign{Run: "job", WorldSize: 3, Assignment: [][]int{{0, 2}, {1}, {3}}, Reset: []int{1}}).(RunSummary)
	if s.Barrier != BarrierClosed || s.Attested != 2 {
		t.Fatalf("recovery reassign: %+v", s)
	}
	// Scale-in that drops the only rank still missing reopens the barrier.
	s = h.ok(&Reassign{Run: "job", WorldSize: 2, Assignment: [][]int{{0, 2}, {1, 3}}, Reset: []int{}}).(RunSummary)
	if s.Barrier != BarrierClosed || s.Attested != 1 {
		t.Fatalf("scale-in changing rank 1: %+v", s)
	}
	h.ok(&Attest{Run: "job", Rank: 1, Root: r1, Shards: []manifest.Digest{s1[1], s1[3]}})
	h.ok(&Reassign{Run: "job", WorldSize: 3, Assignment: [][]int{{0, 2}, {1, 3}, {}}})
	s = h.ok(&Reassign{Run: "job", WorldSize: 2, Assignment: [][]int{{0, 2}, {1, 3}}}).(RunSummary)
	if s.Barrier != BarrierOpen || s.State != RunRunning {
		t.Fatalf("scale-in dropping the unattested rank 2: %+v", s)
	}
	h.reject(&Attest{Run: "job", Rank: 1, Root: r2, Shards: shardsOf("r2", 4)[1:2]}, errcode.RootMismatch)
	h.reject(&Reassign{Run: "job", WorldSize: 1}, errcode.RunFailed)
}

// A reassignment with an expected epoch is a compare-and-set: sent again
// after it applied (a retry after INDETERMINATE), it returns the run as it
// is instead of starting another epoch and resetting the replaced rank's
// fresh attestation; another reassignment from the same epoch is
// STALE_EPOCH; one without an expected epoch always applies.
func TestReassignRetryIsIdempotent(t *testing.T) {
	h := newHarness(t)
	r1 := h.verified("r1", 2, 0, 0)
	s1 := shardsOf("r1", 2)
	h.ok(&Publish{Alias: "main", Root: r1})
	h.ok(&CreateRun{Run: "job", Alias: "main", WorldSize: 2})
	h.ok(&Attest{Run: "job", Rank: 0, Root: r1, Shards: s1[:1]})
	h.ok(&Attest{Run: "job", Rank: 1, Root: r1, Shards: s1[1:]})
	zero := uint64(0)
	recovery := &Reassign{Run: "job", WorldSize: 2, Reset: []int{1}, ExpectedEpoch: &zero}
	if s := h.ok(recovery).(RunSummary); s.Epoch != 1 || s.Attested != 1 || s.Barrier != BarrierClosed {
		t.Fatalf("recovery: %+v", s)
	}
	// The replacement attests; then the same reassignment arrives again.
	h.ok(&Attest{Run: "job", Rank: 1, Root: r1, Shards: s1[1:]})
	if s := h.ok(recovery).(RunSummary); s.Epoch != 1 || s.Attested != 2 || s.Barrier != BarrierOpen {
		t.Fatalf("the retried reassignment changed the run: %+v", s)
	}
	h.reject(&Reassign{Run: "job", WorldSize: 2, Reset: []int{0}, ExpectedEpoch: &zero}, errcode.StaleEpoch)
	one := uint64(1)
	h.reject(&Reassign{Run: "job", WorldSize: 2, Reset: []int{1}, ExpectedEpoch: new(uint64(5))}, errcode.StaleEpoch)
	if s := h.ok(&Reassign{Run: "job", WorldSize: 2, Reset: []int{0}, ExpectedEpoch: &one}).(RunSummary); s.Epoch != 2 || s.Attested != 1 {
		t.Fatalf("reassign from epoch 1: %+v", s)
	}
	// Without an expected epoch, a repeat is another reassignment.
	if s := h.ok(&Reassign{Run: "job", WorldSize: 2}).(RunSummary); s.Epoch != 3 {
		t.Fatalf("reassign without an expected epoch: %+v", s)
	}
	if s := h.ok(&Reassign{Run: "job", WorldSize: 2}).(RunSummary); s.Epoch != 4 {
		t.Fatalf("reassign without an expected epoch, again: %+v", s)
	}
}

func TestDecodeCommandStrict(t *testing.T) {
	for _, tc := range []struct {
		in   string
		code errcode.Code
	}{
		{`{"type":"launch"}`, errcode.BadDocument},
		{`{"type":"publish","alias":"a","root":"sha256:00","expectedGeneration":0}`, errcode.BadDocument},
		{`{"type":"publish","alias":"a","bogus":1}`, errcode.BadDocument},
		{`{"type":"advanceFence","kind":"tombstone","value":-1}`, errcode.BadDocument},
		{`{"type":"cancelRun","run":"x"} {}`, errcode.BadDocument},
		{`{"type":"cancelRun","run":"x"}]`, errcode.BadDocument},
		{`{"type":"cancelRun","run":"x"}}`, errcode.BadDocument},
		{`{"type":"cancelRun","run":"x"} ]`, errcode.BadDocument},
		{`[]`, errcode.BadDocument},
		{`{"tYpe":"cancelRun","run":"x"}`, errcode.BadDocument},
		{`{"type":"cancelRun","run":"x","run":"y"}`, errcode.BadDocument},
		{`{"type":"register","root":"sha256:0000000000000000000000000000000000000000000000000000000000000000","shards":[],"report":{"Verdict":"VERIFIED"}}`, errcode.BadDocument},
		{`{"type":"register","root":"sha256:0000000000000000000000000000000000000000000000000000000000000000","shards":[],"report":{"verdict":"VERIFIED","verdict":"INVALID"}}`, errcode.BadDocument},
		{``, errcode.BadDocument},
	} {
		_, err := DecodeCommand([]byte(tc.in))
		if errcode.Of(err) != tc.code {
			t.Errorf("%s: got %v, want %s", tc.in, err, tc.code)
		}
		if res := NewFSM().ApplyBytes([]byte(tc.in)); res.Err == nil {
			t.Errorf("%s: Apply accepted it", tc.in)
		}
	}
}

// script returns a deterministic pseudo-random command log touching every
// command type, valid and invalid. It consults a shadow FSM so that most
// commands are plausible (current generations, fences near the current ones).
func script(t testing.TB, seed uint64, n int) [][]byte {
	rng := rand.New(rand.NewPCG(seed, 1))
	shadow := NewFSM()
	var out [][]byte
	emit := func(c Command) {
		b, err := EncodeCommand(c)
		if err != nil {
			t.Fatal(err)
		}
		shadow.ApplyBytes(b)
		out = append(out, b)
	}
	var now int64 = 1_000
	var roots []manifest.Digest
	for i := range 8 {
		label := fmt.Sprintf("rel%d", i)
		roots = append(roots, dig(label))
		emit(&Register{Header: Header{Now: now}, Root: dig(label), Shards: shardsOf(label, 1+i), Report: &ReportSummary{
			Digest: dig("rep" + label), Verdict: manifest.Verified, DatasetSnapshot: dig("snap"),
		}})
	}
	aliases := []string{"a", "b"}
	runs := []string{"r0"}
	for range n {
		now += int64(rng.IntN(400))
		h := Header{Now: now}
		ri := rng.IntN(len(roots))
		root := roots[ri]
		alias := aliases[rng.IntN(2)]
		runID := runs[max(0, len(runs)-1-rng.IntN(3))]
		var st *State
		shadow.Read(func(s *State) { st = s }) // single goroutine: safe to keep
		gen := uint64(0)
		if al := st.Aliases[alias]; al != nil {
			gen = al.Generation
		}
		if rng.IntN(5) == 0 {
			gen = uint64(rng.IntN(int(gen) + 2))
		}
		fenceFor := func(kind string) uint64 {
			if kind == FenceTombstone {
				return st.Fences.Tombstone
			}
			return st.Fences.Benchmark
		}
		kind := []string{FenceTombstone, FenceBenchmark}[rng.IntN(2)]
		pick := rng.IntN(13)
		if st.PrunedRuns[runID] != nil && rng.IntN(4) == 0 {
			pick = 5 // now and then, create a run in place of a pruned one
		}
		switch pick {
		case 0, 1:
			emit(&Publish{Header: h, Alias: alias, Root: root, ExpectedGeneration: gen, Retain: rng.IntN(4)})
		case 2:
			emit(&Rollback{Header: h, Alias: alias, Root: root, ExpectedGeneration: gen})
		case 3:
			emit(&AdvanceFence{Header: h, Kind: kind, Value: fenceFor(kind) + uint64(rng.IntN(3)) - 1})
		case 4:
			emit(&RecheckCmd{Header: h, Root: root, Kind: kind, Value: fenceFor(kind) + uint64(rng.IntN(2)), Report: dig("x"), Hits: int64(rng.IntN(30) / 29)})
		case 5:
			// A pruned run's ID answers RUN_PRUNED for good: move on.
			if rng.IntN(2) == 0 || st.PrunedRuns[runID] != nil {
				runID = fmt.Sprintf("r%d", len(runs))
			}
			emit(&CreateRun{Header: h, Run: runID, Alias: alias, WorldSize: 1 + rng.IntN(3), BarrierTimeoutMs: 3000})
			if st.Runs[runID] != nil && !slices.Contains(runs, runID) {
				runs = append(runs, runID)
			}
		case 6, 7, 8:
			// Mostly honest attestations of the run's assignment.
			run := st.Runs[runID]
			if run == nil || rng.IntN(8) == 0 {
				emit(&Attest{Header: h, Run: runID, Rank: rng.IntN(3), Root: root, Shards: shardsOf(fmt.Sprintf("rel%d", ri), 1)})
				break
			}
			rank := rng.IntN(run.WorldSize)
			rel := st.Releases[run.Root.String()]
			var shards []manifest.Digest
			for _, i := range run.Assignment[rank] {
				shards = append(shards, rel.Shards[i])
			}
			emit(&Attest{Header: h, Run: runID, Rank: rank, Root: run.Root, Shards: shards})
		case 9:
			emit(&Reassign{Header: h, Run: runID, WorldSize: 1 + rng.IntN(3), Reset: []int{0}[:rng.IntN(2)]})
		case 12:
			label := fmt.Sprintf("rel%d", len(roots))
			roots = append(roots, dig(label))
			emit(&Register{Header: h, Root: dig(label), Shards: shardsOf(label, 1+rng.IntN(5)), Report: &ReportSummary{
				Digest: dig("rep" + label), Verdict: manifest.Verified, DatasetSnapshot: dig("snap"),
				TombstoneWatermark: st.Fences.Tombstone, BenchmarkFence: st.Fences.Benchmark,
			}})
		case 10:
			r := root
			if run := st.Runs[runID]; run != nil && rng.IntN(4) > 0 {
				r = run.Root
			}
			emit(&AdmitCheckpoint{Header: h, Run: runID, Step: int64(rng.IntN(10)), Root: r})
		default:
			switch rng.IntN(9) {
			case 0:
				emit(&Prune{Header: h, OlderThanMs: int64(rng.IntN(20_000))})
			case 1, 2, 3, 4:
				emit(&CheckBarrier{Header: h, Run: runID})
			default:
				emit(&CancelRun{Header: h, Run: runID})
			}
		}
	}
	return out
}

func TestDeterministicSnapshots(t *testing.T) {
	log := script(t, 7, 3000)
	a, b := NewFSM(), NewFSM()
	accepted, prunedRuns, prunedReleases := 0, 0, 0
	codes := map[errcode.Code]int{}
	for _, e := range log {
		ra, rb := a.ApplyBytes(e), b.ApplyBytes(e)
		if errcode.Of(ra.Err) != errcode.Of(rb.Err) {
			t.Fatalf("replicas disagree on %s: %v vs %v", e, ra.Err, rb.Err)
		}
		if ra.Err == nil {
			accepted++
		}
		if pr, ok := ra.Value.(PruneResult); ok {
			prunedRuns += len(pr.Runs)
			prunedReleases += len(pr.Releases)
		}
		codes[errcode.Of(ra.Err)]++
	}
	sa, _ := a.Encode()
	sb, _ := b.Encode()
	if !bytes.Equal(sa, sb) {
		t.Fatal("the same log gave different snapshots")
	}
	var st *State
	a.Read(func(s *State) { st = s })
	if err := st.Validate(); err != nil {
		t.Fatal(err)
	}
	opened := 0
	for _, r := range st.Runs {
		if r.BarrierOpened > 0 {
			opened++
		}
	}
	if accepted < len(log)/5 || len(st.Aliases) < 2 || opened == 0 || st.Aliases["a"].Generation < 5 || prunedRuns == 0 || prunedReleases == 0 {
		t.Fatalf("script too weak: %d of %d accepted, %d aliases, %d runs opened their barrier, pruned %d runs and %d releases; codes %v",
			accepted, len(log), len(st.Aliases), opened, prunedRuns, prunedReleases, codes)
	}

	snap, err := a.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	sink := &memSink{}
	if err := snap.Persist(sink); err != nil {
		t.Fatal(err)
	}
	c := NewFSM()
	if err := c.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))); err != nil {
		t.Fatal(err)
	}
	sc, _ := c.Encode()
	if !bytes.Equal(sa, sc) {
		t.Fatal("Snapshot→Restore→Snapshot changed the bytes")
	}
	// The restored replica keeps applying in lockstep.
	for _, e := range script(t, 8, 300) {
		a.ApplyBytes(e)
		c.ApplyBytes(e)
	}
	sa, _ = a.Encode()
	sc, _ = c.Encode()
	if !bytes.Equal(sa, sc) {
		t.Fatal("restored replica diverged")
	}
}

func TestRestoreRejectsCorruptSnapshot(t *testing.T) {
	h := newHarness(t)
	root := h.verified("rel", 2, 0, 0)
	h.ok(&Publish{Alias: "main", Root: root})
	good, _ := h.f.Encode()
	for name, b := range map[string][]byte{
		"truncated":     good[:len(good)/2],
		"unknown field": bytes.Replace(good, []byte(`"fences"`), []byte(`"fencez"`), 1),
		"dangling root": bytes.Replace(good, []byte(`"aliases":{"main":{"name":"main","generation":1,"root":"`+root.String()), []byte(`"aliases":{"main":{"name":"main","generation":1,"root":"`+dig("zz").String()), 1),
	} {
		f := NewFSM()
		if err := f.Restore(io.NopCloser(bytes.NewReader(b))); errcode.Of(err) != errcode.BadDocument {
			t.Errorf("%s: Restore returned %v, want BAD_DOCUMENT", name, err)
		}
	}
}

type memSink struct{ bytes.Buffer }

func (m *memSink) ID() string    { return "mem" }
func (m *memSink) Cancel() error { return nil }
func (m *memSink) Close() error  { return nil }

func TestSentinelsMatchByCode(t *testing.T) {
	h := newHarness(t)
	r1 := h.verified("r1", 1, 0, 0)
	h.ok(&Publish{Alias: "a", Root: r1})
	res := h.do(&Publish{Alias: "a", Root: r1, ExpectedGeneration: 4})
	if !errors.Is(res.Err, ErrGenerationConflict) || errors.Is(res.Err, ErrPublishConflict) {
		t.Fatalf("errors.Is by code failed for %v", res.Err)
	}
}

func TestRejectionTable(t *testing.T) {
	h := newHarness(t)
	root := h.verified("rel", 2, 0, 0)
	staged := dig("staged")
	h.ok(&Register{Root: staged, Shards: shardsOf("staged", 1)})
	h.ok(&Publish{Alias: "main", Root: root})
	h.ok(&CreateRun{Run: "job", Alias: "main", WorldSize: 2})
	for _, tc := range []struct {
		name string
		cmd  Command
		code errcode.Code
	}{
		{"recheck unknown release", &RecheckCmd{Root: dig("nope"), Kind: FenceTombstone}, errcode.UnknownRelease},
		{"recheck staged", &RecheckCmd{Root: staged, Kind: FenceTombstone}, errcode.NotVerified},
		{"recheck bad kind", &RecheckCmd{Root: root, Kind: "x"}, errcode.BadInput},
		{"recheck negative hits", &RecheckCmd{Root: root, Kind: FenceTombstone, Hits: -1}, errcode.BadCount},
		{"register negative hits", &Register{Root: dig("n"), Shards: shardsOf("n", 1), Report: &ReportSummary{Verdict: manifest.Invalid, TombstoneHits: -2}}, errcode.BadCount},
		{"register bad verdict", &Register{Root: dig("n"), Shards: shardsOf("n", 1), Report: &ReportSummary{Verdict: "MAYBE"}}, errcode.BadInput},
		{"register no shards", &Register{Root: dig("n")}, errcode.BadInput},
		{"register the recorded report as INVALID", &Register{Root: root, Shards: shardsOf("rel", 2), Report: &ReportSummary{Digest: dig("report/rel"), Verdict: manifest.Invalid, DatasetSnapshot: dig("snap")}}, errcode.BadInput},
		{"register the recorded report with another snapshot", &Register{Root: root, Shards: shardsOf("rel", 2), Report: &ReportSummary{Digest: dig("report/rel"), Verdict: manifest.Verified, DatasetSnapshot: dig("other-snap")}}, errcode.BadInput},
		{"register other snapshot", &Register{Root: root, Shards: shardsOf("rel", 2), Report: &ReportSummary{Digest: dig("r9"), Verdict: manifest.Verified, DatasetSnapshot: dig("other-snap")}}, errcode.BadInput},
		{"publish retain too large", &Publish{Alias: "new", Root: root, Retain: MaxRetain + 1}, errcode.BadInput},
		{"rollback unknown alias", &Rollback{Alias: "nope", Root: root}, errcode.UnknownAlias},
		{"createRun bad id", &CreateRun{Run: "a b", Alias: "main", WorldSize: 1}, errcode.BadInput},
		{"createRun too large", &CreateRun{Run: "big", Alias: "main", WorldSize: MaxWorldSize + 1}, errcode.BadInput},
		{"createRun negative timeout", &CreateRun{Run: "neg", Alias: "main", WorldSize: 1, BarrierTimeoutMs: -1}, errcode.BadInput},
		{"attest unknown run", &Attest{Run: "nope", Root: root}, errcode.UnknownRun},
		{"attest rank out of range", &Attest{Run: "job", Rank: 2, Root: root}, errcode.BadInput},
		{"reassign unknown run", &Reassign{Run: "nope", WorldSize: 1}, errcode.UnknownRun},
		{"reassign reset out of range", &Reassign{Run: "job", WorldSize: 2, Reset: []int{2}}, errcode.BadInput},
		{"reassign partial assignment", &Reassign{Run: "job", WorldSize: 2, Assignment: [][]int{{0}, {}}}, errcode.BadInput},
		{"checkpoint unknown run", &AdmitCheckpoint{Run: "nope", Root: root}, errcode.UnknownRun},
		{"checkBarrier unknown run", &CheckBarrier{Run: "nope"}, errcode.UnknownRun},
		{"join incomplete", &Join{ID: "n1"}, errcode.BadInput},
	} {
		before := h.state()
		res := h.do(tc.cmd)
		if got := errcode.Of(res.Err); got != tc.code {
			t.Errorf("%s: got %q (%v), want %s", tc.name, got, res.Err, tc.code)
		}
		after := h.state()
		b1, _ := EncodeState(before)
		b2, _ := EncodeState(after)
		if !bytes.Equal(b1, b2) {
			t.Errorf("%s: a rejection changed the state", tc.name)
		}
	}
}

// Digest names the state and the log index of the last command applied:
// equal logs give equal (index, digest) pairs, a restore forgets the index
// (the snapshot's is not passed to the FSM) but not the state.
func TestDigestFollowsLog(t *testing.T) {
	log := script(t, 9, 200)
	a, b := NewFSM(), NewFSM()
	if idx, _, err := a.Digest(); err != nil || idx != 0 {
		t.Fatalf("fresh FSM: index %d, %v", idx, err)
	}
	var mid manifest.Digest
	for i, e := range log {
		l := &raft.Log{Index: uint64(10 + i), Type: raft.LogCommand, Data: e}
		a.Apply(l)
		b.Apply(l)
		if i == len(log)/2 {
			_, mid, _ = a.Digest()
		}
	}
	ia, da, err := a.Digest()
	if err != nil {
		t.Fatal(err)
	}
	ib, db, _ := b.Digest()
	if ia != uint64(10+len(log)-1) || ia != ib || da != db {
		t.Fatalf("replicas: (%d, %s) and (%d, %s), want index %d and equal digests", ia, da, ib, db, 10+len(log)-1)
	}
	if da == mid {
		t.Fatal("the digest did not change over half the log")
	}
	sa, _ := a.Encode()
	if da != manifest.Sum(sa) {
		t.Fatal("the digest is not the sha256 of the snapshot bytes")
	}
	// A non-command entry (a configuration change) is not the FSM's.
	a.Apply(&raft.Log{Index: 999, Type: raft.LogConfiguration})
	if i, _, _ := a.Digest(); i != ia {
		t.Fatalf("a configuration entry moved the index to %d", i)
	}
	c := NewFSM()
	if err := c.Restore(io.NopCloser(bytes.NewReader(sa))); err != nil {
		t.Fatal(err)
	}
	if ic, dc, _ := c.Digest(); ic != 0 || dc != da {
		t.Fatalf("restored: (%d, %s), want (0, %s)", ic, dc, da)
	}
}

// StalePublish judges only a whole alias: one whose history does not hold
// every generation (a truncated or forged answer) gives no verdict rather
// than a panic or a wrong one.
func TestStalePublishPartialAlias(t *testing.T) {
	root := manifest.Sum([]byte("r"))
	other := manifest.Sum([]byte("o"))
	for _, al := range []*Alias{nil, {Generation: 3}, {Generation: 2, History: []HistoryEntry{{Generation: 1, Root: other, Kind: CmdPublish}}}} {
		if err := StalePublish(al, root, 0); err != nil {
			t.Fatalf("%+v: %v, want no verdict", al, err)
		}
	}
	whole := &Alias{Generation: 2, History: []HistoryEntry{{Generation: 1, Root: other, Kind: CmdPublish}, {Generation: 2, Root: root, Kind: CmdPublish}}}
	if err := StalePublish(whole, root, 1); err != nil {
		t.Fatalf("retry of the publish that made generation 2: %v", err)
	}
	if err := StalePublish(whole, root, 0); errcode.Of(err) != errcode.GenerationConflict {
		t.Fatalf("expect 0 after generation 1 went to another root: %v, want GENERATION_CONFLICT", err)
	}
	if err := StalePublish(whole, other, 1); errcode.Of(err) != errcode.PublishConflict {
		t.Fatalf("expect 1, generation 2 is another root's: %v, want PUBLISH_CONFLICT", err)
	}
	if err := StalePublish(whole, other, 2); err != nil {
		t.Fatalf("expect the current generation: %v", err)
	}
}

// A register that repeats the recorded report is a retry and changes
// nothing, even when a recheck with hits has made the release INVALID
// since: the report itself was VERIFIED.
func TestRegisterRetryAfterRecheckHits(t *testing.T) {
	h := newHarness(t)
	root := h.verified("rel", 2, 0, 0)
	h.reject(&RecheckCmd{Root: root, Kind: FenceTombstone, Value: 3, Report: dig("recheck"), Hits: 1}, errcode.TombstoneHit)
	if st := h.state().Releases[root.String()].State; st != ReleaseInvalid {
		t.Fatalf("after a recheck with hits the release is %s", st)
	}
	before, _ := EncodeState(h.state())
	res := h.do(&Register{Root: root, Shards: shardsOf("rel", 2), Report: &ReportSummary{
		Digest: dig("report/rel"), Verdict: manifest.Verified, DatasetSnapshot: dig("snap")}})
	if res.Err != nil {
		t.Fatalf("retry of the recorded report: %v", res.Err)
	}
	if got := res.Value.(RecheckResult).Release.State; got != ReleaseInvalid {
		t.Fatalf("retry answers state %s, want %s", got, ReleaseInvalid)
	}
	if after, _ := EncodeState(h.state()); !bytes.Equal(before, after) {
		t.Fatal("the retry changed the state")
	}
}

// An FSM given a committed entry it cannot decode halts there: that entry
// and every later one change nothing (the one after used to be applied,
// on a state that lacked the first), and no snapshot is taken, which Raft
// would label with an index the state does not reflect.
func TestFSMHaltsAtUndecodableEntry(t *testing.T) {
	f := NewFSM()
	fence := func(v uint64) []byte {
		b, err := EncodeCommand(&AdvanceFence{Kind: FenceTombstone, Value: v})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	entry := func(i uint64, b []byte) *Result {
		return f.Apply(&raft.Log{Index: i, Type: raft.LogCommand, Data: b}).(*Result)
	}
	if r := entry(1, fence(1)); r.Err != nil {
		t.Fatal(r.Err)
	}
	newer := bytes.Replace(fence(2), []byte(`{`), []byte(`{"future":1,`), 1)
	if r := entry(2, newer); errcode.Of(r.Err) != errcode.GateHalted {
		t.Fatalf("an entry with an unknown field: %v, want GATE_HALTED", r.Err)
	}
	if r := entry(3, fence(3)); errcode.Of(r.Err) != errcode.GateHalted {
		t.Fatalf("the entry after it: %v, want GATE_HALTED", r.Err)
	}
	var tomb uint64
	f.Read(func(s *State) { tomb = s.Fences.Tombstone })
	if _, h := f.Halted(); tomb != 1 || h == nil || h.Index != 2 {
		t.Fatalf("tombstone %d, halt %v: want 1, halted at entry 2", tomb, h)
	}
	if idx, _, _ := f.Digest(); idx != 1 {
		t.Fatalf("state index %d, want 1", idx)
	}
	if _, err := f.Snapshot(); errcode.Of(err) != errcode.GateHalted {
		t.Fatalf("snapshot of a halted FSM: %v, want GATE_HALTED", err)
	}
}

// A snapshot this build cannot decode (a newer build's field, sent by a
// leader to a member too far behind for its log) halts the FSM as an
// undecodable entry does: the state stays the one before, nothing is
// applied after it, no snapshot is taken, and a later snapshot that does
// decode is not restored over the halt either.
func TestFSMHaltsAtUndecodableSnapshot(t *testing.T) {
	src := NewFSM()
	for v := uint64(1); v <= 3; v++ {
		b, err := EncodeCommand(&AdvanceFence{Kind: FenceTombstone, Value: v})
		if err != nil {
			t.Fatal(err)
		}
		if r := src.Apply(&raft.Log{Index: v, Type: raft.LogCommand, Data: b}).(*Result); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	good, err := src.Encode()
	if err != nil {
		t.Fatal(err)
	}
	newer := bytes.Replace(good, []byte(`{`), []byte(`{"future":1,`), 1)

	f := NewFSM()
	fence1, err := EncodeCommand(&AdvanceFence{Kind: FenceTombstone, Value: 1})
	if err != nil {
		t.Fatal(err)
	}
	if r := f.Apply(&raft.Log{Index: 1, Type: raft.LogCommand, Data: fence1}).(*Result); r.Err != nil {
		t.Fatal(r.Err)
	}
	if err := f.Restore(io.NopCloser(bytes.NewReader(newer))); errcode.Of(err) != errcode.BadDocument {
		t.Fatalf("restore of a newer build's snapshot: %v, want BAD_DOCUMENT", err)
	}
	_, h := f.Halted()
	if h == nil || !h.Snapshot || errcode.Of(h) != errcode.GateHalted || !strings.Contains(h.Error(), "snapshot") {
		t.Fatalf("halt after the snapshot: %v, want GATE_HALTED naming a snapshot", h)
	}
	if err := f.Restore(io.NopCloser(bytes.NewReader(good))); errcode.Of(err) != errcode.GateHalted {
		t.Fatalf("restore of a good snapshot after the halt: %v, want GATE_HALTED", err)
	}
	fence5, err := EncodeCommand(&AdvanceFence{Kind: FenceTombstone, Value: 5})
	if err != nil {
		t.Fatal(err)
	}
	if r := f.Apply(&raft.Log{Index: 9, Type: raft.LogCommand, Data: fence5}).(*Result); errcode.Of(r.Err) != errcode.GateHalted {
		t.Fatalf("an entry after the halt: %v, want GATE_HALTED", r.Err)
	}
	var tomb uint64
	f.Read(func(s *State) { tomb = s.Fences.Tombstone })
	if tomb != 1 {
		t.Fatalf("tombstone fence %d after the halt, want 1 (the state before the snapshot)", tomb)
	}
	if _, err := f.Snapshot(); errcode.Of(err) != errcode.GateHalted {
		t.Fatalf("snapshot of a halted FSM: %v, want GATE_HALTED", err)
	}
}
