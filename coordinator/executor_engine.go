package coordinator

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/mapper"
	"github.com/shardproof/shardproof/objstore"
)

// Engine runs the map and reduce tasks of a planned job outside this
// process: as child processes, Slurm array tasks or Kubernetes indexed
// pods. Every task it starts is the command line
//
//	shardproof task map|reduce --plan <plan URL> [--index N]
//
// with the index from --index or the engine's index variable (IndexEnv).
type Engine interface {
	// Name is recorded as the report's execution.executor.
	Name() string
	// Run runs map tasks [0, maps) and reduce tasks [0, reduces) of the
	// job ref names and returns nil once the engine saw every task
	// succeed. It MUST NOT start a reduce task before every map task has
	// succeeded. A task may run more than once (retries, duplicates): the
	// task contract makes that safe. Run's success is not trusted on its
	// own: the caller aggregates from the commit records.
	Run(ctx context.Context, ref PlanRef, maps, reduces int) error
}

// VerifyWith plans a new verification in the store s (reachable by tasks
// as storeURL, their scratch as o.TaskScratch) and runs it with e (see
// RunWith). The report equals the local executor's apart from its
// execution section.
func VerifyWith(ctx context.Context, s objstore.Store, storeURL string, o Options, e Engine) (*Outcome, error) {
	_, pd, err := NewPlan(ctx, s, o.PlanOptions)
	if err != nil {
		return nil, err
	}
	return RunWithProgress(ctx, s, PlanRef{Store: storeURL, Plan: pd, Scratch: o.TaskScratch}, e, o.Progress)
}

// RunWith runs, or resumes, the job of an existing plan with e: the
// engine runs the map and reduce tasks (those already committed return at
// once), then the commit records are aggregated here into the report. As
// in Run, the job is held meanwhile, and a job that finished already
// returns its recorded report.
func RunWith(ctx context.Context, s objstore.Store, storeURL string, pd manifest.Digest, e Engine) (*Outcome, error) {
	return RunWithProgress(ctx, s, PlanRef{Store: storeURL, Plan: pd}, e, nil)
}

// ProgressInterval is how often RunWithProgress looks for new map commit
// records.
var ProgressInterval = time.Second

// RunWithProgress is RunWith that, while the engine runs, reports every
// input of each map task whose commit record has appeared (from one
// goroutine, in the order the commits are found), as the local executor
// reports each file it maps. progress may be nil.
//
// s is the store as this process reaches it (with the job's scratch routed
// in, if it has one); ref names the plan, and the stores as tasks reach
// them.
func RunWithProgress(ctx context.Context, s objstore.Store, ref PlanRef, e Engine, progress func(Progress)) (*Outcome, error) {
	start := time.Now()
	pd := ref.Plan
	j, err := Open(ctx, s, pd)
	if err != nil {
		return nil, err
	}
	h, out, err := j.hold(ctx)
	if h == nil {
		return out, err
	}
	defer h.Release()
	out, err = j.runWith(h.Context(), start, ref, e, progress)
	if lost := h.Lost(); err != nil && lost != nil {
		return nil, lost
	}
	return out, err
}

// runWith runs the job's tasks with e and aggregates them; see
// RunWithProgress.
func (j *Job) runWith(ctx context.Context, start time.Time, ref PlanRef, e Engine, progress func(Progress)) (*Outcome, error) {
	j.log().Info("running verify tasks", "executor", e.Name(), "planURL", ref.String(),
		"mapTasks", len(j.Plan.MapTasks), "reducers", len(j.Plan.Reducers))
	stop := func() {}
	if progress != nil {
		finished, watched := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(watched)
			j.watchMaps(ctx, finished, progress)
		}()
		stop = func() { close(finished); <-watched }
	}
	release := j.keepAlive(ctx)
	err := e.Run(ctx, ref, len(j.Plan.MapTasks), len(j.Plan.Reducers))
	release()
	stop()
	if err != nil {
		return nil, err
	}
	return j.aggregate(ctx, manifest.Execution{
		Executor: e.Name(),
		Seconds:  time.Since(start).Seconds(),
		Started:  start.UTC().Format(time.RFC3339),
	})
}

// LeaseInterval is how often a verification that waits for an engine
// writes a new version of its job's lease (jobs/<plan>/lease).
var LeaseInterval = 10 * time.Minute

// LeaseKey is the key, under a job's prefix, of its lease.
const LeaseKey = "lease"

// keepAlive writes a new version of the job's lease now and every
// LeaseInterval until the returned function is called. `store prune-jobs`
// keeps a job whose newest object is younger than its cutoff: without the
// lease, a reduce array that waited in a queue for longer than the cutoff
// after the map phase lost the map outputs it was about to read.
func (j *Job) keepAlive(ctx context.Context) (release func()) {
	key := j.prefix() + LeaseKey
	touch := func() {
		body := time.Now().UTC().Format(time.RFC3339Nano)
		if _, err := j.Store.Put(ctx, key, strings.NewReader(body), objstore.PutOptions{Size: int64(len(body))}); err != nil && ctx.Err() == nil {
			j.log().Warn("job lease not written; store prune-jobs may take this running job for abandoned", "key", key, "code", string(errcode.Of(err)), "err", err)
		}
	}
	touch()
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(LeaseInterval)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				touch()
			}
		}
	}()
	return func() { close(done); <-stopped }
}

// watchMaps polls the task commit records every ProgressInterval until
// finished is closed (then once more, so the count ends at the total) or
// ctx ends, calling progress for each input of every newly committed map
// task and each snapshot member of every newly committed reduce task. A
// commit record that cannot be read or does not match the plan is
// skipped here: aggregation checks it for real.
func (j *Job) watchMaps(ctx context.Context, finished <-chan struct{}, progress func(Progress)) {
	total := len(j.Release.Shards) + len(j.Snapshot.Members)
	seenMap := make([]bool, len(j.Plan.MapTasks))
	seenReduce := make([]bool, len(j.Plan.Reducers))
	done := 0
	report := func(rs []mapper.Result) {
		for _, r := range rs {
			done++
			progress(Progress{Result: r, Done: done, Total: total})
		}
	}
	poll := func(ctx context.Context) {
		for i := range seenMap {
			if seenMap[i] || ctx.Err() != nil {
				continue
			}
			var mc MapCommit
			if found, err := j.readMapResults(ctx, i, &mc); err != nil || !found {
				continue
			}
			seenMap[i] = true
			report(mc.Results)
		}
		for r := range seenReduce {
			if seenReduce[r] || len(j.Plan.Reducers[r].Members) == 0 || ctx.Err() != nil {
				continue
			}
			var rc ReduceCommit
			if found, err := readRecord(ctx, j.Store, j.reduceCommitKey(r), &rc); err != nil || !found || j.checkReduceCommit(r, &rc) != nil {
				continue
			}
			seenReduce[r] = true
			report(rc.Members)
		}
	}
	t := time.NewTicker(ProgressInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-finished:
			poll(ctx)
			return
		case <-t.C:
			poll(ctx)
		}
	}
}

// Retryable reports whether a task that exited with status may succeed
// when run again: operational errors and unknown outcomes may, while a
// deterministic input error (exit 1, e.g. a bad plan document or
// NONDETERMINISM), a usage error (2) or a refusal (4) fails the same way
// every time. Engines use it to bound retries; the Kubernetes pod failure
// policy and the Slurm task script encode the same rule.
func Retryable(status int) bool {
	switch status {
	case errcode.ExitInvalid, errcode.ExitUsage, errcode.ExitRejected:
		return false
	}
	return status != errcode.ExitOK
}

// TaskError is a task that an engine saw fail for good.
type TaskError struct {
	Kind Kind
	// Index is the task's index, or -1 for several tasks that never ran.
	Index int
	// Status is the task's exit status (-1: killed or never started).
	Status int
	// Code is the task's error code, read from its "shardproof: …"
	// error line, or IO when it printed none.
	Code errcode.Code
	// Log is the tail of the task's standard error.
	Log string
}

func (e *TaskError) Error() string {
	how := fmt.Sprintf("failed with exit status %d", e.Status)
	if e.Status < 0 {
		how = "was ended by a signal" // exec's ExitCode is -1 then
	}
	log := strings.TrimSpace(e.Log)
	if log == "" {
		log = "(it wrote nothing to standard error)"
	}
	if e.Index < 0 {
		// Tasks the engine reports together, none of which ran.
		return fmt.Sprintf("%s tasks: %s", e.Kind, log)
	}
	return fmt.Sprintf("%s task %d %s: %s", e.Kind, e.Index, how, log)
}

// ErrorCode implements errcode.Coder: the task's own code, so an engine's
// failure keeps the meaning (and exit status) of the task's.
func (e *TaskError) ErrorCode() errcode.Code { return e.Code }

// newTaskError builds a TaskError from a task's exit status and log tail.
func newTaskError(kind Kind, index, status int, log []byte) *TaskError {
	e := &TaskError{Kind: kind, Index: index, Status: status, Code: errcode.IO, Log: string(log)}
	sc := bufio.NewScanner(bytes.NewReader(log))
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "shardproof: ")
		if !ok {
			continue
		}
		// The code is the first known one among the message's
		// ": "-separated parts ("map task 1: NONDETERMINISM: …").
		for _, part := range strings.Split(rest, ": ") {
			if c := errcode.Code(part); errcode.Known(c) {
				e.Code = c
				break
			}
		}
	}
	return e
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.b = append(t.b, p...)
	if over := len(t.b) - t.max; over > 0 {
		t.b = append(t.b[:0], t.b[over:]...)
	}
	return len(p), nil
}
