// Package shuffle is the map→reduce exchange format of `shardproof verify`.
//
// A map task writes, for each reduce range, one file of tuple rows sorted by
// (bucket, sampleId, side, tupleDigest): an Arrow IPC stream (record batches
// of Encoder.BatchRows rows, which a job's plan fixes), either compressed as a whole into one zstd frame with
// a checksum, a 64 KiB window and no single-segment flag (Zstd), or stored
// as is (None); the plan says which. A map task collects its rows in
// Buffers (flat columns, no per-row allocation) and an Encoder sorts them
// and assembles the record batches straight from those columns. The bytes
// depend only on the rows: the same tuples always give the same file,
// which is what lets a rerun of a map task be checked byte for byte against
// its committed output (NONDETERMINISM).
//
// Whole-stream zstd rather than the IPC format's per-buffer body
// compression (ipc.WithZstd): arrow-go resets a streaming zstd encoder for
// every buffer of every batch, which measured about 130,000 rows/s and
// 10 ms per small file; one shared EncodeAll is about two orders of
// magnitude cheaper and compresses better (one window over all columns).
//
// A Reader streams such a file one bucket at a time, decoding record batches
// lazily and reusing their buffers, so a reducer holds at most one bucket,
// and one record batch and one zstd window (or read-ahead buffer) per input
// file, in memory. NextDigests gives a bucket's tuple digests alone and
// keeps the batches holding its rows; Rows makes the rows only if asked. A
// reducer with the snapshot's leaf index asks only for the buckets whose
// release leaf differs from the snapshot's: for the others the digests,
// each a sha256 of its tuple, authenticate everything it counts.
// Shuffle files are read back only after their commit record names them, but
// the reader still treats their bytes as untrusted: a corrupt or misordered
// file is an error with code SHUFFLE_CORRUPT, never a panic.
package shuffle
