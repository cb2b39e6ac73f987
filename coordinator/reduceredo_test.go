package coordinator

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/objstore"
	"github.com/shardproof/shardproof/objstore/faults"
	"github.com/shardproof/shardproof/objstore/file"
	"github.com/shardproof/shardproof/shuffle"
)

// reduceRecordEdit rewrites a reduce commit record's bytes through
// its decoding: edit changes the record, which is encoded again.
func reduceRecordEdit(t *testing.T, edit func(*ReduceCommit)) func([]byte) []byte {
	return func(b []byte) []byte {
		var rc ReduceCommit
		if err := manifest.Decode(b, &rc); err != nil {
			t.Fatal(err)
		}
		edit(&rc)
		return must(manifest.Encode(&rc))
	}
}

// A reduce task's commit record damaged after it committed (cut short,
// a key twice, a result over other buckets than the plan gives it,
// another plan's record) used to fail the aggregation, every engine
// retry of the task and every resume with SHUFFLE_CORRUPT, for good.
// The reduce task now runs again and commits a new version of its
// record, whether the aggregation, the task's retry or a resume finds
// it; the report is the one a verification without damage gives, but
// for its execution section (shuffleBytes included). With a merge level
// too.
func TestDamagedReduceCommitRecordRunsTaskAgain(t *testing.T) {
	damages := []struct {
		name string
		edit func(t *testing.T) func([]byte) []byte
	}{
		{"cut short", func(*testing.T) func([]byte) []byte { return func(b []byte) []byte { return b[:100] } }},
		{"a key twice", func(*testing.T) func([]byte) []byte {
			return func(b []byte) []byte { return append([]byte(`{"schema":"x",`), b[1:]...) }
		}},
		{"a result over other buckets", func(t *testing.T) func([]byte) []byte {
			return reduceRecordEdit(t, func(rc *ReduceCommit) { rc.Result.Lo++ })
		}},
		{"another plan's record", func(t *testing.T) func([]byte) []byte {
			return reduceRecordEdit(t, func(rc *ReduceCommit) { rc.Plan = manifest.Sum([]byte("another plan")) })
		}},
		// The inputs, whose sizes the report's shuffleBytes sums: the
		// run again reads the same files, and must not be held to
		// what the damage says of them (was NONDETERMINISM).
		{"an input of negative size", func(t *testing.T) func([]byte) []byte {
			return reduceRecordEdit(t, func(rc *ReduceCommit) { rc.Inputs[1].Size = -rc.Inputs[1].Size - 1 })
		}},
		// Each map task's file once: another's twice summed it twice.
		{"an input another map task's", func(t *testing.T) func([]byte) []byte {
			return reduceRecordEdit(t, func(rc *ReduceCommit) { rc.Inputs[1] = rc.Inputs[0] })
		}},
	}
	readers := []string{"aggregate", "reduce", "resume"}
	for _, fan := range []int{0, 2} {
		for _, d := range damages {
			for _, reader := range readers {
				t.Run(fmt.Sprintf("fan-in %d/%s/%s", fan, d.name, reader), func(t *testing.T) {
					s, dir, res := fileSynth(t)
					ctx := t.Context()
					want := verify(t, s, PlanOptions{Root: res.Root, Nonce: "undamaged"})
					j, _, commits := committedJob(t, s, PlanOptions{Root: res.Root, MapTasks: 3, Reducers: 2, Tool: "shardproof test",
						ShuffleCompression: shuffle.None, ShuffleChecksum: shuffle.XXH64, ReduceFanIn: fan})
					key := j.reduceCommitKey(1)
					rewriteLatest(t, s, dir, key, d.edit(t))
					var rep *manifest.Report
					switch reader {
					case "aggregate":
						var err error
						if rep, _, err = j.Aggregate(ctx, manifest.Execution{Executor: "test"}); err != nil {
							t.Fatalf("aggregate over reduce task 1's damaged record: %v", err)
						}
					case "reduce":
						// A new process: one that retries the task.
						j2, err := Open(ctx, s, j.PlanDigest)
						if err != nil {
							t.Fatal(err)
						}
						if _, err := j2.Reduce(ctx, 1); err != nil {
							t.Fatalf("reduce task 1 over its damaged record: %v", err)
						}
						if rep, _, err = j2.Aggregate(ctx, manifest.Execution{Executor: "test"}); err != nil {
							t.Fatalf("aggregate: %v", err)
						}
					case "resume":
						out, err := Run(ctx, s, j.PlanDigest, 2, nil)
						if err != nil {
							t.Fatalf("resume over reduce task 1's damaged record: %v", err)
						}
						rep = out.Report
					}
					sameReportButExec(t, rep, want)
					var shuffleBytes int64
					for i := range len(j.Plan.MapTasks) {
						var mc MapCommit
						if found, err := readRecord(ctx, s, j.mapCommitKey(i), &mc); !found || err != nil {
							t.Fatalf("map task %d's record: found %v, %v", i, found, err)
						}
						for _, o := range mc.Outputs {
							shuffleBytes += o.Size
						}
					}
					if rep.Execution.ShuffleBytes != shuffleBytes {
						t.Errorf("shuffleBytes %d, the map tasks' files are %d bytes", rep.Execution.ShuffleBytes, shuffleBytes)
					}
					for r := range j.Plan.Reducers {
						if n, want := versions(t, s, j.reduceCommitKey(r)), 1+btoi(r == 1); n != want {
							t.Errorf("reduce task %d's record has %d versions, want %d", r, n, want)
						}
					}
					var redone ReduceCommit
					if found, err := readRecord(ctx, s, key, &redone); !found || err != nil || j.checkReduceCommit(1, &redone) != nil {
						t.Fatalf("reduce task 1's record: found %v, %v", found, err)
					}
					if !sameReduceCommit(&redone, commits[1]) {
						t.Errorf("reduce task 1 run again recorded\n%s\nwant, but for merged files,\n%s", must(manifest.Encode(&redone)), must(manifest.Encode(commits[1])))
					}
				})
			}
		}
	}
}

// The run again of a reduce task whose record is damaged needs the map
// tasks' files: one of them gone too (a machine crash loses a local
// verification's shuffle files, not its synced records) has that map
// task run again as well, then the reduce task.
func TestDamagedReduceRecordOverLostShuffleFile(t *testing.T) {
	s, dir, res := fileSynth(t)
	ctx := t.Context()
	want := verify(t, s, PlanOptions{Root: res.Root, Nonce: "undamaged"})
	j, commits, _ := committedJob(t, s, uncompressedPlan(res.Root, 3, 2, shuffle.XXH64))
	key := j.reduceCommitKey(1)
	rewriteLatest(t, s, dir, key, func(b []byte) []byte { return b[:len(b)/2] })
	if err := os.RemoveAll(filepath.Join(dir, filepath.FromSlash(commits[2].Outputs[1].Key))); err != nil {
		t.Fatal(err)
	}
	rep, _, err := j.Aggregate(ctx, manifest.Execution{Executor: "test"})
	if err != nil {
		t.Fatalf("aggregate over a damaged reduce record whose map input is gone: %v", err)
	}
	sameReportButExec(t, rep, want)
	for k, want := range map[string]int{key: 2, j.reduceCommitKey(0): 1, j.mapCommitKey(2): 2, j.mapCommitKey(0): 1, j.mapCommitKey(1): 1} {
		if n := versions(t, s, k); n != want {
			t.Errorf("%s has %d versions, want %d", k, n, want)
		}
	}
}

// A reduce task's run again that gives another result than its damaged
// record still says (here a record whose merged files are another
// plan's, damage, and whose result names another leaf) is NONDETERMINISM
// naming the record, and records nothing.
func TestReduceRunAgainDiffersFromItsRecord(t *testing.T) {
	s, dir, res := fileSynth(t)
	ctx := t.Context()
	j, _, _ := committedJob(t, s, uncompressedPlan(res.Root, 3, 2, shuffle.XXH64))
	key := j.reduceCommitKey(1)
	rewriteLatest(t, s, dir, key, reduceRecordEdit(t, func(rc *ReduceCommit) {
		rc.Merged = []Output{{Key: "elsewhere"}}
		rc.Result.ReleaseLeaves[0] ^= 1
	}))
	_, err := j.Reduce(ctx, 1)
	if errcode.Of(err) != errcode.Nondeterminism || !strings.Contains(err.Error(), key) {
		t.Fatalf("reduce task 1 run again over a record with another result: %v; want %s naming %s", err, errcode.Nondeterminism, key)
	}
	if n := versions(t, s, key); n != 1 {
		t.Errorf("reduce task 1's record has %d versions, want 1: a run again that differs recorded", n)
	}
	if _, _, err := j.Aggregate(ctx, manifest.Execution{Executor: "test"}); errcode.Of(err) != errcode.Nondeterminism {
		t.Errorf("aggregate over it: %v; want %s", err, errcode.Nondeterminism)
	}
}

// A reduce commit record damaged again each time its task runs fails for
// good once the task has run maxRuns times, with SHUFFLE_CORRUPT naming
// the record: counted by the process itself where the store cannot list
// versions (a decorator flipping a bit of every version the record
// has), and, in a new process, by the record's versions.
func TestReduceDamagedAgainFailsAfterMaxRuns(t *testing.T) {
	s, dir, res := fileSynth(t)
	ctx := t.Context()
	j, _, _ := committedJob(t, s, uncompressedPlan(res.Root, 2, 2, shuffle.XXH64))
	key := j.reduceCommitKey(1)
	damagedAgain := func(err error) bool {
		return errcode.Of(err) == errcode.ShuffleCorrupt && strings.Contains(err.Error(), key+" is damaged again") &&
			strings.Contains(err.Error(), fmt.Sprintf("reduce task 1 has run %d times", maxRuns))
	}

	// The first byte flipped: no record decodes.
	rotted := &faults.BitFlip{Store: s, Match: func(k string) bool { return k == key }, Offset: 0, Bit: 2}
	jr, err := Open(ctx, rotted, j.PlanDigest)
	if err != nil {
		t.Fatal(err)
	}
	for run := 2; run <= maxRuns; run++ {
		if _, err := jr.Reduce(ctx, 1); err != nil {
			t.Fatalf("reduce task 1's run %d over its damaged record: %v", run, err)
		}
	}
	if _, err := jr.Reduce(ctx, 1); !damagedAgain(err) {
		t.Fatalf("reduce over a record damaged at every run: %v; want %s naming %s after %d runs", err, errcode.ShuffleCorrupt, key, maxRuns)
	}
	if n := versions(t, s, key); n != maxRuns {
		t.Fatalf("reduce task 1's record has %d versions, want %d", n, maxRuns)
	}

	// A new process finds the task has run as often as it may: the
	// aggregation runs nothing more.
	rewriteLatest(t, s, dir, key, func(b []byte) []byte { return b[:len(b)/2] })
	j2, err := Open(ctx, s, j.PlanDigest)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := j2.Aggregate(ctx, manifest.Execution{Executor: "test"}); !damagedAgain(err) {
		t.Fatalf("aggregate over a record damaged again after %d runs: %v; want %s naming %s", maxRuns, err, errcode.ShuffleCorrupt, key)
	}
	if n := versions(t, s, key); n != maxRuns {
		t.Fatalf("reduce task 1's record has %d versions, want %d: the task ran again past its bound", n, maxRuns)
	}
}

// On S3 (a versioned bucket), a reduce commit record overwritten by a
// hand in the store (a new version that does not decode) has the
// aggregation run the task again: a third version, which the version
// listing counts, and the report a verification without damage gives.
func TestReduceRunAgainS3(t *testing.T) {
	_, s, res := s3Synth(t)
	ctx := t.Context()
	want := verify(t, s, PlanOptions{Root: res.Root, Nonce: "undamaged"})
	j, _, _ := committedJob(t, s, uncompressedPlan(res.Root, 3, 2, shuffle.SHA256))
	key := j.reduceCommitKey(0)
	if _, err := s.Put(ctx, key, strings.NewReader(`{"schema":`), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	rep, _, err := j.Aggregate(ctx, manifest.Execution{Executor: "test"})
	if err != nil {
		t.Fatalf("aggregate over a reduce record overwritten: %v", err)
	}
	sameReportButExec(t, rep, want)
	vs, err := s.(objstore.VersionLister).Versions(ctx, key, 10)
	if err != nil || len(vs) != 3 {
		t.Fatalf("reduce task 0's record: %d versions (%v), want 3", len(vs), err)
	}
}

// getHook is a file store decorator calling hook once, before the first
// Get of key: another process's work between two steps of this one.
type getHook struct {
	*file.Store
	key  string
	once sync.Once
	hook func()
}

func (g *getHook) Get(ctx context.Context, key string, v objstore.Version) (io.ReadCloser, error) {
	if key == g.key {
		g.once.Do(g.hook)
	}
	return g.Store.Get(ctx, key, v)
}

// Two processes that find a reduce task's record damaged at once (an
// engine's retry and the aggregation, say) each run the task again; the
// one that ends last reads the record once more before writing its own:
// the run the other recorded meanwhile is used, no third version (the
// bound counts it), and where it holds another result than this run,
// NONDETERMINISM naming the record, not a silent overwrite.
func TestReduceRunAgainRacingAnother(t *testing.T) {
	for _, differs := range []bool{false, true} {
		t.Run(fmt.Sprintf("differs=%v", differs), func(t *testing.T) {
			s, dir, res := fileSynth(t)
			ctx := t.Context()
			j, _, _ := committedJob(t, s, uncompressedPlan(res.Root, 2, 2, shuffle.XXH64))
			key := j.reduceCommitKey(1)
			rewriteLatest(t, s, dir, key, func(b []byte) []byte { return b[:len(b)/2] })
			other := must(Open(ctx, s, j.PlanDigest))
			var otherErr error
			// While this process runs the task again (reading the map
			// tasks' records), the other runs it again and records it.
			racing := &getHook{Store: s, key: j.mapCommitKey(0), hook: func() {
				if _, otherErr = other.Reduce(ctx, 1); otherErr != nil || !differs {
					return
				}
				rewriteLatest(t, s, dir, key, reduceRecordEdit(t, func(rc *ReduceCommit) {
					rc.Result.ReleaseLeaves[0] ^= 1
				}))
			}}
			mine := must(Open(ctx, racing, j.PlanDigest))
			got, err := mine.Reduce(ctx, 1)
			if otherErr != nil {
				t.Fatalf("the other process's run again: %v", otherErr)
			}
			if n := versions(t, s, key); n != 2 {
				t.Errorf("reduce task 1's record has %d versions, want 2: a run again wrote over another's", n)
			}
			if differs {
				if errcode.Of(err) != errcode.Nondeterminism || !strings.Contains(err.Error(), key) {
					t.Fatalf("run again over another's record with another result: %v; want %s naming %s", err, errcode.Nondeterminism, key)
				}
				return
			}
			if err != nil {
				t.Fatalf("run again racing another: %v", err)
			}
			var rec ReduceCommit
			if found, err := readRecord(ctx, s, key, &rec); !found || err != nil {
				t.Fatalf("reduce task 1's record: found %v, %v", found, err)
			}
			if !bytes.Equal(must(manifest.Encode(got)), must(manifest.Encode(&rec))) {
				t.Errorf("reduce returned\n%s\nthe record is\n%s", must(manifest.Encode(got)), must(manifest.Encode(&rec)))
			}
		})
	}
}

// putHook is a store decorator calling hook once, before the first
// conditional create of key.
type putHook struct {
	*file.Store
	key  string
	once sync.Once
	hook func()
}

func (p *putHook) Put(ctx context.Context, key string, body io.Reader, o objstore.PutOptions) (objstore.Version, error) {
	if key == p.key && o.IfNoneMatch {
		p.once.Do(p.hook)
	}
	return p.Store.Put(ctx, key, body, o)
}

// An attempt of a reduce task whose commit meets a record of the task
// that is damaged (another attempt's, committed while this one ran, and
// damaged since; or one that does not match the plan) is a run again
// over it, as a retry's would be: its record is written as a new version
// of the key, checked against what the damaged one still says, instead
// of the attempt failing with NONDETERMINISM (or SHUFFLE_CORRUPT) that a
// retry of it then mends.
func TestReduceAttemptCommitsOverDamagedRecord(t *testing.T) {
	damages := []struct {
		name string
		// record returns the damaged record's bytes, given reduce task
		// 0's record and this attempt's job.
		record func(t *testing.T, j *Job, rec0 []byte) []byte
		want   errcode.Code // "": the attempt commits
	}{
		{"cut short", func(_ *testing.T, _ *Job, rec0 []byte) []byte { return rec0[:len(rec0)/2] }, ""},
		{"another task's record", func(_ *testing.T, _ *Job, rec0 []byte) []byte { return rec0 }, ""},
		{"merged files elsewhere, another leaf", func(t *testing.T, j *Job, _ []byte) []byte {
			// Task 1's own record as a clean run commits it, damaged
			// in its merged files, and with a leaf the run does not give.
			c := must(j.runReduce(t.Context(), 1, nil, new([]Output), true))
			c.Merged = []Output{{Key: "elsewhere"}}
			c.Result.ReleaseLeaves[0] ^= 1
			return must(manifest.Encode(c))
		}, errcode.Nondeterminism},
	}
	for _, d := range damages {
		t.Run(d.name, func(t *testing.T) {
			s, _, res := fileSynth(t)
			ctx := t.Context()
			j, _ := mappedJob(t, s, uncompressedPlan(res.Root, 2, 2, shuffle.XXH64))
			must(j.Reduce(ctx, 0))
			rc0, err := s.Get(ctx, j.reduceCommitKey(0), "")
			if err != nil {
				t.Fatal(err)
			}
			rec0 := must(io.ReadAll(rc0))
			rc0.Close()
			key := j.reduceCommitKey(1)
			damaged := d.record(t, j, rec0)
			attempt := &putHook{Store: s, key: key, hook: func() {
				if _, err := s.Put(ctx, key, bytes.NewReader(damaged), objstore.PutOptions{}); err != nil {
					t.Error(err)
				}
			}}
			ja := must(Open(ctx, attempt, j.PlanDigest))
			got, err := ja.Reduce(ctx, 1)
			if d.want != "" {
				if errcode.Of(err) != d.want || !strings.Contains(err.Error(), key) {
					t.Fatalf("attempt over a damaged record: %v; want %s naming %s", err, d.want, key)
				}
				if n := versions(t, s, key); n != 1 {
					t.Errorf("reduce task 1's record has %d versions, want 1", n)
				}
				return
			}
			if err != nil {
				t.Fatalf("attempt whose commit meets a damaged record: %v", err)
			}
			if n := versions(t, s, key); n != 2 {
				t.Errorf("reduce task 1's record has %d versions, want 2", n)
			}
			var rec ReduceCommit
			if found, err := readRecord(ctx, s, key, &rec); !found || err != nil || j.checkReduceCommit(1, &rec) != nil {
				t.Fatalf("reduce task 1's record: found %v, %v", found, err)
			}
			if !sameReduceCommit(&rec, got) {
				t.Errorf("record\n%s\nattempt's run\n%s", must(manifest.Encode(&rec)), must(manifest.Encode(got)))
			}
			if _, _, err := j.Aggregate(ctx, manifest.Execution{Executor: "test"}); err != nil {
				t.Fatalf("aggregate: %v", err)
			}
		})
	}
}

// The run again of a reduce task over a record that still decodes
// leaves out of the comparison what of it fails the plan's checks, its
// inputs too: an input that is not the plan's shuffle file of its map
// task for this task (another key, the other checksum, a negative size:
// the one damage of the record, which the record's own check refuses)
// is the record's damage, and the run records; one of the plan's form
// naming other bytes (another size) is a run that read something else,
// NONDETERMINISM; that record's merged files are damaged too, for it to
// be refused.
func TestReduceRunAgainLeavesOutDamagedInputs(t *testing.T) {
	for _, c := range []struct {
		name  string
		edit  func(in *Output)
		alone bool
		want  errcode.Code
	}{
		{"another key", func(in *Output) { in.Key = "elsewhere" }, true, ""},
		{"the other checksum", func(in *Output) { in.XXH64, in.Digest = "", manifest.Digest{1} }, true, ""},
		{"a negative size", func(in *Output) { in.Size = -1 }, true, ""},
		{"another size", func(in *Output) { in.Size++ }, false, errcode.Nondeterminism},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, dir, res := fileSynth(t)
			ctx := t.Context()
			j, _, _ := committedJob(t, s, uncompressedPlan(res.Root, 3, 2, shuffle.XXH64))
			key := j.reduceCommitKey(1)
			rewriteLatest(t, s, dir, key, reduceRecordEdit(t, func(rc *ReduceCommit) {
				if !c.alone {
					rc.Merged = []Output{{Key: "elsewhere"}}
				}
				c.edit(&rc.Inputs[1])
			}))
			_, err := j.Reduce(ctx, 1)
			if c.want != "" {
				if errcode.Of(err) != c.want || !strings.Contains(err.Error(), key) {
					t.Fatalf("run again over a record naming an input of other bytes: %v; want %s naming %s", err, c.want, key)
				}
				return
			}
			if err != nil {
				t.Fatalf("run again over a record with a damaged input: %v", err)
			}
			if n := versions(t, s, key); n != 2 {
				t.Errorf("reduce task 1's record has %d versions, want 2", n)
			}
		})
	}
}

// An aggregation in a process that ran no map task (an engine's verify,
// task aggregate) leaves the report's stage times out, as FORMATS.md
// says of executors other than the local one, also when it runs a
// reduce task again over a damaged record: that one run's reading of
// snapshot members and reducing are not the job's stages.
func TestAggregateRunningReduceAgainReportsNoStages(t *testing.T) {
	s, dir, res := fileSynth(t)
	ctx := t.Context()
	j, _ := mappedJob(t, s, PlanOptions{Root: res.Root, MapTasks: 2, Reducers: 2, Tool: "shardproof test",
		ShuffleCompression: shuffle.None, ShuffleChecksum: shuffle.XXH64, ReadAllMembers: true})
	var members int
	for r := range j.Plan.Reducers {
		members += len(must(j.Reduce(ctx, r)).Members)
	}
	if members == 0 {
		t.Fatal("no reduce task read a snapshot member: the test needs one that does")
	}
	for r := range j.Plan.Reducers {
		key := j.reduceCommitKey(r)
		rewriteLatest(t, s, dir, key, func(b []byte) []byte { return b[:len(b)/2] })
	}
	agg := must(Open(ctx, s, j.PlanDigest))
	rep, _, err := agg.Aggregate(ctx, manifest.Execution{Executor: "process"})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Execution.Stages != (manifest.StageSeconds{}) {
		t.Fatalf("aggregation that ran reduce tasks again reports stages %+v; want none", rep.Execution.Stages)
	}
}
