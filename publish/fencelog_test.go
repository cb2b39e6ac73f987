package publish_test

import (
	"context"
	"testing"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/publish"
	"github.com/shardproof/shardproof/raftgate"
	"github.com/shardproof/shardproof/stage/stagetest"
)

// The gate admits a release on the highest watermarks any report or
// recheck of it showed, and names only the last report. Here the
// tombstone watermark stands on a report of another log (checked at 3
// while the fence was 0, so nothing could hold it to a log), and the
// fence is then advanced to 3 with the log whose seq 3 erases a sample
// the release holds. A report that checked no tombstone log (a benchmark
// registry only) does not reach the tombstone fence; the gate's
// watermark does, on the other log. publish --report with it, and
// publish reusing it once the gate holds it, found no check against the
// fence's log among the rechecks and published the release. Now the
// gate's own report counts as evidence too, and a fence the gate's
// watermark reaches on nothing checked against the fence's log is
// FENCE_LOG_MISMATCH (--report), or verified again (reuse), where the
// fence's log finds the sample.
func TestPublishGateWatermarkHeldToFenceLog(t *testing.T) {
	e := newEnv(t)
	gen1 := stagetest.Synth(t, e.store, 1200, 4, 1)
	victim := stagetest.ShardRows(t, e.store, gen1, 0)[0].SampleID
	other := e.putFenceLog(manifest.TombstonesSchema,
		manifest.FenceEntry{Seq: 1, SampleID: "nobody-1"}, manifest.FenceEntry{Seq: 3, SampleID: "nobody-2"})
	erased := e.putFenceLog(manifest.TombstonesSchema,
		manifest.FenceEntry{Seq: 1, SampleID: "nobody-1"}, manifest.FenceEntry{Seq: 3, SampleID: victim})

	o := e.opts(gen1.Root)
	o.Alias, o.Tombstones = "first", other
	if _, err := e.publish(nil, o); err != nil {
		t.Fatal(err)
	}
	l, err := publish.LoadFenceLog(e.ctx, e.store, erased, manifest.TombstonesSchema)
	if err != nil {
		t.Fatal(err)
	}
	p, err := l.PrefixDigest(3)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.gate.AdvanceFenceLog(e.ctx, raftgate.FenceTombstone, 3, p); err != nil {
		t.Fatal(err)
	}

	bench := e.putFenceLog(manifest.BenchmarkSchema, manifest.FenceEntry{Seq: 2, SampleID: "nobody-3"})
	rep, bd, err := verifier(e.store)(e.ctx, gen1.Root, manifest.Digest{}, bench)
	if err != nil || rep.Verdict != manifest.Verified || rep.TombstoneWatermark != 0 || rep.BenchmarkFence != 2 {
		t.Fatalf("verify against the benchmark registry: %+v %v", rep, err)
	}
	noVerify := func(context.Context, manifest.Digest, manifest.Digest, manifest.Digest) (*manifest.Report, manifest.Digest, error) {
		t.Fatal("verify ran although a report was given")
		return nil, manifest.Digest{}, nil
	}
	o = e.opts(gen1.Root)
	o.Report, o.Verify = bd, noVerify
	_, err = e.publish(nil, o)
	wantCode(t, err, errcode.FenceLogMismatch)
	if _, err := e.gate.Alias(e.ctx, "main"); errcode.Of(err) != errcode.UnknownAlias {
		t.Fatalf("alias after publish --report: %v, want UNKNOWN_ALIAS", err)
	}
	if gr, err := e.gate.Release(e.ctx, gen1.Root); err != nil || gr.Report == bd {
		t.Fatalf("publish --report registered the report: %+v %v", gr, err)
	}

	// The same report registered (by an older client; gate register
	// now refuses it too): publish reuses nothing the fence's log is
	// not behind, and verifies against the documents named.
	shards := make([]manifest.Digest, len(gen1.Release.Shards))
	for i, sh := range gen1.Release.Shards {
		shards[i] = sh.Digest
	}
	if _, err := e.gate.Register(e.ctx, &raftgate.Register{Root: gen1.Root, Shards: shards, Report: publish.Summary(rep, bd)}); err != nil {
		t.Fatal(err)
	}
	verified := 0
	verify := verifier(e.store)
	o = e.opts(gen1.Root)
	o.Verify = func(ctx context.Context, root, tomb, bench manifest.Digest) (*manifest.Report, manifest.Digest, error) {
		verified++
		return verify(ctx, root, tomb, bench)
	}
	// Naming no documents, it reused the gate's report and published.
	_, err = e.publish(nil, o)
	wantCode(t, err, errcode.FenceBehind)
	if verified != 0 {
		t.Fatalf("publish without documents verified %d times", verified)
	}
	o.Tombstones = erased
	out, err := e.publish(nil, o)
	wantCode(t, err, errcode.TombstoneHit)
	if verified != 1 || out.Reused {
		t.Fatalf("publish reusing the gate's report: verified %d times, outcome %+v", verified, out)
	}
	if _, err := e.gate.Alias(e.ctx, "main"); errcode.Of(err) != errcode.UnknownAlias {
		t.Fatalf("alias after publish: %v, want UNKNOWN_ALIAS", err)
	}
}
