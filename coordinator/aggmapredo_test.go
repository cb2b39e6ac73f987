package coordinator

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/objstore"
	"github.com/shardproof/shardproof/objstore/faults"
	"github.com/shardproof/shardproof/objstore/file"
	"github.com/shardproof/shardproof/shuffle"
)

// reducedHook is a file store decorator calling hook once, after the
// last of reducers reduce commit records is created: damage that comes
// between a job's reduce phase and its aggregation.
type reducedHook struct {
	*file.Store
	reducers int
	puts     atomic.Int32
	once     sync.Once
	hook     func()
}

func (h *reducedHook) Put(ctx context.Context, key string, body io.Reader, o objstore.PutOptions) (objstore.Version, error) {
	v, err := h.Store.Put(ctx, key, body, o)
	if err == nil && strings.Contains(key, "/reduce/") && strings.HasSuffix(key, "/commit.json") && int(h.puts.Add(1)) == h.reducers {
		h.once.Do(h.hook)
	}
	return v, err
}

// A map task's commit record damaged after the reduce phase (cut short,
// or holding a negative figure: no record a task writes) failed the
// aggregation with SHUFFLE_CORRUPT, and so `verify`, which only a
// resume, running the map task, mended. The aggregation now runs the map
// task again, as Map and a reduce task reading the record do (redoMap):
// a local verification ends VERIFIED with the report a verification
// without damage gives, the record in a second version, and the reduce
// tasks' records, which name the map task's files as they were, kept.
func TestAggregateRunsDamagedMapAgain(t *testing.T) {
	for _, c := range []struct {
		name string
		edit func([]byte) []byte
	}{
		{"cut short", func(b []byte) []byte { return b[:100] }},
		{"negative records", func(b []byte) []byte {
			return bytes.Replace(b, []byte(`"Records":`), []byte(`"Records":-`), 1)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			fs, dir, res := fileSynth(t)
			ctx := t.Context()
			want := verify(t, fs, PlanOptions{Root: res.Root, Nonce: "undamaged"})
			// As Verify fills them in, so this is the plan it makes.
			o := PlanOptions{Root: res.Root, MapTasks: 3, Reducers: 2, Parallelism: 2, Tool: "shardproof test", Nonce: "damaged",
				ShuffleCompression: shuffle.None, ShuffleChecksum: shuffle.XXH64}
			_, pd, err := NewPlan(ctx, fs, o)
			if err != nil {
				t.Fatal(err)
			}
			j := &Job{PlanDigest: pd}
			key := j.mapCommitKey(1)
			var reduceVersions []objstore.Version
			s := &reducedHook{Store: fs, reducers: o.Reducers, hook: func() {
				v := must(fs.Head(ctx, key, "")).Version
				rewrite(t, versionFile(t, dir, key, v), c.edit)
				for r := range o.Reducers {
					reduceVersions = append(reduceVersions, must(fs.Head(ctx, j.reduceCommitKey(r), "")).Version)
				}
			}}
			out, err := Verify(ctx, s, Options{PlanOptions: o})
			if err != nil {
				t.Fatalf("verify over a map commit record damaged before the aggregation: %v", err)
			}
			if len(reduceVersions) != o.Reducers {
				t.Fatal("the map commit record was not damaged: the reduce phase did not end")
			}
			if out.Report.Verdict != manifest.Verified || !bytes.Equal(withoutExec(t, out.Report), withoutExec(t, want)) {
				t.Fatalf("report\n%s\nwant\n%s", withoutExec(t, out.Report), withoutExec(t, want))
			}
			if n := versions(t, fs, key); n != 2 {
				t.Errorf("map task 1's record has %d versions, want 2 (one run again)", n)
			}
			var redone MapCommit
			if found, err := readRecord(ctx, fs, key, &redone); !found || err != nil {
				t.Fatalf("map task 1's record: found %v, %v", found, err)
			}
			for r := range o.Reducers {
				if v := must(fs.Head(ctx, j.reduceCommitKey(r), "")).Version; v != reduceVersions[r] {
					t.Errorf("reduce task %d's record was written again (version %s, was %s)", r, v, reduceVersions[r])
				}
			}
		})
	}
}

// On S3 (a versioned bucket), a map commit record overwritten by a hand
// in the store (a new version that does not decode) has the aggregation
// run the map task again: a third version, which the version listing
// counts, and the report a verification without damage gives. A run
// again that gives other files than a reduce task read is NONDETERMINISM
// naming that task's record, and records nothing.
func TestAggregateRunsDamagedMapAgainS3(t *testing.T) {
	_, s, res := s3Synth(t)
	ctx := t.Context()
	want := verify(t, s, PlanOptions{Root: res.Root, Nonce: "undamaged"})
	j, _, rcs := committedJob(t, s, uncompressedPlan(res.Root, 3, 2, shuffle.SHA256))
	key := j.mapCommitKey(1)
	if _, err := s.Put(ctx, key, strings.NewReader(`{"schema":`), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	vl := s.(objstore.VersionLister)

	// Reduce task 0's record names another file of map task 1 than the
	// run again writes.
	forged := *rcs[0]
	forged.Inputs = append([]Output(nil), rcs[0].Inputs...)
	forged.Inputs[1].Digest = manifest.Sum([]byte("another build's file"))
	if _, err := s.Put(ctx, j.reduceCommitKey(0), bytes.NewReader(must(manifest.Encode(&forged))), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := j.Aggregate(ctx, manifest.Execution{Executor: "test"}); errcode.Of(err) != errcode.Nondeterminism || !strings.Contains(err.Error(), j.reduceCommitKey(0)) {
		t.Fatalf("aggregate over a damaged map record, reduce task 0 having read another file: %v; want %s naming %s", err, errcode.Nondeterminism, j.reduceCommitKey(0))
	}
	if vs, err := vl.Versions(ctx, key, 10); err != nil || len(vs) != 2 {
		t.Fatalf("map task 1's record: %d versions (%v), want 2: a run again that differs recorded nothing", len(vs), err)
	}

	if _, err := s.Put(ctx, j.reduceCommitKey(0), bytes.NewReader(must(manifest.Encode(rcs[0]))), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	rep, _, err := j.Aggregate(ctx, manifest.Execution{Executor: "test"})
	if err != nil {
		t.Fatalf("aggregate over a map record overwritten: %v", err)
	}
	sameReportButExec(t, rep, want)
	if vs, err := vl.Versions(ctx, key, 10); err != nil || len(vs) != 3 {
		t.Fatalf("map task 1's record: %d versions (%v), want 3", len(vs), err)
	}
}

// An aggregation that runs a damaged map task again compares the run
// with the inputs the committed reduce tasks name (sameMapRun, the old
// record unreadable); a reduce record whose input of that task fails the
// plan's checks (another key, the other checksum, a negative size) is
// damaged too, not a run that read other bytes: it is left out of the
// comparison, as redoReduce leaves it out of its own, and runs again in
// turn, where it failed the aggregation with NONDETERMINISM. The report
// is the one a verification without damage gives.
func TestAggregateMapRunAgainLeavesOutDamagedReduceInputs(t *testing.T) {
	for _, c := range []struct {
		name string
		edit func(in *Output)
	}{
		{"another key", func(in *Output) { in.Key = "elsewhere" }},
		{"the other checksum", func(in *Output) { in.XXH64, in.Digest = "0123456789abcdef", manifest.Digest{} }},
		{"a negative size", func(in *Output) { in.Size = -1 }},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, dir, res := fileSynth(t)
			ctx := t.Context()
			want := verify(t, s, PlanOptions{Root: res.Root, Nonce: "undamaged"})
			j, _, _ := committedJob(t, s, uncompressedPlan(res.Root, 3, 2, shuffle.SHA256))
			mkey, rkey := j.mapCommitKey(1), j.reduceCommitKey(0)
			rewriteLatest(t, s, dir, mkey, func(b []byte) []byte { return b[:100] })
			rewriteLatest(t, s, dir, rkey, reduceRecordEdit(t, func(rc *ReduceCommit) {
				c.edit(&rc.Inputs[1])
			}))
			rep, _, err := j.Aggregate(ctx, manifest.Execution{Executor: "test"})
			if err != nil {
				t.Fatalf("aggregate over a damaged map record and a reduce record with that task's input damaged: %v", err)
			}
			sameReportButExec(t, rep, want)
			if n, m := versions(t, s, mkey), versions(t, s, rkey); n != 2 || m != 2 {
				t.Errorf("map task 1's record has %d versions, reduce task 0's %d; want 2 each (each run again once)", n, m)
			}
		})
	}
}

// redoPutHook is a file store decorator calling hook once, before the
// first plain (not conditional) Put of key: a run again's.
type redoPutHook struct {
	*file.Store
	key  string
	once sync.Once
	hook func()
}

func (p *redoPutHook) Put(ctx context.Context, key string, body io.Reader, o objstore.PutOptions) (objstore.Version, error) {
	if key == p.key && !o.IfNoneMatch {
		p.once.Do(p.hook)
	}
	return p.Store.Put(ctx, key, body, o)
}

// Two aggregations in processes of their own (a retried aggregate task,
// a resume) that find one map task's record damaged both run the task
// again; the one that ends last reads the record once more before
// writing its own, as a reduce task's run again does: the run the other
// recorded meanwhile is used, no third version that spends the bound of
// runs, and both give the same report; where that record holds other
// results than this run, NONDETERMINISM naming it, not a silent
// overwrite.
func TestAggregateMapRunAgainRacingAnother(t *testing.T) {
	for _, differs := range []bool{false, true} {
		t.Run(fmt.Sprintf("differs=%v", differs), func(t *testing.T) {
			s, dir, res := fileSynth(t)
			ctx := t.Context()
			j, _, _ := committedJob(t, s, uncompressedPlan(res.Root, 3, 2, shuffle.XXH64))
			key := j.mapCommitKey(1)
			rewriteLatest(t, s, dir, key, func(b []byte) []byte { return b[:len(b)/2] })
			other := must(Open(ctx, s, j.PlanDigest))
			var (
				otherRep *manifest.Report
				otherErr error
			)
			// While this process runs the task again (writing its
			// files), the other runs it again and aggregates.
			racing := &redoPutHook{Store: s, key: j.mapOutputKey(1, 0), hook: func() {
				if otherRep, _, otherErr = other.Aggregate(ctx, manifest.Execution{Executor: "test"}); otherErr != nil || !differs {
					return
				}
				rewriteLatest(t, s, dir, key, func(b []byte) []byte {
					var mc MapCommit
					if err := manifest.Decode(b, &mc); err != nil {
						t.Fatal(err)
					}
					mc.Results[0].Tokens++
					return must(manifest.Encode(&mc))
				})
			}}
			mine := must(Open(ctx, racing, j.PlanDigest))
			rep, _, err := mine.Aggregate(ctx, manifest.Execution{Executor: "test"})
			if otherErr != nil {
				t.Fatalf("the other process's aggregation: %v", otherErr)
			}
			if otherRep == nil {
				t.Fatal("the other process did not aggregate while this one ran the map task again")
			}
			if n := versions(t, s, key); n != 2 {
				t.Errorf("map task 1's record has %d versions, want 2: a run again wrote over another's", n)
			}
			if differs {
				if errcode.Of(err) != errcode.Nondeterminism || !strings.Contains(err.Error(), key) {
					t.Fatalf("run again over another's record with other results: %v; want %s naming %s", err, errcode.Nondeterminism, key)
				}
				return
			}
			if err != nil {
				t.Fatalf("aggregation racing another: %v", err)
			}
			if !bytes.Equal(withoutExec(t, rep), withoutExec(t, otherRep)) {
				t.Fatalf("report\n%s\nthe other's\n%s", withoutExec(t, rep), withoutExec(t, otherRep))
			}
		})
	}
}

// A store that refuses a write while the aggregation runs a damaged map
// task again (one of its files, or its record) fails the aggregation
// with that failure, and nothing of the run is named: the record is the
// damaged one still, in one version, the reduce records are untouched
// and no report is recorded. The next aggregation runs the task again
// and gives the report a verification without damage gives.
func TestAggregateMapRunAgainStoreRefusesWrite(t *testing.T) {
	for _, which := range []string{"/map/1/r1.arrow", "/map/1/commit.json"} {
		t.Run(which, func(t *testing.T) {
			s, dir, res := fileSynth(t)
			ctx := t.Context()
			want := verify(t, s, PlanOptions{Root: res.Root, Nonce: "undamaged"})
			j, _, _ := committedJob(t, s, uncompressedPlan(res.Root, 3, 2, shuffle.SHA256))
			key := j.mapCommitKey(1)
			rewriteLatest(t, s, dir, key, func(b []byte) []byte { return b[:100] })
			refused := errors.New("refused")
			broken := &faults.ErrorOnce{Store: s, Method: faults.Put, Err: refused,
				Match: func(k string) bool { return strings.HasSuffix(k, which) }}
			jb := must(Open(ctx, broken, j.PlanDigest))
			if _, _, err := jb.Aggregate(ctx, manifest.Execution{Executor: "test"}); !errors.Is(err, refused) || !broken.Fired() {
				t.Fatalf("aggregate with the store refusing %s: %v, want the refusal", which, err)
			}
			if n := versions(t, s, key); n != 1 {
				t.Errorf("map task 1's record has %d versions after the refused run, want 1", n)
			}
			var mc MapCommit
			if _, err := readRecord(ctx, s, key, &mc); errcode.Of(err) != errcode.ShuffleCorrupt {
				t.Errorf("map task 1's record after the refused run: %v, want it damaged still", err)
			}
			for r := range j.Plan.Reducers {
				if n := versions(t, s, j.reduceCommitKey(r)); n != 1 {
					t.Errorf("reduce task %d's record has %d versions, want 1", r, n)
				}
			}
			if out, err := j.Finished(ctx); out != nil || err != nil {
				t.Fatalf("a report recorded after the refused run: %+v, %v", out, err)
			}
			rep, _, err := j.Aggregate(ctx, manifest.Execution{Executor: "test"})
			if err != nil {
				t.Fatalf("aggregate after the refused run: %v", err)
			}
			sameReportButExec(t, rep, want)
			if n := versions(t, s, key); n != 2 {
				t.Errorf("map task 1's record has %d versions, want 2", n)
			}
		})
	}
}

// An aggregation that finds a map task's record damaged while a reduce
// task has not committed yet (an aggregate task started with the others,
// without --wait) fails TASK_NOT_READY without running the map task
// again: that run, a whole map task, would be lost to the failure and
// spend one of the task's runs, and the reduce task still running
// meets the damaged record and runs the task itself.
func TestAggregateNotReadyRunsNoMapAgain(t *testing.T) {
	s, dir, res := fileSynth(t)
	ctx := t.Context()
	j, _ := mappedJob(t, s, uncompressedPlan(res.Root, 3, 2, shuffle.XXH64))
	must(j.Reduce(ctx, 0))
	key := j.mapCommitKey(1)
	rewriteLatest(t, s, dir, key, func(b []byte) []byte { return b[:100] })
	if _, _, err := j.Aggregate(ctx, manifest.Execution{Executor: "test"}); errcode.Of(err) != errcode.TaskNotReady {
		t.Fatalf("aggregate before reduce task 1 committed, map task 1's record damaged: %v, want %s", err, errcode.TaskNotReady)
	}
	if n := versions(t, s, key); n != 1 {
		t.Errorf("map task 1's record has %d versions, want 1: the aggregation ran it again, then was not ready", n)
	}
	must(j.Reduce(ctx, 1))
	if n := versions(t, s, key); n != 2 {
		t.Errorf("map task 1's record has %d versions after reduce task 1 ran, want 2", n)
	}
	if rep, _, err := j.Aggregate(ctx, manifest.Execution{Executor: "test"}); err != nil || rep.Verdict != manifest.Verified {
		t.Fatalf("aggregate once every task committed: %v", err)
	}
}

// The report of an aggregation that runs a damaged map task again lists
// the failures that task's run finds, as a verification without damage
// does: an INVALID release (every shard rotted), the map task's record
// damaged after the reduce phase, gives the undamaged verification's
// report, failures, counts and verdict alike.
func TestAggregateRunsDamagedMapAgainInvalidRelease(t *testing.T) {
	fs, dir, res := fileSynth(t)
	ctx := t.Context()
	shards := map[string]bool{}
	for _, sh := range res.Release.Shards {
		shards[sh.Digest.BlobKey()] = true
	}
	s := &faults.BitFlip{Store: fs, Match: func(k string) bool { return shards[k] }, Offset: 200, Bit: 3}
	want := verify(t, s, PlanOptions{Root: res.Root, Nonce: "undamaged"})
	if want.Verdict != manifest.Invalid || len(want.Failures) == 0 {
		t.Fatalf("the rotted release verifies %s with %d failures; the test needs failures", want.Verdict, len(want.Failures))
	}
	j, _, _ := committedJob(t, s, uncompressedPlan(res.Root, 3, 2, shuffle.XXH64))
	key := j.mapCommitKey(1)
	rewriteLatest(t, fs, dir, key, func(b []byte) []byte { return b[:len(b)/2] })
	rep, _, err := j.Aggregate(ctx, manifest.Execution{Executor: "test"})
	if err != nil {
		t.Fatalf("aggregate over a damaged map record of an invalid release: %v", err)
	}
	sameReportButExec(t, rep, want)
	if n := versions(t, fs, key); n != 2 {
		t.Errorf("map task 1's record has %d versions, want 2", n)
	}
}
