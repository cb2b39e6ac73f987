package mapper

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"fmt"
	"slices"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"

	"github.com/shardproof/shardproof/internal/canon"
	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/stage"
	"github.com/shardproof/shardproof/tuplehash"
)

// seedShard is a small valid shard of DefaultSchema.
func seedShard(tb testing.TB, n int) []byte {
	rows := make([]stage.Row, n)
	for i := range rows {
		rows[i] = stage.Row{
			SampleID: "s" + string(rune('a'+i%26)) + string(rune('a'+i/26)), SourceID: "web", SourceVersion: int64(i % 3),
			Split: []string{"train", "val", "test"}[i%3], Lang: "en", Text: "some text " + string(rune('A'+i%26)), Tokens: int64(i),
		}
	}
	rec := stage.BuildRows(rows)
	defer rec.Release()
	b, err := stage.EncodeParquet(rec, stage.DefaultSchema(), stage.ParquetOptions{RowGroupRows: 16})
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// FuzzMapShard feeds mutated shard bytes to the decoder. It must never
// crash; a file that does not decode must report a catalogued code and
// yield no figures; a file that decodes must account for every tuple.
func FuzzMapShard(f *testing.F) {
	good := seedShard(f, 40)
	f.Add(good)
	// A shard of no rows: a row group of 0 rows whose chunks hold no
	// data page (checkChunks checks no range of a chunk of no bytes).
	f.Add(seedShard(f, 0))
	f.Add(good[:len(good)-1])
	f.Add(good[:len(good)/2])
	f.Add(append([]byte("PAR1"), good[len(good)-64:]...))
	f.Add([]byte("PAR1\x00\x00\x00\x00PAR1"))
	for _, off := range []int{10, len(good) / 2, len(good) - 20, len(good) - 200} {
		c := append([]byte(nil), good...)
		c[off] ^= 0x10
		f.Add(c)
	}
	s := stage.DefaultSchema()
	sd, err := canon.SchemaDigest(s)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, dec := range decoders {
			d := decoding{want: s, logicalSchema: sd, tupleSchema: sd}
			var n int64
			res, err := d.run(context.Background(), data, dec, func(*tuplehash.Tuple, [32]byte) error { n++; return nil })
			if err != nil {
				t.Fatalf("operational error on in-memory bytes: %v", err)
			}
			for _, fl := range res.failures {
				if !errcode.Known(fl.code) {
					t.Fatalf("unknown code %q", fl.code)
				}
			}
			if res.decoded && res.records != n {
				t.Fatalf("decoded %d records but produced %d tuples", res.records, n)
			}
			if !res.decoded && len(res.failures) == 0 {
				t.Fatal("undecoded file without a failure")
			}
		}
	})
}

// seedMember is a small valid snapshot member whose row groups end at
// bucket boundaries, with the footer's row-group bucket ranges.
func seedMember(tb testing.TB, n int) (data []byte, buckets []uint32) {
	return seedMemberK(tb, n, 4, 8)
}

// seedMemberK is seedMember with 2^k buckets and row groups of at most
// rgRows rows.
func seedMemberK(tb testing.TB, n int, k uint, rgRows int64) (data []byte, buckets []uint32) {
	ms := canon.SnapshotMemberSchema()
	as, err := canon.ArrowSchema(ms)
	if err != nil {
		tb.Fatal(err)
	}
	type row struct {
		id string
		b  uint32
	}
	rows := make([]row, n)
	for i := range rows {
		id := fmt.Sprintf("m%05d", i)
		rows[i] = row{id, tuplehash.Bucket(id, k)}
	}
	slices.SortFunc(rows, func(a, b row) int { return cmp.Or(cmp.Compare(a.b, b.b), cmp.Compare(a.id, b.id)) })
	b := array.NewRecordBuilder(memory.DefaultAllocator, as)
	defer b.Release()
	for _, r := range rows {
		b.Field(0).(*array.StringBuilder).Append(r.id)
		b.Field(1).(*array.StringBuilder).Append("web")
		b.Field(2).(*array.Int64Builder).Append(1)
		b.Field(3).(*array.StringBuilder).Append("train")
		d := sha256.Sum256([]byte(r.id))
		b.Field(4).(*array.BinaryBuilder).Append(d[:])
		buckets = append(buckets, r.b)
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	data, err = stage.EncodeMemberParquet(rec, ms, stage.ParquetOptions{RowGroupRows: rgRows}, buckets)
	if err != nil {
		tb.Fatal(err)
	}
	return data, buckets
}

// FuzzMemberBucket feeds mutated member bytes to the bucket-by-bucket read
// (rows chosen from the footer's lists and page index, which are as
// untrusted as the rest). It must never crash or fail operationally, and a read that does
// not decode reports a catalogued failure.
func FuzzMemberBucket(f *testing.F) {
	good, buckets := seedMember(f, 60)
	f.Add(good, buckets[0])
	empty, _ := seedMember(f, 0)
	f.Add(empty, uint32(0))
	f.Add(good, buckets[len(buckets)-1])
	f.Add(good, uint32(99))
	at := bytes.Index(good, []byte(canon.BucketRowGroupsKey))
	runs := bytes.Index(good, []byte(canon.BucketRunsKey))
	for _, off := range []int{at + len(canon.BucketRowGroupsKey) + 2, at + len(canon.BucketRowGroupsKey) + 6, runs + len(canon.BucketRunsKey) + 2, runs + len(canon.BucketRunsKey) + 7, len(good) / 2, len(good) - 20} {
		c := append([]byte(nil), good...)
		c[off] ^= 0x08
		f.Add(c, buckets[0])
	}
	ms := canon.SnapshotMemberSchema()
	sd, err := canon.SchemaDigest(ms)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte, b uint32) {
		b %= 16
		// read decodes bucket bk's rows, keeping the footer in keep (nil:
		// parsing it afresh), and returns what it emitted.
		read := func(bk uint32, keep *keptFooter) (decodeResult, []tuplehash.Tuple) {
			d := decoding{want: ms, logicalSchema: sd, tupleSchema: sd, tuplesOnly: true, keep: keep}
			d.pick = func(pf *file.Reader) ([]rowRange, string, bool) {
				runs, why := listedRuns(pf)
				if why != "" {
					return nil, why, false
				}
				return covering(runs, bk), "", true
			}
			var got []tuplehash.Tuple
			res, err := d.run(context.Background(), data, DecoderColumnReader, func(tp *tuplehash.Tuple, _ [32]byte) error {
				got = append(got, *tp)
				return nil
			})
			if err != nil {
				t.Fatalf("operational error on in-memory bytes: %v", err)
			}
			for _, fl := range res.failures {
				if !errcode.Known(fl.code) {
					t.Fatalf("unknown code %q", fl.code)
				}
			}
			if !res.decoded && len(res.failures) == 0 {
				t.Fatal("undecoded file without a failure")
			}
			return res, got
		}
		var keep keptFooter
		defer keep.Close()
		read(b, &keep)
		// A second bucket read from the kept footer (a member's next
		// bucket) gives what a read parsing the footer afresh gives.
		next := (b + 1) % 16
		fresh, want := read(next, nil)
		kept, got := read(next, &keep)
		if kept.decoded != fresh.decoded || len(kept.failures) != len(fresh.failures) || !slices.EqualFunc(got, want, func(x, y tuplehash.Tuple) bool { return x == y }) {
			t.Fatalf("bucket %d from the kept footer: decoded %v, failures %v, %d tuples; afresh: %v, %v, %d",
				next, kept.decoded, kept.failures, len(got), fresh.decoded, fresh.failures, len(want))
		}
	})
}

// Member row groups end at bucket boundaries, hold at most RowGroupRows
// rows (a bucket larger than that takes several, alone), and the footer's
// ranges let a read of the covering row groups find every tuple of each
// bucket.
func TestMemberRowGroupRanges(t *testing.T) {
	data, buckets := seedMember(t, 200) // 16 buckets of ~12 rows: some split
	pf, err := file.NewParquetReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	groups, why := bucketGroups(pf)
	if why != "" {
		t.Fatal(why)
	}
	row, split := 0, false
	for g, r := range groups {
		n := int(pf.RowGroup(g).NumRows())
		if n > 8 || n == 0 || r.rows != (rowRange{g, 0, int64(n)}) {
			t.Fatalf("row group %d holds %d rows, listed as %+v", g, n, r.rows)
		}
		for _, b := range buckets[row : row+n] {
			if b < r.lo || b > r.hi {
				t.Fatalf("row group %d listed [%d, %d] holds bucket %d", g, r.lo, r.hi, b)
			}
		}
		if row+n < len(buckets) && buckets[row+n-1] == buckets[row+n] {
			split = true // a bucket continues in the next row group
			if r.lo != r.hi {
				t.Fatalf("row group %d ends inside bucket %d but lists [%d, %d]", g, buckets[row+n], r.lo, r.hi)
			}
		}
		row += n
	}
	if row != len(buckets) || !split || len(groups) < 16 {
		t.Fatalf("%d rows in %d row groups (a split bucket: %v)", row, len(groups), split)
	}
	for b := uint32(0); b < 16; b++ {
		got, _ := readSelected(t, data, covering(groups, b), 4, b)
		if want := bytes.Count(bucketBytes(buckets), []byte{byte(b)}); got != want {
			t.Fatalf("bucket %d: %d tuples from its row groups, the member holds %d", b, got, want)
		}
	}
}

// The footer's bucket runs (serializer 5) list every row of the member
// by bucket and row group, and a read of one bucket's runs gives exactly
// its rows: with row groups of several pages per column, the seek goes
// through the offset index to the page holding the run's first row.
func TestMemberBucketRuns(t *testing.T) {
	for _, c := range []struct {
		n      int
		k      uint
		rgRows int64
	}{{200, 4, 8}, {20000, 3, 8192}} {
		data, buckets := seedMemberK(t, c.n, c.k, c.rgRows)
		pf, err := file.NewParquetReader(bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		runs, why := bucketRuns(pf)
		if why != "" || runs == nil {
			t.Fatalf("runs %v: %s", runs, why)
		}
		listed, _ := listedRuns(pf)
		if !slices.Equal(listed, runs) {
			t.Fatal("listedRuns does not prefer the runs")
		}
		if c.rgRows > 8 {
			oi, err := pf.GetPageIndexReader().RowGroup(0)
			if err != nil || oi == nil {
				t.Fatalf("no page index: %v", err)
			}
			idx, err := oi.GetOffsetIndex(4) // content_digest
			if err != nil || idx == nil || len(idx.GetPageLocations()) < 4 {
				t.Fatalf("content_digest pages of row group 0: %v", err)
			}
		}
		row := 0
		for i, r := range runs {
			if r.lo != r.hi || r.rows.n <= 0 {
				t.Fatalf("run %d: %+v", i, r)
			}
			for _, b := range buckets[row : row+int(r.rows.n)] {
				if b != r.lo {
					t.Fatalf("run %d of bucket %d holds bucket %d", i, r.lo, b)
				}
			}
			row += int(r.rows.n)
		}
		if row != len(buckets) {
			t.Fatalf("runs cover %d of %d rows", row, len(buckets))
		}
		for b := uint32(0); b < 1<<c.k; b++ {
			want := bytes.Count(bucketBytes(buckets), []byte{byte(b)})
			// A short bucket is read with the rest of its read window; a
			// long one alone.
			short := want < readWindow/4
			got, other := readSelected(t, data, covering(runs, b), c.k, b)
			if got != want || (!short && other != 0) || other > 2*readWindow {
				t.Fatalf("n=%d bucket %d: %d tuples read (and %d of other buckets), the member holds %d", c.n, b, got, other, want)
			}
		}
	}
}

// TestCoveringWidensShortRuns: a short bucket run is read as the aligned
// read windows holding it, within its row group, overlapping ranges merged;
// a long one as it is; and a cached read serves every bucket inside it.
func TestCoveringWidensShortRuns(t *testing.T) {
	runs := []bucketRun{
		{lo: 1, hi: 1, rows: rowRange{0, 0, 40}, groupRows: 5000},
		{lo: 2, hi: 2, rows: rowRange{0, 40, 30}, groupRows: 5000},
		{lo: 3, hi: 3, rows: rowRange{0, 1020, 10}, groupRows: 5000}, // straddles a window edge
		{lo: 4, hi: 4, rows: rowRange{0, 1030, 3000}, groupRows: 5000},
		{lo: 5, hi: 5, rows: rowRange{0, 4990, 10}, groupRows: 5000}, // the group's last rows
		{lo: 5, hi: 5, rows: rowRange{1, 0, 10}, groupRows: 600},     // and the next group's first
		{lo: 6, hi: 6, rows: rowRange{1, 10, 590}, groupRows: 600},
	}
	for _, c := range []struct {
		b    uint32
		want []rowRange
	}{
		{1, []rowRange{{0, 0, 1024}}},
		{2, []rowRange{{0, 0, 1024}}},
		{3, []rowRange{{0, 0, 2048}}},
		{4, []rowRange{{0, 1030, 3000}}},
		{5, []rowRange{{0, 4096, 904}, {1, 0, 600}}},
		{6, []rowRange{{1, 10, 590}}},
		{7, []rowRange{}},
	} {
		if got := covering(runs, c.b); !slices.Equal(got, c.want) {
			t.Errorf("covering(%d) = %v, want %v", c.b, got, c.want)
		}
	}
	cached := covering(runs, 3)
	for b, in := range map[uint32]bool{1: true, 2: true, 3: true, 4: false, 5: false} {
		if got := within(covering(runs, b), cached); got != in {
			t.Errorf("bucket %d within %v: %v, want %v", b, cached, got, in)
		}
	}
}

// readSelected decodes the rows sel of a member and returns how many are
// of bucket b and how many of other buckets.
func readSelected(t *testing.T, data []byte, sel []rowRange, k uint, b uint32) (got, other int) {
	t.Helper()
	ms := canon.SnapshotMemberSchema()
	sd, _ := canon.SchemaDigest(ms)
	d := decoding{want: ms, logicalSchema: sd, tupleSchema: sd, tuplesOnly: true}
	d.pick = func(*file.Reader) ([]rowRange, string, bool) { return sel, "", true }
	res, err := d.run(context.Background(), data, DecoderColumnReader, func(tp *tuplehash.Tuple, _ [32]byte) error {
		if tuplehash.Bucket(tp.SampleID, k) == b {
			got++
		} else {
			other++
		}
		return nil
	})
	if err != nil || !res.decoded {
		t.Fatalf("bucket %d: %v %+v", b, err, res.failures)
	}
	return got, other
}

func bucketBytes(bs []uint32) []byte {
	out := make([]byte, len(bs))
	for i, b := range bs {
		out[i] = byte(b)
	}
	return out
}

// BenchmarkMemberBucket reads one bucket of a 32,768-row member (32
// buckets of about 1,000 rows, row groups of at most 8,192): through its
// bucket runs and the offset index (serializer 5), or through the row
// groups covering it (what a serializer-4 member allows).
func BenchmarkMemberBucket(b *testing.B) {
	data, _ := seedMemberK(b, 1<<15, 5, 8192)
	pf, err := file.NewParquetReader(bytes.NewReader(data))
	if err != nil {
		b.Fatal(err)
	}
	runs, why := bucketRuns(pf)
	groups, why2 := bucketGroups(pf)
	if why != "" || why2 != "" {
		b.Fatal(why, why2)
	}
	ms := canon.SnapshotMemberSchema()
	sd, _ := canon.SchemaDigest(ms)
	for _, c := range []struct {
		name string
		runs []bucketRun
	}{{"runs", runs}, {"rowgroups", groups}, {"none", nil}} {
		b.Run(c.name, func(b *testing.B) {
			rows := 0
			for i := 0; b.Loop(); i++ {
				sel := covering(c.runs, uint32(i%32))
				d := decoding{want: ms, logicalSchema: sd, tupleSchema: sd, tuplesOnly: true}
				d.pick = func(*file.Reader) ([]rowRange, string, bool) { return sel, "", true }
				res, err := d.run(context.Background(), data, DecoderColumnReader, func(*tuplehash.Tuple, [32]byte) error { rows++; return nil })
				if err != nil || !res.decoded {
					b.Fatal(err, res.failures)
				}
			}
			b.ReportMetric(float64(rows)/float64(b.N), "rows/op")
		})
	}
	// Every fourth bucket in order, as a reducer reads the differing
	// buckets of a 4M-record release, parsing the footer afresh for each
	// or keeping it (and the row group's column readers) as a Member does.
	for _, kept := range []bool{false, true} {
		b.Run(fmt.Sprintf("every4/kept=%v", kept), func(b *testing.B) {
			rows := 0
			for b.Loop() {
				var keep keptFooter
				for bk := uint32(0); bk < 32; bk += 4 {
					sel := covering(runs, bk)
					d := decoding{want: ms, logicalSchema: sd, tupleSchema: sd, tuplesOnly: true}
					if kept {
						d.keep = &keep
					}
					d.pick = func(*file.Reader) ([]rowRange, string, bool) { return sel, "", true }
					res, err := d.run(context.Background(), data, DecoderColumnReader, func(*tuplehash.Tuple, [32]byte) error { rows++; return nil })
					if err != nil || !res.decoded {
						b.Fatal(err, res.failures)
					}
				}
				keep.Close()
			}
			b.ReportMetric(float64(rows)/float64(b.N), "rows/op")
		})
	}
}
