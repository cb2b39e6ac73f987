package main

import (
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/shardproof/shardproof/objstore"
	"github.com/shardproof/shardproof/objstore/s3/s3test"
	"github.com/shardproof/shardproof/stage/stagetest"
)

// TestVerifyS3ShardReadCut: a verify over S3 whose read of a release
// shard loses its connection halfway (a proxy before the gateway cuts
// it) resumes the body from where it stopped and reports VERIFIED, the
// report of an undisturbed run; it failed with STORE_UNAVAILABLE, exit 3.
func TestVerifyS3ShardReadCut(t *testing.T) {
	raw := s3test.Start(t)
	s, err := objstore.Open(t.Context(), raw)
	if err != nil {
		t.Fatal(err)
	}
	r := &release{dir: raw, store: s, res: stagetest.Synth(t, s, 3000, 5, 7)}
	want := r.localReport(t)
	shard := r.res.Release.Shards[2]
	key := "/" + objstore.BlobPrefix + shard.Digest.Hex()

	target, _ := url.Parse(s3test.Endpoint())
	proxy := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			r.Out.Host = r.In.Host // the request is signed for the proxy's host
		},
		FlushInterval: -1,
	}
	var mu sync.Mutex
	var cuts, resumes int
	var ranges []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet || !strings.HasSuffix(r.URL.Path, key) || r.URL.Query().Get("versionId") != shard.ObjectVersion {
			proxy.ServeHTTP(w, r)
			return
		}
		mu.Lock()
		first := cuts == 0
		if first {
			cuts++
		} else if rg := r.Header.Get("Range"); rg != "" {
			resumes++
			ranges = append(ranges, rg)
		}
		mu.Unlock()
		if !first {
			proxy.ServeHTTP(w, r)
			return
		}
		rec := httptest.NewRecorder()
		proxy.ServeHTTP(rec, r)
		for k, vs := range rec.Header() {
			w.Header()[k] = vs
		}
		w.WriteHeader(rec.Code)
		w.Write(rec.Body.Bytes()[:shard.Size/2])
		w.(http.Flusher).Flush()
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			conn.Close()
		}
	}))
	t.Cleanup(srv.Close)
	pu, _ := url.Parse(raw)
	q := pu.Query()
	q.Set("endpoint", srv.URL)
	pu.RawQuery = q.Encode()

	res := runCLI(t, cliEnv(), "verify", "--store", pu.String(), "--root", r.res.Root.String(), "--json")
	got := cliReport(t, res)
	sameReport(t, "verify whose shard read was cut once", want, got)
	mu.Lock()
	defer mu.Unlock()
	if wantRange := "bytes=" + strconv.FormatInt(shard.Size/2, 10) + "-"; cuts != 1 || resumes != 1 || ranges[0] != wantRange {
		t.Fatalf("shard reads cut %d times, resumed %d times (%q); want one cut, one resume from %s", cuts, resumes, ranges, wantRange)
	}
	if !strings.Contains(res.stderr, "resuming a body read") {
		t.Fatalf("no warning of the resume on stderr:\n%s", res.stderr)
	}
}
