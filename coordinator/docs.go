package coordinator

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/internal/verifyread"
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/objstore"
)

func readDoc(ctx context.Context, s objstore.Store, d manifest.Digest, what string) ([]byte, error) {
	b, _, err := objstore.ReadBlob(ctx, s, d, manifest.MaxDocumentSize)
	if err != nil {
		return nil, wrap(err, "%s %s", what, d)
	}
	return b, nil
}

func loadRelease(ctx context.Context, s objstore.Store, d manifest.Digest) (*manifest.Release, error) {
	b, err := readDoc(ctx, s, d, "release manifest")
	if err != nil {
		return nil, err
	}
	r, err := manifest.DecodeRelease(b)
	if err != nil {
		return nil, wrap(err, "release manifest %s", d)
	}
	return r, nil
}

func loadSnapshot(ctx context.Context, s objstore.Store, d manifest.Digest) (*manifest.Snapshot, error) {
	b, err := readDoc(ctx, s, d, "snapshot manifest")
	if err != nil {
		return nil, err
	}
	r, err := manifest.DecodeSnapshot(b)
	if err != nil {
		return nil, wrap(err, "snapshot manifest %s", d)
	}
	return r, nil
}

func loadRecordSchema(ctx context.Context, s objstore.Store, d manifest.Digest) (*manifest.RecordSchema, error) {
	b, err := readDoc(ctx, s, d, "record schema")
	if err != nil {
		return nil, err
	}
	r, err := manifest.DecodeRecordSchema(b)
	if err != nil {
		return nil, wrap(err, "record schema %s", d)
	}
	return r, nil
}

func loadFenceLog(ctx context.Context, s objstore.Store, d manifest.Digest, schema string) (*manifest.FenceLog, error) {
	b, err := readDoc(ctx, s, d, schema)
	if err != nil {
		return nil, err
	}
	r, err := manifest.DecodeFenceLog(b, schema)
	if err != nil {
		return nil, wrap(err, "%s %s", schema, d)
	}
	return r, nil
}

// checkClaims refuses fence documents (nil: none) that do not reach the
// watermarks release root claims: a verification against them could not
// count the hits the claims rule out, so its report could not back them
// (WATERMARK_UNCHECKED).
func checkClaims(rel *manifest.Release, root manifest.Digest, tombstones, benchmark *manifest.FenceLog) error {
	var tw, bf uint64
	if tombstones != nil {
		tw = tombstones.Watermark()
	}
	if benchmark != nil {
		bf = benchmark.Watermark()
	}
	if err := rel.CheckWatermarks(tw, bf); err != nil {
		return fmt.Errorf("release %s: %w: verify it against a tombstone log and benchmark registry that reach its claims (--tombstones, --benchmark)", root, err)
	}
	return nil
}

// wrap adds context to err, keeping the code of the cause so the CLI
// prints and exits with it.
func wrap(err error, format string, args ...any) error {
	return errcode.Wrap(errcode.Of(err), err, format, args...)
}

// putExact creates key with data. If key already exists (a retried task),
// its bytes must equal data: a rerun that produced other bytes is
// NONDETERMINISM, and the committed bytes stay as they are.
func putExact(ctx context.Context, s objstore.Store, key string, data []byte) (objstore.Version, error) {
	return putExactSum(ctx, s, key, data, manifest.Sum(data), false)
}

// putExactSum is putExact for data whose sha256 the caller already has;
// ephemeral data is not synced to disk (objstore.PutOptions.Ephemeral).
// Ephemeral data is not given to the store to check either: the sum was
// computed from these very bytes a moment ago, and every reader checks
// it; what the store would check is a copy in the same memory.
func putExactSum(ctx context.Context, s objstore.Store, key string, data []byte, sum manifest.Digest, ephemeral bool) (objstore.Version, error) {
	o := objstore.PutOptions{IfNoneMatch: true, Size: int64(len(data)), SHA256: sum, Ephemeral: ephemeral}
	if ephemeral {
		o.SHA256 = [32]byte{}
	}
	return putExactWith(ctx, s, key, data, o, sum.String(), func(rc io.ReadCloser) io.ReadCloser {
		return verifyread.New(rc, key, sum, int64(len(data)))
	})
}

// putExactWith is putExact for a Put with options o, where an existing
// version is compared with data through check (a reader checking size and
// checksum), sum naming data's checksum in the error.
func putExactWith(ctx context.Context, s objstore.Store, key string, data []byte, o objstore.PutOptions, sum string, check func(io.ReadCloser) io.ReadCloser) (objstore.Version, error) {
	v, err := s.Put(ctx, key, bytes.NewReader(data), o)
	if err == nil {
		return v, nil
	}
	if !objstore.IsPrecondition(err) {
		return "", err
	}
	info, err := s.Head(ctx, key, "")
	if err != nil {
		return "", err
	}
	rc, err := s.Get(ctx, key, info.Version)
	if err != nil {
		return "", err
	}
	defer rc.Close()
	if _, err := io.Copy(io.Discard, check(rc)); err != nil {
		if c := errcode.Of(err); c != errcode.DigestMismatch && c != errcode.SizeMismatch {
			// The read failed (a lost connection, Ctrl-C), not the
			// comparison: nothing is known of the existing bytes.
			if c == errcode.Internal {
				c = errcode.IO
			}
			return "", errcode.Wrap(c, err, "%s: read the existing version %s to compare it with this run's output", key, info.Version)
		}
		return "", errcode.Wrap(errcode.Nondeterminism, err, "%s: existing version %s (size %d) differs from this run's output (size %d, %s); no rerun of this task can commit while it is there (another binary ran the task, or the file was altered): verify again, which plans anew, or remove the job's files and resume",
			key, info.Version, info.Size, len(data), sum)
	}
	return info.Version, nil
}

// readRecord reads and strictly decodes the latest version of a commit
// record into v. found is false when the key does not exist.
func readRecord(ctx context.Context, s objstore.Store, key string, v any) (found bool, err error) {
	b, found, err := readRecordBytes(ctx, s, key, nil)
	if !found || err != nil {
		return found, err
	}
	if err := decodeRecord(b, key, v, nil); err != nil {
		return false, err
	}
	return true, nil
}

// decodeRecord strictly decodes commit record key's bytes b into v, or
// only the elements picks pick (manifest.DecodePicked) when picks is set.
// A fault of the record is SHUFFLE_CORRUPT; an INTERNAL error, a fault of
// this build, is returned as it is (see decodeStrict).
func decodeRecord(b []byte, key string, v any, picks []manifest.Pick) error {
	var err error
	if picks == nil {
		err = decodeStrict(b, v)
	} else {
		err = manifest.DecodePicked(b, v, picks)
	}
	if err == nil || isInternal(err) {
		return err
	}
	return errcode.Wrap(errcode.ShuffleCorrupt, err, "commit record %s", key)
}

// readRecordBytes reads the latest version of a commit record, at most
// manifest.MaxDocumentSize bytes, into buf's room. found is false when
// the key does not exist. A record longer than that is SHUFFLE_CORRUPT,
// damaged as one that does not decode is (a map task's run writes none
// so long: NewPlan gives it no more inputs than its record fits), so
// that its reader runs the task again (redoMap, redoReduce), within the
// bound of runs, rather than failing with DOCUMENT_TOO_LARGE at every
// run of every reader.
func readRecordBytes(ctx context.Context, s objstore.Store, key string, buf []byte) (b []byte, found bool, err error) {
	rc, err := s.Get(ctx, key, "")
	if objstore.IsNotExist(err) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	defer rc.Close()
	if b, err = verifyread.AppendAll(buf[:0], rc, manifest.MaxDocumentSize); err != nil {
		if errcode.Of(err) == errcode.DocumentTooLarge {
			return nil, false, errcode.Wrap(errcode.ShuffleCorrupt, err, "commit record %s", key)
		}
		return nil, false, wrap(err, "%s", key)
	}
	return b, true, nil
}

// decodeStrict decodes one of the coordinator's own documents (a plan, a
// task's commit record, a hold record) as strictly as a manifest
// (manifest.Decode): one JSON value of v's shape, every key an exact,
// unrepeated field name, null only for a list, a map or a nil pointer in a list, UTF-8, strict
// digests. These documents sit in a store other processes write, and
// encoding/json alone reads a commit record with "failures" twice as the
// last, or takes "Outputs" for "outputs", where another reader of the same
// bytes would not: the verdict would depend on the reader.
//
// An INTERNAL error (v's type holds one the scan does not model) is a
// fault of this build, not of the document, and is returned as it is:
// wrapped, it would read as a corrupt record, and a caller would take its
// task for one to run again, or a hold record for another build's.
func decodeStrict(b []byte, v any) error {
	if err := manifest.Decode(b, v); err != nil {
		if isInternal(err) {
			return err
		}
		return errcode.Wrap(errcode.BadDocument, err, "decode")
	}
	return nil
}

// isInternal reports whether err carries the code INTERNAL itself (not
// merely no code).
func isInternal(err error) bool {
	return errors.Is(err, errcode.New(errcode.Internal, ""))
}
