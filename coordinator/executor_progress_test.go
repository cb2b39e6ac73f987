package coordinator

import (
	"context"
	"testing"
	"time"

	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/objstore"
)

// inProcess is an Engine that runs every task in this process, one at a
// time, pausing between map tasks so a progress watcher sees them land.
type inProcess struct {
	s     objstore.Store
	pause time.Duration
}

func (e *inProcess) Name() string { return "in-process" }

func (e *inProcess) Run(ctx context.Context, ref PlanRef, maps, reduces int) error {
	j, err := Open(ctx, e.s, ref.Plan)
	if err != nil {
		return err
	}
	for i := range maps {
		if _, err := j.Map(ctx, i, nil); err != nil {
			return err
		}
		time.Sleep(e.pause)
	}
	for r := range reduces {
		if _, err := j.Reduce(ctx, r); err != nil {
			return err
		}
	}
	return nil
}

// TestEngineProgress: with an external engine, verify reports each map
// task's inputs as its commit record appears, every input exactly once,
// ending at the total, with the records the report counts.
func TestEngineProgress(t *testing.T) {
	s, res := synth(t)
	old := ProgressInterval
	ProgressInterval = 5 * time.Millisecond
	defer func() { ProgressInterval = old }()
	var (
		got              []Progress
		records, members int64
		skipped          int
		seen             = map[[2]int]bool{}
	)
	out, err := VerifyWith(t.Context(), s, "unused", Options{
		PlanOptions: PlanOptions{Root: res.Root, MapTasks: 4, Reducers: 2, Tool: "shardproof test"},
		Progress: func(p Progress) {
			got = append(got, p)
			k := [2]int{int(p.Result.Side), p.Result.Index}
			if seen[k] {
				t.Errorf("input %v reported twice", k)
			}
			seen[k] = true
			switch {
			case p.Result.Side == 0:
				records += p.Result.Records
			case p.Result.Skipped:
				// Left unread (the snapshot's leaf index matched): its
				// tuples are counted from the release's.
				members += res.SnapshotDoc.Members[p.Result.Index].Records
				skipped++
			default:
				members += p.Result.Records
			}
		},
	}, &inProcess{s: s, pause: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	total := len(res.Release.Shards) + len(res.SnapshotDoc.Members)
	if len(got) != total || got[total-1].Done != total || got[total-1].Total != total {
		t.Fatalf("%d progress calls %+v; want %d ending at %d/%d", len(got), got, total, total, total)
	}
	for i, p := range got {
		if p.Done != i+1 {
			t.Fatalf("call %d reports Done=%d", i, p.Done)
		}
	}
	if records != out.Report.Counts.Records || members != out.Report.Counts.SnapshotRecords {
		t.Fatalf("progress counted %d release and %d snapshot records; the report %d and %d",
			records, members, out.Report.Counts.Records, out.Report.Counts.SnapshotRecords)
	}
	if ex := out.Report.Execution; skipped != ex.SnapshotMembersSkipped || skipped+ex.SnapshotMembersRead != len(res.SnapshotDoc.Members) {
		t.Fatalf("progress reported %d members skipped; the report %d skipped and %d read of %d", skipped, ex.SnapshotMembersSkipped, ex.SnapshotMembersRead, len(res.SnapshotDoc.Members))
	}
	if out.Report.Verdict != manifest.Verified || out.Report.Execution.Executor != "in-process" {
		t.Fatalf("report %s by %s", out.Report.Verdict, out.Report.Execution.Executor)
	}
}

// While an engine runs the tasks, the job's lease gets a new version every
// LeaseInterval, so `store prune-jobs` (newest object younger than its
// cutoff) leaves a job alone whose reduce array sits in a queue long after
// its map phase wrote anything.
func TestEngineLease(t *testing.T) {
	s, res := synth(t)
	defer func(d time.Duration) { LeaseInterval = d }(LeaseInterval)
	LeaseInterval = 30 * time.Millisecond
	_, pd, err := NewPlan(t.Context(), s, PlanOptions{Root: res.Root, Tool: "shardproof test", MapTasks: 2, Reducers: 2})
	if err != nil {
		t.Fatal(err)
	}
	out, err := RunWithProgress(t.Context(), s, PlanRef{Store: "unused", Plan: pd}, &inProcess{s: s, pause: 150 * time.Millisecond}, nil)
	if err != nil || out.Report.Verdict != manifest.Verified {
		t.Fatalf("run: %v", err)
	}
	key := jobPrefix(pd) + LeaseKey
	vs, err := s.(objstore.VersionLister).Versions(t.Context(), key, 100)
	if err != nil {
		t.Fatal(err)
	}
	// 300 ms of map tasks at one version per 30 ms, on a loaded machine.
	if len(vs) < 3 {
		t.Fatalf("%d versions of %s after 300 ms, want one per %s", len(vs), key, LeaseInterval)
	}
	jobs, err := ListJobs(t.Context(), s)
	if err != nil || len(jobs) != 1 || jobs[0].Plan != pd {
		t.Fatalf("jobs %+v, %v", jobs, err)
	}
}
