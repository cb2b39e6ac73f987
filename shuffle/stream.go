package shuffle

import (
	"io"
	"slices"
	"strings"

	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/klauspost/compress/zstd"

	"github.com/shardproof/shardproof/internal/errcode"
)

// StreamWriter writes one shuffle file from rows appended in shuffle
// order, a record batch at a time, so a file of any length is written in
// the memory of one batch: what a reducer merging a group of shuffle files
// into one (a merge level) writes with. Each batch carries the dictionary
// of the schema digests its own rows name, ascending (an Arrow IPC stream
// may replace a dictionary between batches; Reader resolves every batch
// against its own). Its files are read as any other; they are not
// byte-identical to what an Encoder writes for the same rows.
type StreamWriter struct {
	zw        *zstd.Encoder
	iw        *ipc.Writer
	batchRows int
	buf       Buffer
	enc       Encoder
	// prev is the last row appended, its sampleId owned, to check order.
	prev    Row
	hasPrev bool
	rows    int64
	err     error
}

// NewStreamWriter starts a shuffle file written to w with compression c
// and batchRows rows per record batch (zero: BatchRows).
func NewStreamWriter(w io.Writer, c Compression, batchRows int) (*StreamWriter, error) {
	if !c.Valid() {
		return nil, errcode.New(errcode.Internal, "shuffle: unknown compression %q", c)
	}
	if batchRows <= 0 {
		batchRows = BatchRows
	}
	if batchRows > MaxBatchRows {
		return nil, errcode.New(errcode.Internal, "shuffle: %d rows per batch, at most %d", batchRows, MaxBatchRows)
	}
	s := &StreamWriter{batchRows: batchRows}
	if c != None {
		zw, err := newEncoder(w)
		if err != nil {
			return nil, errcode.Wrap(errcode.Internal, err, "shuffle: zstd")
		}
		s.zw, w = zw, zw
	}
	s.iw = ipc.NewWriter(w, ipc.WithSchema(Schema), ipc.WithAllocator(memory.DefaultAllocator))
	return s, nil
}

// Append adds r, which must not come before the last row appended in
// shuffle order.
func (s *StreamWriter) Append(r *Row) error {
	if s.err != nil {
		return s.err
	}
	if s.hasPrev && Compare(&s.prev, r) > 0 {
		s.err = errcode.New(errcode.Internal, "shuffle: stream rows out of order at row %d (bucket %d after %d)", s.rows, r.Bucket, s.prev.Bucket)
		return s.err
	}
	s.buf.Append(r)
	s.rows++
	if s.buf.Len() >= s.batchRows {
		return s.flush()
	}
	// The buffer's last row: its strings stay valid until the next
	// flush, which keeps an owned copy.
	s.prev, s.hasPrev = s.buf.Row(s.buf.Len()-1), true
	return nil
}

// Rows returns the number of rows appended.
func (s *StreamWriter) Rows() int64 { return s.rows }

// flush writes the buffered rows as one record batch.
func (s *StreamWriter) flush() error {
	n := s.buf.Len()
	if n == 0 {
		return nil
	}
	last := s.buf.Row(n - 1)
	last.SampleID = strings.Clone(last.SampleID)
	e := &s.enc
	e.order = slices.Grow(e.order[:0], n)[:n]
	for i := range e.order {
		e.order[i] = sortKey{row: i}
	}
	// Fresh memory for every batch's dictionary: the IPC writer keeps
	// the last one it wrote to compare with the next, and would find a
	// reused buffer equal to itself and not write the new one.
	e.dict.bytes = nil
	e.dict.build(&s.buf, e.order)
	rec, err := s.buf.gather(&e.batch, &e.dict, e.order)
	if err == nil {
		err = s.iw.Write(rec)
		rec.Release()
		if err != nil {
			err = errcode.Wrap(errcode.IO, err, "shuffle: write batch")
		}
	}
	e.dict.values.Release()
	if err != nil {
		s.err = err
		return err
	}
	s.buf.Reset()
	s.prev, s.hasPrev = last, true
	return nil
}

// Close writes what is buffered and ends the file; it does not close the
// underlying writer.
func (s *StreamWriter) Close() error {
	if s.err != nil {
		s.iw.Close()
		if s.zw != nil {
			s.zw.Close()
		}
		return s.err
	}
	err := s.flush()
	if cerr := s.iw.Close(); err == nil && cerr != nil {
		err = errcode.Wrap(errcode.IO, cerr, "shuffle: close")
	}
	if s.zw != nil {
		if zerr := s.zw.Close(); err == nil && zerr != nil {
			err = errcode.Wrap(errcode.IO, zerr, "shuffle: zstd")
		}
	}
	s.err = errcode.New(errcode.Internal, "shuffle: stream writer closed")
	return err
}
