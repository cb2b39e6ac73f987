package reducer

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/shuffle"
	"github.com/shardproof/shardproof/tuplehash"
)

const testK = 6

var schemaA = sha256.Sum256([]byte("schema A"))

func tuple(i int) tuplehash.Tuple {
	id := fmt.Sprintf("s%05d", i)
	return tuplehash.Tuple{
		SampleID:             id,
		SourceID:             "web",
		SourceVersion:        1,
		LogicalContentDigest: sha256.Sum256([]byte("content " + id)),
		Split:                "train",
		SchemaDigest:         schemaA,
	}
}

func row(t testing.TB, tp tuplehash.Tuple, side shuffle.Side) shuffle.Row {
	d, err := tp.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return shuffle.Row{
		Bucket: tuplehash.Bucket(tp.SampleID, testK), Side: side,
		SampleID: tp.SampleID, SourceID: tp.SourceID, SourceVersion: tp.SourceVersion,
		ContentDigest: tp.LogicalContentDigest, Split: tp.Split, SchemaDigest: tp.SchemaDigest,
		TupleDigest: d,
	}
}

// scenario builds a snapshot of n tuples and a release with one fault of
// each kind, and returns the rows and the expected counts.
func scenario(t testing.TB, n int) (rows []shuffle.Row, snap, rel []tuplehash.Tuple, want manifest.Counts) {
	for i := range n {
		snap = append(snap, tuple(i))
	}
	for i := range n {
		tp := tuple(i)
		switch i {
		case 0: // missing
			continue
		case 1: // duplicated
			rel = append(rel, tp)
		case 2: // content substituted
			tp.LogicalContentDigest = sha256.Sum256([]byte("other"))
		case 3: // sourceVersion and split changed: counts once in each
			tp.SourceVersion = 2
			tp.Split = "test"
		case 4:
			tp.SourceID = "books"
		case 5:
			tp.SchemaDigest = sha256.Sum256([]byte("schema B"))
		}
		rel = append(rel, tp)
	}
	for i := range 30 { // extra members, more than MaxExamples
		rel = append(rel, tuple(n+i))
	}
	for _, tp := range snap {
		rows = append(rows, row(t, tp, shuffle.Snapshot))
	}
	for _, tp := range rel {
		rows = append(rows, row(t, tp, shuffle.Release))
	}
	want = manifest.Counts{
		Records: int64(len(rel)), SnapshotRecords: int64(len(snap)),
		Missing: 1, Duplicate: 1, Extra: 30,
		ContentSubstitution: 1, SourceVersionChange: 1, SplitConflict: 1,
		SourceIDChange: 1, SchemaMix: 1,
	}
	return rows, snap, rel, want
}

// sources spreads rows randomly over m real shuffle files covering [lo, hi).
func sources(t testing.TB, rows []shuffle.Row, m int, lo, hi uint32, seed uint64) []Source {
	rng := rand.New(rand.NewPCG(seed, 1))
	parts := make([][]shuffle.Row, m)
	for _, r := range rows {
		if r.Bucket >= lo && r.Bucket < hi {
			i := rng.IntN(m)
			parts[i] = append(parts[i], r)
		}
	}
	out := make([]Source, m)
	for i, p := range parts {
		shuffle.Sort(p)
		var buf bytes.Buffer
		if err := shuffle.Write(&buf, p); err != nil {
			t.Fatal(err)
		}
		rd, err := shuffle.NewReader(bytes.NewReader(buf.Bytes()), fmt.Sprint(i), testK, lo, hi)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(rd.Close)
		out[i] = rd
	}
	return out
}

func leaves(t testing.TB, tuples []tuplehash.Tuple) []byte {
	acc := tuplehash.NewAccumulator(testK)
	for i := range tuples {
		if err := acc.Add(&tuples[i]); err != nil {
			t.Fatal(err)
		}
	}
	var b []byte
	for _, l := range acc.Leaves() {
		b = append(b, l[:]...)
	}
	return b
}

func TestReduceCountsEveryClassExactly(t *testing.T) {
	rows, snap, rel, want := scenario(t, 500)
	tombs := NewSet(&manifest.FenceLog{Entries: []manifest.FenceEntry{
		{Seq: 1, SampleID: "s00010"},
		{Seq: 2, SampleID: "s00000"}, // missing from the release: no hit
		{Seq: 3, SampleID: "not-a-member"},
	}})
	bench := NewSet(&manifest.FenceLog{Entries: []manifest.FenceEntry{
		{Seq: 1, ContentDigest: tuple(20).LogicalContentDigest},
		{Seq: 2, ContentDigest: tuple(21).LogicalContentDigest},
		{Seq: 3, SampleID: "s00001"}, // duplicated: both copies hit
	}})
	want.TombstoneHits, want.BenchmarkHits = 1, 4
	res, err := Reduce(context.Background(), Options{K: testK, Lo: 0, Hi: 1 << testK, Tombstones: tombs, Benchmark: bench},
		sources(t, rows, 3, 0, 1<<testK, 1))
	if err != nil {
		t.Fatal(err)
	}
	if res.Counts != want {
		t.Fatalf("counts\n got %+v\nwant %+v", res.Counts, want)
	}
	wantEx := map[string][]string{
		"MISSING_MEMBER": {"s00000"}, "DUPLICATE_MEMBER": {"s00001"},
		"CONTENT_SUBSTITUTION": {"s00002"}, "SOURCE_VERSION_CHANGE": {"s00003"},
		"SPLIT_CONFLICT": {"s00003"}, "SOURCE_ID_CHANGE": {"s00004"}, "SCHEMA_MIX": {"s00005"},
		"TOMBSTONE_HIT": {"s00010"}, "BENCHMARK_HIT": {"s00001", "s00020", "s00021"},
	}
	var extra []string
	for i := range MaxExamples {
		extra = append(extra, tuple(500+i).SampleID)
	}
	wantEx["EXTRA_MEMBER"] = extra
	if len(res.Examples) != len(wantEx) {
		t.Fatalf("example classes %v", res.Examples)
	}
	for code, ids := range wantEx {
		if !slices.Equal(res.Examples[code], ids) {
			t.Errorf("examples[%s] = %v, want %v", code, res.Examples[code], ids)
		}
	}
	if !bytes.Equal(res.ReleaseLeaves, leaves(t, rel)) {
		t.Error("release leaves differ from tuplehash.Accumulator's")
	}
	if !bytes.Equal(res.SnapshotLeaves, leaves(t, snap)) {
		t.Error("snapshot leaves differ from tuplehash.Accumulator's")
	}
	if err := res.Validate(0, 1<<testK); err != nil {
		t.Fatal(err)
	}
}

func TestCleanDiffIsZero(t *testing.T) {
	var rows []shuffle.Row
	for i := range 300 {
		tp := tuple(i)
		rows = append(rows, row(t, tp, shuffle.Snapshot), row(t, tp, shuffle.Release))
	}
	res, err := Reduce(context.Background(), Options{K: testK, Lo: 0, Hi: 1 << testK}, sources(t, rows, 4, 0, 1<<testK, 2))
	if err != nil {
		t.Fatal(err)
	}
	if want := (manifest.Counts{Records: 300, SnapshotRecords: 300}); res.Counts != want || res.Counts.Failed() {
		t.Fatalf("clean diff counts %+v", res.Counts)
	}
	if len(res.Examples) != 0 {
		t.Fatalf("clean diff examples %v", res.Examples)
	}
	if !bytes.Equal(res.ReleaseLeaves, res.SnapshotLeaves) {
		t.Fatal("clean diff: leaves differ")
	}
}

// Splitting the bucket space among reducers and the rows among sources
// changes nothing once results are merged.
func TestSplitInvariance(t *testing.T) {
	rows, _, _, _ := scenario(t, 400)
	whole, err := Reduce(context.Background(), Options{K: testK, Lo: 0, Hi: 1 << testK}, sources(t, rows, 1, 0, 1<<testK, 3))
	if err != nil {
		t.Fatal(err)
	}
	bounds := []uint32{0, 5, 6, 31, 64}
	merged := NewResult(0, 1<<testK)
	for i := 0; i+1 < len(bounds); i++ {
		lo, hi := bounds[i], bounds[i+1]
		part, err := Reduce(context.Background(), Options{K: testK, Lo: lo, Hi: hi}, sources(t, rows, 5, lo, hi, uint64(i)))
		if err != nil {
			t.Fatal(err)
		}
		if !merged.Merge(part) {
			t.Fatalf("merge of range [%d, %d): counts past int64", lo, hi)
		}
		merged.ReleaseLeaves = append(merged.ReleaseLeaves, part.ReleaseLeaves...)
		merged.SnapshotLeaves = append(merged.SnapshotLeaves, part.SnapshotLeaves...)
	}
	if merged.Counts != whole.Counts {
		t.Fatalf("merged counts %+v, whole %+v", merged.Counts, whole.Counts)
	}
	for code, ids := range whole.Examples {
		if !slices.Equal(merged.Examples[code], ids) {
			t.Fatalf("examples[%s]: merged %v, whole %v", code, merged.Examples[code], ids)
		}
	}
	if !bytes.Equal(merged.ReleaseLeaves, whole.ReleaseLeaves) || !bytes.Equal(merged.SnapshotLeaves, whole.SnapshotLeaves) {
		t.Fatal("leaves differ between split and whole")
	}
}

// A source that yields a bucket outside the task's range is a corrupt
// input, not a silently dropped bucket.
func TestSourceOutsideRange(t *testing.T) {
	rows, _, _, _ := scenario(t, 100)
	src := sources(t, rows, 1, 0, 1<<testK, 4)
	_, err := Reduce(context.Background(), Options{K: testK, Lo: 0, Hi: 10}, src)
	if errcode.Of(err) != errcode.ShuffleCorrupt {
		t.Fatalf("err = %v", err)
	}
}

func TestAddExampleKeepsSmallest(t *testing.T) {
	var ex []string
	for i := 50; i >= 0; i-- {
		ex = AddExample(ex, fmt.Sprintf("id%02d", i))
		ex = AddExample(ex, fmt.Sprintf("id%02d", i))
	}
	if len(ex) != MaxExamples || ex[0] != "id00" || ex[MaxExamples-1] != "id19" || !slices.IsSorted(ex) {
		t.Fatalf("examples %v", ex)
	}
}

func TestSetConfirmsBitmapHits(t *testing.T) {
	d := sha256.Sum256([]byte("x"))
	s := NewSet(&manifest.FenceLog{Entries: []manifest.FenceEntry{{Seq: 1, ContentDigest: d}}})
	near := d
	near[31] ^= 1 // same first 8 bytes: a bitmap hit the exact set rejects
	if !s.Hit("a", d) || s.Hit("a", near) {
		t.Fatal("content digest lookup is not exact")
	}
	if (*Set)(nil).Hit("a", d) {
		t.Fatal("nil set hit")
	}
}

// BenchmarkDiffBucket measures the per-bucket diff on a bucket of 2,000
// sampleIds present on both sides (about what a 8M-sample release gives per
// bucket at k=12).
func BenchmarkDiffBucket(b *testing.B) {
	var rows []shuffle.Row
	for i := range 2000 {
		tp := tuple(i)
		r := row(b, tp, shuffle.Release)
		r.Bucket = 0
		s := r
		s.Side = shuffle.Snapshot
		rows = append(rows, r, s)
	}
	work := make([]shuffle.Row, len(rows))
	b.ReportAllocs()
	for b.Loop() {
		copy(work, rows)
		d := &differ{res: NewResult(0, 1)}
		if err := d.bucket(0, work); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(rows))*float64(b.N)/b.Elapsed().Seconds(), "tuples/s")
}

func TestMergeRuns(t *testing.T) {
	rows, _, _, _ := scenario(t, 300)
	for i := range rows {
		rows[i].Bucket = 0 // one bucket, many runs
	}
	want := slices.Clone(rows)
	shuffle.Sort(want)
	for _, k := range []int{1, 2, 3, 17, 64} {
		rng := rand.New(rand.NewPCG(uint64(k), 9))
		runs := make([][]shuffle.Row, k)
		for _, r := range rows {
			i := rng.IntN(k)
			runs[i] = append(runs[i], r)
		}
		for _, r := range runs {
			shuffle.Sort(r)
		}
		if got := merge(nil, runs); !slices.Equal(got, want) {
			t.Fatalf("k=%d: merge differs from a sort", k)
		}
	}
}

// bucketRows is a BucketSource over rows (one side, any order) that
// records which buckets it was asked for.
// bySide splits rows into the release's and the snapshot's.
func bySide(rows []shuffle.Row) (rel, snap []shuffle.Row) {
	for _, r := range rows {
		if r.Side == shuffle.Release {
			rel = append(rel, r)
		} else {
			snap = append(snap, r)
		}
	}
	return rel, snap
}

type bucketRows struct {
	by    map[uint32][]shuffle.Row
	asked []uint32
}

func newBucketRows(rows []shuffle.Row) *bucketRows {
	s := &bucketRows{by: map[uint32][]shuffle.Row{}}
	rows = slices.Clone(rows)
	shuffle.Sort(rows)
	for _, r := range rows {
		s.by[r.Bucket] = append(s.by[r.Bucket], r)
	}
	return s
}

func (s *bucketRows) Bucket(b uint32) ([]shuffle.Row, error) {
	if n := len(s.asked); n > 0 && s.asked[n-1] >= b {
		return nil, fmt.Errorf("bucket %d asked after %d", b, s.asked[n-1])
	}
	s.asked = append(s.asked, b)
	return s.by[b], nil
}

// With the snapshot's leaf index, a reducer asks for the snapshot side of
// exactly the buckets whose release leaf differs, and its result (counts,
// examples, both leaf lists) is the one reading every snapshot row gives.
func TestReduceWithLeafIndex(t *testing.T) {
	rows, snap, rel, want := scenario(t, 500)
	tombs := NewSet(&manifest.FenceLog{Entries: []manifest.FenceEntry{{Seq: 1, SampleID: "s00010"}, {Seq: 2, SampleID: "s00040"}}})
	want.TombstoneHits = 2
	relRows, snapRows := bySide(rows)
	relLeaves, snapLeaves := leaves(t, rel), leaves(t, snap)
	var differ []uint32
	for b := range uint32(1 << testK) {
		if !bytes.Equal(relLeaves[32*b:32*b+32], snapLeaves[32*b:32*b+32]) {
			differ = append(differ, b)
		}
	}
	if len(differ) == 0 || len(differ) > 1<<testK/2 {
		t.Fatalf("scenario: %d of %d buckets differ; the test needs some of each", len(differ), 1<<testK)
	}
	full, err := Reduce(t.Context(), Options{K: testK, Lo: 0, Hi: 1 << testK, Tombstones: tombs}, sources(t, rows, 3, 0, 1<<testK, 7))
	if err != nil {
		t.Fatal(err)
	}
	if full.Counts != want {
		t.Fatalf("full diff counts %+v, want %+v", full.Counts, want)
	}
	// Two reducers, each with its slice of the index.
	mid := uint32(1 << testK / 2)
	merged := NewResult(0, 1<<testK)
	var asked []uint32
	for _, r := range [][2]uint32{{0, mid}, {mid, 1 << testK}} {
		src := newBucketRows(snapRows)
		res, err := Reduce(t.Context(), Options{
			K: testK, Lo: r[0], Hi: r[1], Tombstones: tombs,
			Snapshot: src, SnapshotLeaves: snapLeaves[32*r[0] : 32*r[1]],
		}, sources(t, relRows, 3, r[0], r[1], 8))
		if err != nil {
			t.Fatal(err)
		}
		if !merged.Merge(res) {
			t.Fatalf("merge of range [%d, %d): counts past int64", r[0], r[1])
		}
		merged.ReleaseLeaves = append(merged.ReleaseLeaves, res.ReleaseLeaves...)
		merged.SnapshotLeaves = append(merged.SnapshotLeaves, res.SnapshotLeaves...)
		asked = append(asked, src.asked...)
	}
	if !slices.Equal(asked, differ) {
		t.Fatalf("snapshot side asked for buckets %v, want the differing ones %v", asked, differ)
	}
	if merged.Counts != full.Counts || !bytes.Equal(merged.ReleaseLeaves, relLeaves) || !bytes.Equal(merged.SnapshotLeaves, snapLeaves) {
		t.Fatalf("indexed reduce: counts %+v (full %+v), leaves equal %v/%v",
			merged.Counts, full.Counts, bytes.Equal(merged.ReleaseLeaves, relLeaves), bytes.Equal(merged.SnapshotLeaves, snapLeaves))
	}
	for code, ids := range full.Examples {
		if !slices.Equal(merged.Examples[code], ids) {
			t.Errorf("examples[%s] = %v, full diff %v", code, merged.Examples[code], ids)
		}
	}
	if len(merged.Examples) != len(full.Examples) {
		t.Errorf("example classes %v, full diff %v", merged.Examples, full.Examples)
	}

	// An index that does not match the snapshot (a leaf claiming a
	// tampered bucket is clean) cannot hide the bucket's difference from
	// the root check: the reducer reports the index's leaf as the
	// snapshot's, and that leaf list no longer hashes to the snapshot's
	// root.
	forged := slices.Clone(snapLeaves)
	b := differ[0]
	copy(forged[32*b:], relLeaves[32*b:32*b+32])
	res, err := Reduce(t.Context(), Options{K: testK, Lo: 0, Hi: 1 << testK, Snapshot: newBucketRows(snapRows), SnapshotLeaves: forged},
		sources(t, relRows, 2, 0, 1<<testK, 9))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(res.SnapshotLeaves, snapLeaves) {
		t.Fatal("forged index: snapshot leaves equal the true ones")
	}
	if _, err := Reduce(t.Context(), Options{K: testK, Lo: 0, Hi: 1 << testK, Snapshot: newBucketRows(snapRows), SnapshotLeaves: snapLeaves[:32]},
		sources(t, relRows, 1, 0, 1<<testK, 9)); errcode.Of(err) != errcode.Internal {
		t.Fatalf("short leaf slice: %v, want INTERNAL", err)
	}
}

// rowCounter is a DigestSource that records the buckets whose rows were
// made.
type rowCounter struct {
	DigestSource
	bucket uint32
	made   []uint32
	holds  map[uint32]bool // every bucket NextDigests gave
}

func (c *rowCounter) NextDigests() (uint32, [][32]byte, bool, error) {
	b, d, all, err := c.DigestSource.NextDigests()
	if err == nil {
		c.bucket = b
		c.holds[b] = true
	}
	return b, d, all, err
}

func (c *rowCounter) Rows() ([]shuffle.Row, error) {
	c.made = append(c.made, c.bucket)
	return c.DigestSource.Rows()
}

// rowsOnly hides a source's NextDigests: a Source that can only Next.
type rowsOnly struct{ Source }

// With the leaf index, a reducer makes the rows of a shuffle file's
// bucket only when the bucket differs from the snapshot or fences need
// the rows, and gives the result of the full diff either way, also with
// sources that cannot give digests first among them.
func TestReduceMakesRowsOnlyWhenNeeded(t *testing.T) {
	rows, snap, rel, want := scenario(t, 500)
	relRows, snapRows := bySide(rows)
	relLeaves, snapLeaves := leaves(t, rel), leaves(t, snap)
	differs := map[uint32]bool{}
	for b := range uint32(1 << testK) {
		differs[b] = !bytes.Equal(relLeaves[32*b:32*b+32], snapLeaves[32*b:32*b+32])
	}
	tombs := NewSet(&manifest.FenceLog{Entries: []manifest.FenceEntry{{Seq: 1, SampleID: "s00010"}}})
	for _, fenced := range []bool{false, true} {
		t.Run(fmt.Sprintf("fences=%v", fenced), func(t *testing.T) {
			o := Options{K: testK, Lo: 0, Hi: 1 << testK, Snapshot: newBucketRows(snapRows), SnapshotLeaves: snapLeaves}
			w := want
			if fenced {
				o.Tombstones = tombs
				w.TombstoneHits = 1
			}
			srcs := sources(t, relRows, 4, 0, 1<<testK, 11)
			var counters []*rowCounter
			for i, s := range srcs {
				if i == 3 {
					srcs[i] = rowsOnly{s}
					continue
				}
				c := &rowCounter{DigestSource: s.(DigestSource), holds: map[uint32]bool{}}
				counters = append(counters, c)
				srcs[i] = c
			}
			res, err := Reduce(t.Context(), o, srcs)
			if err != nil {
				t.Fatal(err)
			}
			if res.Counts != w || !bytes.Equal(res.ReleaseLeaves, relLeaves) || !bytes.Equal(res.SnapshotLeaves, snapLeaves) {
				t.Fatalf("counts %+v, want %+v; leaves equal %v/%v", res.Counts, w,
					bytes.Equal(res.ReleaseLeaves, relLeaves), bytes.Equal(res.SnapshotLeaves, snapLeaves))
			}
			made, clean := 0, 0
			for i, c := range counters {
				for _, b := range c.made {
					made++
					if !differs[b] && !fenced {
						t.Errorf("source %d made the rows of bucket %d, which matches the snapshot", i, b)
					}
				}
				for b := range uint32(1 << testK) {
					if (differs[b] || fenced) && !slices.Contains(c.made, b) && c.holds[b] {
						t.Errorf("source %d never made the rows of bucket %d", i, b)
					}
					if !differs[b] {
						clean++
					}
				}
			}
			if made == 0 || clean == 0 {
				t.Fatalf("%d buckets' rows made, %d clean: the test needs both", made, clean)
			}
		})
	}
}

// Merge adds counts that fit, and refuses counts whose sums pass an
// int64, as only forged ones can, leaving the result as it was: counts
// and examples. Validate refuses a result holding a shard-level count,
// which no reduce task sets.
func TestMergeRefusesCountsPastInt64(t *testing.T) {
	r := NewResult(0, 4)
	part := func(records, missing int64, example string) *Result {
		p := NewResult(0, 4)
		p.Counts.Records, p.Counts.Missing = records, missing
		p.Examples["MISSING_MEMBER"] = []string{example}
		return p
	}
	if !r.Merge(part(1<<62, 1, "a")) || !r.Merge(part(1<<62-1, 1, "b")) {
		t.Fatal("counts that fit were refused")
	}
	want := r.Counts
	if want.Records != 1<<63-1 || want.Missing != 2 {
		t.Fatalf("merged counts %+v", want)
	}
	if r.Merge(part(1, 1, "c")) {
		t.Fatal("records past int64 were merged")
	}
	if r.Counts != want || !slices.Equal(r.Examples["MISSING_MEMBER"], []string{"a", "b"}) {
		t.Fatalf("a refused merge changed the result: counts %+v, examples %v", r.Counts, r.Examples)
	}

	res, err := Reduce(context.Background(), Options{K: testK, Lo: 0, Hi: 1 << testK}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for name, set := range map[string]func(c *manifest.Counts){
		"shards":              func(c *manifest.Counts) { c.Shards, c.ShardsVerified = 1, 1 },
		"digestFailures":      func(c *manifest.Counts) { c.DigestFailures = 1 },
		"tupleRootMismatches": func(c *manifest.Counts) { c.TupleRootMismatches = 1 },
	} {
		forged := *res
		set(&forged.Counts)
		if err := forged.Validate(0, 1<<testK); errcode.Of(err) != errcode.ShuffleCorrupt {
			t.Errorf("result with %s: %v, want %s", name, err, errcode.ShuffleCorrupt)
		}
	}
}
