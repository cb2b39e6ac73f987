package coordinator

import (
	"context"
	"io"
	"time"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/internal/verifyread"
	"github.com/shardproof/shardproof/manifest"
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
	Result *reducer.Result `json:"result"`
}

// Reduce runs reduce task r. Every map task must have committed (else
// TASK_NOT_READY); the task reads exactly the committed shuffle files, by
// version, verifying their digests, and commits its result. If its commit
// record already exists, Reduce returns it.
func (j *Job) Reduce(ctx context.Context, r int) (*ReduceCommit, error) {
	if r < 0 || r >= len(j.Plan.Reducers) {
		return nil, errcode.New(errcode.Usage, "reduce task %d out of range [0, %d)", r, len(j.Plan.Reducers))
	}
	rng := j.Plan.Reducers[r]
	var done ReduceCommit
	if found, err := readRecord(ctx, j.Store, j.reduceCommitKey(r), &done); err != nil {
		return nil, err
	} else if found {
		if done.Schema != ReduceCommitSchema || done.Plan != j.PlanDigest || done.Task != r || done.Result == nil {
			return nil, errcode.New(errcode.ShuffleCorrupt, "%s does not match the plan", j.reduceCommitKey(r))
		}
		if err := done.Result.Validate(rng.Lo, rng.Hi); err != nil {
			return nil, err
		}
		return &done, nil
	}
	defer j.clock.add(&j.clock.reduce, time.Now())
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
	for i := range j.Plan.MapTasks {
		var mc MapCommit
		found, err := readRecord(ctx, j.Store, j.mapCommitKey(i), &mc)
		if err != nil {
			return nil, err
		}
		if !found {
			return nil, errcode.New(errcode.TaskNotReady, "reduce task %d: map task %d has not committed", r, i)
		}
		if err := j.checkMapCommit(i, &mc); err != nil {
			return nil, err
		}
		out := mc.Outputs[r]
		rc, err := j.Store.Get(ctx, out.Key, out.Version)
		if err != nil {
			return nil, wrap(err, "reduce task %d: %s version %s", r, out.Key, out.Version)
		}
		closers = append(closers, rc.Close)
		vr := verifyread.New(rc, out.Key, out.Digest, out.Size)
		rd, err := shuffle.NewReaderCompression(vr, j.Plan.ShuffleCompression, out.Size, out.Key, j.Plan.K, rng.Lo, rng.Hi)
		if err != nil {
			return nil, err
		}
		closers = append(closers, func() error { rd.Close(); return nil })
		verified = append(verified, vr)
		sources = append(sources, rd)
		commit.Inputs = append(commit.Inputs, out)
	}
	res, err := reducer.Reduce(ctx, reducer.Options{
		K: j.Plan.K, Lo: rng.Lo, Hi: rng.Hi, Tombstones: j.tombSet, Benchmark: j.benchSet,
	}, sources)
	if err != nil {
		return nil, wrap(err, "reduce task %d", r)
	}
	// Nothing read is trusted until each file's bytes hashed to its
	// committed digest: drain what the IPC reader left after end-of-stream.
	for k, vr := range verified {
		if _, err := io.Copy(io.Discard, vr); err != nil {
			return nil, errcode.Wrap(errcode.ShuffleCorrupt, err, "reduce task %d: %s", r, commit.Inputs[k].Key)
		}
	}
	commit.Result = res
	b, err := manifest.Encode(commit)
	if err != nil {
		return nil, err
	}
	if _, err := putExact(ctx, j.Store, j.reduceCommitKey(r), b); err != nil {
		return nil, err
	}
	j.log().Debug("reduce task committed", "task", r, "lo", rng.Lo, "hi", rng.Hi,
		"releaseTuples", res.Counts.Records, "snapshotTuples", res.Counts.SnapshotRecords)
	return commit, nil
}
