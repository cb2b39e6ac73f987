package shuffle

import (
	"bytes"
	"testing"

	"github.com/shardproof/shardproof/internal/errcode"
)

// A StreamWriter's file reads back as the rows appended, whatever the
// batch size: batches of one row, of a few (whose dictionaries of schema
// digests change from batch to batch), of many; compressed or not; and
// an empty file reads as no rows.
func TestStreamWriterRoundTrip(t *testing.T) {
	rows := makeRows(3000)
	for _, c := range []Compression{None, Zstd} {
		for _, n := range []int{1, 7, 256, MaxBatchRows} {
			for _, rs := range [][]Row{rows, nil} {
				var buf bytes.Buffer
				w, err := NewStreamWriter(&buf, c, n)
				if err != nil {
					t.Fatal(err)
				}
				for i := range rs {
					if err := w.Append(&rs[i]); err != nil {
						t.Fatalf("%s, %d rows per batch: append %d: %v", c, n, i, err)
					}
				}
				if err := w.Close(); err != nil {
					t.Fatal(err)
				}
				if w.Rows() != int64(len(rs)) {
					t.Fatalf("Rows() = %d, want %d", w.Rows(), len(rs))
				}
				got, _, err := readAllCompression(buf.Bytes(), c, 0, 1<<testK)
				if err != nil {
					t.Fatalf("%s, %d rows per batch: read back: %v", c, n, err)
				}
				if len(got) != len(rs) {
					t.Fatalf("%s, %d rows per batch: read %d rows, wrote %d", c, n, len(got), len(rs))
				}
				for i := range rs {
					if got[i] != rs[i] {
						t.Fatalf("%s, %d rows per batch: row %d reads back as %+v, wrote %+v", c, n, i, got[i], rs[i])
					}
				}
			}
		}
	}
}

// A row out of shuffle order is refused, across a batch boundary too, and
// the file is not completed.
func TestStreamWriterRejectsUnsorted(t *testing.T) {
	rows := makeRows(20)
	for _, n := range []int{1, 4, 256} {
		var buf bytes.Buffer
		w, err := NewStreamWriter(&buf, None, n)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 10 {
			if err := w.Append(&rows[i]); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Append(&rows[3]); errcode.Of(err) != errcode.Internal {
			t.Fatalf("%d rows per batch: out-of-order append: %v", n, err)
		}
		if err := w.Close(); errcode.Of(err) != errcode.Internal {
			t.Fatalf("%d rows per batch: Close after a refused row: %v", n, err)
		}
	}
}

// BenchmarkStreamWriter is a reduce task's merge level writing one merged
// file: rows appended in shuffle order, 1,024 per batch, uncompressed
// (the local executor's shuffle).
func BenchmarkStreamWriter(b *testing.B) {
	rows := makeRows(32768)
	var buf bytes.Buffer
	b.ReportAllocs()
	for b.Loop() {
		buf.Reset()
		w, err := NewStreamWriter(&buf, None, 1024)
		if err != nil {
			b.Fatal(err)
		}
		for i := range rows {
			if err := w.Append(&rows[i]); err != nil {
				b.Fatal(err)
			}
		}
		if err := w.Close(); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(int64(buf.Len()))
}
