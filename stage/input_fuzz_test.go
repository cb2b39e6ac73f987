package stage

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/shardproof/shardproof/internal/canon"
	"github.com/shardproof/shardproof/internal/errcode"
)

// FuzzStageInput feeds arbitrary bytes as a source Parquet file to the
// staging reader (openInputs, the key pass and sort, the spool pass,
// Build): stage reads files users hand it. It must never panic, and every
// rejection is BAD_INPUT (or IO for the spool), never INTERNAL.
func FuzzStageInput(f *testing.F) {
	rows := make([]Row, 40)
	for i := range rows {
		rows[i] = Row{SampleID: "s" + strconv.Itoa(i), SourceID: "src", SourceVersion: int64(i), Split: "train", Lang: "en", Text: "text " + strconv.Itoa(i*7), Tokens: int64(i)}
	}
	rec := BuildRows(rows)
	for _, o := range []ParquetOptions{{}, {Codec: "none"}, {Codec: "snappy"}, {RowGroupRows: 7}} {
		b, err := EncodeParquet(rec, DefaultSchema(), o)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	rec.Release()
	f.Fuzz(func(t *testing.T, b []byte) {
		dir := t.TempDir()
		p := filepath.Join(dir, "in.parquet")
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		check := func(what string, err error) bool {
			if err == nil {
				return true
			}
			if c := errcode.Of(err); !errcode.Known(c) || c == errcode.Internal {
				t.Fatalf("%s: uncoded or INTERNAL error: %v", what, err)
			}
			return false
		}
		ctx := context.Background()
		src, err := openInputs(ctx, []string{p})
		if !check("openInputs", err) {
			return
		}
		defer src.close()
		src.tempDir = dir
		n := src.Len()
		shards := min(2, n)
		if shards == 0 {
			return
		}
		order, err := sortRows(ctx, src, 0, shards, dir)
		if !check("keys", err) {
			return
		}
		defer order.close()
		if !check("partition", src.partition(ctx, order, 0)) {
			return
		}
		as, err := canon.ArrowSchema(DefaultSchema())
		if err != nil {
			t.Fatal(err)
		}
		for j := range shards {
			idx, err := order.shard(j)
			if !check("shard", err) {
				return
			}
			bld := array.NewRecordBuilder(memory.DefaultAllocator, as)
			check("build", src.Build(j, idx, bld))
			bld.Release()
		}
	})
}
