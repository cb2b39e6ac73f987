package coordinator

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/mapper"
	"github.com/shardproof/shardproof/objstore"
)

// maxRuns bounds the runs of one task: its first and the runs again
// that replace a damaged commit record or shuffle file (redoMap,
// redoReduce). Each run's commit record is a version of the task's
// commit key, so a store that lists versions (the file store, S3) counts
// them across processes and resumes; a process also counts the runs it
// made itself. Damage that comes back after that many runs (a disk that
// rots what it is given) is SHUFFLE_CORRUPT naming the file, for good.
//
// The bound is exact in one process (its reducers share redoLocks) and
// over processes one after the other. Processes that run a task again
// side by side (an engine's reducers, each a process, finding one map
// task's files gone) are not held to it: neither count sees a run
// another process has under way, nor one that ended using another
// process's record (otherMapRun, otherRun) instead of writing its own,
// so each may run it. Each process makes at most maxRuns-1 runs again
// of a task, and none starts one once the record has maxRuns versions:
// P such processes run it at most 1 + P*(maxRuns-1) times, and write
// at most that many versions (TestConcurrentRunsAgainBound). Holding
// them to maxRuns would take a claim of each run (a conditional create
// the store has) and a process that loses it waiting for the winner's
// record, with no way to tell a winner still running from one that
// died: it would fail, or wait, for good.
const maxRuns = 3

// redoLocks serializes the runs again of one task in a process, by its
// commit record key: reducers that find the same map task's files
// damaged (a machine crash lost a local verification's shuffle files,
// which are not synced) wait for the first to run it, then read its new
// record instead of running the task again themselves.
type redoLocks struct {
	mu    sync.Mutex
	locks map[string]*sync.Mutex
	runs  map[string]int
}

// lock locks the runs again of the task whose commit record is key; l
// may be nil (a Job not from Open).
func (l *redoLocks) lock(key string) (unlock func()) {
	if l == nil {
		return func() {}
	}
	l.mu.Lock()
	if l.locks == nil {
		l.locks = map[string]*sync.Mutex{}
	}
	m := l.locks[key]
	if m == nil {
		m = new(sync.Mutex)
		l.locks[key] = m
	}
	l.mu.Unlock()
	m.Lock()
	return m.Unlock
}

// made returns how many runs again of the task whose commit record is
// key this process made.
func (l *redoLocks) made(key string) int {
	if l == nil {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.runs[key]
}

// ran counts a run again of the task whose commit record is key.
func (l *redoLocks) ran(key string) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.runs == nil {
		l.runs = map[string]int{}
	}
	l.runs[key]++
}

// runsSoFar returns how many runs task (named so in the error) whose
// commit record is key has had: its record's versions, counted before
// the record was read (recordRuns), or the first run and this process's
// own runs again, if more. When that is maxRuns already, it returns
// SHUFFLE_CORRUPT naming damaged, with cause, what was found there.
func (j *Job) runsSoFar(versions int, key, task, damaged string, cause error) (int, error) {
	runs := max(versions, j.redos.made(key)+1)
	if runs >= maxRuns {
		return runs, errcode.Wrap(errcode.ShuffleCorrupt, cause, "%s has run %d times, the most one task of a job runs, and %s is damaged again",
			task, runs, damaged)
	}
	return runs, nil
}

// recordAgain stores c, a task's run again, as a new version of its
// commit record key: a reader of the record reads the latest version.
func (j *Job) recordAgain(ctx context.Context, key string, c any) error {
	b, err := manifest.Encode(c)
	if err != nil {
		return err
	}
	if _, err := j.Store.Put(ctx, key, bytes.NewReader(b), objstore.PutOptions{Size: int64(len(b)), SHA256: manifest.Sum(b)}); err != nil {
		return wrap(err, "%s", key)
	}
	return nil
}

// redoMap runs map task i again: cause showed its commit record damaged
// (r < 0: the record does not decode or does not match the plan), or
// the shuffle file it committed for reduce task r gone or failing its
// checksum. The task's files are written as new versions and its record
// as a new version of its key, after them, naming them: a reader of the
// record reads the latest version, so it finds either the old record,
// whose intact files are still there under the versions it names, or the
// new one, never a file half-written. First the latest record is read
// again: when another process already ran the task again (a valid record
// whose output r is intact), that record is returned and nothing runs.
//
// The new run must commit what the old one did, but for versions: the
// same checksums, sizes and rows of every file and the same results as
// the old record (when it still decodes), and the same file for every
// reduce task that committed from the old one (the inputs its record
// names); otherwise NONDETERMINISM, and nothing is recorded. Before it
// is recorded the record is read once more: a run again another process
// recorded meanwhile is returned instead, when it commits what this run
// does, else NONDETERMINISM (otherMapRun). After maxRuns runs of the
// task, SHUFFLE_CORRUPT naming the damaged key.
// progress, if non-nil, is called for each input the run maps (Map's,
// whose record was unreadable and so reported nothing).
func (j *Job) redoMap(ctx context.Context, i, r int, cause error, progress func(mapper.Result)) (*MapCommit, error) {
	key := j.mapCommitKey(i)
	defer j.redos.lock(key)()
	damaged := key
	// The runs are counted before the record is read: a run another
	// process commits meanwhile is then found in the record, whose
	// file is intact, instead of counting against this one.
	versions, err := j.recordRuns(ctx, key)
	if err != nil {
		return nil, err
	}
	var prev MapCommit
	found, err := readRecord(ctx, j.Store, key, &prev)
	if err == nil && found {
		err = j.checkMapCommit(i, &prev)
	}
	old := &prev
	switch {
	case errcode.Of(err) == errcode.ShuffleCorrupt:
		old = nil
		if r >= 0 {
			// The record was read whole here, and it is the fault now.
			cause = err
		}
	case err != nil:
		return nil, err
	case !found:
		// Deleted since it was read: nothing to run again over.
		return nil, cause
	case r < 0:
		// Another process ran the task again meanwhile.
		if progress != nil {
			for _, res := range prev.Results {
				progress(res)
			}
		}
		return old, nil
	default:
		damaged = prev.Outputs[r].Key
		if err := j.readOutput(ctx, prev.Outputs[r]); err == nil {
			return old, nil // another process ran the task again meanwhile
		} else if !isDamage(ctx, err) {
			return nil, err
		} else {
			cause = err
		}
	}
	runs, err := j.runsSoFar(versions, key, fmt.Sprintf("map task %d", i), damaged, cause)
	if err != nil {
		return nil, err
	}
	j.log().Warn("map task's committed output is damaged or gone; running the task again", "task", i, "key", damaged,
		"code", string(errcode.Of(cause)), "run", runs+1)
	j.redos.ran(key)
	c, err := j.runMap(ctx, i, progress, true)
	if err != nil {
		return nil, err
	}
	if err := j.sameMapRun(ctx, i, old, c); err != nil {
		return nil, err
	}
	// Another process that found the record or file damaged when this
	// one did (a reduce task, a retry of the task, an aggregation) may
	// have recorded its run meanwhile: that record is used, not written
	// over with a third version unchecked, as in redoReduce.
	if other, err := j.otherMapRun(ctx, i, r, old); err != nil {
		return nil, err
	} else if other != nil {
		if err := j.sameMapRun(ctx, i, other, c); err != nil {
			return nil, err
		}
		return other, nil
	}
	if err := j.recordAgain(ctx, key, c); err != nil {
		return nil, err
	}
	j.logMapCommit(i, c)
	return c, nil
}

// otherMapRun reads map task i's record once more, before a run again
// of it is recorded: a valid record other than old, the one the run
// started over (nil: it was unreadable), whose output r (r >= 0) is
// intact, is another process's run again, returned; else nil.
func (j *Job) otherMapRun(ctx context.Context, i, r int, old *MapCommit) (*MapCommit, error) {
	var other MapCommit
	found, err := readRecord(ctx, j.Store, j.mapCommitKey(i), &other)
	if err == nil && found {
		err = j.checkMapCommit(i, &other)
	}
	switch {
	case errcode.Of(err) == errcode.ShuffleCorrupt || err == nil && !found:
		return nil, nil
	case err != nil:
		return nil, err
	}
	if old != nil {
		a, aerr := manifest.Encode(old)
		b, berr := manifest.Encode(&other)
		if aerr != nil || berr != nil || bytes.Equal(a, b) {
			return nil, nil
		}
	}
	if r >= 0 {
		if err := j.readOutput(ctx, other.Outputs[r]); err != nil {
			if !isDamage(ctx, err) {
				return nil, err
			}
			return nil, nil
		}
	}
	return &other, nil
}

// redoReduce runs reduce task r again: cause showed its commit record
// damaged after the task committed (it does not decode, or does not
// match the plan), which every reader of it, a retry of the task and
// the aggregation alike, would otherwise meet for good. The record is
// read again first: when another process already ran the task again (a
// valid record), that record is returned and nothing runs. Otherwise
// the task runs as at first, its inputs the map tasks' files their
// records name now (a failure naming one damaged has reduce run that
// map task again, redoMap, and start over), and its record is stored
// as a new version of its key. The new run must give what the old
// record says, where that still decodes as this task's record (see
// sameReduceRun); otherwise NONDETERMINISM, and nothing is recorded.
// Before it is stored the record is read once more: a run again another
// process recorded meanwhile is returned instead, when it gives what
// this run does (sameReduceCommit), else NONDETERMINISM. After maxRuns
// runs of the task, SHUFFLE_CORRUPT naming the record. progress and
// inputs are runReduce's. done, if non-nil, is a run of the task that
// already ended (an attempt whose conditional create met the damaged
// record, otherAttempt): it is what is checked and recorded, and the
// task does not run.
func (j *Job) redoReduce(ctx context.Context, r int, cause error, progress func(mapper.Result), inputs *[]Output, done *ReduceCommit) (*ReduceCommit, error) {
	key := j.reduceCommitKey(r)
	defer j.redos.lock(key)()
	// Counted before the record is read, as in redoMap.
	versions, err := j.recordRuns(ctx, key)
	if err != nil {
		return nil, err
	}
	old, damage, err := j.rereadReduce(ctx, r)
	switch {
	case err != nil:
		return nil, err
	case old == nil && damage == nil:
		// Deleted since it was read: nothing to run again over.
		return nil, cause
	case damage == nil:
		// Another process ran the task again meanwhile.
		return j.otherRun(r, old, done, progress)
	}
	runs, err := j.runsSoFar(versions, key, fmt.Sprintf("reduce task %d", r), key, damage)
	if err != nil {
		return nil, err
	}
	j.log().Warn("reduce task's commit record is damaged; running the task again", "task", r, "key", key,
		"code", string(errcode.Of(damage)), "run", runs+1)
	c := done
	if c == nil {
		if c, err = j.runReduce(ctx, r, progress, inputs, true); err != nil {
			return nil, err
		}
	}
	// Counted once it ran: a run that stopped at a map task's damaged
	// file (reduce runs that map task again, then this again) made no
	// record.
	j.redos.ran(key)
	if err := j.sameReduceRun(r, old, c); err != nil {
		return nil, err
	}
	// Another process that found the record damaged when this one did
	// may have recorded its run meanwhile: that record is used, not
	// written over with a third version unchecked. (No store here writes
	// a version on a condition: two runs ending at once still both
	// write.)
	if other, damage, err := j.rereadReduce(ctx, r); err != nil {
		return nil, err
	} else if other != nil && damage == nil {
		return j.otherRun(r, other, c, nil)
	}
	if err := j.recordAgain(ctx, key, c); err != nil {
		return nil, err
	}
	j.log().Debug("reduce task committed again", "task", r, "run", runs+1)
	return c, nil
}

// rereadReduce reads reduce task r's commit record again: the record
// and a nil damage when it is valid; the record as far as it decodes
// (nil when it does not) and its SHUFFLE_CORRUPT as damage when it is
// damaged; nil and nil when there is none. Any other failure is err.
func (j *Job) rereadReduce(ctx context.Context, r int) (rc *ReduceCommit, damage, err error) {
	key := j.reduceCommitKey(r)
	b, found, err := readRecordBytes(ctx, j.Store, key, nil)
	if errcode.Of(err) == errcode.ShuffleCorrupt {
		return nil, err, nil // too long to be any run's
	}
	if err != nil || !found {
		return nil, nil, err
	}
	rc = new(ReduceCommit)
	if err := decodeRecord(b, key, rc, nil); err != nil {
		if errcode.Of(err) != errcode.ShuffleCorrupt {
			return nil, nil, err
		}
		return nil, err, nil
	}
	if err := j.checkReduceCommit(r, rc); err != nil {
		if errcode.Of(err) != errcode.ShuffleCorrupt {
			return nil, nil, err
		}
		return rc, err, nil
	}
	return rc, nil, nil
}

// otherRun returns other, a valid record of reduce task r that another
// run of it committed, to a caller whose own run, c, ended too (nil:
// none ran), when the two give the same (sameReduceCommit); else
// NONDETERMINISM. Without c, progress, if non-nil, is called for each
// of other's members, which no run reported.
func (j *Job) otherRun(r int, other, c *ReduceCommit, progress func(mapper.Result)) (*ReduceCommit, error) {
	if c != nil {
		if !sameReduceCommit(c, other) {
			return nil, errcode.New(errcode.Nondeterminism, "reduce task %d: this run gives other results than the record another run of it committed meanwhile, %s: the job's tasks ran another build, or the task depends on more than its plan; verify again, which plans anew",
				r, j.reduceCommitKey(r))
		}
		return other, nil
	}
	if progress != nil {
		for _, res := range other.Members {
			progress(res)
		}
	}
	return other, nil
}

// sameReduceRun checks that c, reduce task r's run again, gives what
// the run before it recorded, old (nil: its record does not decode):
// the same result, snapshot members' results and inputs, but for the
// inputs' versions (sameReduceCommit). A part of old that fails the
// plan's checks is the damage, not the run's, and is not compared;
// nor is anything of a record whose head names another plan or task.
func (j *Job) sameReduceRun(r int, old, c *ReduceCommit) error {
	if old == nil || j.checkReduceHead(r, old) != nil {
		return nil
	}
	cmp := *old
	rng := j.Plan.Reducers[r]
	if cmp.Result.Validate(rng.Lo, rng.Hi) != nil {
		cmp.Result = c.Result
	}
	if j.checkMembers(r, cmp.Members) != nil {
		cmp.Members = c.Members
	}
	if len(cmp.Inputs) != len(c.Inputs) || !sizesFit(cmp.Inputs) {
		// Sizes that sum past an int64 are forged, and the record
		// cannot tell which: none of its inputs is compared.
		cmp.Inputs = c.Inputs
	} else {
		// An input the plan's checks refuse is the damage: the run
		// again read map task i's file, whatever the record says.
		cmp.Inputs = slices.Clone(cmp.Inputs)
		for i := range cmp.Inputs {
			if j.checkReduceInput(r, i, &cmp.Inputs[i]) != nil {
				cmp.Inputs[i] = c.Inputs[i]
			}
		}
	}
	if !sameReduceCommit(c, &cmp) {
		return errcode.New(errcode.Nondeterminism, "reduce task %d run again gives other results than its commit record %s: the job's tasks ran another build, or the task depends on more than its plan; verify again, which plans anew",
			r, j.reduceCommitKey(r))
	}
	return nil
}

// recordRuns returns how many runs of a task its commit record key
// counts (its versions, up to maxRuns), or 0 when the store cannot list
// versions.
func (j *Job) recordRuns(ctx context.Context, key string) (int, error) {
	vl, ok := j.Store.(objstore.VersionLister)
	if !ok {
		return 0, nil
	}
	vs, err := vl.Versions(ctx, key, maxRuns)
	if err != nil {
		return 0, wrap(err, "versions of %s", key)
	}
	return len(vs), nil
}

// sameMapRun checks that c, map task i's run again, commits what the
// run before it did, old (nil: its record is unreadable): the files
// differ in their versions alone, and so do the records. Without old, c
// is checked against the inputs the committed reduce tasks name: a
// reduce commit record that does not decode, names another task or
// plan, or whose input of map task i fails the plan's checks
// (checkReduceInput) is not this check's to judge (its reader runs that
// reduce task again, redoReduce).
func (j *Job) sameMapRun(ctx context.Context, i int, old, c *MapCommit) error {
	differ := func(what string, a, b Output) error {
		return errcode.New(errcode.Nondeterminism, "map task %d run again wrote %s (size %d, rows %d, %s), where %s names (size %d, rows %d, %s): the job's tasks ran another build, or the task depends on more than its plan; verify again, which plans anew",
			i, a.Key, a.Size, a.Rows, outputSum(a), what, b.Size, b.Rows, outputSum(b))
	}
	if old != nil {
		for k := range c.Outputs {
			if !sameOutput(c.Outputs[k], old.Outputs[k]) {
				return differ(j.mapCommitKey(i), c.Outputs[k], old.Outputs[k])
			}
		}
		a, aerr := manifest.Encode(c.Results)
		b, berr := manifest.Encode(old.Results)
		if aerr != nil || berr != nil || !bytes.Equal(a, b) {
			return errcode.New(errcode.Nondeterminism, "map task %d run again has other results than its commit record %s: the job's tasks ran another build; verify again, which plans anew", i, j.mapCommitKey(i))
		}
		return nil
	}
	for r := range j.Plan.Reducers {
		key := j.reduceCommitKey(r)
		b, found, err := readRecordBytes(ctx, j.Store, key, nil)
		if errcode.Of(err) == errcode.ShuffleCorrupt {
			continue // too long: damaged, as below
		}
		if err != nil {
			return err
		}
		if !found {
			continue
		}
		var rc ReduceCommit
		picks := []manifest.Pick{{Field: "inputs", Index: i}}
		if err := decodeRecord(b, key, &rc, picks); err != nil {
			if isInternal(err) {
				return err
			}
			continue
		}
		// A record of another task or plan, or whose input i fails the
		// plan's checks, is damaged, not a run that read other bytes:
		// its reader runs that reduce task again, which leaves the
		// input out of its own comparison (sameReduceRun).
		if picks[0].Len != len(j.Plan.MapTasks) || len(rc.Inputs) != 1 ||
			j.checkReduceHead(r, &rc) != nil || j.checkReduceInput(r, i, &rc.Inputs[0]) != nil {
			continue
		}
		if !sameOutput(c.Outputs[r], rc.Inputs[0]) {
			return differ(key, c.Outputs[r], rc.Inputs[0])
		}
	}
	return nil
}

// sameOutput reports whether a and b name the same bytes, in any version.
func sameOutput(a, b Output) bool {
	a.Version, b.Version = "", ""
	return a == b
}

// outputSum is the checksum an output names its bytes by.
func outputSum(o Output) string {
	if o.XXH64 != "" {
		return "xxh64:" + o.XXH64
	}
	return o.Digest.String()
}

// readOutput reads shuffle file o whole, checking its size and checksum.
func (j *Job) readOutput(ctx context.Context, o Output) error {
	rc, err := j.Store.Get(ctx, o.Key, o.Version)
	if err != nil {
		return wrap(err, "%s version %s", o.Key, o.Version)
	}
	defer rc.Close()
	_, err = io.Copy(io.Discard, o.open(rc))
	return err
}

// isDamage reports whether err, reading a shuffle file, shows the file
// gone or damaged, not the store out of reach or the read cut short: the
// failures drainError keeps the code of are not.
func isDamage(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return false
	}
	switch errcode.Of(err) {
	case errcode.StoreUnavailable, errcode.Canceled, errcode.IO, errcode.StoreDenied, errcode.NoSuchBucket:
		return false
	}
	return true
}

// reduce is Reduce; progress, if non-nil, is called after each snapshot
// member the task reads itself. A failure naming a map task's shuffle
// file (SHUFFLE_CORRUPT, or NOT_FOUND: gone) has that map task run again
// if the file is indeed gone or fails its checksum, and one naming a map
// task's commit record (SHUFFLE_CORRUPT) if the record is still damaged
// when read again, as in Map (redoMap); the reduce task then starts over
// from the map tasks' commit records, at most maxRuns times a map
// task: it then fails with redoMap's error, or its own when the file or
// record was intact (nothing a run of the map task mends). The task's
// own record damaged has it run again (redoReduce), through the same
// loop, so a map task's file that run finds damaged is mended too.
// Members already reported are not reported again.
func (j *Job) reduce(ctx context.Context, r int, progress func(mapper.Result)) (*ReduceCommit, error) {
	var reported atomic.Int64
	tries := map[int]int{}
	for {
		var n atomic.Int64
		prog := progress
		if progress != nil {
			prog = func(res mapper.Result) {
				if n.Add(1) > reported.Load() {
					progress(res)
				}
			}
		}
		var inputs []Output
		c, err := j.reduceOnce(ctx, r, prog, &inputs)
		reported.Store(max(reported.Load(), n.Load()))
		if err == nil {
			return c, nil
		}
		named, out := namedInputs(err, inputs), r
		if inputs == nil {
			// Failed before it had its inputs: reading a map task's
			// commit record, damaged.
			named, out = j.namedRecords(err), -1
		}
		if len(named) == 0 {
			return nil, err
		}
		for _, i := range named {
			if tries[i] >= maxRuns {
				return nil, err
			}
			tries[i]++
			// The record read again: a file or record intact there
			// (another process ran the task again) runs nothing.
			if _, rerr := j.redoMap(ctx, i, out, err, nil); rerr != nil {
				return nil, wrap(rerr, "reduce task %d", r)
			}
		}
	}
}

// namedRecords returns the map tasks whose commit records err names, when
// it is SHUFFLE_CORRUPT: a reduce task found them damaged.
func (j *Job) namedRecords(err error) []int {
	if errcode.Of(err) != errcode.ShuffleCorrupt {
		return nil
	}
	msg := err.Error()
	var tasks []int
	for i := range j.Plan.MapTasks {
		if strings.Contains(msg, j.mapCommitKey(i)) {
			tasks = append(tasks, i)
		}
	}
	return tasks
}

// namedInputs returns the map tasks whose files, among a reduce task's
// inputs, its failure err names, when it is SHUFFLE_CORRUPT or NOT_FOUND.
func namedInputs(err error, inputs []Output) []int {
	if c := errcode.Of(err); c != errcode.ShuffleCorrupt && c != errcode.NotFound {
		return nil
	}
	msg := err.Error()
	var tasks []int
	for i, in := range inputs {
		if strings.Contains(msg, in.Key) {
			tasks = append(tasks, i)
		}
	}
	return tasks
}
