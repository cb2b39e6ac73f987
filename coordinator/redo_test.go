package coordinator

import (
	"bytes"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/mapper"
	"github.com/shardproof/shardproof/objstore"
	"github.com/shardproof/shardproof/objstore/faults"
	"github.com/shardproof/shardproof/objstore/file"
	"github.com/shardproof/shardproof/objstore/s3/s3test"
	"github.com/shardproof/shardproof/shuffle"
	"github.com/shardproof/shardproof/stage"
	"github.com/shardproof/shardproof/stage/stagetest"
)

// fileSynth is synth in a file store whose directory it returns too, so
// a test can damage a stored version on disk as a failing disk would.
func fileSynth(t *testing.T) (*file.Store, string, stage.Result) {
	t.Helper()
	dir := t.TempDir()
	s, err := file.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, dir, stagetest.Synth(t, s, testSamples, testShards, 7)
}

// versionFile is the file holding version v of key in the file store at
// dir (objstore/file: <key>/@<seq, 20 digits>, version "v<seq>").
func versionFile(t *testing.T, dir, key string, v objstore.Version) string {
	t.Helper()
	seq, err := strconv.ParseUint(strings.TrimPrefix(string(v), "v"), 10, 64)
	if err != nil {
		t.Fatalf("version %q: %v", v, err)
	}
	return filepath.Join(dir, filepath.FromSlash(key), fmt.Sprintf("@%020d", seq))
}

// rewrite applies edit to the bytes of a stored version on disk.
func rewrite(t *testing.T, path string, edit func([]byte) []byte) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, edit(b), 0o644); err != nil {
		t.Fatal(err)
	}
}

// versions returns how many versions key has.
func versions(t *testing.T, s *file.Store, key string) int {
	t.Helper()
	vs, err := s.Versions(t.Context(), key, 100)
	if err != nil {
		t.Fatal(err)
	}
	return len(vs)
}

// withoutExec is a report's encoding without its execution section.
func withoutExec(t *testing.T, r *manifest.Report) []byte {
	t.Helper()
	c := *r
	c.Execution = manifest.Execution{}
	return must(manifest.Encode(&c))
}

// rewriteLatest applies edit to the bytes of key's latest version in
// the file store s at dir.
func rewriteLatest(t *testing.T, s objstore.Store, dir, key string, edit func([]byte) []byte) {
	t.Helper()
	rewrite(t, versionFile(t, dir, key, must(s.Head(t.Context(), key, "")).Version), edit)
}

// uncompressedPlan is the plan of maps map tasks and reducers reduce
// tasks of root the run-again tests make: uncompressed shuffle files
// checked by sum.
func uncompressedPlan(root manifest.Digest, maps, reducers int, sum shuffle.Checksum) PlanOptions {
	return PlanOptions{Root: root, MapTasks: maps, Reducers: reducers, Tool: "shardproof test",
		ShuffleCompression: shuffle.None, ShuffleChecksum: sum}
}

// mappedJob plans o in s, opens the job and runs every map task; it
// returns their commit records.
func mappedJob(t *testing.T, s objstore.Store, o PlanOptions) (*Job, []*MapCommit) {
	t.Helper()
	j := openPlan(t, s, o)
	var commits []*MapCommit
	for i := range len(j.Plan.MapTasks) {
		commits = append(commits, must(j.Map(t.Context(), i, nil)))
	}
	return j, commits
}

// committedJob is mappedJob with every reduce task run too; it returns
// the reduce tasks' commit records as well.
func committedJob(t *testing.T, s objstore.Store, o PlanOptions) (*Job, []*MapCommit, []*ReduceCommit) {
	t.Helper()
	j, maps := mappedJob(t, s, o)
	var reduces []*ReduceCommit
	for r := range j.Plan.Reducers {
		reduces = append(reduces, must(j.Reduce(t.Context(), r)))
	}
	return j, maps, reduces
}

// sameReportButExec fails the test unless got encodes as want does, but
// for their execution sections.
func sameReportButExec(t *testing.T, got, want *manifest.Report) {
	t.Helper()
	if !bytes.Equal(withoutExec(t, got), withoutExec(t, want)) {
		t.Fatalf("report\n%s\nwant\n%s", withoutExec(t, got), withoutExec(t, want))
	}
}

// s3Synth is synth in a versioned bucket of a fresh S3 server, whose
// address it returns too.
func s3Synth(t *testing.T) (string, objstore.Store, stage.Result) {
	t.Helper()
	raw := s3test.Start(t)
	s, err := objstore.Open(t.Context(), raw)
	if err != nil {
		t.Fatal(err)
	}
	return raw, s, stagetest.Synth(t, s, testSamples, testShards, 7)
}

// A shuffle file damaged after its map task committed (a bit flipped past
// its schema message or in it, cut short, deleted) used to fail every
// reduce task reading it, and every resume, with SHUFFLE_CORRUPT (NOT_FOUND
// when deleted) for good. A resume now runs that map task again: new
// versions of its files and a new version of its commit record naming
// them; the reduce task that committed from the old files keeps its record,
// and the report is the one a verification without damage gives, apart
// from its execution section. With a merge level too, and both checksums.
func TestDamagedShuffleFileRunsItsMapTaskAgain(t *testing.T) {
	damages := []struct {
		name   string
		damage func(t *testing.T, path string)
	}{
		{"bit flipped in its last row", func(t *testing.T, path string) {
			rewrite(t, path, func(b []byte) []byte { b[len(b)-8-16] ^= 8; return b })
		}},
		{"bit flipped in its schema message", func(t *testing.T, path string) {
			rewrite(t, path, func(b []byte) []byte { b[40] ^= 1; return b })
		}},
		{"cut short", func(t *testing.T, path string) {
			rewrite(t, path, func(b []byte) []byte { return b[:len(b)/2] })
		}},
		{"deleted", func(t *testing.T, path string) {
			if err := os.RemoveAll(filepath.Dir(path)); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, sum := range []shuffle.Checksum{shuffle.XXH64, shuffle.SHA256} {
		for _, fan := range []int{0, 2} {
			for _, d := range damages {
				t.Run(fmt.Sprintf("%s/fan-in %d/%s", sum, fan, d.name), func(t *testing.T) {
					s, dir, res := fileSynth(t)
					ctx := t.Context()
					want := verify(t, s, PlanOptions{Root: res.Root, Nonce: "undamaged"})
					j, commits := mappedJob(t, s, PlanOptions{Root: res.Root, MapTasks: 4, Reducers: 2, Tool: "shardproof test",
						ShuffleCompression: shuffle.None, ShuffleChecksum: sum, ReduceFanIn: fan, Parallelism: 2})
					// Reduce task 0 commits from the files as they were.
					must(j.Reduce(ctx, 0))
					rc0 := must(s.Head(ctx, j.reduceCommitKey(0), ""))

					out := commits[1].Outputs[1]
					d.damage(t, versionFile(t, dir, out.Key, out.Version))
					if _, err := j.Reduce(ctx, 1); err != nil {
						t.Fatalf("reduce task 1 over a damaged file of map task 1: %v", err)
					}
					got, err := Run(ctx, s, j.PlanDigest, 2, nil)
					if err != nil {
						t.Fatalf("resume: %v", err)
					}
					if got.Report.Verdict != manifest.Verified || !bytes.Equal(withoutExec(t, got.Report), withoutExec(t, want)) {
						t.Fatalf("resume over a damaged shuffle file: report\n%s\nwant\n%s", withoutExec(t, got.Report), withoutExec(t, want))
					}
					for i := range commits {
						if n, want := versions(t, s, j.mapCommitKey(i)), 1+btoi(i == 1); n != want {
							t.Errorf("map task %d's commit record has %d versions, want %d", i, n, want)
						}
					}
					var redone MapCommit
					if found, err := readRecord(ctx, s, j.mapCommitKey(1), &redone); !found || err != nil {
						t.Fatalf("map task 1's record: found %v, %v", found, err)
					}
					// The same bytes, in a new version (the file store
					// numbers a deleted key's versions from 1 again).
					for r, o := range redone.Outputs {
						if !sameOutput(o, commits[1].Outputs[r]) || (o.Version == commits[1].Outputs[r].Version) != (d.name == "deleted" && r == 1) {
							t.Errorf("map task 1 run again: output %d is %+v, was %+v; want the same bytes in a new version", r, o, commits[1].Outputs[r])
						}
						if err := j.readOutput(ctx, o); err != nil {
							t.Errorf("map task 1 run again: output %d: %v", r, err)
						}
					}
					if h := must(s.Head(ctx, j.reduceCommitKey(0), "")); h.Version != rc0.Version {
						t.Errorf("reduce task 0's record was rewritten (version %s, was %s)", h.Version, rc0.Version)
					}
				})
			}
		}
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// A map task's commit record damaged after it committed (cut short: no
// JSON) used to fail the map phase of every resume with SHUFFLE_CORRUPT.
// The map task now runs again and commits a new version of its record;
// the resume ends with the report a verification without damage gives.
// A run again that would record other files than a reduce task already
// committed from is NONDETERMINISM, and records nothing.
func TestDamagedMapCommitRecordRunsTaskAgain(t *testing.T) {
	s, dir, res := fileSynth(t)
	ctx := t.Context()
	want := verify(t, s, PlanOptions{Root: res.Root, Nonce: "undamaged"})
	j, _ := mappedJob(t, s, uncompressedPlan(res.Root, 3, 2, shuffle.SHA256))
	rc0 := must(j.Reduce(ctx, 0))
	key := j.mapCommitKey(1)
	cut := func() {
		t.Helper()
		v := must(s.Head(ctx, key, "")).Version
		rewrite(t, versionFile(t, dir, key, v), func(b []byte) []byte { return b[:100] })
	}

	// Reduce task 0 read another file of map task 1 than the run again
	// writes: the run records nothing.
	forged := *rc0
	forged.Inputs = append([]Output(nil), rc0.Inputs...)
	forged.Inputs[1].Digest = manifest.Sum([]byte("another build's file"))
	b := must(manifest.Encode(&forged))
	if _, err := s.Put(ctx, j.reduceCommitKey(0), bytes.NewReader(b), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	cut()
	if _, err := j.Map(ctx, 1, nil); errcode.Of(err) != errcode.Nondeterminism || !strings.Contains(err.Error(), j.reduceCommitKey(0)) {
		t.Fatalf("map task 1 run again over a damaged record, reduce task 0 having read another file: %v; want %s naming %s", err, errcode.Nondeterminism, j.reduceCommitKey(0))
	}
	if n := versions(t, s, key); n != 1 {
		t.Fatalf("a run again that differs from a reduce task's input recorded a record: %d versions", n)
	}

	b = must(manifest.Encode(rc0))
	if _, err := s.Put(ctx, j.reduceCommitKey(0), bytes.NewReader(b), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	// Its record unreadable, the task reported nothing: the run again
	// reports each of its inputs.
	var mapped int
	if _, err := j.Map(ctx, 1, func(mapper.Result) { mapped++ }); err != nil {
		t.Fatalf("map task 1 over its damaged record: %v", err)
	}
	if mapped != len(j.Plan.MapTasks[1]) {
		t.Errorf("map task 1 run again reported %d inputs, want %d", mapped, len(j.Plan.MapTasks[1]))
	}
	cut()
	got, err := Run(ctx, s, j.PlanDigest, 2, nil)
	if err != nil {
		t.Fatalf("resume over a damaged map commit record: %v", err)
	}
	if !bytes.Equal(withoutExec(t, got.Report), withoutExec(t, want)) {
		t.Fatalf("resume over a damaged map commit record: report\n%s\nwant\n%s", withoutExec(t, got.Report), withoutExec(t, want))
	}
	if n := versions(t, s, key); n != 3 {
		t.Errorf("map task 1's record has %d versions, want 3 (two runs again)", n)
	}
}

// A run again whose files differ from those the map task's record names
// (here, a record naming another checksum for one file, which its reduce
// task then finds failing it) is NONDETERMINISM naming the record, and
// records nothing.
func TestMapRunAgainDiffersFromItsRecord(t *testing.T) {
	s, _, res := fileSynth(t)
	ctx := t.Context()
	j, commits := mappedJob(t, s, uncompressedPlan(res.Root, 2, 2, shuffle.XXH64))
	c := *commits[1]
	c.Outputs = append([]Output(nil), c.Outputs...)
	c.Outputs[1].XXH64 = "0123456789abcdef"
	if _, err := s.Put(ctx, j.mapCommitKey(1), bytes.NewReader(must(manifest.Encode(&c))), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err := j.Reduce(ctx, 1)
	if errcode.Of(err) != errcode.Nondeterminism || !strings.Contains(err.Error(), j.mapCommitKey(1)) {
		t.Fatalf("reduce over a file its record names another checksum of: %v; want %s naming %s", err, errcode.Nondeterminism, j.mapCommitKey(1))
	}
	if n := versions(t, s, j.mapCommitKey(1)); n != 2 {
		t.Errorf("map task 1's record has %d versions, want 2 (the first and the forged one)", n)
	}
}

// A shuffle file damaged again each time its map task runs fails for
// good once the task has run maxRuns times, with SHUFFLE_CORRUPT naming
// the file: counted in the store, across processes and resumes, by its
// commit record's versions, and by the process itself where the store
// cannot list versions (here a decorator flipping a bit of every version
// the file has).
func TestDamagedAgainFailsAfterMaxRuns(t *testing.T) {
	s, dir, res := fileSynth(t)
	ctx := t.Context()
	j, commits := mappedJob(t, s, uncompressedPlan(res.Root, 2, 2, shuffle.XXH64))
	out := commits[1].Outputs[1]
	key := j.mapCommitKey(1)

	rotted := &faults.BitFlip{Store: s, Match: func(k string) bool { return k == out.Key }, Offset: out.Size - 8 - 16, Bit: 3}
	jr, err := Open(ctx, rotted, j.PlanDigest)
	if err != nil {
		t.Fatal(err)
	}
	_, err = jr.Reduce(ctx, 1)
	if errcode.Of(err) != errcode.ShuffleCorrupt || !strings.Contains(err.Error(), out.Key+" is damaged again") || !strings.Contains(err.Error(), fmt.Sprintf("run %d times", maxRuns)) {
		t.Fatalf("reduce over a file damaged at every run: %v; want %s naming %s after %d runs", err, errcode.ShuffleCorrupt, out.Key, maxRuns)
	}
	if n := versions(t, s, key); n != maxRuns {
		t.Fatalf("map task 1's record has %d versions after a file damaged at every run, want %d", n, maxRuns)
	}

	// A resume, in a new process, finds the task has run as often as it
	// may: it runs nothing more.
	latest := must(s.Head(ctx, out.Key, ""))
	rewrite(t, versionFile(t, dir, out.Key, latest.Version), func(b []byte) []byte { b[len(b)-8-16] ^= 8; return b })
	j2, err := Open(ctx, s, j.PlanDigest)
	if err != nil {
		t.Fatal(err)
	}
	_, err = j2.Reduce(ctx, 1)
	if errcode.Of(err) != errcode.ShuffleCorrupt || !strings.Contains(err.Error(), out.Key+" is damaged again") {
		t.Fatalf("reduce over a file damaged again after %d runs: %v; want %s naming %s", maxRuns, err, errcode.ShuffleCorrupt, out.Key)
	}
	if n := versions(t, s, key); n != maxRuns {
		t.Fatalf("map task 1's record has %d versions, want %d: the task ran again past its bound", n, maxRuns)
	}
	if n := versions(t, s, out.Key); n != maxRuns {
		t.Fatalf("%s has %d versions, want %d", out.Key, n, maxRuns)
	}
}

// Every file of a map task lost at once (a machine crash loses a local
// verification's shuffle files, which are not synced): the reduce tasks,
// running at once, all find theirs gone, and the task runs again once,
// not once per reducer.
func TestLostMapTaskRunsAgainOnce(t *testing.T) {
	s, dir, res := fileSynth(t)
	ctx := t.Context()
	want := verify(t, s, PlanOptions{Root: res.Root, Nonce: "undamaged"})
	j, commits := mappedJob(t, s, uncompressedPlan(res.Root, 2, 4, shuffle.XXH64))
	for _, o := range commits[0].Outputs {
		if err := os.RemoveAll(filepath.Join(dir, filepath.FromSlash(o.Key))); err != nil {
			t.Fatal(err)
		}
	}
	got, err := Run(ctx, s, j.PlanDigest, 4, nil)
	if err != nil {
		t.Fatalf("resume after map task 0's files were lost: %v", err)
	}
	if !bytes.Equal(withoutExec(t, got.Report), withoutExec(t, want)) {
		t.Fatalf("resume after map task 0's files were lost: report\n%s\nwant\n%s", withoutExec(t, got.Report), withoutExec(t, want))
	}
	if n := versions(t, s, j.mapCommitKey(0)); n != 2 {
		t.Errorf("map task 0's record has %d versions, want 2: one run again for its %d reducers", n, len(j.Plan.Reducers))
	}
}

// Reduce tasks in processes of their own (an engine's, here a Job each)
// that find one map task's files all gone at once may each run it again,
// but none fails: each reads the record again before it runs the task,
// and a record another one committed meanwhile names its file intact.
func TestLostMapTaskAcrossProcesses(t *testing.T) {
	s, dir, res := fileSynth(t)
	ctx := t.Context()
	o := uncompressedPlan(res.Root, 2, 4, shuffle.SHA256)
	j, commits := mappedJob(t, s, o)
	for _, o := range commits[0].Outputs {
		if err := os.RemoveAll(filepath.Join(dir, filepath.FromSlash(o.Key))); err != nil {
			t.Fatal(err)
		}
	}
	errs := make([]error, len(j.Plan.Reducers))
	var wg sync.WaitGroup
	for r := range errs {
		wg.Go(func() {
			jr, err := Open(ctx, s, j.PlanDigest)
			if err == nil {
				_, err = jr.Reduce(ctx, r)
			}
			errs[r] = err
		})
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Errorf("reduce task %d, in a process of its own, after map task 0's files were lost: %v", r, err)
		}
	}
	if n := versions(t, s, j.mapCommitKey(0)); n < 2 || n > 1+len(j.Plan.Reducers) {
		t.Errorf("map task 0's record has %d versions, want 2 to %d", n, 1+len(j.Plan.Reducers))
	}
	rep, _, err := j.Aggregate(ctx, manifest.Execution{Executor: "test"})
	if err != nil || rep.Verdict != manifest.Verified {
		t.Fatalf("aggregate: %v, %+v", err, rep)
	}
}

// notYet is a store in which key's first Get finds nothing: a task's
// attempt that read its commit record key before another attempt of the
// task (an engine may run one twice at once) committed it.
func notYet(s objstore.Store, key string) *faults.ErrorOnce {
	return &faults.ErrorOnce{Store: s, Method: faults.Get, Match: func(k string) bool { return k == key },
		Err: fmt.Errorf("%s: %w", key, objstore.ErrNotExist)}
}

// Two attempts of one reduce task at once, the first committing from map
// task 1's files as they were, the second reading them after map task 1
// ran again (another reducer found its file damaged): they read the same
// bytes under other versions, and their records differ in those
// versions alone. The second used to fail with NONDETERMINISM, which no
// engine retries; it now returns the first attempt's record. With a
// merge level too.
func TestReduceAttemptsAroundMapRunAgain(t *testing.T) {
	for _, fan := range []int{0, 2} {
		t.Run(fmt.Sprintf("fan-in %d", fan), func(t *testing.T) {
			s, dir, res := fileSynth(t)
			ctx := t.Context()
			j, commits := mappedJob(t, s, PlanOptions{Root: res.Root, MapTasks: 4, Reducers: 2, Tool: "shardproof test",
				ShuffleCompression: shuffle.None, ShuffleChecksum: shuffle.XXH64, ReduceFanIn: fan})
			first := must(j.Reduce(ctx, 0))
			out := commits[1].Outputs[1]
			rewrite(t, versionFile(t, dir, out.Key, out.Version), func(b []byte) []byte { b[len(b)-8-16] ^= 8; return b })
			must(j.Reduce(ctx, 1))
			if n := versions(t, s, j.mapCommitKey(1)); n != 2 {
				t.Fatalf("map task 1's record has %d versions, want 2", n)
			}

			late := notYet(s, j.reduceCommitKey(0))
			j2, err := Open(ctx, late, j.PlanDigest)
			if err != nil {
				t.Fatal(err)
			}
			second, err := j2.Reduce(ctx, 0)
			if !late.Fired() {
				t.Fatal("the second attempt did not read the record key")
			}
			if err != nil {
				t.Fatalf("second attempt of reduce task 0, reading map task 1's run again: %v", err)
			}
			if a, b := must(manifest.Encode(second)), must(manifest.Encode(first)); !bytes.Equal(a, b) {
				t.Errorf("second attempt returned\n%s\nwant the first's record\n%s", a, b)
			}
			if n := versions(t, s, j.reduceCommitKey(0)); n != 1 {
				t.Errorf("reduce task 0's record has %d versions, want 1", n)
			}
		})
	}
}

// A map task's commit record damaged after the map phase (cut short, or
// holding a result no mapper gives), found by a reduce task reading it:
// the reduce task failed with SHUFFLE_CORRUPT at every retry of an engine
// (only a resume, running the map task, mended it); the map task now
// runs again, as when Map finds it so, and the reduce task starts over.
func TestReduceOverDamagedMapCommitRecord(t *testing.T) {
	damages := []struct {
		name string
		edit func(b []byte) []byte
	}{
		{"cut short", func(b []byte) []byte { return b[:100] }},
		{"a key twice", func(b []byte) []byte {
			return append([]byte(`{"schema":"x",`), b[1:]...)
		}},
	}
	for _, d := range damages {
		t.Run(d.name, func(t *testing.T) {
			s, dir, res := fileSynth(t)
			ctx := t.Context()
			want := verify(t, s, PlanOptions{Root: res.Root, Nonce: "undamaged"})
			j, commits := mappedJob(t, s, uncompressedPlan(res.Root, 3, 2, shuffle.XXH64))
			key := j.mapCommitKey(1)
			rewriteLatest(t, s, dir, key, d.edit)
			for r := range j.Plan.Reducers {
				if _, err := j.Reduce(ctx, r); err != nil {
					t.Fatalf("reduce task %d over map task 1's damaged record: %v", r, err)
				}
			}
			if n := versions(t, s, key); n != 2 {
				t.Errorf("map task 1's record has %d versions, want 2", n)
			}
			var redone MapCommit
			if found, err := readRecord(ctx, s, key, &redone); !found || err != nil {
				t.Fatalf("map task 1's record: found %v, %v", found, err)
			}
			for r, o := range redone.Outputs {
				if !sameOutput(o, commits[1].Outputs[r]) {
					t.Errorf("map task 1 run again: output %d is %+v, was %+v", r, o, commits[1].Outputs[r])
				}
			}
			rep, _, err := j.Aggregate(ctx, manifest.Execution{Executor: "test"})
			if err != nil {
				t.Fatalf("aggregate: %v", err)
			}
			sameReportButExec(t, rep, want)
		})
	}
}

// On S3 (a versioned bucket), a shuffle file's version gone for good (its
// version deleted) has its map task run again: a new version of the file
// and of the record, which a version listing counts; a second attempt of
// the reduce task that committed from the old version, reading the new
// one, takes the first attempt's record; the report is the one a
// verification without damage gives.
func TestMapRunAgainS3(t *testing.T) {
	raw, s, res := s3Synth(t)
	ctx := t.Context()
	want := verify(t, s, PlanOptions{Root: res.Root, Nonce: "undamaged"})
	j, commits := mappedJob(t, s, uncompressedPlan(res.Root, 3, 2, shuffle.SHA256))
	first := must(j.Reduce(ctx, 0))
	out := commits[1].Outputs[1]
	pu, _ := url.Parse(raw)
	del := &awss3.DeleteObjectInput{Bucket: aws.String(pu.Host), Key: aws.String(out.Key), VersionId: aws.String(string(out.Version))}
	if _, err := s3test.Client(s3test.Endpoint()).DeleteObject(ctx, del); err != nil {
		t.Fatal(err)
	}
	if _, err := j.Reduce(ctx, 1); err != nil {
		t.Fatalf("reduce task 1 over a file of map task 1 gone: %v", err)
	}
	vs, err := s.(objstore.VersionLister).Versions(ctx, j.mapCommitKey(1), 10)
	if err != nil || len(vs) != 2 {
		t.Fatalf("map task 1's record: %d versions (%v), want 2", len(vs), err)
	}
	var redone MapCommit
	if found, err := readRecord(ctx, s, j.mapCommitKey(1), &redone); !found || err != nil {
		t.Fatalf("map task 1's record: found %v, %v", found, err)
	}
	for r, o := range redone.Outputs {
		if !sameOutput(o, commits[1].Outputs[r]) || o.Version == commits[1].Outputs[r].Version {
			t.Errorf("map task 1 run again: output %d is %+v, was %+v; want the same bytes in a new version", r, o, commits[1].Outputs[r])
		}
	}

	late := notYet(s, j.reduceCommitKey(0))
	j2, err := Open(ctx, late, j.PlanDigest)
	if err != nil {
		t.Fatal(err)
	}
	second, err := j2.Reduce(ctx, 0)
	if err != nil || !late.Fired() {
		t.Fatalf("second attempt of reduce task 0 (read its record key: %v): %v", late.Fired(), err)
	}
	if a, b := must(manifest.Encode(second)), must(manifest.Encode(first)); !bytes.Equal(a, b) {
		t.Errorf("second attempt returned\n%s\nwant the first's record\n%s", a, b)
	}
	rep, _, err := j.Aggregate(ctx, manifest.Execution{Executor: "test"})
	if err != nil {
		t.Fatalf("aggregate: %v", err)
	}
	sameReportButExec(t, rep, want)
}
