package coordinator

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/objstore"
	"github.com/shardproof/shardproof/objstore/faults"
	"github.com/shardproof/shardproof/reducer"
	"github.com/shardproof/shardproof/shuffle"
	"github.com/shardproof/shardproof/stage/stagetest"
)

// mergeFiles lists what reduce merge levels left in s for plan j.
func mergeFiles(t *testing.T, s objstore.Store, j *Job) []objstore.ObjectInfo {
	t.Helper()
	page, err := s.List(t.Context(), j.prefix()+"merge/", "", 100)
	if err != nil {
		t.Fatal(err)
	}
	return page.Objects
}

// A reduce task whose map tasks' files outnumber the plan's fan-in merges
// them a group at a time first. A damaged input fails the task with
// SHUFFLE_CORRUPT naming it, before the group's merged file is stored; a
// merged file whose upload fails fails the task with the store's code and
// leaves none of the task's merged files behind; a rerun then commits,
// listing the files its merge level wrote.
func TestMergeLevelFailures(t *testing.T) {
	for _, sum := range []shuffle.Checksum{shuffle.XXH64, shuffle.SHA256} {
		t.Run(string(sum), func(t *testing.T) {
			s, res := synth(t)
			ctx := t.Context()
			o := PlanOptions{Root: res.Root, MapTasks: 4, Reducers: 2, Tool: "shardproof test", ShuffleCompression: shuffle.None, ShuffleChecksum: sum, ReduceFanIn: 2, Parallelism: 2}
			j := openPlan(t, s, o)
			if j.Plan.ReduceFanIn != 2 || len(j.Plan.MapTasks) != 4 {
				t.Fatalf("plan has %d map tasks and fan-in %d", len(j.Plan.MapTasks), j.Plan.ReduceFanIn)
			}
			var commits []*MapCommit
			for i := range 4 {
				c, err := j.Map(ctx, i, nil)
				if err != nil {
					t.Fatal(err)
				}
				commits = append(commits, c)
			}
			out := commits[1].Outputs[1]
			rotted := &faults.BitFlip{Store: s, Match: func(k string) bool { return k == out.Key }, Offset: out.Size - 8 - 16, Bit: 3}
			jr, err := Open(ctx, rotted, j.PlanDigest)
			if err != nil {
				t.Fatal(err)
			}
			_, err = jr.Reduce(ctx, 1)
			if errcode.Of(err) != errcode.ShuffleCorrupt || !strings.Contains(err.Error(), out.Key) {
				t.Fatalf("merge level over a damaged shuffle file: %v; want %s naming %s", err, errcode.ShuffleCorrupt, out.Key)
			}
			if left := mergeFiles(t, s, j); len(left) > 0 {
				t.Fatalf("a merged file of a damaged group was stored: %+v", left)
			}

			broken := &faults.ErrorOnce{Store: s, Method: faults.Put, Err: errcode.New(errcode.StoreUnavailable, "injected"),
				Match: func(k string) bool { return strings.Contains(k, "/merge/") && strings.HasSuffix(k, "/1.arrow") }}
			jb, err := Open(ctx, broken, j.PlanDigest)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := jb.Reduce(ctx, 0); errcode.Of(err) != errcode.StoreUnavailable || !broken.Fired() {
				t.Fatalf("reduce whose second merged file fails to upload: %v (fired %v); want %s", err, broken.Fired(), errcode.StoreUnavailable)
			}
			if left := mergeFiles(t, s, j); len(left) > 0 {
				t.Fatalf("merged files left after a failed reduce task: %+v", left)
			}
			for r := range 2 {
				c, err := jb.Reduce(ctx, r)
				if err != nil {
					t.Fatalf("rerun of reduce task %d: %v", r, err)
				}
				if len(c.Merged) != 2 || len(c.Inputs) != 4 {
					t.Fatalf("reduce task %d: %d merged files from %d inputs, want 2 from 4", r, len(c.Merged), len(c.Inputs))
				}
				var rows int64
				for _, in := range c.Inputs {
					rows += in.Rows
				}
				var merged int64
				for _, m := range c.Merged {
					if (m.XXH64 != "") != (sum == shuffle.XXH64) || m.Digest.IsZero() != (sum == shuffle.XXH64) {
						t.Fatalf("merged file %s checked with xxh64 %q and digest %s in a %s plan", m.Key, m.XXH64, m.Digest, sum)
					}
					merged += m.Rows
				}
				if merged != rows || rows == 0 {
					t.Fatalf("reduce task %d: merged %d rows of %d", r, merged, rows)
				}
			}
			if left := mergeFiles(t, s, j); len(left) > 0 {
				t.Fatalf("merged files left after the reduce tasks committed: %+v", left)
			}
		})
	}
}

// A merged file whose upload's answer was lost, and whose retry met the
// object it stored (faults.LostAnswer: PRECONDITION_FAILED), is that
// file: the reduce task commits it, where it failed with
// PRECONDITION_FAILED, exit 4, a refusal no engine runs again.
func TestMergeLevelAnswerLost(t *testing.T) {
	s, res := synth(t)
	ctx := t.Context()
	o := PlanOptions{Root: res.Root, MapTasks: 4, Reducers: 1, Tool: "shardproof test", ShuffleCompression: shuffle.None, ReduceFanIn: 2, Parallelism: 2}
	j := openPlan(t, s, o)
	for i := range 4 {
		if _, err := j.Map(ctx, i, nil); err != nil {
			t.Fatal(err)
		}
	}
	lost := &faults.LostAnswer{Store: s, Err: fmt.Errorf("the retry's answer: %w", objstore.ErrPreconditionFailed),
		Match: func(k string) bool { return strings.Contains(k, "/merge/") && strings.HasSuffix(k, "/1.arrow") }}
	jl, err := Open(ctx, lost, j.PlanDigest)
	if err != nil {
		t.Fatal(err)
	}
	c, err := jl.Reduce(ctx, 0)
	if err != nil || !lost.Fired() {
		t.Fatalf("reduce whose merged file's answer was lost: %v (fired %v)", err, lost.Fired())
	}
	var rows, merged int64
	for _, in := range c.Inputs {
		rows += in.Rows
	}
	for _, m := range c.Merged {
		if m.Version == "" {
			t.Fatalf("merged file %s committed without its version", m.Key)
		}
		merged += m.Rows
	}
	if len(c.Merged) != 2 || merged != rows || rows == 0 {
		t.Fatalf("%d merged files of %d rows from %d", len(c.Merged), merged, rows)
	}
}

// A reduce task above the fan-in holds a group and its merged file open,
// then at most fan-in merged files, however many map tasks (above fan²,
// in more than one level): the open-file check counts that, not one file
// per map task.
func TestReduceFilesWithFanIn(t *testing.T) {
	for _, c := range []struct{ maps, fan, want int }{
		{10, 0, 10}, {10, 10, 10}, {10, 16, 10}, {10, 4, 5}, {7630, 256, 257}, {100000, 256, 257},
		// Commit records read 16 at a time, before a file is merged.
		{100, 2, 16 - reduceFileSlack}, {12, 2, 12 - reduceFileSlack}, {12, 4, 5},
	} {
		j := &Job{Plan: &Plan{MapTasks: make([][]Input, c.maps), ReduceFanIn: c.fan}}
		if got := j.reduceFiles() - reduceFileSlack; got != c.want {
			t.Errorf("%d map tasks, fan-in %d: %d files open at once, want %d", c.maps, c.fan, got, c.want)
		}
	}
}

// openBodies counts the Gets of the wrapped store in flight or with
// their body open, at once: each holds a file, or a connection on S3.
type openBodies struct {
	objstore.Store
	mu         sync.Mutex
	open, peak int
}

func (o *openBodies) add(n int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.open += n
	o.peak = max(o.peak, o.open)
}

func (o *openBodies) Get(ctx context.Context, key string, v objstore.Version) (io.ReadCloser, error) {
	o.add(1)
	rc, err := o.Store.Get(ctx, key, v)
	if err != nil {
		o.add(-1)
		return nil, err
	}
	return &countedBody{ReadCloser: rc, o: o}, nil
}

type countedBody struct {
	io.ReadCloser
	o    *openBodies
	once sync.Once
}

func (b *countedBody) Close() error {
	b.once.Do(func() { b.o.add(-1) })
	return b.ReadCloser.Close()
}

// A reduce task holds no more files open at once than reduceFiles, what
// the open-file limit is checked against (FILE_LIMIT), also at a small
// fan-in, where the map tasks' commit records it reads several at a time
// outnumber the files its merge level holds.
func TestReduceOpensAtMostReduceFiles(t *testing.T) {
	s := stagetest.Store(t)
	res := stagetest.Synth(t, s, 400, 24, 7)
	j := openPlan(t, s, PlanOptions{Root: res.Root, MapTasks: 24, Reducers: 1, Tool: "shardproof test", ReduceFanIn: 2, Parallelism: 2})
	ctx := t.Context()
	if err := runAll(ctx, len(j.Plan.MapTasks), 2, func(ctx context.Context, i int) error { _, err := j.Map(ctx, i, nil); return err }); err != nil {
		t.Fatal(err)
	}
	// The commit records answer after a round trip, as on S3, so the
	// reads overlap.
	counted := *j
	o := &openBodies{Store: &faults.Latency{Store: s, Delay: 20 * time.Millisecond, Match: func(k string) bool {
		return strings.HasPrefix(k, j.prefix()+"map/") && strings.HasSuffix(k, "/commit.json")
	}}}
	counted.Store = o
	if _, err := counted.Reduce(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if o.peak > j.reduceFiles() {
		t.Fatalf("reduce task held %d store bodies open at once; reduceFiles says %d", o.peak, j.reduceFiles())
	}
}

// The last bytes of a shuffle file that the source fails to deliver keep
// the source's code; bytes that fail their checksum, or a bare read
// error, are SHUFFLE_CORRUPT.
func TestDrainError(t *testing.T) {
	j := &Job{}
	for _, c := range []struct {
		err  error
		want errcode.Code
	}{
		{errcode.New(errcode.StoreUnavailable, "connection lost"), errcode.StoreUnavailable},
		{errcode.New(errcode.Canceled, "interrupted"), errcode.Canceled},
		{errcode.New(errcode.IO, "read"), errcode.IO},
		{errcode.New(errcode.DigestMismatch, "sha256"), errcode.ShuffleCorrupt},
		{errcode.New(errcode.SizeMismatch, "short"), errcode.ShuffleCorrupt},
		{io.ErrUnexpectedEOF, errcode.ShuffleCorrupt},
	} {
		err := j.drainError(c.err, 3, "jobs/x/map/0/r3.arrow")
		if errcode.Of(err) != c.want || !strings.Contains(err.Error(), "jobs/x/map/0/r3.arrow") {
			t.Errorf("%v: %s (%v), want %s naming the file", c.err, errcode.Of(err), err, c.want)
		}
	}
}

// An engine may run one reduce task twice at once (a Kubernetes index
// whose pod is replaced while the first still runs). Each attempt's merge
// level writes files of its own, so their commit records differ in
// merged alone: the second to commit takes the first's record, as it
// would without a merge level, instead of failing NONDETERMINISM.
func TestMergeLevelReduceTwiceAtOnce(t *testing.T) {
	s, res := synth(t)
	ctx := t.Context()
	j := openPlan(t, s, PlanOptions{Root: res.Root, MapTasks: 4, Reducers: 2, Tool: "shardproof test", ShuffleCompression: shuffle.None, ReduceFanIn: 2, Parallelism: 2})
	for i := range 4 {
		if _, err := j.Map(ctx, i, nil); err != nil {
			t.Fatal(err)
		}
	}
	first, err := j.Reduce(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	// The second attempt looked for the commit record before the first
	// wrote it.
	late := &faults.ErrorOnce{Store: s, Method: faults.Get, Err: objstore.ErrNotExist,
		Match: func(k string) bool { return k == j.reduceCommitKey(0) }}
	j2, err := Open(ctx, late, j.PlanDigest)
	if err != nil {
		t.Fatal(err)
	}
	second, err := j2.Reduce(ctx, 0)
	if err != nil || !late.Fired() {
		t.Fatalf("second attempt of a reduce task with a merge level: %v (fired %v); want the first's commit", err, late.Fired())
	}
	if len(second.Merged) != 2 || second.Merged[0] != first.Merged[0] || second.Result.Counts != first.Result.Counts {
		t.Fatalf("second attempt returned merged %+v, counts %+v; the first committed %+v, %+v", second.Merged, second.Result.Counts, first.Merged, first.Result.Counts)
	}
	if left := mergeFiles(t, s, j); len(left) > 0 {
		t.Fatalf("merged files left after both attempts: %+v", left)
	}
	// A record that differs in more than merged is still a rerun that
	// gave another result.
	altered := *first
	altered.Result = &reducer.Result{}
	*altered.Result = *first.Result
	altered.Result.Counts.Extra++
	b, err := manifest.Encode(&altered)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, j.reduceCommitKey(0), bytes.NewReader(b), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	late = &faults.ErrorOnce{Store: s, Method: faults.Get, Err: objstore.ErrNotExist,
		Match: func(k string) bool { return k == j.reduceCommitKey(0) }}
	j3, err := Open(ctx, late, j.PlanDigest)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := j3.Reduce(ctx, 0); errcode.Of(err) != errcode.Nondeterminism {
		t.Fatalf("attempt beside a commit record of another result: %v; want %s", err, errcode.Nondeterminism)
	}
}

// A reduce commit record read back names exactly the merged files its
// plan's merge level writes, under its own task's prefix, with the plan's
// checksum: a damaged one is SHUFFLE_CORRUPT, not figures in a report.
func TestReduceCommitMergedChecked(t *testing.T) {
	s, res := synth(t)
	ctx := t.Context()
	j := openPlan(t, s, PlanOptions{Root: res.Root, MapTasks: 4, Reducers: 2, Tool: "shardproof test", ShuffleCompression: shuffle.None, ShuffleChecksum: shuffle.XXH64, ReduceFanIn: 2, Parallelism: 2})
	for i := range 4 {
		if _, err := j.Map(ctx, i, nil); err != nil {
			t.Fatal(err)
		}
	}
	c, err := j.Reduce(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := j.checkReduceCommit(1, c); err != nil {
		t.Fatalf("the task's own record: %v", err)
	}
	for name, damage := range map[string]func(rc *ReduceCommit){
		"one dropped": func(rc *ReduceCommit) { rc.Merged = rc.Merged[1:] },
		"another task's": func(rc *ReduceCommit) {
			rc.Merged[0].Key = strings.Replace(rc.Merged[0].Key, "/merge/1/", "/merge/0/", 1)
		},
		"outside the job":    func(rc *ReduceCommit) { rc.Merged[1].Key = "blobs/sha256/x" },
		"negative size":      func(rc *ReduceCommit) { rc.Merged[0].Size = -1 },
		"negative rows":      func(rc *ReduceCommit) { rc.Merged[1].Rows = -5 },
		"the other checksum": func(rc *ReduceCommit) { rc.Merged[0].XXH64, rc.Merged[0].Digest = "", manifest.Digest{1} },
	} {
		rc := *c
		rc.Merged = slices.Clone(c.Merged)
		damage(&rc)
		if err := j.checkReduceCommit(1, &rc); errcode.Of(err) != errcode.ShuffleCorrupt {
			t.Errorf("%s: %v, want SHUFFLE_CORRUPT", name, err)
		}
	}
}
