package coordinator

import (
	"context"
	"fmt"
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

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/objstore"
	"github.com/shardproof/shardproof/objstore/file"
	"github.com/shardproof/shardproof/objstore/s3/s3test"
)

// ListJobs (what `store prune-jobs` reads first) counts every job's
// objects, bytes and newest write from the listing alone: on S3 a
// request per 1,000 keys, where it sent a HeadObject per key for a
// version id it does not use (2,012 of them for two jobs of 1,005 files).
// A key whose latest version is a delete marker is not counted.
func TestListJobsS3(t *testing.T) {
	raw := s3test.Start(t)
	target, _ := url.Parse(s3test.Endpoint())
	proxy := &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
		r.SetURL(target)
		r.Out.Host = r.In.Host // the request is signed for the proxy's host
	}}
	var heads, lists atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodHead:
			heads.Add(1)
		case r.Method == http.MethodGet && r.URL.Query().Get("list-type") == "2":
			lists.Add(1)
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	pu, _ := url.Parse(raw)
	q := pu.Query()
	q.Set("endpoint", srv.URL)
	pu.RawQuery = q.Encode()
	s, err := objstore.Open(t.Context(), pu.String())
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()

	a, b := manifest.Sum([]byte("job a")), manifest.Sum([]byte("job b"))
	start := time.Now()
	for i := range 40 {
		body := strings.Repeat("x", i)
		if _, err := s.Put(ctx, fmt.Sprintf("%smap/%d/r0.arrow", jobPrefix(a), i), strings.NewReader(body), objstore.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range []string{"map/0/commit.json", "gone"} {
		if _, err := s.Put(ctx, jobPrefix(b)+k, strings.NewReader("12345"), objstore.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// A delete marker on top of b's second key, as an expiry rule leaves.
	del := &awss3.DeleteObjectInput{Bucket: aws.String(pu.Host), Key: aws.String(jobPrefix(b) + "gone")}
	if _, err := s3test.Client(s3test.Endpoint()).DeleteObject(ctx, del); err != nil {
		t.Fatal(err)
	}
	heads.Store(0)
	lists.Store(0)
	jobs, err := ListJobs(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 2 {
		t.Fatalf("%d jobs, want 2: %+v", len(jobs), jobs)
	}
	byPlan := map[manifest.Digest]JobScratch{jobs[0].Plan: jobs[0], jobs[1].Plan: jobs[1]}
	if j := byPlan[a]; j.Objects != 40 || j.Bytes != 40*39/2 || j.Newest.Before(start.Add(-time.Minute)) {
		t.Errorf("job a: %+v, want 40 objects of %d bytes written since %s", j, 40*39/2, start)
	}
	if j := byPlan[b]; j.Objects != 1 || j.Bytes != 5 {
		t.Errorf("job b: %+v, want 1 object of 5 bytes (the other's latest is a delete marker)", j)
	}
	if n := heads.Load(); n != 0 {
		t.Errorf("ListJobs sent %d HeadObject requests for 41 keys, want none", n)
	}
	if n := lists.Load(); n != 1 {
		t.Errorf("ListJobs sent %d ListObjectsV2 requests for 41 keys, want 1", n)
	}
}

// hugeSizes is the file store whose listings report every object at
// size bytes.
type hugeSizes struct {
	objstore.Store
	size int64
}

func (h hugeSizes) List(ctx context.Context, prefix, after string, limit int) (objstore.ListPage, error) {
	page, err := h.Store.List(ctx, prefix, after, limit)
	for i := range page.Objects {
		page.Objects[i].Size = h.size
	}
	return page, err
}

// A store whose listing sizes for one job sum past an int64 (three
// objects of 2^62-1 bytes) fails ListJobs, and the prune that reads it,
// with IO and deletes nothing, where the job's Bytes wrapped to a
// negative figure; sizes that fit (two of them) are summed, and a
// negative one is refused too.
func TestListJobsSizesPastInt64(t *testing.T) {
	fs, err := file.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	pd := manifest.Sum([]byte("job"))
	for _, k := range []string{"map/0/r0.arrow", "map/1/r0.arrow"} {
		if _, err := fs.Put(ctx, jobPrefix(pd)+k, strings.NewReader("x"), objstore.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	const huge = 1<<62 - 1
	jobs, err := ListJobs(ctx, hugeSizes{fs, huge})
	if err != nil || len(jobs) != 1 || jobs[0].Bytes != 2*huge || jobs[0].Objects != 2 {
		t.Fatalf("two objects of 2^62-1 bytes: %+v, %v; want one job of 2^63-2 bytes", jobs, err)
	}
	if _, err := fs.Put(ctx, jobPrefix(pd)+"map/2/r0.arrow", strings.NewReader("x"), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, size := range []int64{huge, -1} {
		jobs, err := ListJobs(ctx, hugeSizes{fs, size})
		if errcode.Of(err) != errcode.IO || !strings.Contains(err.Error(), pd.String()) {
			t.Fatalf("objects of %d bytes: %+v, %v; want IO naming the job", size, jobs, err)
		}
		err = PruneJobs(ctx, hugeSizes{fs, size}, PruneOptions{}, func(PrunedJob) error { return nil })
		if errcode.Of(err) != errcode.IO {
			t.Fatalf("prune of objects of %d bytes: %v; want IO", size, err)
		}
	}
	if page, err := fs.List(ctx, "", "", 0); err != nil || len(page.Objects) != 3 {
		t.Fatalf("a refused prune left %+v, %v; want the job's 3 keys", page, err)
	}
}
