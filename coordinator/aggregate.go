package coordinator

import (
	"context"
	"fmt"
	"time"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/mapper"
	"github.com/shardproof/shardproof/objstore"
	"github.com/shardproof/shardproof/reducer"
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
	nb := 1 << j.Plan.K
	relLeaves := make([][32]byte, 0, nb)
	snapLeaves := make([][32]byte, 0, nb)
	merged := reducer.NewResult(0, uint32(nb))
	for r := range j.Plan.Reducers {
		rc, err := j.committedReduce(ctx, r)
		if err != nil {
			return nil, manifest.Digest{}, err
		}
		if err := a.addResults(rc.Members); err != nil {
			return nil, manifest.Digest{}, err
		}
		// The shuffle files each reduce task read and verified: one of
		// each map task's, so every file the map tasks committed.
		for _, o := range rc.Inputs {
			exec.ShuffleBytes += o.Size
		}
		exec.MergedFiles += len(rc.Merged)
		for _, o := range rc.Merged {
			exec.MergedBytes += o.Size
		}
		merged.Merge(rc.Result)
		relLeaves = appendLeaves(relLeaves, rc.Result.ReleaseLeaves)
		snapLeaves = appendLeaves(snapLeaves, rc.Result.SnapshotLeaves)
	}
	for _, failed := range a.failedShard {
		if !failed {
			c.ShardsVerified++
		}
	}
	reducer.AddCounts(c, &merged.Counts)
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

// addResults counts the failures of mapped files, release shards (from
// map tasks) and snapshot members (from map or reduce tasks).
func (a *aggregation) addResults(results []mapper.Result) error {
	c, exec := &a.rep.Counts, a.exec
	for _, res := range results {
		switch {
		case res.Skipped:
			exec.SnapshotMembersSkipped++
		case res.BucketsRead > 0:
			exec.SnapshotMembersByBucket++
			exec.SnapshotBucketsRead += res.BucketsRead
		case res.Side == mapper.SideSnapshot:
			exec.SnapshotMembersRead++
		}
		if res.Side == 0 {
			a.rep.Stats.StoredBytes += res.StoredBytes
			a.rep.Stats.LogicalBytes += res.LogicalBytes
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
// a record damaged has its task run again (eachMapCommit).
func (j *Job) addMapCommits(ctx context.Context, a *aggregation) error {
	var addErr error
	if err := j.eachMapCommit(ctx, "aggregate", func(_ int, mc *MapCommit) {
		if err := a.addResults(mc.Results); err != nil && addErr == nil {
			addErr = err
		}
	}); err != nil {
		return err
	}
	return addErr
}

// loggedFailures is the most failures an aggregation logs one line each:
// 4,000 corrupted shards logged 8,000 lines, and the report has them.
const loggedFailures = 20

// committedReduce returns reduce task r's commit record, TASK_NOT_READY
// when it has none; one damaged since it committed (SHUFFLE_CORRUPT) has
// the task run again (redoReduce).
func (j *Job) committedReduce(ctx context.Context, r int) (*ReduceCommit, error) {
	var rc ReduceCommit
	found, err := readRecord(ctx, j.Store, j.reduceCommitKey(r), &rc)
	if err == nil && found {
		err = j.checkReduceCommit(r, &rc)
	}
	switch {
	case errcode.Of(err) == errcode.ShuffleCorrupt:
		return j.reduce(ctx, r, nil)
	case err != nil:
		return nil, err
	case !found:
		return nil, errcode.New(errcode.TaskNotReady, "aggregate: reduce task %d has not committed", r)
	}
	return &rc, nil
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
