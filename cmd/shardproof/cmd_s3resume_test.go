package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	awss3types "github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/shardproof/shardproof/internal/errcode"
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

// TestVerifyS3BucketDeleted: a verify whose bucket is deleted under it
// (every version, then the bucket, as the first Head of a shard's
// version reaches the gateway) exits 2 with NO_SUCH_BUCKET naming the
// bucket. The Head's bodiless 404 was NOT_FOUND, the shard
// VERSION_MISSING, and the run failed STORE_UNAVAILABLE, exit 3, at its
// next write, which engines retry.
func TestVerifyS3BucketDeleted(t *testing.T) {
	raw := s3test.Start(t)
	s, err := objstore.Open(t.Context(), raw)
	if err != nil {
		t.Fatal(err)
	}
	r := &release{dir: raw, store: s, res: stagetest.Synth(t, s, 300, 3, 7)}
	pu, _ := url.Parse(raw)
	bucket := pu.Host
	client := s3test.Client(s3test.Endpoint())
	target, _ := url.Parse(s3test.Endpoint())
	proxy := &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
		r.SetURL(target)
		r.Out.Host = r.In.Host // the request is signed for the proxy's host
	}}
	var once sync.Once
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodHead && strings.Contains(r.URL.Path, "/"+objstore.BlobPrefix) && r.URL.Query().Has("versionId") {
			once.Do(func() { deleteBucket(t, client, bucket) })
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	q := pu.Query()
	q.Set("endpoint", srv.URL)
	pu.RawQuery = q.Encode()

	res := runCLI(t, cliEnv(), "verify", "--store", pu.String(), "--root", r.res.Root.String(), "--parallelism", "1")
	if res.status != errcode.ExitUsage || !strings.Contains(res.stderr, "shardproof: NO_SUCH_BUCKET: ") || !strings.Contains(res.stderr, "bucket "+bucket+" does not exist") {
		t.Fatalf("verify whose bucket was deleted under it: exit %d, stderr:\n%s\nwant exit 2, NO_SUCH_BUCKET naming %s", res.status, res.stderr, bucket)
	}
	// The job's files went with the bucket: no resume can finish it.
	if strings.Contains(res.stderr, "stopped; its committed tasks are kept") {
		t.Fatalf("verify whose bucket was deleted under it offers a resume:\n%s", res.stderr)
	}
}

// deleteBucket deletes every version in bucket, then the bucket.
func deleteBucket(t *testing.T, c *awss3.Client, bucket string) {
	ctx := context.Background()
	for {
		out, err := c.ListObjectVersions(ctx, &awss3.ListObjectVersionsInput{Bucket: aws.String(bucket)})
		if err != nil {
			t.Errorf("list versions of %s: %v", bucket, err)
			return
		}
		var ids []awss3types.ObjectIdentifier
		for _, v := range out.Versions {
			ids = append(ids, awss3types.ObjectIdentifier{Key: v.Key, VersionId: v.VersionId})
		}
		for _, m := range out.DeleteMarkers {
			ids = append(ids, awss3types.ObjectIdentifier{Key: m.Key, VersionId: m.VersionId})
		}
		if len(ids) == 0 {
			break
		}
		if _, err := c.DeleteObjects(ctx, &awss3.DeleteObjectsInput{Bucket: aws.String(bucket), Delete: &awss3types.Delete{Objects: ids}}); err != nil {
			t.Errorf("delete versions in %s: %v", bucket, err)
			return
		}
	}
	if _, err := c.DeleteBucket(ctx, &awss3.DeleteBucketInput{Bucket: aws.String(bucket)}); err != nil {
		t.Errorf("delete bucket %s: %v", bucket, err)
	}
}
