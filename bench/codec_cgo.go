//go:build cgozstd

package main

// Under the cgozstd tag the harness decodes Parquet pages with the C zstd
// library, through the same codec `make build-cgozstd` builds into
// shardproof (internal/cgozstd registers it with arrow-go).
import "github.com/shardproof/shardproof/internal/cgozstd"

func init() { zstdCodecName = cgozstd.Name }
