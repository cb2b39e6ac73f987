package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/shardproof/shardproof/coordinator"
	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/objstore"
)

// The Kubernetes executor is contract-tested, not cluster-tested: an
// emulator reads the emitted Indexed Job YAML as a generic document (not
// through the emitter's types) and does what the Job controller does with
// the fields shardproof relies on: one pod per completion index with
// JOB_COMPLETION_INDEX set, at most parallelism at once, restartPolicy
// Never, per-index retries bounded by backoffLimitPerIndex, podFailurePolicy
// rules matched on the container's exit code (FailIndex, Ignore, else
// Count), and maxFailedIndexes.

// emuJob is one Indexed Job as the emulator understands it.
type emuJob struct {
	name                                        string
	completions, parallelism, backoff, maxFails int
	rules                                       []emuRule
	command                                     []string
	env                                         []string
}

type emuRule struct {
	action string
	codes  []int // onExitCodes with operator In; nil for pod-condition rules
}

// fatalf is what the emulator needs of a *testing.T, so the kubectl shim
// (a child process without one) can use it too.
type fatalf interface {
	Helper()
	Fatalf(format string, args ...any)
}

// get walks a YAML document by keys and list indices.
func get(t fatalf, doc any, path ...any) any {
	t.Helper()
	cur := doc
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := cur.(map[string]any)
			if !ok {
				t.Fatalf("YAML %v: %T is not a mapping", path, cur)
			}
			cur = m[k]
		case int:
			l, ok := cur.([]any)
			if !ok || k >= len(l) {
				t.Fatalf("YAML %v: no element %d", path, k)
			}
			cur = l[k]
		}
	}
	return cur
}

func loadJob(t fatalf, path string) emuJob {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v", err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	for _, f := range []struct {
		path []any
		want any
	}{
		{[]any{"apiVersion"}, "batch/v1"},
		{[]any{"kind"}, "Job"},
		{[]any{"spec", "completionMode"}, "Indexed"},
		{[]any{"spec", "template", "spec", "restartPolicy"}, "Never"},
	} {
		if got := get(t, doc, f.path...); got != f.want {
			t.Fatalf("%s: %v = %v, want %v", path, f.path, got, f.want)
		}
	}
	j := emuJob{
		name:        get(t, doc, "metadata", "name").(string),
		completions: get(t, doc, "spec", "completions").(int),
		parallelism: get(t, doc, "spec", "parallelism").(int),
		backoff:     get(t, doc, "spec", "backoffLimitPerIndex").(int),
		maxFails:    get(t, doc, "spec", "maxFailedIndexes").(int),
	}
	for _, r := range get(t, doc, "spec", "podFailurePolicy", "rules").([]any) {
		rule := emuRule{action: get(t, r, "action").(string)}
		if oc, ok := r.(map[string]any)["onExitCodes"]; ok {
			if get(t, oc, "operator") != "In" || get(t, oc, "containerName") != "task" {
				t.Fatalf("%s: unsupported onExitCodes %v", path, oc)
			}
			for _, v := range get(t, oc, "values").([]any) {
				rule.codes = append(rule.codes, v.(int))
			}
		}
		j.rules = append(j.rules, rule)
	}
	containers := get(t, doc, "spec", "template", "spec", "containers").([]any)
	if len(containers) != 1 || get(t, containers[0], "name") != "task" {
		t.Fatalf("%s: want one container named task", path)
	}
	for _, a := range get(t, containers[0], "command").([]any) {
		j.command = append(j.command, a.(string))
	}
	if env, ok := containers[0].(map[string]any)["env"]; ok {
		for _, e := range env.([]any) {
			j.env = append(j.env, get(t, e, "name").(string)+"="+get(t, e, "value").(string))
		}
	}
	return j
}

// run runs the Job to the end and returns, per index, how many pods ran
// and which indexes failed for good. launch runs one pod's command with
// its environment and returns the exit status.
func (j emuJob) run(launch func(env, command []string) int) (pods []int, failed []int) {
	pods = make([]int, j.completions)
	var mu sync.Mutex
	sem := make(chan struct{}, j.parallelism)
	var wg sync.WaitGroup
	for idx := range j.completions {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			counted := 0
			for {
				status := launch(append(slices.Clone(j.env), fmt.Sprintf("JOB_COMPLETION_INDEX=%d", idx)), j.command)
				mu.Lock()
				pods[idx]++
				mu.Unlock()
				if status == 0 {
					return
				}
				action := "Count"
				for _, r := range j.rules {
					if r.codes != nil && slices.Contains(r.codes, status) {
						action = r.action
						break
					}
				}
				switch action {
				case "FailIndex":
				case "Ignore":
					continue
				case "Count":
					if counted++; counted <= j.backoff {
						continue
					}
				default:
					// Unknown actions fail the index: the test then fails
					// on the unexpected result.
				}
				mu.Lock()
				failed = append(failed, idx)
				mu.Unlock()
				return
			}
		})
	}
	wg.Wait()
	slices.Sort(failed)
	return pods, failed
}

// testLaunch runs a pod's command as a child of the test: the image's
// shardproof is this test binary running as the CLI.
func testLaunch(t *testing.T) func(env, command []string) int {
	return func(env, command []string) int {
		return runCLI(t, cliEnv(env...), command[1:]...).status
	}
}

// emitJobs runs `verify --executor kubernetes --emit` and returns the plan
// URL and the two Jobs, map first.
func emitJobs(t *testing.T, r *release, extra ...string) (string, emuJob, emuJob) {
	t.Helper()
	dir := t.TempDir()
	args := append([]string{"verify", "--executor", "kubernetes", "--emit", dir, "--image", "registry.example/shardproof:test",
		"--store", r.dir, "--root", r.res.Root.String(), "--map-tasks", "3", "--reducers", "2", "--parallelism", "2",
		"--k8s-backoff-limit-per-index", "2", "--k8s-env", "GOMAXPROCS=1"}, extra...)
	res := runCLI(t, cliEnv(), args...)
	if res.status != 0 {
		t.Fatalf("emit: exit %d: %s", res.status, res.stderr)
	}
	lines := strings.Split(strings.TrimSpace(res.stdout), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "plan ") {
		t.Fatalf("emit printed %q", res.stdout)
	}
	var paths []string
	for _, l := range lines[1:3] {
		f := strings.Fields(l)
		i := slices.Index(f, "-f")
		if i < 0 {
			t.Fatalf("emit printed %q, no kubectl apply -f", l)
		}
		paths = append(paths, strings.Trim(f[i+1], "'"))
	}
	m, red := loadJob(t, paths[0]), loadJob(t, paths[1])
	if m.completions != 3 || red.completions != 2 || m.backoff != 2 || m.maxFails != 0 {
		t.Fatalf("jobs: map %+v, reduce %+v", m, red)
	}
	if m.command[0] != "shardproof" || m.command[2] != "map" || red.command[2] != "reduce" || !slices.Contains(m.env, "GOMAXPROCS=1") {
		t.Fatalf("pod commands: map %v (env %v), reduce %v", m.command, m.env, red.command)
	}
	return strings.TrimPrefix(lines[0], "plan "), m, red
}

// TestKubernetesIndexedJobsContract: the emitted map and reduce Jobs, run
// by the emulator in order, then `task aggregate`, give the local
// executor's report.
func TestKubernetesIndexedJobsContract(t *testing.T) {
	r := newRelease(t)
	want := r.localReport(t)
	planURL, m, red := emitJobs(t, r)
	for _, j := range []emuJob{m, red} {
		if pods, failed := j.run(testLaunch(t)); len(failed) > 0 || slices.Max(pods) != 1 {
			t.Fatalf("%s: pods per index %v, failed indexes %v", j.name, pods, failed)
		}
	}
	res := runCLI(t, cliEnv(), "task", "aggregate", "--plan", planURL)
	if res.status != 0 {
		t.Fatalf("aggregate: exit %d: %s", res.status, res.stderr)
	}
	got := aggregateReport(t, r.store, res)
	sameReport(t, "kubernetes", want, got)
	// The reduce pods used the snapshot leaf index the plan names.
	if n := len(r.res.SnapshotDoc.Members); got.Execution.SnapshotMembersSkipped != n {
		t.Fatalf("reduce pods skipped %d of %d snapshot members; want all", got.Execution.SnapshotMembersSkipped, n)
	}
}

// TestKubernetesScratch: with --scratch the emitted pods carry it and
// keep the job there, and emitting does not touch it (it may be a store
// only the cluster reaches): the directory does not exist until the first
// pod runs. Aggregating with it gives the local executor's report.
func TestKubernetesScratch(t *testing.T) {
	r := newRelease(t)
	want := r.localReport(t)
	scratch := filepath.Join(t.TempDir(), "scratch")
	planURL, m, red := emitJobs(t, r, "--scratch", scratch)
	if _, err := os.Stat(scratch); !os.IsNotExist(err) {
		t.Fatalf("emitting touched the scratch: %v", err)
	}
	for _, j := range []emuJob{m, red} {
		if i := slices.Index(j.command, "--scratch"); i < 0 || i+1 == len(j.command) || j.command[i+1] != scratch {
			t.Fatalf("%s pods run %v, without the scratch", j.name, j.command)
		}
		if _, failed := j.run(testLaunch(t)); len(failed) > 0 {
			t.Fatalf("%s: failed indexes %v", j.name, failed)
		}
	}
	pd, err := manifest.ParseDigest(planURL[strings.LastIndex(planURL, "#")+1:])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(r.dir, "jobs", pd.Hex())); !os.IsNotExist(err) {
		t.Fatalf("the pods wrote the job to the store: %v", err)
	}
	res := runCLI(t, cliEnv(), "task", "aggregate", "--plan", planURL, "--scratch", scratch, "--keep-job")
	if res.status != 0 {
		t.Fatalf("aggregate: exit %d: %s", res.status, res.stderr)
	}
	got := aggregateReport(t, r.store, res)
	if got.Execution.Plan != pd {
		t.Fatalf("report of plan %s, want %s", got.Execution.Plan, pd)
	}
	sameReport(t, "kubernetes with a scratch", want, got)
	if _, err := os.Stat(filepath.Join(scratch, "jobs", got.Execution.Plan.Hex(), "reduce")); err != nil {
		t.Fatalf("the job is not in the scratch: %v", err)
	}
}

// TestKubernetesPodFailurePolicy: a deterministic input error (exit 1:
// NONDETERMINISM, a stray object at map task 0's output key) fails its
// index after one pod; an operational error (exit 3: map task 2's commit
// record is unreadable, and the task has run as often as it may run
// again over it) is retried backoffLimitPerIndex times; map task 1
// succeeds. Reduce pods started early wait for the map commits, then fail
// with TASK_NOT_READY (exit 3) rather than reduce partial input.
func TestKubernetesPodFailurePolicy(t *testing.T) {
	r := newRelease(t)
	planURL, m, red := emitJobs(t, r)
	hex := planURL[strings.LastIndex(planURL, ":")+1:]
	if _, err := r.store.Put(t.Context(), "jobs/"+hex+"/map/0/r0.arrow", strings.NewReader("stray"), objstore.PutOptions{IfNoneMatch: true}); err != nil {
		t.Fatal(err)
	}
	// Unreadable in each of the 3 versions a map task's runs may write: a
	// map task whose record is damaged runs again, up to 3 runs in all.
	for range 3 {
		if _, err := r.store.Put(t.Context(), "jobs/"+hex+"/map/2/commit.json", strings.NewReader("{"), objstore.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	pods, failed := m.run(testLaunch(t))
	if !slices.Equal(pods, []int{1, 1, 3}) || !slices.Equal(failed, []int{0, 2}) {
		t.Fatalf("map job: pods per index %v (want [1 1 3]), failed indexes %v (want [0 2])", pods, failed)
	}
	res := runCLI(t, cliEnv(), "task", "reduce", "--plan", planURL, "--index", "0", "--wait", "1s")
	if res.status != errcode.ExitError || !strings.Contains(res.stderr, string(errcode.TaskNotReady)) {
		t.Fatalf("reduce before the maps committed: exit %d: %s", res.status, res.stderr)
	}
	if !strings.Contains(strings.Join(red.command, " "), "--wait") {
		t.Errorf("reduce pods do not wait for the map commits: %v", red.command)
	}
}

// asKubectl makes the test binary act as kubectl over the emulator (the
// value is its state directory): `apply -f JOB.yaml` runs the Job to the
// end, or, as kubectl does, leaves a Job of that name that exists as it
// is ("unchanged"), `get job NAME -o jsonpath=…` prints its final
// condition (nothing with --ignore-not-found when there is no such Job),
// and `delete job NAME` forgets it and its pods (or, for a Job the test
// marked stuck with a file stuck-NAME, fails as kubectl does when its
// --timeout expires, and refuses a delete without one). It lets
// `verify --executor kubernetes --submit` run end to end without a
// cluster; it is no substitute for one.
const asKubectl = "SHARDPROOF_TEST_AS_KUBECTL"

// exitT is the fatalf of the kubectl shim.
type exitT struct{}

func (exitT) Helper() {}
func (exitT) Fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "kubectl-emulator: "+format+"\n", args...)
	os.Exit(1)
}

func kubectlMain(state string) {
	args := os.Args[1:]
	if f, err := os.OpenFile(filepath.Join(state, "calls.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err == nil {
		fmt.Fprintln(f, strings.Join(args, " "))
		f.Close()
	}
	if len(args) >= 2 && (args[0] == "--namespace" || args[0] == "-n") {
		args = args[2:]
	}
	if len(args) >= 2 && args[0] == "get" && strings.HasPrefix(args[1], "job/") {
		args = append([]string{"get", "job", strings.TrimPrefix(args[1], "job/")}, args[2:]...)
	}
	switch {
	case len(args) == 3 && args[0] == "apply" && args[1] == "-f":
		j := loadJob(exitT{}, args[2])
		if _, err := os.Stat(filepath.Join(state, j.name)); err == nil {
			// A Job's spec is immutable and its controller never runs a
			// finished one again.
			fmt.Printf("job.batch/%s unchanged\n", j.name)
			break
		}
		// Each index's last pod: its exit code and log, for "get pods"
		// and "logs".
		var pods []string
		_, failed := j.run(func(env, command []string) int {
			cmd := exec.Command(os.Args[0], command[1:]...)
			cmd.Env = append(append(os.Environ(), asCLI+"=1", asKubectl+"="), env...)
			var log bytes.Buffer
			cmd.Stderr = io.MultiWriter(os.Stderr, &log)
			code := 0
			if err := cmd.Run(); err != nil {
				code = -1
				var ee *exec.ExitError
				if errors.As(err, &ee) {
					code = ee.ExitCode()
				}
			}
			index := ""
			for _, kv := range env {
				if v, ok := strings.CutPrefix(kv, "JOB_COMPLETION_INDEX="); ok {
					index = v
				}
			}
			pod := j.name + "-" + index
			pods = append(pods, fmt.Sprintf("%s %s %d %s", pod, index, code, time.Now().UTC().Format(time.RFC3339Nano)))
			if err := os.WriteFile(filepath.Join(state, "log-"+pod), log.Bytes(), 0o644); err != nil {
				exitT{}.Fatalf("%v", err)
			}
			return code
		})
		if err := os.WriteFile(filepath.Join(state, "pods-"+j.name), []byte(strings.Join(pods, "\n")+"\n"), 0o644); err != nil {
			exitT{}.Fatalf("%v", err)
		}
		var fi []string
		for _, i := range failed {
			fi = append(fi, strconv.Itoa(i))
		}
		if err := os.WriteFile(filepath.Join(state, "failed-"+j.name), []byte(strings.Join(fi, ",")), 0o644); err != nil {
			exitT{}.Fatalf("%v", err)
		}
		cond := "Complete "
		if len(failed) > j.maxFails {
			cond = "Failed FailedIndexes"
		}
		if err := os.WriteFile(filepath.Join(state, j.name), []byte(cond), 0o644); err != nil {
			exitT{}.Fatalf("%v", err)
		}
		fmt.Printf("job.batch/%s created\n", j.name)
	case len(args) >= 3 && args[0] == "get" && args[1] == "pods" && args[2] == "-l":
		b, err := os.ReadFile(filepath.Join(state, "pods-"+strings.TrimPrefix(args[3], "batch.kubernetes.io/job-name=")))
		if err != nil {
			exitT{}.Fatalf("no pods: %v", err)
		}
		fmt.Print(string(b))
	case len(args) >= 2 && args[0] == "logs":
		b, err := os.ReadFile(filepath.Join(state, "log-"+args[1]))
		if err != nil {
			exitT{}.Fatalf("pod %s not found", args[1])
		}
		fmt.Print(string(b))
	case len(args) >= 5 && args[0] == "get" && args[1] == "job" && strings.Contains(args[4], "failedIndexes"):
		b, _ := os.ReadFile(filepath.Join(state, "failed-"+args[2]))
		fmt.Print(string(b))
	case len(args) >= 3 && args[0] == "get" && args[1] == "job":
		b, err := os.ReadFile(filepath.Join(state, args[2]))
		if err != nil && slices.Contains(args, "--ignore-not-found") {
			break
		}
		if err != nil {
			exitT{}.Fatalf("jobs.batch %q not found", args[2])
		}
		fmt.Printf("%s\n", b)
	case len(args) >= 3 && args[0] == "delete" && args[1] == "job":
		if _, err := os.Stat(filepath.Join(state, "stuck-"+args[2])); err == nil {
			// A Job whose pods cannot go (a finalizer, a lost node):
			// kubectl waits out --timeout, by default a week, and leaves
			// the Job marked for deletion. The emulator answers at once.
			if !slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--timeout=") && a != "--timeout=0s" }) {
				exitT{}.Fatalf("delete job %s, whose pods cannot go, without --timeout: kubectl would wait 168h", args[2])
			}
			fmt.Fprintf(os.Stderr, "error: timed out waiting for the condition on jobs/%s\n", args[2])
			os.Exit(1)
		}
		for _, prefix := range []string{"", "pods-", "failed-"} {
			if err := os.Remove(filepath.Join(state, prefix+args[2])); err != nil && !slices.Contains(args, "--ignore-not-found") {
				exitT{}.Fatalf("jobs.batch %q not found", args[2])
			}
		}
		fmt.Printf("job.batch %q deleted\n", args[2])
	default:
		exitT{}.Fatalf("unsupported command %v", args)
	}
	os.Exit(0)
}

// TestKubernetesSubmit: verify --executor kubernetes --submit applies the
// map Job, waits for it, applies the reduce Job, waits, and aggregates —
// here through the emulator acting as kubectl — and reports what the local
// executor does. A map index that fails for good fails the verify with the
// Job's condition.
func TestKubernetesSubmit(t *testing.T) {
	r := newRelease(t)
	want := r.localReport(t)
	state := t.TempDir()
	args := []string{"verify", "--executor", "kubernetes", "--submit", "--image", "registry.example/shardproof:test",
		"--kubectl", os.Args[0], "--namespace", "verify", "--store", r.dir, "--root", r.res.Root.String(),
		"--map-tasks", "3", "--reducers", "2", "--parallelism", "2", "--json"}
	got := cliReport(t, runCLI(t, cliEnv(asKubectl+"="+state), args...))
	sameReport(t, "kubernetes --submit", want, got)
	if got.Execution.Executor != "kubernetes" {
		t.Errorf("executor %q", got.Execution.Executor)
	}

	r2 := newRelease(t)
	j := planJob(t, r2, 3, 2)
	key := "jobs/" + j.PlanDigest.Hex() + "/map/1/r0.arrow"
	if _, err := r2.store.Put(t.Context(), key, strings.NewReader("stray"), objstore.PutOptions{IfNoneMatch: true}); err != nil {
		t.Fatal(err)
	}
	t.Setenv(asKubectl, t.TempDir())
	eng := &coordinator.Kubernetes{Image: "registry.example/shardproof:test", Kubectl: os.Args[0], Poll: 100 * time.Millisecond}
	_, err := coordinator.RunWith(t.Context(), r2.store, r2.dir, j.PlanDigest, eng)
	// The failed pod's own code and exit status, as the other executors
	// report a task (it was IO, exit 3, for every failed Job).
	var te *coordinator.TaskError
	if !errors.As(err, &te) || te.Kind != coordinator.KindMap || te.Index != 1 || te.Status != errcode.ExitInvalid ||
		errcode.Of(err) != errcode.Nondeterminism || !strings.Contains(fmt.Sprint(err), "FailedIndexes") {
		t.Fatalf("failed map index: %v; want map task 1's NONDETERMINISM (exit 1) from its pod, with the Job's FailedIndexes condition", err)
	}
}

// TestKubernetesResumeAfterFailedJob: a resume (RunWith of the plan)
// after the map Job failed for good runs the map tasks again. kubectl
// apply leaves a Job that exists as it is, and a failed Job stays failed:
// the resume met the old failure at once, for a day (the Jobs' TTL),
// however the cause had been fixed.
func TestKubernetesResumeAfterFailedJob(t *testing.T) {
	r := newRelease(t)
	want := r.localReport(t)
	j := planJob(t, r, 3, 2)
	task := "jobs/" + j.PlanDigest.Hex() + "/map/1/"
	if _, err := r.store.Put(t.Context(), task+"r0.arrow", strings.NewReader("stray"), objstore.PutOptions{IfNoneMatch: true}); err != nil {
		t.Fatal(err)
	}
	state := t.TempDir()
	t.Setenv(asKubectl, state)
	eng := &coordinator.Kubernetes{Image: "registry.example/shardproof:test", Kubectl: os.Args[0], Poll: 100 * time.Millisecond}
	if _, err := coordinator.RunWith(t.Context(), r.store, r.dir, j.PlanDigest, eng); errcode.Of(err) != errcode.Nondeterminism {
		t.Fatalf("run with a stray output: %v, want map task 1's NONDETERMINISM", err)
	}
	// The operator removes the stray file and resumes.
	if err := r.store.(objstore.Deleter).DeletePrefix(t.Context(), task); err != nil {
		t.Fatal(err)
	}
	out, err := coordinator.RunWith(t.Context(), r.store, r.dir, j.PlanDigest, eng)
	if err != nil {
		t.Fatalf("resume after the failed map Job: %v", err)
	}
	sameReport(t, "kubernetes resume", want, out.Report)
	calls, _ := os.ReadFile(filepath.Join(state, "calls.log"))
	if n := strings.Count(string(calls), "apply -f"); n != 3 {
		t.Errorf("%d applies, want 3 (map, map again, reduce):\n%s", n, calls)
	}
}

// TestKubernetesResumeStuckFailedJob: a resume whose failed map Job
// cannot be deleted (its pods held by a finalizer or a lost node) fails
// with IO after a bounded wait, naming the Job and what to do, and applies
// nothing; kubectl delete had no --timeout, so the resume waited a week
// without a word. Once the Job can go, the resume runs.
func TestKubernetesResumeStuckFailedJob(t *testing.T) {
	r := newRelease(t)
	j := planJob(t, r, 3, 2)
	task := "jobs/" + j.PlanDigest.Hex() + "/map/1/"
	if _, err := r.store.Put(t.Context(), task+"r0.arrow", strings.NewReader("stray"), objstore.PutOptions{IfNoneMatch: true}); err != nil {
		t.Fatal(err)
	}
	state := t.TempDir()
	t.Setenv(asKubectl, state)
	eng := &coordinator.Kubernetes{Image: "registry.example/shardproof:test", Kubectl: os.Args[0], Namespace: "verify", Poll: 100 * time.Millisecond}
	if _, err := coordinator.RunWith(t.Context(), r.store, r.dir, j.PlanDigest, eng); errcode.Of(err) != errcode.Nondeterminism {
		t.Fatalf("run with a stray output: %v, want map task 1's NONDETERMINISM", err)
	}
	if err := r.store.(objstore.Deleter).DeletePrefix(t.Context(), task); err != nil {
		t.Fatal(err)
	}
	job := eng.JobName(coordinator.PlanRef{Plan: j.PlanDigest}, coordinator.KindMap)
	stuck := filepath.Join(state, "stuck-"+job)
	if err := os.WriteFile(stuck, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := coordinator.RunWith(t.Context(), r.store, r.dir, j.PlanDigest, eng)
	msg := fmt.Sprint(err)
	if errcode.Of(err) != errcode.IO || exitStatus(err) != errcode.ExitError || !strings.Contains(msg, "kubernetes job "+job+", failed in an earlier run, was not deleted within 5m0s") ||
		!strings.Contains(msg, "finalizer") || !strings.Contains(msg, "kubectl -n verify get job "+job) {
		t.Fatalf("resume with a Job that cannot be deleted: %v; want IO naming the Job, the wait and what to do", err)
	}
	calls, _ := os.ReadFile(filepath.Join(state, "calls.log"))
	if n := strings.Count(string(calls), "apply -f"); n != 1 {
		t.Errorf("%d applies, want 1 (the first run's map Job):\n%s", n, calls)
	}
	if err := os.Remove(stuck); err != nil {
		t.Fatal(err)
	}
	if _, err := coordinator.RunWith(t.Context(), r.store, r.dir, j.PlanDigest, eng); err != nil {
		t.Fatalf("resume once the Job can go: %v", err)
	}
}

// TestKubernetesEmittedCommands runs the commands `verify --emit` prints,
// as an operator pastes them into a shell, with the emulator as kubectl:
// they carry the namespace, wait for the map Job before the reduce Job,
// stop (no 24 h wait) on a Job that Failed, and the aggregate line keeps
// --keep-job. --json, which needs a report, is refused with --emit alone.
func TestKubernetesEmittedCommands(t *testing.T) {
	bin := t.TempDir()
	for _, name := range []string{"kubectl", "shardproof"} {
		if err := os.Symlink(os.Args[0], filepath.Join(bin, name)); err != nil {
			t.Fatal(err)
		}
	}
	run := func(r *release, before func(plan string)) (string, cliResult, string) {
		t.Helper()
		args := ([]string{"verify", "--executor", "kubernetes", "--emit", t.TempDir(), "--image", "registry.example/shardproof:test",
			"--namespace", "verify", "--store", r.dir, "--root", r.res.Root.String(), "--map-tasks", "3", "--reducers", "2", "--keep-job"})
		emit := runCLI(t, cliEnv(), args...)
		if emit.status != 0 {
			t.Fatalf("emit: exit %d: %s", emit.status, emit.stderr)
		}
		lines := strings.Split(strings.TrimSpace(emit.stdout), "\n")
		if before != nil {
			before(strings.TrimPrefix(lines[0], "plan "))
		}
		script := "set -e\n" + strings.Join(lines[1:], "\n") + "\n"
		state := t.TempDir()
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "sh", "-c", script)
		cmd.WaitDelay = 5 * time.Second
		cmd.Env = append(cliEnv(asKubectl+"="+state), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
		res := runChild(t, cmd, []string{"sh", "-c", "<emitted commands>"})
		calls, _ := os.ReadFile(filepath.Join(state, "calls.log"))
		return strings.TrimPrefix(lines[0], "plan "), res, string(calls)
	}

	r := newRelease(t)
	want := r.localReport(t)
	plan, res, calls := run(r, nil)
	if res.status != 0 || !strings.Contains(res.stdout, "verdict VERIFIED") {
		t.Fatalf("emitted commands: exit %d\n%s\n%s", res.status, res.stdout, res.stderr)
	}
	out := res.stdout[strings.Index(res.stdout, "verdict "):]
	sameReport(t, "emitted commands", want, aggregateReport(t, r.store, cliResult{stdout: out}))
	for _, l := range strings.Split(strings.TrimSpace(calls), "\n") {
		if !strings.HasPrefix(l, "-n verify ") {
			t.Errorf("kubectl call without the namespace: %q", l)
		}
	}
	pd := plan[strings.LastIndex(plan, "#")+1:]
	if page, err := r.store.List(t.Context(), "jobs/"+strings.TrimPrefix(pd, "sha256:")+"/", "", 1); err != nil || len(page.Objects) == 0 {
		t.Errorf("--keep-job: the aggregate removed the job's files (%v)", err)
	}

	// A map index that fails for good (a stray output its rerun cannot
	// match): the commands stop at once, with a failure, and never apply
	// the reduce Job.
	r2 := newRelease(t)
	_, res, calls = run(r2, func(plan string) {
		key := "jobs/" + strings.TrimPrefix(plan[strings.LastIndex(plan, "#")+1:], "sha256:") + "/map/1/r0.arrow"
		if _, err := r2.store.Put(t.Context(), key, strings.NewReader("stray"), objstore.PutOptions{IfNoneMatch: true}); err != nil {
			t.Fatal(err)
		}
	})
	if res.status == 0 || strings.Contains(calls, "reduce") {
		t.Fatalf("a failed map Job: exit %d, kubectl calls:\n%s\nstdout %s\nstderr %s", res.status, calls, res.stdout, res.stderr)
	}

	if res := runCLI(t, cliEnv(), "verify", "--executor", "kubernetes", "--emit", t.TempDir(), "--image", "x", "--store", r.dir, "--root", r.res.Root.String(), "--json"); res.status != errcode.ExitUsage {
		t.Fatalf("--emit --json: exit %d: %s", res.status, res.stderr)
	}
}

// TestKubernetesJobsLogLikeVerify: the emitted pods log in verify's
// --log-format and at its --log-level, as the process executor's and
// Slurm's tasks do by inheriting the environment; --k8s-env still
// decides, and the defaults add nothing. The pods logged text at info
// whatever verify was given, so a collector parsing the cluster's logs
// as JSON got the tasks' lines as plain text.
func TestKubernetesJobsLogLikeVerify(t *testing.T) {
	r := newRelease(t)
	_, m, red := emitJobs(t, r, "--log-format", "json", "--log-level", "debug")
	for _, j := range []emuJob{m, red} {
		if !slices.Contains(j.env, "SHARDPROOF_LOG_FORMAT=json") || !slices.Contains(j.env, "SHARDPROOF_LOG_LEVEL=debug") {
			t.Fatalf("--log-format json --log-level debug: pod env %v", j.env)
		}
	}
	_, m, _ = emitJobs(t, r, "--log-level", "debug", "--k8s-env", "SHARDPROOF_LOG_LEVEL=warn")
	if !slices.Contains(m.env, "SHARDPROOF_LOG_LEVEL=warn") || slices.Contains(m.env, "SHARDPROOF_LOG_LEVEL=debug") || slices.ContainsFunc(m.env, func(e string) bool { return strings.HasPrefix(e, "SHARDPROOF_LOG_FORMAT=") }) {
		t.Fatalf("--k8s-env SHARDPROOF_LOG_LEVEL=warn: pod env %v", m.env)
	}
	if _, m, _ = emitJobs(t, r); !slices.Equal(m.env, []string{"GOMAXPROCS=1"}) {
		t.Fatalf("default logging: pod env %v, want only --k8s-env's", m.env)
	}
}
