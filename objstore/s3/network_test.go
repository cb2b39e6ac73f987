package s3_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/internal/testnet"
	"github.com/shardproof/shardproof/objstore"
	"github.com/shardproof/shardproof/objstore/s3"
	"github.com/shardproof/shardproof/objstore/s3/s3test"
)

// breakingProxy forwards every request to the test gateway, except that
// the requests break selects are handed to breakFn instead, which may
// stall or cut them as a failing network or server would.
type breakingProxy struct {
	proxy   *httputil.ReverseProxy
	mu      sync.Mutex
	match   func(*http.Request) bool
	breakFn http.HandlerFunc
	hits    int
}

func (b *breakingProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b.mu.Lock()
	hit := b.match != nil && b.match(r)
	if hit {
		b.hits++
	}
	fn := b.breakFn
	b.mu.Unlock()
	if hit {
		fn(w, r)
		return
	}
	b.proxy.ServeHTTP(w, r)
}

// set makes the requests match selects go to fn (nil match: none).
func (b *breakingProxy) set(match func(*http.Request) bool, fn http.HandlerFunc) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.match, b.breakFn, b.hits = match, fn, 0
}

func (b *breakingProxy) hitCount() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.hits
}

// startBreakingProxy returns a new versioned bucket's store URL (with
// extra options appended) whose requests go through a breakingProxy, the
// proxy, and the bucket's name.
func startBreakingProxy(t *testing.T, extra string) (string, *breakingProxy, string) {
	t.Helper()
	raw := s3test.Start(t)
	target, _ := url.Parse(s3test.Endpoint())
	bp := &breakingProxy{proxy: &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			r.Out.Host = r.In.Host // the request is signed for the proxy's host
		},
		FlushInterval: -1, // pass each part of a body on as it comes
	}}
	srv := httptest.NewServer(bp)
	t.Cleanup(srv.Close)
	pu, _ := url.Parse(raw)
	q := pu.Query()
	q.Set("endpoint", srv.URL)
	pu.RawQuery = q.Encode()
	return pu.String() + extra, bp, pu.Host
}

// stall holds a request without answering until the client gives up on
// it or the test ends.
func stall(done <-chan struct{}) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-done:
		}
	}
}

// isGet selects GetObject requests of key.
func isGet(key string) func(*http.Request) bool {
	return func(r *http.Request) bool {
		return r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/"+key)
	}
}

// bodyThen answers a GetObject as the gateway does, but passes on only
// the first n bytes of the body, then calls then (which stalls or cuts
// the connection).
func bodyThen(target *httputil.ReverseProxy, n int64, then func(w http.ResponseWriter, r *http.Request)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		rec := httptest.NewRecorder()
		target.ServeHTTP(rec, r)
		for k, vs := range rec.Header() {
			w.Header()[k] = vs
		}
		w.WriteHeader(rec.Code)
		w.Write(rec.Body.Bytes()[:min(n, int64(rec.Body.Len()))])
		w.(http.Flusher).Flush()
		then(w, r)
	}
}

// cut drops the connection without finishing the answer.
func cut(w http.ResponseWriter, r *http.Request) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err == nil {
		conn.Close()
	}
}

// A connection lost in the middle of a GetObject body, and in each of
// its resumes, is an error with a code (STORE_UNAVAILABLE), not a bare
// one: callers that keep the code of a read error (the mapper, commit
// records, documents) said INTERNAL, "an internal error; please report
// it". A read after the caller's context is done is CANCELED.
func TestGetBodyErrorsHaveCodes(t *testing.T) {
	u, bp, _ := startBreakingProxy(t, "")
	st := open(t, u)
	ctx := t.Context()
	body := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	v, err := st.Put(ctx, "k", bytes.NewReader(body), objstore.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}

	bp.set(isGet("k"), bodyThen(bp.proxy, 1000, cut))
	rc, err := st.Get(ctx, "k", v)
	if err != nil {
		t.Fatal(err)
	}
	_, err = io.Copy(io.Discard, rc)
	rc.Close()
	if c := errcode.Of(err); c != errcode.StoreUnavailable {
		t.Fatalf("read of a body whose connection was cut on every attempt: %s (%v), want STORE_UNAVAILABLE", c, err)
	}
	bp.set(nil, nil)

	cctx, cancel := context.WithCancel(ctx)
	rc, err = st.Get(cctx, "k", v)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(rc, make([]byte, 100)); err != nil {
		t.Fatal(err)
	}
	cancel()
	_, err = io.Copy(io.Discard, rc)
	rc.Close()
	if c := errcode.Of(err); c != errcode.Canceled {
		t.Fatalf("read after cancel: %s (%v), want CANCELED", c, err)
	}
}

// within runs f with a context that ends after limit and fails the test
// if f was still waiting then: the bound under test must end f first,
// with its own error.
func within(t *testing.T, limit time.Duration, f func(ctx context.Context) error) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), limit)
	defer cancel()
	err := f(ctx)
	if ctx.Err() != nil {
		t.Fatalf("still waiting after %s (the caller's context ended it): %v", limit, err)
	}
	return err
}

// A server that accepts connections but never answers fails Open with
// STORE_UNAVAILABLE once the timeout has passed on every attempt; it held
// Open (and with it every command) until the process was killed.
func TestSilentServerAtOpen(t *testing.T) {
	s3test.Start(t) // the credential environment
	u := "s3://b/?endpoint=http://" + testnet.NewSilent(t, false).Addr + "&region=us-east-1&timeout=200ms"
	err := within(t, time.Minute, func(ctx context.Context) error {
		_, err := objstore.Open(ctx, u)
		return err
	})
	if c := errcode.Of(err); c != errcode.StoreUnavailable || !strings.Contains(err.Error(), "timeout option") {
		t.Fatalf("Open of a silent server: %s (%v), want STORE_UNAVAILABLE naming the timeout", c, err)
	}
}

// A GetObject body that stops arriving, and stops again in each resume,
// is STORE_UNAVAILABLE after the timeout, and one that keeps arriving slowly is read whole, however long
// it takes: the bound is on silence, not on the transfer.
func TestSilentBody(t *testing.T) {
	u, bp, _ := startBreakingProxy(t, "&timeout=300ms")
	st := open(t, u)
	ctx := t.Context()
	body := bytes.Repeat([]byte{7}, 64<<10)
	v, err := st.Put(ctx, "k", bytes.NewReader(body), objstore.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	defer close(done)
	bp.set(isGet("k"), bodyThen(bp.proxy, 1000, func(w http.ResponseWriter, r *http.Request) { stall(done)(w, r) }))
	err = within(t, time.Minute, func(ctx context.Context) error {
		rc, err := st.Get(ctx, "k", v)
		if err != nil {
			return err
		}
		defer rc.Close()
		_, err = io.Copy(io.Discard, rc)
		return err
	})
	if c := errcode.Of(err); c != errcode.StoreUnavailable {
		t.Fatalf("read of a body that stopped: %s (%v), want STORE_UNAVAILABLE", c, err)
	}

	// 16 pieces 100 ms apart: 1.6 s in all, never 300 ms of silence.
	bp.set(isGet("k"), func(w http.ResponseWriter, r *http.Request) {
		rec := httptest.NewRecorder()
		bp.proxy.ServeHTTP(rec, r)
		for k, vs := range rec.Header() {
			w.Header()[k] = vs
		}
		w.WriteHeader(rec.Code)
		b := rec.Body.Bytes()
		for len(b) > 0 {
			n := min(len(b), 4<<10)
			w.Write(b[:n])
			w.(http.Flusher).Flush()
			b = b[n:]
			time.Sleep(100 * time.Millisecond)
		}
	})
	rc, err := st.Get(ctx, "k", v)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || !bytes.Equal(got, body) {
		t.Fatalf("slow but steady body: %d bytes, %v", len(got), err)
	}
}

// A multipart upload whose part the server stops taking fails with
// STORE_UNAVAILABLE after the timeout (it waited for good) and is
// aborted: no parts are left stored, and billed, and nothing is visible.
func TestSilentUploadIsAborted(t *testing.T) {
	u, bp, bucket := startBreakingProxy(t, "&timeout=300ms&multipart_threshold=5242880")
	st := open(t, u)
	done := make(chan struct{})
	defer close(done)
	bp.set(func(r *http.Request) bool {
		return r.Method == http.MethodPut && r.URL.Query().Get("partNumber") == "2"
	}, stall(done))
	body := bytes.Repeat([]byte{9}, 11<<20)
	err := within(t, 2*time.Minute, func(ctx context.Context) error {
		_, err := st.Put(ctx, "big", bytes.NewReader(body), objstore.PutOptions{IfNoneMatch: true})
		return err
	})
	if c := errcode.Of(err); c != errcode.StoreUnavailable {
		t.Fatalf("Put whose part 2 the server never takes: %s (%v), want STORE_UNAVAILABLE", c, err)
	}
	if bp.hitCount() < 2 {
		t.Fatalf("part 2 sent %d times: a timeout is retried", bp.hitCount())
	}
	if _, err := st.Head(t.Context(), "big", ""); !objstore.IsNotExist(err) {
		t.Fatalf("Head after the failed upload: %v, want NOT_FOUND", err)
	}
	ups, err := st.(*s3.Store).Client().ListMultipartUploads(t.Context(), &awss3.ListMultipartUploadsInput{Bucket: aws.String(bucket)})
	if err != nil || len(ups.Uploads) != 0 {
		t.Fatalf("uploads left open: %d, %v", len(ups.Uploads), err)
	}
}

// A CompleteMultipartUpload whose answer is lost (the connection reset
// after the server completed the upload) is sent again by the SDK's
// retryer and answered 200 without a version id: the Put returns the
// version it created, where it said VERSIONING_OFF ("is versioning still
// enabled?") for an object that was stored.
func TestCompleteAnswerLost(t *testing.T) {
	u, bp, _ := startBreakingProxy(t, "&multipart_threshold=5242880")
	st := open(t, u)
	ctx := t.Context()
	bp.set(func(r *http.Request) bool {
		return r.Method == http.MethodPost && r.URL.Query().Has("uploadId")
	}, func(w http.ResponseWriter, r *http.Request) {
		if bp.hitCount() > 1 {
			bp.proxy.ServeHTTP(w, r)
			return
		}
		rec := httptest.NewRecorder()
		bp.proxy.ServeHTTP(rec, r)
		if rec.Code != http.StatusOK {
			t.Errorf("first complete: %d %s", rec.Code, rec.Body)
		}
		cut(w, r)
	})
	// Another version under the key, of another size and ETag.
	if _, err := st.Put(ctx, "big", strings.NewReader("older"), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	body := bytes.Repeat([]byte{9}, 6<<20)
	v, err := st.Put(ctx, "big", bytes.NewReader(body), objstore.PutOptions{})
	if err != nil {
		t.Fatalf("Put whose first complete answer was lost: %v", err)
	}
	if n := bp.hitCount(); n != 2 {
		t.Fatalf("complete sent %d times, want 2", n)
	}
	info, err := st.Head(ctx, "big", "")
	if err != nil || info.Version != v {
		t.Fatalf("latest version %+v, %v; the Put returned %s", info, err, v)
	}
	rc, err := st.Get(ctx, "big", v)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || !bytes.Equal(got, body) {
		t.Fatalf("version %s: %d bytes, %v", v, len(got), err)
	}
}
