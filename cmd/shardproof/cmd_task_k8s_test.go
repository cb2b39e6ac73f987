package main

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"go.yaml.in/yaml/v3"

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

// get walks a YAML document by keys and list indices.
func get(t *testing.T, doc any, path ...any) any {
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

func loadJob(t *testing.T, path string) emuJob {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
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
// and which indexes failed for good. The image's shardproof is this test
// binary running as the CLI.
func (j emuJob) run(t *testing.T) (pods []int, failed []int) {
	t.Helper()
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
				env := append(cliEnv(j.env...), fmt.Sprintf("JOB_COMPLETION_INDEX=%d", idx))
				res := runCLI(t, env, j.command[1:]...)
				mu.Lock()
				pods[idx]++
				mu.Unlock()
				if res.status == 0 {
					return
				}
				action := "Count"
				for _, r := range j.rules {
					if r.codes != nil && slices.Contains(r.codes, res.status) {
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
					t.Errorf("%s: unsupported podFailurePolicy action %s", j.name, action)
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
		paths = append(paths, strings.Fields(l)[3])
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
		if pods, failed := j.run(t); len(failed) > 0 || slices.Max(pods) != 1 {
			t.Fatalf("%s: pods per index %v, failed indexes %v", j.name, pods, failed)
		}
	}
	res := runCLI(t, cliEnv(), "task", "aggregate", "--plan", planURL)
	if res.status != 0 {
		t.Fatalf("aggregate: exit %d: %s", res.status, res.stderr)
	}
	d, err := manifest.ParseDigest(strings.TrimPrefix(strings.Split(strings.TrimSpace(res.stdout), "\n")[1], "report "))
	if err != nil {
		t.Fatal(err)
	}
	b, _, err := objstore.ReadBlob(t.Context(), r.store, d, manifest.MaxDocumentSize)
	if err != nil {
		t.Fatal(err)
	}
	got, err := manifest.DecodeReport(b)
	if err != nil {
		t.Fatal(err)
	}
	sameReport(t, "kubernetes", want, got)
}

// TestKubernetesPodFailurePolicy: a deterministic input error (exit 1:
// NONDETERMINISM, a stray object at map task 0's output key) fails its
// index after one pod; an operational error (exit 3: map task 2's commit
// record is unreadable) is retried backoffLimitPerIndex times; map task 1
// succeeds. Reduce pods started early wait for the map commits, then fail
// with TASK_NOT_READY (exit 3) rather than reduce partial input.
func TestKubernetesPodFailurePolicy(t *testing.T) {
	r := newRelease(t)
	planURL, m, red := emitJobs(t, r)
	hex := planURL[strings.LastIndex(planURL, ":")+1:]
	for key, body := range map[string]string{
		"jobs/" + hex + "/map/0/r0.arrow":    "stray",
		"jobs/" + hex + "/map/2/commit.json": "{",
	} {
		if _, err := r.store.Put(t.Context(), key, strings.NewReader(body), objstore.PutOptions{IfNoneMatch: true}); err != nil {
			t.Fatal(err)
		}
	}
	pods, failed := m.run(t)
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
