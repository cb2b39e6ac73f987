// Package tuplehash implements shardproof's canonical member formats: the
// tuple encoding v1 and tuple digest, the bucket function (xxh64, k bits),
// memberSetDigest, bucket leaves and the RFC 6962 Merkle root bound to the
// dataset snapshot and both fences. It is the bottom of the dependency graph:
// stdlib and xxhash only. Every format here is normative (DESIGN.md) and has
// golden vectors in testdata/vectors.json.
package tuplehash
