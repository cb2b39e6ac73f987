package objstore

import (
	"context"
	"crypto/sha256"
	"fmt"
	"hash"
	"io"
	"log/slog"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/internal/verifyread"
)

// CreateOrMatch is a conditional create (Put with opts.IfNoneMatch set)
// that also succeeds when key's latest version holds exactly the bytes
// of body. A create whose answer was lost (the server stored the object,
// then the connection dropped) and that was sent again, by the S3 SDK's
// retryer or by a caller running the same command again, meets the
// object it wrote itself and is refused with ErrPreconditionFailed. On
// that refusal CreateOrMatch reads the rest of body, so that it has the
// sha256 and size of every byte the caller meant to write (no further
// than one byte past the stored size), and compares them with key's
// latest version, read back through verifyread: equal, it returns that
// version with created=false, and writes nothing. A body that does not
// hash to opts.SHA256, when given, is a *verifyread.DigestMismatchError
// as Put would return, whatever the key holds. Other bytes, or no
// latest version (an S3 delete marker on top), leave the refusal as it
// was. Callers that hold their bytes and compare them themselves
// (PutBlob, the coordinator's commit records) need not use it.
func CreateOrMatch(ctx context.Context, s Store, key string, body io.Reader, opts PutOptions) (v Version, created bool, err error) {
	opts.IfNoneMatch = true
	hr := &hashReader{r: body, h: sha256.New()}
	v, err = s.Put(ctx, key, hr, opts)
	if err == nil || !IsPrecondition(err) {
		return v, err == nil, err
	}
	refused := err
	info, err := s.Head(ctx, key, "")
	if IsNotExist(err) {
		return "", false, refused
	}
	if err != nil {
		return "", false, err
	}
	if opts.Size > 0 && opts.Size != info.Size {
		return "", false, refused
	}
	if hr.n <= info.Size {
		if _, err := io.Copy(io.Discard, io.LimitReader(ContextReader(ctx, hr), info.Size-hr.n+1)); err != nil {
			if errcode.Of(err) == errcode.Internal {
				err = errcode.Wrap(errcode.IO, err, "put %s: read body", key)
			}
			return "", false, err
		}
	}
	if hr.n != info.Size {
		return "", false, refused
	}
	var sum [32]byte
	hr.h.Sum(sum[:0])
	if opts.SHA256 != ([32]byte{}) && sum != opts.SHA256 {
		// Put refuses such a body once it has read it; a refusal that
		// came before (a store failing fast on an existing key) must
		// not make it a match.
		return "", false, &verifyread.DigestMismatchError{Key: key, Want: opts.SHA256, Got: sum}
	}
	rc, err := s.Get(ctx, key, info.Version)
	if err != nil {
		return "", false, err
	}
	defer rc.Close()
	if _, err := io.Copy(io.Discard, verifyread.New(rc, key, sum, info.Size)); err != nil {
		switch errcode.Of(err) {
		case errcode.DigestMismatch, errcode.SizeMismatch:
			return "", false, refused
		}
		return "", false, fmt.Errorf("put %s: read back version %s: %w", key, info.Version, err)
	}
	slog.Info("conditional create: the key already holds these very bytes (a create whose answer was lost, sent again); its version is the create's",
		"key", key, "version", string(info.Version), "sha256", fmt.Sprintf("%x", sum), "size", info.Size)
	return info.Version, false, nil
}

// hashReader hashes and counts what is read through it.
type hashReader struct {
	r io.Reader
	h hash.Hash
	n int64
}

func (h *hashReader) Read(p []byte) (int, error) {
	n, err := h.r.Read(p)
	h.h.Write(p[:n])
	h.n += int64(n)
	return n, err
}
