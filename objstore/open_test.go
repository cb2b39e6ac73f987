package objstore_test

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/objstore"
	_ "github.com/shardproof/shardproof/objstore/file"
)

// A store argument that is a URL with a slash missing is a usage error,
// never a relative directory that Create makes: "file:/x" must not become
// ./file:/x.
func TestOpenSchemeWithoutSlashes(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	for _, arg := range []string{"file:/data/store", "FILE:data", "file:store"} {
		for name, open := range map[string]func(context.Context, string) (objstore.Store, error){
			"Open": objstore.Open, "Create": objstore.Create,
		} {
			_, err := open(context.Background(), arg)
			if errcode.Of(err) != errcode.Usage || !strings.Contains(err.Error(), `without "//"`) {
				t.Errorf("%s(%q) = %v, want USAGE naming the missing //", name, arg, err)
			}
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("a mistyped URL created %d entries in the working directory", len(entries))
	}
	// A directory of that name is still reachable as ./file:… (not on
	// Windows, where a file name cannot hold a colon).
	if runtime.GOOS != "windows" {
		s, err := objstore.Create(context.Background(), "./file:store")
		if err != nil {
			t.Fatalf("Create(./file:store): %v", err)
		}
		if c, ok := s.(interface{ Close() error }); ok {
			c.Close()
		}
		if _, err := os.Stat(filepath.Join(dir, "file:store")); err != nil {
			t.Fatal(err)
		}
	}
	// No store at all names every way of giving one.
	if _, err := objstore.Open(context.Background(), ""); errcode.Of(err) != errcode.Usage || !strings.Contains(err.Error(), "$SHARDPROOF_STORE") {
		t.Errorf(`Open("") = %v, want USAGE naming $SHARDPROOF_STORE`, err)
	}
}
