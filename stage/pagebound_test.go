package stage_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/shardproof/shardproof/coordinator"
	"github.com/shardproof/shardproof/internal/canon"
	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/objstore"
	"github.com/shardproof/shardproof/stage"
	"github.com/shardproof/shardproof/stage/stagetest"
)

// writeInput writes rows as a source file the way another tool would
// (pqarrow's defaults, snappy, no shardproof writer settings).
func writeInput(t *testing.T, path string, rows []stage.Row) {
	t.Helper()
	writeInputCodec(t, path, rows, compress.Codecs.Snappy)
}

func writeInputCodec(t *testing.T, path string, rows []stage.Row, codec compress.Compression) {
	t.Helper()
	rec := stage.BuildRows(rows)
	defer rec.Release()
	props := parquet.NewWriterProperties(parquet.WithCompression(codec), parquet.WithDictionaryDefault(false))
	writeParquet(t, path, rec, props, pqarrow.DefaultWriterProps())
}

// writeParquet writes rec to path as a Parquet file with props (nil:
// pqarrow's defaults) and the Arrow writer properties aprops.
func writeParquet(t *testing.T, path string, rec arrow.RecordBatch, props *parquet.WriterProperties, aprops pqarrow.ArrowWriterProperties) {
	t.Helper()
	if err := os.WriteFile(path, encodeParquet(t, rec, props, aprops), 0o644); err != nil {
		t.Fatal(err)
	}
}

// encodeParquet is rec as the bytes of a Parquet file written with props
// and aprops.
func encodeParquet(t *testing.T, rec arrow.RecordBatch, props *parquet.WriterProperties, aprops pqarrow.ArrowWriterProperties) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := pqarrow.NewFileWriter(rec.Schema(), &buf, props, aprops)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(rec); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// verifyStaged verifies the release of root in s and returns its report.
func verifyStaged(ctx context.Context, t *testing.T, s objstore.Store, root manifest.Digest) *manifest.Report {
	t.Helper()
	out, err := coordinator.Verify(ctx, s, coordinator.Options{PlanOptions: coordinator.PlanOptions{Root: root, Tool: "test"}})
	if err != nil {
		t.Fatalf("verify: %v", err)
	}
	return out.Report
}

// longString is n bytes of text that compresses well, distinct per i.
func longString(i, n int) string {
	return strings.Repeat(fmt.Sprintf("chapter %06d. ", i), n/16+1)[:n]
}

// A shard of long documents (1,030 texts of 66 KiB, books or papers)
// verifies: the writer checked its page size only every 1,024 rows, so
// their text was one 66 MiB page, past the 64 MiB page verify reads
// (DECODE_ERROR), and the release could never be VERIFIED. So does a
// text one byte under stage.MaxValueBytes among 1,029 texts of 16 KiB,
// the window of 1,024 rows around it far past a page: the write batch
// shrinks to the one long value, whose page stays under verify's.
func TestStageLongTextsVerify(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name       string
		size, long int
	}{
		{"66KiB", 66 << 10, 66 << 10},
		{"oneUnderMaxValue", 16 << 10, stage.MaxValueBytes - 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rows := make([]stage.Row, 1030)
			for i := range rows {
				n := tc.size
				if i == 517 {
					n = tc.long
				}
				rows[i] = stage.Row{SampleID: fmt.Sprintf("doc-%04d", i), SourceID: "books", SourceVersion: 1, Split: "train", Lang: "en", Text: longString(i, n), Tokens: 1}
			}
			path := filepath.Join(t.TempDir(), "books.parquet")
			writeInput(t, path, rows)
			rows = nil
			s := stagetest.Store(t)
			res, err := stage.Stage(ctx, s, stage.StageOptions{Inputs: []string{path}, Shards: 1, Seed: 1, TempDir: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			if r := verifyStaged(ctx, t, s, res.Root); r.Verdict != manifest.Verified || r.Counts.ShardsVerified != 1 || r.Counts.Records != 1030 {
				t.Fatalf("verdict %s, %d shards verified, %d records, failures %+v; want VERIFIED, 1, 1030", r.Verdict, r.Counts.ShardsVerified, r.Counts.Records, r.Failures)
			}
		})
	}
}

// Source pages past 64 MiB stage. pyarrow and arrow-go write 1,024
// values a page whatever their size, DuckDB pages of up to 100 MB, and a
// page written uncompressed, or of text that barely compresses, is as
// large on disk: arrow-go's reader refused any page past 64 MiB
// compressed, so stage refused such files (BAD_INPUT).
func TestStageReadsInputPagesPast64MiB(t *testing.T) {
	rows := make([]stage.Row, 1030)
	for i := range rows {
		rows[i] = stage.Row{SampleID: fmt.Sprintf("doc-%04d", i), SourceID: "books", SourceVersion: 1, Split: "train", Lang: "en", Text: longString(i, 66<<10), Tokens: 1}
	}
	path := filepath.Join(t.TempDir(), "uncompressed.parquet")
	writeInputCodec(t, path, rows, compress.Codecs.Uncompressed)
	if _, err := stage.Stage(context.Background(), stagetest.Store(t), stage.StageOptions{Inputs: []string{path}, Shards: 2, Seed: 1, TempDir: t.TempDir()}); err != nil {
		t.Fatal(err)
	}
}

// readPages reads every column of data with verify's page bound.
func readPages(t *testing.T, what string, data []byte) {
	t.Helper()
	props := parquet.NewReaderProperties(memory.DefaultAllocator)
	props.MaxCompressedPageSize, props.MaxUncompressedPageSize = canon.MaxPageBytes, canon.MaxPageBytes
	pf, err := file.NewParquetReader(bytes.NewReader(data), file.WithReadProps(props))
	if err != nil {
		t.Fatal(err)
	}
	defer pf.Close()
	fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{}, memory.DefaultAllocator)
	if err != nil {
		t.Fatal(err)
	}
	tbl, err := fr.ReadTable(context.Background())
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	tbl.Release()
}

// Every column's pages stay within the page verify reads, not only the
// content's: long distinct source_ids, whose dictionary page the writer
// checks against its limit only every 1,024 rows too, and long sampleIds
// in a member file (pages of memberPageRows rows).
func TestLongValuesFitVerifyPages(t *testing.T) {
	const n, size = 1030, 66 << 10
	rows := make([]stage.Row, n)
	for i := range rows {
		rows[i] = stage.Row{SampleID: fmt.Sprint(i), SourceID: longString(i, size), SourceVersion: 1, Split: "train", Lang: "en", Text: "t", Tokens: 1}
	}
	rec := stage.BuildRows(rows)
	defer rec.Release()
	data, err := stage.EncodeParquet(rec, stage.DefaultSchema(), stage.ParquetOptions{Codec: "none"})
	if err != nil {
		t.Fatal(err)
	}
	readPages(t, "shard", data)
	data = nil

	ms := canon.SnapshotMemberSchema()
	as, err := canon.ArrowSchema(ms)
	if err != nil {
		t.Fatal(err)
	}
	b := array.NewRecordBuilder(memory.DefaultAllocator, as)
	defer b.Release()
	for i := range n {
		b.Field(0).(*array.StringBuilder).Append(rows[i].SourceID)
		b.Field(1).(*array.StringBuilder).Append("s")
		b.Field(2).(*array.Int64Builder).Append(1)
		b.Field(3).(*array.StringBuilder).Append("train")
		b.Field(4).(*array.BinaryBuilder).Append(make([]byte, 32))
	}
	mrec := b.NewRecordBatch()
	defer mrec.Release()
	data, err = stage.EncodeMemberParquet(mrec, ms, stage.ParquetOptions{Codec: "none"}, make([]uint32, n))
	if err != nil {
		t.Fatal(err)
	}
	readPages(t, "member", data)
}

// A value longer than stage.MaxValueBytes is a page verify refuses even
// alone: stage refuses it (BAD_INPUT naming the file, row and column,
// never the value) before writing anything.
func TestStageRefusesValueLongerThanAPage(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "long.parquet")
	writeInput(t, path, []stage.Row{
		{SampleID: "a", SourceID: "web", SourceVersion: 1, Split: "train", Lang: "en", Text: "short", Tokens: 1},
		{SampleID: "b", SourceID: "web", SourceVersion: 1, Split: "train", Lang: "en", Text: longString(1, stage.MaxValueBytes+1), Tokens: 1},
	})
	s := stagetest.Store(t)
	_, err := stage.Stage(ctx, s, stage.StageOptions{Inputs: []string{path}, Shards: 1, TempDir: t.TempDir()})
	if want := "long.parquet: row 1: text value of 50331645 bytes passes 50331644"; errcode.Of(err) != errcode.BadInput || !strings.Contains(fmt.Sprint(err), want) {
		t.Fatalf("err = %v (code %s), want BAD_INPUT containing %q", err, errcode.Of(err), want)
	}
	if strings.Contains(err.Error(), "chapter") {
		t.Fatalf("err = %v: it quotes the input's text", err)
	}
	if n := countObjects(t, s); n != 0 {
		t.Fatalf("bad input wrote %d objects", n)
	}
	// A value of stage.MaxValueBytes stages, and its release verifies.
	writeInput(t, path, []stage.Row{
		{SampleID: "a", SourceID: "web", SourceVersion: 1, Split: "train", Lang: "en", Text: "short", Tokens: 1},
		{SampleID: "b", SourceID: "web", SourceVersion: 1, Split: "train", Lang: "en", Text: longString(1, stage.MaxValueBytes), Tokens: 1},
	})
	res, err := stage.Stage(ctx, s, stage.StageOptions{Inputs: []string{path}, Shards: 1, TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if r := verifyStaged(ctx, t, s, res.Root); r.Verdict != manifest.Verified {
		t.Fatalf("verdict %s, failures %+v; want VERIFIED", r.Verdict, r.Failures)
	}
}

// A page whose header declares more bytes than its whole file holds, or
// than its file could decompress to, is BAD_INPUT, and the reader does
// not allocate the page first: a 1 KB file declaring a 200 MiB page,
// compressed or uncompressed, made stage allocate 200 MiB (any page up
// to maxInputPageBytes, 256 MiB, was read into a buffer of its declared
// size) before the read failed. Nothing is stored.
func TestStageInputPageLargerThanItsFile(t *testing.T) {
	for _, tc := range []struct {
		name  string
		field int
	}{{"compressed", 3}, {"uncompressed", 2}} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "small.parquet")
			data := craftInput(t, path, twoRows, func(b []byte) []byte { return stagetest.PatchPageSize(t, b, tc.field, 200<<20) })
			if len(data) > 4<<10 {
				t.Fatalf("crafted file is %d bytes, want a small one", len(data))
			}
			s := stagetest.Store(t)
			got, err := stageAllocated(t, s, path)
			if errcode.Of(err) != errcode.BadInput || !strings.Contains(err.Error(), "small.parquet") {
				t.Fatalf("err = %v (code %s), want BAD_INPUT naming the file", err, errcode.Of(err))
			}
			if got > 64<<20 {
				t.Fatalf("staging a %d-byte file allocated %d MiB", len(data), got>>20)
			}
			if n := countObjects(t, s); n != 0 {
				t.Fatalf("bad input wrote %d objects", n)
			}
		})
	}
}
