package s3_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/objstore"
	"github.com/shardproof/shardproof/objstore/s3"
	"github.com/shardproof/shardproof/objstore/s3/s3test"
)

// wantNoBucket fails t unless err is NO_SUCH_BUCKET, exit 2, naming the
// bucket and saying more.
func wantNoBucket(t *testing.T, what string, err error, bucket, more string) {
	t.Helper()
	c := errcode.Of(err)
	if c != errcode.NoSuchBucket || c.Exit() != errcode.ExitUsage ||
		!strings.Contains(err.Error(), "bucket "+bucket+" does not exist") || !strings.Contains(err.Error(), more) {
		t.Errorf("%s: %s exit %d (%v), want NO_SUCH_BUCKET, exit 2, naming bucket %s and saying %q", what, c, c.Exit(), err, bucket, more)
	}
}

// bucketExists asks the gateway directly whether bucket exists.
func bucketExists(t *testing.T, bucket string) bool {
	t.Helper()
	_, err := s3test.Client(s3test.Endpoint()).HeadBucket(t.Context(), &awss3.HeadBucketInput{Bucket: aws.String(bucket)})
	if err == nil {
		return true
	}
	if strings.Contains(err.Error(), "StatusCode: 404") {
		return false
	}
	t.Fatalf("head bucket %s: %v", bucket, err)
	return false
}

// A store URL naming a bucket that does not exist is NO_SUCH_BUCKET,
// exit 2, naming the bucket and the endpoint, for a reader and a writer
// alike, and no bucket is created. It was STORE_UNAVAILABLE, exit 3,
// which scripts and engines (Slurm requeue, the Kubernetes pod failure
// policy) ran again and again.
func TestNoSuchBucketAtOpen(t *testing.T) {
	u := s3test.Start(t)
	pu, _ := url.Parse(u)
	pu.Host = "sp-no-such-bucket"
	for name, open := range map[string]func() (objstore.Store, error){
		"Open":   func() (objstore.Store, error) { return objstore.Open(t.Context(), pu.String()) },
		"Create": func() (objstore.Store, error) { return objstore.Create(t.Context(), pu.String()) },
	} {
		_, err := open()
		wantNoBucket(t, name, err, "sp-no-such-bucket", "at "+s3test.Endpoint())
		if bucketExists(t, "sp-no-such-bucket") {
			t.Fatalf("%s of a missing bucket created it", name)
		}
	}
}

// A bucket deleted under a running command is NO_SUCH_BUCKET for every
// request that follows, saying it existed at open, but a Head of a key's
// latest version (NOT_FOUND, unchecked: a missing key is routine). A
// HeadObject's 404 carries no body to say whether the version or the
// bucket is missing: a Head of a shard's version in a deleted bucket was
// NOT_FOUND, which a verification reports as VERSION_MISSING and its
// release INVALID (exit 1); the rest were STORE_UNAVAILABLE (exit 3).
func TestNoSuchBucketMidRun(t *testing.T) {
	u, bp, bucket := startBreakingProxy(t, "")
	st := open(t, u)
	ctx := t.Context()
	v, err := st.Put(ctx, "blobs/k", strings.NewReader("shard"), objstore.PutOptions{IfNoneMatch: true})
	if err != nil {
		t.Fatal(err)
	}
	// While the bucket is there, a missing version is NOT_FOUND (the
	// bucket's check passes), also when the check itself is refused (a
	// principal allowed the key but not the bucket's settings).
	if err := st.(objstore.Deleter).DeletePrefix(ctx, "blobs/"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Head(ctx, "blobs/k", v); !objstore.IsNotExist(err) {
		t.Fatalf("Head of a deleted version: %v, want NOT_FOUND", err)
	}
	isCheck := func(r *http.Request) bool { return r.URL.Query().Has("versioning") }
	bp.set(isCheck, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusForbidden)
		w.Write([]byte(`<?xml version="1.0" encoding="UTF-8"?><Error><Code>AccessDenied</Code><Message>Access Denied</Message></Error>`))
	})
	if _, err := st.Head(ctx, "blobs/k", v); !objstore.IsNotExist(err) {
		t.Fatalf("Head of a deleted version, bucket check refused: %v, want NOT_FOUND", err)
	}
	if bp.hitCount() != 1 {
		t.Fatalf("the bucket was checked %d times, want 1", bp.hitCount())
	}
	bp.set(isCheck, func(w http.ResponseWriter, r *http.Request) { bp.proxy.ServeHTTP(w, r) })
	if _, err := st.Head(ctx, "blobs/absent", ""); !objstore.IsNotExist(err) || bp.hitCount() != 0 {
		t.Fatalf("Head of an absent key: %v after %d bucket checks, want NOT_FOUND after none", err, bp.hitCount())
	}
	bp.set(nil, nil)

	if _, err := s3test.Client(s3test.Endpoint()).DeleteBucket(ctx, &awss3.DeleteBucketInput{Bucket: aws.String(bucket)}); err != nil {
		t.Fatal(err)
	}
	const since = "deleted since?"
	_, err = st.Head(ctx, "blobs/k", v)
	wantNoBucket(t, "Head of a version", err, bucket, since)
	if _, err := st.Head(ctx, "blobs/k", ""); !objstore.IsNotExist(err) {
		t.Errorf("Head of the latest version: %v, want NOT_FOUND (unchecked)", err)
	}
	_, err = st.Get(ctx, "blobs/k", v)
	wantNoBucket(t, "Get", err, bucket, since)
	_, err = st.Put(ctx, "blobs/new", strings.NewReader("x"), objstore.PutOptions{IfNoneMatch: true})
	wantNoBucket(t, "Put", err, bucket, since)
	_, err = st.List(ctx, "", "", 0)
	wantNoBucket(t, "List", err, bucket, since)
	_, err = st.(*s3.Store).Versions(ctx, "blobs/k", 10)
	wantNoBucket(t, "Versions", err, bucket, since)
	err = st.(objstore.Deleter).DeletePrefix(ctx, "jobs/")
	wantNoBucket(t, "DeletePrefix", err, bucket, since)
	if bucketExists(t, bucket) {
		t.Fatal("a request to the deleted bucket created it again")
	}
}

// A Head of a version whose 404 the bucket check cannot explain by a
// policy (the check refused for the request's credentials, not for the
// action) is STORE_DENIED: versitygw answers a HEAD signed with an
// access key it does not know (a user removed while a verification
// runs) 404, and the check then says XAdminUserNotFound. It was
// NOT_FOUND, which a verification reports as VERSION_MISSING and its
// release INVALID, though the version is there.
func TestHeadVersionWithRefusedCredentials(t *testing.T) {
	u, bp, _ := startBreakingProxy(t, "")
	st := open(t, u)
	ctx := t.Context()
	v, err := st.Put(ctx, "blobs/k", strings.NewReader("shard"), objstore.PutOptions{IfNoneMatch: true})
	if err != nil {
		t.Fatal(err)
	}
	bp.set(every, resign(bp, otherKey))
	_, err = st.Head(ctx, "blobs/k", v)
	if c := errcode.Of(err); c != errcode.StoreDenied || !strings.Contains(err.Error(), "check the credentials") {
		t.Fatalf("Head of a version signed with an access key the gateway does not know: %s (%v), want STORE_DENIED saying to check the credentials", c, err)
	}
	bp.set(nil, nil)
	if _, err := st.Head(ctx, "blobs/k", v); err != nil {
		t.Fatalf("Head of the version with the store's own credentials: %v", err)
	}
}
