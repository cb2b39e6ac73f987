package s3

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/internal/verifyread"
	"github.com/shardproof/shardproof/objstore"
)

func init() {
	objstore.Register("s3", func(ctx context.Context, u *url.URL, _ bool) (objstore.Store, error) {
		o, err := ParseURL(u)
		if err != nil {
			return nil, err
		}
		return Open(ctx, o)
	})
}

// Defaults.
const (
	DefaultMultipartThreshold = 16 << 20
	MinPartSize               = 5 << 20 // S3's minimum for every part but the last
	MaxPartSize               = 5 << 30 // S3's maximum for a part and for a single PutObject
	maxParts                  = 10000   // S3's limit per upload
	listHeadConcurrency       = 8
	conflictRetries           = 5
	// DefaultTimeout bounds the silence of a connection while a request
	// is in flight (as boto3's 60 s read_timeout does).
	DefaultTimeout = 60 * time.Second
)

// Options configure a Store.
type Options struct {
	Bucket string
	// Prefix, if non-empty, is prepended (with a '/') to every key.
	Prefix string
	// Endpoint is a non-AWS S3 endpoint URL such as http://127.0.0.1:7070;
	// empty means the SDK's resolution (AWS, or AWS_ENDPOINT_URL_S3).
	Endpoint string
	// PathStyle addresses the bucket in the path rather than the host name.
	PathStyle bool
	// Region signs requests; empty means the SDK's resolution, then us-east-1.
	Region string
	// MultipartThreshold: bodies larger than this many bytes are uploaded
	// in parts of this size (each Put buffers one part). Zero means
	// DefaultMultipartThreshold; values below MinPartSize are raised to
	// it, values above MaxPartSize lowered to it.
	MultipartThreshold int64
	// Timeout is the longest a request may go without progress: the
	// server accepting none of the bytes sent, or sending none of the
	// answer (its headers, or the next bytes of a body being read). A
	// transfer that keeps moving is never cut. Zero means DefaultTimeout,
	// negative no bound. Without one, a server that accepts connections
	// but stops answering (a frozen process, a paused VM, a black-holed
	// path) held a command for good.
	Timeout time.Duration
}

// ParseURL reads Options from an s3://bucket/prefix?… URL.
func ParseURL(u *url.URL) (Options, error) {
	shown := redact(u)
	bad := func(format string, args ...any) (Options, error) {
		return Options{}, errcode.New(errcode.Usage, "store URL %q: %s", shown, fmt.Sprintf(format, args...))
	}
	if u.Scheme != "s3" {
		return bad("scheme is not s3")
	}
	if u.User != nil {
		return bad("credentials do not belong in the URL; use the AWS credential chain")
	}
	o := Options{Bucket: u.Host, Prefix: strings.Trim(u.Path, "/")}
	if o.Bucket == "" {
		return bad("no bucket (want s3://bucket/prefix)")
	}
	if o.Prefix != "" {
		if err := objstore.ValidateKey(o.Prefix); err != nil {
			return bad("prefix: %v", err)
		}
	}
	pathStyleSet := false
	for k, vs := range u.Query() {
		v := vs[len(vs)-1]
		switch k {
		case "endpoint":
			e, err := url.Parse(v)
			switch {
			case err != nil || (e.Scheme != "http" && e.Scheme != "https") || e.Host == "":
				return bad("endpoint: want http://host:port or https://host:port")
			case e.User != nil:
				// It would be printed in logs and task command lines.
				return bad("endpoint: credentials do not belong in the URL; use the AWS credential chain")
			}
			o.Endpoint = v
		case "region":
			o.Region = v
		case "path_style":
			b, err := strconv.ParseBool(v)
			if err != nil {
				return bad("path_style=%q: want true or false", v)
			}
			o.PathStyle, pathStyleSet = b, true
		case "timeout":
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				return bad("timeout=%q: want a positive duration such as 60s or 5m", v)
			}
			o.Timeout = d
		case "multipart_threshold":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n <= 0 || n > MaxPartSize {
				// Above 5 GiB, S3 refuses the single PUT and the part, and
				// each Put buffered that much memory first.
				return bad("multipart_threshold=%q: want a byte count from 1 to %d (5 GiB, S3's largest part)", v, int64(MaxPartSize))
			}
			o.MultipartThreshold = n
		default:
			return bad("unknown option %q", k)
		}
	}
	if !pathStyleSet && (o.Endpoint != "" || os.Getenv("AWS_ENDPOINT_URL_S3") != "" || os.Getenv("AWS_ENDPOINT_URL") != "") {
		// Gateways on a host:port rarely have wildcard DNS for buckets.
		o.PathStyle = true
	}
	return o, nil
}

// redact returns u as it may be shown: without the password of its own
// user info or of an endpoint option's.
func redact(u *url.URL) string {
	c := *u
	q := c.Query()
	changed := false
	for i, v := range q["endpoint"] {
		if e, err := url.Parse(v); err == nil && e.User != nil {
			q["endpoint"][i], changed = e.Redacted(), true
		}
	}
	if changed {
		c.RawQuery = q.Encode()
	}
	return c.Redacted()
}

// Store is an objstore.Store on a versioned S3 bucket.
type Store struct {
	client    *awss3.Client
	bucket    string
	region    string // the signing region
	base      string // Prefix + "/" or ""
	threshold int64
	timeout   time.Duration // Options.Timeout in force; <= 0: none
	where     string        // "at <endpoint>" or "in AWS region <region>", for messages
	// versionsPage, if > 0, is the page size DeletePrefix asks
	// ListObjectVersions for (tests; the server's default is 1,000).
	versionsPage int32
}

var _ objstore.Store = (*Store)(nil)

// Open connects to the bucket and checks that versioning is Enabled. An
// unreachable endpoint is STORE_UNAVAILABLE; a missing bucket is
// NO_SUCH_BUCKET (never created); credentials, a region or a policy the
// server refuses are STORE_DENIED; versioning off or suspended is
// VERSIONING_OFF.
func Open(ctx context.Context, o Options) (*Store, error) {
	loadOpts := []func(*config.LoadOptions) error{config.WithRetryMaxAttempts(5)}
	if o.Region != "" {
		loadOpts = append(loadOpts, config.WithRegion(o.Region))
	}
	cfg, err := config.LoadDefaultConfig(ctx, loadOpts...)
	var noProfile config.SharedConfigProfileNotExistError
	switch {
	case errors.As(err, &noProfile):
		return nil, errcode.Wrap(errcode.StoreDenied, err, "s3 store %s: AWS_PROFILE names profile %q, which no AWS config or credentials file defines (%s); "+
			"name a profile they hold, or unset AWS_PROFILE; retrying does not help", o.Bucket, noProfile.Profile, strings.Join(noProfile.Filename, ", "))
	case err != nil:
		return nil, errcode.Wrap(errcode.StoreUnavailable, err, "s3 store %s: AWS configuration", o.Bucket)
	}
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	timeout := o.Timeout
	if timeout == 0 {
		timeout = DefaultTimeout
	}
	client := awss3.NewFromConfig(cfg, func(so *awss3.Options) {
		// On the configuration's own client (AWS_CA_BUNDLE sets its
		// roots); one of the caller's making is left as it is.
		hc, ok := so.HTTPClient.(*awshttp.BuildableClient)
		if so.HTTPClient == nil {
			hc, ok = awshttp.NewBuildableClient(), true
		}
		if ok && timeout > 0 {
			so.HTTPClient = hc.WithTransportOptions(func(tr *http.Transport) {
				dial := tr.DialContext
				tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
					c, err := dial(ctx, network, addr)
					if err != nil {
						return nil, err
					}
					return &silenceConn{Conn: c, limit: timeout}, nil
				}
			})
		}
		if o.Endpoint != "" {
			so.BaseEndpoint = aws.String(o.Endpoint)
		}
		so.UsePathStyle = o.PathStyle
		// Composite (multipart) checksums cannot be validated on GET; the
		// verifying reader checks every byte anyway, so the warning is noise.
		so.DisableLogOutputChecksumValidationSkipped = true
	})
	s := &Store{client: client, bucket: o.Bucket, region: cfg.Region, threshold: o.MultipartThreshold, timeout: timeout,
		where: "in AWS region " + cfg.Region}
	if o.Endpoint != "" {
		s.where = "at " + o.Endpoint
	}
	if o.Prefix != "" {
		s.base = o.Prefix + "/"
	}
	if s.threshold == 0 {
		s.threshold = DefaultMultipartThreshold
	}
	s.threshold = min(max(s.threshold, MinPartSize), MaxPartSize)

	if err := s.retrieveCredentials(ctx, cfg.Credentials); err != nil {
		return nil, err
	}
	out, err := client.GetBucketVersioning(ctx, &awss3.GetBucketVersioningInput{Bucket: aws.String(o.Bucket)})
	if err != nil {
		if ctx.Err() != nil {
			return nil, errcode.Wrap(errcode.Canceled, err, "s3 store %s", o.Bucket)
		}
		if d := s.denied(err, "open", ""); d != nil {
			return nil, d
		}
		if _, code := answer(err); code == "NoSuchBucket" {
			return nil, s.noBucket(err, "open", "")
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return nil, errcode.Wrap(errcode.StoreUnavailable, err, "s3 store %s: get bucket versioning: the server answered nothing for %s (the URL's timeout option)", o.Bucket, timeout)
		}
		return nil, errcode.Wrap(errcode.StoreUnavailable, err, "s3 store %s: get bucket versioning", o.Bucket)
	}
	if out.Status != types.BucketVersioningStatusEnabled {
		status := string(out.Status)
		if status == "" {
			status = "never enabled"
		}
		return nil, errcode.New(errcode.VersioningOff,
			"s3 bucket %s: versioning is %s; shardproof needs Enabled so that every version stays readable: "+
				"enable versioning on bucket %s (aws s3api put-bucket-versioning --bucket %s --versioning-configuration Status=Enabled, "+
				"or the gateway's equivalent) and run the command again",
			o.Bucket, status, o.Bucket, o.Bucket)
	}
	return s, nil
}

// noCredentialsHint says where the AWS credential chain looks.
const noCredentialsHint = "give them in the environment (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, with AWS_SESSION_TOKEN for temporary ones), " +
	"as a profile (AWS_PROFILE, in ~/.aws/credentials or ~/.aws/config, or the files AWS_SHARED_CREDENTIALS_FILE and AWS_CONFIG_FILE name), " +
	"as a web identity (AWS_ROLE_ARN and AWS_WEB_IDENTITY_TOKEN_FILE, as EKS sets them), or run where the instance metadata service gives a role " +
	"(off EC2, AWS_EC2_METADATA_DISABLED=true skips asking it)"

// retrieveCredentials gets the credentials before the first request
// (the provider caches them for the requests that follow). When the
// chain found none configured (no environment variables, no profile, no
// web identity) its last resort is the instance metadata service
// (IMDS), which off EC2 gives none: that is STORE_DENIED, saying where
// credentials may be given. It was STORE_UNAVAILABLE, exit 3, from the
// first request, after the SDK's retryer had asked IMDS again with each
// of its 5 attempts (12 s when IMDS refuses connections). IMDS failing
// on its side (HTTP 5xx, throttling) stays STORE_UNAVAILABLE; a
// configured provider's failure is STORE_DENIED when a server refused it
// (STS denying an assume-role) and STORE_UNAVAILABLE otherwise.
func (s *Store) retrieveCredentials(ctx context.Context, creds aws.CredentialsProvider) error {
	if creds == nil {
		return nil
	}
	_, err := creds.Retrieve(ctx)
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return errcode.Wrap(errcode.Canceled, err, "s3 store %s: get credentials", s.bucket)
	}
	var re interface{ HTTPStatusCode() int }
	imdsFailing := errors.As(err, &re) && (re.HTTPStatusCode() >= 500 || re.HTTPStatusCode() == http.StatusTooManyRequests)
	if src, ok := creds.(aws.CredentialProviderSource); ok && !imdsFailing {
		if ss := src.ProviderSources(); len(ss) == 1 && ss[0] == aws.CredentialSourceIMDS {
			return errcode.Wrap(errcode.StoreDenied, err, "s3 store %s: no AWS credentials found: none in the environment, no profile, "+
				"and the instance metadata service gave no role; %s; retrying does not help", s.bucket, noCredentialsHint)
		}
	}
	if d := s.denied(err, "open", ""); d != nil {
		return d
	}
	return errcode.Wrap(errcode.StoreUnavailable, err, "s3 store %s: get credentials", s.bucket)
}

// Client returns the underlying S3 client (for tests and tools).
func (s *Store) Client() *awss3.Client { return s.client }

func (s *Store) objKey(key string) *string { return aws.String(s.base + key) }

// Put implements objstore.Store.
func (s *Store) Put(ctx context.Context, key string, body io.Reader, opts objstore.PutOptions) (objstore.Version, error) {
	if err := objstore.ValidateKey(key); err != nil {
		return "", err
	}
	body = objstore.ContextReader(ctx, body)
	part := newPartBuf(s.threshold, opts.Size)
	ended, err := part.fill(body)
	if err != nil {
		return "", s.readErr(key, err)
	}
	if !ended {
		// A whole part: one byte more makes the body a multipart upload.
		var one [1]byte
		n, err := readFull(body, one[:])
		switch {
		case n == 0 && err == io.EOF:
			ended = true
		case err != nil && err != io.EOF:
			// Even with the byte: the body failed.
			return "", s.readErr(key, err)
		default:
			body = io.MultiReader(bytes.NewReader(one[:]), body)
		}
	}
	if ended {
		return s.putSingle(ctx, key, part, opts)
	}
	return s.putMultipart(ctx, key, part, body, opts)
}

func (s *Store) readErr(key string, err error) error {
	if errcode.Of(err) == errcode.Internal {
		return errcode.Wrap(errcode.IO, err, "put %s: read body", key)
	}
	return err
}

// headBeforeCreate is the body size from which a conditional single
// PutObject first asks whether the key exists: a HEAD is little beside
// such an upload, and the SDK sends a body this large with
// "Expect: 100-continue" (from 2 MiB), which a server may answer with a
// 412 and a closed connection once the body is on its way.
const headBeforeCreate = 1 << 20

func (s *Store) putSingle(ctx context.Context, key string, part *partBuf, opts objstore.PutOptions) (objstore.Version, error) {
	sum := part.sum(nil)
	if opts.SHA256 != ([32]byte{}) && sum != opts.SHA256 {
		return "", &verifyread.DigestMismatchError{Key: key, Want: opts.SHA256, Got: sum}
	}
	if opts.IfNoneMatch && part.n >= headBeforeCreate {
		// A server may refuse the create of an existing key before it
		// has read the body, and close the connection under the rest
		// (versitygw does): the SDK saw a connection reset, not the
		// 412, retried it alike, and the create ended STORE_UNAVAILABLE
		// (16 of 40 times for 12 MiB). Fail fast as putMultipart does;
		// the If-None-Match below remains the atomic check.
		if _, err := s.Head(ctx, key, ""); err == nil {
			return "", fmt.Errorf("put %s: %w", key, objstore.ErrPreconditionFailed)
		} else if !objstore.IsNotExist(err) {
			return "", err
		}
	}
	in := &awss3.PutObjectInput{
		Bucket:            aws.String(s.bucket),
		Key:               s.objKey(key),
		ChecksumAlgorithm: types.ChecksumAlgorithmSha256,
		ChecksumSHA256:    aws.String(base64.StdEncoding.EncodeToString(sum[:])),
		ContentLength:     aws.Int64(part.n),
	}
	if opts.IfNoneMatch {
		in.IfNoneMatch = aws.String("*")
	}
	for attempt := 0; ; attempt++ {
		in.Body = part.reader()
		out, err := s.client.PutObject(ctx, in)
		if err == nil {
			return s.version(key, out.VersionId)
		}
		if !isConflict(err) || attempt == conflictRetries {
			return "", s.mapErr(ctx, err, "put", key, "")
		}
		slog.Debug("s3: conditional write conflict, retrying", "bucket", s.bucket, "key", s.base+key, "attempt", attempt+1)
		if err := sleep(ctx, attempt); err != nil {
			return "", s.mapErr(ctx, err, "put", key, "")
		}
	}
}

// putMultipart uploads part, already filled with the body's first part,
// and the rest of body, in parts of s.threshold bytes.
func (s *Store) putMultipart(ctx context.Context, key string, part *partBuf, body io.Reader, opts objstore.PutOptions) (objstore.Version, error) {
	if opts.IfNoneMatch {
		// Fail fast before uploading gigabytes; the atomic check is the
		// If-None-Match on CompleteMultipartUpload below.
		if _, err := s.Head(ctx, key, ""); err == nil {
			return "", fmt.Errorf("put %s: %w", key, objstore.ErrPreconditionFailed)
		} else if !objstore.IsNotExist(err) {
			return "", err
		}
	}
	created, err := s.client.CreateMultipartUpload(ctx, &awss3.CreateMultipartUploadInput{
		Bucket:            aws.String(s.bucket),
		Key:               s.objKey(key),
		ChecksumAlgorithm: types.ChecksumAlgorithmSha256,
	})
	if err != nil {
		return "", s.mapErr(ctx, err, "put", key, "")
	}
	completed := false
	defer func() {
		if !completed {
			// The caller's context may be canceled; the abort must still run.
			actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			_, err := s.client.AbortMultipartUpload(actx, &awss3.AbortMultipartUploadInput{
				Bucket: aws.String(s.bucket), Key: s.objKey(key), UploadId: created.UploadId,
			})
			if err != nil {
				// The parts stay billed until a lifecycle rule removes them.
				slog.Warn("s3: abort multipart upload failed", "bucket", s.bucket, "key", s.base+key,
					"uploadId", aws.ToString(created.UploadId), "code", errcode.Of(s.mapErr(actx, err, "abort", key, "")), "err", err)
			}
		}
	}()
	whole := sha256.New()
	size := int64(0)
	var parts []types.CompletedPart
	for num := int32(1); ; num++ {
		ended := false
		if num > 1 {
			var err error
			if ended, err = part.fill(body); err != nil {
				return "", s.readErr(key, err)
			}
			if part.n == 0 {
				break
			}
		}
		if num > maxParts {
			return "", errcode.New(errcode.IO, "put %s: body exceeds %d parts of %d bytes", key, maxParts, s.threshold)
		}
		size += part.n
		psum := part.sum(whole)
		pb64 := base64.StdEncoding.EncodeToString(psum[:])
		out, err := s.client.UploadPart(ctx, &awss3.UploadPartInput{
			Bucket:            aws.String(s.bucket),
			Key:               s.objKey(key),
			UploadId:          created.UploadId,
			PartNumber:        aws.Int32(num),
			Body:              part.reader(),
			ContentLength:     aws.Int64(part.n),
			ChecksumAlgorithm: types.ChecksumAlgorithmSha256,
			ChecksumSHA256:    aws.String(pb64),
		})
		if err != nil {
			return "", s.mapErr(ctx, err, "put", key, "")
		}
		parts = append(parts, types.CompletedPart{ETag: out.ETag, PartNumber: aws.Int32(num), ChecksumSHA256: aws.String(pb64)})
		if ended { // short final part
			break
		}
	}
	var sum [32]byte
	whole.Sum(sum[:0])
	if opts.SHA256 != ([32]byte{}) && sum != opts.SHA256 {
		return "", &verifyread.DigestMismatchError{Key: key, Want: opts.SHA256, Got: sum}
	}
	in := &awss3.CompleteMultipartUploadInput{
		Bucket:          aws.String(s.bucket),
		Key:             s.objKey(key),
		UploadId:        created.UploadId,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: parts},
	}
	if opts.IfNoneMatch {
		in.IfNoneMatch = aws.String("*")
	}
	for attempt := 0; ; attempt++ {
		out, err := s.client.CompleteMultipartUpload(ctx, in)
		if err == nil {
			completed = true
			if out.VersionId == nil {
				return s.completedVersion(ctx, key, aws.ToString(out.ETag), size)
			}
			return s.version(key, out.VersionId)
		}
		if !isConflict(err) || attempt == conflictRetries {
			return "", s.mapErr(ctx, err, "put", key, "")
		}
		slog.Debug("s3: conditional write conflict, retrying", "bucket", s.bucket, "key", s.base+key, "attempt", attempt+1)
		if err := sleep(ctx, attempt); err != nil {
			return "", s.mapErr(ctx, err, "put", key, "")
		}
	}
}

// completedVersion finds the version a CompleteMultipartUpload created
// when its answer names none: a Complete sent again by the SDK's retryer,
// after the answer to the first was lost (a reset connection, a silent
// server), is answered 200 with the ETag but without the version id
// (versitygw; AWS alike). The newest version of key with that ETag and
// size is the upload's: its ETag is a digest of its parts' digests. None
// means the server does not version the key after all.
func (s *Store) completedVersion(ctx context.Context, key, etag string, size int64) (objstore.Version, error) {
	full := s.base + key
	in := &awss3.ListObjectVersionsInput{Bucket: aws.String(s.bucket), Prefix: aws.String(full)}
	for {
		page, err := s.client.ListObjectVersions(ctx, in)
		if err != nil {
			return "", s.mapErr(ctx, err, "list versions", key, "")
		}
		for _, v := range page.Versions {
			if aws.ToString(v.Key) == full && strings.Trim(aws.ToString(v.ETag), `"`) == strings.Trim(etag, `"`) && aws.ToInt64(v.Size) == size {
				return s.version(key, v.VersionId)
			}
		}
		if !aws.ToBool(page.IsTruncated) {
			return s.version(key, nil)
		}
		if err := s.advance(in, page, key); err != nil {
			return "", err
		}
	}
}

// version turns a returned VersionId into a Version; a server that returns
// none is not versioning (suspended since Open checked it), and the write
// cannot be named later.
func (s *Store) version(key string, id *string) (objstore.Version, error) {
	if id == nil || *id == "" || *id == "null" {
		return "", errcode.New(errcode.VersioningOff,
			"put s3://%s/%s%s: the server returned no version id: bucket %s no longer versions its objects (versioning suspended since the store was opened?), "+
				"so the object written has no version to name and may have replaced the key's latest bytes; enable versioning on bucket %s again "+
				"(aws s3api put-bucket-versioning --bucket %s --versioning-configuration Status=Enabled) and run the command again",
			s.bucket, s.base, key, s.bucket, s.bucket, s.bucket)
	}
	return objstore.Version(*id), nil
}

func versionID(v objstore.Version) *string {
	if v == "" {
		return nil
	}
	return aws.String(string(v))
}

// Get implements objstore.Store. The reader it returns resumes a body
// whose connection is lost or goes silent (STORE_UNAVAILABLE) with a
// ranged GetObject from the first byte not yet delivered, at most
// MaxBodyResumes times per body: a version is immutable, so the bytes
// that follow are the object's. A resumed response is used only if it
// is the same object: the version the first response named (a read of
// the latest version pins it too, so that a version written meanwhile
// is not spliced in), the same ETag, and a Content-Range starting at the
// offset of an object of the same size. A read of the latest version of
// an unversioned object (no version id in the answer) is resumed on a
// matching ETag alone, and not at all without one.
func (s *Store) Get(ctx context.Context, key string, v objstore.Version) (io.ReadCloser, error) {
	if err := objstore.ValidateKey(key); err != nil {
		return nil, err
	}
	out, err := s.client.GetObject(ctx, &awss3.GetObjectInput{
		Bucket: aws.String(s.bucket), Key: s.objKey(key), VersionId: versionID(v),
	})
	if err != nil {
		return nil, s.mapErr(ctx, err, "get", key, v)
	}
	b := &body{rc: out.Body, ctx: ctx, s: s, key: key, v: v, pin: v,
		etag: strings.Trim(aws.ToString(out.ETag), `"`), size: -1}
	if id := aws.ToString(out.VersionId); id != "" {
		b.pin = objstore.Version(id)
	}
	if out.ContentLength != nil {
		b.size = *out.ContentLength
	}
	return b, nil
}

// MaxBodyResumes is how many times in a row one Get's body is resumed
// after its connection is lost before the read fails (STORE_UNAVAILABLE).
// A resume after at least ResumeProgress bytes since the one before
// starts the count again, so a large body on a link that drops now and
// then is read to its end, while one that stalls fails after a few
// tries (and no body is resumed more than MaxBodyResumes more times than
// its size in ResumeProgress units).
const MaxBodyResumes = 3

// ResumeProgress is the progress since the last resume (or the start)
// that starts MaxBodyResumes' count again.
const ResumeProgress = 256 << 10

// body is a GetObject body whose read errors carry a code, as the
// request's own do: CANCELED once the caller's context is done, else
// STORE_UNAVAILABLE for a connection lost or silent (Options.Timeout),
// IO for the rest. The SDK's were bare, and callers that keep the code
// of a read error said INTERNAL. A STORE_UNAVAILABLE is first resumed
// (Store.Get). Its error is sticky.
type body struct {
	rc      io.ReadCloser
	ctx     context.Context
	s       *Store
	key     string
	v       objstore.Version // as asked for; "" is the latest
	pin     objstore.Version // the version the first answer named, else v
	etag    string           // the first answer's, unquoted
	size    int64            // the object's size; -1 unknown
	off     int64            // bytes delivered
	resumes int              // resumes in a row, each after less than ResumeProgress
	resumed int64            // b.off at the last resume
	err     error
}

func (b *body) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	if err := b.ctx.Err(); err != nil {
		// The transport may still hold bytes it received before the
		// caller gave up; a read after that is CANCELED all the same.
		b.err = b.s.mapBodyErr(b.ctx, err, b.key, b.v)
		return 0, b.err
	}
	n, err := b.rc.Read(p)
	b.off += int64(n)
	if err == nil || err == io.EOF {
		if err == io.EOF {
			b.err = err
		}
		return n, err
	}
	err = b.s.mapBodyErr(b.ctx, err, b.key, b.v)
	if b.off-b.resumed >= ResumeProgress {
		b.resumes = 0
	}
	for errcode.Of(err) == errcode.StoreUnavailable && b.resumes < MaxBodyResumes {
		if b.size >= 0 && b.off >= b.size {
			// Every byte arrived; only the end of the answer was lost.
			b.err = io.EOF
			return n, b.err
		}
		var again error
		if again = b.resume(err); again == nil {
			if n == 0 {
				return b.Read(p)
			}
			return n, nil
		}
		if errcode.Of(again) == errcode.Canceled {
			err = again
			break
		}
		if errcode.Of(again) != errcode.StoreUnavailable {
			// Not the same object, or no longer there: the read stays
			// the connection failure it was.
			err = fmt.Errorf("%w (not resumed: %v)", err, again)
			break
		}
		err = again
	}
	b.err = err
	return n, err
}

// resume replaces the broken body, whose error was cause, by a ranged
// GetObject of the same object from b.off.
func (b *body) resume(cause error) error {
	b.resumes++
	b.resumed = b.off
	slog.Warn("s3: resuming a body read", "bucket", b.s.bucket, "key", b.s.base+b.key, "version", string(b.pin),
		"offset", b.off, "resume", b.resumes, "code", errcode.Of(cause), "err", cause)
	b.rc.Close()
	b.rc = io.NopCloser(strings.NewReader(""))
	if err := sleep(b.ctx, b.resumes-1); err != nil {
		return b.s.mapErr(b.ctx, err, "get", b.key, b.v)
	}
	if b.pin == "" && b.etag == "" {
		return errcode.New(errcode.IO, "s3 get %s: the first answer named neither a version nor an ETag", b.key)
	}
	in := &awss3.GetObjectInput{
		Bucket: aws.String(b.s.bucket), Key: b.s.objKey(b.key), VersionId: versionID(b.pin),
		Range: aws.String("bytes=" + strconv.FormatInt(b.off, 10) + "-"),
	}
	out, err := b.s.client.GetObject(b.ctx, in, func(o *awss3.Options) {
		// A server that sent the whole object's checksum with a range
		// would fail the SDK's check of it; the caller's verifying
		// reader checks every byte of the object anyway.
		o.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
	})
	if err != nil {
		return b.s.mapErr(b.ctx, err, "get", b.key, b.pin)
	}
	start, total, ok := contentRange(aws.ToString(out.ContentRange))
	etag := strings.Trim(aws.ToString(out.ETag), `"`)
	var bad string
	switch {
	case b.pin != "" && aws.ToString(out.VersionId) != "" && aws.ToString(out.VersionId) != string(b.pin):
		bad = fmt.Sprintf("answer is version %s", aws.ToString(out.VersionId))
	case etag != b.etag:
		bad = fmt.Sprintf("ETag %q, first answer's %q", etag, b.etag)
	case !ok || start != b.off:
		bad = fmt.Sprintf("Content-Range %q, asked for bytes=%d-", aws.ToString(out.ContentRange), b.off)
	case b.size >= 0 && total != b.size:
		bad = fmt.Sprintf("object of %d bytes, first answer's %d", total, b.size)
	}
	if bad != "" {
		out.Body.Close()
		return errcode.New(errcode.IO, "s3 get %s: resume at byte %d: not the object first read: %s", b.key, b.off, bad)
	}
	b.rc = out.Body
	return nil
}

// contentRange parses "bytes start-end/total".
func contentRange(h string) (start, total int64, ok bool) {
	r, found := strings.CutPrefix(h, "bytes ")
	if !found {
		return 0, 0, false
	}
	span, size, found := strings.Cut(r, "/")
	first, _, found2 := strings.Cut(span, "-")
	if !found || !found2 {
		return 0, 0, false
	}
	start, err1 := strconv.ParseInt(first, 10, 64)
	total, err2 := strconv.ParseInt(size, 10, 64)
	return start, total, err1 == nil && err2 == nil && start >= 0 && total > start
}

func (b *body) Close() error { return b.rc.Close() }

// mapBodyErr gives an error reading a GetObject body its code.
func (s *Store) mapBodyErr(ctx context.Context, err error, key string, v objstore.Version) error {
	what := key
	if v != "" {
		what += " version " + string(v)
	}
	var ne net.Error
	switch {
	case ctx.Err() != nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		return errcode.Wrap(errcode.Canceled, err, "s3 get %s: read", what)
	case errors.Is(err, os.ErrDeadlineExceeded):
		return errcode.Wrap(errcode.StoreUnavailable, err, "s3 get %s: read: the server sent nothing for %s (the URL's timeout option)", what, s.timeout)
	case errors.As(err, &ne) || errors.Is(err, io.ErrUnexpectedEOF):
		return errcode.Wrap(errcode.StoreUnavailable, err, "s3 get %s: read: connection lost", what)
	}
	return errcode.Wrap(errcode.IO, err, "s3 get %s: read", what)
}

// Head implements objstore.Store.
func (s *Store) Head(ctx context.Context, key string, v objstore.Version) (objstore.ObjectInfo, error) {
	if err := objstore.ValidateKey(key); err != nil {
		return objstore.ObjectInfo{}, err
	}
	out, err := s.client.HeadObject(ctx, &awss3.HeadObjectInput{
		Bucket: aws.String(s.bucket), Key: s.objKey(key), VersionId: versionID(v),
	})
	if err != nil {
		if status, _ := answer(err); status == http.StatusNotFound && v != "" {
			return objstore.ObjectInfo{}, s.headNotFound(ctx, err, key, v)
		}
		return objstore.ObjectInfo{}, s.mapErr(ctx, err, "head", key, v)
	}
	if aws.ToBool(out.DeleteMarker) {
		return objstore.ObjectInfo{}, s.notExist(key, v)
	}
	info := objstore.ObjectInfo{Key: key, Version: objstore.Version(aws.ToString(out.VersionId)), Size: aws.ToInt64(out.ContentLength)}
	if out.LastModified != nil {
		info.Modified = *out.LastModified
	}
	return info, nil
}

// headNotFound maps the 404 of a HeadObject of version v. The answer to
// a HEAD has no body, so a missing version and a missing bucket look
// alike (versitygw and AWS both answer "404 NotFound"): a shard's
// version in a bucket deleted under a running verification was
// VERSION_MISSING, and the release INVALID. A GetBucketVersioning, which
// Open needed the permission for, tells them apart. When a policy
// refuses it (AccessDenied: the principal may read keys but not the
// bucket's settings), the version's 404 stands; when it is refused for
// the request's credentials, signature or region, so is the Head: a
// server may answer such a HEAD 404 (versitygw does for an access key it
// does not know, a user removed under a running verification), and the
// version was not shown missing. When the server does not answer, that
// failure is the Head's, for the same reason. A Head of a
// key's latest version is not checked so: a missing key is routine (a
// poll for commit records asks for hundreds), where a missing version is
// a finding; its NOT_FOUND in a deleted bucket is followed by a read or
// write, which says NO_SUCH_BUCKET.
func (s *Store) headNotFound(ctx context.Context, err error, key string, v objstore.Version) error {
	_, berr := s.client.GetBucketVersioning(ctx, &awss3.GetBucketVersioningInput{Bucket: aws.String(s.bucket)})
	if _, code := answer(berr); code == "NoSuchBucket" {
		return s.noBucket(berr, "head", key)
	}
	if berr == nil {
		return s.mapErr(ctx, err, "head", key, v)
	}
	if d := s.denied(berr, "head", key); d != nil {
		if status, code := answer(berr); code == "AccessDenied" || status == http.StatusForbidden && code == "" {
			return s.mapErr(ctx, err, "head", key, v)
		}
		return d
	}
	return s.mapErr(ctx, berr, "head (bucket check)", key, "")
}

// noBucket is NO_SUCH_BUCKET for err, the server's answer that the
// bucket does not exist: a URL naming another bucket or endpoint than
// meant, or a bucket deleted while the command ran. It was
// STORE_UNAVAILABLE (exit 3), which scripts and engines retry, though
// every retry fails alike.
func (s *Store) noBucket(err error, op, key string) error {
	since := ""
	if op != "open" {
		since = " (it did when this command opened the store: deleted since?)"
	}
	return errcode.Wrap(errcode.NoSuchBucket, err,
		"s3 %s s3://%s/%s%s: bucket %s does not exist %s%s; shardproof never creates one: check the URL's bucket name and endpoint, "+
			"or create the bucket with versioning enabled (aws s3api create-bucket --bucket %s, then aws s3api put-bucket-versioning --bucket %s "+
			"--versioning-configuration Status=Enabled); retrying does not help",
		op, s.bucket, s.base, key, s.bucket, s.where, since, s.bucket, s.bucket)
}

// List implements objstore.Store.
func (s *Store) List(ctx context.Context, prefix, after string, limit int) (objstore.ListPage, error) {
	listed, err := s.ListSizes(ctx, prefix, after, limit)
	if err != nil {
		return objstore.ListPage{}, err
	}
	page := objstore.ListPage{Next: listed.Next}
	// ListObjectsV2 gives no VersionId; Head each key, a few at a time.
	infos := make([]objstore.ObjectInfo, len(listed.Objects))
	errs := make([]error, len(listed.Objects))
	sem := make(chan struct{}, listHeadConcurrency)
	var wg sync.WaitGroup
	for i, o := range listed.Objects {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			infos[i], errs[i] = s.Head(ctx, o.Key, "")
		})
	}
	wg.Wait()
	for i := range listed.Objects {
		switch {
		case errs[i] == nil:
			page.Objects = append(page.Objects, infos[i])
		case objstore.IsNotExist(errs[i]):
		default:
			return objstore.ListPage{}, errs[i]
		}
	}
	return page, nil
}

// ListSizes implements objstore.SizeLister: one ListObjectsV2, whose
// entries carry the latest version's size and time (keys whose latest
// version is a delete marker are not listed), and no HeadObject.
func (s *Store) ListSizes(ctx context.Context, prefix, after string, limit int) (objstore.ListPage, error) {
	if err := objstore.ValidatePrefix(prefix); err != nil {
		return objstore.ListPage{}, err
	}
	if limit <= 0 || limit > 1000 {
		limit = 1000
	}
	in := &awss3.ListObjectsV2Input{
		Bucket:  aws.String(s.bucket),
		Prefix:  aws.String(s.base + prefix),
		MaxKeys: aws.Int32(int32(limit)),
	}
	if after != "" {
		in.StartAfter = aws.String(s.base + after)
	}
	out, err := s.client.ListObjectsV2(ctx, in)
	if err != nil {
		return objstore.ListPage{}, s.mapErr(ctx, err, "list", prefix, "")
	}
	var page objstore.ListPage
	for _, o := range out.Contents {
		k := strings.TrimPrefix(aws.ToString(o.Key), s.base)
		if objstore.ValidateKey(k) != nil {
			continue
		}
		info := objstore.ObjectInfo{Key: k, Size: aws.ToInt64(o.Size)}
		if o.LastModified != nil {
			info.Modified = *o.LastModified
		}
		page.Objects = append(page.Objects, info)
	}
	if aws.ToBool(out.IsTruncated) {
		if len(out.Contents) == 0 {
			return objstore.ListPage{}, s.listStalled("list", prefix)
		}
		page.Next = strings.TrimPrefix(aws.ToString(out.Contents[len(out.Contents)-1].Key), s.base)
	}
	return page, nil
}

// listStalled is the error of a listing whose server said more follows
// yet gave nothing to go on from (no entry, or markers that do not move):
// taken for the end, it passed a part listing for the whole (a prune or
// verify missing keys, a deletion leaving versions); followed, it asked
// the same page for good.
func (s *Store) listStalled(op, prefix string) error {
	return errcode.New(errcode.IO, "s3 %s s3://%s/%s%s: the server said the listing goes on but gave nothing to continue from", op, s.bucket, s.base, prefix)
}

// advance moves a ListObjectVersions on to the page after page, or fails
// listStalled when page names no next position past in's.
func (s *Store) advance(in *awss3.ListObjectVersionsInput, page *awss3.ListObjectVersionsOutput, key string) error {
	next, nextV := aws.ToString(page.NextKeyMarker), aws.ToString(page.NextVersionIdMarker)
	if next == "" || next == aws.ToString(in.KeyMarker) && nextV == aws.ToString(in.VersionIdMarker) {
		return s.listStalled("list versions", key)
	}
	in.KeyMarker, in.VersionIdMarker = page.NextKeyMarker, page.NextVersionIdMarker
	return nil
}

// DeletePrefix implements objstore.Deleter: it lists the versions and
// delete markers under prefix a page (up to 1,000) at a time and deletes
// them by version id, so the bucket keeps nothing of them. Every listing
// starts from the beginning of what is left: a marker naming a version
// just deleted is not a position every server can resume from (versitygw
// skipped versions after one). Multipart uploads left open under prefix
// are aborted too. A version the server does not delete (DeleteObjects
// answers per key) stops it: the error says how many versions it deleted
// before, and is STORE_DENIED when the server refused one (a policy
// denying s3:DeleteObjectVersion), IO otherwise.
func (s *Store) DeletePrefix(ctx context.Context, prefix string) error {
	if err := objstore.ValidateDeletePrefix(prefix); err != nil {
		return err
	}
	in := &awss3.ListObjectVersionsInput{Bucket: aws.String(s.bucket), Prefix: aws.String(s.base + prefix)}
	if s.versionsPage > 0 {
		in.MaxKeys = aws.Int32(s.versionsPage)
	}
	var last types.ObjectIdentifier
	deleted := 0
	for {
		out, err := s.client.ListObjectVersions(ctx, in)
		if err != nil {
			return s.mapErr(ctx, err, "list versions", prefix, "")
		}
		var ids []types.ObjectIdentifier
		for _, v := range out.Versions {
			ids = append(ids, types.ObjectIdentifier{Key: v.Key, VersionId: v.VersionId})
		}
		for _, m := range out.DeleteMarkers {
			ids = append(ids, types.ObjectIdentifier{Key: m.Key, VersionId: m.VersionId})
		}
		if len(ids) == 0 {
			if aws.ToBool(out.IsTruncated) {
				return s.listStalled("list versions", prefix)
			}
			return s.abortUploads(ctx, prefix)
		}
		if first := ids[0]; aws.ToString(first.Key) == aws.ToString(last.Key) && aws.ToString(first.VersionId) == aws.ToString(last.VersionId) {
			// Deleted, yet listed again: stop rather than loop.
			return errcode.New(errcode.IO, "s3 delete %s: %s version %s is still listed after its deletion succeeded",
				prefix, aws.ToString(first.Key), aws.ToString(first.VersionId))
		}
		last = ids[0]
		for len(ids) > 0 {
			n := min(len(ids), 1000)
			del, err := s.client.DeleteObjects(ctx, &awss3.DeleteObjectsInput{
				Bucket: aws.String(s.bucket),
				Delete: &types.Delete{Objects: ids[:n], Quiet: aws.Bool(true)},
			})
			if err != nil {
				return s.mapErr(ctx, err, "delete", prefix, "")
			}
			if len(del.Errors) > 0 {
				return s.notDeleted(prefix, del.Errors, n, deleted+n-len(del.Errors))
			}
			deleted += n
			ids = ids[n:]
		}
	}
}

// notDeleted is the error of a DeleteObjects that deleted all but errs
// of its n versions, after which deleted versions under prefix are gone
// (the batch's others included) and the rest were not tried. A refused
// version (AccessDenied: a policy that denies this principal
// s3:DeleteObjectVersion on some keys) makes it STORE_DENIED, naming the
// first refused; it was IO, exit 3, which engines retry, and named no
// count of what was gone.
func (s *Store) notDeleted(prefix string, errs []types.Error, n, deleted int) error {
	e := errs[0]
	refused := 0
	for _, x := range errs {
		if deniedCodes[aws.ToString(x.Code)] {
			if refused == 0 {
				e = x
			}
			refused++
		}
	}
	what := fmt.Sprintf("s3 delete s3://%s/%s%s: %d of %d versions in a DeleteObjects not deleted", s.bucket, s.base, prefix, len(errs), n)
	first := fmt.Sprintf("s3://%s/%s version %s: %s %s", s.bucket, aws.ToString(e.Key), aws.ToString(e.VersionId), aws.ToString(e.Code), aws.ToString(e.Message))
	done := fmt.Sprintf("%d versions under the prefix were deleted before this answer (the others of its batch included) and the rest were not tried: "+
		"the prefix is part deleted", deleted)
	if refused > 0 {
		return errcode.New(errcode.StoreDenied, "%s, %d refused, first %s; %s; the bucket's policy must allow this principal s3:DeleteObjectVersion "+
			"(and s3:DeleteObject) under the prefix; retrying does not help", what, refused, first, done)
	}
	return errcode.New(errcode.IO, "%s, first %s; %s", what, first, done)
}

// Versions implements objstore.VersionLister: ListObjectVersions lists a
// key's versions newest first, delete markers apart.
func (s *Store) Versions(ctx context.Context, key string, limit int) ([]objstore.ObjectInfo, error) {
	if err := objstore.ValidateKey(key); err != nil {
		return nil, err
	}
	full := s.base + key
	in := &awss3.ListObjectVersionsInput{Bucket: aws.String(s.bucket), Prefix: aws.String(full)}
	var out []objstore.ObjectInfo
	for len(out) < limit {
		page, err := s.client.ListObjectVersions(ctx, in)
		if err != nil {
			return nil, s.mapErr(ctx, err, "list versions", key, "")
		}
		for _, v := range page.Versions {
			if aws.ToString(v.Key) != full || len(out) == limit {
				continue // a longer key under the same prefix
			}
			info := objstore.ObjectInfo{Key: key, Version: objstore.Version(aws.ToString(v.VersionId)), Size: aws.ToInt64(v.Size)}
			if v.LastModified != nil {
				info.Modified = *v.LastModified
			}
			out = append(out, info)
		}
		if !aws.ToBool(page.IsTruncated) {
			break
		}
		if err := s.advance(in, page, key); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (s *Store) notExist(key string, v objstore.Version) error {
	if v == "" {
		return fmt.Errorf("s3://%s/%s%s: %w", s.bucket, s.base, key, objstore.ErrNotExist)
	}
	return fmt.Errorf("s3://%s/%s%s version %s: %w", s.bucket, s.base, key, v, objstore.ErrNotExist)
}

// mapErr gives an SDK error its code: NoSuchBucket is NO_SUCH_BUCKET,
// other 404s and unknown versions are ErrNotExist, 412 is
// ErrPreconditionFailed, a canceled context is CANCELED, refused
// credentials, region or policy STORE_DENIED, an unreachable server or
// one answering 5xx or 429 to every attempt STORE_UNAVAILABLE, the rest
// IO.
func (s *Store) mapErr(ctx context.Context, err error, op, key string, v objstore.Version) error {
	if ctx.Err() != nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return errcode.Wrap(errcode.Canceled, err, "s3 %s %s", op, key)
	}
	if d := s.denied(err, op, key); d != nil {
		return d
	}
	status, code := answer(err)
	switch {
	case code == "NoSuchBucket":
		return s.noBucket(err, op, key)
	case code == "ExistingObjectIsDirectory" || code == "ObjectParentIsFile":
		return fmt.Errorf("s3 %s: %w", op, &objstore.KeyError{Key: key, Reason: "a path-prefix of this key, or a key under it, already exists (not allowed on posix-backed S3)"})
	case status == 412 || code == "PreconditionFailed":
		return fmt.Errorf("put %s: %w", key, objstore.ErrPreconditionFailed)
	case status == 404 || code == "NoSuchKey" || code == "NoSuchVersion" || code == "NotFound":
		return s.notExist(key, v)
	case v != "" && status == 400 && (code == "InvalidArgument" || code == "InvalidVersionId" || code == "BadRequest" || code == ""):
		// A malformed version id names no version.
		return s.notExist(key, v)
	case v != "" && (status == 405 || code == "MethodNotAllowed"):
		// The version id of a delete marker: S3 answers 405 to a GET or
		// HEAD of it. A delete marker is no version (VersionLister).
		return fmt.Errorf("s3://%s/%s%s version %s is a delete marker: %w", s.bucket, s.base, key, v, objstore.ErrNotExist)
	}
	if status == 0 && errors.Is(err, os.ErrDeadlineExceeded) {
		return errcode.Wrap(errcode.StoreUnavailable, err, "s3 %s %s: the server answered nothing for %s (the URL's timeout option)", op, key, s.timeout)
	}
	var ne net.Error
	if status == 0 && errors.As(err, &ne) {
		return errcode.Wrap(errcode.StoreUnavailable, err, "s3 %s %s", op, key)
	}
	if status >= 500 || status == http.StatusTooManyRequests {
		// 500, 503 SlowDown, 429: the SDK's retryer sent it again, with
		// backoff, until its attempts ran out; a later try may pass.
		return errcode.Wrap(errcode.StoreUnavailable, err, "s3 %s %s: the server answered %d to every attempt", op, key, status)
	}
	return errcode.Wrap(errcode.IO, err, "s3 %s s3://%s/%s%s", op, s.bucket, s.base, key)
}

// answer returns the HTTP status and S3 error code of a failed request's
// answer: 0 and "" when no answer came.
func answer(err error) (status int, code string) {
	var re *awshttp.ResponseError
	if errors.As(err, &re) {
		status = re.HTTPStatusCode()
	}
	var ae smithy.APIError
	if errors.As(err, &ae) {
		code = ae.ErrorCode()
	}
	return status, code
}

// deniedCodes are the S3 error codes, besides any 403 and 301, of a
// request refused for who sent it, how it was signed or where: the same
// request fails the same way however often it is sent, so it is
// STORE_DENIED and never STORE_UNAVAILABLE or NOT_FOUND, which scripts
// and engines retry or take for an answer about the key.
var deniedCodes = map[string]bool{
	"AccessDenied":                 true,
	"AccountProblem":               true,
	"AllAccessDisabled":            true,
	"AuthorizationHeaderMalformed": true, // signed for another region
	"ExpiredToken":                 true,
	"InvalidAccessKeyId":           true,
	"InvalidToken":                 true,
	"PermanentRedirect":            true, // the bucket is in another region
	"RequestTimeTooSkewed":         true,
	"SignatureDoesNotMatch":        true,
	"TokenRefreshRequired":         true,
	"XAdminUserNotFound":           true, // versitygw's unknown access key, a 404
}

// denied returns STORE_DENIED, with what to check, when err is the
// server's refusal of the request's credentials, signature, region or
// permissions, and nil otherwise. The SDK's retryer sends none of these
// again (a signature refused while the clocks differ is retried once
// with the server's time), and neither does this package.
func (s *Store) denied(err error, op, key string) error {
	status, code := answer(err)
	if status != 403 && status != 301 && !deniedCodes[code] {
		return nil
	}
	hint := "check the credentials (the AWS credential chain: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, " +
		"AWS_PROFILE, the instance or pod role), the region (the URL's region option or AWS_REGION; requests are signed for " +
		s.region + ") and the bucket's policy for this principal (a principal without s3:ListBucket is refused even a read of a missing key)"
	switch code {
	case "RequestTimeTooSkewed":
		hint = "this machine's clock differs from the server's by more than S3 allows: set it right (NTP)"
	case "ExpiredToken", "TokenRefreshRequired":
		hint = "the session token has expired: renew the credentials"
	case "AuthorizationHeaderMalformed", "PermanentRedirect":
		hint = "the bucket is in another region than " + s.region + ": set the URL's region option"
	}
	var re *awshttp.ResponseError
	if errors.As(err, &re) && re.Response != nil {
		if r := re.Response.Header.Get("X-Amz-Bucket-Region"); r != "" && r != s.region {
			hint = "the bucket is in region " + r + ", not " + s.region + ": set region=" + r + " in the URL"
		}
	}
	if code == "" {
		code = http.StatusText(status)
	}
	what := fmt.Sprintf("s3://%s/%s%s", s.bucket, s.base, key)
	return errcode.Wrap(errcode.StoreDenied, err, "s3 %s %s: refused (HTTP %d, %s): %s; retrying does not help", op, what, status, code, hint)
}

// silenceConn fails a read or write that makes no progress for limit:
// every Read and Write sets its own deadline, and a Write also moves the
// read deadline, since the transport's pending read for the answer began
// before the request (and its body, however long it takes to send) was
// written. A connection idle in the pool times out too, and the
// transport drops it. The error is os.ErrDeadlineExceeded, which the
// SDK's retryer takes for a timeout and retries.
type silenceConn struct {
	net.Conn
	limit time.Duration
}

func (c *silenceConn) Read(p []byte) (int, error) {
	if err := c.Conn.SetReadDeadline(time.Now().Add(c.limit)); err != nil {
		return 0, err
	}
	return c.Conn.Read(p)
}

// Write writes p a piece at a time, each with its own deadline: the
// transport may hand over a whole part in one call, which a slow link
// takes longer than the bound to send while making progress throughout.
func (c *silenceConn) Write(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		d := time.Now().Add(c.limit)
		if err := c.Conn.SetWriteDeadline(d); err != nil {
			return n, err
		}
		if err := c.Conn.SetReadDeadline(d); err != nil {
			return n, err
		}
		m, err := c.Conn.Write(p[n:min(len(p), n+silenceWriteChunk)])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// silenceWriteChunk is the most silenceConn writes under one deadline.
const silenceWriteChunk = 64 << 10

// isConflict reports S3's 409 ConditionalRequestConflict: another
// conditional write to the key was in flight; retrying gives a definite
// answer.
func isConflict(err error) bool {
	var ae smithy.APIError
	return errors.As(err, &ae) && ae.ErrorCode() == "ConditionalRequestConflict"
}

func sleep(ctx context.Context, attempt int) error {
	t := time.NewTimer(time.Duration(50<<attempt) * time.Millisecond)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// abortUploads aborts the multipart uploads left open under prefix: a
// writer killed mid-upload (a map task's large shuffle file) leaves its
// parts stored, and billed, until aborted; nothing lists them as objects.
func (s *Store) abortUploads(ctx context.Context, prefix string) error {
	p := awss3.NewListMultipartUploadsPaginator(s.client, &awss3.ListMultipartUploadsInput{Bucket: aws.String(s.bucket), Prefix: aws.String(s.base + prefix)})
	for p.HasMorePages() {
		out, err := p.NextPage(ctx)
		if err != nil {
			return s.mapErr(ctx, err, "list uploads", prefix, "")
		}
		for _, u := range out.Uploads {
			_, err := s.client.AbortMultipartUpload(ctx, &awss3.AbortMultipartUploadInput{Bucket: aws.String(s.bucket), Key: u.Key, UploadId: u.UploadId})
			var nsu *types.NoSuchUpload
			if err != nil && !errors.As(err, &nsu) {
				return s.mapErr(ctx, err, "abort upload", strings.TrimPrefix(aws.ToString(u.Key), s.base), "")
			}
		}
	}
	return nil
}
