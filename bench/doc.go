// Command spbench is shardproof's benchmark harness (issue 7). It lives in
// its own Go module so that its cgo peer, DuckDB through duckdb-go, never
// enters the main build or `go test ./...` of the main module.
//
// A run synthesizes a release once per parameter set (stage.Synth, then a
// drifted copy with a known number of missing, extra, duplicate,
// content-substituted and split-conflicting members, so the diff has
// something to find), caches it under .cache/, and then measures, in
// interleaved rounds:
//
//   - verify: the shardproof binary's `verify` end to end, local executor,
//     every core, as a child process;
//   - phases: the same verification driven through the coordinator API one
//     phase at a time (map, reduce, aggregate), for the wall time of each;
//   - ladder: cumulative loops over the same files (read+storage digest;
//     +decompress+decode of every column; +content digest) whose
//     differences, with the phases, give the per-stage breakdown;
//   - ceiling: the fastest loop the harness can write that reads,
//     storage-hashes, decompresses and content-hashes the same files;
//   - duckdb-diff: the same diff in SQL (FULL OUTER JOIN of the release
//     against the snapshot member files), its counts checked equal to
//     verify's and to the injected drift;
//   - duckdb-scan: a plain DuckDB scan of every column.
//
// Every measured tool runs as a child process (the harness re-executes
// itself), so each has its own peak RSS from rusage. Results go to
// results/ as JSON, a Markdown table and a hand-written SVG chart.
package main
