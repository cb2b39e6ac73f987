package verifyread

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"

	"github.com/cespare/xxhash/v2"

	"github.com/shardproof/shardproof/internal/errcode"
)

// SizeMismatchError reports an object whose byte count differs from its
// descriptor's size. Got is the number of bytes actually read; when the
// object was longer than Want, Got is Want+1 (the reader stops one byte past
// the descriptor's size) and Longer is true.
type SizeMismatchError struct {
	Key    string
	Want   int64
	Got    int64
	Longer bool
}

func (e *SizeMismatchError) Error() string {
	if e.Longer {
		return fmt.Sprintf("%s: descriptor size=%d, bytes read=more than %d", e.Key, e.Want, e.Want)
	}
	return fmt.Sprintf("%s: descriptor size=%d, bytes read=%d", e.Key, e.Want, e.Got)
}

// ErrorCode implements errcode.Coder.
func (e *SizeMismatchError) ErrorCode() errcode.Code { return errcode.SizeMismatch }

// DigestMismatchError reports an object whose bytes do not hash to its
// descriptor's digest. Want is the descriptor's sha256, Got the sha256 of
// the bytes read.
type DigestMismatchError struct {
	Key  string
	Want [32]byte
	Got  [32]byte
}

func (e *DigestMismatchError) Error() string {
	return fmt.Sprintf("%s: descriptor digest=sha256:%s, sha256 of bytes read=sha256:%s",
		e.Key, hex.EncodeToString(e.Want[:]), hex.EncodeToString(e.Got[:]))
}

// ErrorCode implements errcode.Coder.
func (e *DigestMismatchError) ErrorCode() errcode.Code { return errcode.DigestMismatch }

// TooLargeError reports that ReadAll found more than its limit.
type TooLargeError struct {
	Max int64
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("content exceeds the %d-byte limit", e.Max)
}

// ErrorCode implements errcode.Coder.
func (e *TooLargeError) ErrorCode() errcode.Code { return errcode.DocumentTooLarge }

// ChecksumMismatchError reports an object whose bytes do not match a
// non-cryptographic checksum (xxh64): a local job's own temporary files
// (see NewXXH64).
type ChecksumMismatchError struct {
	Key       string
	Want, Got uint64
}

func (e *ChecksumMismatchError) Error() string {
	return fmt.Sprintf("%s: descriptor checksum=xxh64:%016x, xxh64 of bytes read=xxh64:%016x", e.Key, e.Want, e.Got)
}

// ErrorCode implements errcode.Coder.
func (e *ChecksumMismatchError) ErrorCode() errcode.Code { return errcode.DigestMismatch }

type reader struct {
	rc     io.ReadCloser
	key    string
	size   int64
	h      hash.Hash
	match  func() error // compares h's sum with the descriptor's
	n      int64        // bytes handed to the caller (and hashed)
	err    error        // sticky
	probed bool         // the one-byte-past probe has been done
}

// New returns a reader of rc that yields at most wantSize bytes and, at EOF,
// checks that exactly wantSize bytes hashed to wantSHA256. A shorter object
// fails with *SizeMismatchError at EOF; a longer one fails with
// *SizeMismatchError as soon as the byte past wantSize is seen (the extra
// bytes are never returned); a hash mismatch fails with *DigestMismatchError
// at EOF. Errors are sticky. key names the object in error messages. Close
// closes rc.
func New(rc io.ReadCloser, key string, wantSHA256 [32]byte, wantSize int64) io.ReadCloser {
	r := &reader{rc: rc, key: key, size: wantSize, h: sha256.New()}
	r.match = func() error {
		var got [32]byte
		r.h.Sum(got[:0])
		if got != wantSHA256 {
			return &DigestMismatchError{Key: key, Want: wantSHA256, Got: got}
		}
		return nil
	}
	return r.checkSize()
}

// NewXXH64 is New checking the bytes' xxh64 (XXH64, seed 0) instead of
// their sha256, failing with *ChecksumMismatchError. xxh64 catches
// corruption, not forgery: it is for a process's own temporary files
// that no other machine or process writes (a local verification's
// shuffle files), where sha256 cost a tenth of verify's CPU.
func NewXXH64(rc io.ReadCloser, key string, want uint64, wantSize int64) io.ReadCloser {
	h := xxhash.New()
	r := &reader{rc: rc, key: key, size: wantSize, h: h}
	r.match = func() error {
		if got := h.Sum64(); got != want {
			return &ChecksumMismatchError{Key: key, Want: want, Got: got}
		}
		return nil
	}
	return r.checkSize()
}

func (r *reader) checkSize() io.ReadCloser {
	if r.size < 0 {
		r.err = errcode.New(errcode.BadCount, "%s: negative descriptor size %d", r.key, r.size)
	}
	return r
}

func (r *reader) Read(p []byte) (int, error) {
	if r.err != nil {
		return 0, r.err
	}
	if r.n == r.size {
		r.err = r.finish()
		return 0, r.err
	}
	if rem := r.size - r.n; int64(len(p)) > rem {
		p = p[:rem]
	}
	n, err := r.rc.Read(p)
	if n > 0 {
		r.h.Write(p[:n])
		r.n += int64(n)
	}
	switch {
	case err == io.EOF:
		if r.n < r.size {
			r.err = &SizeMismatchError{Key: r.key, Want: r.size, Got: r.n}
			return n, r.err
		}
		r.probed = true // the source itself reported EOF at exactly size
		r.err = r.finish()
		if n > 0 && r.err == io.EOF {
			return n, nil
		}
		return n, r.err
	case err != nil:
		r.err = err
		return n, err
	}
	return n, nil
}

// finish runs once the descriptor's size has been read: it probes for one
// more byte, then compares the digest.
func (r *reader) finish() error {
	if !r.probed {
		r.probed = true
		var one [1]byte
		for tries := 0; ; tries++ {
			if tries == 100 {
				return io.ErrNoProgress
			}
			n, err := r.rc.Read(one[:])
			if n > 0 {
				return &SizeMismatchError{Key: r.key, Want: r.size, Got: r.size + 1, Longer: true}
			}
			if err == io.EOF {
				break
			}
			if err != nil {
				return err
			}
		}
	}
	if err := r.match(); err != nil {
		return err
	}
	return io.EOF
}

func (r *reader) Close() error { return r.rc.Close() }

// ReadAll reads r to EOF and returns its bytes, failing with *TooLargeError
// (code DOCUMENT_TOO_LARGE) if r holds more than max bytes. It allocates
// lazily, so a hostile max does not reserve memory up front.
func ReadAll(r io.Reader, max int64) ([]byte, error) {
	return AppendAll(nil, r, max)
}

// AppendAll is ReadAll appending r's bytes to buf, for a reader of many
// documents that reuses one buffer: max bounds the bytes appended, and
// the buffer grows only as they arrive.
func AppendAll(buf []byte, r io.Reader, max int64) ([]byte, error) {
	if max < 0 {
		return nil, errcode.New(errcode.Internal, "verifyread: negative read limit %d", max)
	}
	start := len(buf)
	lr := io.LimitedReader{R: r, N: max + 1}
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)] // grow, as io.ReadAll does
		}
		n, err := lr.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	if int64(len(buf)-start) > max {
		return nil, &TooLargeError{Max: max}
	}
	return buf, nil
}
