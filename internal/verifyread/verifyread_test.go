package verifyread

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/cespare/xxhash/v2"

	"github.com/shardproof/shardproof/internal/errcode"
)

func TestReader(t *testing.T) {
	data := []byte("0123456789abcdef")
	sum := sha256.Sum256(data)
	flipped := bytes.Clone(data)
	flipped[3] ^= 1
	for _, tc := range []struct {
		name     string
		body     []byte
		want     [32]byte
		size     int64
		code     errcode.Code // "" means success
		maxOut   int          // bytes the caller may see
		inErrMsg string
	}{
		{name: "exact", body: data, want: sum, size: 16, maxOut: 16},
		{name: "empty", body: nil, want: sha256.Sum256(nil), size: 0, maxOut: 0},
		{name: "short", body: data[:10], want: sum, size: 16, code: errcode.SizeMismatch, maxOut: 10, inErrMsg: "descriptor size=16, bytes read=10"},
		{name: "long", body: append(bytes.Clone(data), 'x', 'y'), want: sum, size: 16, code: errcode.SizeMismatch, maxOut: 16, inErrMsg: "descriptor size=16, bytes read=more than 16"},
		{name: "flipped", body: flipped, want: sum, size: 16, code: errcode.DigestMismatch, maxOut: 16, inErrMsg: "sha256 of bytes read=sha256:"},
		{name: "empty-but-want-bytes", body: nil, want: sum, size: 16, code: errcode.SizeMismatch, maxOut: 0},
		{name: "bytes-but-want-empty", body: data, want: sha256.Sum256(nil), size: 0, code: errcode.SizeMismatch, maxOut: 0},
		{name: "negative-size", body: data, want: sum, size: -1, code: errcode.BadCount, maxOut: 0},
	} {
		for _, wrap := range []struct {
			name string
			f    func(io.Reader) io.Reader
		}{
			{"plain", func(r io.Reader) io.Reader { return r }},
			{"onebyte", iotest.OneByteReader},
			{"dataerr", iotest.DataErrReader},
		} {
			t.Run(tc.name+"/"+wrap.name, func(t *testing.T) {
				r := New(io.NopCloser(wrap.f(bytes.NewReader(tc.body))), "blobs/sha256/k", tc.want, tc.size)
				got, err := io.ReadAll(r)
				if len(got) > tc.maxOut {
					t.Fatalf("reader returned %d bytes, more than the %d allowed", len(got), tc.maxOut)
				}
				if tc.code == "" {
					if err != nil {
						t.Fatalf("unexpected error: %v", err)
					}
					if !bytes.Equal(got, tc.body) {
						t.Fatalf("bytes differ")
					}
					return
				}
				if err == nil {
					t.Fatalf("want %s, got success", tc.code)
				}
				if c := errcode.Of(err); c != tc.code {
					t.Fatalf("code = %s, want %s (%v)", c, tc.code, err)
				}
				if !strings.Contains(err.Error(), tc.inErrMsg) || !strings.Contains(err.Error(), "blobs/sha256/k") {
					t.Fatalf("message %q lacks %q or the key", err, tc.inErrMsg)
				}
				// Sticky: the next read fails the same way.
				if _, err2 := r.Read(make([]byte, 4)); err2 != err {
					t.Fatalf("error not sticky: %v then %v", err, err2)
				}
			})
		}
	}
}

func TestTypedErrors(t *testing.T) {
	data := []byte("hello")
	r := New(io.NopCloser(bytes.NewReader([]byte("hellp"))), "k", sha256.Sum256(data), 5)
	_, err := io.ReadAll(r)
	var dm *DigestMismatchError
	if !errors.As(err, &dm) || dm.Want != sha256.Sum256(data) || dm.Got != sha256.Sum256([]byte("hellp")) || dm.Key != "k" {
		t.Fatalf("want *DigestMismatchError with both digests, got %#v", err)
	}
	r = New(io.NopCloser(bytes.NewReader([]byte("hel"))), "k", sha256.Sum256(data), 5)
	_, err = io.ReadAll(r)
	var sm *SizeMismatchError
	if !errors.As(err, &sm) || sm.Want != 5 || sm.Got != 3 || sm.Longer {
		t.Fatalf("want *SizeMismatchError{5,3}, got %#v", err)
	}
}

// A source error is passed through unchanged, never disguised as a mismatch.
func TestSourceError(t *testing.T) {
	boom := errors.New("boom")
	r := New(io.NopCloser(iotest.ErrReader(boom)), "k", [32]byte{}, 5)
	if _, err := io.ReadAll(r); !errors.Is(err, boom) {
		t.Fatalf("got %v, want boom", err)
	}
}

type closeRecorder struct {
	io.Reader
	closed bool
}

func (c *closeRecorder) Close() error { c.closed = true; return nil }

func TestCloseClosesSource(t *testing.T) {
	src := &closeRecorder{Reader: strings.NewReader("x")}
	if err := New(src, "k", [32]byte{}, 1).Close(); err != nil || !src.closed {
		t.Fatalf("Close: err=%v closed=%v", err, src.closed)
	}
}

func TestReadAll(t *testing.T) {
	for _, tc := range []struct {
		n, max int64
		ok     bool
	}{{0, 0, true}, {5, 5, true}, {5, 4, false}, {5, 100, true}, {1 << 20, 1<<20 - 1, false}} {
		got, err := ReadAll(bytes.NewReader(make([]byte, tc.n)), tc.max)
		if tc.ok {
			if err != nil || int64(len(got)) != tc.n {
				t.Fatalf("ReadAll(%d, max %d) = %d bytes, %v", tc.n, tc.max, len(got), err)
			}
			continue
		}
		var tl *TooLargeError
		if !errors.As(err, &tl) || errcode.Of(err) != errcode.DocumentTooLarge {
			t.Fatalf("ReadAll(%d, max %d): want TooLargeError, got %v", tc.n, tc.max, err)
		}
	}
	if _, err := ReadAll(strings.NewReader(""), -1); err == nil {
		t.Fatal("negative max accepted")
	}
}

// AppendAll appends to what the buffer holds, reuses its room, and
// bounds what it appends alone by max.
func TestAppendAll(t *testing.T) {
	buf := make([]byte, 0, 64)
	buf = append(buf, "head:"...)
	got, err := AppendAll(buf, strings.NewReader("12345"), 5)
	if err != nil || string(got) != "head:12345" || &got[0] != &buf[:1][0] {
		t.Fatalf("AppendAll = %q, %v (same array: %v)", got, err, err == nil && &got[0] == &buf[:1][0])
	}
	got, err = AppendAll(got[:0], strings.NewReader(strings.Repeat("x", 100)), 100)
	if err != nil || len(got) != 100 {
		t.Fatalf("AppendAll grown = %d bytes, %v", len(got), err)
	}
	var tl *TooLargeError
	if _, err := AppendAll(buf, strings.NewReader("123456"), 5); !errors.As(err, &tl) {
		t.Fatalf("AppendAll of 6 bytes, max 5: %v, want TooLargeError", err)
	}
}

// NewXXH64 checks size exactly as New does, and the bytes' xxh64.
func TestXXH64(t *testing.T) {
	data := []byte("0123456789abcdef")
	sum := xxhash.Sum64(data)
	flipped := bytes.Clone(data)
	flipped[3] ^= 1
	for _, tc := range []struct {
		name string
		body []byte
		size int64
		code errcode.Code
		msg  string
	}{
		{"exact", data, 16, "", ""},
		{"short", data[:10], 16, errcode.SizeMismatch, "descriptor size=16, bytes read=10"},
		{"long", append(bytes.Clone(data), 'x'), 16, errcode.SizeMismatch, "bytes read=more than 16"},
		{"flipped", flipped, 16, errcode.DigestMismatch, "xxh64 of bytes read=xxh64:"},
		{"negative-size", data, -1, errcode.BadCount, "negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := io.ReadAll(NewXXH64(io.NopCloser(iotest.OneByteReader(bytes.NewReader(tc.body))), "jobs/x/r0.arrow", sum, tc.size))
			if tc.code == "" {
				if err != nil || !bytes.Equal(got, data) {
					t.Fatalf("got %d bytes, %v", len(got), err)
				}
				return
			}
			if errcode.Of(err) != tc.code || !strings.Contains(err.Error(), tc.msg) || !strings.Contains(err.Error(), "jobs/x/r0.arrow") {
				t.Fatalf("err = %v; want %s with %q and the key", err, tc.code, tc.msg)
			}
		})
	}
	_, err := io.ReadAll(NewXXH64(io.NopCloser(bytes.NewReader(flipped)), "k", sum, 16))
	var cm *ChecksumMismatchError
	if !errors.As(err, &cm) || cm.Want != sum || cm.Got != xxhash.Sum64(flipped) {
		t.Fatalf("want *ChecksumMismatchError with both sums, got %#v", err)
	}
}
