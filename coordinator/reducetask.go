package coordinator

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/internal/fdlimit"
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/mapper"
	"github.com/shardproof/shardproof/reducer"
	"github.com/shardproof/shardproof/shuffle"
)

// ReduceCommitSchema identifies reduce commit records.
const ReduceCommitSchema = "training.verify.reduce.commit.v1"

// ReduceCommit is the commit record of a reduce task: the exact inputs it
// read and its result.
type ReduceCommit struct {
	Schema string          `json:"schema"`
	Plan   manifest.Digest `json:"plan"`
	Task   int             `json:"task"`
	Inputs []Output        `json:"inputs"`
	// Members holds the mapper's figures and failures for each snapshot
	// member the reducer read itself, in the plan's order.
	Members []mapper.Result `json:"members,omitempty"`
	// Merged lists the files the task's merge level wrote (Plan.
	// ReduceFanIn), removed once it committed: a record of what the
	// level cost.
	Merged []Output        `json:"merged,omitempty"`
	Result *reducer.Result `json:"result"`
}

// Reduce runs reduce task r. Every map task must have committed (else
// TASK_NOT_READY); the task reads exactly the committed shuffle files, by
// version, verifying their digests, maps the snapshot members the plan
// gives it (see memberSource), and commits its result with the members'
// results. If its commit record already exists, Reduce returns it; if it
// exists but is damaged (SHUFFLE_CORRUPT), Reduce runs the task again
// (see redoReduce).
func (j *Job) Reduce(ctx context.Context, r int) (*ReduceCommit, error) {
	return j.reduce(ctx, r, nil)
}

// reduceOnce is one run of reduce task r (see reduce); inputs is set to
// the map tasks' files it reads once it has them.
func (j *Job) reduceOnce(ctx context.Context, r int, progress func(mapper.Result), inputs *[]Output) (*ReduceCommit, error) {
	if r < 0 || r >= len(j.Plan.Reducers) {
		return nil, errcode.New(errcode.Usage, "reduce task %d out of range [0, %d)", r, len(j.Plan.Reducers))
	}
	var done ReduceCommit
	found, err := readRecord(ctx, j.Store, j.reduceCommitKey(r), &done)
	if err == nil && found {
		err = j.checkReduceCommit(r, &done)
	}
	switch {
	case errcode.Of(err) == errcode.ShuffleCorrupt:
		return j.redoReduce(ctx, r, err, progress, inputs, nil)
	case err != nil:
		return nil, err
	case !found:
		return j.runReduce(ctx, r, progress, inputs, false)
	}
	if progress != nil {
		for _, res := range done.Members {
			progress(res)
		}
	}
	return &done, nil
}

// runReduce runs reduce task r (see reduce) and commits its record
// with a conditional create; again leaves the record to the caller
// instead (redoReduce). inputs is set to the map tasks' files it reads
// once it has them.
func (j *Job) runReduce(ctx context.Context, r int, progress func(mapper.Result), inputs *[]Output, again bool) (*ReduceCommit, error) {
	rng := j.Plan.Reducers[r]
	if _, err := j.reducersAtOnce(1); err != nil {
		return nil, wrap(err, "reduce task %d", r)
	}
	start := time.Now()
	commit := &ReduceCommit{Schema: ReduceCommitSchema, Plan: j.PlanDigest, Task: r}
	var (
		verified []io.Reader
		sources  []reducer.Source
		closers  []func() error
	)
	defer func() {
		for _, c := range closers {
			c()
		}
	}()
	var err error
	if commit.Inputs, err = j.reduceInputs(ctx, r); err != nil {
		return nil, err
	}
	*inputs = commit.Inputs
	// Above the plan's fan-in, the map tasks' files are merged a group
	// at a time into files of this task's own first (a merge level).
	files := commit.Inputs
	if fan := j.Plan.ReduceFanIn; fan > 0 && len(files) > fan {
		final, merged, cleanup, err := j.mergeLevel(ctx, r, files, fan)
		defer cleanup()
		if err != nil {
			return nil, err
		}
		files, commit.Merged = final, merged
	}
	bodies, err := j.getAll(ctx, r, files)
	if err != nil {
		return nil, err
	}
	for _, rc := range bodies {
		closers = append(closers, rc.Close)
	}
	for k, out := range files {
		vr := out.open(bodies[k])
		rd, err := shuffle.NewReaderCompression(vr, j.Plan.ShuffleCompression, out.Size, out.Key, j.Plan.K, rng.Lo, rng.Hi)
		if err != nil {
			return nil, err
		}
		closers = append(closers, func() error { rd.Close(); return nil })
		verified = append(verified, vr)
		sources = append(sources, rd)
	}
	ro := reducer.Options{K: j.Plan.K, Lo: rng.Lo, Hi: rng.Hi, Tombstones: j.tombSet, Benchmark: j.benchSet}
	var members *memberSource
	if len(rng.Members) > 0 {
		var tm *mapper.Timings
		if j.clock != nil {
			tm = &j.clock.Timings
		}
		// Member tuples name the record schema their snapshot describes,
		// as in a map task.
		o := mapper.Options{Store: j.Store, Schema: j.RecordSchema, SchemaDigest: j.Snapshot.RecordSchema, K: j.Plan.K, Timings: tm}
		leaves, err := j.snapshotLeaves(ctx)
		if err != nil {
			return nil, wrap(err, "reduce task %d", r)
		}
		if leaves != nil {
			members = newLazyMemberSource(ctx, o, j.Snapshot.Members, rng.Members, progress, leaves[32*rng.Lo:32*rng.Hi], rng.Lo)
			ro.Snapshot, ro.SnapshotLeaves = members, leaves[32*rng.Lo:32*rng.Hi]
		} else {
			members = newMemberSource(ctx, o, j.Snapshot.Members, rng.Members, progress)
			sources = append(sources, members)
		}
	}
	res, err := reducer.Reduce(ctx, ro, sources)
	if members != nil {
		if err == nil {
			err = members.finish()
		}
		// Mapping members is timed as map stages; the rest is reducing.
		commit.Members = members.results
		cutResults(commit.Members)
		start = start.Add(time.Duration(members.mapNanos))
		members.release()
	}
	j.clock.add(&j.clock.reduce, start)
	if err != nil {
		return nil, wrap(err, "reduce task %d", r)
	}
	if len(commit.Members) != len(rng.Members) {
		return nil, errcode.New(errcode.Internal, "reduce task %d read %d of its %d snapshot members", r, len(commit.Members), len(rng.Members))
	}
	// Nothing read is trusted until each file's bytes hashed to its
	// committed digest: drain what the IPC reader left after end-of-stream.
	for k, vr := range verified {
		if _, err := io.Copy(io.Discard, vr); err != nil {
			return nil, j.drainError(err, r, files[k].Key)
		}
	}
	commit.Result = res
	if again {
		return commit, nil
	}
	b, err := manifest.Encode(commit)
	if err != nil {
		return nil, err
	}
	if _, err := putExact(ctx, j.Store, j.reduceCommitKey(r), b); err != nil {
		if errcode.Of(err) != errcode.Nondeterminism {
			return nil, err
		}
		return j.otherAttempt(ctx, r, commit, err)
	}
	j.log().Debug("reduce task committed", "task", r, "lo", rng.Lo, "hi", rng.Hi,
		"releaseTuples", res.Counts.Records, "snapshotTuples", res.Counts.SnapshotRecords)
	return commit, nil
}

// otherAttempt returns the commit record another attempt of reduce task
// r stored before this one's, c, when the two differ in merged and in
// their inputs' versions alone: each attempt's merge level writes files
// of its own (an engine may run a task twice at once), and a map task
// run again between two attempts (redoMap) has the later one read the
// same bytes under new versions, so two attempts commit one result under
// different files. Otherwise it returns nondet, the conditional create's
// failure, or the failure to read the record back. A record there that
// is damaged (it does not decode or match the plan) makes c a run again
// over it, as a retry's would be (redoReduce).
func (j *Job) otherAttempt(ctx context.Context, r int, c *ReduceCommit, nondet error) (*ReduceCommit, error) {
	other, damage, err := j.rereadReduce(ctx, r)
	switch {
	case err != nil:
		return nil, err
	case damage != nil:
		return j.redoReduce(ctx, r, damage, nil, nil, c)
	case other == nil || !sameReduceCommit(c, other):
		return nil, nondet
	}
	return other, nil
}

// sameReduceCommit reports whether two runs' records of a reduce task
// differ in merged and in their inputs' versions alone: each run's
// merge level writes files of its own, and a map task run again
// (redoMap) has a later run read the same bytes under new versions.
func sameReduceCommit(c, other *ReduceCommit) bool {
	mine, theirs := *c, *other
	mine.Merged, theirs.Merged = nil, nil
	mine.Inputs, theirs.Inputs = unversioned(mine.Inputs), unversioned(theirs.Inputs)
	a, aerr := manifest.Encode(&mine)
	b, berr := manifest.Encode(&theirs)
	return aerr == nil && berr == nil && bytes.Equal(a, b)
}

// unversioned returns a copy of files without their versions.
func unversioned(files []Output) []Output {
	out := make([]Output, len(files))
	for k, o := range files {
		o.Version = ""
		out[k] = o
	}
	return out
}

// drainError is the failure of reading a shuffle file's last bytes after
// its rows (the checksum is checked at the end): the source's own failure
// to deliver them (a lost S3 connection, a silent server, Ctrl-C) keeps
// its code, since nothing showed the file damaged; bytes that fail their
// checksum, or a bare read error (a torn local file), are SHUFFLE_CORRUPT.
func (j *Job) drainError(err error, r int, key string) error {
	switch errcode.Of(err) {
	case errcode.StoreUnavailable, errcode.Canceled, errcode.IO, errcode.StoreDenied, errcode.NoSuchBucket:
		return wrap(err, "reduce task %d: %s", r, key)
	}
	return errcode.Wrap(errcode.ShuffleCorrupt, err, "reduce task %d: %s%s", r, key, j.lostShuffleHint())
}

// lostShuffleHint explains a missing or damaged shuffle file of a local
// verification, whose shuffle files are not synced to disk.
func (j *Job) lostShuffleHint() string {
	if !j.ephemeralShuffle {
		return ""
	}
	return " (a local verification does not sync its shuffle files to disk: a machine crash may lose them)"
}

// storeReadsAtOnce is how many commit records, or shuffle files to
// open, a reduce task or the aggregation asks the store for at once.
// Each is a round trip (milliseconds on S3), and a task reads one per
// map task: one after the other, at the 7,630 map tasks of a billion
// records, they took minutes of every reduce task.
const storeReadsAtOnce = 16

// recordBufs holds buffers for map commit records a reduce task reads,
// reused: read fresh, one per record, they were as many bytes allocated
// as the records' total and twice that to grow them (1 GB a reduce task
// at 7,630 map tasks and 256 reducers). A buffer grown beyond
// maxKeptRecordBuf is left to the collector.
var recordBufs = sync.Pool{New: func() any { return new([]byte) }}

const maxKeptRecordBuf = 4 << 20

// readPooledRecord reads the record at key into a buffer of recordBufs
// and hands its bytes to use, which must not keep them: the buffer goes
// back to the pool (if it grew past maxKeptRecordBuf, a new one does).
// found is false, and use is not called, when there is no record.
func (j *Job) readPooledRecord(ctx context.Context, key string, use func(b []byte) error) (found bool, err error) {
	buf := recordBufs.Get().(*[]byte)
	b, found, err := readRecordBytes(ctx, j.Store, key, *buf)
	defer func() {
		if cap(b) <= maxKeptRecordBuf {
			*buf = b
		}
		recordBufs.Put(buf)
	}()
	if !found || err != nil {
		return found, err
	}
	return true, use(b)
}

// eachMapCommit reads every map task's commit record as the
// aggregation needs it (readMapResults), storeReadsAtOnce at a time, and
// calls use with it, one call at a time in no set order; a record
// missing is TASK_NOT_READY, named for what (the reader). Only what use
// keeps of a record stays in memory. A failure is the one of the lowest
// map task, as when the records were read one after the other: the
// others are all read. A record damaged since its task committed
// (SHUFFLE_CORRUPT) has the task run again (redoMap), as Map and a
// reduce task reading it would, once every other record was read
// without another failure: one task at a time, in task order, so a
// job with many damaged records maps no more at once than one map
// task; use is then called with the record of that run. ready, if
// non-nil, is called before the first such run: its error is returned,
// and no task runs.
func (j *Job) eachMapCommit(ctx context.Context, what string, ready func(context.Context) error, use func(i int, mc *MapCommit)) error {
	var mu sync.Mutex
	damaged := make([]error, len(j.Plan.MapTasks))
	err := j.eachMapTask(ctx, what, func(ctx context.Context, i int) error {
		var mc MapCommit
		found, err := j.readMapResults(ctx, i, &mc)
		if err == nil && !found {
			err = errcode.New(errcode.TaskNotReady, "%s: map task %d has not committed", what, i)
		}
		if errcode.Of(err) == errcode.ShuffleCorrupt {
			damaged[i] = err
			return nil
		}
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		use(i, &mc)
		return nil
	})
	if err != nil {
		return err
	}
	for i, cause := range damaged {
		if cause == nil {
			continue
		}
		if ready != nil {
			if err := ready(ctx); err != nil {
				return err
			}
			ready = nil
		}
		mc, err := j.redoMap(ctx, i, -1, cause, nil)
		if err != nil {
			return wrap(err, "%s", what)
		}
		use(i, mc)
	}
	return nil
}

// eachMapTask calls read for every map task, storeReadsAtOnce at a
// time; its failure is the one of the lowest map task, named for what
// when ctx ended.
func (j *Job) eachMapTask(ctx context.Context, what string, read func(ctx context.Context, i int) error) error {
	errs := make([]error, len(j.Plan.MapTasks))
	err := runAll(ctx, len(j.Plan.MapTasks), storeReadsAtOnce, func(ctx context.Context, i int) error {
		errs[i] = read(ctx, i)
		return nil
	})
	return firstError(ctx, errs, err, what)
}

// reduceInputs reads every map task's commit record and returns the
// shuffle file each committed for reduce task r, in map task order.
// A record missing is TASK_NOT_READY.
func (j *Job) reduceInputs(ctx context.Context, r int) ([]Output, error) {
	what := fmt.Sprintf("reduce task %d", r)
	inputs := make([]Output, len(j.Plan.MapTasks))
	err := j.eachMapTask(ctx, what, func(ctx context.Context, i int) error {
		found, err := j.readMapOutput(ctx, i, r, &inputs[i])
		if err == nil && !found {
			err = errcode.New(errcode.TaskNotReady, "%s: map task %d has not committed", what, i)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return inputs, nil
}

// readMapOutput reads map task i's commit record into out as reduce task
// r needs it: Outputs[r] alone. The record is held to every rule a whole
// one is (manifest.DecodePicked), a repeated or unknown key, bytes after
// it, anywhere in it, and to the plan's numbers of outputs and results,
// but only its head and output r are decoded and checked against the
// plan: decoding every record whole, a reduce task decoded every other
// reducer's outputs too, reducers² outputs per map task in all (at 7,630
// map tasks and 256 reducers, 500 MB of JSON and 7 CPU seconds a reduce
// task), and the results, which only the aggregation uses. The
// aggregation decodes the results alone (readMapResults).
func (j *Job) readMapOutput(ctx context.Context, i, r int, out *Output) (found bool, err error) {
	key := j.mapCommitKey(i)
	found, err = j.readPooledRecord(ctx, key, func(b []byte) error {
		var mc MapCommit
		picks := []manifest.Pick{{Field: "outputs", Index: r}, {Field: "results", Index: -1}}
		if err := decodeRecord(b, key, &mc, picks); err != nil {
			return err
		}
		if err := j.checkMapCommitHead(i, &mc, picks[0].Len, picks[1].Len); err != nil {
			return err
		}
		if err := j.checkOutput(i, r, &mc.Outputs[0]); err != nil {
			return err
		}
		*out = mc.Outputs[0]
		return nil
	})
	return found && err == nil, err
}

// readMapResults reads map task i's commit record into mc as the
// aggregation and the progress of other executors need it: its head and
// its results, Outputs left empty. The record is held to every rule a
// whole one is (manifest.DecodePicked), anywhere in it, and to the
// plan's numbers of outputs and results, and its results are checked
// against the plan; its outputs, which the reduce task of each checks
// as it reads it (readMapOutput), are not decoded. Decoding them, one
// per reducer in every record, was most of the aggregation's work: at
// 7,630 map tasks and 64 reducers, 1.4 GB allocated and 3 CPU seconds
// (BenchmarkAggregateMapCommits).
func (j *Job) readMapResults(ctx context.Context, i int, mc *MapCommit) (found bool, err error) {
	key := j.mapCommitKey(i)
	found, err = j.readPooledRecord(ctx, key, func(b []byte) error {
		picks := []manifest.Pick{{Field: "outputs", Index: -1}}
		if err := decodeRecord(b, key, mc, picks); err != nil {
			return err
		}
		if err := j.checkMapCommitHead(i, mc, picks[0].Len, len(mc.Results)); err != nil {
			return err
		}
		return j.checkMapResults(i, mc)
	})
	return found && err == nil, err
}

// getAll opens every file of reduce task r's inputs, storeReadsAtOnce
// at a time; on failure, that of the first file in order, it closes
// what it opened.
func (j *Job) getAll(ctx context.Context, r int, files []Output) ([]io.ReadCloser, error) {
	bodies := make([]io.ReadCloser, len(files))
	errs := make([]error, len(files))
	// Each Get takes ctx, not runAll's own context: a body (an S3
	// response) is read after runAll returned and cancelled that.
	err := runAll(ctx, len(files), storeReadsAtOnce, func(_ context.Context, k int) error {
		bodies[k], errs[k] = j.Store.Get(ctx, files[k].Key, files[k].Version)
		if errs[k] != nil {
			errs[k] = wrap(errs[k], "reduce task %d: %s version %s%s", r, files[k].Key, files[k].Version, j.lostShuffleHint())
		}
		return nil
	})
	if err = firstError(ctx, errs, err, fmt.Sprintf("reduce task %d", r)); err != nil {
		for _, rc := range bodies {
			if rc != nil {
				rc.Close()
			}
		}
		return nil, err
	}
	return bodies, nil
}

// firstError is the first of errs, or else runAll's own error (ctx
// ended), as CANCELED.
func firstError(ctx context.Context, errs []error, err error, what string) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	if err != nil {
		return errcode.Wrap(errcode.Canceled, cmp.Or(ctx.Err(), err), "%s", what)
	}
	return nil
}

// reduceFileSlack is what a reduce task holds open besides its shuffle
// files: the snapshot member it is reading, and the commit record and
// temp file it writes.
const reduceFileSlack = 8

// processFileSlack is what a process keeps open besides its reduce tasks:
// standard streams, the store's root, the runtime's poller, the map
// tasks' files and an embedding process's listeners.
const processFileSlack = 64

// mergedFiles is how many files a reduce task's merge levels write for m
// map tasks at fan-in fan (0: no bound): each level merges groups of fan
// into one file until at most fan are left.
func mergedFiles(m, fan int) int {
	n := 0
	for fan > 0 && m > fan {
		m = (m + fan - 1) / fan
		n += m
	}
	return n
}

// fanIn is the most shuffle files a reduce task of the plan merges at once.
func (j *Job) fanIn() int {
	if fan := j.Plan.ReduceFanIn; fan > 0 && fan < len(j.Plan.MapTasks) {
		return fan
	}
	return len(j.Plan.MapTasks)
}

// reduceFiles is how many files a reduce task of the plan holds open at
// once: a reducer merges one shuffle file per map task (each an open file,
// or a connection on S3), all of them from its first bucket to its last,
// or, above the plan's fan-in, a group of them and the file it merges
// them into, then at most fan-in merged files (levels of merging, however
// many map tasks). Before any of them, it reads the map tasks' commit
// records storeReadsAtOnce at a time, more than that at a fan-in below 7.
func (j *Job) reduceFiles() int {
	m, fan := len(j.Plan.MapTasks), j.Plan.ReduceFanIn
	if fan <= 0 || m <= fan {
		return m + reduceFileSlack
	}
	return max(fan+1+reduceFileSlack, min(m, storeReadsAtOnce))
}

// reducersAtOnce returns how many of the plan's reduce tasks this process
// can run at once within its open-file limit, at most want; FILE_LIMIT if
// not even one fits. Without the check a reducer would find out at its
// first open beyond the limit, after the whole map phase, with an I/O
// error that a resume meets again.
func (j *Job) reducersAtOnce(want int) (int, error) {
	limit, ok := fdlimit.Open()
	if !ok {
		return want, nil
	}
	need := j.reduceFiles()
	avail := int(min(limit, 1<<30)) - processFileSlack
	if avail < need {
		return 0, errcode.New(errcode.FileLimit, "a reduce task of this plan holds %d files open at once (the shuffle files of %d map tasks, merged at most %d at a time), and this process may open %d (ulimit -n): raise the limit, or verify with a smaller --reduce-fan-in",
			need, len(j.Plan.MapTasks), j.fanIn(), limit)
	}
	return max(1, min(want, avail/need)), nil
}

// checkReduceCommit checks a reduce commit record read back from the
// store against the plan.
func (j *Job) checkReduceCommit(r int, c *ReduceCommit) error {
	if err := j.checkReduceHead(r, c); err != nil {
		return err
	}
	rng := j.Plan.Reducers[r]
	if err := c.Result.Validate(rng.Lo, rng.Hi); err != nil {
		return err
	}
	if err := j.checkReduceInputs(r, c.Inputs); err != nil {
		return err
	}
	if err := j.checkMerged(r, c.Merged); err != nil {
		return err
	}
	return j.checkMembers(r, c.Members)
}

// badReduceCommit is SHUFFLE_CORRUPT naming reduce task r's commit record.
func (j *Job) badReduceCommit(r int, format string, args ...any) error {
	return errcode.New(errcode.ShuffleCorrupt, "%s: "+format, append([]any{j.reduceCommitKey(r)}, args...)...)
}

// checkReduceHead checks what reduce task r's commit record says of
// itself against the plan, and that it has a result.
func (j *Job) checkReduceHead(r int, c *ReduceCommit) error {
	if c.Schema != ReduceCommitSchema || c.Plan != j.PlanDigest || c.Task != r || c.Result == nil {
		return j.badReduceCommit(r, "schema %q, plan %s, task %d do not match, or no result", c.Schema, c.Plan, c.Task)
	}
	return nil
}

// checkReduceInputs checks the shuffle files a reduce task's record
// says it read, whose sizes the report's shuffleBytes sums: one of each
// map task's, in order, the file that map task wrote for this task,
// their sizes summing to no more than an int64 holds (sizesFit).
func (j *Job) checkReduceInputs(r int, inputs []Output) error {
	if len(inputs) != len(j.Plan.MapTasks) {
		return j.badReduceCommit(r, "%d inputs for %d map tasks", len(inputs), len(j.Plan.MapTasks))
	}
	for i := range inputs {
		if err := j.checkReduceInput(r, i, &inputs[i]); err != nil {
			return err
		}
	}
	if !sizesFit(inputs) {
		return j.badReduceCommit(r, "its inputs' sizes sum past %d bytes", int64(math.MaxInt64))
	}
	return nil
}

// checkReduceInput checks input i of reduce task r's record as map task
// i's record's output for it is checked (checkOutput): that file, of no
// negative size or rows, with the plan's checksum.
func (j *Job) checkReduceInput(r, i int, o *Output) error {
	if j.checkOutput(i, r, o) != nil {
		return j.badReduceCommit(r, "input %d is %.80q (size %d, rows %d, xxh64 %.20q, digest %s), not map task %d's shuffle file for this task with the plan's checksum",
			i, o.Key, o.Size, o.Rows, o.XXH64, o.Digest, i)
	}
	return nil
}

// checkMerged checks the merge level's files a reduce task's record
// lists: as many as its levels write, each under this task's merge
// prefix, with the plan's checksum.
func (j *Job) checkMerged(r int, merged []Output) error {
	if want := mergedFiles(len(j.Plan.MapTasks), j.Plan.ReduceFanIn); len(merged) != want {
		return j.badReduceCommit(r, "%d merged files, the plan's merge level writes %d", len(merged), want)
	}
	for k, o := range merged {
		if !strings.HasPrefix(o.Key, fmt.Sprintf("%smerge/%d/", j.prefix(), r)) || o.Size < 0 || o.Rows < 0 {
			return j.badReduceCommit(r, "merged file %d is %.80q (size %d, rows %d)", k, o.Key, o.Size, o.Rows)
		}
		if _, ok := parseXXH64(o.XXH64); ok != (j.Plan.ShuffleChecksum == shuffle.XXH64) || o.Digest.IsZero() != ok {
			return j.badReduceCommit(r, "merged file %d: xxh64 %.20q and digest %s, and the plan checks shuffle files with %s", k, o.XXH64, o.Digest, j.Plan.ShuffleChecksum)
		}
	}
	if !sizesFit(merged) {
		return j.badReduceCommit(r, "its merged files' sizes sum past %d bytes", int64(math.MaxInt64))
	}
	return nil
}

// checkMembers checks the results of the snapshot members a reduce
// task's record lists against the plan, and that the figures the report
// sums of them fit (resultsFit).
func (j *Job) checkMembers(r int, members []mapper.Result) error {
	bad := func(format string, args ...any) error { return j.badReduceCommit(r, format, args...) }
	rng := j.Plan.Reducers[r]
	if len(members) != len(rng.Members) {
		return bad("%d member results for %d members", len(members), len(rng.Members))
	}
	for k, m := range members {
		if m.Side != mapper.SideSnapshot || m.Index != rng.Members[k] {
			return bad("member result %d is (side %d, index %d), plan says (side 1, index %d)", k, m.Side, m.Index, rng.Members[k])
		}
		if err := checkResult(&m); err != nil {
			return bad("member result %d: %v", k, err)
		}
		if (m.Skipped || m.BucketsRead != 0) && (j.Plan.SnapshotLeaves == nil || m.Skipped && m.BucketsRead != 0 || m.BucketsRead < 0 || m.Decoded || m.Records != 0 || m.BucketsRead != 0 && len(failureCodes(&m)) > 0) {
			return bad("member result %d is skipped or read by bucket with figures, or without a snapshot leaf index in the plan", k)
		}
		// A skipped member was only looked up (mapper.CheckStored).
		for _, code := range failureCodes(&m) {
			if m.Skipped && code != string(errcode.VersionMissing) && code != string(errcode.SizeMismatch) {
				return bad("member result %d is skipped with a %s failure", k, code)
			}
		}
	}
	if !resultsFit(members) {
		return bad("its member results' stored or logical bytes, or buckets read, sum past an int64")
	}
	return nil
}
