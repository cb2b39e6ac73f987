package manifest

import (
	"testing"

	"github.com/shardproof/shardproof/internal/depcheck"
)

// TestImports keeps manifest below the pipeline (STYLE.md: tuplehash ←
// manifest ← mapper, reducer ← coordinator ← cmd): the standard library,
// the error catalogue and tuplehash only. In particular no Arrow/Parquet
// and no store: the gate decodes documents too.
func TestImports(t *testing.T) {
	depcheck.AssertImports(t,
		"github.com/shardproof/shardproof/internal/errcode",
		"github.com/shardproof/shardproof/tuplehash")
}
