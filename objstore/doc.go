// Package objstore is shardproof's object store: a small interface with
// immutable versions and atomic conditional create, and its implementations
// (file, the embedded default; s3). Shards, manifests and reports live under
// blobs/sha256/<hex>; shuffle files and task commit records under
// jobs/<planDigest>/. The alias never lives in the store.
//
// Besides the Store interface and Open, the package holds what every
// implementation and caller shares: ValidateKey (one key grammar for all
// stores), the sentinel errors, and the content-addressed blob helpers
// (PutBlob, PutBlobFile, GetBlob, ReadBlob), whose reads all go through
// internal/verifyread. Sub-packages: file and s3 (implementations),
// storetest (the conformance suite both pass), faults (decorators that
// break one method, for tests).
//
// objstore imports only internal/errcode and internal/verifyread, so the
// layers above (manifest, mapper, trainer) can all depend on it; digests
// are plain [32]byte here and manifest.Digest converts by value.
package objstore
