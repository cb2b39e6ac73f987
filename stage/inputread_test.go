package stage

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/shardproof/shardproof/internal/errcode"
	filestore "github.com/shardproof/shardproof/objstore/file"
)

// A dictionary-encoded column of a long text repeated is small on disk
// and in the footer's sizes, and large decoded: the input batch bound
// holds on the bytes decoded, not on the footer's, and the release is the
// one a plain-encoded copy of the same rows gives.
func TestInputBatchesBoundedOnDecodedBytes(t *testing.T) {
	old := inputBatchBytes
	inputBatchBytes = 256 << 10
	defer func() { inputBatchBytes = old }()

	// 200 rows of one 64 KiB text: 12.5 MiB decoded, 50 times the bound.
	const n, textLen = 200, 64 << 10
	long := strings.Repeat("boilerplate ", textLen/12+1)[:textLen]
	rows := make([]Row, n)
	for i := range rows {
		rows[i] = Row{SampleID: "s" + strconv.Itoa(i), SourceID: "web", SourceVersion: 1, Split: "train", Lang: "en", Text: long, Tokens: 3}
	}
	rec := BuildRows(rows)
	defer rec.Release()
	dir := t.TempDir()
	write := func(name string, dict bool) string {
		return writeInputFile(t, filepath.Join(dir, name), rec, parquet.NewWriterProperties(parquet.WithDictionaryDefault(dict), parquet.WithMaxRowGroupLength(n)))
	}
	dict, plain := write("dict.parquet", true), write("plain.parquet", false)

	// The premise: the footer says the dictionary file's rows are small.
	pf, err := file.OpenParquetFile(dict, false)
	if err != nil {
		t.Fatal(err)
	}
	rg := pf.MetaData().RowGroup(0)
	text, err := rg.ColumnChunk(5)
	if err != nil {
		t.Fatal(err)
	}
	if !text.HasDictionaryPage() || rg.TotalByteSize() > n*textLen/20 {
		t.Fatalf("dict.parquet: text dictionary-encoded %v, row group %d bytes by the footer; want true and under %d", text.HasDictionaryPage(), rg.TotalByteSize(), n*textLen/20)
	}
	pf.Close()

	largest, rowsRead := map[string]int64{}, map[string]int{}
	onInputBatch = func(path string, rows int, bytes int64) {
		largest[path] = max(largest[path], bytes)
		rowsRead[path] += rows
	}
	defer func() { onInputBatch = nil }()
	stage := func(p string) Result {
		s, err := filestore.Open(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		res, err := Stage(context.Background(), s, StageOptions{Inputs: []string{p}, Shards: 2, Seed: 1, TempDir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	d, p := stage(dict), stage(plain)
	for _, path := range []string{dict, plain} {
		// Both passes (keys, spool) read every row.
		if largest[path] > inputBatchBytes || rowsRead[path] != 2*n {
			t.Errorf("%s: batches of up to %d decoded bytes, %d rows read; want at most %d, %d", filepath.Base(path), largest[path], rowsRead[path], inputBatchBytes, 2*n)
		}
	}
	if d.Root != p.Root {
		t.Fatalf("dictionary-encoded input staged root %s, plain-encoded %s", d.Root, p.Root)
	}
}

// OPTIONAL columns (what pyarrow, Polars and Spark write by default)
// without nulls, in row groups of 7 rows and small pages read in batches
// that end inside them, stage to the release of REQUIRED columns in one
// row group; a null is BAD_INPUT naming its column, and nothing is stored.
func TestStageReadsOptionalColumnsAndRefusesNulls(t *testing.T) {
	rows := make([]Row, 300)
	for i := range rows {
		rows[i] = Row{SampleID: "s" + strconv.Itoa(i), SourceID: "web", SourceVersion: int64(i % 3), Split: "train", Lang: "en", Text: strings.Repeat("t", 100+i), Tokens: int64(i)}
	}
	rec := BuildRows(rows)
	defer rec.Release()
	dir := t.TempDir()
	plain := filepath.Join(dir, "plain.parquet")
	b, err := EncodeParquet(rec, DefaultSchema(), ParquetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(plain, b, 0o644); err != nil {
		t.Fatal(err)
	}
	// optional writes rows with every column OPTIONAL, and a null text
	// at row nullAt unless it is negative.
	optional := func(name string, nullAt int) string {
		fields := rec.Schema().Fields()
		cols := rec.Columns()
		for i := range fields {
			fields[i].Nullable = true
		}
		texts := array.NewStringBuilder(memory.DefaultAllocator)
		defer texts.Release()
		for i := range rows {
			if i == nullAt {
				texts.AppendNull()
			} else {
				texts.Append(rows[i].Text)
			}
		}
		cols[5] = texts.NewArray()
		defer cols[5].Release()
		r := array.NewRecordBatch(arrow.NewSchema(fields, nil), cols, rec.NumRows())
		defer r.Release()
		return writeInputFile(t, filepath.Join(dir, name), r, parquet.NewWriterProperties(parquet.WithMaxRowGroupLength(7), parquet.WithDataPageSize(512), parquet.WithBatchSize(3)))
	}
	// stage returns what staging p gave and the objects it stored.
	stage := func(p string) (Result, int, error) {
		s, err := filestore.Open(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		res, err := Stage(context.Background(), s, StageOptions{Inputs: []string{p}, Shards: 3, Seed: 1, TempDir: t.TempDir()})
		page, lerr := s.List(context.Background(), "", "", 0)
		if lerr != nil {
			t.Fatal(lerr)
		}
		return res, len(page.Objects), err
	}
	want, _, err := stage(plain)
	if err != nil {
		t.Fatal(err)
	}
	old := inputBatchBytes
	inputBatchBytes = 4 << 10
	defer func() { inputBatchBytes = old }()
	got, _, err := stage(optional("optional.parquet", -1))
	if err != nil {
		t.Fatal(err)
	}
	if got.Root != want.Root {
		t.Fatalf("OPTIONAL columns in row groups of 7 staged root %s, REQUIRED ones %s", got.Root, want.Root)
	}
	_, n, err := stage(optional("null.parquet", 123))
	if errcode.Of(err) != errcode.BadInput || !strings.Contains(err.Error(), "null.parquet: column text has nulls") || n != 0 {
		t.Fatalf("a null text: err = %v, %d objects stored; want BAD_INPUT naming the column, none", err, n)
	}
}

// writeInputFile writes rec to path as a Parquet file with props, as a
// user's pipeline would, and returns path.
func writeInputFile(t *testing.T, path string, rec arrow.RecordBatch, props *parquet.WriterProperties) string {
	t.Helper()
	var buf bytes.Buffer
	w, err := pqarrow.NewFileWriter(rec.Schema(), &buf, props, pqarrow.DefaultWriterProps())
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(rec); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// readSizes records the largest read of a file.
type readSizes struct {
	*os.File
	largest *int
}

func (r readSizes) ReadAt(p []byte, off int64) (int, error) {
	*r.largest = max(*r.largest, len(p))
	return r.File.ReadAt(p, off)
}

// An input's column chunks are read a page at a time, not whole: a
// row group of one large text chunk (what DuckDB, pyarrow and Spark
// write: 122,880 rows, a million, 128 MB) was read into memory at once,
// 500 MB of 120,000 texts of 8 KB (1.67 GB peak RSS staging it into 64
// shards, 0.70 GB a page at a time).
func TestStageReadsInputChunksByPage(t *testing.T) {
	rows := make([]Row, 2000)
	for i := range rows {
		rows[i] = Row{SampleID: "s" + strconv.Itoa(i), SourceID: "web", SourceVersion: 1, Split: "train", Lang: "en", Text: strings.Repeat(strconv.Itoa(i*7919)+" ", 4000)[:4000], Tokens: 1}
	}
	rec := BuildRows(rows)
	defer rec.Release()
	// One row group; pages of about 1 MiB (8 MB of text).
	path := writeInputFile(t, filepath.Join(t.TempDir(), "one-row-group.parquet"), rec, parquet.NewWriterProperties(parquet.WithDictionaryDefault(false), parquet.WithBatchSize(64)))
	pf, err := file.OpenParquetFile(path, false)
	if err != nil {
		t.Fatal(err)
	}
	chunk, err := pf.MetaData().RowGroup(0).ColumnChunk(5)
	if err != nil {
		t.Fatal(err)
	}
	if pf.NumRowGroups() != 1 || chunk.TotalCompressedSize() < 7<<20 {
		t.Fatalf("%d row groups, a text chunk of %d bytes; want 1, 7 MiB or more", pf.NumRowGroups(), chunk.TotalCompressedSize())
	}
	pf.Close()

	largest := 0
	wrapInput = func(f *os.File) parquet.ReaderAtSeeker { return readSizes{f, &largest} }
	defer func() { wrapInput = nil }()
	s, err := filestore.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := Stage(context.Background(), s, StageOptions{Inputs: []string{path}, Shards: 2, Seed: 1, TempDir: t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	if largest > 2<<20 {
		t.Fatalf("largest read of the input %d bytes; want at most 2 MiB (a page, or the 1 MiB stream buffer)", largest)
	}
}
