package s3_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	awss3types "github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/objstore"
	"github.com/shardproof/shardproof/objstore/s3"
	"github.com/shardproof/shardproof/objstore/s3/s3test"
	"github.com/shardproof/shardproof/objstore/storetest"
)

// TestMain also removes the gateway's data once every test has run.
func TestMain(m *testing.M) {
	defer s3test.Stop()
	m.Run()
}

func open(t *testing.T, rawURL string) objstore.Store {
	t.Helper()
	s, err := objstore.Open(t.Context(), rawURL)
	if err != nil {
		t.Fatalf("Open(%s): %v", rawURL, err)
	}
	return s
}

// The conformance suite, with the multipart threshold at its minimum so the
// 5 MiB+ body goes through the multipart path.
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) objstore.Store {
		return open(t, s3test.Start(t)+"&multipart_threshold=5242880")
	})
}

// A prefix in the URL scopes the store: the suite passes under one (every
// request names base+key, and listings and version listings give keys
// back without it), and two prefixes in one bucket do not see each
// other's keys.
func TestConformanceWithPrefix(t *testing.T) {
	storetest.Run(t, func(t *testing.T) objstore.Store {
		return open(t, strings.Replace(s3test.Start(t), "/?", "/tenant/x/?", 1))
	})
	u := s3test.Start(t)
	a := open(t, strings.Replace(u, "/?", "/tenant-a/x?", 1))
	b := open(t, strings.Replace(u, "/?", "/tenant-b?", 1))
	if _, err := a.Put(t.Context(), "k", strings.NewReader("a"), objstore.PutOptions{IfNoneMatch: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Put(t.Context(), "k", strings.NewReader("b"), objstore.PutOptions{IfNoneMatch: true}); err != nil {
		t.Fatalf("same key under another prefix: %v", err)
	}
	page, err := a.List(t.Context(), "", "", 0)
	if err != nil || len(page.Objects) != 1 || page.Objects[0].Key != "k" {
		t.Fatalf("List under prefix: %+v, %v", page, err)
	}
}

// A bucket without versioning is VERSIONING_OFF at open, and a Put
// after versioning was suspended under a running command is too; both
// say to enable it on the bucket, and how.
func TestVersioningOff(t *testing.T) {
	u := s3test.NewBucket(t, false)
	pu, _ := url.Parse(u)
	fix := "enable versioning on bucket " + pu.Host
	_, err := objstore.Open(t.Context(), u)
	if c := errcode.Of(err); c != errcode.VersioningOff || !strings.Contains(err.Error(), fix) || !strings.Contains(err.Error(), "Status=Enabled") {
		t.Fatalf("Open of an unversioned bucket: %s (%v), want VERSIONING_OFF saying %q and how", c, err, fix)
	}

	u = s3test.Start(t)
	pu, _ = url.Parse(u)
	fix = "enable versioning on bucket " + pu.Host + " again"
	st := open(t, u)
	_, err = s3test.Client(s3test.Endpoint()).PutBucketVersioning(t.Context(), &awss3.PutBucketVersioningInput{Bucket: aws.String(pu.Host),
		VersioningConfiguration: &awss3types.VersioningConfiguration{Status: awss3types.BucketVersioningStatusSuspended}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = st.Put(t.Context(), "k", strings.NewReader("x"), objstore.PutOptions{})
	if c := errcode.Of(err); c != errcode.VersioningOff || !strings.Contains(err.Error(), fix) || !strings.Contains(err.Error(), "Status=Enabled") {
		t.Fatalf("Put after versioning was suspended: %s (%v), want VERSIONING_OFF saying %q and how", c, err, fix)
	}
}

// An endpoint nobody listens on is STORE_UNAVAILABLE (a missing bucket
// is NO_SUCH_BUCKET: TestNoSuchBucketAtOpen).
func TestUnavailable(t *testing.T) {
	s3test.Start(t) // for its credentials
	if _, err := objstore.Open(t.Context(), "s3://b/?endpoint=http://127.0.0.1:1&region=us-east-1"); errcode.Of(err) != errcode.StoreUnavailable {
		t.Fatalf("closed port: %v", err)
	}
}

// An object overwritten in place (a new version under the same key): the
// old VersionId still returns the old bytes, through the verifying reader.
func TestOverwriteKeepsOldVersion(t *testing.T) {
	u := s3test.Start(t)
	s := open(t, u)
	pu, _ := url.Parse(u)
	ctx := t.Context()
	old := []byte("shard bytes as verified")
	d, v1, _, err := objstore.PutBlob(ctx, s, old)
	if err != nil {
		t.Fatal(err)
	}
	// Someone with bucket write access replaces the blob's bytes.
	v2, err := s.Put(ctx, objstore.BlobKey(d), strings.NewReader("tampered"), objstore.PutOptions{})
	if err != nil || v2 == v1 {
		t.Fatalf("overwrite: %s, %v", v2, err)
	}
	r, err := objstore.GetBlob(ctx, s, d, v1, int64(len(old)))
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(r)
	r.Close()
	if err != nil || !bytes.Equal(got, old) {
		t.Fatalf("old version: %q, %v", got, err)
	}
	// The latest version no longer verifies: a document read finds the
	// blob under it (its bytes, its version), and a re-stage notices.
	if got, v, err := objstore.ReadBlob(ctx, s, d, 1<<20); err != nil || !bytes.Equal(got, old) || v != v1 {
		t.Fatalf("ReadBlob under a tampered latest version: %q, %s, %v; want the original, %s", got, v, err, v1)
	}
	if _, _, _, err := objstore.PutBlob(ctx, s, old); errcode.Of(err) != errcode.SizeMismatch && errcode.Of(err) != errcode.DigestMismatch {
		t.Fatalf("PutBlob over tampered latest: %v", err)
	}
	// A delete marker on top hides it no more.
	if _, err := s.(*s3.Store).Client().DeleteObject(ctx, &awss3.DeleteObjectInput{Bucket: aws.String(pu.Host), Key: aws.String(objstore.BlobKey(d))}); err != nil {
		t.Fatal(err)
	}
	if got, v, err := objstore.ReadBlob(ctx, s, d, 1<<20); err != nil || !bytes.Equal(got, old) || v != v1 {
		t.Fatalf("ReadBlob under a delete marker: %q, %s, %v; want the original, %s", got, v, err, v1)
	}
}

// The version id of a delete marker names no version: Get and Head of it
// are NOT_FOUND (so a descriptor naming one is VERSION_MISSING), where
// S3's 405 Method Not Allowed made them IO errors. The version under the
// marker stays readable.
func TestDeleteMarkerVersionIsNotFound(t *testing.T) {
	u := s3test.Start(t)
	st := open(t, u)
	pu, _ := url.Parse(u)
	ctx := t.Context()
	v, err := st.Put(ctx, "k", strings.NewReader("x"), objstore.PutOptions{IfNoneMatch: true})
	if err != nil {
		t.Fatal(err)
	}
	out, err := st.(*s3.Store).Client().DeleteObject(ctx, &awss3.DeleteObjectInput{Bucket: aws.String(pu.Host), Key: aws.String("k")})
	if err != nil || !aws.ToBool(out.DeleteMarker) {
		t.Fatalf("DeleteObject: %+v, %v", out, err)
	}
	marker := objstore.Version(aws.ToString(out.VersionId))
	for _, ver := range []objstore.Version{marker, ""} {
		if _, err := st.Head(ctx, "k", ver); errcode.Of(err) != errcode.NotFound || !objstore.IsNotExist(err) {
			t.Errorf("Head(version %q) under a delete marker: %s (%v), want NOT_FOUND", ver, errcode.Of(err), err)
		}
		if _, err := st.Get(ctx, "k", ver); errcode.Of(err) != errcode.NotFound || !objstore.IsNotExist(err) {
			t.Errorf("Get(version %q) under a delete marker: %s (%v), want NOT_FOUND", ver, errcode.Of(err), err)
		}
	}
	if info, err := st.Head(ctx, "k", v); err != nil || info.Version != v {
		t.Fatalf("the version under the marker: %+v, %v", info, err)
	}
}

// Staging a blob again after a delete marker was put on top of it (an
// "aws s3 rm", an expiry rule) stores it again as the key's latest
// version, as AWS's conditional create does: versitygw refuses to create
// over the marker, and PutBlob then failed NOT_FOUND. The old version
// stays readable.
func TestPutBlobOverDeleteMarker(t *testing.T) {
	u := s3test.Start(t)
	st := open(t, u)
	pu, _ := url.Parse(u)
	ctx := t.Context()
	doc := []byte(`{"schema":"example"}`)
	d, v1, _, err := objstore.PutBlob(ctx, st, doc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.(*s3.Store).Client().DeleteObject(ctx, &awss3.DeleteObjectInput{Bucket: aws.String(pu.Host), Key: aws.String(objstore.BlobKey(d))}); err != nil {
		t.Fatal(err)
	}
	_, v2, created, err := objstore.PutBlob(ctx, st, doc)
	if err != nil || !created || v2 == v1 {
		t.Fatalf("PutBlob over a delete marker: version %s, created %v, %v; want a new version", v2, created, err)
	}
	if info, err := st.Head(ctx, objstore.BlobKey(d), ""); err != nil || info.Version != v2 {
		t.Fatalf("latest version %+v, %v; want %s", info, err, v2)
	}
	for _, v := range []objstore.Version{v1, v2} {
		r, err := objstore.GetBlob(ctx, st, d, v, int64(len(doc)))
		if err != nil {
			t.Fatal(err)
		}
		_, err = io.Copy(io.Discard, r)
		r.Close()
		if err != nil {
			t.Fatalf("version %s: %v", v, err)
		}
	}
	// Staging once more finds it as usual.
	if _, v3, created, err := objstore.PutBlob(ctx, st, doc); err != nil || created || v3 != v2 {
		t.Fatalf("PutBlob again: %s, %v, %v", v3, created, err)
	}
}

// A conditional multipart create on an existing key is refused by the
// server at CompleteMultipartUpload, not only by the early Head.
func TestMultipartConditional(t *testing.T) {
	u := s3test.Start(t)
	st := open(t, u+"&multipart_threshold=5242880")
	ctx := t.Context()
	body := bytes.Repeat([]byte{1}, 6<<20)
	sum := sha256.Sum256(body)
	if _, err := st.Put(ctx, "big", bytes.NewReader(body), objstore.PutOptions{IfNoneMatch: true, SHA256: sum}); err != nil {
		t.Fatal(err)
	}
	// Race past the Head: complete an upload directly with If-None-Match.
	c := st.(*s3.Store).Client()
	pu, _ := url.Parse(u)
	bucket := pu.Host
	up, err := c.CreateMultipartUpload(ctx, &awss3.CreateMultipartUploadInput{Bucket: aws.String(bucket), Key: aws.String("big")})
	if err != nil {
		t.Fatal(err)
	}
	part, err := c.UploadPart(ctx, &awss3.UploadPartInput{Bucket: aws.String(bucket), Key: aws.String("big"), UploadId: up.UploadId,
		PartNumber: aws.Int32(1), Body: bytes.NewReader([]byte("x"))})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.CompleteMultipartUpload(ctx, &awss3.CompleteMultipartUploadInput{Bucket: aws.String(bucket), Key: aws.String("big"),
		UploadId: up.UploadId, IfNoneMatch: aws.String("*"),
		MultipartUpload: &awss3types.CompletedMultipartUpload{Parts: []awss3types.CompletedPart{{ETag: part.ETag, PartNumber: aws.Int32(1)}}}})
	if err == nil {
		t.Fatal("server accepted a conditional multipart complete over an existing key")
	}
	// Through the store: refused with the stable code, nothing changed.
	_, err = st.Put(ctx, "big", bytes.NewReader(body), objstore.PutOptions{IfNoneMatch: true})
	if errcode.Of(err) != errcode.PreconditionFailed {
		t.Fatalf("store: %v", err)
	}
	info, err := st.Head(ctx, "big", "")
	if err != nil || info.Size != int64(len(body)) {
		t.Fatalf("after refused creates: %+v, %v", info, err)
	}
}

// A multipart body whose hash differs from PutOptions.SHA256 is aborted
// before completion: nothing becomes visible and no upload is left open.
func TestMultipartDigestMismatch(t *testing.T) {
	u := s3test.Start(t)
	st := open(t, u+"&multipart_threshold=5242880")
	ctx := t.Context()
	body := bytes.Repeat([]byte{2}, 11<<20)
	_, err := st.Put(ctx, "big", bytes.NewReader(body), objstore.PutOptions{SHA256: sha256.Sum256([]byte("other"))})
	if errcode.Of(err) != errcode.DigestMismatch {
		t.Fatalf("Put: %v, want DIGEST_MISMATCH", err)
	}
	if _, err := st.Head(ctx, "big", ""); !objstore.IsNotExist(err) {
		t.Fatalf("Head after rejected multipart Put: %v", err)
	}
	pu, _ := url.Parse(u)
	ups, err := st.(*s3.Store).Client().ListMultipartUploads(ctx, &awss3.ListMultipartUploadsInput{Bucket: aws.String(pu.Host)})
	if err != nil || len(ups.Uploads) != 0 {
		t.Fatalf("open uploads after abort: %d, %v", len(ups.Uploads), err)
	}
}

func TestParseURL(t *testing.T) {
	for _, bad := range []string{
		"s3:///prefix", "s3://b/?endpoint=x&bogus=1", "s3://b/../x", "s3://key:secret@b/",
		"s3://b/?path_style=maybe", "s3://b/?multipart_threshold=-1",
		"s3://b/?multipart_threshold=5368709121", "s3://b/?multipart_threshold=1e12",
		"s3://b/?timeout=0s", "s3://b/?timeout=-1s", "s3://b/?timeout=60",
	} {
		u, _ := url.Parse(bad)
		if _, err := s3.ParseURL(u); errcode.Of(err) != errcode.Usage {
			t.Errorf("ParseURL(%q) = %v, want USAGE", bad, err)
		}
	}
	// Credentials in the endpoint option are refused, and the refusal
	// does not repeat them (they would reach logs and task command lines).
	for _, bad := range []string{"s3://b/?endpoint=http://user:hunter2@127.0.0.1:7070", "s3://b/?endpoint=ftp://127.0.0.1:7070", "s3://b/?endpoint=127.0.0.1:7070"} {
		u, _ := url.Parse(bad)
		_, err := s3.ParseURL(u)
		if errcode.Of(err) != errcode.Usage || strings.Contains(err.Error(), "hunter2") {
			t.Errorf("ParseURL(%q) = %v, want USAGE without the password", bad, err)
		}
	}
	u, _ := url.Parse("s3://bkt/a/b/?endpoint=http%3A%2F%2F127.0.0.1%3A7070&region=eu-west-1&multipart_threshold=6291456&timeout=90s")
	o, err := s3.ParseURL(u)
	want := s3.Options{Bucket: "bkt", Prefix: "a/b", Endpoint: "http://127.0.0.1:7070", PathStyle: true, Region: "eu-west-1", MultipartThreshold: 6 << 20, Timeout: 90 * time.Second}
	if err != nil || o != want {
		t.Fatalf("ParseURL = %+v, %v; want %+v", o, err, want)
	}
}

// A conditional multipart create that passed the early Head but completes
// after another writer created the key loses at CompleteMultipartUpload.
func TestMultipartConditionalSlowBody(t *testing.T) {
	st := open(t, s3test.Start(t)+"&multipart_threshold=5242880")
	ctx := t.Context()
	pr, pw := io.Pipe()
	slow := make(chan error, 1)
	go func() {
		_, err := st.Put(ctx, "k", pr, objstore.PutOptions{IfNoneMatch: true})
		slow <- err
	}()
	// The first threshold+1 bytes are buffered before the upload starts;
	// once one more byte is consumed, the early Head and the first part
	// are behind us.
	if _, err := pw.Write(make([]byte, 5<<20+1)); err != nil {
		t.Fatal(err)
	}
	if _, err := pw.Write([]byte{1}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Put(ctx, "k", strings.NewReader("fast"), objstore.PutOptions{IfNoneMatch: true}); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	if err := <-slow; !objstore.IsPrecondition(err) {
		t.Fatalf("slow multipart create: %v, want ErrPreconditionFailed", err)
	}
	info, err := st.Head(ctx, "k", "")
	if err != nil || info.Size != 4 {
		t.Fatalf("after: %+v, %v; want the fast writer's 4 bytes", info, err)
	}
}

func BenchmarkStore(b *testing.B) {
	s, err := objstore.Open(b.Context(), s3test.Start(b))
	if err != nil {
		b.Fatal(err)
	}
	storetest.Bench(b, s, 32<<20)
}

// flakyProxy forwards to the gateway but answers the first n requests of
// method with 503 Service Unavailable, counting every request it sees.
type flakyProxy struct {
	method string
	n      atomic.Int32
	seen   atomic.Int32
	proxy  *httputil.ReverseProxy
}

func (f *flakyProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == f.method {
		f.seen.Add(1)
		if f.n.Add(-1) >= 0 {
			io.Copy(io.Discard, r.Body)
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>ServiceUnavailable</Code><Message>injected</Message></Error>`)
			return
		}
	}
	f.proxy.ServeHTTP(w, r)
}

// Transient 5xx failures are retried with backoff; a 412 never is.
func TestRetries(t *testing.T) {
	raw := s3test.Start(t)
	target, _ := url.Parse(s3test.Endpoint())
	fp := &flakyProxy{method: http.MethodPut, proxy: &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
		r.SetURL(target)
		r.Out.Host = r.In.Host // the request is signed for the proxy's host
	}}}
	fp.n.Store(2)
	srv := httptest.NewServer(fp)
	defer srv.Close()
	pu, _ := url.Parse(raw)
	q := pu.Query()
	q.Set("endpoint", srv.URL)
	pu.RawQuery = q.Encode()
	st := open(t, pu.String())
	ctx := t.Context()

	if _, err := st.Put(ctx, "k", strings.NewReader("x"), objstore.PutOptions{IfNoneMatch: true}); err != nil {
		t.Fatalf("Put through two 503s: %v", err)
	}
	if got := fp.seen.Load(); got != 3 {
		t.Fatalf("gateway saw %d PUTs, want 3 (two 503s, one success)", got)
	}
	fp.seen.Store(0)
	if _, err := st.Put(ctx, "k", strings.NewReader("y"), objstore.PutOptions{IfNoneMatch: true}); !objstore.IsPrecondition(err) {
		t.Fatalf("second create: %v", err)
	}
	if got := fp.seen.Load(); got != 1 {
		t.Fatalf("a 412 was sent %d times, want exactly once", got)
	}
	// A server answering 503 to every attempt is STORE_UNAVAILABLE, which
	// scripts and engines take for a failure a later try may pass; it was
	// IO. Nothing is stored.
	fp.seen.Store(0)
	fp.n.Store(100)
	_, err := st.Put(ctx, "k2", strings.NewReader("z"), objstore.PutOptions{})
	if errcode.Of(err) != errcode.StoreUnavailable {
		t.Fatalf("Put through 503s only: %v (code %s), want STORE_UNAVAILABLE", err, errcode.Of(err))
	}
	if got := fp.seen.Load(); got < 2 {
		t.Fatalf("gateway saw %d PUTs, want the retryer's attempts", got)
	}
	fp.n.Store(0)
	if _, err := st.Head(ctx, "k2", ""); !errors.Is(err, objstore.ErrNotExist) {
		t.Fatalf("Head after the failed Put: %v, want not found", err)
	}
}

// DeletePrefix pages through ListObjectVersions: with three versions a
// page, all ten versions of seven keys go, within a tenant prefix, and
// another tenant's key under the same relative prefix stays. (Resuming
// each listing from the server's markers, after deleting the version they
// name, left versions behind on versitygw.)
func TestDeletePrefixPages(t *testing.T) {
	u := s3test.Start(t)
	a := open(t, strings.Replace(u, "/?", "/tenant-a?", 1)).(*s3.Store)
	b := open(t, strings.Replace(u, "/?", "/tenant-b?", 1))
	s3.SetVersionsPage(a, 3)
	var versions []struct {
		key string
		v   objstore.Version
	}
	for i := range 7 {
		key := fmt.Sprintf("jobs/p/map/%d", i)
		for range 1 + i%2 {
			v, err := a.Put(t.Context(), key, strings.NewReader(key), objstore.PutOptions{})
			if err != nil {
				t.Fatal(err)
			}
			versions = append(versions, struct {
				key string
				v   objstore.Version
			}{key, v})
		}
	}
	if _, err := b.Put(t.Context(), "jobs/p/map/0", strings.NewReader("b"), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := a.DeletePrefix(t.Context(), "jobs/p/"); err != nil {
		t.Fatal(err)
	}
	for _, kv := range versions {
		if _, err := a.Get(t.Context(), kv.key, kv.v); !objstore.IsNotExist(err) {
			t.Fatalf("%s version %s after DeletePrefix: %v", kv.key, kv.v, err)
		}
	}
	rc, err := b.Get(t.Context(), "jobs/p/map/0", "")
	if err != nil {
		t.Fatalf("another tenant's key: %v", err)
	}
	rc.Close()
}

// DeletePrefix aborts the multipart uploads a killed writer left open
// under the prefix (their parts are stored and billed, and listed as no
// object), and only those.
func TestDeletePrefixAbortsOpenUploads(t *testing.T) {
	u := s3test.Start(t)
	st := open(t, u)
	ctx := t.Context()
	c := st.(*s3.Store).Client()
	pu, _ := url.Parse(u)
	bucket := pu.Host
	for _, key := range []string{"jobs/p1/map/0/r0.arrow", "jobs/p2/map/0/r0.arrow"} {
		up, err := c.CreateMultipartUpload(ctx, &awss3.CreateMultipartUploadInput{Bucket: aws.String(bucket), Key: aws.String(key)})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.UploadPart(ctx, &awss3.UploadPartInput{Bucket: aws.String(bucket), Key: aws.String(key), UploadId: up.UploadId,
			PartNumber: aws.Int32(1), Body: bytes.NewReader(bytes.Repeat([]byte{3}, 5<<20))}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.Put(ctx, "jobs/p1/map/0/commit.json", strings.NewReader("{}"), objstore.PutOptions{IfNoneMatch: true}); err != nil {
		t.Fatal(err)
	}
	if err := st.(objstore.Deleter).DeletePrefix(ctx, "jobs/p1/"); err != nil {
		t.Fatal(err)
	}
	ups, err := c.ListMultipartUploads(ctx, &awss3.ListMultipartUploadsInput{Bucket: aws.String(bucket)})
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, up := range ups.Uploads {
		left = append(left, aws.ToString(up.Key))
	}
	if len(left) != 1 || left[0] != "jobs/p2/map/0/r0.arrow" {
		t.Fatalf("open uploads after DeletePrefix(jobs/p1/): %v, want only jobs/p2's", left)
	}
}

// Conditional creates of an existing key with a body of 12 MiB, below
// the multipart threshold, are PRECONDITION_FAILED every time: versitygw
// refuses such a PutObject before reading its body and closes the
// connection under it, and 16 of 40 ended STORE_UNAVAILABLE after the
// SDK's retries (a second stage of a release with shards that size).
func TestConditionalCreateOfExistingLargeBody(t *testing.T) {
	st := open(t, s3test.Start(t))
	body := make([]byte, 12<<20)
	for i := range body {
		body[i] = byte(i * 7)
	}
	if _, err := st.Put(t.Context(), "k", bytes.NewReader(body), objstore.PutOptions{IfNoneMatch: true}); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		_, err := st.Put(t.Context(), "k", bytes.NewReader(body), objstore.PutOptions{IfNoneMatch: true, Size: int64(len(body))})
		if !objstore.IsPrecondition(err) {
			t.Fatalf("conditional create %d of an existing key: %v, want PRECONDITION_FAILED", i, err)
		}
	}
	if _, _, created, err := objstore.PutBlob(t.Context(), st, body); err != nil || !created {
		t.Fatalf("first PutBlob: created=%v, %v", created, err)
	}
	for i := range 5 {
		if _, _, created, err := objstore.PutBlob(t.Context(), st, body); err != nil || created {
			t.Fatalf("PutBlob %d of a stored blob: created=%v, %v; want the stored version", i, created, err)
		}
	}
}

// A multipart Put that fails after its first part was stored (the body
// fails halfway, the caller cancels, a conditional create loses the race
// at CompleteMultipartUpload) leaves no object and no upload open, whose
// parts the bucket would keep, and bill, until a lifecycle rule removed
// them.
func TestFailedMultipartLeavesNoUpload(t *testing.T) {
	u := s3test.Start(t)
	st := open(t, u+"&multipart_threshold=5242880")
	pu, _ := url.Parse(u)
	ctx := t.Context()
	openUploads := func(what string) {
		t.Helper()
		ups, err := st.(*s3.Store).Client().ListMultipartUploads(ctx, &awss3.ListMultipartUploadsInput{Bucket: aws.String(pu.Host)})
		if err != nil || len(ups.Uploads) != 0 {
			t.Fatalf("%s: %d uploads left open, %v", what, len(ups.Uploads), err)
		}
		if _, err := st.Head(ctx, "big", ""); !objstore.IsNotExist(err) {
			t.Fatalf("%s: Head: %v, want NOT_FOUND", what, err)
		}
	}
	broken := errcode.New(errcode.IO, "the body's source failed")
	_, err := st.Put(ctx, "big", io.MultiReader(bytes.NewReader(make([]byte, 7<<20)), iotestErr{broken}), objstore.PutOptions{})
	if !errors.Is(err, broken) {
		t.Fatalf("Put whose body fails in part 2: %v", err)
	}
	openUploads("body failing in part 2")
	// The byte after the first part, which tells a single PutObject
	// from a multipart upload, comes with the error, a cut body's.
	_, err = st.Put(ctx, "big", io.MultiReader(bytes.NewReader(make([]byte, 5<<20)), &lastWithErr{b: 1, err: io.ErrUnexpectedEOF}), objstore.PutOptions{})
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("Put whose body fails with the byte after part 1: %v", err)
	}
	openUploads("body failing with the byte after part 1")

	cctx, cancel := context.WithCancel(ctx)
	pr, pw := io.Pipe()
	go func() {
		pw.Write(make([]byte, 6<<20))
		cancel()
		pw.Write(make([]byte, 1<<20))
		pw.Close()
	}()
	if _, err := st.Put(cctx, "big", pr, objstore.PutOptions{}); errcode.Of(err) != errcode.Canceled {
		t.Fatalf("Put canceled in part 2: %v, want CANCELED", err)
	}
	openUploads("canceled in part 2")

	// The loser read its whole body, so its fail-fast HEAD found nothing:
	// CompleteMultipartUpload's If-None-Match refused it.
	pr, pw = io.Pipe()
	lost := make(chan error, 1)
	go func() {
		_, err := st.Put(ctx, "big", pr, objstore.PutOptions{IfNoneMatch: true})
		lost <- err
	}()
	pw.Write(make([]byte, 6<<20))
	v, err := st.Put(ctx, "big", bytes.NewReader([]byte("winner")), objstore.PutOptions{IfNoneMatch: true})
	if err != nil {
		t.Fatal(err)
	}
	pw.Close()
	if err := <-lost; !objstore.IsPrecondition(err) {
		t.Fatalf("losing multipart create: %v, want PRECONDITION_FAILED", err)
	}
	ups, err := st.(*s3.Store).Client().ListMultipartUploads(ctx, &awss3.ListMultipartUploadsInput{Bucket: aws.String(pu.Host)})
	if err != nil || len(ups.Uploads) != 0 {
		t.Fatalf("after a lost multipart create: %d uploads left open, %v", len(ups.Uploads), err)
	}
	if info, err := st.Head(ctx, "big", ""); err != nil || info.Version != v || info.Size != 6 {
		t.Fatalf("after the race: %+v, %v; want the winner's version %s", info, err, v)
	}
}

// lastWithErr gives b as its last byte with err, and then io.EOF: a
// reader need not repeat an error, so one given with bytes must not be
// dropped.
type lastWithErr struct {
	b   byte
	err error
	n   int
}

func (r *lastWithErr) Read(p []byte) (int, error) {
	if r.n > 0 {
		return 0, io.EOF
	}
	if len(p) == 0 {
		return 0, nil
	}
	r.n, p[0] = 1, r.b
	return 1, r.err
}

// iotestErr is a reader that fails with err.
type iotestErr struct{ err error }

func (r iotestErr) Read([]byte) (int, error) { return 0, r.err }

// stallingProxy forwards to the gateway but answers every listing
// (ListObjectsV2, or ListObjectVersions) with a page that says more
// follows and gives nothing to continue from: no entry, no marker.
type stallingProxy struct {
	versions bool
	seen     atomic.Int32
	proxy    *httputil.ReverseProxy
}

func (p *stallingProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	switch {
	case r.Method == http.MethodGet && !p.versions && q.Get("list-type") == "2":
		p.seen.Add(1)
		io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?><ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><KeyCount>0</KeyCount><MaxKeys>1000</MaxKeys><IsTruncated>true</IsTruncated></ListBucketResult>`)
	case r.Method == http.MethodGet && p.versions && q.Has("versions"):
		p.seen.Add(1)
		io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?><ListVersionsResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><MaxKeys>1000</MaxKeys><IsTruncated>true</IsTruncated></ListVersionsResult>`)
	default:
		p.proxy.ServeHTTP(w, r)
	}
}

// A listing whose server says more follows but gives nothing to go on
// from is IO, after one request: List and ListSizes took it for the end
// (a part listing passed for the whole), DeletePrefix stopped as if all
// were deleted, and Versions asked the same page until its context ended.
func TestListingThatStallsIsRefused(t *testing.T) {
	raw := s3test.Start(t)
	target, _ := url.Parse(s3test.Endpoint())
	for _, versions := range []bool{false, true} {
		sp := &stallingProxy{versions: versions, proxy: &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			r.Out.Host = r.In.Host
		}}}
		srv := httptest.NewServer(sp)
		defer srv.Close()
		pu, _ := url.Parse(raw)
		q := pu.Query()
		q.Set("endpoint", srv.URL)
		pu.RawQuery = q.Encode()
		st := open(t, pu.String())
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		if _, err := st.Put(ctx, "jobs/p/a", strings.NewReader("x"), objstore.PutOptions{}); err != nil {
			t.Fatal(err)
		}
		calls := map[string]func() error{}
		if versions {
			calls["Versions"] = func() error { _, err := st.(objstore.VersionLister).Versions(ctx, "jobs/p/a", 10); return err }
			calls["DeletePrefix"] = func() error { return st.(objstore.Deleter).DeletePrefix(ctx, "jobs/p/") }
		} else {
			calls["List"] = func() error { _, err := st.List(ctx, "jobs/", "", 0); return err }
			calls["ListSizes"] = func() error { _, err := st.(objstore.SizeLister).ListSizes(ctx, "jobs/", "", 0); return err }
		}
		for name, call := range calls {
			sp.seen.Store(0)
			err := call()
			if errcode.Of(err) != errcode.IO || !strings.Contains(fmt.Sprint(err), "gave nothing to continue from") {
				t.Errorf("%s over a stalled listing: %v (code %s), want IO saying the listing stalled", name, err, errcode.Of(err))
			}
			if got := sp.seen.Load(); got != 1 {
				t.Errorf("%s asked the stalled listing %d times, want once", name, got)
			}
		}
	}
}
