package coordinator

import (
	"testing"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/shuffle"
)

// Two aggregate tasks of one plan at once (an engine's retry beside a
// task still running), over a file store, each as `task aggregate` runs
// it: the aggregation, then the job's files deleted once it succeeded.
// The second starts while the first reads the reduce tasks' records. It
// used to run beside the first unheld, and the first one's deletion,
// once the second had read the map records, failed the first with
// TASK_NOT_READY (a job with every task committed and its report
// recorded). An aggregate now holds the job as verify does: the second
// is JOB_IN_USE and writes nothing, the first stores the report and the
// plan's record names it, and the second run again prints that report.
func TestConcurrentAggregateTasks(t *testing.T) {
	s, _, res := fileSynth(t)
	ctx := t.Context()
	j, _, _ := committedJob(t, s, uncompressedPlan(res.Root, 2, 2, shuffle.XXH64))
	exec := manifest.Execution{Executor: "task"}
	// aggregateTask is what `task aggregate` does, in a process of its
	// own (a Job of its own).
	aggregateTask := func(j *Job) error {
		if err := j.RunTask(ctx, KindAggregate, 0, exec); err != nil {
			return err
		}
		return RemoveJob(ctx, s, j.PlanDigest)
	}
	var secondErr error
	second := must(Open(ctx, s, j.PlanDigest))
	first := must(Open(ctx, &getHook{Store: s, key: j.reduceCommitKey(0), hook: func() {
		secondErr = aggregateTask(second)
	}}, j.PlanDigest))
	if err := aggregateTask(first); err != nil {
		t.Fatalf("the first aggregate, with a second one run meanwhile: %v", err)
	}
	if errcode.Of(secondErr) != errcode.JobInUse {
		t.Fatalf("an aggregate of a job another aggregate holds: %v; want %s", secondErr, errcode.JobInUse)
	}
	out, err := j.Finished(ctx)
	if err != nil || out == nil || out.Report.Verdict != manifest.Verified {
		t.Fatalf("the plan's report: %+v, %v", out, err)
	}
	if page := must(s.List(ctx, j.prefix(), "", 1)); len(page.Objects) != 0 {
		t.Fatalf("the job's files are still there: %s", page.Objects[0].Key)
	}
	// The second one, run again, finds the report recorded.
	if err := must(Open(ctx, s, j.PlanDigest)).RunTask(ctx, KindAggregate, 0, exec); err != nil {
		t.Fatalf("the second aggregate run again: %v", err)
	}
	if again, err := j.Finished(ctx); err != nil || again == nil || again.ReportDigest != out.ReportDigest {
		t.Fatalf("the plan's report after the second aggregate ran again: %+v, %v; want %s", again, err, out.ReportDigest)
	}
}

// An aggregate task killed on another machine (its pod's node lost) holds
// the job until its hold record, renewed every minute, is HoldStaleAfter
// old by the store's clock: the engine's retry meanwhile is JOB_IN_USE
// and writes nothing, and its retry after that takes the job over and
// stores the report, as README says.
func TestAggregateTaskAfterHolderOnAnotherMachine(t *testing.T) {
	s, _, res := fileSynth(t)
	ctx := t.Context()
	j, _, _ := committedJob(t, s, uncompressedPlan(res.Root, 2, 2, shuffle.XXH64))
	exec := manifest.Execution{Executor: "task"}
	putHold(t, s, j.PlanDigest, 1, HoldRun, farHolder)
	if err := must(Open(ctx, s, j.PlanDigest)).RunTask(ctx, KindAggregate, 0, exec); errcode.Of(err) != errcode.JobInUse {
		t.Fatalf("an aggregate while the killed one's record is fresh: %v; want %s", err, errcode.JobInUse)
	}
	if out, err := j.Finished(ctx); err != nil || out != nil {
		t.Fatalf("the plan's report after the refused aggregate: %+v, %v; want none", out, err)
	}
	ageHold(t, s, j.PlanDigest, 1)
	if err := must(Open(ctx, s, j.PlanDigest)).RunTask(ctx, KindAggregate, 0, exec); err != nil {
		t.Fatalf("an aggregate once the killed one's record is HoldStaleAfter old: %v", err)
	}
	if out, err := j.Finished(ctx); err != nil || out == nil || out.Report.Verdict != manifest.Verified {
		t.Fatalf("the plan's report: %+v, %v", out, err)
	}
}
