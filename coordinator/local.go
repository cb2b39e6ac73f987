package coordinator

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"runtime"
	"sync"
	"time"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/mapper"
	"github.com/shardproof/shardproof/objstore"
	"github.com/shardproof/shardproof/shuffle"
)

// Options configure a local verification.
type Options struct {
	PlanOptions
	// Progress, if non-nil, is called (from worker goroutines, serialized)
	// after each shard or member file is mapped.
	Progress func(Progress)
	// TaskScratch is the URL, as tasks reach it, of the store that holds
	// the job's files when they are kept apart from the release's store
	// (verify --scratch); empty when they are not. Only VerifyWith uses it:
	// the local executor's tasks use the store they are given.
	TaskScratch string
}

// Progress reports one mapped shard or member file.
type Progress struct {
	Result mapper.Result
	// Done counts the inputs mapped so far, of Total.
	Done, Total int
}

// Outcome is the result of a verification.
type Outcome struct {
	Plan         manifest.Digest
	Report       *manifest.Report
	ReportDigest manifest.Digest
	// Reused: the plan's job had finished before (its report record,
	// see Job.Finished), and nothing ran: Report is the one that run
	// stored.
	Reused bool
}

// Verify plans a new verification (see NewPlan) and runs it with the
// local executor (see Run). Its shuffle files are uncompressed and checked
// with xxh64 unless o.ShuffleCompression and o.ShuffleChecksum say
// otherwise. It
// returns an error only for operational problems; an INVALID release is a
// report with that verdict.
func Verify(ctx context.Context, s objstore.Store, o Options) (*Outcome, error) {
	if o.Parallelism <= 0 {
		o.Parallelism = runtime.NumCPU()
	}
	if o.ShuffleCompression == "" {
		// Every reducer reads one file per map task at once, and a zstd
		// decoder holds about 400 KiB: at 16M records the two reducers'
		// 490 decoders were 200 MiB, most of verify's peak. Plain files
		// need a 64 KiB read-ahead each, and this shuffle never leaves
		// the machine.
		o.ShuffleCompression = shuffle.None
	}
	if o.ShuffleChecksum == "" {
		// The files are this process's own, read back within seconds:
		// sha256 on both sides was a tenth of verify's CPU.
		o.ShuffleChecksum = shuffle.XXH64
	}
	_, pd, err := NewPlan(ctx, s, o.PlanOptions)
	if err != nil {
		return nil, err
	}
	// Said now, not only when the run ends: a process killed outright
	// (kill -9, the OOM killer) prints nothing more, and its committed
	// tasks are reused only by a resume that names this plan.
	slog.Info("verification planned; if this process dies, verify --resume with this plan finishes it", "plan", pd.String())
	return Run(ctx, s, pd, o.Parallelism, o.Progress)
}

// NewNonce returns a random plan nonce (128 bits, hex).
func NewNonce() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// UnfinishedError is the error of a local verification that stopped
// after its plan was stored (interrupted, or a task failed): the tasks it
// committed stay in the store under the plan, and Run with the same plan
// (`verify --resume`) finishes the job from them. Err carries the code.
type UnfinishedError struct {
	Plan manifest.Digest
	Err  error
}

func (e *UnfinishedError) Error() string { return e.Err.Error() }
func (e *UnfinishedError) Unwrap() error { return e.Err }

// Run runs, or resumes, the job of an existing plan with the local
// executor: goroutines, parallelism at a time (default runtime.NumCPU()),
// map tasks, then reduce tasks, then the aggregation. Tasks already
// committed are not redone, and a job that finished already (its report
// is recorded, see Job.Finished) returns that report with nothing run.
// The job is held while it runs (see Acquire): a job another live process
// runs or deletes is JOB_IN_USE. progress may be nil.
func Run(ctx context.Context, s objstore.Store, pd manifest.Digest, parallelism int, progress func(Progress)) (*Outcome, error) {
	start := time.Now()
	if parallelism <= 0 {
		parallelism = runtime.NumCPU()
	}
	j, err := Open(ctx, s, pd)
	if err != nil {
		return nil, err
	}
	// Before anything is written: a plan whose reducers cannot open
	// their inputs would otherwise fail after the whole map phase.
	reducers, err := j.reducersAtOnce(parallelism)
	if err != nil {
		return nil, &UnfinishedError{Plan: pd, Err: err}
	}
	h, out, err := j.hold(ctx)
	if h == nil {
		return out, err
	}
	defer h.Release()
	out, err = j.runLocal(h.Context(), start, parallelism, reducers, progress)
	if lost := h.Lost(); err != nil && lost != nil {
		return nil, lost
	}
	return out, err
}

// hold takes the job to run it. When the job has finished already, it
// returns no hold and that outcome; when its last holder was deleting its
// files and did not finish, the files left are deleted first (the job
// then runs from the start). The caller releases the hold.
func (j *Job) hold(ctx context.Context) (*Hold, *Outcome, error) {
	if out, err := j.Finished(ctx); out != nil || err != nil {
		return nil, out, err
	}
	h, err := Acquire(ctx, j.Store, j.PlanDigest, HoldRun)
	if err != nil {
		return nil, nil, err
	}
	// It may have finished between the look and the take.
	if out, _, err := j.finished(ctx, false); out != nil || err != nil {
		h.Release()
		return nil, out, err
	}
	if h.unfinishedRemoval() {
		d, ok := j.Store.(objstore.Deleter)
		if !ok {
			h.Release()
			return nil, nil, errcode.New(errcode.Usage, "plan %s: its job's files were being deleted, and store %T cannot delete: remove %s by hand", j.PlanDigest, j.Store, j.prefix())
		}
		msg := "the job's last holder was deleting its files and did not finish; the rest are deleted and the job runs from the start"
		if h.Previous.Released {
			// A removal that cut a renewal at its end keeps its hold
			// records, released, so the late renewal lands below them.
			msg = "the job's last holder deleted its files but kept its hold records (a renewal was in flight at its end); they are deleted and the job runs from the start"
		}
		j.log().Info(msg, "previousPid", h.Previous.Process.PID, "previousHost", h.Previous.Process.Host)
		// The record says so while the files go: if this process
		// fails or is killed before they are all gone, the next holder
		// must delete the rest too, not run on what is left.
		err := h.setPurpose(h.Context(), HoldRemove)
		if err == nil {
			err = removeTaskFiles(h.Context(), d, j.PlanDigest)
		}
		if err == nil {
			err = h.setPurpose(h.Context(), HoldRun)
		}
		if err != nil {
			h.Release()
			return nil, nil, err
		}
	}
	return h, nil, nil
}

// runLocal runs the job's tasks in this process; see Run.
func (j *Job) runLocal(ctx context.Context, start time.Time, parallelism, reducers int, progress func(Progress)) (*Outcome, error) {
	pd := j.PlanDigest
	// Shuffle files are read back from the page cache moments later
	// and checked by digest: syncing them only made the disk write what
	// is deleted seconds later (as in Hadoop and Spark, whose shuffle
	// files are not synced either). Commit records still are.
	j.ephemeralShuffle = true
	if reducers < min(parallelism, len(j.Plan.Reducers)) {
		j.log().Warn("reduce tasks run fewer at a time than --parallelism: the open-file limit (ulimit -n) allows no more",
			"atOnce", reducers, "parallelism", parallelism, "filesPerReduceTask", j.reduceFiles())
	}
	var mu sync.Mutex
	done, total := 0, len(j.Release.Shards)+len(j.Snapshot.Members)
	mapped := func(r mapper.Result) {
		if progress != nil {
			mu.Lock()
			done++
			progress(Progress{Result: r, Done: done, Total: total})
			mu.Unlock()
		}
	}
	if err := runAll(ctx, len(j.Plan.MapTasks), parallelism, func(ctx context.Context, i int) error {
		_, err := j.Map(ctx, i, mapped)
		return err
	}); err != nil {
		return nil, &UnfinishedError{Plan: pd, Err: err}
	}
	dropParts()
	if err := runAll(ctx, len(j.Plan.Reducers), reducers, func(ctx context.Context, r int) error {
		_, err := j.reduce(ctx, r, mapped)
		return err
	}); err != nil {
		return nil, &UnfinishedError{Plan: pd, Err: err}
	}
	out, err := j.aggregate(ctx, manifest.Execution{
		Executor: "local",
		Seconds:  time.Since(start).Seconds(),
		Started:  start.UTC().Format(time.RFC3339),
	})
	if err != nil {
		return nil, &UnfinishedError{Plan: pd, Err: err}
	}
	return out, nil
}

// runAll runs f(0..n-1) on p goroutines and returns the first error,
// canceling the rest.
func runAll(ctx context.Context, n, p int, f func(context.Context, int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	next := make(chan int)
	var (
		wg       sync.WaitGroup
		once     sync.Once
		firstErr error
	)
	for range min(p, n) {
		wg.Go(func() {
			for i := range next {
				if err := f(ctx, i); err != nil {
					once.Do(func() { firstErr = err; cancel() })
				}
			}
		})
	}
feed:
	for i := range n {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	return ctx.Err()
}
