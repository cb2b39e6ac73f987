package coordinator

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/mapper"
	"github.com/shardproof/shardproof/objstore"
	"github.com/shardproof/shardproof/reducer"
	"github.com/shardproof/shardproof/shuffle"
	"github.com/shardproof/shardproof/snapindex"
	"github.com/shardproof/shardproof/tuplehash"
)

// failureCounter maps a shard-level failure code to its report counter.
// FOOTER_CORRUPT and DECODE_ERROR share decodeErrors ("footer/decode
// errors" in DESIGN.md).
var failureCounter = map[string]func(*manifest.Counts) *int64{
	string(errcode.DigestMismatch):  func(c *manifest.Counts) *int64 { return &c.DigestFailures },
	string(errcode.SizeMismatch):    func(c *manifest.Counts) *int64 { return &c.SizeMismatches },
	string(errcode.VersionMissing):  func(c *manifest.Counts) *int64 { return &c.VersionMissing },
	string(errcode.LogicalMismatch): func(c *manifest.Counts) *int64 { return &c.LogicalMismatches },
	string(errcode.CountMismatch):   func(c *manifest.Counts) *int64 { return &c.CountMismatches },
	string(errcode.FooterCorrupt):   func(c *manifest.Counts) *int64 { return &c.DecodeErrors },
	string(errcode.DecodeError):     func(c *manifest.Counts) *int64 { return &c.DecodeErrors },
	string(errcode.SchemaMismatch):  func(c *manifest.Counts) *int64 { return &c.SchemaMismatches },
}

// Aggregate builds the report from every map and reduce commit record
// (each must exist, else TASK_NOT_READY; a record damaged since its task
// committed has the task run again, redoMap or redoReduce, as a resume
// would), stores it content-addressed,
// records it as the plan's report (see PlanReport) and returns it with
// its digest; when another aggregation of the plan recorded its report
// first, that report is returned instead. exec supplies the executor name
// and timings; Aggregate fills in the plan shape and shuffle size, and
// derives rates from exec.Seconds when it is positive.
//
// Everything but the execution section depends only on the verified inputs:
// shard failures are sorted, counts are sums, examples are the smallest
// sampleIds, and both tuple roots are Merkle roots over all 2^K bucket
// leaves in bucket order.
func (j *Job) Aggregate(ctx context.Context, exec manifest.Execution) (*manifest.Report, manifest.Digest, error) {
	start := time.Now()
	// Stage times are known when the map tasks ran in this process (the
	// local executor); tasks of other executors time themselves nowhere
	// the report can see. Judged before a reduce task this aggregation
	// runs again (committedReduce) reads anything: that run alone is not
	// the job's stages.
	stagesKnown := j.clock != nil && j.clock.Read.Load() > 0
	rep := &manifest.Report{
		Schema:          manifest.ReportSchema,
		Root:            j.Plan.Root,
		DatasetSnapshot: j.Plan.Snapshot,
		Tombstones:      j.Plan.Tombstones,
		Benchmark:       j.Plan.Benchmark,
		Examples:        map[string][]string{},
		Tool:            j.Plan.Tool,
	}
	if j.Tombstones != nil {
		rep.TombstoneWatermark = j.Tombstones.Watermark()
	}
	if j.Benchmark != nil {
		rep.BenchmarkFence = j.Benchmark.Watermark()
	}
	c := &rep.Counts
	c.Shards = int64(len(j.Release.Shards))
	a := &aggregation{rep: rep, exec: &exec, failedShard: make([]bool, len(j.Release.Shards))}
	if err := j.addMapCommits(ctx, a); err != nil {
		return nil, manifest.Digest{}, err
	}
	// Only map tasks read release shards: their failures are all
	// counted by now.
	for _, failed := range a.failedShard {
		if !failed {
			c.ShardsVerified++
		}
	}
	nb := 1 << j.Plan.K
	relLeaves := make([][32]byte, 0, nb)
	snapLeaves := make([][32]byte, 0, nb)
	// The reduce tasks' counts (and their members' failures) add to the
	// map tasks' one record at a time, so that a record whose counts
	// take a total past an int64 is the one named.
	merged := reducer.NewResult(0, uint32(nb))
	merged.Counts = *c
	for r := range j.Plan.Reducers {
		rc, shuffled, err := j.committedReduce(ctx, r)
		if err != nil {
			return nil, manifest.Digest{}, err
		}
		key := j.reduceCommitKey(r)
		if err := a.addResults(key, &merged.Counts, rc.Members); err != nil {
			return nil, manifest.Digest{}, err
		}
		// The shuffle files each reduce task read and verified: one of
		// each map task's, so every file the map tasks committed. Each
		// record's sizes fit an int64 (checked as it was read); forged
		// ones may still not together.
		fit := addFigure(&exec.ShuffleBytes, shuffled)
		exec.MergedFiles += len(rc.Merged)
		for _, o := range rc.Merged {
			fit = fit && addFigure(&exec.MergedBytes, o.Size)
		}
		if !fit {
			return nil, manifest.Digest{}, errcode.New(errcode.ShuffleCorrupt, "aggregate: %s: the sizes of its inputs or merged files, with those of the reduce tasks before it, sum past %d bytes: forged sizes; verify again, which plans anew",
				key, int64(math.MaxInt64))
		}
		if !merged.Merge(rc.Result) {
			return nil, manifest.Digest{}, errcode.New(errcode.ShuffleCorrupt, "aggregate: %s: its result's counts, with those of the tasks before it, sum past %d: forged counts; verify again, which plans anew",
				key, int64(math.MaxInt64))
		}
		relLeaves = appendLeaves(relLeaves, rc.Result.ReleaseLeaves)
		snapLeaves = appendLeaves(snapLeaves, rc.Result.SnapshotLeaves)
	}
	*c = merged.Counts
	rep.Examples = merged.Examples

	rep.ReleaseTupleRoot = tuplehash.MerkleRoot(relLeaves)
	rep.SnapshotTupleRoot = tuplehash.MerkleRoot(snapLeaves)
	rel := j.Release
	rep.BoundTupleRoot = tuplehash.BindRoot(rep.ReleaseTupleRoot, rel.DatasetSnapshot, rel.TombstoneWatermark, rel.BenchmarkFence)
	if rep.BoundTupleRoot != rel.OrderedMemberTupleRoot {
		c.TupleRootMismatches++
		a.failures.add(manifest.ShardFailure{
			Shard: "orderedMemberTupleRoot", Side: "release", Code: string(errcode.TupleRootMismatch),
			Detail: fmt.Sprintf("manifest.orderedMemberTupleRoot=%s, recomputed=%s (from %d decoded release tuples, bound to datasetSnapshot %s and watermarks %d/%d)",
				rel.OrderedMemberTupleRoot, rep.BoundTupleRoot, c.Records, rel.DatasetSnapshot, rel.TombstoneWatermark, rel.BenchmarkFence),
		})
	}
	if rep.SnapshotTupleRoot != j.Snapshot.TupleRoot {
		c.TupleRootMismatches++
		a.failures.add(manifest.ShardFailure{
			Shard: "tupleRoot", Side: "snapshot", Code: string(errcode.TupleRootMismatch),
			Detail: fmt.Sprintf("snapshot.tupleRoot=%s, recomputed=%s (from %d decoded member tuples)",
				j.Snapshot.TupleRoot, rep.SnapshotTupleRoot, c.SnapshotRecords),
		})
	}
	if rep.SnapshotTupleRoot == j.Snapshot.TupleRoot {
		j.storeLeafIndex(ctx, snapLeaves)
	}
	// In the report format's order (sorted by shard first, failures of
	// both sides made a report its own decoding refused), the first of
	// them when there are more than a report lists.
	a.failures.cut()
	rep.Failures, rep.FailuresOmitted = append([]manifest.ShardFailure{}, a.failures.kept...), a.failures.omitted
	if rep.Stats.StoredBytes > 0 {
		rep.Stats.DecompressionRatio = float64(rep.Stats.LogicalBytes) / float64(rep.Stats.StoredBytes)
	}
	rep.Verdict = manifest.Verified
	if c.Failed() {
		rep.Verdict = manifest.Invalid
	}

	exec.Plan = j.PlanDigest
	exec.MapTasks = len(j.Plan.MapTasks)
	exec.Reducers = len(j.Plan.Reducers)
	if exec.Seconds > 0 {
		exec.RecordsPerSecond = float64(c.Records) / exec.Seconds
		exec.StoredMBPerSec = float64(rep.Stats.StoredBytes) / 1e6 / exec.Seconds
	}
	if stagesKnown {
		j.clock.add(&j.clock.aggregate, start)
		exec.Stages = j.clock.seconds()
	}
	rep.Execution = exec

	b, err := manifest.Encode(rep)
	if err != nil {
		return nil, manifest.Digest{}, err
	}
	d, _, _, err := objstore.PutBlob(ctx, j.Store, b)
	if err != nil {
		return nil, manifest.Digest{}, err
	}
	if first, err := j.recordReport(ctx, d); err != nil {
		return nil, manifest.Digest{}, err
	} else if first != nil {
		return first.Report, first.ReportDigest, nil
	}
	j.logFailures(rep, d)
	j.log().Info("verification report stored", "root", rep.Root.String(), "report", manifest.Digest(d).String(),
		"verdict", rep.Verdict, "records", c.Records, "failures", int64(len(rep.Failures))+rep.FailuresOmitted, "failuresOmitted", rep.FailuresOmitted)
	return rep, d, nil
}

// aggregation is what Aggregate gathers from the tasks' results.
type aggregation struct {
	rep         *manifest.Report
	exec        *manifest.Execution
	failedShard []bool // by release shard index
	failures    failureList
}

// addResults counts in c the failures of mapped files, release shards
// (from map tasks) and snapshot members (from map or reduce tasks), the
// results of the commit record at key, and adds their figures. Each
// record's figures fit (resultsFit, checked as it was read); forged ones
// may still not together with other records': SHUFFLE_CORRUPT naming
// key.
func (a *aggregation) addResults(key string, c *manifest.Counts, results []mapper.Result) error {
	exec := a.exec
	for _, res := range results {
		fit := true
		switch {
		case res.Skipped:
			exec.SnapshotMembersSkipped++
		case res.BucketsRead > 0:
			exec.SnapshotMembersByBucket++
			fit = addFigure(&exec.SnapshotBucketsRead, res.BucketsRead)
		case res.Side == mapper.SideSnapshot:
			exec.SnapshotMembersRead++
		}
		if res.Side == 0 {
			fit = addFigure(&a.rep.Stats.StoredBytes, res.StoredBytes) && addFigure(&a.rep.Stats.LogicalBytes, res.LogicalBytes) && fit
		}
		if !fit {
			return errcode.New(errcode.ShuffleCorrupt, "aggregate: %s: its results' stored or logical bytes, or buckets read, with those of the records before it, sum past %d: forged figures; verify again, which plans anew",
				key, int64(math.MaxInt64))
		}
		// The failures its commit record lists, then those it left
		// out (their codes alone), count alike.
		counted := map[*int64]bool{}
		for k, code := range failureCodes(&res) {
			counter := failureCounter[code]
			if counter == nil {
				return errcode.New(errcode.Internal, "mapper reported unknown failure code %q for %s", code, res.ShardID)
			}
			// A counter counts files: a shard whose tokens and member
			// set both differ is one COUNT_MISMATCH with two entries,
			// and FOOTER_CORRUPT with DECODE_ERROR one decode error.
			if n := counter(c); !counted[n] {
				counted[n] = true
				*n++
			}
			if res.Side == 0 {
				a.failedShard[res.Index] = true
			}
			if k < len(res.Failures) {
				a.failures.add(res.Failures[k])
			} else {
				a.failures.omitted++
			}
		}
	}
	return nil
}

// addMapCommits adds the results of every map task's commit record to a;
// a record damaged has its task run again (eachMapCommit), once every
// reduce task committed (reducesCommitted): an aggregation that then
// fails TASK_NOT_READY would lose that run, a whole map task's, and
// spend one of the task's runs, while a reduce task still running
// meets the record and runs the task itself.
func (j *Job) addMapCommits(ctx context.Context, a *aggregation) error {
	var addErr error
	if err := j.eachMapCommit(ctx, "aggregate", j.reducesCommitted, func(i int, mc *MapCommit) {
		if err := a.addResults(j.mapCommitKey(i), &a.rep.Counts, mc.Results); err != nil && addErr == nil {
			addErr = err
		}
	}); err != nil {
		return err
	}
	return addErr
}

// reducesCommitted returns TASK_NOT_READY, as committedReduce does,
// when a reduce task has no commit record.
func (j *Job) reducesCommitted(ctx context.Context) error {
	for r := range j.Plan.Reducers {
		if _, err := j.Store.Head(ctx, j.reduceCommitKey(r), ""); objstore.IsNotExist(err) {
			return errcode.New(errcode.TaskNotReady, "aggregate: reduce task %d has not committed", r)
		} else if err != nil {
			return wrap(err, "%s", j.reduceCommitKey(r))
		}
	}
	return nil
}

// loggedFailures is the most failures an aggregation logs one line each:
// 4,000 corrupted shards logged 8,000 lines, and the report has them.
const loggedFailures = 20

// committedReduce returns reduce task r's commit record as the
// aggregation needs it, with the sum of its inputs' sizes
// (readReduceForAggregate), TASK_NOT_READY when it has none; one
// damaged since it committed (SHUFFLE_CORRUPT) has the task run again
// (redoReduce), and that run's record is returned whole.
func (j *Job) committedReduce(ctx context.Context, r int) (rc *ReduceCommit, shuffled int64, err error) {
	rc, shuffled, found, err := j.readReduceForAggregate(ctx, r)
	switch {
	case errcode.Of(err) == errcode.ShuffleCorrupt:
		if rc, err = j.reduce(ctx, r, nil); err != nil {
			return nil, 0, err
		}
		for _, o := range rc.Inputs {
			shuffled += o.Size
		}
		return rc, shuffled, nil
	case err != nil:
		return nil, 0, err
	case !found:
		return nil, 0, errcode.New(errcode.TaskNotReady, "aggregate: reduce task %d has not committed", r)
	}
	return rc, shuffled, nil
}

// readReduceForAggregate reads reduce task r's commit record as the
// aggregation needs it: everything but its inputs, of which it returns
// the sum of the sizes, the report's shuffle bytes, rc.Inputs left
// empty. The record is held to every rule a whole one is
// (manifest.DecodePicked), and to every check of checkReduceCommit, each
// input's included (checkReduceInput): an input in the form Encode
// writes one is checked where it lies in the record, without a decode
// (reduceInputSize), any other decoded and checked alone. Decoding the
// inputs, one per map task, was most of the aggregation's work on the
// record: at 7,630 map tasks, 20 ms and 4.8 MB a reduce task
// (BenchmarkDecodeReduceCommit).
func (j *Job) readReduceForAggregate(ctx context.Context, r int) (rc *ReduceCommit, shuffled int64, found bool, err error) {
	found, err = j.readPooledRecord(ctx, j.reduceCommitKey(r), func(b []byte) error {
		rc, shuffled, err = j.decodeReduceForAggregate(r, b)
		return err
	})
	return rc, shuffled, found && err == nil, err
}

// decodeReduceForAggregate is readReduceForAggregate's decoding of b,
// reduce task r's commit record.
func (j *Job) decodeReduceForAggregate(r int, b []byte) (*ReduceCommit, int64, error) {
	var (
		shuffled int64
		inputErr error
	)
	in := inputCheck{j: j, r: r, prefix: j.prefix()}
	maps := len(j.Plan.MapTasks)
	picks := []manifest.Pick{{Field: "inputs", Index: -1, Each: func(i int, elem []byte) error {
		if i >= maps {
			return nil // the number of inputs is checked below
		}
		size, err := in.size(i, elem)
		if err == nil && !addFigure(&shuffled, size) {
			err = j.badReduceCommit(r, "its inputs' sizes sum past %d bytes (at input %d)", int64(math.MaxInt64), i)
		}
		if err != nil {
			inputErr = err
			return err
		}
		return nil
	}}}
	rc := new(ReduceCommit)
	if err := decodeRecord(b, j.reduceCommitKey(r), rc, picks); err != nil {
		if inputErr != nil {
			return nil, 0, inputErr
		}
		return nil, 0, err
	}
	if err := j.checkReduceHead(r, rc); err != nil {
		return nil, 0, err
	}
	rng := j.Plan.Reducers[r]
	if err := rc.Result.Validate(rng.Lo, rng.Hi); err != nil {
		return nil, 0, err
	}
	if picks[0].Len != maps {
		return nil, 0, j.badReduceCommit(r, "%d inputs for %d map tasks", picks[0].Len, maps)
	}
	if err := j.checkMerged(r, rc.Merged); err != nil {
		return nil, 0, err
	}
	if err := j.checkMembers(r, rc.Members); err != nil {
		return nil, 0, err
	}
	return rc, shuffled, nil
}

// inputCheck checks the inputs of reduce task r's commit record as
// checkReduceInput does, each where it lies in the record's bytes.
type inputCheck struct {
	j      *Job
	r      int
	prefix string // j.prefix()
	key    []byte // room for the key input i must name
}

// size returns the size of input i of the record, elem its bytes (held
// to the record's rules already), once checked as checkReduceInput
// checks it: in the form Encode writes an Output, where it lies
// (reduceInputSize); in any other, decoded first. A failure is
// checkReduceInput's, or SHUFFLE_CORRUPT.
func (c *inputCheck) size(i int, elem []byte) (int64, error) {
	// mapOutputKey(i, r), without a string made for each input.
	c.key = append(append(c.key[:0], c.prefix...), "map/"...)
	c.key = append(strconv.AppendInt(c.key, int64(i), 10), "/r"...)
	c.key = append(strconv.AppendInt(c.key, int64(c.r), 10), ".arrow"...)
	if size, ok := reduceInputSize(elem, c.key, c.j.Plan.ShuffleChecksum == shuffle.XXH64); ok {
		return size, nil
	}
	var o Output
	if err := json.Unmarshal(elem, &o); err != nil {
		return 0, errcode.Wrap(errcode.ShuffleCorrupt, err, "commit record %s: input %d", c.j.reduceCommitKey(c.r), i)
	}
	if err := c.j.checkReduceInput(c.r, i, &o); err != nil {
		return 0, err
	}
	return o.Size, nil
}

// reduceInputSize returns the size of elem, an Output's JSON as Encode
// writes it (its members in order, "digest" or "xxh64" or both left out
// when empty, no escape in a string, no whitespace, sizes of plain
// digits), when it passes checkReduceInput's checks: it names key, and
// has xxh64 16 lowercase hex digits and no digest, or (not xxh64) a
// sha256 digest that is not zero and no xxh64. ok is false otherwise,
// whether or not checkReduceInput would take elem decoded. The digest's
// form is the record's strict decoding's to check: elem must have
// passed it.
func reduceInputSize(elem, key []byte, xxh64 bool) (size int64, ok bool) {
	c := jsonCursor{b: elem}
	c.lit(`{"key":"`)
	if !bytes.Equal(c.str(), key) {
		return 0, false
	}
	c.lit(`,"version":"`)
	c.str()
	var digest, sum []byte
	if c.opt(`,"digest":"`) {
		digest = c.str()
	}
	if c.opt(`,"xxh64":"`) {
		sum = c.str()
	}
	c.lit(`,"size":`)
	size = c.digits()
	c.lit(`,"rows":`)
	c.digits()
	c.lit("}")
	if c.bad || len(c.b) != 0 {
		return 0, false
	}
	if xxh64 {
		if digest != nil || len(sum) != 16 {
			return 0, false
		}
		for _, h := range sum {
			if (h < '0' || h > '9') && (h < 'a' || h > 'f') {
				return 0, false
			}
		}
		return size, true
	}
	const prefix = "sha256:"
	if len(sum) != 0 || len(digest) != len(prefix)+64 || string(digest[:len(prefix)]) != prefix {
		return 0, false
	}
	for _, h := range digest[len(prefix):] {
		if h != '0' {
			return size, true
		}
	}
	return 0, false // the zero digest
}

// jsonCursor reads the JSON of one value in the one form Encode writes
// it, for reduceInputSize: bad is set at the first byte off that form.
type jsonCursor struct {
	b   []byte
	bad bool
}

// lit consumes s, which must come next.
func (c *jsonCursor) lit(s string) {
	if !c.opt(s) {
		c.bad = true
	}
}

// opt consumes s if it comes next, and reports whether it did.
func (c *jsonCursor) opt(s string) bool {
	if c.bad || len(c.b) < len(s) || string(c.b[:len(s)]) != s {
		return false
	}
	c.b = c.b[len(s):]
	return true
}

// str consumes the rest of a string and its closing quote, and returns
// its content, which must hold no escape.
func (c *jsonCursor) str() []byte {
	if c.bad {
		return nil
	}
	k := bytes.IndexByte(c.b, '"')
	if k < 0 || bytes.IndexByte(c.b[:k], '\\') >= 0 {
		c.bad = true
		return nil
	}
	s := c.b[:k:k]
	c.b = c.b[k+1:]
	return s
}

// digits consumes a number of plain decimal digits, no sign, no leading
// zero but in 0 itself, at most 18 (no overflow), and returns it.
func (c *jsonCursor) digits() int64 {
	k := 0
	for !c.bad && k < len(c.b) && c.b[k] >= '0' && c.b[k] <= '9' {
		k++
	}
	if k == 0 || k > 18 || k > 1 && c.b[0] == '0' {
		c.bad = true
		return 0
	}
	var n int64
	for _, d := range c.b[:k] {
		n = 10*n + int64(d-'0')
	}
	c.b = c.b[k:]
	return n
}

// logFailures logs the first loggedFailures failures of rep, stored as
// d, then one line saying how many more there are.
func (j *Job) logFailures(rep *manifest.Report, d manifest.Digest) {
	shown := rep.Failures[:min(len(rep.Failures), loggedFailures)]
	for _, f := range shown {
		j.log().Warn("verification failure", "root", rep.Root.String(), "shard", f.Shard, "side", f.Side, "code", f.Code)
	}
	if more := int64(len(rep.Failures)-len(shown)) + rep.FailuresOmitted; more > 0 {
		j.log().Warn("more verification failures", "root", rep.Root.String(), "report", d.String(), "more", more,
			"listed", len(rep.Failures), "failuresOmitted", rep.FailuresOmitted)
	}
}

// AggregateTask is the aggregate task (`shardproof task aggregate`): the
// report the plan's record names when the job finished (Reused, see
// Finished), else Aggregate with the job held (Acquire, HoldRun), as
// verify's own aggregation runs. Two aggregates of the plan at once (an
// engine's retry beside a task still running, a second command) then
// never run side by side: the second is JOB_IN_USE and writes nothing,
// and run again once the first ended it gives the report the first
// recorded. Unheld, the first one's deletion of the job's files, once
// its report was stored, failed the other midway (TASK_NOT_READY).
func (j *Job) AggregateTask(ctx context.Context, exec manifest.Execution) (*Outcome, error) {
	h, out, err := j.hold(ctx)
	if h == nil {
		return out, err
	}
	defer h.Release()
	out, err = j.aggregate(h.Context(), exec)
	if lost := h.Lost(); err != nil && lost != nil {
		return nil, lost
	}
	return out, err
}

// aggregate is Aggregate returning an Outcome.
func (j *Job) aggregate(ctx context.Context, exec manifest.Execution) (*Outcome, error) {
	rep, d, err := j.Aggregate(ctx, exec)
	if err != nil {
		return nil, err
	}
	return &Outcome{Plan: j.PlanDigest, Report: rep, ReportDigest: d}, nil
}

// storeLeafIndex stores the snapshot's leaf index from leaves that hash
// to its tuple root, unless the plan used one or a valid one is there
// already, so the next verification against this snapshot skips the
// members of matching buckets. Failing to store it fails nothing.
func (j *Job) storeLeafIndex(ctx context.Context, leaves [][32]byte) {
	if j.Plan.SnapshotLeaves != nil || j.Plan.K > snapindex.MaxK || len(j.Snapshot.Members) == 0 {
		return
	}
	if _, _, found, err := snapindex.Find(ctx, j.Store, j.Plan.Snapshot, j.Plan.K, j.Snapshot.TupleRoot); found || err != nil && errcode.Of(err) != errcode.BadDocument {
		return
	}
	ref, err := snapindex.Put(ctx, j.Store, j.Plan.Snapshot, j.Plan.K, leaves)
	if err != nil {
		j.log().Warn("snapshot leaf index not stored", "snapshot", j.Plan.Snapshot.String(), "code", string(errcode.Of(err)), "err", err)
		return
	}
	j.log().Info("snapshot leaf index stored", "snapshot", j.Plan.Snapshot.String(), "key", ref.Key, "version", string(ref.Version))
}

func appendLeaves(dst [][32]byte, b []byte) [][32]byte {
	for i := 0; i+32 <= len(b); i += 32 {
		dst = append(dst, [32]byte(b[i:i+32]))
	}
	return dst
}
