// Package s3 is the object store on an S3 bucket with versioning enabled,
// opened as "s3://bucket/prefix". Importing it registers the "s3" scheme
// with objstore.Open.
//
// The mapping onto S3 (aws-sdk-go-v2):
//   - a Store version is an S3 VersionId; the bucket MUST have versioning
//     Enabled, checked at open (otherwise VERSIONING_OFF), because without
//     it an overwrite destroys the bytes a descriptor names;
//   - a conditional create is PutObject (or CompleteMultipartUpload) with
//     If-None-Match: "*", so the server decides atomically; a 412 is
//     ErrPreconditionFailed and is never retried; a body of 1 MiB or
//     more first asks (HeadObject) whether the key exists, and fails
//     fast if it does, since a server may refuse it before reading the
//     body and cut the connection under the upload;
//   - Get and Head with a version send its VersionId;
//   - bodies up to the multipart threshold (16 MiB by default) are buffered
//     and sent in one PutObject; larger ones go as a multipart upload of
//     parts of that size, aborted on any failure; a Complete sent again
//     after its answer was lost is answered without a version id, which
//     is then found by the upload's ETag and size; an upload holds one
//     part in memory at most, in pieces allocated as the body arrives,
//     whether its length is known or not (a merged shuffle file streamed
//     through a pipe held up to three times that); only io.EOF ends a
//     body: any other error of its reader, io.ErrUnexpectedEOF and one
//     given with the last bytes included, fails the Put and stores
//     nothing;
//   - every upload carries its SHA-256 (x-amz-checksum-sha256), so the
//     server rejects bytes damaged in transit, and PutOptions.SHA256 is
//     checked before anything becomes visible;
//   - List is ListObjectsV2 with StartAfter, and a HeadObject per listed
//     key for its latest VersionId (ListObjectsV2 does not return one);
//   - a request that makes no progress for the timeout (60 s by default:
//     the server takes none of the bytes sent, or sends none of its answer
//     or of the next part of a body) fails, and is retried as a transient
//     failure; a transfer that keeps moving is never cut;
//   - a body whose connection is lost or silent midway is resumed with a
//     ranged GetObject of the version first read (a read of the latest
//     version pins the one it began with) from the first byte not yet
//     delivered, at most MaxBodyResumes times in a row (ResumeProgress
//     bytes between two resumes start the count again), and only if the
//     answer has the first one's ETag and starts at that byte; then the
//     read fails with STORE_UNAVAILABLE;
//   - transient failures (5xx, throttling, connection resets, timeouts)
//     are retried with backoff by the SDK's standard retryer (5 attempts
//     in all); a 409
//     ConditionalRequestConflict (two conditional writes in flight) is
//     retried here;
//   - a refusal of the request's credentials, region or permissions (any
//     403, a 301 region redirect, AuthorizationHeaderMalformed, an
//     unknown access key, an expired token) is STORE_DENIED, saying what
//     to check, and is never retried;
//   - a bucket that does not exist, at open or after (deleted while a
//     command runs), is NO_SUCH_BUCKET, exit 2, and is never created; the
//     404 of a HeadObject of a version, which has no body to say whether
//     the version or the bucket is missing, is followed by a
//     GetBucketVersioning that does (a Head of a key's latest version is
//     not: a missing key is routine);
//   - DeletePrefix stops at the first DeleteObjects that leaves versions
//     (it answers per key), saying how many it deleted before: STORE_DENIED
//     when a version was refused, IO otherwise.
//
// URL options (query parameters), each also settable through the
// environment the AWS SDK reads (AWS_ENDPOINT_URL_S3, AWS_REGION, the
// credential chain):
//
//	endpoint=http://127.0.0.1:7070   a non-AWS endpoint (implies path_style=true)
//	path_style=true|false            path-style bucket addressing
//	region=us-east-1                 the signing region (default us-east-1)
//	multipart_threshold=16777216     bytes; larger bodies use multipart (5 MiB to 5 GiB)
//	timeout=60s                      the longest silence of a request in flight
//
// Credentials come from the standard AWS chain (environment, shared
// config, IMDS, …), never from the URL. Open retrieves them before its
// first request: none found is STORE_DENIED, saying where to give them.
//
// Keys: objstore.ValidateKey applies. Callers must not use a key that is a
// path-prefix of another ("a" and "a/b"): AWS allows it but posix-backed
// gateways such as versitygw do not.
package s3
