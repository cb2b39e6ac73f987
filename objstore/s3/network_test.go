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

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/objstore"
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

// A connection lost in the middle of a GetObject body is an error with a
// code (STORE_UNAVAILABLE), not a bare one: callers that keep the code of
// a read error (the mapper, commit records, documents) said INTERNAL, "an
// internal error; please report it". A read after the caller's context is
// done is CANCELED.
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
		t.Fatalf("read of a body whose connection was cut: %s (%v), want STORE_UNAVAILABLE", c, err)
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
