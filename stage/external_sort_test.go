package stage_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/stage"
	"github.com/shardproof/shardproof/stage/stagetest"
)

// smallRuns makes every sort below external: runs of about 50 keys,
// merged 3 at a time, so a few thousand rows make dozens of runs and
// several merge levels (TestSortRowsExternalMatchesMemory counts them).
func smallRuns(t *testing.T) {
	t.Cleanup(stage.SetSortRun(2000, 3))
}

// synthRows returns the rows of a synthetic release, in shard order.
func synthRows(t *testing.T, samples, shards int, seed int64) (stage.Result, []stage.Row) {
	s := stagetest.Store(t)
	res := stagetest.Synth(t, s, samples, shards, seed)
	var rows []stage.Row
	for i := range res.Release.Shards {
		rows = append(rows, stagetest.ShardRows(t, s, res, i)...)
	}
	return res, rows
}

// A release sorted on disk is byte for byte the release sorted in
// memory: the same root (hence the same shard bytes, descriptors and
// snapshot), the frozen golden root too, and nothing left in TempDir.
func TestSynthExternalSortSameRoot(t *testing.T) {
	ctx := context.Background()
	mem := stagetest.Synth(t, stagetest.Store(t), 3000, 4, 7)
	smallRuns(t)
	tmp := t.TempDir()
	ext, err := stage.Synth(ctx, stagetest.Store(t), stage.SynthOptions{Samples: 3000, Shards: 4, Seed: 7, TempDir: tmp})
	if err != nil {
		t.Fatal(err)
	}
	if ext.Root != mem.Root || ext.Snapshot != mem.Snapshot {
		t.Fatalf("external sort: root %s snapshot %s, in memory %s %s", ext.Root, ext.Snapshot, mem.Root, mem.Snapshot)
	}
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Fatalf("temporary files left behind: %v", left)
	}
	if got := stagetest.Synth(t, stagetest.Store(t), 500, 2, 1).Root.String(); got != goldenSynthRoot {
		t.Fatalf("synth(500, 2, seed 1) sorted on disk: root %s, frozen %s", got, goldenSynthRoot)
	}
}

// stage from Parquet files sorts on disk to the release synth makes of
// the same rows in memory, over several spool passes too.
func TestStageExternalSortSameRoot(t *testing.T) {
	ctx := context.Background()
	sres, rows := synthRows(t, 1500, 5, 3)
	paths := writeSources(t, t.TempDir(), rows, 3)
	smallRuns(t)
	defer stage.SetMaxOpenSpools(2)()
	tmp := t.TempDir()
	res, err := stage.Stage(ctx, stagetest.Store(t), stage.StageOptions{Inputs: paths, Shards: 5, Seed: 3, TempDir: tmp})
	if err != nil {
		t.Fatal(err)
	}
	if res.Root != sres.Root || res.Snapshot != sres.Snapshot {
		t.Fatalf("staged on disk: root %s, synth in memory %s", res.Root, sres.Root)
	}
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Fatalf("temporary files left behind: %v", left)
	}
}

// A sampleId in the first row and again in the last, so in different
// runs, is found by the merge: BAD_INPUT naming it, nothing stored, no
// temporary file left; with whole hashes and with hashes narrowed so
// that it ties with other sampleIds.
func TestExternalSortDuplicateAcrossRuns(t *testing.T) {
	ctx := context.Background()
	_, rows := synthRows(t, 1500, 3, 3)
	dup := rows[0]
	dup.Split, dup.Text = "val", "another text"
	rows = append(rows, dup)
	paths := writeSources(t, t.TempDir(), rows, 3)
	smallRuns(t)
	for _, mask := range []uint64{^uint64(0), 0xf} {
		restore := stage.SetKeyHashMask(mask)
		s, tmp := stagetest.Store(t), t.TempDir()
		_, err := stage.Stage(ctx, s, stage.StageOptions{Inputs: paths, Shards: 3, Seed: 3, TempDir: tmp})
		restore()
		// Both rows named, by file: row 0 of the first, and the last,
		// row 500 of the third (rows 1,000 to 1,500).
		where := fmt.Sprintf(" occurs more than once in the input (%s row 0 and %s row 500)", paths[0], paths[2])
		if errcode.Of(err) != errcode.BadInput || !strings.Contains(err.Error(), strconv.Quote(dup.SampleID)+where) {
			t.Fatalf("mask %#x: err = %v, want BAD_INPUT naming %q%s", mask, err, dup.SampleID, where)
		}
		if n := countObjects(t, s); n != 0 {
			t.Fatalf("mask %#x: a duplicate wrote %d objects", mask, n)
		}
		if left, _ := os.ReadDir(tmp); len(left) != 0 {
			t.Fatalf("mask %#x: temporary files left behind: %v", mask, left)
		}
	}
}

// maskedKey orders like the staging order with hashes narrowed to mask.
func maskedKey(seed, mask uint64, id string) string {
	d := xxhash.NewWithSeed(seed)
	d.WriteString(id)
	h := strconv.FormatUint(d.Sum64()&mask, 16)
	return strings.Repeat("0", 16-len(h)) + h + "\x00" + id
}

// With hashes narrowed to 4 bits, nearly every row ties with a row of
// another run; ties go by sampleId on disk as in memory: synth and stage
// give the in-memory root, and every shard's rows follow the narrowed
// order.
func TestExternalSortHashTies(t *testing.T) {
	ctx := context.Background()
	const mask = 0xf
	defer stage.SetKeyHashMask(mask)()
	mem, rows := synthRows(t, 2000, 5, 9)
	var prev string
	for _, r := range rows {
		k := maskedKey(9, mask, r.SampleID)
		if k <= prev {
			t.Fatalf("in memory: %s out of the narrowed order", r.SampleID)
		}
		prev = k
	}
	paths := writeSources(t, t.TempDir(), rows, 2)
	smallRuns(t)
	ext, err := stage.Synth(ctx, stagetest.Store(t), stage.SynthOptions{Samples: 2000, Shards: 5, Seed: 9})
	if err != nil {
		t.Fatal(err)
	}
	staged, err := stage.Stage(ctx, stagetest.Store(t), stage.StageOptions{Inputs: paths, Shards: 5, Seed: 9})
	if err != nil {
		t.Fatal(err)
	}
	if ext.Root != mem.Root || staged.Root != mem.Root {
		t.Fatalf("hash ties: synth on disk %s, stage on disk %s, synth in memory %s", ext.Root, staged.Root, mem.Root)
	}
}

// The directories of a stage killed outright (its lock files free and
// older than a minute) are removed by the next one, the sort's too.
func TestStageSweepsDeadStagesDirectories(t *testing.T) {
	tmp := t.TempDir()
	var dead []string
	for _, prefix := range []string{stage.StageTempPrefix, stage.MembersTempPrefix, stage.SortTempPrefix} {
		d := filepath.Join(tmp, prefix+"dead")
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		lock := filepath.Join(d, ".lock")
		if err := os.WriteFile(lock, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(d, "run000001"), make([]byte, 100), 0o600)
		old := time.Now().Add(-time.Hour)
		os.Chtimes(lock, old, old)
		dead = append(dead, d)
	}
	if _, err := stage.Synth(context.Background(), stagetest.Store(t), stage.SynthOptions{Samples: 50, Shards: 1, TempDir: tmp}); err != nil {
		t.Fatal(err)
	}
	for _, d := range dead {
		if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: still there after the next stage (%v)", filepath.Base(d), err)
		}
	}
}
