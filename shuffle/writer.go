package shuffle

import (
	"io"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/shardproof/shardproof/internal/errcode"
)

// BatchRows is the number of rows per record batch. Batch boundaries are
// part of the bytes, so it is a format constant, not a tuning knob: changing
// it changes every shuffle file and breaks byte-identical reruns across
// versions.
const BatchRows = 4096

// Write encodes rows as one shuffle file. rows MUST already be in shuffle
// order (see Sort); Write returns an error rather than silently writing a
// file a reducer would reject. The output depends only on rows.
func Write(w io.Writer, rows []Row) error {
	for i := 1; i < len(rows); i++ {
		if Compare(&rows[i-1], &rows[i]) > 0 {
			return errcode.New(errcode.Internal, "shuffle: rows not sorted at index %d", i)
		}
	}
	mem := memory.NewGoAllocator()
	// Concurrency 1 keeps the compressed bytes independent of GOMAXPROCS.
	iw := ipc.NewWriter(w, ipc.WithSchema(Schema), ipc.WithAllocator(mem), ipc.WithZstd(), ipc.WithCompressConcurrency(1))
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
