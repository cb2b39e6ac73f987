package reducer

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/shuffle"
)

// combined merges srcs over [lo, hi) a group of fan at a time, as a
// reduce task's merge level does, each group through a shuffle.StreamWriter
// of batchRows rows per batch, and returns readers of the merged files.
func combined(t testing.TB, srcs []Source, fan int, lo, hi uint32, c shuffle.Compression, batchRows int) []Source {
	t.Helper()
	var out []Source
	for g := 0; g < len(srcs); g += fan {
		var buf bytes.Buffer
		sw, err := shuffle.NewStreamWriter(&buf, c, batchRows)
		if err != nil {
			t.Fatal(err)
		}
		err = Combine(t.Context(), lo, hi, srcs[g:min(g+fan, len(srcs))], func(rs []shuffle.Row) error {
			for i := range rs {
				if err := sw.Append(&rs[i]); err != nil {
					return err
				}
			}
			return nil
		})
		if cerr := sw.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			t.Fatal(err)
		}
		rd, err := shuffle.NewReaderCompression(bytes.NewReader(buf.Bytes()), c, int64(buf.Len()), fmt.Sprint("merged ", g), testK, lo, hi)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(rd.Close)
		out = append(out, rd)
	}
	return out
}

// Combine over any split of a range's rows among sources, in groups of
// any size, gives streams whose Reduce is the direct Reduce's Result: the
// same counts, examples and leaves, with and without the snapshot's leaf
// index, whatever the merged files' batch size and compression. The fuzz
// input picks the range, the split, the group size, the batch size and
// the compression; the seeds run in plain go test.
func FuzzCombineKeepsReduceResult(f *testing.F) {
	for seed := range uint64(24) {
		f.Add(seed)
	}
	rows, snap, _, _ := scenario(f, 600)
	relRows, snapRows := bySide(rows)
	snapLeaves := leaves(f, snap)
	tombs := NewSet(&manifest.FenceLog{Entries: []manifest.FenceEntry{{Seq: 1, SampleID: "s00010"}, {Seq: 2, SampleID: "s00001"}}})
	f.Fuzz(func(t *testing.T, seed uint64) {
		rng := rand.New(rand.NewPCG(seed, 12))
		lo := uint32(rng.IntN(1 << testK))
		hi := lo + 1 + uint32(rng.IntN(1<<testK-int(lo)))
		m := 2 + rng.IntN(9)
		fan := 2 + rng.IntN(m)
		batch := []int{1, 3, 64, 1024}[rng.IntN(4)]
		c := []shuffle.Compression{shuffle.None, shuffle.Zstd}[rng.IntN(2)]
		split := rng.Uint64()
		name := fmt.Sprintf("[%d, %d), %d sources in groups of %d, %d rows per batch, %s", lo, hi, m, fan, batch, c)
		// The full diff: both sides in the shuffle.
		want, err := Reduce(t.Context(), Options{K: testK, Lo: lo, Hi: hi, Tombstones: tombs}, sources(t, rows, m, lo, hi, split))
		if err != nil {
			t.Fatal(err)
		}
		got, err := Reduce(t.Context(), Options{K: testK, Lo: lo, Hi: hi, Tombstones: tombs}, combined(t, sources(t, rows, m, lo, hi, split), fan, lo, hi, c, batch))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		sameResult(t, name, want, got)
		// With the leaf index: release rows only in the shuffle.
		idx := func() Options {
			return Options{K: testK, Lo: lo, Hi: hi, Tombstones: tombs, Snapshot: newBucketRows(snapRows), SnapshotLeaves: snapLeaves[32*lo : 32*hi]}
		}
		want, err = Reduce(t.Context(), idx(), sources(t, relRows, m, lo, hi, split))
		if err != nil {
			t.Fatal(err)
		}
		got, err = Reduce(t.Context(), idx(), combined(t, sources(t, relRows, m, lo, hi, split), fan, lo, hi, c, batch))
		if err != nil {
			t.Fatalf("%s, leaf index: %v", name, err)
		}
		sameResult(t, name+", leaf index", want, got)
	})
}

func sameResult(t testing.TB, name string, want, got *Result) {
	t.Helper()
	if got.Counts != want.Counts || !bytes.Equal(got.ReleaseLeaves, want.ReleaseLeaves) || !bytes.Equal(got.SnapshotLeaves, want.SnapshotLeaves) || len(got.Examples) != len(want.Examples) {
		t.Fatalf("%s: counts %+v (direct %+v), leaves equal %v/%v, %d example classes (direct %d)", name, got.Counts, want.Counts,
			bytes.Equal(got.ReleaseLeaves, want.ReleaseLeaves), bytes.Equal(got.SnapshotLeaves, want.SnapshotLeaves), len(got.Examples), len(want.Examples))
	}
	for code, ids := range want.Examples {
		if !slices.Equal(got.Examples[code], ids) {
			t.Fatalf("%s: examples[%s] = %v, direct %v", name, code, got.Examples[code], ids)
		}
	}
}
