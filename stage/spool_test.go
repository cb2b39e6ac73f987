package stage_test

import (
	"context"
	"errors"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/stage"
	"github.com/shardproof/shardproof/stage/stagetest"
)

// Stage spools its rows in levels when there are more shards than open
// spool files: the inputs are read twice (the sort's keys, then the
// spool) whatever the shard count, each row is written to at most
// ceil(log_fan shards) spool files, and the release is byte for byte the
// one-level release, synth's in-memory release and, for synth(500, 2,
// seed 1)'s rows, the frozen golden root.
func TestStageSpoolLevelsSameRoot(t *testing.T) {
	ctx := context.Background()
	const shards = 23
	sres, rows := synthRows(t, 1500, shards, 3)
	paths := writeSources(t, t.TempDir(), rows, 3)
	for _, c := range []struct {
		fan, levels int
	}{
		{128, 1}, // 23 shards: one level, every row written once
		{3, 3},   // 9 < 23 <= 27
		{2, 5},   // 16 < 23 <= 32
	} {
		restoreFan := stage.SetMaxOpenSpools(c.fan)
		reads, restoreReads := stage.CountInputReads()
		levels, written := 0, int64(-1)
		restoreWatch := stage.WatchSpool(func(l int, w int64) { levels, written = l, w })
		tmp := t.TempDir()
		res, err := stage.Stage(ctx, stagetest.Store(t), stage.StageOptions{Inputs: paths, Shards: shards, Seed: 3, TempDir: tmp})
		restoreWatch()
		restoreReads()
		restoreFan()
		if err != nil {
			t.Fatalf("%d open spools: %v", c.fan, err)
		}
		if res.Root != sres.Root || res.Snapshot != sres.Snapshot {
			t.Fatalf("%d open spools: root %s snapshot %s, synth's %s %s", c.fan, res.Root, res.Snapshot, sres.Root, sres.Snapshot)
		}
		if got := reads(); got != 2*len(paths) {
			t.Errorf("%d open spools: %d reads of %d inputs, want 2 each (sort keys, spool)", c.fan, got, len(paths))
		}
		n := int64(len(rows))
		if levels != c.levels || written < n || written > n*int64(c.levels) {
			t.Errorf("%d open spools: %d levels, %d rows written to spool files for %d rows; want %d levels and at most %d rows written",
				c.fan, levels, written, n, c.levels, n*int64(c.levels))
		}
		if c.levels == 1 && written != n {
			t.Errorf("one level wrote %d rows for %d", written, n)
		}
		if left, _ := os.ReadDir(tmp); len(left) != 0 {
			t.Errorf("%d open spools: temporary files left behind: %v", c.fan, left)
		}
	}

	_, golden := synthRows(t, 500, 2, 1)
	defer stage.SetMaxOpenSpools(2)()
	res, err := stage.Stage(ctx, stagetest.Store(t), stage.StageOptions{Inputs: writeSources(t, t.TempDir(), golden, 2), Shards: 2, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Root.String(); got != goldenSynthRoot {
		t.Fatalf("stage of synth(500, 2, seed 1)'s rows: root %s, frozen %s", got, goldenSynthRoot)
	}
}

// A stage that fails while it splits its spool files (here canceled at
// the second level) stores nothing and leaves no temporary file.
func TestStageSpoolFailureLeavesNothing(t *testing.T) {
	_, rows := synthRows(t, 600, 23, 4)
	paths := writeSources(t, t.TempDir(), rows, 2)
	defer stage.SetMaxOpenSpools(2)()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	split := 0
	defer stage.OnSpoolSplit(func(level int) {
		if level == 2 {
			split++
			cancel()
		}
	})()
	s, tmp := stagetest.Store(t), t.TempDir()
	_, err := stage.Stage(ctx, s, stage.StageOptions{Inputs: paths, Shards: 23, Seed: 4, TempDir: tmp})
	if errcode.Of(err) != errcode.Canceled || !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want CANCELED", err)
	}
	if split != 1 {
		t.Fatalf("%d splits at level 2 began, want the stage to stop at the first", split)
	}
	if n := countObjects(t, s); n != 0 {
		t.Fatalf("a failed stage stored %d objects", n)
	}
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Fatalf("temporary files left behind: %v", left)
	}
}

// An input rewritten between the sort's read and the spool's (a writer
// still at work on it) is BAD_INPUT naming it, with nothing stored and no
// temporary file left: the rows it now holds are not the ones the order
// was made of, so staging them would drop rows from their shards or
// write them out of order. Same row count, the same sampleIds in another
// order, or other sampleIds: each is caught.
func TestStageInputChangedBetweenReads(t *testing.T) {
	_, rows := synthRows(t, 300, 4, 5)
	swapped := slices.Clone(rows[150:])
	swapped[0], swapped[1] = swapped[1], swapped[0]
	renamed := slices.Clone(rows[150:])
	renamed[7].SampleID += "-x"
	longer := append(slices.Clone(rows[150:]), rows[0])
	longer[len(longer)-1].SampleID += "-y"
	for name, now := range map[string][]stage.Row{"swapped": swapped, "renamed": renamed, "longer": longer} {
		paths := writeSources(t, t.TempDir(), rows, 2)
		seen := 0
		// The spool's read of the first input is when the second one is
		// replaced (a rename, as a writer publishing a file does), so the
		// spool opens the new file.
		restore := stage.OnInputRead(func(path string) {
			if path != paths[0] {
				return
			}
			if seen++; seen == 2 {
				tmp := paths[1] + ".new"
				if err := os.WriteFile(tmp, stagetest.Encode(t, now, stage.ParquetOptions{Codec: "snappy"}), 0o644); err != nil {
					t.Error(err)
				}
				if err := os.Rename(tmp, paths[1]); err != nil {
					t.Error(err)
				}
			}
		})
		s, tmp := stagetest.Store(t), t.TempDir()
		_, err := stage.Stage(context.Background(), s, stage.StageOptions{Inputs: paths, Shards: 4, Seed: 5, TempDir: tmp})
		restore()
		if seen != 2 {
			t.Fatalf("%s: input read %d times, want 2", name, seen)
		}
		if errcode.Of(err) != errcode.BadInput || !strings.Contains(err.Error(), paths[1]+" changed while it was staged") {
			t.Fatalf("%s: err = %v, want BAD_INPUT naming %s", name, err, paths[1])
		}
		if n := countObjects(t, s); n != 0 {
			t.Fatalf("%s: %d objects stored", name, n)
		}
		if left, _ := os.ReadDir(tmp); len(left) != 0 {
			t.Fatalf("%s: temporary files left behind: %v", name, left)
		}
	}
}

// A spool file writes its rows out once their strings pass the byte
// bound, not only every 2048 rows: open spool files (up to 128) then hold
// a bounded amount whatever the texts' length, and no batch nears the 2
// GiB of an Arrow string column. The release is the same.
func TestStageSpoolBatchesBoundedByBytes(t *testing.T) {
	ctx := context.Background()
	rows := make([]stage.Row, 600)
	for i := range rows {
		rows[i] = stage.Row{SampleID: "long-" + strconv.Itoa(i), SourceID: "web", SourceVersion: 1, Split: "train", Lang: "en", Text: strings.Repeat(strconv.Itoa(i%10), 4<<10), Tokens: 1}
	}
	paths := writeSources(t, t.TempDir(), rows, 2)
	want, err := stage.Stage(ctx, stagetest.Store(t), stage.StageOptions{Inputs: paths, Shards: 3, Seed: 5})
	if err != nil {
		t.Fatal(err)
	}
	const bound = 64 << 10
	row := 4<<10 + len("long-599web") + len("trainen")
	batches, largest := 0, 0
	defer stage.WatchSpoolBatches(bound, func(rows, bytes int) {
		batches++
		largest = max(largest, bytes)
	})()
	defer stage.SetMaxOpenSpools(2)() // a level of splits, which writes batches too
	got, err := stage.Stage(ctx, stagetest.Store(t), stage.StageOptions{Inputs: paths, Shards: 3, Seed: 5})
	if err != nil {
		t.Fatal(err)
	}
	if got.Root != want.Root {
		t.Fatalf("root %s with small spool batches, %s without", got.Root, want.Root)
	}
	if batches == 0 || largest >= bound+row {
		t.Fatalf("%d spool batches, the largest holding %d bytes of strings; want none past %d plus a row (%d)", batches, largest, bound, row)
	}
}
