package stage_test

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/objstore"
	"github.com/shardproof/shardproof/stage"
	"github.com/shardproof/shardproof/stage/stagetest"
)

// twoRows are the rows of the small inputs the crafted-file tests alter.
var twoRows = []stage.Row{
	{SampleID: "a", SourceID: "web", SourceVersion: 1, Split: "train", Lang: "en", Text: "one", Tokens: 1},
	{SampleID: "b", SourceID: "web", SourceVersion: 1, Split: "train", Lang: "en", Text: "two", Tokens: 2},
}

// craftInput writes rows as a source file at path, then writes craft's
// change of its bytes over it; it returns the crafted bytes.
func craftInput(t *testing.T, path string, rows []stage.Row, craft func([]byte) []byte) []byte {
	t.Helper()
	writeInput(t, path, rows)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	data = craft(data)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return data
}

// stageAllocated stages the one input at path into s as one shard; it
// returns the bytes the process allocated meanwhile, and the error.
func stageAllocated(t *testing.T, s objstore.Store, path string) (uint64, error) {
	t.Helper()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err := stage.Stage(context.Background(), s, stage.StageOptions{Inputs: []string{path}, Shards: 1, TempDir: t.TempDir()})
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc, err
}

// An input whose footer declares a list of 100M schema elements or row
// groups, in a file of under 4 KB, is BAD_INPUT before arrow-go's
// generated Thrift code allocates the list's declared capacity (800 MB
// of pointers) and nothing is stored.
func TestStageInputFooterListBeyondItsBytes(t *testing.T) {
	for _, tc := range []struct {
		name  string
		field int16
	}{{"schema", 2}, {"row_groups", 4}} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "bomb.parquet")
			data := craftInput(t, path, twoRows, func(b []byte) []byte { return stagetest.InflateFooterList(t, b, tc.field, 100_000_000) })
			if len(data) > 4<<10 {
				t.Fatalf("crafted file is %d bytes, want a small one", len(data))
			}
			s := stagetest.Store(t)
			got, err := stageAllocated(t, s, path)
			t.Logf("%d-byte file: TotalAlloc %d MiB, err %v", len(data), got>>20, err)
			if errcode.Of(err) != errcode.BadInput || !strings.Contains(err.Error(), "bomb.parquet") {
				t.Fatalf("err = %v (code %s), want BAD_INPUT naming the file", err, errcode.Of(err))
			}
			if got > 64<<20 {
				t.Fatalf("staging a %d-byte file allocated %d MiB", len(data), got>>20)
			}
			if n := countObjects(t, s); n != 0 {
				t.Fatalf("bad input wrote %d objects", n)
			}
		})
	}
}

// An input whose footer's schema is not one tree (its root declares
// 2^26 children, and 7 elements follow it) or costs far more than its bytes
// (4,000 leaves under a group of a 20,000-byte name) is BAD_INPUT before
// arrow-go builds its schema, which allocated 1 GiB and 322 MiB, and
// nothing is stored.
func TestStageInputSchemaTreeBomb(t *testing.T) {
	for _, tc := range []struct {
		name  string
		craft func(t *testing.T, data []byte) []byte
	}{
		{"root of 2^26 children", func(t *testing.T, data []byte) []byte { return stagetest.DeclareRootChildren(t, data, 1<<26) }},
		{"leaves under long name", func(t *testing.T, data []byte) []byte { return stagetest.NestUnderLongName(t, data, 20_000, 4000) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "bomb.parquet")
			data := craftInput(t, path, twoRows[:1], func(b []byte) []byte { return tc.craft(t, b) })
			s := stagetest.Store(t)
			got, err := stageAllocated(t, s, path)
			t.Logf("%d-byte file: TotalAlloc %d KiB, err %v", len(data), got>>10, err)
			if errcode.Of(err) != errcode.BadInput || !strings.Contains(err.Error(), "bomb.parquet") {
				t.Fatalf("err = %v (code %s), want BAD_INPUT naming the file", err, errcode.Of(err))
			}
			if limit := uint64(16<<20 + 64*len(data)); got > limit {
				t.Fatalf("staging a %d-byte file allocated %d MiB, over %d MiB", len(data), got>>20, limit>>20)
			}
			if n := countObjects(t, s); n != 0 {
				t.Fatalf("bad input wrote %d objects", n)
			}
		})
	}
}
