// Package stage is the writer side of shardproof: it turns source rows into
// a release in an object store.
//
// Rows are ordered by the recorded sort function (xxh64 of the sampleId
// with the sort seed, ties broken by sampleId), cut into contiguous ranges
// (one per shard), written as zstd Parquet shards, and described by
// descriptors whose every field (digest, size, objectVersion, logical
// digest, records, tokens, memberSetDigest) is computed while writing, with
// the same internal/canon code the verifier runs. The dataset snapshot
// (member files with the tuple columns, their tuple root) and the release
// manifest bound to it complete the release. Every object goes to
// blobs/sha256/<hex> with a conditional create, and the Parquet bytes are a
// pure function of the rows and the options, so staging the same rows twice
// yields the same root digest and writes nothing new.
//
// Memory: the sort holds 16 bytes per row (its hash and index); each
// worker holds one shard's rows; each release shard's tuples go to a spill
// file per snapshot member in TempDir, and each member file reads back and
// sorts only its own, so the tuples are never all in memory.
//
// Synth generates a realistic synthetic dataset from a seed and stages it
// without source files; Stage reads source Parquet files.
package stage
