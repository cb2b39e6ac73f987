package coordinator

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/mapper"
	"github.com/shardproof/shardproof/objstore"
	"github.com/shardproof/shardproof/reducer"
	"github.com/shardproof/shardproof/snapindex"
)

// Job is a plan with every document it names loaded and checked. Tasks are
// methods of Job; a process that runs one task opens the Job from the plan
// digest alone.
type Job struct {
	Store        objstore.Store
	PlanDigest   manifest.Digest
	Plan         *Plan
	Release      *manifest.Release
	Snapshot     *manifest.Snapshot
	RecordSchema *manifest.RecordSchema
	// Tombstones and Benchmark are nil when the plan checks none.
	Tombstones, Benchmark *manifest.FenceLog

	tombSet, benchSet *reducer.Set

	// ephemeralShuffle writes shuffle files without syncing them to disk
	// (objstore.PutOptions.Ephemeral): set by the local executor, whose
	// reducers read them from the page cache moments later. Commit
	// records are always synced.
	ephemeralShuffle bool

	// leaves is the plan's snapshot leaf index, read by the first reduce
	// task that needs it (nil in a Job not from Open: read every time).
	leaves *leafCache

	clock *stageClock

	// redos serializes and counts the tasks this process runs again
	// (redoMap, redoReduce); nil in a Job not from Open.
	redos *redoLocks
}

// stageClock accumulates the time this process's tasks spend per stage
// (see manifest.StageSeconds), in nanoseconds summed over workers.
type stageClock struct {
	mapper.Timings
	shuffleWrite, reduce, aggregate atomic.Int64
}

// add adds the time since start to n; c may be nil (a Job not from Open).
func (c *stageClock) add(n *atomic.Int64, start time.Time) {
	if c != nil {
		n.Add(int64(time.Since(start)))
	}
}

// seconds returns the stages measured so far.
func (c *stageClock) seconds() manifest.StageSeconds {
	s := func(n *atomic.Int64) float64 { return max(float64(n.Load())/1e9, 0) }
	return manifest.StageSeconds{
		Read: s(&c.Read), StorageDigest: s(&c.StorageDigest), Decode: s(&c.Decode),
		ContentDigest: s(&c.ContentDigest), Tuples: s(&c.Tuples),
		ShuffleWrite: s(&c.shuffleWrite), Reduce: s(&c.reduce), Aggregate: s(&c.aggregate),
	}
}

type leafCache struct {
	once sync.Once
	b    []byte
	err  error
}

// snapshotLeaves returns the leaves of the plan's snapshot leaf index
// (32 bytes per bucket, bucket order), or nil if the plan names none.
// The exact version the plan names must still be there and unchanged.
func (j *Job) snapshotLeaves(ctx context.Context) ([]byte, error) {
	ref := j.Plan.SnapshotLeaves
	if ref == nil {
		return nil, nil
	}
	load := func() ([]byte, error) {
		b, err := snapindex.Load(ctx, j.Store, *ref, j.Plan.K, j.Snapshot.TupleRoot)
		if err != nil {
			return nil, wrap(err, "snapshot leaf index named by plan %s", j.PlanDigest)
		}
		return b, nil
	}
	c := j.leaves
	if c == nil {
		return load()
	}
	c.once.Do(func() { c.b, c.err = load() })
	return c.b, c.err
}

// Open loads the plan with the given digest and the documents it names.
func Open(ctx context.Context, s objstore.Store, planDigest manifest.Digest) (*Job, error) {
	b, err := readDoc(ctx, s, planDigest, "plan")
	if err != nil {
		return nil, err
	}
	var p Plan
	if err := decodeStrict(b, &p); err != nil {
		// A digest of another document (a release root where its plan
		// was meant, say) is the caller's mistake, not a bad plan.
		if schema, serr := manifest.SchemaOf(b); serr == nil && schema != PlanSchema {
			return nil, errcode.New(errcode.Usage, "%s is a %.64q document, not a verification plan (%s): give the plan digest a verify printed", planDigest, schema, PlanSchema)
		}
		return nil, wrap(err, "plan %s", planDigest)
	}
	j := &Job{Store: s, PlanDigest: planDigest, Plan: &p, clock: new(stageClock), leaves: new(leafCache), redos: new(redoLocks)}
	if j.Release, err = loadRelease(ctx, s, p.Root); err != nil {
		return nil, err
	}
	if j.Snapshot, err = loadSnapshot(ctx, s, p.Snapshot); err != nil {
		return nil, err
	}
	if j.Release.RecordSchema != p.RecordSchema {
		return nil, errcode.New(errcode.BadDocument, "plan %s: recordSchema %s differs from the release's %s", planDigest, p.RecordSchema, j.Release.RecordSchema)
	}
	if j.RecordSchema, err = loadRecordSchema(ctx, s, p.RecordSchema); err != nil {
		return nil, err
	}
	if k, err := partitionK(j.Release, j.Snapshot); err != nil {
		return nil, err
	} else if k != p.K {
		return nil, errcode.New(errcode.BadDocument, "plan %s: k=%d, the release partitions with k=%d", planDigest, p.K, k)
	}
	if err := p.validate(len(j.Release.Shards), j.Snapshot.Members); err != nil {
		return nil, wrap(err, "plan %s", planDigest)
	}
	if !p.Tombstones.IsZero() {
		if j.Tombstones, err = loadFenceLog(ctx, s, p.Tombstones, manifest.TombstonesSchema); err != nil {
			return nil, err
		}
		j.tombSet = reducer.NewSet(j.Tombstones)
	}
	if !p.Benchmark.IsZero() {
		if j.Benchmark, err = loadFenceLog(ctx, s, p.Benchmark, manifest.BenchmarkSchema); err != nil {
			return nil, err
		}
		j.benchSet = reducer.NewSet(j.Benchmark)
	}
	// NewPlan refuses such a plan; this one was made elsewhere.
	if err := checkClaims(j.Release, p.Root, j.Tombstones, j.Benchmark); err != nil {
		return nil, fmt.Errorf("plan %s: %w", planDigest, err)
	}
	return j, nil
}

func (j *Job) prefix() string { return jobPrefix(j.PlanDigest) }

// JobsPrefix is where jobs keep their files: jobs/<plan hex>/. Nothing
// else of shardproof's is under it, so it can live in a store of its own
// (objstore.Routed, verify --scratch).
const JobsPrefix = "jobs/"

func jobPrefix(pd manifest.Digest) string { return JobsPrefix + pd.Hex() + "/" }

// JobScratch describes what one job has left in a store under
// jobs/<plan>/: a verification that was interrupted and never resumed,
// or one run with --keep-job.
type JobScratch struct {
	Plan    manifest.Digest
	Objects int
	Bytes   int64
	// Newest is when the most recent of its objects was written (its
	// hold's clock probe aside, which a look at its holder writes).
	Newest time.Time
}

// ListJobs lists the jobs that have scratch in s, in plan order. Keys
// under jobs/ that no job of shardproof's would write are not listed.
// A listing whose sizes for one job are negative or sum past an int64
// is IO: its Bytes would have wrapped to a small or negative figure.
func ListJobs(ctx context.Context, s objstore.Store) ([]JobScratch, error) {
	var jobs []JobScratch
	after := ""
	for {
		// Sizes and times alone: on S3, a request per 1,000 keys
		// instead of one per key for its version.
		page, err := objstore.ListSizes(ctx, s, JobsPrefix, after, 1000)
		if err != nil {
			return nil, err
		}
		for _, o := range page.Objects {
			hex, _, ok := strings.Cut(strings.TrimPrefix(o.Key, JobsPrefix), "/")
			pd, err := manifest.ParseDigest("sha256:" + hex)
			if !ok || err != nil {
				continue
			}
			if len(jobs) == 0 || jobs[len(jobs)-1].Plan != pd {
				jobs = append(jobs, JobScratch{Plan: pd})
			}
			j := &jobs[len(jobs)-1]
			j.Objects++
			if !addFigure(&j.Bytes, o.Size) {
				// No store holds that much: the listing is not to be
				// trusted, nor a prune judged by it.
				return nil, errcode.New(errcode.IO, "list jobs: the store lists %s at %d bytes, after %d bytes of job %s's other objects: "+
					"a negative size, or sizes summing past an int64", o.Key, o.Size, j.Bytes, pd)
			}
			// A clock probe is written by whoever looks at the job's
			// holder (prune-jobs --dry-run too), not by the job.
			if o.Modified.After(j.Newest) && o.Key != holdClockKey(pd) {
				j.Newest = o.Modified
			}
		}
		if page.Next == "" {
			return jobs, nil
		}
		after = page.Next
	}
}

// RemoveJob deletes the scratch of plan pd's job, its shuffle files and
// task commit records (jobs/<plan>/), which nothing needs once the report
// is stored: a nightly verification would otherwise leave them behind,
// about 117 MB per million release records with plain shuffle files. It
// takes the job's hold first (Acquire), so a job another live process
// runs or deletes is JOB_IN_USE and stays whole. Reduce commit records go
// first and map tasks' files after, so an interrupted removal never
// leaves a reduce commit naming deleted inputs, then every other
// directory but hold/, and the hold records last, with the job's prefix
// (and the lease, a single key no run reads): the next process to take
// the job learns from them that a removal did not finish. A removal
// whose end cut a renewal of its record in flight keeps the hold records
// and the lease, its record released at the next generation, since the
// store may write that renewal after the deletion. A removal
// whose job another process took over meanwhile (by hand, see TakeOver)
// leaves the hold records to it and is JOB_IN_USE. The plan and
// the report, content-addressed blobs, stay. s must implement
// objstore.Deleter.
func RemoveJob(ctx context.Context, s objstore.Store, pd manifest.Digest) error {
	d, ok := s.(objstore.Deleter)
	if !ok {
		return errcode.New(errcode.Usage, "store %T cannot delete; remove %s by hand", s, jobPrefix(pd))
	}
	if page, err := s.List(ctx, jobPrefix(pd), "", 1); err != nil {
		return wrap(err, "remove job %s", pd)
	} else if len(page.Objects) == 0 {
		return nil
	}
	h, err := Acquire(ctx, s, pd, HoldRemove)
	if err != nil {
		return err
	}
	defer h.cancel(context.Canceled)
	err = removeTaskFiles(h.Context(), d, pd)
	if err == nil {
		err = removeAllButHold(h.Context(), s, d, pd)
	}
	if err != nil {
		if lost := h.Lost(); lost != nil {
			return lost
		}
		h.Release()
		return err
	}
	if !h.end() {
		return h.Lost()
	}
	// A take-over by hand (TakeOver) is learned of at the next renewal,
	// up to HoldRenewInterval later: the hold records about to go would
	// be the next holder's, and a job without them is taken by whoever
	// looks next, beside that holder.
	if err := h.check(ctx); err != nil {
		return err
	}
	if h.cutWrite {
		// end cut a renewal in flight, which the store may still finish
		// after the job is deleted: it would recreate this generation's
		// record, saying "remove" and not released, in an empty job,
		// which the next holder on another machine took for a live
		// removal for HoldStaleAfter, and a process that had taken the
		// empty job meanwhile (from generation 1) for one that took it
		// over. The hold records stay
		// instead, the last one released at the next generation, above
		// any late renewal (see release): the next holder takes the job
		// at once and deletes what is left, as after any removal that
		// did not finish.
		if err := h.release(); err != nil {
			if !objstore.IsPrecondition(err) {
				return wrap(err, "remove job %s: release its hold", pd)
			}
			// A process took the next generation first (TakeOver), or
			// this create went through and its answer was lost (an
			// SDK's retry of it is refused): the record there says
			// which, by its nonce.
			if err := h.check(ctx); err != nil {
				return err
			}
		}
		slog.Info("job files deleted but its hold records, left released: the removal cut a renewal of its record that the store may still write",
			"plan", pd.String(), "generation", h.rec.Generation)
		return nil
	}
	if err := d.DeletePrefix(ctx, jobPrefix(pd)); err != nil {
		return wrap(err, "remove job %s", pd)
	}
	return nil
}

func (j *Job) mapOutputKey(task, r int) string {
	return fmt.Sprintf("%smap/%d/r%d.arrow", j.prefix(), task, r)
}

func (j *Job) mapCommitKey(task int) string {
	return fmt.Sprintf("%smap/%d/commit.json", j.prefix(), task)
}

func (j *Job) reduceCommitKey(task int) string {
	return fmt.Sprintf("%sreduce/%d/commit.json", j.prefix(), task)
}

func (j *Job) log() *slog.Logger { return slog.With("plan", j.PlanDigest.String()) }

// Kind is a task kind.
type Kind string

// Task kinds.
const (
	KindMap       Kind = "map"
	KindReduce    Kind = "reduce"
	KindAggregate Kind = "aggregate"
)

// Tasks returns how many tasks of kind the plan has (1 for aggregate).
func (j *Job) Tasks(kind Kind) int {
	switch kind {
	case KindMap:
		return len(j.Plan.MapTasks)
	case KindReduce:
		return len(j.Plan.Reducers)
	case KindAggregate:
		return 1
	}
	return 0
}

// RunTask runs one task of the job: what a `shardproof task` process, a
// Slurm array task or a Kubernetes indexed pod does. It is idempotent: a
// task whose commit record exists returns at once. The aggregate task
// holds the job while it aggregates (AggregateTask).
func (j *Job) RunTask(ctx context.Context, kind Kind, index int, exec manifest.Execution) error {
	if index < 0 || index >= j.Tasks(kind) {
		return errcode.New(errcode.Usage, "%s task index %d out of range [0, %d)", kind, index, j.Tasks(kind))
	}
	var err error
	switch kind {
	case KindMap:
		_, err = j.Map(ctx, index, nil)
	case KindReduce:
		_, err = j.Reduce(ctx, index)
	case KindAggregate:
		_, err = j.AggregateTask(ctx, exec)
	}
	return err
}
