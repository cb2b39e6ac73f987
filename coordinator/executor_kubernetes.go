package coordinator

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/shardproof/shardproof/internal/errcode"
)

// Kubernetes is the Engine that runs each phase as a Kubernetes Indexed
// Job: completionMode Indexed, one completion per task, pods running
// `shardproof task <kind> --plan <plan URL>` with the index from
// JOB_COMPLETION_INDEX. Kubernetes schedules the pods and retries each
// index up to BackoffLimitPerIndex times; the pod failure policy fails an
// index at once when the task exits 1, 2 or 4 (an invalid input, usage or
// refusal fails the same way every time) and retries other exits
// (3: operational). Pod disruptions do not count against the limit.
//
// Emit writes the two Jobs as YAML; Run (--submit) also applies them with
// kubectl, the reduce Job after the map Job completed, and waits for each.
type Kubernetes struct {
	// Image is the container image; it must contain Command.
	Image string
	// Command is the shardproof executable in the image (default
	// "shardproof").
	Command string
	// Namespace, if set, is the Jobs' namespace.
	Namespace string
	// Parallelism bounds the pods of one Job running at once (default:
	// all of them).
	Parallelism int
	// BackoffLimitPerIndex is how many times one index is retried
	// (default 2).
	BackoffLimitPerIndex int
	// ReduceWait is the reduce pods' --wait: how long a reduce task waits
	// for the map commit records, so both Jobs may be applied together
	// (default 10m).
	ReduceWait time.Duration
	// Env are extra container environment variables (store credentials
	// come from the image or a secret, never from the plan URL).
	Env map[string]string
	// Emit, if set, is the directory the Job YAML files are written to.
	Emit string
	// Kubectl is the kubectl executable (default "kubectl").
	Kubectl string
	// Poll is the interval of Job status polls (default 2s).
	Poll time.Duration
}

// Name implements Engine.
func (k *Kubernetes) Name() string { return "kubernetes" }

// jobTTL is the emitted Jobs' ttlSecondsAfterFinished.
const jobTTL = 24 * 60 * 60

// The subset of the batch/v1 Job API that the executor writes.
type (
	k8sJob struct {
		APIVersion string     `yaml:"apiVersion"`
		Kind       string     `yaml:"kind"`
		Metadata   k8sMeta    `yaml:"metadata"`
		Spec       k8sJobSpec `yaml:"spec"`
	}
	k8sMeta struct {
		Name      string            `yaml:"name,omitempty"`
		Namespace string            `yaml:"namespace,omitempty"`
		Labels    map[string]string `yaml:"labels,omitempty"`
	}
	k8sJobSpec struct {
		CompletionMode       string           `yaml:"completionMode"`
		Completions          int              `yaml:"completions"`
		Parallelism          int              `yaml:"parallelism"`
		BackoffLimitPerIndex int              `yaml:"backoffLimitPerIndex"`
		MaxFailedIndexes     int              `yaml:"maxFailedIndexes"`
		TTLAfterFinished     int              `yaml:"ttlSecondsAfterFinished"`
		PodFailurePolicy     k8sFailurePolicy `yaml:"podFailurePolicy"`
		Template             k8sPodTemplate   `yaml:"template"`
	}
	k8sFailurePolicy struct {
		Rules []k8sFailureRule `yaml:"rules"`
	}
	k8sFailureRule struct {
		Action          string            `yaml:"action"`
		OnExitCodes     *k8sExitCodes     `yaml:"onExitCodes,omitempty"`
		OnPodConditions []k8sPodCondition `yaml:"onPodConditions,omitempty"`
	}
	k8sExitCodes struct {
		ContainerName string `yaml:"containerName"`
		Operator      string `yaml:"operator"`
		Values        []int  `yaml:"values"`
	}
	k8sPodCondition struct {
		Type string `yaml:"type"`
	}
	k8sPodTemplate struct {
		Metadata k8sMeta    `yaml:"metadata"`
		Spec     k8sPodSpec `yaml:"spec"`
	}
	k8sPodSpec struct {
		RestartPolicy string         `yaml:"restartPolicy"`
		Containers    []k8sContainer `yaml:"containers"`
	}
	k8sContainer struct {
		Name    string   `yaml:"name"`
		Image   string   `yaml:"image"`
		Command []string `yaml:"command"`
		Env     []k8sEnv `yaml:"env,omitempty"`
	}
	k8sEnv struct {
		Name  string `yaml:"name"`
		Value string `yaml:"value"`
	}
)

// JobName is the name of the Indexed Job of one phase of the plan.
func (k *Kubernetes) JobName(ref PlanRef, kind Kind) string {
	return "shardproof-" + ref.Plan.Hex()[:12] + "-" + string(kind)
}

// JobYAML returns the Indexed Job that runs the n tasks of kind.
func (k *Kubernetes) JobYAML(ref PlanRef, kind Kind, n int) ([]byte, error) {
	if k.Image == "" {
		return nil, errcode.New(errcode.Usage, "kubernetes executor: no container image given")
	}
	command := cmp.Or(k.Command, "shardproof")
	backoff := k.BackoffLimitPerIndex
	if backoff <= 0 {
		backoff = 2
	}
	par := k.Parallelism
	if par <= 0 || par > n {
		par = n
	}
	args := append([]string{command, "task", string(kind)}, ref.TaskArgs()...)
	if kind == KindReduce {
		wait := k.ReduceWait
		if wait <= 0 {
			wait = 10 * time.Minute
		}
		args = append(args, "--wait", wait.String())
	}
	labels := map[string]string{
		"app.kubernetes.io/name":      "shardproof",
		"app.kubernetes.io/component": "verify-" + string(kind),
		"shardproof.dev/plan":         ref.Plan.Hex()[:12],
	}
	var env []k8sEnv
	for _, name := range sortedKeys(k.Env) {
		env = append(env, k8sEnv{Name: name, Value: k.Env[name]})
	}
	job := k8sJob{
		APIVersion: "batch/v1",
		Kind:       "Job",
		Metadata:   k8sMeta{Name: k.JobName(ref, kind), Namespace: k.Namespace, Labels: labels},
		Spec: k8sJobSpec{
			CompletionMode:       "Indexed",
			Completions:          n,
			Parallelism:          par,
			BackoffLimitPerIndex: backoff,
			// One index failed for good fails the Job: the phase
			// cannot succeed without it.
			MaxFailedIndexes: 0,
			// The Job and its pods go a day after it ends (long after
			// --submit read its outcome): every verification left
			// two Jobs and a pod per task behind.
			TTLAfterFinished: jobTTL,
			PodFailurePolicy: k8sFailurePolicy{Rules: []k8sFailureRule{
				{Action: "FailIndex", OnExitCodes: &k8sExitCodes{ContainerName: "task", Operator: "In",
					Values: []int{errcode.ExitInvalid, errcode.ExitUsage, errcode.ExitRejected}}},
				{Action: "Ignore", OnPodConditions: []k8sPodCondition{{Type: "DisruptionTarget"}}},
			}},
			Template: k8sPodTemplate{
				Metadata: k8sMeta{Labels: labels},
				Spec: k8sPodSpec{
					RestartPolicy: "Never",
					Containers:    []k8sContainer{{Name: "task", Image: k.Image, Command: args, Env: env}},
				},
			},
		},
	}
	var b bytes.Buffer
	b.WriteString("# shardproof verify: " + string(kind) + " phase of plan " + ref.Plan.String() + "\n")
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(&job); err != nil {
		return nil, errcode.Wrap(errcode.Internal, err, "kubernetes executor: encode %s Job", kind)
	}
	if err := enc.Close(); err != nil {
		return nil, errcode.Wrap(errcode.Internal, err, "kubernetes executor: encode %s Job", kind)
	}
	return b.Bytes(), nil
}

// EmitJobs writes the map and reduce Jobs to dir as <job name>.yaml and
// returns their paths, map first.
func (k *Kubernetes) EmitJobs(dir string, ref PlanRef, maps, reduces int) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, errcode.Wrap(errcode.IO, err, "kubernetes executor: %s", dir)
	}
	var paths []string
	for _, p := range []struct {
		kind Kind
		n    int
	}{{KindMap, maps}, {KindReduce, reduces}} {
		b, err := k.JobYAML(ref, p.kind, p.n)
		if err != nil {
			return nil, err
		}
		path := filepath.Join(dir, k.JobName(ref, p.kind)+".yaml")
		if err := os.WriteFile(path, b, 0o644); err != nil {
			return nil, errcode.Wrap(errcode.IO, err, "kubernetes executor: write %s", path)
		}
		paths = append(paths, path)
	}
	return paths, nil
}

// Run implements Engine: it emits the Jobs (to Emit, or a temporary
// directory), applies the map Job with kubectl, waits for it to complete,
// then does the same with the reduce Job.
func (k *Kubernetes) Run(ctx context.Context, ref PlanRef, maps, reduces int) error {
	dir := k.Emit
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "shardproof-k8s-"); err != nil {
			return errcode.Wrap(errcode.IO, err, "kubernetes executor: work directory")
		}
		defer os.RemoveAll(dir)
	}
	paths, err := k.EmitJobs(dir, ref, maps, reduces)
	if err != nil {
		return err
	}
	for i, kind := range []Kind{KindMap, KindReduce} {
		if err := k.deleteFailed(ctx, k.JobName(ref, kind)); err != nil {
			return err
		}
		if _, err := k.kubectl(ctx, "apply", "-f", paths[i]); err != nil {
			return err
		}
		slog.Info("kubernetes job applied", "job", k.JobName(ref, kind), "plan", ref.Plan.String())
		if err := k.waitJob(ctx, k.JobName(ref, kind)); err != nil {
			return err
		}
	}
	return nil
}

// deleteFailed deletes Job name when an earlier run of the plan left it
// failed (a verify --resume after an index failed for good): kubectl
// apply leaves a Job that exists as it is, and a finished Job never runs
// again, so the resume would meet the old failure at once until the
// Job's TTL removed it, a day later. Its pods go before it (foreground
// deletion), so none of them is taken for the new Job's. A Job that
// completed or still runs is kept: the resume waits for it, and its
// tasks' commit records decide.
//
// The wait for the deletion is bounded by deleteJobTimeout: a pod that
// cannot go (a finalizer nobody removes, a node that is lost) held the
// Job, and kubectl's default wait is a week, so the resume hung without
// a word. When it expires the error names the Job and what to do.
func (k *Kubernetes) deleteFailed(ctx context.Context, name string) error {
	out, err := k.kubectl(ctx, "get", "job", name, "--ignore-not-found", "-o",
		`jsonpath={range .status.conditions[?(@.status=="True")]}{.type}{"\n"}{end}`)
	if err != nil || !slices.Contains(strings.Fields(out), "Failed") {
		return err
	}
	slog.Info("kubernetes job of an earlier run failed; deleting it to run it again", "job", name, "timeout", deleteJobTimeout.String())
	_, err = k.kubectl(ctx, "delete", "job", name, "--cascade=foreground", "--ignore-not-found", "--wait=true", "--timeout="+deleteJobTimeout.String())
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return errcode.Wrap(errcode.Canceled, ctx.Err(), "deleting kubernetes job %s", name)
	case strings.Contains(err.Error(), "timed out waiting"):
		// kubectl's words when --timeout expires; the Job stays,
		// marked for deletion.
		return errcode.Wrap(errcode.IO, err, "kubernetes job %s, failed in an earlier run, was not deleted within %s: its pods did not go (a finalizer, or a node that is lost). See kubectl%s get pods -o wide -l batch.kubernetes.io/job-name=%s and their metadata.finalizers; remove what holds them (the finalizer, or a lost node's pod with kubectl%s delete pod NAME --force), check that kubectl%s get job %s finds no Job (delete it by hand otherwise), and resume again",
			name, deleteJobTimeout, k.nsArg(), name, k.nsArg(), k.nsArg(), name)
	default:
		return errcode.Wrap(errcode.IO, err, "kubernetes job %s, failed in an earlier run, could not be deleted to run it again: delete it by hand (kubectl%s delete job %s) and resume again", name, k.nsArg(), name)
	}
}

// deleteJobTimeout bounds deleteFailed's wait for a Job and its pods to
// go.
const deleteJobTimeout = 5 * time.Minute

// waitJob polls the Job's conditions until it is Complete or Failed.
// A poll that fails (an API server restarting, a lost connection) is
// tried again; only a streak of them fails the wait, as with Slurm's
// squeue: the Job runs on in the cluster meanwhile.
func (k *Kubernetes) waitJob(ctx context.Context, name string) error {
	poll := k.Poll
	if poll <= 0 {
		poll = 2 * time.Second
	}
	failures := 0
	for {
		out, err := k.kubectl(ctx, "get", "job", name, "-o",
			`jsonpath={range .status.conditions[?(@.status=="True")]}{.type}{" "}{.reason}{"\n"}{end}`)
		switch {
		case err != nil && ctx.Err() != nil:
			return errcode.Wrap(errcode.Canceled, ctx.Err(), "waiting for kubernetes job %s", name)
		case err != nil:
			if failures++; failures >= jobPollFailures {
				return err
			}
			slog.Warn("kubernetes job poll failed; polling again", "job", name, "failures", failures, "code", errcode.Of(err), "err", err)
		default:
			failures = 0
		}
		for _, line := range strings.Split(out, "\n") {
			typ, reason, _ := strings.Cut(line, " ")
			switch typ {
			case "Complete":
				return nil
			case "Failed":
				if te := k.failedTask(ctx, name, reason); te != nil {
					return te
				}
				return errcode.New(errcode.IO, "kubernetes job %s failed (%s); see kubectl%s describe job %s", name, reason, k.nsArg(), name)
			}
		}
		select {
		case <-ctx.Done():
			return errcode.Wrap(errcode.Canceled, ctx.Err(), "waiting for kubernetes job %s", name)
		case <-time.After(poll):
		}
	}
}

// jobPollFailures is how many Job status polls in a row may fail before
// waitJob gives up.
const jobPollFailures = 10

// nsArg is the namespace flag of a kubectl command shown to the user.
func (k *Kubernetes) nsArg() string {
	if k.Namespace == "" {
		return ""
	}
	return " -n " + k.Namespace
}

// failedTask finds a pod of the failed Job whose task exited non-zero and
// returns it as a TaskError with that task's own code, read from the tail
// of its log, as the process and Slurm executors report a failed task (a
// deterministic failure such as NONDETERMINISM or BAD_DOCUMENT then keeps
// its exit status 1). It returns nil when the cluster does not tell.
func (k *Kubernetes) failedTask(ctx context.Context, job, reason string) *TaskError {
	kind := KindMap
	if strings.HasSuffix(job, "-"+string(KindReduce)) {
		kind = KindReduce
	}
	// Kubernetes keeps the pods of retried attempts: a transient failure
	// of an index that later succeeded is among them. The Job names the
	// indexes that failed for good; of their pods, the newest failed one
	// is the failure that counted.
	failed := map[int]bool{}
	if out, err := k.kubectl(ctx, "get", "job", job, "-o", "jsonpath={.status.failedIndexes}"); err == nil {
		for _, part := range strings.Split(strings.TrimSpace(out), ",") {
			lo, hi, isRange := strings.Cut(part, "-")
			a, err1 := strconv.Atoi(lo)
			b, err2 := strconv.Atoi(hi)
			if !isRange {
				b, err2 = a, err1
			}
			for i := a; err1 == nil && err2 == nil && i <= b && i-a < 1<<16; i++ {
				failed[i] = true
			}
		}
	}
	out, err := k.kubectl(ctx, "get", "pods", "-l", "batch.kubernetes.io/job-name="+job, "-o",
		`jsonpath={range .items[*]}{.metadata.name}{" "}{.metadata.annotations.batch\.kubernetes\.io/job-completion-index}{" "}{.status.containerStatuses[0].state.terminated.exitCode}{" "}{.metadata.creationTimestamp}{"\n"}{end}`)
	if err != nil {
		return nil
	}
	var pod, created string
	var index, status int
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 3 {
			continue
		}
		i, err1 := strconv.Atoi(f[1])
		st, err2 := strconv.Atoi(f[2])
		if err1 != nil || err2 != nil || st == 0 || len(failed) > 0 && !failed[i] {
			continue
		}
		c := ""
		if len(f) > 3 {
			c = f[3]
		}
		if pod == "" || c > created {
			pod, created, index, status = f[0], c, i, st
		}
	}
	if pod == "" {
		return nil
	}
	logs, _ := k.kubectl(ctx, "logs", pod, "-c", "task", "--tail=40")
	te := newTaskError(kind, index, status, []byte(logs))
	te.Log = fmt.Sprintf("kubernetes job %s failed (%s), pod %s: %s", job, reason, pod, strings.TrimSpace(te.Log))
	return te
}

func (k *Kubernetes) kubectl(ctx context.Context, args ...string) (string, error) {
	if k.Namespace != "" {
		args = append([]string{"--namespace", k.Namespace}, args...)
	}
	bin := cmp.Or(k.Kubectl, "kubectl")
	cmd := exec.CommandContext(ctx, bin, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return "", errcode.Wrap(errcode.IO, err, "%s", commandFailed("kubectl", args, stderr.String()))
		}
		return "", errcode.Wrap(errcode.IO, err, "%s", bin)
	}
	return string(out), nil
}

func sortedKeys(m map[string]string) []string {
	return slices.Sorted(maps.Keys(m))
}
