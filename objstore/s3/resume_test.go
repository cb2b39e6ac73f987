package s3_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/objstore"
	"github.com/shardproof/shardproof/objstore/s3"
)

// cutEach answers the n-th GetObject of a key (n from 1) by breaking
// the connection after cutAt(n) bytes of its body, or in full when
// cutAt(n) < 0, and records each request's Range header.
type cutEach struct {
	bp     *breakingProxy
	cutAt  func(n int) int64
	mu     sync.Mutex
	ranges []string
}

func (c *cutEach) serve(w http.ResponseWriter, r *http.Request) {
	c.mu.Lock()
	c.ranges = append(c.ranges, r.Header.Get("Range"))
	c.mu.Unlock()
	if at := c.cutAt(c.bp.hitCount()); at >= 0 {
		bodyThen(c.bp.proxy, at, cut)(w, r)
		return
	}
	c.bp.proxy.ServeHTTP(w, r)
}

func (c *cutEach) rangesSeen() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.ranges...)
}

// object is 3 MiB of seeded noise.
func object() []byte {
	b := make([]byte, 3<<20)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// readAll reads key at v whole, with a generous cap so that a read that
// waits for good fails instead of hanging.
func readAll(t *testing.T, st objstore.Store, key string, v objstore.Version) ([]byte, error) {
	t.Helper()
	var got []byte
	err := within(t, 2*time.Minute, func(ctx context.Context) error {
		rc, err := st.Get(ctx, key, v)
		if err != nil {
			return err
		}
		defer rc.Close()
		got, err = io.ReadAll(rc)
		return err
	})
	return got, err
}

// A GetObject body whose connection is cut is resumed with a ranged GET
// of the same version from the byte the cut stopped at, up to
// s3.MaxBodyResumes times in a row: the bytes read are exactly the
// object's. A body cut on every attempt before s3.ResumeProgress bytes
// fails with STORE_UNAVAILABLE after the bound; one that moves at least
// that far between cuts is read to its end. Before, one cut failed the
// read (and a verification, exit 3).
func TestGetResumesCutBody(t *testing.T) {
	u, bp, _ := startBreakingProxy(t, "")
	st := open(t, u)
	body := object()
	want := sha256.Sum256(body)
	v, err := st.Put(t.Context(), "k", bytes.NewReader(body), objstore.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name       string
		v          objstore.Version
		cutAt      func(n int) int64
		wantRanges []string
		wantCode   errcode.Code
	}{
		{"once", v, cutFirst(1000),
			[]string{"", "bytes=1000-"}, ""},
		{"latest once", "", cutFirst(1000),
			[]string{"", "bytes=1000-"}, ""},
		{"three times", v, func(n int) int64 {
			if n <= s3.MaxBodyResumes {
				return 100_000
			}
			return -1
		}, []string{"", "bytes=100000-", "bytes=200000-", "bytes=300000-"}, ""},
		{"at once, every time", v, func(int) int64 { return 0 },
			[]string{"", "bytes=0-", "bytes=0-", "bytes=0-"}, errcode.StoreUnavailable},
		{"every time", v, func(int) int64 { return 64 << 10 },
			[]string{"", "bytes=65536-", "bytes=131072-", "bytes=196608-"}, errcode.StoreUnavailable},
		// Each cut after s3.ResumeProgress bytes or more starts the count
		// again: a body that keeps moving is read to its end, however
		// many times its connection drops.
		{"every time, after progress", v, func(int) int64 { return 700_000 },
			[]string{"", "bytes=700000-", "bytes=1400000-", "bytes=2100000-", "bytes=2800000-"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &cutEach{bp: bp, cutAt: tc.cutAt}
			bp.set(isGet("k"), c.serve)
			defer bp.set(nil, nil)
			got, err := readAll(t, st, "k", tc.v)
			if tc.wantCode != "" {
				if code := errcode.Of(err); code != tc.wantCode {
					t.Fatalf("read of a body cut on every attempt: %s (%v), want %s", code, err, tc.wantCode)
				}
			} else if err != nil || sha256.Sum256(got) != want {
				t.Fatalf("read of a body cut and resumed: %d bytes, sha256 %x, %v; want %d bytes, sha256 %x",
					len(got), sha256.Sum256(got), err, len(body), want)
			}
			if r := c.rangesSeen(); strings.Join(r, ",") != strings.Join(tc.wantRanges, ",") {
				t.Fatalf("GetObject ranges %q, want %q", r, tc.wantRanges)
			}
		})
	}
}

// cutFirst cuts the first GetObject after at bytes, and none after.
func cutFirst(at int64) func(n int) int64 {
	return func(n int) int64 {
		if n == 1 {
			return at
		}
		return -1
	}
}

// A read of the latest version resumes the version it started reading:
// one written over it meanwhile is not spliced into its bytes.
func TestGetResumesLatestPinsVersion(t *testing.T) {
	u, bp, _ := startBreakingProxy(t, "")
	st := open(t, u)
	ctx := t.Context()
	body := object()
	if _, err := st.Put(ctx, "k", bytes.NewReader(body), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	c := &cutEach{bp: bp, cutAt: cutFirst(1 << 20)}
	bp.set(isGet("k"), c.serve)
	rc, err := st.Get(ctx, "k", "")
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	head := make([]byte, 1000)
	if _, err := io.ReadFull(rc, head); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Put(ctx, "k", bytes.NewReader(bytes.Repeat([]byte{1}, len(body))), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	rest, err := io.ReadAll(rc)
	if err != nil || !bytes.Equal(append(head, rest...), body) {
		t.Fatalf("latest read resumed after an overwrite: %d bytes, %v; want the %d bytes first read", len(head)+len(rest), err, len(body))
	}
	if r := c.rangesSeen(); len(r) != 2 {
		t.Fatalf("GetObject ranges %q, want a first GET and one resume", r)
	}
}

// A resumed answer that is not the object first read (another ETag, or
// bytes from another offset than asked for) is not used:
// the read fails with the cut's code, and no byte of the answer is
// delivered.
func TestGetResumeRefusesOtherObject(t *testing.T) {
	u, bp, _ := startBreakingProxy(t, "")
	st := open(t, u)
	body := object()
	v, err := st.Put(t.Context(), "k", bytes.NewReader(body), objstore.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// rewrite answers as the gateway does, but with edit applied to the
	// answer's header and status.
	rewrite := func(edit func(h http.Header, code int) int) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			rec := httptest.NewRecorder()
			bp.proxy.ServeHTTP(rec, r)
			for k, vs := range rec.Header() {
				w.Header()[k] = vs
			}
			w.WriteHeader(edit(w.Header(), rec.Code))
			w.Write(rec.Body.Bytes())
		}
	}
	for name, resume := range map[string]http.HandlerFunc{
		"etag": rewrite(func(h http.Header, code int) int {
			h.Set("ETag", `"0123456789abcdef0123456789abcdef"`)
			return code
		}),
		// A server that ignored the Range would answer so, from byte 0.
		"no content-range": rewrite(func(h http.Header, _ int) int {
			h.Del("Content-Range")
			return http.StatusOK
		}),
		"other start": rewrite(func(h http.Header, code int) int {
			h.Set("Content-Range", strings.Replace(h.Get("Content-Range"), "bytes 1000-", "bytes 999-", 1))
			return code
		}),
	} {
		t.Run(name, func(t *testing.T) {
			bp.set(isGet("k"), func(w http.ResponseWriter, r *http.Request) {
				if bp.hitCount() == 1 {
					bodyThen(bp.proxy, 1000, cut)(w, r)
					return
				}
				resume(w, r)
			})
			defer bp.set(nil, nil)
			got, err := readAll(t, st, "k", v)
			if code := errcode.Of(err); code != errcode.StoreUnavailable || !strings.Contains(err.Error(), "not the object first read") {
				t.Fatalf("resume answered by another object: %s (%v), want STORE_UNAVAILABLE saying it was not resumed", code, err)
			}
			if len(got) != 1000 || !bytes.Equal(got, body[:1000]) {
				t.Fatalf("%d bytes delivered, want the 1000 before the cut", len(got))
			}
			if n := bp.hitCount(); n != 2 {
				t.Fatalf("%d GetObjects, want the first and one resume", n)
			}
		})
	}
}

// A read whose context ends while its resume waits for an answer ends
// then, with CANCELED.
func TestGetResumeCanceled(t *testing.T) {
	u, bp, _ := startBreakingProxy(t, "")
	st := open(t, u)
	v, err := st.Put(t.Context(), "k", bytes.NewReader(object()), objstore.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	defer close(done)
	resuming := make(chan struct{}, 1)
	bp.set(isGet("k"), func(w http.ResponseWriter, r *http.Request) {
		if bp.hitCount() == 1 {
			bodyThen(bp.proxy, 1000, cut)(w, r)
			return
		}
		resuming <- struct{}{}
		stall(done)(w, r)
	})
	err = within(t, 2*time.Minute, func(ctx context.Context) error {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		go func() {
			select {
			case <-resuming:
				cancel()
			case <-ctx.Done():
			}
		}()
		rc, err := st.Get(ctx, "k", v)
		if err != nil {
			return err
		}
		defer rc.Close()
		_, err = io.Copy(io.Discard, rc)
		return err
	})
	if code := errcode.Of(err); code != errcode.Canceled {
		t.Fatalf("read canceled during its resume: %s (%v), want CANCELED", code, err)
	}
	if n := bp.hitCount(); n != 2 {
		t.Fatalf("%d GetObjects, want the first and the resume that was canceled", n)
	}
}
