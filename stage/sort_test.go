package stage

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/cespare/xxhash/v2"
)

// referenceOrder is the staging order by its definition: every row's
// (hash, sampleId), sorted.
func referenceOrder(src *synthSource, seed uint64) []int {
	type key struct {
		h  uint64
		id string
		i  int
	}
	keys := make([]key, src.Len())
	d := xxhash.New()
	for i := range keys {
		id := src.SampleID(i)
		keys[i] = key{stagingHash(d, seed, id), id, i}
	}
	slices.SortFunc(keys, func(a, b key) int { return cmp.Or(cmp.Compare(a.h, b.h), cmp.Compare(a.id, b.id)) })
	order := make([]int, len(keys))
	for j, k := range keys {
		order[j] = k.i
	}
	return order
}

// The external sort gives every shard exactly the rows, in exactly the
// order, that the in-memory sort and the definition give, with hashes
// whole or narrowed to 6 bits (about 80 rows per hash value, ties across
// runs everywhere); it merges in levels when there are more runs than
// its fan-in, keeps no run file once merged, and removes its directory.
func TestSortRowsExternalMatchesMemory(t *testing.T) {
	const shards, seed = 7, 3
	src := newSynthSource(5000, seed)
	for _, mask := range []uint64{keyHashMask, 0x3f} {
		t.Run(fmt.Sprintf("mask %#x", mask), func(t *testing.T) { checkExternalSort(t, src, seed, shards, mask) })
	}
}

// checkExternalSort sorts src in memory and on disk with hashes narrowed
// to mask and compares both with the definition.
func checkExternalSort(t *testing.T, src *synthSource, seed uint64, shards int, mask uint64) {
	ctx := context.Background()
	n := src.Len()
	defer SetKeyHashMask(mask)()
	want := referenceOrder(src, seed)
	mem, err := sortRows(ctx, src, seed, shards, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if mem.dir != nil || mem.runs != 0 {
		t.Fatalf("%d rows sorted with %d runs on disk, want in memory", n, mem.runs)
	}
	restoreRun := SetSortRun(2000, 3) // about 50 keys a run
	defer restoreRun()
	tmp := t.TempDir()
	ext, err := sortRows(ctx, src, seed, shards, tmp)
	if err != nil {
		t.Fatal(err)
	}
	if ext.dir == nil || ext.runs <= 9 || ext.merges == 0 {
		t.Fatalf("external sort made %d runs and %d merges, want many runs merged in levels", ext.runs, ext.merges)
	}
	left, _ := os.ReadDir(ext.dir.Path)
	for _, e := range left {
		if !strings.HasPrefix(e.Name(), "shard") && e.Name() != ".lock" {
			t.Fatalf("%s left in the sort directory after the merge", e.Name())
		}
	}
	if !slices.Equal(ext.cuts, mem.cuts) {
		t.Fatalf("shard cuts differ:\nexternal %v\nmemory   %v", ext.cuts, mem.cuts)
	}
	for j := range shards {
		a, err := mem.shard(j)
		if err != nil {
			t.Fatal(err)
		}
		b, err := ext.shard(j)
		if err != nil {
			t.Fatal(err)
		}
		lo, hi := mem.bounds(j)
		if !slices.Equal(a, want[lo:hi]) || !slices.Equal(b, want[lo:hi]) {
			t.Fatalf("shard %d: memory %v…, external %v…, definition %v…", j, a[:5], b[:5], want[lo:lo+5])
		}
		for _, i := range a {
			if k := mem.shardOf(stagingHash(xxhash.New(), seed, src.SampleID(i)), src.SampleID(i)); k != j {
				t.Fatalf("row %d of shard %d found in shard %d by its key", i, j, k)
			}
		}
	}
	ext.close()
	mem.close()
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Fatalf("sort files left behind: %v", left)
	}
}

// A run holds at most sortRunBytes, counting what its slices hold and
// not only what they use, whatever the sampleIds' length (one key larger
// than the budget excepted: a run holds at least one), and fills enough
// of it that the runs are not many more than the keys' bytes need. The
// preallocated keys and the sampleIds' buffer grown by append held up to
// 1.75 times the budget, so that a sort documented to hold 64 MiB of keys
// held 88 to 112 MiB.
func TestSortRunHoldsItsBudget(t *testing.T) {
	const budget = 256 << 10
	defer SetSortRun(budget, 128)()
	for _, idLen := range []int{1, 10, 36, 100, 1000, budget + 1} {
		n := max(8*budget/(keyBytes+idLen), 3)
		s := newKeySorter(context.Background(), 1, n, t.TempDir())
		var runs, over int
		for i := range n {
			id := fmt.Sprintf("%0*d", idLen, i)
			if err := s.add(id); err != nil {
				t.Fatal(err)
			}
			if len(s.keys) == 1 {
				runs++
			}
			if h := s.held(); h > budget && (len(s.keys) > 1 || idLen <= budget) {
				over = max(over, h)
			}
		}
		s.close()
		if over > 0 {
			t.Errorf("sampleIds of %d bytes: a run held %d bytes, budget %d", idLen, over, budget)
		}
		if need := n * (keyBytes + idLen) / (budget / 2); idLen <= budget && runs > need+1 {
			t.Errorf("sampleIds of %d bytes: %d runs for %d keys, at most %d expected", idLen, runs, n, need+1)
		}
	}
}
