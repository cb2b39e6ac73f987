package s3_test

import (
	"encoding/xml"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	awss3types "github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/objstore"
	"github.com/shardproof/shardproof/objstore/s3"
	"github.com/shardproof/shardproof/objstore/s3/s3test"
)

// every selects every request.
func every(*http.Request) bool { return true }

// resign passes a request on to the gateway with its Authorization
// header changed by f, as a client with other credentials would sign it.
func resign(bp *breakingProxy, f func(string) string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		r.Header.Set("Authorization", f(r.Header.Get("Authorization")))
		bp.proxy.ServeHTTP(w, r)
	}
}

// otherSecret changes the signature's last digit, as a wrong secret key
// would sign.
func otherSecret(a string) string {
	last := a[len(a)-1]
	if last == '0' {
		return a[:len(a)-1] + "1"
	}
	return a[:len(a)-1] + "0"
}

// otherKey names an access key the gateway does not know.
func otherKey(a string) string {
	return strings.Replace(a, "Credential="+s3test.AccessKey+"/", "Credential=nobody/", 1)
}

// Credentials or a region the server refuses are STORE_DENIED (exit 2,
// never retried by an engine), with what to check, and the request is
// sent once: they were STORE_UNAVAILABLE, which scripts and engines
// retry, at open, and after it IO, or NOT_FOUND for a read signed with
// an access key versitygw does not know (it answers 404).
func TestDenied(t *testing.T) {
	u, bp, _ := startBreakingProxy(t, "")
	ctx := t.Context()
	forward := func(w http.ResponseWriter, r *http.Request) { bp.proxy.ServeHTTP(w, r) }
	check := func(t *testing.T, what string, err error, want string) {
		t.Helper()
		if c := errcode.Of(err); c != errcode.StoreDenied || c.Exit() != errcode.ExitUsage || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %s exit %d (%v), want STORE_DENIED, exit 2, saying %q", what, c, c.Exit(), err, want)
		}
		if n := bp.hitCount(); n != 1 {
			t.Errorf("%s: the gateway saw %d requests, want 1 (a refusal is not retried)", what, n)
		}
	}
	for _, tc := range []struct {
		name, url, env, value, want string
	}{
		{"wrong secret key", u, "AWS_SECRET_ACCESS_KEY", "wrong", "check the credentials"},
		{"unknown access key", u, "AWS_ACCESS_KEY_ID", "nobody", "check the credentials"},
		{"wrong region", strings.Replace(u, "region=us-east-1", "region=eu-west-1", 1), "AWS_REGION", "eu-west-1", "another region than eu-west-1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(tc.env, tc.value)
			bp.set(every, forward)
			_, err := objstore.Open(ctx, tc.url)
			check(t, "Open", err, tc.want)
		})
	}

	bp.set(nil, nil)
	st := open(t, u)
	v, err := st.Put(ctx, "k", strings.NewReader("x"), objstore.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	bp.set(every, resign(bp, otherSecret))
	_, err = st.Put(ctx, "new", strings.NewReader("y"), objstore.PutOptions{IfNoneMatch: true})
	check(t, "Put signed with another secret", err, "check the credentials")
	bp.set(every, resign(bp, otherSecret))
	_, err = st.Head(ctx, "k", v)
	check(t, "Head signed with another secret", err, "check the credentials")
	bp.set(every, resign(bp, otherKey))
	_, err = st.Get(ctx, "absent", "")
	check(t, "Get signed with an unknown access key", err, "check the credentials")
	bp.set(every, resign(bp, otherKey))
	_, err = st.List(ctx, "", "", 0)
	check(t, "List signed with an unknown access key", err, "check the credentials")

	bp.set(nil, nil)
	if _, err := st.Head(ctx, "new", ""); !objstore.IsNotExist(err) {
		t.Fatalf("a refused Put wrote something: %v", err)
	}
}

// With no credentials anywhere (no environment variables, HOME without
// ~/.aws, and an instance metadata service that is disabled or refuses
// connections, as off EC2), Open is STORE_DENIED, exit 2, saying where
// credentials may be given, and sends the gateway nothing. It was
// STORE_UNAVAILABLE, exit 3, from the first request, after the SDK's
// retryer had asked IMDS again with each of its 5 attempts (12.6 s with
// a refused connection; 4.0 s now, the IMDS client's own retries). An
// AWS_PROFILE that no file defines is STORE_DENIED naming it.
func TestNoCredentials(t *testing.T) {
	u, bp, _ := startBreakingProxy(t, "")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String()
	ln.Close()
	for _, tc := range []struct {
		name string
		env  map[string]string
		want []string
	}{
		{"IMDS disabled", map[string]string{"AWS_EC2_METADATA_DISABLED": "true"}, []string{"no AWS credentials found", "AWS_ACCESS_KEY_ID", "AWS_PROFILE"}},
		{"IMDS unreachable", map[string]string{"AWS_EC2_METADATA_DISABLED": "", "AWS_EC2_METADATA_SERVICE_ENDPOINT": closed}, []string{"no AWS credentials found", "AWS_ACCESS_KEY_ID", "AWS_PROFILE"}},
		{"profile not defined", map[string]string{"AWS_PROFILE": "nosuch"}, []string{`AWS_PROFILE names profile "nosuch"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, k := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE"} {
				t.Setenv(k, "")
			}
			t.Setenv("HOME", t.TempDir())
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			bp.set(every, func(w http.ResponseWriter, r *http.Request) { bp.proxy.ServeHTTP(w, r) })
			_, err := objstore.Open(t.Context(), u)
			if c := errcode.Of(err); c != errcode.StoreDenied || c.Exit() != errcode.ExitUsage {
				t.Errorf("Open: %s exit %d (%v), want STORE_DENIED, exit 2", c, c.Exit(), err)
			}
			for _, w := range tc.want {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Errorf("Open: %v, want it to say %q", err, w)
				}
			}
			if n := bp.hitCount(); n != 0 {
				t.Errorf("the gateway saw %d requests, want none (nothing to sign them with)", n)
			}
		})
	}
}

// deleteRequest is the body of a DeleteObjects request.
type deleteRequest struct {
	XMLName xml.Name `xml:"Delete"`
	Objects []struct {
		Key       string `xml:"Key"`
		VersionID string `xml:"VersionId"`
	} `xml:"Object"`
}

// refuseDeleteOf answers a DeleteObjects as a bucket policy denying
// s3:DeleteObjectVersion on key would (S3 answers per key): the gateway
// deletes every other version of the request, and key's versions get an
// Error entry with code.
func refuseDeleteOf(t *testing.T, key, code string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var req deleteRequest
		if err := xml.NewDecoder(r.Body).Decode(&req); err != nil {
			t.Errorf("DeleteObjects body: %v", err)
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		bucket := strings.Trim(r.URL.Path, "/")
		var pass []awss3types.ObjectIdentifier
		var refused strings.Builder
		for _, o := range req.Objects {
			if o.Key == key {
				fmt.Fprintf(&refused, "<Error><Key>%s</Key><VersionId>%s</VersionId><Code>%s</Code><Message>injected %[3]s</Message></Error>", o.Key, o.VersionID, code)
				continue
			}
			pass = append(pass, awss3types.ObjectIdentifier{Key: aws.String(o.Key), VersionId: aws.String(o.VersionID)})
		}
		if len(pass) > 0 {
			out, err := s3test.Client(s3test.Endpoint()).DeleteObjects(r.Context(), &awss3.DeleteObjectsInput{
				Bucket: aws.String(bucket), Delete: &awss3types.Delete{Objects: pass, Quiet: aws.Bool(true)},
			})
			if err != nil || len(out.Errors) > 0 {
				t.Errorf("the gateway's DeleteObjects: %v, %+v", err, out)
			}
		}
		w.Header().Set("Content-Type", "application/xml")
		fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?><DeleteResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">%s</DeleteResult>`, refused.String())
	}
}

// versionsUnder lists the keys of every version under prefix in bucket.
func versionsUnder(t *testing.T, bucket, prefix string) []string {
	t.Helper()
	out, err := s3test.Client(s3test.Endpoint()).ListObjectVersions(t.Context(), &awss3.ListObjectVersionsInput{Bucket: aws.String(bucket), Prefix: aws.String(prefix)})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, v := range out.Versions {
		keys = append(keys, aws.ToString(v.Key))
	}
	return keys
}

// A DeletePrefix whose DeleteObjects the server refuses for some keys (a
// policy denying s3:DeleteObjectVersion there; S3 answers per key) is
// STORE_DENIED, exit 2, naming a refused key, and says how many versions
// it deleted, over every listing page: exactly those that are gone. It
// was IO, exit 3, naming no count. Another per-key error stays IO, with
// the count. Once the server allows it, DeletePrefix again deletes the
// rest.
func TestDeletePrefixRefusedKey(t *testing.T) {
	u, bp, bucket := startBreakingProxy(t, "")
	st := open(t, u)
	s3.SetVersionsPage(st.(*s3.Store), 2)
	ctx := t.Context()
	isDelete := func(r *http.Request) bool { return r.Method == http.MethodPost && r.URL.Query().Has("delete") }
	for _, tc := range []struct {
		code string
		want errcode.Code
	}{{"AccessDenied", errcode.StoreDenied}, {"InternalError", errcode.IO}} {
		t.Run(tc.code, func(t *testing.T) {
			for _, key := range []string{"jobs/p/a", "jobs/p/b", "jobs/p/b", "jobs/p/c"} {
				if _, err := st.Put(ctx, key, strings.NewReader(key), objstore.PutOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			bp.set(isDelete, refuseDeleteOf(t, "jobs/p/c", tc.code))
			err := st.(objstore.Deleter).DeletePrefix(ctx, "jobs/p/")
			left := versionsUnder(t, bucket, "jobs/p/")
			if c := errcode.Of(err); c != tc.want || !strings.Contains(err.Error(), "s3://"+bucket+"/jobs/p/c version ") ||
				!strings.Contains(err.Error(), "1 of 2 versions") || !strings.Contains(err.Error(), "3 versions under the prefix were deleted") {
				t.Errorf("DeletePrefix with jobs/p/c refused (%s): %s exit %d (%v), want %s naming jobs/p/c, 1 of 2 versions (the second page) not deleted, 3 deleted", tc.code, c, c.Exit(), err, tc.want)
			}
			if len(left) != 1 || left[0] != "jobs/p/c" {
				t.Errorf("versions left: %v, want jobs/p/c's", left)
			}
			if tc.want == errcode.StoreDenied && (errcode.Of(err).Exit() != errcode.ExitUsage || !strings.Contains(err.Error(), "s3:DeleteObjectVersion")) {
				t.Errorf("refused: exit %d (%v), want exit 2 naming s3:DeleteObjectVersion", errcode.Of(err).Exit(), err)
			}
			bp.set(nil, nil)
			if err := st.(objstore.Deleter).DeletePrefix(ctx, "jobs/p/"); err != nil {
				t.Fatalf("DeletePrefix once allowed: %v", err)
			}
			if left := versionsUnder(t, bucket, "jobs/p/"); len(left) != 0 {
				t.Fatalf("versions left once allowed: %v", left)
			}
		})
	}
}
