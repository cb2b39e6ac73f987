package coordinator

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/objstore"
	"github.com/shardproof/shardproof/objstore/faults"
	"github.com/shardproof/shardproof/shuffle"
	"github.com/shardproof/shardproof/stage"
	"github.com/shardproof/shardproof/stage/stagetest"
)

// withoutExecution returns the report's bytes with the execution section
// zeroed: the part that must not depend on how the job ran.
func withoutExecution(t *testing.T, r *manifest.Report) []byte {
	t.Helper()
	c := *r
	c.Execution = manifest.Execution{}
	b, err := manifest.Encode(&c)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// faulty builds a release with several faults at once, so that counts,
// examples, failures and both roots are all non-trivial.
func faulty(t *testing.T) (objstore.Store, stage.Result) {
	s := stagetest.Store(t)
	res := stagetest.Synth(t, s, 4000, 8, 11)
	res = stagetest.RewriteShard(t, s, res, 2, func(rows []stage.Row) []stage.Row {
		rows[1].Text += "~"
		rows[2].Split = "other"
		x := rows[3]
		x.SampleID = "zz-extra"
		return append(rows[5:], x) // rows 0..4 missing, one extra
	})
	data := stagetest.ShardBytes(t, s, res.Release.Shards[5])
	res = stagetest.ReplaceShardBytes(t, s, res, 5, stagetest.Truncate(data, 100))
	return s, res
}

// The report minus execution is byte-identical whatever the number of map
// tasks and reducers, whether the shuffle is compressed, and whether the
// snapshot members are mapped and shuffled or read by the reducers.
func TestReportIndependentOfPlanShape(t *testing.T) {
	s, res := faulty(t)
	members := len(res.SnapshotDoc.Members)
	var first []byte
	var shuffled [9]int64
	for i, c := range []struct {
		maps, reducers int
		comp           shuffle.Compression
		mapMembers     bool
		fanIn          int
	}{
		{1, 1, shuffle.None, false, 0},
		{4, 8, shuffle.None, false, 0},
		{16, 64, shuffle.None, false, 0},
		{4, 8, shuffle.Zstd, false, 0},
		{4, 8, shuffle.None, true, 0},
		{16, 64, shuffle.None, true, 0},
		// A merge level: reducers merge their map tasks' files a group
		// at a time first (groups of 3, 3 and 2; of 2, in two levels,
		// 8 files to 4 to 2).
		{8, 8, shuffle.None, false, 3},
		{8, 4, shuffle.Zstd, false, 2},
		{16, 8, shuffle.None, true, 5},
	} {
		// Parallelism 2 whatever the machine: with more cores than
		// members, the planner would map the members.
		r := verify(t, s, PlanOptions{Root: res.Root, MapTasks: c.maps, Reducers: c.reducers, ShuffleCompression: c.comp, MapMembers: c.mapMembers, Parallelism: 2, ReduceFanIn: c.fanIn})
		shuffled[i] = r.Execution.ShuffleBytes
		if c.fanIn > 0 {
			if want := mergedFiles(c.maps, c.fanIn); r.Execution.MergedFiles != want*r.Execution.Reducers || r.Execution.MergedBytes <= 0 {
				t.Fatalf("case %+v: merge level wrote %d files (%d bytes), want %d per reducer", c, r.Execution.MergedFiles, r.Execution.MergedBytes, want)
			}
			if page, err := s.List(context.Background(), JobsPrefix+r.Execution.Plan.Hex()+"/merge/", "", 10); err != nil || len(page.Objects) > 0 {
				t.Fatalf("case %+v: merge level files left behind: %+v, %v", c, page.Objects, err)
			}
		} else if r.Execution.MergedFiles != 0 || r.Execution.MergedBytes != 0 {
			t.Fatalf("case %+v: merge level with the default fan-in: %d files", c, r.Execution.MergedFiles)
		}
		if r.Execution.Stages.Read <= 0 || r.Execution.Stages.Decode <= 0 || r.Execution.Stages.Tuples <= 0 || r.Execution.Stages.Reduce <= 0 {
			t.Fatalf("case %+v: local execution stages not measured: %+v", c, r.Execution.Stages)
		}
		if r.Verdict != manifest.Invalid || r.Counts.Missing == 0 || r.Counts.Extra != 1 || r.Counts.DecodeErrors != 1 {
			t.Fatalf("case %+v: unexpected report counts %+v", c, r.Counts)
		}
		// Reducers read members themselves unless told to map them, and
		// then a cut never splits a member.
		wantMaps, wantReducers := c.maps, c.reducers
		if !c.mapMembers {
			wantMaps, wantReducers = min(c.maps, len(res.Release.Shards)), min(c.reducers, members)
		}
		if r.Execution.MapTasks != wantMaps || r.Execution.Reducers != wantReducers {
			t.Fatalf("case %+v ran as %d×%d, want %d×%d", c, r.Execution.MapTasks, r.Execution.Reducers, wantMaps, wantReducers)
		}
		b := withoutExecution(t, r)
		if first == nil {
			first = b
		} else if !bytes.Equal(first, b) {
			t.Fatalf("case %+v: report differs from the first case's:\n%s\n%s", c, first, b)
		}
	}
	if shuffled[3] >= shuffled[1] {
		t.Fatalf("zstd shuffle of %d bytes is not smaller than the plain one of %d", shuffled[3], shuffled[1])
	}
	// Members read by reducers never enter the shuffle: it holds about
	// half the tuples.
	if shuffled[1] >= shuffled[4]*6/10 {
		t.Fatalf("shuffle with members read by reducers is %d bytes, with members mapped %d", shuffled[1], shuffled[4])
	}
}

// A map task killed after writing half its outputs (no commit record) is
// simply rerun: the rerun's outputs are byte-identical to the orphans, and
// the report is the same as an undisturbed run's.
func TestMapTaskKilledHalfwayIsRerun(t *testing.T) {
	s, res := faulty(t)
	ctx := context.Background()
	o := PlanOptions{Root: res.Root, MapTasks: 3, Reducers: 4, Tool: "shardproof test", Nonce: "killed"}
	_, pd, err := NewPlan(ctx, s, o)
	if err != nil {
		t.Fatal(err)
	}
	kill := errors.New("killed")
	broken := &faults.ErrorOnce{Store: s, Method: faults.Put, Err: kill,
		Match: func(key string) bool { return strings.HasSuffix(key, "/map/1/r2.arrow") }}
	j, err := Open(ctx, broken, pd)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := j.Map(ctx, 1, nil); !errors.Is(err, kill) {
		t.Fatalf("map task 1: err = %v, want the injected failure", err)
	}
	for r, want := range []bool{true, true, false, false} {
		if _, err := s.Head(ctx, j.mapOutputKey(1, r), ""); (err == nil) != want {
			t.Fatalf("after the kill, output r%d exists=%v (err %v)", r, err == nil, err)
		}
	}
	if _, err := s.Head(ctx, j.mapCommitKey(1), ""); !objstore.IsNotExist(err) {
		t.Fatalf("commit record after the kill: %v", err)
	}
	// A reduce task must not run on an uncommitted map phase.
	if _, err := j.Reduce(ctx, 0); errcode.Of(err) != errcode.TaskNotReady {
		t.Fatalf("reduce before map commit: err = %v", err)
	}
	out, err := Run(ctx, s, pd, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	rerun := out.Report
	if rerun.Execution.Plan != pd {
		t.Fatalf("rerun used plan %s, want %s", rerun.Execution.Plan, pd)
	}
	// A fresh verification has its own nonce, so it shares nothing with
	// the disturbed job.
	fresh := verify(t, s, PlanOptions{Root: res.Root, MapTasks: 3, Reducers: 4})
	if fresh.Execution.Plan == pd {
		t.Fatal("a new verification reused the plan of an earlier one")
	}
	if !bytes.Equal(withoutExecution(t, rerun), withoutExecution(t, fresh)) {
		t.Fatal("report after a killed map task differs from an undisturbed run")
	}
}

// A rerun whose output differs from an orphaned earlier output is
// NONDETERMINISM, not silently overwritten or ignored.
func TestNondeterministicRerunDetected(t *testing.T) {
	for _, sum := range []shuffle.Checksum{shuffle.XXH64, shuffle.SHA256} {
		t.Run(string(sum), func(t *testing.T) {
			s, res := synth(t)
			ctx := context.Background()
			// The compression Verify picks, so both plans are the same plan.
			o := PlanOptions{Root: res.Root, MapTasks: 2, Reducers: 2, Tool: "shardproof test", Nonce: "fixed", ShuffleCompression: shuffle.None, ShuffleChecksum: sum}
			j := openPlan(t, s, o)
			if _, err := putExact(ctx, s, j.mapOutputKey(0, 1), []byte("bytes from another run")); err != nil {
				t.Fatal(err)
			}
			_, err := Verify(ctx, s, Options{PlanOptions: o})
			if errcode.Of(err) != errcode.Nondeterminism || !strings.Contains(err.Error(), string(sum)+":") {
				t.Fatalf("err = %v, want NONDETERMINISM naming the %s of this run's output", err, sum)
			}
		})
	}
}

// RemoveJob deletes a finished job's scratch and nothing else; an
// interrupted removal has already taken the reduce commit records, so no
// reduce commit is left naming shuffle files that are gone.
func TestRemoveJob(t *testing.T) {
	s, res := synth(t)
	ctx := context.Background()
	keys := func(prefix string) int {
		page, err := s.List(ctx, prefix, "", 1000)
		if err != nil {
			t.Fatal(err)
		}
		return len(page.Objects)
	}
	run := func(nonce string) *Outcome {
		out, err := Verify(ctx, s, Options{PlanOptions: PlanOptions{Root: res.Root, Reducers: 3, Tool: "shardproof test", Nonce: nonce}})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	a, b := run("a"), run("b")
	pa := "jobs/" + a.Plan.Hex() + "/"
	if keys(pa+"reduce/") != 3 || keys(pa+"map/") == 0 {
		t.Fatalf("before removal: %d reduce and %d map keys", keys(pa+"reduce/"), keys(pa+"map/"))
	}
	kill := errors.New("killed")
	broken := &faults.ErrorOnce{Store: s, Method: faults.DeletePrefix, Err: kill,
		Match: func(p string) bool { return strings.HasSuffix(p, "/map/") }}
	if err := RemoveJob(ctx, broken, a.Plan); !errors.Is(err, kill) {
		t.Fatalf("RemoveJob under a failing delete: err = %v", err)
	}
	if keys(pa+"reduce/") != 0 || keys(pa+"map/") == 0 {
		t.Fatalf("interrupted removal: %d reduce and %d map keys left, want 0 and some", keys(pa+"reduce/"), keys(pa+"map/"))
	}
	if err := RemoveJob(ctx, broken, a.Plan); err != nil {
		t.Fatal(err)
	}
	if n := keys(pa); n != 0 {
		t.Fatalf("%d keys left under %s", n, pa)
	}
	if n := keys("jobs/" + b.Plan.Hex() + "/"); n == 0 {
		t.Fatal("removing one job removed another")
	}
	// The plan and the report are blobs: they stay.
	for _, d := range []manifest.Digest{a.Plan, a.ReportDigest} {
		if _, _, err := objstore.ReadBlob(ctx, s, d, manifest.MaxDocumentSize); err != nil {
			t.Fatalf("blob %s after RemoveJob: %v", d, err)
		}
	}
	var plain struct{ objstore.Store }
	plain.Store = s
	if err := RemoveJob(ctx, plain, b.Plan); errcode.Of(err) != errcode.Usage {
		t.Fatalf("store without Deleter: err = %v, want USAGE", err)
	}
}

// A reduce task that reads snapshot members and dies before its commit
// record is rerun from scratch; one that committed is reused, and Run
// still reports every member once (from the commit record) and gives the
// report an undisturbed run gives.
func TestReduceWithMembersKilledIsRerun(t *testing.T) {
	s, res := faulty(t)
	ctx := context.Background()
	o := PlanOptions{Root: res.Root, MapTasks: 3, Reducers: 4, Parallelism: 2, Tool: "shardproof test", Nonce: "killed-reduce"}
	plan, pd, err := NewPlan(ctx, s, o)
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.Reducers[0].Members) == 0 || len(plan.Reducers[1].Members) == 0 {
		t.Fatalf("reducers 0 and 1 read no members: %+v", plan.Reducers)
	}
	j, err := Open(ctx, s, pd)
	if err != nil {
		t.Fatal(err)
	}
	for i := range plan.MapTasks {
		if _, err := j.Map(ctx, i, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := j.Reduce(ctx, 0); err != nil {
		t.Fatal(err)
	}
	// Reduce task 1 dies writing its commit record, after reading its
	// members.
	kill := errors.New("killed")
	broken := &faults.ErrorOnce{Store: s, Method: faults.Put, Err: kill,
		Match: func(key string) bool { return strings.HasSuffix(key, "/reduce/1/commit.json") }}
	jb, err := Open(ctx, broken, pd)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := jb.Reduce(ctx, 1); !errors.Is(err, kill) {
		t.Fatalf("reduce task 1: err = %v, want the injected failure", err)
	}
	seen := map[[2]int]int{}
	var last Progress
	out, err := Run(ctx, s, pd, 2, func(p Progress) {
		seen[[2]int{int(p.Result.Side), p.Result.Index}]++
		last = p
	})
	if err != nil {
		t.Fatal(err)
	}
	total := len(res.Release.Shards) + len(res.SnapshotDoc.Members)
	if len(seen) != total || last.Done != total || last.Total != total {
		t.Fatalf("progress saw %d inputs, ended at %d/%d; want %d", len(seen), last.Done, last.Total, total)
	}
	for k, n := range seen {
		if n != 1 {
			t.Fatalf("input %v reported %d times", k, n)
		}
	}
	fresh := verify(t, s, PlanOptions{Root: res.Root, Parallelism: 2})
	if a, b := withoutExecution(t, fresh), withoutExecution(t, out.Report); !bytes.Equal(a, b) {
		t.Fatalf("resumed report differs:\n%s\n%s", a, b)
	}
}

// Reading ahead (mapper.Prefetch) changes nothing but timing: on a store
// with a round trip before every file, whose bodies are read as S3's are
// rather than mapped (faults.Latency), the report minus execution is the
// one a plain verification gives, for map tasks that hold many inputs,
// for members mapped in map tasks and for members read by reducers.
func TestReadAheadSameReport(t *testing.T) {
	s, res := faulty(t)
	slow := &faults.Latency{Store: s, Delay: 3 * time.Millisecond,
		Match: func(k string) bool { return strings.HasPrefix(k, "blobs/") }}
	for _, c := range []struct {
		maps       int
		mapMembers bool
	}{{1, false}, {2, true}, {0, false}} {
		o := PlanOptions{Root: res.Root, MapTasks: c.maps, Reducers: 2, MapMembers: c.mapMembers, Parallelism: 2}
		want := withoutExecution(t, verify(t, s, o))
		if got := withoutExecution(t, verify(t, slow, o)); !bytes.Equal(got, want) {
			t.Fatalf("case %+v: read ahead from a slow store:\n%s\nwant\n%s", c, got, want)
		}
	}
}

// A file that cannot be read in the middle of a map task fails the task
// with the store's code, the file read ahead after it is let go, and the
// next verification, the store healed, succeeds.
func TestReadAheadFailure(t *testing.T) {
	s, res := synth(t)
	bad := res.Release.Shards[1].Digest.BlobKey()
	broken := &faults.ErrorOnce{Store: &faults.Latency{Store: s, Delay: 2 * time.Millisecond,
		Match: func(k string) bool { return strings.HasPrefix(k, "blobs/") }},
		Method: faults.Get, Match: func(k string) bool { return k == bad },
		Err: errcode.New(errcode.IO, "injected read failure")}
	_, err := Verify(context.Background(), broken, Options{PlanOptions: PlanOptions{Root: res.Root, MapTasks: 1, Reducers: 2, Parallelism: 2}})
	if errcode.Of(err) != errcode.IO || !broken.Fired() {
		t.Fatalf("verify with shard 1 unreadable: %v (fired %v), want IO", err, broken.Fired())
	}
	expect(t, verify(t, broken, PlanOptions{Root: res.Root, MapTasks: 1, Reducers: 2, Parallelism: 2}), clean(res))
}
