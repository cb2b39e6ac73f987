package stage_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/shardproof/shardproof/stage"
	"github.com/shardproof/shardproof/stage/stagetest"
)

// Extra input columns are ignored, nested ones too, wherever they are: a
// struct of two leaves before the schema's columns shifts every Parquet
// leaf column by two against its Arrow field, and such an input failed
// to decode (BAD_INPUT "not readable Parquet") where it now stages the
// release its schema columns make.
func TestStageIgnoresNestedExtraColumns(t *testing.T) {
	sres, rows := synthRows(t, 300, 3, 7)
	rec := stage.BuildRows(rows)
	defer rec.Release()

	extra := arrow.StructOf(arrow.Field{Name: "a", Type: arrow.PrimitiveTypes.Int64}, arrow.Field{Name: "b", Type: arrow.BinaryTypes.String})
	sb := array.NewStructBuilder(memory.DefaultAllocator, extra)
	defer sb.Release()
	for i := range int(rec.NumRows()) {
		sb.Append(true)
		sb.FieldBuilder(0).(*array.Int64Builder).Append(int64(i))
		sb.FieldBuilder(1).(*array.StringBuilder).Append("x")
	}
	nested := sb.NewArray()
	defer nested.Release()
	fields := append([]arrow.Field{{Name: "meta", Type: extra}}, rec.Schema().Fields()...)
	cols := append([]arrow.Array{nested}, rec.Columns()...)
	withNested := array.NewRecordBatch(arrow.NewSchema(fields, nil), cols, rec.NumRows())
	defer withNested.Release()

	path := filepath.Join(t.TempDir(), "nested.parquet")
	writeParquet(t, path, withNested, nil, pqarrow.DefaultWriterProps())
	res, err := stage.Stage(context.Background(), stagetest.Store(t), stage.StageOptions{Inputs: []string{path}, Shards: 3, Seed: 7})
	if err != nil {
		t.Fatalf("stage of an input with a nested extra column: %v", err)
	}
	if res.Root != sres.Root || res.Snapshot != sres.Snapshot {
		t.Fatalf("root %s snapshot %s, want synth's %s %s", res.Root, res.Snapshot, sres.Root, sres.Snapshot)
	}
}
