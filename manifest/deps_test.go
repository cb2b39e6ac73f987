package manifest

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestImports keeps manifest below the pipeline (STYLE.md: tuplehash ←
// manifest ← mapper, reducer ← coordinator ← cmd): the standard library,
// the error catalogue and tuplehash only. In particular no Arrow/Parquet
// and no store: the gate decodes documents too.
func TestImports(t *testing.T) {
	allowed := map[string]bool{
		"github.com/shardproof/shardproof/internal/errcode": true,
		"github.com/shardproof/shardproof/tuplehash":        true,
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			first, _, _ := strings.Cut(path, "/")
			if strings.Contains(first, ".") && !allowed[path] {
				t.Errorf("%s imports %s", name, path)
			}
		}
	}
}
