package shuffle

import (
	"io"

	"github.com/klauspost/compress/zstd"

	"github.com/shardproof/shardproof/internal/errcode"
)

// BatchRows is the number of rows per record batch of an Encoder that is
// not told (and of a plan without shuffleBatchRows). Batch boundaries are
// part of the bytes, so a job's plan fixes the number for all its tasks:
// the same rows always give the same file.
const BatchRows = 256

// MaxBatchRows is the most rows per record batch an Encoder writes.
const MaxBatchRows = 1 << 14

// newEncoder returns the shuffle files' zstd writer: single-threaded, so
// the bytes do not depend on GOMAXPROCS, with a checksum and the window
// below. A Buffer keeps its encoder and resets it for every file, since a
// fresh one costs milliseconds to set up.
func newEncoder(w io.Writer) (*zstd.Encoder, error) {
	return zstd.NewWriter(w, zstd.WithEncoderConcurrency(1), zstd.WithEncoderLevel(zstd.SpeedFastest),
		zstd.WithEncoderCRC(true), zstd.WithWindowSize(maxWindow), zstd.WithSingleSegment(false))
}

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
// writing a file a reducer would reject. The output depends only on rows,
// and equals what a Buffer holding the same rows writes.
func Write(w io.Writer, rows []Row) error {
	for i := 1; i < len(rows); i++ {
		if Compare(&rows[i-1], &rows[i]) > 0 {
			return errcode.New(errcode.Internal, "shuffle: rows not sorted at index %d", i)
		}
	}
	var b Buffer
	for i := range rows {
		b.Append(&rows[i])
	}
	_, err := b.WriteTo(w)
	return err
}
