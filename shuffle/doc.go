// Package shuffle is the map→reduce exchange format of `shardproof verify`.
//
// A map task writes, for each reduce range, one file of tuple rows sorted by
// (bucket, sampleId, side, tupleDigest) in the Arrow IPC stream format with
// zstd-compressed bodies. The bytes depend only on the rows: the same tuples
// always give the same file, which is what lets a rerun of a map task be
// checked byte for byte against its committed output (NONDETERMINISM).
//
// A Reader streams such a file one bucket at a time, decoding record batches
// lazily, so a reducer holds at most one bucket per input file in memory.
// Shuffle files are read back only after their commit record names them, but
// the reader still treats their bytes as untrusted: a corrupt or misordered
// file is an error with code SHUFFLE_CORRUPT, never a panic.
package shuffle
