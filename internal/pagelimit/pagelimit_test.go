package pagelimit_test

import (
	"bytes"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/shardproof/shardproof/internal/depcheck"
	"github.com/shardproof/shardproof/internal/pagelimit"
	"github.com/shardproof/shardproof/stage"
	"github.com/shardproof/shardproof/stage/stagetest"
)

func TestImports(t *testing.T) {
	depcheck.AssertImports(t, "github.com/apache/arrow-go/v18/parquet/compress", "github.com/apache/arrow-go/v18/parquet/metadata")
}

// A chunk's pages hold at most its bytes, and decompress to at most its
// codec's expansion of them; both at least 1 and at most the limit, a
// codec of no bound the limit, and no product wraps.
func TestChunk(t *testing.T) {
	const limit = 64 << 20
	for _, tc := range []struct {
		name                     string
		codec                    compress.Compression
		n, limit                 int64
		compressed, uncompressed int64
	}{
		{"uncompressed", compress.Codecs.Uncompressed, 100, limit, 100, 100},
		{"snappy", compress.Codecs.Snappy, 100, limit, 100, 3200},
		{"gzip", compress.Codecs.Gzip, 100, limit, 100, 204_800},
		{"zstd", compress.Codecs.Zstd, 148, limit, 148, 148 << 16},
		{"zstd past the limit", compress.Codecs.Zstd, 2 << 10, limit, 2 << 10, limit},
		{"brotli", compress.Codecs.Brotli, 100, limit, 100, limit},
		{"chunk past the limit", compress.Codecs.Uncompressed, limit + 1, limit, limit, limit},
		{"empty", compress.Codecs.Zstd, 0, limit, 1, 1},
		{"negative", compress.Codecs.Zstd, -5, limit, 1, 1},
		{"no wrap", compress.Codecs.Zstd, 1 << 50, 1 << 62, 1 << 50, 1 << 62},
	} {
		c, u := pagelimit.Chunk(tc.codec, tc.n, tc.limit)
		if c != tc.compressed || u != tc.uncompressed {
			t.Errorf("%s: Chunk(%s, %d, %d) = %d, %d; want %d, %d", tc.name, tc.codec, tc.n, tc.limit, c, u, tc.compressed, tc.uncompressed)
		}
	}
}

// File's bounds are its largest chunk's, each chunk taken as at most the
// size given, and the file reads within them.
func TestFile(t *testing.T) {
	rows := []stage.Row{{SampleID: "a", SourceID: "web", SourceVersion: 1, Split: "train", Lang: "en", Text: "one", Tokens: 1}}
	for _, codec := range []string{"none", "snappy", "zstd"} {
		data := stagetest.Encode(t, rows, stage.ParquetOptions{Codec: codec})
		pf, err := file.NewParquetReader(bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		md := pf.MetaData()
		var largest int64
		for g := range md.NumRowGroups() {
			for c := range md.RowGroup(g).NumColumns() {
				cc, err := md.RowGroup(g).ColumnChunk(c)
				if err != nil {
					t.Fatal(err)
				}
				largest = max(largest, cc.TotalCompressedSize())
			}
		}
		pf.Close()
		cc, _ := md.RowGroup(0).ColumnChunk(0)
		wc, wu := pagelimit.Chunk(cc.Compression(), largest, 1<<40)
		if c, u := pagelimit.File(md, int64(len(data)), 1<<40); c != wc || u != wu {
			t.Errorf("%s: File = %d, %d; want the largest chunk's (%d bytes) %d, %d", codec, c, u, largest, wc, wu)
		}
		if c, u := pagelimit.File(md, 10, 1<<40); c != 10 {
			t.Errorf("%s: File of chunks taken as 10 bytes = %d, %d", codec, c, u)
		}
		props := parquet.NewReaderProperties(memory.DefaultAllocator)
		props.MaxCompressedPageSize, props.MaxUncompressedPageSize = pagelimit.File(md, int64(len(data)), 1<<40)
		pf, err = file.NewParquetReader(bytes.NewReader(data), file.WithReadProps(props))
		if err != nil {
			t.Fatal(err)
		}
		fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{}, memory.DefaultAllocator)
		if err != nil {
			t.Fatal(err)
		}
		tbl, err := fr.ReadTable(t.Context())
		if err != nil || tbl.NumRows() != 1 {
			t.Fatalf("%s: read with File's bounds: %v", codec, err)
		}
		tbl.Release()
		pf.Close()
	}
}
