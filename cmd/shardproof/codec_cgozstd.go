//go:build cgozstd

package main

// With -tags cgozstd (make build-cgozstd), Parquet pages are decompressed
// by the C zstd library instead of the pure-Go one.
import _ "github.com/shardproof/shardproof/internal/cgozstd"
