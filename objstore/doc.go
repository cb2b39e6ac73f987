// Package objstore is shardproof's object store: a small interface with
// immutable versions and atomic conditional create, and its implementations
// (file, the embedded default; s3). Shards, manifests and reports live under
// blobs/sha256/<hex>; shuffle files and task commit records under
// jobs/<planDigest>/. The alias never lives in the store.
package objstore
