package coordinator

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/objstore"
)

// IndexEnv lists, in order of precedence, the environment variables an
// engine uses to tell an array task its index: Kubernetes Indexed Jobs,
// Slurm job arrays and AWS Batch array jobs.
var IndexEnv = []string{"JOB_COMPLETION_INDEX", "SLURM_ARRAY_TASK_ID", "AWS_BATCH_JOB_ARRAY_INDEX"}

// TaskIndex returns the index of the task to run: flag when it is >= 0
// (given with --index), else the value of the first variable of IndexEnv
// that getenv returns non-empty. Two set variables that disagree are a
// usage error: the task could not know which engine launched it.
func TaskIndex(flag int, getenv func(string) string) (int, error) {
	if flag >= 0 {
		return flag, nil
	}
	idx, from := -1, ""
	for _, name := range IndexEnv {
		v := getenv(name)
		if v == "" {
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return 0, errcode.New(errcode.Usage, "task index: %s=%q is not a non-negative integer", name, v)
		}
		if from != "" && n != idx {
			return 0, errcode.New(errcode.Usage, "task index: %s=%d and %s=%d disagree", from, idx, name, n)
		}
		if from == "" {
			idx, from = n, name
		}
	}
	if from == "" {
		return 0, errcode.New(errcode.Usage, "task index: give --index or set one of %s", strings.Join(IndexEnv, ", "))
	}
	return idx, nil
}

// ParseKind parses a task kind: map, reduce or aggregate.
func ParseKind(s string) (Kind, error) {
	switch k := Kind(s); k {
	case KindMap, KindReduce, KindAggregate:
		return k, nil
	}
	return "", errcode.New(errcode.Usage, "task kind %q: want map, reduce or aggregate", s)
}

// PlanRef names a job anywhere: the store that holds it and the plan
// digest. Its string form, the plan URL that task command lines carry, is
// "<store URL>#sha256:<hex>", e.g. "s3://bucket/prefix#sha256:…" or
// "/data/store#sha256:…".
type PlanRef struct {
	Store string
	Plan  manifest.Digest
	// Scratch, if set, is the URL of the store that holds the job's
	// files (jobs/<plan>/) instead of Store: tasks get it as --scratch.
	Scratch string
}

// String returns the plan URL.
func (r PlanRef) String() string { return r.Store + "#" + r.Plan.String() }

// TaskArgs returns the arguments that name the job on a task's command
// line: --plan with the plan URL, and --scratch when the job has one.
func (r PlanRef) TaskArgs() []string {
	args := []string{"--plan", r.String()}
	if r.Scratch != "" {
		args = append(args, "--scratch", r.Scratch)
	}
	return args
}

// ParsePlanRef parses a plan URL "<store URL>#sha256:<hex>". A bare digest
// "sha256:<hex>" takes its store from store (the --store flag); a plan URL
// whose store differs from a non-empty store is a usage error.
func ParsePlanRef(s, store string) (PlanRef, error) {
	i := strings.LastIndex(s, "#")
	ref := PlanRef{Store: store}
	digest := s
	if i >= 0 {
		ref.Store, digest = s[:i], s[i+1:]
		if store != "" && store != ref.Store {
			return PlanRef{}, errcode.New(errcode.Usage, "plan URL names store %q, --store says %q", ref.Store, store)
		}
	}
	d, err := manifest.ParseDigest(digest)
	if err != nil {
		return PlanRef{}, errcode.Wrap(errcode.Usage, err, "plan %q: want <store URL>#sha256:<hex> or --store URL with sha256:<hex>", s)
	}
	if ref.Store == "" {
		return PlanRef{}, errcode.New(errcode.Usage, "plan %q names no store: give <store URL>#%s or --store", s, d)
	}
	ref.Plan = d
	return ref, nil
}

// Missing returns the indices of the tasks that must have committed before
// a task of kind may start: the map tasks without a commit record for
// reduce, and for aggregate also the reduce tasks without one. It reads
// only commit-record keys, so it is cheap enough to poll.
func (j *Job) Missing(ctx context.Context, kind Kind) (maps, reduces []int, err error) {
	if kind == KindMap {
		return nil, nil, nil
	}
	exists := func(key string) (bool, error) {
		_, err := j.Store.Head(ctx, key, "")
		if err == nil {
			return true, nil
		}
		if objstore.IsNotExist(err) {
			return false, nil
		}
		return false, err
	}
	for i := range j.Plan.MapTasks {
		ok, err := exists(j.mapCommitKey(i))
		if err != nil {
			return nil, nil, err
		}
		if !ok {
			maps = append(maps, i)
		}
	}
	if kind == KindAggregate {
		for r := range j.Plan.Reducers {
			ok, err := exists(j.reduceCommitKey(r))
			if err != nil {
				return nil, nil, err
			}
			if !ok {
				reduces = append(reduces, r)
			}
		}
	}
	return maps, reduces, nil
}

// WaitReady waits until every task that kind depends on has committed
// (see Missing), polling every poll, for at most limit. It returns
// TASK_NOT_READY when limit passes first: a reducer never starts before
// every map commit record exists.
func (j *Job) WaitReady(ctx context.Context, kind Kind, poll, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		maps, reduces, err := j.Missing(ctx, kind)
		if err != nil {
			return err
		}
		if len(maps) == 0 && len(reduces) == 0 {
			return nil
		}
		if !time.Now().Before(deadline) {
			return errcode.New(errcode.TaskNotReady, "%s task: %s", kind, describeMissing(maps, reduces))
		}
		t := time.NewTimer(min(poll, time.Until(deadline)))
		select {
		case <-ctx.Done():
			t.Stop()
			return errcode.Wrap(errcode.Canceled, ctx.Err(), "%s task: waiting for %s", kind, describeMissing(maps, reduces))
		case <-t.C:
		}
	}
}

func describeMissing(maps, reduces []int) string {
	var parts []string
	if len(maps) > 0 {
		parts = append(parts, fmt.Sprintf("map tasks %v have not committed", maps))
	}
	if len(reduces) > 0 {
		parts = append(parts, fmt.Sprintf("reduce tasks %v have not committed", reduces))
	}
	return strings.Join(parts, ", ")
}
