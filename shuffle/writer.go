package shuffle

import (
	"bytes"
	"io"
	"sync"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/klauspost/compress/zstd"

	"github.com/shardproof/shardproof/internal/errcode"
)

// BatchRows is the number of rows per record batch. Batch boundaries are
// part of the bytes, so it is a format constant, not a tuning knob: changing
// it changes every shuffle file and breaks byte-identical reruns across
// versions.
const BatchRows = 256

// encoder is shared by every Write: EncodeAll is safe for concurrent use,
// single-threaded (so the bytes do not depend on GOMAXPROCS) and reuses its
// state, where a fresh encoder costs milliseconds to set up.
var encoder = sync.OnceValue(func() *zstd.Encoder {
	e, err := zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1), zstd.WithEncoderLevel(zstd.SpeedFastest),
		zstd.WithEncoderCRC(true), zstd.WithWindowSize(maxWindow), zstd.WithSingleSegment(false))
	if err != nil {
		panic(err) // only on invalid options, which are constants
	}
	return e
})

// maxWindow is the zstd window, and single-segment frames are off: together
// they bound what a reader holds per open file to the window plus one
// batch, whatever the file's size. A reducer merges one file per map task,
// so this per-file figure, times the fan-in, is its memory: with a larger
// window (or a single-segment frame, which EncodeAll picks for inputs below
// the window) every reader held its whole decompressed file and verify's
// peak RSS grew with the release.
const maxWindow = 64 << 10

// Write encodes rows as one shuffle file: an uncompressed Arrow IPC stream,
// compressed as a whole into one zstd frame. rows MUST already be in
// shuffle order (see Sort); Write returns an error rather than silently
// writing a file a reducer would reject. The output depends only on rows.
func Write(w io.Writer, rows []Row) error {
	for i := 1; i < len(rows); i++ {
		if Compare(&rows[i-1], &rows[i]) > 0 {
			return errcode.New(errcode.Internal, "shuffle: rows not sorted at index %d", i)
		}
	}
	size := 1024
	for i := range rows {
		size += 128 + len(rows[i].SampleID) + len(rows[i].SourceID) + len(rows[i].Split)
	}
	raw := bytes.NewBuffer(make([]byte, 0, size))
	if err := writeIPC(raw, rows); err != nil {
		return err
	}
	if _, err := w.Write(encoder().EncodeAll(raw.Bytes(), make([]byte, 0, raw.Len()/2))); err != nil {
		return errcode.Wrap(errcode.IO, err, "shuffle: write")
	}
	return nil
}

func writeIPC(w io.Writer, rows []Row) error {
	mem := memory.NewGoAllocator()
	iw := ipc.NewWriter(w, ipc.WithSchema(Schema), ipc.WithAllocator(mem))
	b := array.NewRecordBuilder(mem, Schema)
	defer b.Release()
	for start := 0; start < len(rows); start += BatchRows {
		end := min(start+BatchRows, len(rows))
		rec := buildBatch(b, rows[start:end])
		err := iw.Write(rec)
		rec.Release()
		if err != nil {
			iw.Close()
			return errcode.Wrap(errcode.IO, err, "shuffle: write batch")
		}
	}
	if err := iw.Close(); err != nil {
		return errcode.Wrap(errcode.IO, err, "shuffle: close")
	}
	return nil
}

func buildBatch(b *array.RecordBuilder, rows []Row) arrow.RecordBatch {
	bucket := b.Field(0).(*array.Uint32Builder)
	side := b.Field(1).(*array.Uint8Builder)
	sample := b.Field(2).(*array.StringBuilder)
	source := b.Field(3).(*array.StringBuilder)
	version := b.Field(4).(*array.Int64Builder)
	content := b.Field(5).(*array.FixedSizeBinaryBuilder)
	split := b.Field(6).(*array.StringBuilder)
	schema := b.Field(7).(*array.FixedSizeBinaryBuilder)
	tuple := b.Field(8).(*array.FixedSizeBinaryBuilder)
	for i := range rows {
		r := &rows[i]
		bucket.Append(r.Bucket)
		side.Append(uint8(r.Side))
		sample.Append(r.SampleID)
		source.Append(r.SourceID)
		version.Append(r.SourceVersion)
		content.Append(r.ContentDigest[:])
		split.Append(r.Split)
		schema.Append(r.SchemaDigest[:])
		tuple.Append(r.TupleDigest[:])
	}
	return b.NewRecordBatch()
}
