// Package tuplehash implements shardproof's canonical member formats: the
// tuple encoding v1 and tuple digest, the bucket function (xxh64, k bits),
// memberSetDigest, bucket leaves and the RFC 6962 Merkle root bound to the
// dataset snapshot and both fences. It is the bottom of the dependency graph:
// stdlib and xxhash only.
//
// Every format here is normative (DESIGN.md) and frozen by golden files:
// testdata/vectors.json holds tuples with their encodings, digests and
// buckets; testdata/digests.json holds memberSetDigest, bucket leaves,
// Merkle roots of 0..9 leaves and bound roots. The tests check the package
// against those files and against a second implementation written from the
// DESIGN.md text (ref_test.go), including an XXH64 of its own. The binding
// hash is sha256("sp.root.v1\x00" ‖ merkleRoot ‖ datasetSnapshot ‖ u64be
// tombstoneWatermark ‖ u64be benchmarkFence); its domain prefix is fixed by
// the vectors.
package tuplehash
