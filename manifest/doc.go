// Package manifest holds shardproof's documents: the release manifest, the
// dataset snapshot manifest, the tombstone log and benchmark registry, the
// record schema and the verification report. Decoding is strict (unknown
// fields, duplicate keys, bad digests, negative or inconsistent counts,
// totals that do not add up and oversized documents are errors with stable
// codes); encoding is deterministic; a document's digest is sha256 of its
// exact stored bytes.
package manifest
