package coordinator

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/mapper"
	"github.com/shardproof/shardproof/objstore"
	"github.com/shardproof/shardproof/stage"
	"github.com/shardproof/shardproof/stage/stagetest"
)

// A release of hundreds of shards that each fail with a long detail (a
// writer added a column whose name is 150,000 bytes long; a SCHEMA_MISMATCH
// lists the file's fields) still gets its INVALID report. Every failure
// goes into a map commit record and the report, both capped at
// manifest.MaxDocumentSize: with the details whole, these 450 shards made
// a report of about 68 MB, and verify failed with DOCUMENT_TOO_LARGE and
// no report at all.
func TestManyLongFailuresStillReport(t *testing.T) {
	s := stagetest.Store(t)
	res := stagetest.Synth(t, s, 40, 2, 7)
	rows := stagetest.ShardRows(t, s, res, 0)
	rec := stage.BuildRows(rows)
	defer rec.Release()
	b := array.NewFloat32Builder(memory.DefaultAllocator)
	for range rows {
		b.Append(0.5)
	}
	col := b.NewArray()
	b.Release()
	defer col.Release()
	fields := append(slices.Clone(rec.Schema().Fields()), arrow.Field{Name: strings.Repeat("n", 150_000), Type: arrow.PrimitiveTypes.Float32})
	wide := array.NewRecordBatch(arrow.NewSchema(fields, nil), append(slices.Clone(rec.Columns()), col), rec.NumRows())
	defer wide.Release()
	// One stored file, listed under many shard ids with shard 0's
	// figures.
	data := stagetest.EncodeRecord(t, wide, stage.DefaultSchema(), stage.ParquetOptions{})
	dg, v, _, err := objstore.PutBlob(t.Context(), s, data)
	if err != nil {
		t.Fatal(err)
	}
	d := res.Release.Shards[0]
	d.Digest, d.Size, d.ObjectVersion = dg, int64(len(data)), string(v)
	const wideShards = 450
	rel := stagetest.CloneRelease(res.Release)
	for i := range wideShards {
		d.ID = fmt.Sprintf("wide-%03d", i)
		rel.Shards = append(rel.Shards, d)
	}
	res = stagetest.Reissue(t, s, res, rel, false)

	r := verify(t, s, PlanOptions{Root: res.Root})
	if r.Verdict != manifest.Invalid || r.Counts.SchemaMismatches != wideShards || r.Counts.ShardsVerified != 2 {
		t.Fatalf("verdict %s, %d schema mismatches, %d shards verified; want INVALID, %d, 2", r.Verdict, r.Counts.SchemaMismatches, r.Counts.ShardsVerified, wideShards)
	}
	for _, f := range r.Failures {
		if len(f.Detail) > mapper.MaxFailureDetail {
			t.Fatalf("%s %s: detail of %d bytes", f.Shard, f.Code, len(f.Detail))
		}
	}
}
