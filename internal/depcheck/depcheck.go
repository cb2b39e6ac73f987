// Package depcheck is a test helper that keeps a package's place in the
// dependency graph (go-containerregistry's depcheck): it lists the
// non-standard-library imports of the package's non-test files.
package depcheck

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// AssertImports fails t for every import of a non-test .go file in the
// current directory (the package under test) that is outside the standard
// library and not in allowed.
func AssertImports(t *testing.T, allowed ...string) {
	t.Helper()
	ok := map[string]bool{}
	for _, a := range allowed {
		ok[a] = true
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("depcheck: no Go files in the current directory")
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
			if strings.Contains(first, ".") && !ok[path] {
				t.Errorf("%s imports %s; allowed beyond the standard library: %v", name, path, allowed)
			}
		}
	}
}
