package stage_test

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/stage"
	"github.com/shardproof/shardproof/stage/stagetest"
)

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
			dir := t.TempDir()
			path := filepath.Join(dir, "bomb.parquet")
			writeInput(t, path, []stage.Row{
				{SampleID: "a", SourceID: "web", SourceVersion: 1, Split: "train", Lang: "en", Text: "one", Tokens: 1},
				{SampleID: "b", SourceID: "web", SourceVersion: 1, Split: "train", Lang: "en", Text: "two", Tokens: 2},
			})
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			data = stagetest.InflateFooterList(t, data, tc.field, 100_000_000)
			if len(data) > 4<<10 {
				t.Fatalf("crafted file is %d bytes, want a small one", len(data))
			}
			if err := os.WriteFile(path, data, 0o644); err != nil {
				t.Fatal(err)
			}
			s := stagetest.Store(t)
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			_, err = stage.Stage(context.Background(), s, stage.StageOptions{Inputs: []string{path}, Shards: 1, TempDir: t.TempDir()})
			runtime.ReadMemStats(&after)
			t.Logf("%d-byte file: TotalAlloc %d MiB, err %v", len(data), (after.TotalAlloc-before.TotalAlloc)>>20, err)
			if errcode.Of(err) != errcode.BadInput || !strings.Contains(err.Error(), "bomb.parquet") {
				t.Fatalf("err = %v (code %s), want BAD_INPUT naming the file", err, errcode.Of(err))
			}
			if got := after.TotalAlloc - before.TotalAlloc; got > 64<<20 {
				t.Fatalf("staging a %d-byte file allocated %d MiB", len(data), got>>20)
			}
			if n := countObjects(t, s); n != 0 {
				t.Fatalf("bad input wrote %d objects", n)
			}
		})
	}
}
