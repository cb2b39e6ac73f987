package coordinator

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"slices"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/shardproof/shardproof/internal/canon"
	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/mapper"
	"github.com/shardproof/shardproof/objstore"
	"github.com/shardproof/shardproof/objstore/faults"
	"github.com/shardproof/shardproof/stage"
	"github.com/shardproof/shardproof/stage/stagetest"
)

// The fault tests build a small synthetic release (testSamples records in
// testShards shards), damage it the way a buggy writer or a corrupted
// store would, verify it, and assert the exact counts and failure codes.

const (
	testSamples = 2000
	testShards  = 4
)

func synth(t *testing.T) (objstore.Store, stage.Result) {
	t.Helper()
	s := stagetest.Store(t)
	return s, stagetest.Synth(t, s, testSamples, testShards, 7)
}

func verify(t *testing.T, s objstore.Store, o PlanOptions) *manifest.Report {
	t.Helper()
	if o.Tool == "" {
		o.Tool = "shardproof test"
	}
	out, err := Verify(context.Background(), s, Options{PlanOptions: o})
	if err != nil {
		t.Fatalf("verify: %v", err)
	}
	return out.Report
}

// clean returns the counts of a fully verified release of res.
func clean(res stage.Result) manifest.Counts {
	return manifest.Counts{
		Shards: int64(len(res.Release.Shards)), ShardsVerified: int64(len(res.Release.Shards)),
		Records: res.Release.Totals.Records, SnapshotRecords: res.SnapshotDoc.Totals.Records,
	}
}

// expect checks the verdict, every counter, and the (shard, code) pairs of
// the failure list.
func expect(t *testing.T, r *manifest.Report, want manifest.Counts, failures ...string) {
	t.Helper()
	if r.Counts != want {
		t.Errorf("counts\n got %+v\nwant %+v", r.Counts, want)
	}
	wantVerdict := manifest.Verified
	if want.Failed() {
		wantVerdict = manifest.Invalid
	}
	if r.Verdict != wantVerdict {
		t.Errorf("verdict %s, want %s", r.Verdict, wantVerdict)
	}
	var got []string
	for _, f := range r.Failures {
		got = append(got, f.Shard+" "+f.Code)
	}
	if !slices.Equal(got, failures) {
		t.Errorf("failures\n got %q\nwant %q", got, failures)
	}
	if t.Failed() {
		for _, f := range r.Failures {
			t.Logf("failure: %+v", f)
		}
		t.Logf("examples: %v", r.Examples)
	}
}

func records(res stage.Result, i int) int64 { return res.Release.Shards[i].Records }

func TestCleanRelease(t *testing.T) {
	s, res := synth(t)
	r := verify(t, s, PlanOptions{Root: res.Root})
	expect(t, r, clean(res))
	if r.ReleaseTupleRoot != res.SnapshotDoc.TupleRoot || r.SnapshotTupleRoot != res.SnapshotDoc.TupleRoot {
		t.Errorf("tuple roots %s / %s, snapshot says %s", r.ReleaseTupleRoot, r.SnapshotTupleRoot, res.SnapshotDoc.TupleRoot)
	}
	if r.BoundTupleRoot != res.Release.OrderedMemberTupleRoot {
		t.Errorf("bound root %s, manifest %s", r.BoundTupleRoot, res.Release.OrderedMemberTupleRoot)
	}
	if r.Root != res.Root || r.DatasetSnapshot != res.Snapshot || len(r.Examples) != 0 {
		t.Errorf("report root %s snapshot %s examples %v", r.Root, r.DatasetSnapshot, r.Examples)
	}
	if r.Stats.StoredBytes != res.Release.Totals.Shards*0+storedBytes(res) || r.Stats.LogicalBytes <= r.Stats.StoredBytes {
		t.Errorf("stats %+v", r.Stats)
	}
	// The report is stored content-addressed.
	b, _, err := objstore.ReadBlob(context.Background(), s, mustDigest(t, r), manifest.MaxDocumentSize)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := manifest.DecodeReport(b); err != nil {
		t.Fatal(err)
	}
}

func storedBytes(res stage.Result) int64 {
	var n int64
	for _, d := range res.Release.Shards {
		n += d.Size
	}
	return n
}

func mustDigest(t *testing.T, r *manifest.Report) manifest.Digest {
	b, err := manifest.Encode(r)
	if err != nil {
		t.Fatal(err)
	}
	return manifest.Sum(b)
}

// replaced damages shard i's stored bytes in place (a new version at its
// key, which the reissued descriptor pins) and verifies.
func replaced(t *testing.T, damage func([]byte) []byte) (stage.Result, *manifest.Report) {
	s, res := synth(t)
	data := stagetest.ShardBytes(t, s, res.Release.Shards[1])
	res = stagetest.ReplaceShardBytes(t, s, res, 1, damage(data))
	return res, verify(t, s, PlanOptions{Root: res.Root})
}

// undecodable is the expectation for shard 1 unreadable: its members are
// missing and the recomputed root differs from the manifest's.
func undecodable(res stage.Result) manifest.Counts {
	want := clean(res)
	want.ShardsVerified--
	want.Records -= records(res, 1)
	want.DigestFailures = 1
	want.DecodeErrors = 1
	want.Missing = records(res, 1)
	want.TupleRootMismatches = 1
	return want
}

func TestTruncatedByOneByte(t *testing.T) {
	res, r := replaced(t, func(b []byte) []byte { return stagetest.Truncate(b, 1) })
	want := undecodable(res)
	want.SizeMismatches = 1
	expect(t, r, want, "orderedMemberTupleRoot TUPLE_ROOT_MISMATCH",
		"shard-00001-of-00004 DIGEST_MISMATCH", "shard-00001-of-00004 FOOTER_CORRUPT", "shard-00001-of-00004 SIZE_MISMATCH")
}

func TestTruncatedByHalf(t *testing.T) {
	res, r := replaced(t, func(b []byte) []byte { return stagetest.Truncate(b, len(b)/2) })
	want := undecodable(res)
	want.SizeMismatches = 1
	expect(t, r, want, "orderedMemberTupleRoot TUPLE_ROOT_MISMATCH",
		"shard-00001-of-00004 DIGEST_MISMATCH", "shard-00001-of-00004 FOOTER_CORRUPT", "shard-00001-of-00004 SIZE_MISMATCH")
}

func TestBitFlipInDataPage(t *testing.T) {
	res, r := replaced(t, func(b []byte) []byte { return stagetest.FlipBit(b, len(b)/3, 2) })
	expect(t, r, undecodable(res), "orderedMemberTupleRoot TUPLE_ROOT_MISMATCH",
		"shard-00001-of-00004 DECODE_ERROR", "shard-00001-of-00004 DIGEST_MISMATCH")
}

func TestBitFlipInFooter(t *testing.T) {
	res, r := replaced(t, func(b []byte) []byte {
		footerLen := int(binary.LittleEndian.Uint32(b[len(b)-8:]))
		return stagetest.FlipBit(b, len(b)-8-footerLen, 5)
	})
	expect(t, r, undecodable(res), "orderedMemberTupleRoot TUPLE_ROOT_MISMATCH",
		"shard-00001-of-00004 DIGEST_MISMATCH", "shard-00001-of-00004 FOOTER_CORRUPT")
}

// Swapped descriptors: each shard's descriptor names the other's bytes
// (digest, size, version), with its own id and decoded figures. The bytes
// are intact and every member is present exactly once, so only the
// per-shard figures can tell.
func TestTwoShardsSwapped(t *testing.T) {
	s, res := synth(t)
	rel := stagetest.CloneRelease(res.Release)
	a, b := &rel.Shards[0], &rel.Shards[2]
	a.Digest, b.Digest = b.Digest, a.Digest
	a.Size, b.Size = b.Size, a.Size
	a.ObjectVersion, b.ObjectVersion = b.ObjectVersion, a.ObjectVersion
	res2 := stagetest.Reissue(t, s, res, rel, false)
	r := verify(t, s, PlanOptions{Root: res2.Root})
	want := clean(res)
	want.ShardsVerified -= 2
	want.LogicalMismatches = 2
	want.CountMismatches = 2
	// Tokens and memberSetDigest both differ: two COUNT_MISMATCH entries
	// per shard, counted once per shard.
	expect(t, r, want,
		"shard-00000-of-00004 COUNT_MISMATCH", "shard-00000-of-00004 COUNT_MISMATCH", "shard-00000-of-00004 LOGICAL_MISMATCH",
		"shard-00002-of-00004 COUNT_MISMATCH", "shard-00002-of-00004 COUNT_MISMATCH", "shard-00002-of-00004 LOGICAL_MISMATCH")
}

// Recompressed with another codec: the storage digest and size fail, the
// logical digest matches, and the report says exactly that.
func TestRecompressedShard(t *testing.T) {
	res, r := replaced(t, func(b []byte) []byte { return stagetest.Recompress(t, b, "snappy", 0) })
	want := clean(res)
	want.ShardsVerified--
	want.DigestFailures, want.SizeMismatches = 1, 1
	expect(t, r, want, "shard-00001-of-00004 DIGEST_MISMATCH", "shard-00001-of-00004 SIZE_MISMATCH")
}

// rewritten replaces shard 1 by a valid shard of edited rows with a
// consistently reissued manifest, so only the diff against the snapshot
// can catch the change.
func rewritten(t *testing.T, edit func([]stage.Row) []stage.Row, o PlanOptions) (stage.Result, *manifest.Report) {
	s, res := synth(t)
	res = stagetest.RewriteShard(t, s, res, 1, edit)
	o.Root = res.Root
	return res, verify(t, s, o)
}

func TestContentSubstitution(t *testing.T) {
	var id string
	res, r := rewritten(t, func(rows []stage.Row) []stage.Row {
		rows[10].Text += " (edited)"
		id = rows[10].SampleID
		return rows
	}, PlanOptions{})
	want := clean(res)
	want.ContentSubstitution = 1
	expect(t, r, want)
	if ex := r.Examples[string(errcode.ContentSubstitution)]; !slices.Equal(ex, []string{id}) {
		t.Errorf("examples %v, want [%s]", ex, id)
	}
}

func TestSourceVersionChange(t *testing.T) {
	res, r := rewritten(t, func(rows []stage.Row) []stage.Row {
		rows[3].SourceVersion++
		rows[4].SourceVersion++
		return rows
	}, PlanOptions{})
	want := clean(res)
	want.SourceVersionChange = 2
	expect(t, r, want)
}

func TestSplitConflict(t *testing.T) {
	res, r := rewritten(t, func(rows []stage.Row) []stage.Row {
		rows[0].Split = "eval-leak"
		rows[1].Split = "eval-leak"
		rows[1].Text += "!" // one sampleId with two differences counts in both
		return rows
	}, PlanOptions{})
	want := clean(res)
	want.SplitConflict = 2
	want.ContentSubstitution = 1
	expect(t, r, want)
}

func TestDescriptorOmitted(t *testing.T) {
	s, res := synth(t)
	rel := stagetest.CloneRelease(res.Release)
	rel.Shards = slices.Delete(rel.Shards, 2, 3)
	res2 := stagetest.Reissue(t, s, res, rel, true)
	r := verify(t, s, PlanOptions{Root: res2.Root})
	want := clean(res)
	want.Shards, want.ShardsVerified = 3, 3
	want.Records -= records(res, 2)
	want.Missing = records(res, 2)
	expect(t, r, want)
	if n := len(r.Examples[string(errcode.MissingMember)]); n != 20 {
		t.Errorf("%d missing examples, want 20", n)
	}
}

func TestMemberDuplicatedAcrossShards(t *testing.T) {
	s, res := synth(t)
	dup := stagetest.ShardRows(t, s, res, 0)[5]
	res2 := stagetest.RewriteShard(t, s, res, 1, func(rows []stage.Row) []stage.Row { return append(rows, dup) })
	r := verify(t, s, PlanOptions{Root: res2.Root})
	want := clean(res)
	want.Records++
	want.Duplicate = 1
	expect(t, r, want)
	if ex := r.Examples[string(errcode.DuplicateMember)]; !slices.Equal(ex, []string{dup.SampleID}) {
		t.Errorf("examples %v", ex)
	}
}

func TestExtraMember(t *testing.T) {
	res, r := rewritten(t, func(rows []stage.Row) []stage.Row {
		x := rows[0]
		x.SampleID = "zz-not-in-snapshot"
		return append(rows, x)
	}, PlanOptions{})
	want := clean(res) // res already counts the extra record
	want.Extra = 1
	expect(t, r, want)
	if ex := r.Examples[string(errcode.ExtraMember)]; !slices.Equal(ex, []string{"zz-not-in-snapshot"}) {
		t.Errorf("examples %v", ex)
	}
}

// A shard written with another record schema (lang column dropped) is
// mixed into the release with a consistent descriptor: the mapper reports
// the schema mismatch and still emits its tuples, under the schema it
// found, so every one of its members is a SCHEMA_MIX in the diff.
func TestSchemaMixedIn(t *testing.T) {
	s, res := synth(t)
	other := stage.DefaultSchema()
	other.Fields = slices.DeleteFunc(other.Fields, func(f manifest.Field) bool { return f.Name == "lang" })
	otherDigest, err := canon.SchemaDigest(other)
	if err != nil {
		t.Fatal(err)
	}
	as, err := canon.ArrowSchema(other)
	if err != nil {
		t.Fatal(err)
	}
	b := array.NewRecordBuilder(memory.NewGoAllocator(), as)
	defer b.Release()
	for _, row := range stagetest.ShardRows(t, s, res, 3) {
		b.Field(0).(*array.StringBuilder).Append(row.SampleID)
		b.Field(1).(*array.StringBuilder).Append(row.SourceID)
		b.Field(2).(*array.Int64Builder).Append(row.SourceVersion)
		b.Field(3).(*array.StringBuilder).Append(row.Split)
		b.Field(4).(*array.StringBuilder).Append(row.Text)
		b.Field(5).(*array.Int64Builder).Append(row.Tokens)
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	rel := stagetest.CloneRelease(res.Release)
	rel.Shards[3] = stagetest.WriteShard(t, s, rel.Shards[3].ID, rec, other, otherDigest, stage.ParquetOptions{})
	res2 := stagetest.Reissue(t, s, res, rel, true)
	r := verify(t, s, PlanOptions{Root: res2.Root})
	want := clean(res)
	want.ShardsVerified--
	want.SchemaMismatches = 1
	want.SchemaMix = records(res, 3)
	expect(t, r, want, "shard-00003-of-00004 SCHEMA_MISMATCH")
}

func putFenceLog(t *testing.T, s objstore.Store, schema string, entries ...manifest.FenceEntry) manifest.Digest {
	t.Helper()
	return putDoc(t, s, &manifest.FenceLog{Schema: schema, Entries: entries})
}

// putDoc stores a document (valid or not: plans and snapshots are edited
// by tests) as a blob and returns its digest.
func putDoc(t *testing.T, s objstore.Store, v any) manifest.Digest {
	t.Helper()
	b, err := manifest.Encode(v)
	if err != nil {
		t.Fatal(err)
	}
	d, _, _, err := objstore.PutBlob(context.Background(), s, b)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestTombstonedSample(t *testing.T) {
	s, res := synth(t)
	rows := stagetest.ShardRows(t, s, res, 2)
	tomb := putFenceLog(t, s, manifest.TombstonesSchema,
		manifest.FenceEntry{Seq: 1, SampleID: "deleted-long-ago"},
		manifest.FenceEntry{Seq: 2, SampleID: rows[7].SampleID})
	bench := putFenceLog(t, s, manifest.BenchmarkSchema,
		manifest.FenceEntry{Seq: 1, ContentDigest: sha256.Sum256([]byte("an eval item not in the release"))})
	r := verify(t, s, PlanOptions{Root: res.Root, Tombstones: tomb, Benchmark: bench})
	want := clean(res)
	want.TombstoneHits = 1
	expect(t, r, want)
	if r.TombstoneWatermark != 2 || r.BenchmarkFence != 1 || r.Tombstones != tomb || r.Benchmark != bench {
		t.Errorf("report fences %d/%d %s/%s", r.TombstoneWatermark, r.BenchmarkFence, r.Tombstones, r.Benchmark)
	}
	if ex := r.Examples[string(errcode.TombstoneHit)]; !slices.Equal(ex, []string{rows[7].SampleID}) {
		t.Errorf("examples %v", ex)
	}
}

func TestBenchmarkItem(t *testing.T) {
	s, res := synth(t)
	rows := stagetest.ShardRows(t, s, res, 0)
	bench := putFenceLog(t, s, manifest.BenchmarkSchema,
		manifest.FenceEntry{Seq: 1, ContentDigest: sha256.Sum256([]byte(rows[42].Text))},
		manifest.FenceEntry{Seq: 2, SampleID: "eval-only-item"})
	r := verify(t, s, PlanOptions{Root: res.Root, Benchmark: bench})
	want := clean(res)
	want.BenchmarkHits = 1
	expect(t, r, want)
	if ex := r.Examples[string(errcode.BenchmarkHit)]; !slices.Equal(ex, []string{rows[42].SampleID}) {
		t.Errorf("examples %v", ex)
	}
}

// Verifying again reads every byte again: a shard that rotted in the store
// after a VERIFIED run is caught, not hidden by the earlier run's commits.
func TestReverifyAfterRotReadsAgain(t *testing.T) {
	s, res := synth(t)
	expect(t, verify(t, s, PlanOptions{Root: res.Root}), clean(res))
	key := res.Release.Shards[0].Digest.BlobKey()
	rotted := &faults.BitFlip{Store: s, Match: func(k string) bool { return k == key }, Offset: res.Release.Shards[0].Size - 3, Bit: 1}
	r := verify(t, rotted, PlanOptions{Root: res.Root})
	if r.Verdict != manifest.Invalid || r.Counts.DigestFailures != 1 {
		t.Fatalf("re-verification of a rotted shard: verdict %s, counts %+v", r.Verdict, r.Counts)
	}
}

// A snapshot member file that rotted is a failure on the snapshot side:
// the release's shards all verify, but the diff has lost that member
// file's tuples, so its members show up as extra and the snapshot's
// recomputed root no longer matches its manifest. The same whether a
// reducer reads the member or a map task shuffles it.
func TestSnapshotMemberCorrupted(t *testing.T) {
	s, res := synth(t)
	m := res.SnapshotDoc.Members[0]
	key := m.Digest.BlobKey()
	rotted := &faults.BitFlip{Store: s, Match: func(k string) bool { return k == key }, Offset: m.Size - 10, Bit: 3}
	// With the snapshot's leaf index (stage wrote it), a release that
	// matches the snapshot leaves every member unread: the rotted file
	// goes unnoticed, and the release is still proven to hold exactly
	// the snapshot's tuples.
	r := verify(t, rotted, PlanOptions{Root: res.Root})
	expect(t, r, clean(res))
	if ex := r.Execution; ex.SnapshotMembersSkipped != len(res.SnapshotDoc.Members) || ex.SnapshotMembersRead != 0 {
		t.Fatalf("members skipped %d, read %d; want all %d skipped", ex.SnapshotMembersSkipped, ex.SnapshotMembersRead, len(res.SnapshotDoc.Members))
	}
	for _, o := range []PlanOptions{{ReadAllMembers: true}, {MapMembers: true}} {
		o.Root = res.Root
		r := verify(t, rotted, o)
		want := clean(res)
		want.SnapshotRecords -= m.Records
		want.DigestFailures = 1
		want.DecodeErrors = 1
		want.Extra = m.Records
		want.TupleRootMismatches = 1
		expect(t, r, want, m.ID+" DIGEST_MISMATCH", m.ID+" FOOTER_CORRUPT", "tupleRoot TUPLE_ROOT_MISMATCH")
		for _, f := range r.Failures {
			if f.Shard == m.ID && f.Side != "snapshot" {
				t.Errorf("member failure on side %q", f.Side)
			}
		}
	}
}

// A snapshot whose members declare bucket ranges their tuples do not keep
// (here two members' ranges swapped: still disjoint, so the document is
// valid) fails those members with COUNT_MISMATCH, and their tuples do not
// count, whether reducers read the members for their declared ranges or
// map tasks shuffle them.
func TestSnapshotMemberBucketsLie(t *testing.T) {
	s, res := synth(t)
	snap := *res.SnapshotDoc
	snap.Members = slices.Clone(snap.Members)
	a, b := snap.Members[0], snap.Members[1]
	snap.Members[0].Buckets, snap.Members[1].Buckets = b.Buckets, a.Buckets
	sd := putDoc(t, s, &snap)
	var first []byte
	for _, mapMembers := range []bool{false, true} {
		r := verify(t, s, PlanOptions{Root: res.Root, Snapshot: sd, MapMembers: mapMembers})
		want := clean(res)
		want.SnapshotRecords -= a.Records + b.Records
		want.CountMismatches = 2
		want.Extra = a.Records + b.Records
		want.TupleRootMismatches = 1
		expect(t, r, want, a.ID+" COUNT_MISMATCH", b.ID+" COUNT_MISMATCH", "tupleRoot TUPLE_ROOT_MISMATCH")
		for _, f := range r.Failures {
			if f.Code == "COUNT_MISMATCH" && !strings.Contains(f.Detail, "manifest.buckets=") {
				t.Errorf("%s: detail %q does not name the declared buckets", f.Shard, f.Detail)
			}
		}
		if b := withoutExecution(t, r); first == nil {
			first = b
		} else if !bytes.Equal(first, b) {
			t.Fatalf("mapped members give another report:\n%s\n%s", first, b)
		}
	}
}

// Verified against a snapshot document claiming another record schema,
// every member differs in its schema digest (member tuples carry the
// snapshot's recordSchema), and that snapshot's own figures no longer hold.
func TestSnapshotOfAnotherSchema(t *testing.T) {
	s, res := synth(t)
	snap := *res.SnapshotDoc
	snap.RecordSchema = sha256.Sum256([]byte("another record schema"))
	sd := putDoc(t, s, &snap)
	r := verify(t, s, PlanOptions{Root: res.Root, Snapshot: sd})
	want := clean(res)
	want.SchemaMix = want.Records
	want.TupleRootMismatches = 1
	// The member descriptors' memberSetDigests were computed under the
	// original schema digest, so each member file disagrees too.
	var failures []string
	for _, m := range res.SnapshotDoc.Members {
		failures = append(failures, m.ID+" COUNT_MISMATCH")
		want.CountMismatches++
	}
	expect(t, r, want, append(failures, "tupleRoot TUPLE_ROOT_MISMATCH")...)
	if r.DatasetSnapshot != sd {
		t.Errorf("report names snapshot %s, want %s", r.DatasetSnapshot, sd)
	}
}

// A descriptor pinning a version the store never had: VERSION_MISSING, and
// the shard's members are missing from the diff.
func TestVersionMissing(t *testing.T) {
	s, res := synth(t)
	rel := stagetest.CloneRelease(res.Release)
	rel.Shards[3].ObjectVersion = "v999"
	res2 := stagetest.Reissue(t, s, res, rel, false)
	r := verify(t, s, PlanOptions{Root: res2.Root})
	want := clean(res)
	want.ShardsVerified--
	want.Records -= records(res, 3)
	want.VersionMissing = 1
	want.Missing = records(res, 3)
	want.TupleRootMismatches = 1
	expect(t, r, want, "orderedMemberTupleRoot TUPLE_ROOT_MISMATCH", "shard-00003-of-00004 VERSION_MISSING")
}

// TestShardFailingMidwayContributesNothing: mappers stream tuples as row
// groups decode, so a shard whose last row group is corrupt has already
// emitted the tuples of the ones before when it fails. The map task must
// take those back: every member of the shard is missing, none is half
// present.
func TestShardFailingMidwayContributesNothing(t *testing.T) {
	s := stagetest.Store(t)
	res := stagetest.Synth(t, s, 6*8192, 2, 7) // 3 row groups per shard
	data := stagetest.ShardBytes(t, s, res.Release.Shards[1])
	footerStart := len(data) - 8 - int(binary.LittleEndian.Uint32(data[len(data)-8:]))
	var damaged stage.Result
	found := false
	for back := 40; back < 8000 && !found; back += 97 {
		cand := stagetest.ReplaceShardBytes(t, s, res, 1, stagetest.FlipBit(data, footerStart-back, 3))
		o := mapper.Options{Store: s, Schema: cand.Schema, SchemaDigest: cand.RecordSchema}
		emitted := 0
		r, err := mapper.MapShardStream(t.Context(), o, mapper.Input{Desc: cand.Release.Shards[1]}, func(*mapper.Tuple) error { emitted++; return nil })
		if err == nil && !r.Decoded && emitted > 0 {
			damaged, found = cand, true
		}
	}
	if !found {
		t.Fatal("no bit flip in the last row group made shard 1 fail after emitting tuples")
	}
	r := verify(t, s, PlanOptions{Root: damaged.Root})
	n := records(damaged, 1)
	if r.Counts.DecodeErrors != 1 || r.Counts.Missing != n || r.Counts.Records != damaged.Release.Totals.Records-n {
		t.Fatalf("counts %+v: want 1 decode error, all %d members of shard 1 missing, and none of its tuples counted", r.Counts, n)
	}
	if r.Counts.Duplicate != 0 || r.Counts.ContentSubstitution != 0 || r.Counts.Extra != 0 {
		t.Fatalf("counts %+v: tuples of the failed shard reached the reducers", r.Counts)
	}
}

// A member written by another writer may keep its declared bucket range
// but not stage's order: its tuples still diff correctly when a reducer
// reads it (the reducer puts them in shuffle order itself).
func TestSnapshotMemberUnsorted(t *testing.T) {
	s, res := synth(t)
	ctx := context.Background()
	snap := *res.SnapshotDoc
	snap.Members = slices.Clone(snap.Members)
	m := snap.Members[1]
	rec, err := stage.DecodeParquet(ctx, stagetest.ShardBytes(t, s, m))
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Release()
	b := array.NewRecordBuilder(memory.DefaultAllocator, rec.Schema())
	defer b.Release()
	for i := int(rec.NumRows()) - 1; i >= 0; i-- {
		for c := range int(rec.NumCols()) {
			switch col := rec.Column(c).(type) {
			case *array.String:
				b.Field(c).(*array.StringBuilder).Append(col.Value(i))
			case *array.Int64:
				b.Field(c).(*array.Int64Builder).Append(col.Value(i))
			case *array.Binary:
				b.Field(c).(*array.BinaryBuilder).Append(col.Value(i))
			default:
				t.Fatalf("member column %d is %T", c, col)
			}
		}
	}
	rev := b.NewRecordBatch()
	defer rev.Release()
	desc := stagetest.WriteShard(t, s, m.ID, rev, canon.SnapshotMemberSchema(), snap.RecordSchema, stage.ParquetOptions{})
	if desc.Digest == m.Digest || desc.MemberSetDigest != m.MemberSetDigest {
		t.Fatalf("reversed member: digest %s (was %s), memberSetDigest %s (was %s)", desc.Digest, m.Digest, desc.MemberSetDigest, m.MemberSetDigest)
	}
	desc.Buckets = m.Buckets
	snap.Members[1] = desc
	sd := putDoc(t, s, &snap)
	p, _, err := NewPlan(ctx, s, PlanOptions{Root: res.Root, Snapshot: sd, Parallelism: 2, Nonce: "n"})
	if err != nil {
		t.Fatal(err)
	}
	inReducer := false
	for _, br := range p.Reducers {
		inReducer = inReducer || slices.Contains(br.Members, 1)
	}
	if !inReducer {
		t.Fatalf("member 1 is not read by a reducer: %+v", p.Reducers)
	}
	r := verify(t, s, PlanOptions{Root: res.Root, Snapshot: sd, Parallelism: 2})
	expect(t, r, clean(res))
	if r.SnapshotTupleRoot != res.SnapshotDoc.TupleRoot {
		t.Fatalf("snapshot root %s, want %s", r.SnapshotTupleRoot, res.SnapshotDoc.TupleRoot)
	}
}

// A release whose record schema names no content column would take its
// content digests from a column instead of its bytes: verify refuses it
// before planning anything.
func TestReleaseSchemaWithoutContent(t *testing.T) {
	s, res := synth(t)
	rs := *res.Schema
	rs.Content = ""
	rel := stagetest.CloneRelease(res.Release)
	rel.RecordSchema = putDoc(t, s, &rs)
	res2 := stagetest.Reissue(t, s, res, rel, false)
	_, err := Verify(context.Background(), s, Options{PlanOptions: PlanOptions{Root: res2.Root, Tool: "shardproof test"}})
	if errcode.Of(err) != errcode.BadDocument || !strings.Contains(err.Error(), "names no content column") {
		t.Fatalf("err = %v, want BAD_DOCUMENT naming the missing content column", err)
	}
	if page, _ := s.List(context.Background(), "jobs/", "", 10); len(page.Objects) != 0 {
		t.Fatalf("a refused release left job files: %v", page.Objects)
	}
}

// A release with failures on both sides (a truncated shard, a rotted
// member) gets its INVALID report, failures in the report format's order
// (side, then shard, code, detail), instead of an aggregation that sorted
// them by shard first and had the report refused as BAD_DOCUMENT.
func TestFailuresOnBothSidesSorted(t *testing.T) {
	s, res := synth(t)
	data := stagetest.ShardBytes(t, s, res.Release.Shards[1])
	res = stagetest.ReplaceShardBytes(t, s, res, 1, stagetest.Truncate(data, 1))
	m := res.SnapshotDoc.Members[0]
	key := m.Digest.BlobKey()
	rotted := &faults.BitFlip{Store: s, Match: func(k string) bool { return k == key }, Offset: m.Size - 10, Bit: 3}
	out, err := Verify(context.Background(), rotted, Options{PlanOptions: PlanOptions{Root: res.Root, ReadAllMembers: true, Tool: "shardproof test"}})
	if err != nil {
		t.Fatalf("verify: %v", err)
	}
	var got []string
	for _, f := range out.Report.Failures {
		got = append(got, f.Side+" "+f.Shard+" "+f.Code)
	}
	want := []string{
		"release orderedMemberTupleRoot TUPLE_ROOT_MISMATCH",
		"release shard-00001-of-00004 DIGEST_MISMATCH", "release shard-00001-of-00004 FOOTER_CORRUPT", "release shard-00001-of-00004 SIZE_MISMATCH",
		"snapshot " + m.ID + " DIGEST_MISMATCH", "snapshot " + m.ID + " FOOTER_CORRUPT",
		"snapshot tupleRoot TUPLE_ROOT_MISMATCH",
	}
	if out.Report.Verdict != manifest.Invalid || !slices.Equal(got, want) {
		t.Fatalf("verdict %s, failures\n got %q\nwant %q", out.Report.Verdict, got, want)
	}
}
