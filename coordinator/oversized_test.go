package coordinator

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/mapper"
	"github.com/shardproof/shardproof/objstore/file"
	"github.com/shardproof/shardproof/shuffle"
)

// oversize makes the latest version of key, in the file store at dir,
// one byte longer than any commit record a reader takes: its record
// followed by manifest.MaxDocumentSize spaces, as a disk that wrote
// garbage after it would leave it.
func oversize(t *testing.T, s *file.Store, dir, key string) {
	t.Helper()
	v := must(s.Head(t.Context(), key, "")).Version
	rewrite(t, versionFile(t, dir, key, v), func(b []byte) []byte {
		return append(b, bytes.Repeat([]byte{' '}, manifest.MaxDocumentSize)...)
	})
}

// A map task's commit record larger than manifest.MaxDocumentSize is
// refused by every reader (DOCUMENT_TOO_LARGE), and used to be for good:
// no reader ran the task again, as one does over a record that does not
// decode. It is damage as much: the map task, a reduce task reading it
// and a resume run the task again, within the bound of runs, and the
// resume ends with the report a verification without damage gives;
// found so after maxRuns runs, it is SHUFFLE_CORRUPT naming the record.
func TestOversizedMapCommitRecordRunsTaskAgain(t *testing.T) {
	s, dir, res := fileSynth(t)
	ctx := t.Context()
	want := verify(t, s, PlanOptions{Root: res.Root, Nonce: "undamaged"})
	j, _ := mappedJob(t, s, uncompressedPlan(res.Root, 3, 2, shuffle.SHA256))
	must(j.Reduce(ctx, 0))
	key := j.mapCommitKey(1)

	oversize(t, s, dir, key)
	var mapped int
	if _, err := j.Map(ctx, 1, func(mapper.Result) { mapped++ }); err != nil {
		t.Fatalf("map task 1 over its oversized commit record: %v", err)
	}
	if n := versions(t, s, key); n != 2 || mapped != len(j.Plan.MapTasks[1]) {
		t.Fatalf("map task 1 over its oversized record: %d versions, %d inputs reported; want 2 and %d", n, mapped, len(j.Plan.MapTasks[1]))
	}

	// A reduce task, in a resume, finds it so.
	oversize(t, s, dir, key)
	got, err := Run(ctx, s, j.PlanDigest, 2, nil)
	if err != nil {
		t.Fatalf("resume over an oversized map commit record: %v", err)
	}
	if !bytes.Equal(withoutExec(t, got.Report), withoutExec(t, want)) {
		t.Fatalf("resume over an oversized map commit record: report\n%s\nwant\n%s", withoutExec(t, got.Report), withoutExec(t, want))
	}
	if n := versions(t, s, key); n != maxRuns {
		t.Fatalf("map task 1's record has %d versions, want %d", n, maxRuns)
	}

	oversize(t, s, dir, key)
	j2 := must(Open(ctx, s, j.PlanDigest))
	_, err = j2.Map(ctx, 1, nil)
	if errcode.Of(err) != errcode.ShuffleCorrupt || !strings.Contains(err.Error(), key+" is damaged again") || !strings.Contains(err.Error(), fmt.Sprintf("run %d times", maxRuns)) {
		t.Fatalf("map task 1 oversized after %d runs: %v; want %s naming %s", maxRuns, err, errcode.ShuffleCorrupt, key)
	}
	if n := versions(t, s, key); n != maxRuns {
		t.Fatalf("map task 1's record has %d versions, want %d: the task ran past its bound", n, maxRuns)
	}
}

// A reduce task's commit record larger than manifest.MaxDocumentSize
// has the aggregation run the task again, as one that does not decode
// does, instead of failing it with DOCUMENT_TOO_LARGE for good; so does
// a map task's record that the map task's run again compares with the
// reduce tasks' records (one oversized is not its to judge).
func TestOversizedReduceCommitRecordRunsTaskAgain(t *testing.T) {
	s, dir, res := fileSynth(t)
	ctx := t.Context()
	want := verify(t, s, PlanOptions{Root: res.Root, Nonce: "undamaged"})
	j, _, _ := committedJob(t, s, uncompressedPlan(res.Root, 2, 2, shuffle.XXH64))
	oversize(t, s, dir, j.reduceCommitKey(0))
	rewriteLatest(t, s, dir, j.mapCommitKey(1), func(b []byte) []byte { return b[:100] })
	rep, _, err := j.Aggregate(ctx, manifest.Execution{Executor: "test"})
	if err != nil {
		t.Fatalf("aggregate over an oversized reduce commit record: %v", err)
	}
	if !bytes.Equal(withoutExec(t, rep), withoutExec(t, want)) {
		t.Fatalf("aggregate over an oversized reduce commit record: report\n%s\nwant\n%s", withoutExec(t, rep), withoutExec(t, want))
	}
	for _, key := range []string{j.reduceCommitKey(0), j.mapCommitKey(1)} {
		if n := versions(t, s, key); n != 2 {
			t.Errorf("%s has %d versions, want 2", key, n)
		}
	}
}
