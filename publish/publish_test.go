package publish_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/shardproof/shardproof/coordinator"
	"github.com/shardproof/shardproof/internal/canon"
	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/objstore"
	"github.com/shardproof/shardproof/objstore/faults"
	"github.com/shardproof/shardproof/publish"
	"github.com/shardproof/shardproof/raftgate"
	"github.com/shardproof/shardproof/stage"
	"github.com/shardproof/shardproof/stage/stagetest"
)

// env is a real file store and a real single-node gate on loopback; the
// verifier is the coordinator's local executor.
type env struct {
	t     *testing.T
	ctx   context.Context
	store objstore.Store
	gate  *raftgate.Client
	quiet *slog.Logger
}

func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{t: t, ctx: context.Background(), store: stagetest.Store(t), quiet: slog.New(slog.NewTextHandler(io.Discard, nil))}
	n := raftgate.StartTestNode(t, raftgate.TestConfig(t.TempDir(), "gate1"))
	e.gate = raftgate.NewClient(n.URL())
	t.Cleanup(e.gate.Close)
	deadline := time.Now().Add(10 * time.Second)
	for !n.IsLeader() {
		if time.Now().After(deadline) {
			t.Fatal("gate did not become leader")
		}
		time.Sleep(20 * time.Millisecond)
	}
	return e
}

func verifier(s objstore.Store) publish.VerifyFunc {
	return func(ctx context.Context, root, tomb, bench manifest.Digest) (*manifest.Report, manifest.Digest, error) {
		out, err := coordinator.Verify(ctx, s, coordinator.Options{PlanOptions: coordinator.PlanOptions{
			Root: root, Tombstones: tomb, Benchmark: bench, Parallelism: 2, Tool: "publish_test",
		}})
		if err != nil {
			return nil, manifest.Digest{}, err
		}
		return out.Report, out.ReportDigest, nil
	}
}

func (e *env) opts(root manifest.Digest) publish.Options {
	return publish.Options{Alias: "main", Root: root, Verify: verifier(e.store), Logger: e.quiet}
}

func (e *env) publish(g publish.Gate, o publish.Options) (*publish.Outcome, error) {
	if g == nil {
		g = e.gate
	}
	return publish.Publish(e.ctx, e.store, g, o)
}

func (e *env) alias() *raftgate.Alias {
	e.t.Helper()
	al, err := e.gate.Alias(e.ctx, "main")
	if err != nil {
		e.t.Fatalf("alias: %v", err)
	}
	return al
}

func wantCode(t *testing.T, err error, code errcode.Code) {
	t.Helper()
	if got := errcode.Of(err); got != code {
		t.Fatalf("code %s (%v), want %s", got, err, code)
	}
}

// putFenceLog stores a fence document and returns its digest.
func (e *env) putFenceLog(schema string, entries ...manifest.FenceEntry) manifest.Digest {
	e.t.Helper()
	b, err := manifest.Encode(&manifest.FenceLog{Schema: schema, Entries: entries})
	if err != nil {
		e.t.Fatal(err)
	}
	d, _, _, err := objstore.PutBlob(e.ctx, e.store, b)
	if err != nil {
		e.t.Fatal(err)
	}
	return d
}

func TestPublishVerifiesRegistersAndIsSafeToRerun(t *testing.T) {
	e := newEnv(t)
	gen1 := stagetest.Synth(t, e.store, 2000, 8, 1)
	out, err := e.publish(nil, e.opts(gen1.Root))
	if err != nil {
		t.Fatal(err)
	}
	if out.Reused || out.Report.Verdict != manifest.Verified || out.Result.Generation != 1 || out.Result.Root != gen1.Root {
		t.Fatalf("first publish: %+v", out)
	}
	rel, _ := e.gate.Release(e.ctx, gen1.Root)
	if rel.State != raftgate.ReleasePublished || rel.Report != out.ReportDigest {
		t.Fatalf("release %s report %s", rel.State, rel.Report)
	}
	// Rerun without --expect-generation: already there, nothing new.
	again, err := e.publish(nil, e.opts(gen1.Root))
	if err != nil || !again.Already || again.Result.Generation != 1 {
		t.Fatalf("rerun: %+v, %v", again, err)
	}
	// Rerun with the generation it was published from: the gate's
	// idempotent answer, with the stored report reused (no verify).
	o := e.opts(gen1.Root)
	o.HasExpect, o.ExpectGeneration = true, 0
	o.Verify = func(context.Context, manifest.Digest, manifest.Digest, manifest.Digest) (*manifest.Report, manifest.Digest, error) {
		t.Fatal("verify ran although the gate holds a report of this root at the current fences")
		return nil, manifest.Digest{}, nil
	}
	retry, err := e.publish(nil, o)
	if err != nil || !retry.Reused || retry.Result != out.Result {
		t.Fatalf("retry with expect 0: %+v, %v; want %+v", retry, err, out.Result)
	}
	if al := e.alias(); al.Generation != 1 {
		t.Fatalf("alias at generation %d after reruns", al.Generation)
	}
}

// lossy applies the first register and the first publish for real, then
// reports their outcome as unknown, as a leader lost mid-commit or a
// dropped connection would.
type lossy struct {
	publish.Gate
	mu        sync.Mutex
	calls     int
	registers int
}

func (l *lossy) Register(ctx context.Context, cmd *raftgate.Register) (*raftgate.RecheckResult, error) {
	res, err := l.Gate.Register(ctx, cmd)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.registers++
	if l.registers == 1 && err == nil {
		return nil, errcode.Wrap(errcode.Indeterminate, raftgate.ErrIndeterminate, "answer lost")
	}
	return res, err
}

func (l *lossy) Publish(ctx context.Context, alias string, root manifest.Digest, expected uint64, retain int) (*raftgate.PublishResult, error) {
	res, err := l.Gate.Publish(ctx, alias, root, expected, retain)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls++
	if l.calls == 1 && err == nil {
		return nil, errcode.Wrap(errcode.Indeterminate, raftgate.ErrIndeterminate, "answer lost")
	}
	return res, err
}

// A CAS retry with the same digest is idempotent; with another digest it
// conflicts.
func TestCASRetrySameDigestIdempotentOtherDigestConflicts(t *testing.T) {
	e := newEnv(t)
	gen1 := stagetest.Synth(t, e.store, 1500, 4, 1)
	gen2 := stagetest.Synth(t, e.store, 1500, 4, 2)
	if _, err := e.publish(nil, e.opts(gen1.Root)); err != nil {
		t.Fatal(err)
	}
	g := &lossy{Gate: e.gate}
	o := e.opts(gen2.Root)
	o.HasExpect, o.ExpectGeneration = true, 1
	out, err := e.publish(g, o)
	if err != nil {
		t.Fatalf("publish after a lost answer: %v", err)
	}
	// Registers: STAGED (answer lost), STAGED again, then the report.
	if g.calls != 2 || g.registers != 3 || out.Result.Generation != 2 || out.Result.Root != gen2.Root {
		t.Fatalf("%d publish and %d register calls, result %+v", g.calls, g.registers, out.Result)
	}
	al := e.alias()
	if al.Generation != 2 || len(al.History) != 2 {
		t.Fatalf("alias generation %d with %d history entries: the retry published twice", al.Generation, len(al.History))
	}
	// The same CAS with the other digest loses: generation 2 is taken.
	o = e.opts(gen1.Root)
	o.HasExpect, o.ExpectGeneration = true, 1
	_, err = e.publish(nil, o)
	wantCode(t, err, errcode.PublishConflict)
	if al := e.alias(); al.Generation != 2 || al.Root != gen2.Root {
		t.Fatalf("alias moved on a conflicting retry: %d %s", al.Generation, al.Root)
	}
}

func TestTwoPublishersRacingOnOneGenerationExactlyOneWins(t *testing.T) {
	e := newEnv(t)
	gen1 := stagetest.Synth(t, e.store, 1500, 4, 1)
	gen2 := stagetest.Synth(t, e.store, 1500, 4, 2)
	gen3 := stagetest.Synth(t, e.store, 1500, 4, 3)
	if _, err := e.publish(nil, e.opts(gen1.Root)); err != nil {
		t.Fatal(err)
	}
	roots := []manifest.Digest{gen2.Root, gen3.Root}
	errs := make([]error, 2)
	outs := make([]*publish.Outcome, 2)
	var wg sync.WaitGroup
	for i, r := range roots {
		wg.Go(func() {
			o := e.opts(r)
			o.HasExpect, o.ExpectGeneration = true, 1
			outs[i], errs[i] = e.publish(nil, o)
		})
	}
	wg.Wait()
	won := -1
	for i, err := range errs {
		switch c := errcode.Of(err); c {
		case "":
			if won >= 0 {
				t.Fatal("both publishers won")
			}
			won = i
		case errcode.PublishConflict:
		default:
			t.Fatalf("publisher %d: %s (%v), want success or PUBLISH_CONFLICT", i, c, err)
		}
	}
	if won < 0 {
		t.Fatalf("nobody won: %v", errs)
	}
	al := e.alias()
	if al.Generation != 2 || al.Root != roots[won] || outs[won].Result.Generation != 2 {
		t.Fatalf("alias at %d -> %s, winner %d published %s", al.Generation, al.Root, won, roots[won])
	}
}

// A prefix listing that misses one of 100 uploaded shards yields a
// manifest of 99: verify finds the missing members, the candidate is
// registered INVALID and the alias does not move.
func TestListingMissingOneShardPublishesNothing(t *testing.T) {
	e := newEnv(t)
	good := stagetest.Synth(t, e.store, 2000, 4, 7)
	if _, err := e.publish(nil, e.opts(good.Root)); err != nil {
		t.Fatal(err)
	}
	full := stagetest.Synth(t, e.store, 3000, 100, 8)
	lost := full.Release.Shards[57].Digest.BlobKey()
	listing := &faults.StaleList{Store: e.store, Omit: func(k string) bool { return k == lost }}
	listed := map[string]bool{}
	for after := ""; ; {
		page, err := listing.List(e.ctx, objstore.BlobPrefix, after, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range page.Objects {
			listed[o.Key] = true
		}
		if after = page.Next; after == "" {
			break
		}
	}
	// The uploader assembles its manifest from what the listing shows,
	// with honest totals and tuple root for those shards.
	rel := stagetest.CloneRelease(full.Release)
	rel.Shards = rel.Shards[:0]
	for _, s := range full.Release.Shards {
		if listed[s.Digest.BlobKey()] {
			rel.Shards = append(rel.Shards, s)
		}
	}
	if len(rel.Shards) != 99 {
		t.Fatalf("listing shows %d shards, want 99", len(rel.Shards))
	}
	cand := stagetest.Reissue(t, e.store, full, rel, true)

	out, err := e.publish(nil, e.opts(cand.Root))
	wantCode(t, err, errcode.MissingMember)
	if out == nil || out.Report.Verdict != manifest.Invalid || out.Report.Counts.Missing == 0 {
		t.Fatalf("outcome %+v", out)
	}
	if al := e.alias(); al.Generation != 1 || al.Root != good.Root {
		t.Fatalf("alias moved to %d -> %s", al.Generation, al.Root)
	}
	rel2, _ := e.gate.Release(e.ctx, cand.Root)
	if rel2.State != raftgate.ReleaseInvalid {
		t.Fatalf("candidate is %s, want INVALID", rel2.State)
	}
	// A second attempt is refused at once, with the first one's code (and
	// exit status), and the gate refuses the raw CAS too.
	_, err = e.publish(nil, e.opts(cand.Root))
	wantCode(t, err, errcode.MissingMember)
	_, err = e.gate.Publish(e.ctx, "main", cand.Root, 1, 0)
	wantCode(t, err, errcode.NotVerified)
}

// Mixed schemas across shards: one shard written with another record
// schema keeps the candidate out.
func TestMixedSchemasKeepCandidateOut(t *testing.T) {
	e := newEnv(t)
	res := stagetest.Synth(t, e.store, 1500, 4, 9)
	rows := stagetest.ShardRows(t, e.store, res, 2)
	rec := stage.BuildRows(rows)
	defer rec.Release()
	other := stage.DefaultSchema()
	other.Fields[4].Name = "language"
	od, _ := canon.SchemaDigest(other)
	as, _ := canon.ArrowSchema(other)
	orec := array.NewRecordBatch(as, rec.Columns(), rec.NumRows())
	defer orec.Release()
	rel := stagetest.CloneRelease(res.Release)
	rel.Shards[2] = stagetest.WriteShard(t, e.store, rel.Shards[2].ID, orec, other, od, stage.ParquetOptions{})
	cand := stagetest.Reissue(t, e.store, res, rel, false)
	_, err := e.publish(nil, e.opts(cand.Root))
	if c := errcode.Of(err); c != errcode.SchemaMismatch && c != errcode.SchemaMix {
		t.Fatalf("code %s (%v), want SCHEMA_MISMATCH", c, err)
	}
	if _, err := e.gate.Alias(e.ctx, "main"); errcode.Of(err) != errcode.UnknownAlias {
		t.Fatalf("alias exists after a refused first publish: %v", err)
	}
}

// Fence advance closes permits; recheck renews only with zero hits; a run
// whose permit stays closed cannot admit checkpoints and is replaced;
// rollback works within the window and is refused for a root that fails
// the current fences.
func TestFenceAdvanceRecheckRollback(t *testing.T) {
	e := newEnv(t)
	gen1 := stagetest.Synth(t, e.store, 1500, 4, 1)
	gen2 := stagetest.Synth(t, e.store, 1500, 4, 2)
	if _, err := e.publish(nil, e.opts(gen1.Root)); err != nil {
		t.Fatal(err)
	}
	if _, err := e.gate.CreateRun(e.ctx, &raftgate.CreateRun{Run: "r1", Alias: "main", WorldSize: 1}); err != nil {
		t.Fatal(err)
	}
	attest(t, e, "r1", gen1)
	o := e.opts(gen2.Root)
	o.HasExpect, o.ExpectGeneration = true, 1
	if _, err := e.publish(nil, o); err != nil {
		t.Fatal(err)
	}

	// Tombstones: seq 3 deletes a sample of generation 2 only.
	victim := stagetest.ShardRows(t, e.store, gen2, 0)[0].SampleID
	tomb := e.putFenceLog(manifest.TombstonesSchema,
		manifest.FenceEntry{Seq: 1, SampleID: "no-such-sample"},
		manifest.FenceEntry{Seq: 3, SampleID: victim})
	fr, err := e.gate.AdvanceFence(e.ctx, raftgate.FenceTombstone, 3)
	if err != nil || len(fr.Closed) == 0 {
		t.Fatalf("advance: %+v %v", fr, err)
	}
	_, err = e.gate.AdmitCheckpoint(e.ctx, "r1", 1, gen1.Root)
	wantCode(t, err, errcode.PermitClosed)
	// Publishing without the new log is refused before any verify work.
	_, err = e.publish(nil, e.opts(gen1.Root))
	wantCode(t, err, errcode.FenceBehind)

	// Generation 1 has no hits: its run permit is renewed.
	out, err := publish.Recheck(e.ctx, e.store, e.gate, publish.RecheckOptions{Root: gen1.Root, Tombstones: tomb, Verify: verifier(e.store), Logger: e.quiet})
	if err != nil || out.Hits[raftgate.FenceTombstone] != 0 || len(out.Reopened) == 0 {
		t.Fatalf("recheck gen1: %+v %v", out, err)
	}
	if _, err := e.gate.AdmitCheckpoint(e.ctx, "r1", 1, gen1.Root); err != nil {
		t.Fatalf("checkpoint after renewal: %v", err)
	}
	// Generation 2 holds the deleted sample: INVALID, permits stay closed.
	out, err = publish.Recheck(e.ctx, e.store, e.gate, publish.RecheckOptions{Root: gen2.Root, Tombstones: tomb, Verify: verifier(e.store), Logger: e.quiet})
	wantCode(t, err, errcode.TombstoneHit)
	if out.Hits[raftgate.FenceTombstone] != 1 || out.Release.State != raftgate.ReleaseInvalid {
		t.Fatalf("recheck gen2: %+v", out)
	}
	// Rollback to generation 1 (rechecked, in the window) succeeds.
	res, err := e.gate.Rollback(e.ctx, "main", gen1.Root, 2)
	if err != nil || res.Generation != 3 || res.Root != gen1.Root {
		t.Fatalf("rollback: %+v %v", res, err)
	}
	// Rolling back to generation 2, which fails the current fences, is
	// refused.
	_, err = e.gate.Rollback(e.ctx, "main", gen2.Root, 3)
	wantCode(t, err, errcode.RollbackIneligible)
}

// A recheck against a fence document below the gate's fence of its kind
// could renew nothing: it is refused (FENCE_BEHIND, naming the document
// and the fence) before any verification or member read, and the gate
// records nothing.
func TestRecheckWithStaleDocumentRefusedFirst(t *testing.T) {
	e := newEnv(t)
	gen1 := stagetest.Synth(t, e.store, 1200, 4, 1)
	if _, err := e.publish(nil, e.opts(gen1.Root)); err != nil {
		t.Fatal(err)
	}
	stale := e.putFenceLog(manifest.TombstonesSchema, manifest.FenceEntry{Seq: 2, SampleID: "no-such-sample"})
	e.putFenceLog(manifest.TombstonesSchema, manifest.FenceEntry{Seq: 2, SampleID: "no-such-sample"}, manifest.FenceEntry{Seq: 5, SampleID: "another"})
	if _, err := e.gate.AdvanceFence(e.ctx, raftgate.FenceTombstone, 5); err != nil {
		t.Fatal(err)
	}
	before, err := e.gate.Release(e.ctx, gen1.Root)
	if err != nil {
		t.Fatal(err)
	}
	for _, members := range []bool{false, true} {
		verified := 0
		verify := verifier(e.store)
		o := publish.RecheckOptions{Root: gen1.Root, Tombstones: stale, Members: members, Logger: e.quiet,
			Verify: func(ctx context.Context, root, tomb, bench manifest.Digest) (*manifest.Report, manifest.Digest, error) {
				verified++
				return verify(ctx, root, tomb, bench)
			}}
		_, err := publish.Recheck(e.ctx, e.store, e.gate, o)
		wantCode(t, err, errcode.FenceBehind)
		if !strings.Contains(err.Error(), stale.String()) || !strings.Contains(err.Error(), "watermark 2; the gate's fence is 5") {
			t.Fatalf("members=%v: %v does not name the document and the fence", members, err)
		}
		if verified != 0 {
			t.Fatalf("members=%v: verified %d times before refusing", members, verified)
		}
	}
	if after, err := e.gate.Release(e.ctx, gen1.Root); err != nil || after.TombstoneWatermark != before.TombstoneWatermark || after.Report != before.Report {
		t.Fatalf("the gate recorded a refused recheck: %+v -> %+v (%v)", before, after, err)
	}
}

// A rerun of a publish whose alias already points at the root answers
// "published" only while that is true: once a fence advance closed the
// root's permits it is PERMIT_CLOSED, once a recheck found hits it is
// the hit's code, and the alias stays where it is.
func TestRerunOnAliasAtRootReportsItsState(t *testing.T) {
	e := newEnv(t)
	gen1 := stagetest.Synth(t, e.store, 1200, 4, 1)
	if _, err := e.publish(nil, e.opts(gen1.Root)); err != nil {
		t.Fatal(err)
	}
	if again, err := e.publish(nil, e.opts(gen1.Root)); err != nil || !again.Already {
		t.Fatalf("rerun at the root: %+v %v", again, err)
	}
	victim := stagetest.ShardRows(t, e.store, gen1, 0)[0].SampleID
	tomb := e.putFenceLog(manifest.TombstonesSchema, manifest.FenceEntry{Seq: 2, SampleID: victim})
	if _, err := e.gate.AdvanceFence(e.ctx, raftgate.FenceTombstone, 2); err != nil {
		t.Fatal(err)
	}
	out, err := e.publish(nil, e.opts(gen1.Root))
	wantCode(t, err, errcode.PermitClosed)
	if out != nil {
		t.Fatalf("a rerun with closed permits returned %+v", out)
	}
	_, err = publish.Recheck(e.ctx, e.store, e.gate, publish.RecheckOptions{Root: gen1.Root, Tombstones: tomb, Verify: verifier(e.store), Logger: e.quiet})
	wantCode(t, err, errcode.TombstoneHit)
	_, err = e.publish(nil, e.opts(gen1.Root))
	wantCode(t, err, errcode.TombstoneHit)
	if al := e.alias(); al.Generation != 1 || al.Root != gen1.Root {
		t.Fatalf("alias moved to %d -> %s", al.Generation, al.Root)
	}
}

// A publish of a VERIFIED root from a store whose copy of a shard is
// damaged fails with the damage's code and registers nothing: the
// release, its alias and its runs keep their permits. A root the gate
// never verified is registered INVALID as before.
func TestDamagedCopyDoesNotInvalidateVerifiedRelease(t *testing.T) {
	e := newEnv(t)
	gen1 := stagetest.Synth(t, e.store, 1200, 4, 1)
	if _, err := e.publish(nil, e.opts(gen1.Root)); err != nil {
		t.Fatal(err)
	}
	if _, err := e.gate.CreateRun(e.ctx, &raftgate.CreateRun{Run: "r1", Alias: "main", WorldSize: 1}); err != nil {
		t.Fatal(err)
	}
	attest(t, e, "r1", gen1)
	key := gen1.Release.Shards[2].Digest.BlobKey()
	damaged := &faults.BitFlip{Store: e.store, Match: func(k string) bool { return k == key }, Offset: 100, Bit: 2}
	// A fence document the stored report was not checked against, so
	// publish verifies again, through the damaged store.
	tomb := e.putFenceLog(manifest.TombstonesSchema, manifest.FenceEntry{Seq: 1, SampleID: "nobody"})
	o := e.opts(gen1.Root)
	o.Alias, o.Tombstones, o.Verify = "scratch", tomb, verifier(damaged)
	out, err := publish.Publish(e.ctx, damaged, e.gate, o)
	wantCode(t, err, errcode.DigestMismatch)
	if out == nil || out.Report == nil || out.Report.Counts.DigestFailures != 1 {
		t.Fatalf("outcome %+v", out)
	}
	rel, _ := e.gate.Release(e.ctx, gen1.Root)
	if rel.State != raftgate.ReleasePublished || rel.Report == out.ReportDigest {
		t.Fatalf("after the damaged copy: release %s, report %s", rel.State, rel.Report)
	}
	if _, err := e.gate.AdmitCheckpoint(e.ctx, "r1", 1, gen1.Root); err != nil {
		t.Fatalf("the run's permit after the damaged copy: %v", err)
	}
	if _, err := e.gate.Alias(e.ctx, "scratch"); errcode.Of(err) != errcode.UnknownAlias {
		t.Fatalf("alias scratch: %v, want UNKNOWN_ALIAS", err)
	}

	// The same damage in a root the gate never verified: INVALID.
	gen2 := stagetest.Synth(t, e.store, 800, 2, 2)
	key2 := gen2.Release.Shards[0].Digest.BlobKey()
	damaged2 := &faults.BitFlip{Store: e.store, Match: func(k string) bool { return k == key2 }, Offset: 100, Bit: 2}
	o = e.opts(gen2.Root)
	o.Alias, o.Verify = "other", verifier(damaged2)
	_, err = publish.Publish(e.ctx, damaged2, e.gate, o)
	wantCode(t, err, errcode.DigestMismatch)
	if rel, _ := e.gate.Release(e.ctx, gen2.Root); rel.State != raftgate.ReleaseInvalid {
		t.Fatalf("a never-verified root with a damaged shard is %s, want INVALID", rel.State)
	}
}

// releaseLost answers every release read after the verification ran
// GATE_UNAVAILABLE, as a gate that stops answering reads for longer than
// the client retries would, while its commands still go through.
type releaseLost struct {
	publish.Gate
	verified *bool
}

func (g releaseLost) Release(ctx context.Context, root manifest.Digest) (*raftgate.Release, error) {
	if *g.verified {
		return nil, errcode.New(errcode.GateUnavailable, "release read lost")
	}
	return g.Gate.Release(ctx, root)
}

// A publish whose verification of a damaged copy fails its digests, and
// which then cannot read what the gate holds of the root, fails with
// that error and registers nothing: the gate may hold the release
// VERIFIED, and the verdict would close its permits for good (it was
// registered INVALID).
func TestDamagedCopyUnjudgedRegistersNothing(t *testing.T) {
	e := newEnv(t)
	gen1 := stagetest.Synth(t, e.store, 1200, 4, 1)
	first, err := e.publish(nil, e.opts(gen1.Root))
	if err != nil {
		t.Fatal(err)
	}
	key := gen1.Release.Shards[2].Digest.BlobKey()
	damaged := &faults.BitFlip{Store: e.store, Match: func(k string) bool { return k == key }, Offset: 100, Bit: 2}
	tomb := e.putFenceLog(manifest.TombstonesSchema, manifest.FenceEntry{Seq: 1, SampleID: "nobody"})
	verified := false
	o := e.opts(gen1.Root)
	o.Alias, o.Tombstones = "scratch", tomb
	o.Verify = func(ctx context.Context, root, tomb, bench manifest.Digest) (*manifest.Report, manifest.Digest, error) {
		defer func() { verified = true }()
		return verifier(damaged)(ctx, root, tomb, bench)
	}
	out, err := publish.Publish(e.ctx, damaged, releaseLost{Gate: e.gate, verified: &verified}, o)
	if !verified || out == nil || out.Report == nil || out.Report.Counts.DigestFailures != 1 {
		t.Fatalf("publish through the damaged copy: %+v %v", out, err)
	}
	wantCode(t, err, errcode.GateUnavailable)
	if rel, _ := e.gate.Release(e.ctx, gen1.Root); rel.State != raftgate.ReleasePublished || rel.Report != first.ReportDigest {
		t.Fatalf("after the damaged copy's verdict went unjudged: release %s, report %s", rel.State, rel.Report)
	}
}

func TestRunPermitClosedMustBeCancelledAndRecreated(t *testing.T) {
	e := newEnv(t)
	gen1 := stagetest.Synth(t, e.store, 1500, 4, 1)
	if _, err := e.publish(nil, e.opts(gen1.Root)); err != nil {
		t.Fatal(err)
	}
	if _, err := e.gate.CreateRun(e.ctx, &raftgate.CreateRun{Run: "r1", Alias: "main", WorldSize: 1}); err != nil {
		t.Fatal(err)
	}
	attest(t, e, "r1", gen1)
	victim := stagetest.ShardRows(t, e.store, gen1, 1)[3].SampleID
	bench := e.putFenceLog(manifest.BenchmarkSchema, manifest.FenceEntry{Seq: 2, SampleID: victim})
	if _, err := e.gate.AdvanceFence(e.ctx, raftgate.FenceBenchmark, 2); err != nil {
		t.Fatal(err)
	}
	_, err := publish.Recheck(e.ctx, e.store, e.gate, publish.RecheckOptions{Root: gen1.Root, Benchmark: bench, Verify: verifier(e.store), Logger: e.quiet})
	wantCode(t, err, errcode.BenchmarkHit)
	_, err = e.gate.AdmitCheckpoint(e.ctx, "r1", 5, gen1.Root)
	wantCode(t, err, errcode.PermitClosed)
	if _, err := e.gate.CancelRun(e.ctx, "r1", "benchmark item in release"); err != nil {
		t.Fatal(err)
	}
	// A clean release (other seed, so other sampleIds) checked against
	// the new registry replaces it.
	clean := stagetest.Synth(t, e.store, 1500, 4, 5)
	o := e.opts(clean.Root)
	o.Benchmark = bench
	if _, err := e.publish(nil, o); err != nil {
		t.Fatalf("publish clean release: %v", err)
	}
	if _, err := e.gate.CreateRun(e.ctx, &raftgate.CreateRun{Run: "r2", Alias: "main", WorldSize: 1}); err != nil {
		t.Fatal(err)
	}
	attest(t, e, "r2", clean)
	if _, err := e.gate.AdmitCheckpoint(e.ctx, "r2", 0, clean.Root); err != nil {
		t.Fatalf("checkpoint on the recreated run: %v", err)
	}
}

// attest attests every shard of res as rank 0 of a one-rank run.
func attest(t *testing.T, e *env, run string, res stage.Result) {
	t.Helper()
	var ds []manifest.Digest
	for _, s := range res.Release.Shards {
		ds = append(ds, s.Digest)
	}
	if _, err := e.gate.Attest(e.ctx, run, 0, res.Root, ds); err != nil {
		t.Fatalf("attest: %v", err)
	}
}

// A report from an earlier `shardproof verify` is registered as is; a
// report of another root is refused.
func TestPublishWithStoredReport(t *testing.T) {
	e := newEnv(t)
	gen1 := stagetest.Synth(t, e.store, 1500, 4, 1)
	gen2 := stagetest.Synth(t, e.store, 1500, 4, 2)
	rep1, d1, err := verifier(e.store)(e.ctx, gen1.Root, manifest.Digest{}, manifest.Digest{})
	if err != nil || rep1.Verdict != manifest.Verified {
		t.Fatalf("verify: %v", err)
	}
	noVerify := func(context.Context, manifest.Digest, manifest.Digest, manifest.Digest) (*manifest.Report, manifest.Digest, error) {
		t.Fatal("verify ran although a report was given")
		return nil, manifest.Digest{}, nil
	}
	o := e.opts(gen2.Root)
	o.Report, o.Verify = d1, noVerify
	_, err = e.publish(nil, o)
	wantCode(t, err, errcode.BadInput)

	o = e.opts(gen1.Root)
	o.Report, o.Verify = d1, noVerify
	out, err := e.publish(nil, o)
	if err != nil || !out.Reused || out.ReportDigest != d1 || out.Result.Generation != 1 {
		t.Fatalf("publish with --report: %+v %v", out, err)
	}
	if rel, _ := e.gate.Release(e.ctx, gen1.Root); rel.Report != d1 {
		t.Fatalf("gate holds report %s, want %s", rel.Report, d1)
	}
}

// A verification that cannot finish (the store fails) leaves the
// candidate STAGED and the alias where it was.
func TestVerifyErrorLeavesCandidateStaged(t *testing.T) {
	e := newEnv(t)
	gen1 := stagetest.Synth(t, e.store, 1500, 4, 1)
	gen2 := stagetest.Synth(t, e.store, 1500, 4, 2)
	if _, err := e.publish(nil, e.opts(gen1.Root)); err != nil {
		t.Fatal(err)
	}
	broken := &faults.ErrorOnce{Store: e.store, Method: faults.Get, Match: func(k string) bool { return k == gen2.Release.Shards[2].Digest.BlobKey() },
		Err: errcode.New(errcode.StoreUnavailable, "injected")}
	o := e.opts(gen2.Root)
	o.Verify = verifier(broken)
	_, err := e.publish(nil, o)
	wantCode(t, err, errcode.StoreUnavailable)
	if rel, err := e.gate.Release(e.ctx, gen2.Root); err != nil || rel.State != raftgate.ReleaseStaged {
		t.Fatalf("candidate after a failed verify: %+v %v", rel, err)
	}
	if al := e.alias(); al.Generation != 1 || al.Root != gen1.Root {
		t.Fatalf("alias moved to %d %s", al.Generation, al.Root)
	}
	// The store recovers (ErrorOnce fires once): the same command now
	// publishes.
	if out, err := e.publish(nil, o); err != nil || out.Result.Generation != 2 {
		t.Fatalf("retry: %+v %v", out, err)
	}
}

// countVerifies wraps o's verifier, the real one, to count its calls.
func countVerifies(o *publish.Options) *int {
	n := new(int)
	inner := o.Verify
	o.Verify = func(ctx context.Context, root, tomb, bench manifest.Digest) (*manifest.Report, manifest.Digest, error) {
		*n++
		return inner(ctx, root, tomb, bench)
	}
	return n
}

// An alias name the gate would refuse is refused before the verification,
// which at scale takes hours: nothing is verified, stored or registered.
func TestPublishBadAliasBeforeVerify(t *testing.T) {
	e := newEnv(t)
	gen1 := stagetest.Synth(t, e.store, 200, 2, 1)
	o := e.opts(gen1.Root)
	verified := countVerifies(&o)
	for _, name := range []string{"bad alias", "x\x00y", strings.Repeat("a", 254)} {
		o.Alias = name
		_, err := e.publish(nil, o)
		wantCode(t, err, errcode.Usage)
		if !strings.Contains(err.Error(), "alias name") {
			t.Fatalf("%q: %v, want the alias name's error", name, err)
		}
	}
	// A rollback window the gate would refuse, and a generation a new
	// alias cannot be at, are refused before verifying too.
	o.Alias = "fresh"
	for _, retain := range []int{-1, raftgate.MaxRetain + 1} {
		o.Retain = retain
		_, err := e.publish(nil, o)
		wantCode(t, err, errcode.Usage)
	}
	o.Retain = 0
	o.HasExpect, o.ExpectGeneration = true, 3
	_, err := e.publish(nil, o)
	wantCode(t, err, errcode.UnknownAlias)
	o.HasExpect, o.ExpectGeneration = false, 0
	if *verified != 0 {
		t.Fatalf("verified %d times for refused publishes", *verified)
	}
	if _, err := e.gate.Release(e.ctx, gen1.Root); errcode.Of(err) != errcode.UnknownRelease {
		t.Fatalf("release after refused publishes: %v, want UNKNOWN_RELEASE", err)
	}
	o.Alias = "good/name-1.0_x"
	if _, err := e.publish(nil, o); err != nil || *verified != 1 {
		t.Fatalf("valid alias: %v, verified %d times", err, *verified)
	}
}

// A publish whose compare-and-set has already lost (the alias moved past
// the expected generation to another root) is refused with the gate's
// own code before the verification, which at scale takes hours; a retry
// of a publish that did make the next generation still succeeds.
func TestPublishStaleExpectBeforeVerify(t *testing.T) {
	e := newEnv(t)
	gen1 := stagetest.Synth(t, e.store, 200, 2, 1)
	gen2 := stagetest.Synth(t, e.store, 200, 2, 2)
	gen3 := stagetest.Synth(t, e.store, 200, 2, 3)
	for _, r := range []manifest.Digest{gen1.Root, gen2.Root} {
		if _, err := e.publish(nil, e.opts(r)); err != nil {
			t.Fatal(err)
		}
	}
	o := e.opts(gen3.Root)
	verified := countVerifies(&o)
	o.HasExpect = true
	// Generation 2 is gen2's and the latest: PUBLISH_CONFLICT. Generation
	// 1 is gen1's, and the alias is past it: GENERATION_CONFLICT.
	for expect, code := range map[uint64]errcode.Code{1: errcode.PublishConflict, 0: errcode.GenerationConflict} {
		o.ExpectGeneration = expect
		_, err := e.publish(nil, o)
		wantCode(t, err, code)
	}
	if *verified != 0 {
		t.Fatalf("verified %d times for compare-and-sets that had lost", *verified)
	}
	if _, err := e.gate.Release(e.ctx, gen3.Root); errcode.Of(err) != errcode.UnknownRelease {
		t.Fatalf("gen3 after refused publishes: %v, want UNKNOWN_RELEASE (not even staged)", err)
	}
	// The current generation: verified and published.
	o.ExpectGeneration = 2
	out, err := e.publish(nil, o)
	if err != nil || out.Result.Generation != 3 || *verified != 1 {
		t.Fatalf("publish expecting 2: %+v, %v (verified %d times)", out, err, *verified)
	}
	// The same publish again (a retry after an unknown outcome): the
	// alias is past generation 2 because of it, so it is not stale.
	again, err := e.publish(nil, o)
	if err != nil || again.Result != out.Result {
		t.Fatalf("retry: %+v, %v; want %+v", again, err, out.Result)
	}
}

// ClosedRoots, what recheck --closed rechecks, names the roots a fence
// advance took out of use: those of the permits it closed, and those in
// an alias's rollback window that the fences passed, which rollback
// refuses until a recheck clears them. It named only the first, so after
// an advance and recheck --closed an alias had nothing to roll back to.
func TestClosedRootsIncludeRollbackWindow(t *testing.T) {
	e := newEnv(t)
	reg := func(label, verdict string, tw uint64) manifest.Digest {
		t.Helper()
		root := manifest.Sum([]byte("root/" + label))
		_, err := e.gate.Register(e.ctx, &raftgate.Register{Root: root, Shards: []manifest.Digest{manifest.Sum([]byte("shard/" + label))},
			Report: &raftgate.ReportSummary{Digest: manifest.Sum([]byte("report/" + verdict + "/" + label)), Verdict: verdict,
				DatasetSnapshot: manifest.Sum([]byte("snap")), TombstoneWatermark: tw}})
		if err != nil {
			t.Fatal(err)
		}
		return root
	}
	a, b, c, d := reg("a", manifest.Verified, 0), reg("b", manifest.Verified, 0), reg("c", manifest.Verified, 0), reg("d", manifest.Verified, 0)
	x := reg("x", manifest.Verified, 0)
	// main: a b c d with a window of 3 (b c d); side: x.
	for i, r := range []manifest.Digest{a, b, c, d} {
		if _, err := e.gate.Publish(e.ctx, "main", r, uint64(i), 3); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.gate.Publish(e.ctx, "side", x, 0, 0); err != nil {
		t.Fatal(err)
	}
	reg("c", manifest.Invalid, 0) // c, in the window, found INVALID
	if _, err := e.gate.AdvanceFence(e.ctx, raftgate.FenceTombstone, 5); err != nil {
		t.Fatal(err)
	}
	// x rechecked after the advance: it satisfies the fences again.
	if _, err := e.gate.Recheck(e.ctx, &raftgate.RecheckCmd{Root: x, Kind: raftgate.FenceTombstone, Value: 5, Report: manifest.Sum([]byte("recheck/x"))}); err != nil {
		t.Fatal(err)
	}
	got, err := publish.ClosedRoots(e.ctx, e.gate)
	if err != nil {
		t.Fatal(err)
	}
	// b: in main's window behind the fence; d: main's permit closed. Not
	// a (outside the window, RETIRED), c (INVALID), x (rechecked).
	want := []manifest.Digest{b, d}
	slices.SortFunc(want, func(p, q manifest.Digest) int { return bytes.Compare(p[:], q[:]) })
	if !slices.Equal(got, want) {
		t.Fatalf("ClosedRoots = %v, want %v (b %s, d %s)", got, want, b, d)
	}
	_, err = e.gate.Rollback(e.ctx, "main", b, 4)
	wantCode(t, err, errcode.RollbackIneligible)
	// A recheck of each root it names makes the window usable again.
	for _, r := range got {
		if _, err := e.gate.Recheck(e.ctx, &raftgate.RecheckCmd{Root: r, Kind: raftgate.FenceTombstone, Value: 5, Report: manifest.Sum([]byte("recheck"))}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.gate.Rollback(e.ctx, "main", b, 4); err != nil {
		t.Fatalf("rollback to b after rechecking what ClosedRoots named: %v", err)
	}
}

// historyless answers every alias read with the alias as the gate holds
// it but without its history: what a broken gate, or a server that is
// none, may answer.
type historyless struct{ publish.Gate }

func (h historyless) Alias(ctx context.Context, name string) (*raftgate.Alias, error) {
	al, err := h.Gate.Alias(ctx, name)
	if al != nil {
		al.History = nil
	}
	return al, err
}

// A rerun at the alias's root reads the kind of its last generation from
// the alias's history: an answer without one is refused (BAD_DOCUMENT),
// not indexed (a panic).
func TestRerunOnAliasWithoutHistoryIsRefused(t *testing.T) {
	e := newEnv(t)
	gen1 := stagetest.Synth(t, e.store, 600, 2, 1)
	if _, err := e.publish(nil, e.opts(gen1.Root)); err != nil {
		t.Fatal(err)
	}
	out, err := e.publish(historyless{e.gate}, e.opts(gen1.Root))
	wantCode(t, err, errcode.BadDocument)
	if out != nil {
		t.Fatalf("a rerun on a history-less answer returned %+v", out)
	}
	if al := e.alias(); al.Generation != 1 {
		t.Fatalf("alias moved to generation %d", al.Generation)
	}
}
