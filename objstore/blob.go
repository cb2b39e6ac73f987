package objstore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/internal/verifyread"
)

// BlobPrefix is where content-addressed bytes live: shards, manifests and
// reports, each at BlobPrefix + hex(sha256(bytes)).
const BlobPrefix = "blobs/sha256/"

// BlobKey returns the key of the content-addressed bytes whose sha256 is d.
// It equals manifest.Digest.BlobKey for the same digest.
func BlobKey(d [32]byte) string { return BlobPrefix + hex.EncodeToString(d[:]) }

// PutBlob stores data at BlobKey(sha256(data)) with a conditional create.
// If the key already exists, the existing latest version is read back
// through verifyread and must hash to the same digest: then PutBlob returns
// that version with created=false and writes nothing (staging twice is a
// no-op). Existing bytes that do not match are a *verifyread.DigestMismatchError
// or *verifyread.SizeMismatchError: the store is corrupt at that key. A
// key whose latest version is an S3 delete marker gets the blob as a new
// latest version (created=true), as AWS's conditional create would do.
func PutBlob(ctx context.Context, s Store, data []byte) (digest [32]byte, v Version, created bool, err error) {
	digest = sha256.Sum256(data)
	v, created, err = putBlob(ctx, s, digest, int64(len(data)), func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	})
	return digest, v, created, err
}

// PutBlobFile is PutBlob for a file too large to hold in memory: it hashes
// the file first, then streams it into a conditional create carrying the
// digest (PutOptions.SHA256), so a file that changes between the two reads
// is rejected rather than stored under the wrong key. size is the number of
// bytes hashed and stored.
func PutBlobFile(ctx context.Context, s Store, path string) (digest [32]byte, size int64, v Version, created bool, err error) {
	f, err := os.Open(path)
	if err != nil {
		return digest, 0, "", false, errcode.Wrap(errcode.IO, err, "open %s", path)
	}
	h := sha256.New()
	size, err = io.Copy(h, ContextReader(ctx, f))
	f.Close()
	if err != nil {
		return digest, 0, "", false, errcode.Wrap(errcode.Of(err), err, "hash %s", path)
	}
	h.Sum(digest[:0])
	v, created, err = putBlob(ctx, s, digest, size, func() (io.ReadCloser, error) {
		f, err := os.Open(path)
		if err != nil {
			return nil, errcode.Wrap(errcode.IO, err, "open %s", path)
		}
		return f, nil
	})
	return digest, size, v, created, err
}

func putBlob(ctx context.Context, s Store, digest [32]byte, size int64, body func() (io.ReadCloser, error)) (Version, bool, error) {
	key := BlobKey(digest)
	rc, err := body()
	if err != nil {
		return "", false, err
	}
	v, err := s.Put(ctx, key, rc, PutOptions{IfNoneMatch: true, Size: size, SHA256: digest})
	rc.Close()
	if err == nil {
		return v, true, nil
	}
	if !errors.Is(err, ErrPreconditionFailed) {
		return "", false, err
	}
	info, err := s.Head(ctx, key, "")
	if IsNotExist(err) {
		// Refused, yet the key has no latest version: an S3 delete
		// marker on top (an "aws s3 rm", an expiry rule). versitygw
		// refuses to create over one, AWS does not. The blob becomes
		// the key's latest version again, as on AWS: only its own bytes
		// can, since the store checks them against the digest.
		slog.Warn("a blob's key has a delete marker on top; storing the blob again", "key", key)
		rc, err := body()
		if err != nil {
			return "", false, err
		}
		defer rc.Close()
		v, err := s.Put(ctx, key, rc, PutOptions{Size: size, SHA256: digest})
		if err != nil {
			return "", false, err
		}
		return v, true, nil
	}
	if err != nil {
		return "", false, err
	}
	r, err := GetBlob(ctx, s, digest, info.Version, size)
	if err != nil {
		return "", false, err
	}
	defer r.Close()
	if _, err := io.Copy(io.Discard, r); err != nil {
		return "", false, fmt.Errorf("existing %s version %s: %w", key, info.Version, err)
	}
	return info.Version, false, nil
}

// GetBlob opens version v of the blob with digest d, expected to be size
// bytes long. Every byte passes through verifyread: the reader never yields
// more than size bytes and fails at EOF unless exactly size bytes hashing to
// d were read. Callers MUST read to EOF before trusting the bytes.
func GetBlob(ctx context.Context, s Store, d [32]byte, v Version, size int64) (io.ReadCloser, error) {
	key := BlobKey(d)
	rc, err := s.Get(ctx, key, v)
	if err != nil {
		return nil, err
	}
	return verifyread.New(rc, key, d, size), nil
}

// ReadBlob reads the blob with digest d, at most max bytes, and checks
// its digest. It is for documents (manifests, reports) whose size is not
// known in advance; a blob larger than max fails with DOCUMENT_TOO_LARGE
// without reading past max+1 bytes.
//
// It reads the latest version. A blob is created once, by conditional
// create, and never rewritten; but a version written on top of it out of
// band (an overwrite, or an S3 delete marker) would hide it. So when the
// latest version is missing or does not hash to d, and s can list a key's
// versions (VersionLister), ReadBlob tries the older ones, newest first
// and at most MaxBlobVersions of them, and returns the first whose bytes
// hash to d, logging the anomaly. Otherwise it fails with the latest
// version's error.
func ReadBlob(ctx context.Context, s Store, d [32]byte, max int64) ([]byte, Version, error) {
	data, v, err := readBlobVersion(ctx, s, d, "", max)
	if err == nil || !hidden(err) {
		return data, v, err
	}
	vl, ok := s.(VersionLister)
	if !ok {
		return nil, "", err
	}
	key := BlobKey(d)
	vs, lerr := vl.Versions(ctx, key, MaxBlobVersions)
	if lerr != nil {
		return nil, "", err
	}
	for _, info := range vs {
		if info.Version == v {
			continue
		}
		if data, got, verr := readBlobVersion(ctx, s, d, info.Version, max); verr == nil {
			slog.Warn("a blob's latest version is not its bytes; an older version is",
				"key", key, "version", string(got), "code", errcode.Of(err))
			return data, got, nil
		}
	}
	return nil, "", err
}

// MaxBlobVersions bounds the versions ReadBlob tries when the latest one
// is not the blob.
const MaxBlobVersions = 64

// hidden reports whether err may mean the blob's latest version hides
// the blob: a delete marker, or other bytes on top of it.
func hidden(err error) bool {
	switch errcode.Of(err) {
	case errcode.DigestMismatch, errcode.SizeMismatch, errcode.DocumentTooLarge:
		return true
	}
	return IsNotExist(err)
}

// readBlobVersion reads version v of the blob with digest d ("" the
// latest), at most max bytes, and checks its digest.
func readBlobVersion(ctx context.Context, s Store, d [32]byte, v Version, max int64) ([]byte, Version, error) {
	key := BlobKey(d)
	info, err := s.Head(ctx, key, v)
	if err != nil {
		return nil, "", err
	}
	if info.Size > max {
		return nil, info.Version, fmt.Errorf("%s: stored size=%d: %w", key, info.Size, &verifyread.TooLargeError{Max: max})
	}
	r, err := GetBlob(ctx, s, d, info.Version, info.Size)
	if err != nil {
		return nil, info.Version, err
	}
	defer r.Close()
	data, err := verifyread.ReadAll(r, max)
	if err != nil {
		return nil, info.Version, err
	}
	return data, info.Version, nil
}

// ContextReader returns a reader of r whose reads fail with code CANCELED
// once ctx is done, so a long copy stops promptly. Implementations wrap Put
// bodies with it.
func ContextReader(ctx context.Context, r io.Reader) io.Reader { return ctxReader{ctx, r} }

type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, errcode.Wrap(errcode.Canceled, err, "read")
	}
	return c.r.Read(p)
}
