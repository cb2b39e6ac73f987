package mapper

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
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
		id := "m" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		rows[i] = row{id, tuplehash.Bucket(id, 4)}
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
	data, err = stage.EncodeMemberParquet(rec, ms, stage.ParquetOptions{RowGroupRows: 8}, buckets)
	if err != nil {
		tb.Fatal(err)
	}
	return data, buckets
}

// FuzzMemberBucket feeds mutated member bytes to the bucket-by-bucket read
// (row groups chosen from the footer's list, which is as untrusted as the
// rest). It must never crash or fail operationally, and a read that does
// not decode reports a catalogued failure.
func FuzzMemberBucket(f *testing.F) {
	good, buckets := seedMember(f, 60)
	f.Add(good, buckets[0])
	f.Add(good, buckets[len(buckets)-1])
	f.Add(good, uint32(99))
	at := bytes.Index(good, []byte(canon.BucketRowGroupsKey))
	for _, off := range []int{at + len(canon.BucketRowGroupsKey) + 2, at + len(canon.BucketRowGroupsKey) + 6, len(good) / 2, len(good) - 20} {
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
		d := decoding{want: ms, logicalSchema: sd, tupleSchema: sd}
		d.pick = func(pf *file.Reader) ([]int, string, bool) {
			groups, why := bucketGroups(pf)
			if why != "" {
				return nil, why, false
			}
			gs := []int{}
			for g, r := range groups {
				if r.lo <= b && b <= r.hi {
					gs = append(gs, g)
				}
			}
			return gs, "", true
		}
		res, err := d.run(context.Background(), data, DecoderColumnReader, func(*tuplehash.Tuple, [32]byte) error { return nil })
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
		if n > 8 || n == 0 {
			t.Fatalf("row group %d holds %d rows", g, n)
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
	ms := canon.SnapshotMemberSchema()
	sd, _ := canon.SchemaDigest(ms)
	for b := uint32(0); b < 16; b++ {
		d := decoding{want: ms, logicalSchema: sd, tupleSchema: sd}
		d.pick = func(pf *file.Reader) ([]int, string, bool) {
			gs := []int{}
			for g, r := range groups {
				if r.lo <= b && b <= r.hi {
					gs = append(gs, g)
				}
			}
			return gs, "", true
		}
		got := 0
		res, err := d.run(context.Background(), data, DecoderColumnReader, func(tp *tuplehash.Tuple, _ [32]byte) error {
			if tuplehash.Bucket(tp.SampleID, 4) == b {
				got++
			}
			return nil
		})
		if err != nil || !res.decoded {
			t.Fatalf("bucket %d: %v %+v", b, err, res.failures)
		}
		if want := bytes.Count(bucketBytes(buckets), []byte{byte(b)}); got != want {
			t.Fatalf("bucket %d: %d tuples from its row groups, the member holds %d", b, got, want)
		}
	}
}

func bucketBytes(bs []uint32) []byte {
	out := make([]byte, len(bs))
	for i, b := range bs {
		out[i] = byte(b)
	}
	return out
}
