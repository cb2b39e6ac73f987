package tuplehash

import (
	"testing"

	"github.com/shardproof/shardproof/internal/depcheck"
)

// TestImports keeps tuplehash at the bottom of the dependency graph: the
// standard library and xxhash only, so any writer can vendor it.
func TestImports(t *testing.T) {
	depcheck.AssertImports(t, "github.com/cespare/xxhash/v2")
}
