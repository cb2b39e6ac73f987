package stage

import (
	"context"
	"encoding/binary"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/file"

	filestore "github.com/shardproof/shardproof/objstore/file"
)

// duckRows are the rows of testdata/duckdb-v1.parquet and
// testdata/duckdb-v2.parquet: DuckDB (duckdb-go v2.10506.0, the bench
// module's) wrote them from these rows written by arrow-go, with
//
//	COPY (SELECT * FROM read_parquet('rows.parquet')) TO 'duckdb-v2.parquet'
//	  (FORMAT parquet, COMPRESSION zstd, ROW_GROUP_SIZE 100000, PARQUET_VERSION V2)
//	COPY (SELECT * FROM read_parquet('rows.parquet')) TO 'duckdb-v1.parquet'
//	  (FORMAT parquet, COMPRESSION zstd, ROW_GROUP_SIZE 2048, PARQUET_VERSION V1)
func duckRows() []Row {
	rows := make([]Row, 3000)
	for i := range rows {
		h := uint64(i+1) * 0x9e3779b97f4a7c15
		text := fmt.Sprintf("row %d %x", i, h)[:4+i%17]
		if i%50 == 0 {
			text = strings.Repeat("long text ", 20+i%90)
		}
		rows[i] = Row{
			SampleID: fmt.Sprintf("duck-%05d", (i*2903)%len(rows)), SourceID: fmt.Sprintf("src-%d", i%7),
			SourceVersion: int64(h >> (i % 64)), Split: []string{"train", "val", "test"}[i%3],
			Lang: []string{"en", "", "zh", "de"}[i%4], Text: text, Tokens: int64(h % 1000003),
		}
	}
	return rows
}

// Files DuckDB wrote stage to the release of the same rows written by
// arrow-go: its columns are optional (RLE definition levels before every
// v1 page's values), its row groups 2,048 rows, and with PARQUET_VERSION
// V2 its v1 pages hold DELTA_BINARY_PACKED in blocks of 2,048 values of
// 8 miniblocks (arrow-go and parquet-go write 128 and 4) and
// DELTA_LENGTH_BYTE_ARRAY, which checkedPages walks past the levels
// before the decoders read them.
func TestStageDuckDBInputs(t *testing.T) {
	rec := BuildRows(duckRows())
	defer rec.Release()
	stage := func(path string) Result {
		t.Helper()
		s, err := filestore.Open(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		res, err := Stage(context.Background(), s, StageOptions{Inputs: []string{path}, Shards: 3, Seed: 5, TempDir: t.TempDir()})
		if err != nil {
			t.Fatalf("%s: %v", filepath.Base(path), err)
		}
		return res
	}
	want := stage(writeInputFile(t, filepath.Join(t.TempDir(), "plain.parquet"), rec, parquet.NewWriterProperties(parquet.WithDictionaryDefault(false))))

	E := parquet.Encodings
	for _, tc := range []struct {
		file      string
		rowGroups int
		encodings []parquet.Encoding
		delta     [2]uint64 // source_version's block values and miniblocks
	}{
		{"duckdb-v1.parquet", 2, []parquet.Encoding{E.Plain, E.PlainDict}, [2]uint64{}},
		{"duckdb-v2.parquet", 1, []parquet.Encoding{E.DeltaBinaryPacked, E.DeltaLengthByteArray, E.RLEDict}, [2]uint64{2048, 8}},
	} {
		path := filepath.Join("testdata", tc.file)
		pf, err := file.OpenParquetFile(path, false)
		if err != nil {
			t.Fatal(err)
		}
		md := pf.MetaData()
		if n := md.NumRowGroups(); n != tc.rowGroups {
			t.Errorf("%s: %d row groups, want %d", tc.file, n, tc.rowGroups)
		}
		var encs []parquet.Encoding
		for g := range md.NumRowGroups() {
			for c := range md.Schema.NumColumns() {
				if md.Schema.Column(c).MaxDefinitionLevel() != 1 {
					t.Errorf("%s: column %s is not optional", tc.file, md.Schema.Column(c).Name())
				}
				cc, err := md.RowGroup(g).ColumnChunk(c)
				if err != nil {
					t.Fatal(err)
				}
				encs = append(encs, cc.Encodings()...)
			}
		}
		for _, e := range tc.encodings {
			if !slices.Contains(encs, e) {
				t.Errorf("%s: no column chunk encoded %s (%v)", tc.file, e, encs)
			}
		}
		if tc.delta[0] != 0 {
			rg := pf.RowGroup(0)
			pr, err := rg.GetColumnPageReader(md.Schema.ColumnIndexByName("source_version"))
			if err != nil {
				t.Fatal(err)
			}
			var got [2]uint64
			for pr.Next() {
				if pg, ok := pr.Page().(*file.DataPageV1); ok && parquet.Encoding(pg.Encoding()) == E.DeltaBinaryPacked {
					// The definition levels, RLE after their length.
					data := pg.Data()
					data = data[4+binary.LittleEndian.Uint32(data):]
					block, k := binary.Uvarint(data)
					minis, _ := binary.Uvarint(data[k:])
					got = [2]uint64{block, minis}
					break
				}
			}
			if got != tc.delta {
				t.Errorf("%s: source_version's first delta page has blocks of %d values in %d miniblocks, want %d in %d", tc.file, got[0], got[1], tc.delta[0], tc.delta[1])
			}
		}
		pf.Close()
		if got := stage(path); got.Root != want.Root {
			t.Errorf("%s: root %s, arrow-go's plain input %s", tc.file, got.Root, want.Root)
		}
	}
}
