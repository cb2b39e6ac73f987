package stage

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
)

// An input is read in batches of at most inputBatchBytes decoded, so
// long texts are not read 8192 rows at a time; short rows still are.
func TestInputBatchesBoundedByBytes(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, n, textLen int) string {
		rows := make([]Row, n)
		for i := range rows {
			rows[i] = Row{SampleID: "s" + strconv.Itoa(i), SourceID: "web", Split: "train", Lang: "en", Text: strings.Repeat("x", textLen), Tokens: 1}
		}
		rec := BuildRows(rows)
		defer rec.Release()
		b, err := EncodeParquet(rec, DefaultSchema(), ParquetOptions{RowGroupRows: 10000})
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	batches := func(p string) (largest, total int) {
		src, err := openInputs(context.Background(), []string{p})
		if err != nil {
			t.Fatal(err)
		}
		err = openFile(p, func(fr *pqarrow.FileReader) error {
			return eachBatch(context.Background(), fr, p, src.inputs[0].cols, func(rec arrow.RecordBatch) error {
				largest = max(largest, int(rec.NumRows()))
				total += int(rec.NumRows())
				return nil
			})
		})
		if err != nil {
			t.Fatal(err)
		}
		return largest, total
	}
	// 8-byte texts: one batch of 9000 would do; 8192 is the most.
	short := write("short.parquet", 9000, 8)

	old := inputBatchBytes
	inputBatchBytes = 256 << 10
	defer func() { inputBatchBytes = old }()
	// 4 KiB texts: at most 64 rows a batch, every row read.
	if largest, total := batches(write("long.parquet", 600, 4<<10)); largest > 64 || total != 600 {
		t.Fatalf("4 KiB rows: batches of up to %d rows, %d rows in all; want at most 64, 600", largest, total)
	}
	inputBatchBytes = old
	if largest, total := batches(short); largest != maxInputBatchRows || total != 9000 {
		t.Fatalf("short rows: batches of up to %d rows, %d rows in all; want %d, 9000", largest, total, maxInputBatchRows)
	}
}
