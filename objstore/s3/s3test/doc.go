// Package s3test runs a real S3 server for tests: versitygw (pinned in the
// repository's tools module) on loopback, with a posix backend and bucket
// versioning, started once per test binary. Other packages' tests use it
// through Start to run against S3 exactly as against the file store.
package s3test
