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

// Source files whose Arrow schema, stored in the file, says large_string
// (what Polars writes for strings) stage like utf8 ones: the Parquet
// columns are the same UTF-8 byte arrays, and the staged release is the
// same.
func TestStageReadsLargeStringSources(t *testing.T) {
	ctx := context.Background()
	rows := []stage.Row{
		{SampleID: "a", SourceID: "web", SourceVersion: 1, Split: "train", Lang: "en", Text: "alpha", Tokens: 1},
		{SampleID: "b", SourceID: "web", SourceVersion: 2, Split: "val", Lang: "de", Text: "beta", Tokens: 2},
		{SampleID: "c", SourceID: "books", SourceVersion: 1, Split: "test", Lang: "fr", Text: "gamma", Tokens: 3},
	}
	dir := t.TempDir()
	plain := writeSources(t, dir, rows, 1)

	large := arrow.BinaryTypes.LargeString
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "sample_id", Type: large}, {Name: "source_id", Type: large},
		{Name: "source_version", Type: arrow.PrimitiveTypes.Int64}, {Name: "split", Type: large},
		{Name: "lang", Type: large}, {Name: "text", Type: large},
		{Name: "tokens", Type: arrow.PrimitiveTypes.Int64},
	}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer b.Release()
	for _, r := range rows {
		b.Field(0).(*array.LargeStringBuilder).Append(r.SampleID)
		b.Field(1).(*array.LargeStringBuilder).Append(r.SourceID)
		b.Field(2).(*array.Int64Builder).Append(r.SourceVersion)
		b.Field(3).(*array.LargeStringBuilder).Append(r.Split)
		b.Field(4).(*array.LargeStringBuilder).Append(r.Lang)
		b.Field(5).(*array.LargeStringBuilder).Append(r.Text)
		b.Field(6).(*array.Int64Builder).Append(r.Tokens)
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	largePath := filepath.Join(dir, "large.parquet")
	writeParquet(t, largePath, rec, nil, pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema()))

	a, err := stage.Stage(ctx, stagetest.Store(t), stage.StageOptions{Inputs: plain, Shards: 1, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	l, err := stage.Stage(ctx, stagetest.Store(t), stage.StageOptions{Inputs: []string{largePath}, Shards: 1, Seed: 1})
	if err != nil {
		t.Fatalf("stage of a large_string source: %v", err)
	}
	if l.Root != a.Root {
		t.Fatalf("large_string source staged root %s, utf8 source %s", l.Root, a.Root)
	}
}
