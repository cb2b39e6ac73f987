// Package verifyread is the one size-bounded, hash-checking reader that every
// read of stored content in shardproof goes through (compare
// go-containerregistry's verify.ReadCloser and archive/zip's checksumReader).
//
// A stored object is untrusted until its bytes have been counted and hashed
// against its descriptor. The reader never hands out more than the
// descriptor's size, detects a longer object by reading one byte past it,
// and reports a digest mismatch only at EOF, when the whole object has been
// hashed. Callers MUST read to EOF (and check the error) before trusting any
// byte they consumed; bytes seen before EOF are provisional.
//
// ReadAll is the bounded replacement for io.ReadAll on store data.
package verifyread
