package stage

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	filestore "github.com/shardproof/shardproof/objstore/file"
)

// The same rows written the ways other tools write Parquet stage to the
// same release: the root is a function of the rows (and the seed, shard
// count and codec), never of the input's encodings, page versions,
// codecs, statistics, column order, extra columns, nullability (with no
// nulls), or row groups, empty ones included (docs/FORMATS.md: they are
// free).
func TestStageSameRootWhateverTheInputEncoding(t *testing.T) {
	rows := make([]Row, 400)
	for i := range rows {
		id := fmt.Sprintf("s%04d", i)
		switch i % 4 {
		case 1:
			id = fmt.Sprintf("样本-%d", i)
		case 2:
			id = fmt.Sprintf("e\u0301-%d-🙂", i)
		}
		rows[i] = Row{SampleID: id, SourceID: fmt.Sprintf("src-%d", i%5), SourceVersion: int64(i%3) - 1, Split: []string{"train", "val", "test"}[i%3], Lang: []string{"en", "", "zh"}[i%3], Text: strings.Repeat("lorem ipsum ", i%13), Tokens: int64(i % 7)}
	}
	rec := BuildRows(rows)
	defer rec.Release()
	dir := t.TempDir()
	stage := func(paths ...string) Result {
		t.Helper()
		s, err := filestore.Open(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		res, err := Stage(context.Background(), s, StageOptions{Inputs: paths, Shards: 3, Seed: 5, TempDir: t.TempDir()})
		if err != nil {
			t.Fatalf("%v: %v", paths, err)
		}
		return res
	}
	want := stage(writeInputFile(t, filepath.Join(dir, "plain.parquet"), rec, parquet.NewWriterProperties(parquet.WithDictionaryDefault(false))))

	E := parquet.Encodings
	for name, props := range map[string][]parquet.WriterProperty{
		"dictionary":  nil,
		"page v2":     {parquet.WithDataPageVersion(parquet.DataPageV2)},
		"page v2 raw": {parquet.WithDataPageVersion(parquet.DataPageV2), parquet.WithDictionaryDefault(false), parquet.WithCompression(compress.Codecs.Zstd)},
		"delta": {parquet.WithDictionaryDefault(false), parquet.WithEncoding(E.DeltaByteArray),
			parquet.WithEncodingFor("text", E.DeltaLengthByteArray),
			parquet.WithEncodingFor("source_version", E.DeltaBinaryPacked), parquet.WithEncodingFor("tokens", E.DeltaBinaryPacked)},
		"byte stream split": {parquet.WithDictionaryDefault(false),
			parquet.WithEncodingFor("source_version", E.ByteStreamSplit), parquet.WithEncodingFor("tokens", E.ByteStreamSplit)},
		"no statistics, gzip": {parquet.WithStats(false), parquet.WithCompression(compress.Codecs.Gzip)},
		"brotli, page index":  {parquet.WithCompression(compress.Codecs.Brotli), parquet.WithPageIndexEnabled(true)},
		// The dictionary outgrows its page and falls back to plain
		// within a column chunk.
		"tiny pages, lz4": {parquet.WithCompression(compress.Codecs.Lz4Raw), parquet.WithDataPageSize(64), parquet.WithDictionaryPageSizeLimit(64), parquet.WithBatchSize(3)},
		"row groups of 7": {parquet.WithMaxRowGroupLength(7)},
	} {
		p := writeInputFile(t, filepath.Join(dir, strings.ReplaceAll(name, " ", "-")+".parquet"), rec, parquet.NewWriterProperties(props...))
		if got := stage(p); got.Root != want.Root {
			t.Errorf("%s: root %s, plain input %s", name, got.Root, want.Root)
		}
	}

	// Columns that may hold nulls and hold none: every page's values come
	// after its definition levels (in a v2 page, of the length its header
	// gives), which checkedPages skips before it walks the delta streams.
	nfields := slices.Clone(rec.Schema().Fields())
	for i := range nfields {
		nfields[i].Nullable = true
	}
	nullable := array.NewRecordBatch(arrow.NewSchema(nfields, nil), rec.Columns(), rec.NumRows())
	defer nullable.Release()
	for k, v := range []parquet.DataPageVersion{parquet.DataPageV1, parquet.DataPageV2} {
		for _, enc := range []parquet.Encoding{E.DeltaByteArray, E.DeltaLengthByteArray} {
			name := fmt.Sprintf("nullable-page-v%d-%s", k+1, enc)
			props := parquet.NewWriterProperties(parquet.WithDataPageVersion(v), parquet.WithDictionaryDefault(false), parquet.WithEncoding(enc),
				parquet.WithEncodingFor("source_version", E.DeltaBinaryPacked), parquet.WithEncodingFor("tokens", E.DeltaBinaryPacked), parquet.WithDataPageSize(512))
			if got := stage(writeInputFile(t, filepath.Join(dir, name+".parquet"), nullable, props)); got.Root != want.Root {
				t.Errorf("%s: root %s, plain input %s", name, got.Root, want.Root)
			}
		}
	}

	// Columns in another order, after extra ones of other types, in two
	// files that split the rows.
	order := []int{6, 5, 3, 0, 4, 2, 1}
	fields := []arrow.Field{{Name: "score", Type: arrow.PrimitiveTypes.Float64}, {Name: "n", Type: arrow.PrimitiveTypes.Int32}}
	for _, c := range order {
		fields = append(fields, rec.Schema().Field(c))
	}
	schema := arrow.NewSchema(fields, nil)
	var parts []string
	for k, r := range [][2]int64{{0, 150}, {150, 400}} {
		fb := array.NewFloat64Builder(memory.DefaultAllocator)
		ib := array.NewInt32Builder(memory.DefaultAllocator)
		for i := r[0]; i < r[1]; i++ {
			fb.Append(float64(i))
			ib.Append(int32(i))
		}
		cols := []arrow.Array{fb.NewArray(), ib.NewArray()}
		fb.Release()
		ib.Release()
		for _, c := range order {
			cols = append(cols, array.NewSlice(rec.Column(c), r[0], r[1]))
		}
		part := array.NewRecordBatch(schema, cols, r[1]-r[0])
		for _, c := range cols {
			c.Release()
		}
		parts = append(parts, writeInputFile(t, filepath.Join(dir, fmt.Sprintf("reordered-%d.parquet", k)), part, nil))
		part.Release()
	}
	if got := stage(parts...); got.Root != want.Root {
		t.Errorf("reordered, extra columns, two files: root %s, plain input %s", got.Root, want.Root)
	}

	// Row groups of no rows before, between and after the rows.
	if got := stage(writeEmptyRowGroups(t, filepath.Join(dir, "empty-row-groups.parquet"), rec)); got.Root != want.Root {
		t.Errorf("empty row groups: root %s, plain input %s", got.Root, want.Root)
	}
}

// writeEmptyRowGroups writes rec in two row groups with row groups of no
// rows before, between and after them (each column chunk of those holds
// no value).
func writeEmptyRowGroups(t *testing.T, path string, rec arrow.RecordBatch) string {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w, err := pqarrow.NewFileWriter(rec.Schema(), f, nil, pqarrow.DefaultWriterProps())
	if err != nil {
		t.Fatal(err)
	}
	half := rec.NumRows() / 2
	for _, r := range [][2]int64{{0, 0}, {0, half}, {half, half}, {half, rec.NumRows()}, {0, 0}} {
		w.NewRowGroup()
		part := rec.NewSlice(r[0], r[1])
		for _, col := range part.Columns() {
			if err := w.WriteColumnData(col); err != nil {
				t.Fatal(err)
			}
		}
		part.Release()
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	pf, err := file.OpenParquetFile(path, false)
	if err != nil {
		t.Fatal(err)
	}
	defer pf.Close()
	if n := pf.NumRowGroups(); n != 5 || pf.MetaData().RowGroup(0).NumRows() != 0 {
		t.Fatalf("%s: %d row groups, the first of %d rows; want 5, 0", path, n, pf.MetaData().RowGroup(0).NumRows())
	}
	return path
}
