package mapper

import (
	"context"
	"testing"

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
