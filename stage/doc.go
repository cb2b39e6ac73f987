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
// Memory does not grow with the number of rows, only with the size and
// number of shards. The sort (sort.go) holds at most sortRunBytes of keys
// (20 bytes and the sampleId per row, counted as the capacity its buffers
// hold, not only what they use): a release whose keys fit is sorted
// in memory; a larger one is sorted on disk, in runs merged a bounded
// number at a time, and each shard's row indices are written to a file of
// their own as the merge reaches them. Each worker holds one shard's rows;
// each release shard's tuples go to a spill file per snapshot member in
// TempDir, and each member file reads back and sorts only its own, so the
// tuples are never all in memory. Stage spools its source rows to
// TempDir by shard, finding each row's shard from its sort key, in
// levels: one read of the inputs spools rows to at most 128 files, each
// of a contiguous range of shards, and each range's file is split the
// same way by reading only that file, until every shard has its own.
// The inputs are read twice (the sort's keys, then the spool) whatever
// the shard count, and each row is written to at most ceil(log_128
// shards) spool files.
//
// Synth generates a realistic synthetic dataset from a seed and stages it
// without source files; Stage reads source Parquet files.
package stage
