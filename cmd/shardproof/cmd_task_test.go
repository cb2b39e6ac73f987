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
	"strings"
	"sync"
	"testing"

	"github.com/shardproof/shardproof/coordinator"
	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/objstore"
	"github.com/shardproof/shardproof/objstore/file"
	"github.com/shardproof/shardproof/objstore/s3/s3test"
	"github.com/shardproof/shardproof/stage"
	"github.com/shardproof/shardproof/stage/stagetest"
)

// asCLI makes the test binary run as the shardproof CLI, so the executors'
// children, Slurm array tasks and emulated pods run the real command line
// (`shardproof task …`) without a separate build.
const asCLI = "SHARDPROOF_TEST_AS_CLI"

func TestMain(m *testing.M) {
	// kubectl's verbs are no shardproof commands, so one environment
	// serves both the CLI and the kubectl it calls.
	if state := os.Getenv(asKubectl); state != "" && len(os.Args) > 1 && slices.Contains([]string{"--namespace", "-n", "apply", "get", "logs", "delete"}, os.Args[1]) {
		kubectlMain(state)
	}
	if os.Getenv(asCLI) == "1" {
		main()
	}
	code := m.Run()
	if templateDir != "" {
		os.RemoveAll(templateDir)
	}
	os.Exit(code)
}

// cliEnv is the environment of a child running as the CLI.
func cliEnv(extra ...string) []string {
	return append(append(os.Environ(), asCLI+"=1"), extra...)
}

// cliResult is one run of the CLI as a child process.
type cliResult struct {
	stdout, stderr string
	status         int
}

// runCLI runs `shardproof args…` as a child process.
func runCLI(t *testing.T, env []string, args ...string) cliResult {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), os.Args[0], args...)
	cmd.Env = env
	return runChild(t, cmd, args)
}

// runChild runs cmd (the CLI, maybe through a shell) and collects its
// output and exit status.
func runChild(t *testing.T, cmd *exec.Cmd, args []string) cliResult {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	r := cliResult{stdout: stdout.String(), stderr: stderr.String()}
	switch {
	case errors.As(err, &ee):
		r.status = ee.ExitCode()
	case err != nil:
		t.Fatalf("run %v: %v", args, err)
	}
	return r
}

// release is a small synthetic release in a file store.
type release struct {
	dir   string
	store objstore.Store
	res   stage.Result
}

// The synthetic release is staged once and copied for each test: a file
// store is plain files, and staging is the slow part.
var (
	templateOnce sync.Once
	templateDir  string
	templateRes  stage.Result
	templateErr  error
)

func newRelease(t *testing.T) *release {
	t.Helper()
	templateOnce.Do(func() {
		if templateDir, templateErr = os.MkdirTemp("", "shardproof-task-test"); templateErr != nil {
			return
		}
		s, err := file.Open(templateDir)
		if err != nil {
			templateErr = err
			return
		}
		defer s.Close()
		templateRes, templateErr = stage.Synth(context.Background(), s, stage.SynthOptions{Samples: 3000, Shards: 5, Seed: 7})
	})
	if templateErr != nil {
		t.Fatalf("synth: %v", templateErr)
	}
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS(templateDir)); err != nil {
		t.Fatal(err)
	}
	s, err := file.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return &release{dir: dir, store: s, res: templateRes}
}

// localReport verifies with the local executor.
func (r *release) localReport(t *testing.T) *manifest.Report {
	t.Helper()
	out, err := coordinator.Verify(t.Context(), r.store, coordinator.Options{PlanOptions: coordinator.PlanOptions{
		Root: r.res.Root, MapTasks: 2, Reducers: 2, Parallelism: 2, Tool: "shardproof " + version,
	}})
	if err != nil {
		t.Fatal(err)
	}
	if out.Report.Verdict != manifest.Verified {
		t.Fatalf("local executor: verdict %s: %+v", out.Report.Verdict, out.Report.Failures)
	}
	return out.Report
}

// withoutExecution encodes a report with its execution section cleared:
// the part that must be byte-identical whatever ran the tasks.
func withoutExecution(t *testing.T, r *manifest.Report) []byte {
	t.Helper()
	c := *r
	c.Execution = manifest.Execution{}
	b, err := manifest.Encode(&c)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// sameReport fails unless got equals want apart from execution.
func sameReport(t *testing.T, what string, want, got *manifest.Report) {
	t.Helper()
	w, g := withoutExecution(t, want), withoutExecution(t, got)
	if !bytes.Equal(w, g) {
		t.Fatalf("%s: report differs from the local executor's\nlocal: %s\n%s: %s", what, w, what, g)
	}
}

// cliReport parses `verify --json` output.
func cliReport(t *testing.T, r cliResult) *manifest.Report {
	t.Helper()
	if r.status != 0 {
		t.Fatalf("verify exited %d: %s", r.status, r.stderr)
	}
	rep, err := manifest.DecodeReport([]byte(strings.TrimSpace(r.stdout)))
	if err != nil {
		t.Fatalf("decode report: %v\n%s", err, r.stdout)
	}
	return rep
}

// aggregateReport reads the report whose digest `task aggregate` printed.
func aggregateReport(t *testing.T, s objstore.Store, res cliResult) *manifest.Report {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(res.stdout), "\n")
	if len(lines) < 2 {
		t.Fatalf("aggregate printed %q", res.stdout)
	}
	d, err := manifest.ParseDigest(strings.TrimPrefix(lines[1], "report "))
	if err != nil {
		t.Fatalf("aggregate output %q: %v", res.stdout, err)
	}
	b, _, err := objstore.ReadBlob(t.Context(), s, d, manifest.MaxDocumentSize)
	if err != nil {
		t.Fatal(err)
	}
	got, err := manifest.DecodeReport(b)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// TestVerifyProcessExecutor: `verify --executor process` runs every task as
// a `shardproof task` child and yields the local executor's report; the
// plan shape differs on purpose (3 map tasks, 4 reducers vs 2 and 2).
func TestVerifyProcessExecutor(t *testing.T) {
	r := newRelease(t)
	want := r.localReport(t)
	// A site-wide $SHARDPROOF_STORE naming another store, which the
	// children inherit, does not override the store their plan URL names.
	res := runCLI(t, cliEnv("SHARDPROOF_STORE="+t.TempDir()), "verify", "--executor", "process", "--store", r.dir, "--root", r.res.Root.String(),
		"--map-tasks", "3", "--reducers", "4", "--parallelism", "2", "--task-binary", os.Args[0], "--json")
	got := cliReport(t, res)
	sameReport(t, "process", want, got)
	if got.Execution.Executor != "process" || got.Execution.MapTasks != 3 || got.Execution.Reducers != 4 {
		t.Errorf("execution section %+v, want executor process with 3 map tasks and 4 reducers", got.Execution)
	}
}

// planJob plans (without running) what verify with these options runs.
func planJob(t *testing.T, r *release, maps, reduces int) *coordinator.Job {
	t.Helper()
	_, pd, err := coordinator.NewPlan(t.Context(), r.store, coordinator.PlanOptions{
		Root: r.res.Root, MapTasks: maps, Reducers: reduces, Parallelism: 2, Tool: "shardproof " + version,
	})
	if err != nil {
		t.Fatal(err)
	}
	j, err := coordinator.Open(t.Context(), r.store, pd)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// processRun runs (or resumes) the planned job with the process executor,
// whose children are this test binary running as the CLI.
func processRun(t *testing.T, r *release, pd manifest.Digest) (*coordinator.Outcome, error) {
	t.Helper()
	return coordinator.RunWith(t.Context(), r.store, r.dir, pd, &coordinator.Process{Binary: os.Args[0], Env: cliEnv(), Parallelism: 2})
}

// crashAfter is a store whose Put fails for key `at`, like a task killed
// right before writing it: everything before stays committed.
type crashAfter struct {
	objstore.Store
	at string
}

func (c *crashAfter) Put(ctx context.Context, key string, body io.Reader, o objstore.PutOptions) (objstore.Version, error) {
	if key == c.at {
		return "", errcode.New(errcode.IO, "killed before writing %s", key)
	}
	return c.Store.Put(ctx, key, body, o)
}

// TestMapKilledHalfwayThenRerun: map task 0 dies after writing half its
// shuffle files and before its commit record; the process executor reruns
// it, keeps the files already written (same bytes, same versions) and the
// report equals the local executor's.
func TestMapKilledHalfwayThenRerun(t *testing.T) {
	r := newRelease(t)
	want := r.localReport(t)
	const maps, reduces = 3, 4
	j := planJob(t, r, maps, reduces)
	prefix := "jobs/" + j.PlanDigest.Hex() + "/map/0/"
	crashed := *j
	crashed.Store = &crashAfter{Store: r.store, at: prefix + "r2.arrow"}
	if _, err := crashed.Map(t.Context(), 0, nil); err == nil {
		t.Fatal("map task 0 succeeded through a crash")
	}
	before := map[string]objstore.Version{}
	for _, k := range []string{"r0.arrow", "r1.arrow"} {
		info, err := r.store.Head(t.Context(), prefix+k, "")
		if err != nil {
			t.Fatalf("half-written output %s: %v", k, err)
		}
		before[k] = info.Version
	}
	if _, err := r.store.Head(t.Context(), prefix+"commit.json", ""); !objstore.IsNotExist(err) {
		t.Fatalf("commit record after the crash: %v", err)
	}
	out, err := processRun(t, r, j.PlanDigest)
	if err != nil {
		t.Fatalf("rerun: %v", err)
	}
	sameReport(t, "rerun", want, out.Report)
	for k, v := range before {
		info, err := r.store.Head(t.Context(), prefix+k, "")
		if err != nil || info.Version != v {
			t.Errorf("%s: version %v (%v) after the rerun, was %s", k, info.Version, err, v)
		}
	}
}

// TestStrayOutputs: objects under the job prefix that no commit record
// lists (a dead attempt's extra file, a task index the plan does not have)
// are ignored; a stray object at the exact key of an output differs from
// what the task writes and is reported as NONDETERMINISM (exit 1), never
// overwritten.
func TestStrayOutputs(t *testing.T) {
	r := newRelease(t)
	want := r.localReport(t)
	j := planJob(t, r, 3, 4)
	prefix := "jobs/" + j.PlanDigest.Hex() + "/"
	for _, k := range []string{"map/0/r9.arrow", "map/7/commit.json", "map/1/r0.arrow.tmp", "reduce/9/commit.json"} {
		if _, err := r.store.Put(t.Context(), prefix+k, strings.NewReader("stray"), objstore.PutOptions{IfNoneMatch: true}); err != nil {
			t.Fatal(err)
		}
	}
	out, err := processRun(t, r, j.PlanDigest)
	if err != nil {
		t.Fatalf("with stray objects: %v", err)
	}
	sameReport(t, "stray", want, out.Report)

	r2 := newRelease(t)
	j2 := planJob(t, r2, 3, 4)
	key := "jobs/" + j2.PlanDigest.Hex() + "/map/1/r0.arrow"
	if _, err := r2.store.Put(t.Context(), key, strings.NewReader("stray"), objstore.PutOptions{IfNoneMatch: true}); err != nil {
		t.Fatal(err)
	}
	_, err = processRun(t, r2, j2.PlanDigest)
	var terr *coordinator.TaskError
	if !errors.As(err, &terr) || terr.Kind != coordinator.KindMap || terr.Index != 1 || terr.Status != errcode.ExitInvalid ||
		errcode.Of(err) != errcode.Nondeterminism {
		t.Fatalf("stray object at an output key: %v; want map task 1 failing with exit 1 and %s", err, errcode.Nondeterminism)
	}
}

// TestConcurrentDuplicateTasks: two copies of every task run at once (as a
// speculative or duplicated pod would); all succeed, and the aggregate
// equals the local executor's report.
func TestConcurrentDuplicateTasks(t *testing.T) {
	r := newRelease(t)
	want := r.localReport(t)
	j := planJob(t, r, 3, 2)
	ref := coordinator.PlanRef{Store: r.dir, Plan: j.PlanDigest}.String()
	for _, phase := range []struct {
		kind string
		n    int
	}{{"map", 3}, {"reduce", 2}} {
		var wg sync.WaitGroup
		results := make([]cliResult, 2*phase.n)
		for i := range results {
			wg.Go(func() {
				results[i] = runCLI(t, cliEnv(), "task", phase.kind, "--plan", ref, "--index", fmt.Sprint(i/2))
			})
		}
		wg.Wait()
		for i, res := range results {
			if res.status != 0 {
				t.Fatalf("%s task %d copy %d: exit %d: %s", phase.kind, i/2, i%2, res.status, res.stderr)
			}
		}
	}
	res := runCLI(t, cliEnv(), "task", "aggregate", "--plan", ref)
	if res.status != 0 || !strings.Contains(res.stdout, "verdict VERIFIED") {
		t.Fatalf("aggregate: exit %d: %s %s", res.status, res.stdout, res.stderr)
	}
	sameReport(t, "duplicates", want, aggregateReport(t, r.store, res))
	// The aggregate deleted the job's scratch once the report was stored.
	if page, err := r.store.List(t.Context(), "jobs/"+j.PlanDigest.Hex()+"/", "", 10); err != nil || len(page.Objects) != 0 {
		t.Fatalf("after task aggregate: %d job keys left, err %v", len(page.Objects), err)
	}
	// A retried aggregate pod prints the report the first one stored
	// (the plan's report record), with --wait too: nothing is waited for.
	for _, args := range [][]string{{}, {"--wait", "10m"}} {
		again := runCLI(t, cliEnv(), append([]string{"task", "aggregate", "--plan", ref}, args...)...)
		if again.status != 0 || again.stdout != res.stdout {
			t.Fatalf("aggregate %v again: exit %d: %s%s; want %q", args, again.status, again.stdout, again.stderr, res.stdout)
		}
	}
}

// TestTaskAggregateInvalid: `task aggregate`, the last step a pipeline
// runs, exits 1 when the report it stores is INVALID, as verify does.
func TestTaskAggregateInvalid(t *testing.T) {
	r := newRelease(t)
	data := stagetest.ShardBytes(t, r.store, r.res.Release.Shards[0])
	bad := stagetest.ReplaceShardBytes(t, r.store, r.res, 0, stagetest.Truncate(data, 1))
	_, pd, err := coordinator.NewPlan(t.Context(), r.store, coordinator.PlanOptions{
		Root: bad.Root, MapTasks: 2, Reducers: 2, Parallelism: 2, Tool: "shardproof " + version,
	})
	if err != nil {
		t.Fatal(err)
	}
	ref := coordinator.PlanRef{Store: r.dir, Plan: pd}.String()
	for _, kind := range []string{"map", "reduce"} {
		for i := range 2 {
			if res := runCLI(t, cliEnv(), "task", kind, "--plan", ref, "--index", fmt.Sprint(i)); res.status != 0 {
				t.Fatalf("%s task %d: exit %d: %s", kind, i, res.status, res.stderr)
			}
		}
	}
	res := runCLI(t, cliEnv(), "task", "aggregate", "--plan", ref)
	if res.status != errcode.ExitInvalid || !strings.Contains(res.stdout, "verdict INVALID") {
		t.Fatalf("aggregate of an INVALID release: exit %d, want %d: %s %s", res.status, errcode.ExitInvalid, res.stdout, res.stderr)
	}
	if rep := aggregateReport(t, r.store, res); rep.Verdict != manifest.Invalid || rep.Root != bad.Root {
		t.Fatalf("stored report: verdict %s for %s", rep.Verdict, rep.Root)
	}
}

// TestTaskContract covers the task command's argument rules.
func TestTaskContract(t *testing.T) {
	r := newRelease(t)
	j := planJob(t, r, 2, 2)
	ref := coordinator.PlanRef{Store: r.dir, Plan: j.PlanDigest}.String()
	for _, c := range []struct {
		name   string
		env    []string
		args   []string
		status int
		code   errcode.Code
	}{
		{"no index", nil, []string{"task", "map", "--plan", ref}, errcode.ExitUsage, errcode.Usage},
		{"index out of range", nil, []string{"task", "map", "--plan", ref, "--index", "2"}, errcode.ExitUsage, errcode.Usage},
		{"bad kind", nil, []string{"task", "shuffle", "--plan", ref, "--index", "0"}, errcode.ExitUsage, errcode.Usage},
		{"bare digest without store", nil, []string{"task", "map", "--plan", j.PlanDigest.String(), "--index", "0"}, errcode.ExitUsage, errcode.Usage},
		{"reduce before maps", nil, []string{"task", "reduce", "--plan", ref, "--index", "0"}, errcode.ExitError, errcode.TaskNotReady},
		{"aggregate before reduces", nil, []string{"task", "aggregate", "--plan", ref}, errcode.ExitError, errcode.TaskNotReady},
		{"disagreeing index variables", []string{"JOB_COMPLETION_INDEX=0", "SLURM_ARRAY_TASK_ID=1"}, []string{"task", "map", "--plan", ref}, errcode.ExitUsage, errcode.Usage},
		{"missing plan", nil, []string{"task", "map", "--plan", r.dir + "#sha256:" + strings.Repeat("ab", 32), "--index", "0"}, errcode.ExitError, errcode.NotFound},
		{"Kubernetes index", []string{"JOB_COMPLETION_INDEX=1"}, []string{"task", "map", "--plan", ref}, 0, ""},
		{"Slurm index", []string{"SLURM_ARRAY_TASK_ID=0"}, []string{"task", "map", "--store", r.dir, "--plan", j.PlanDigest.String()}, 0, ""},
		{"AWS Batch index", []string{"AWS_BATCH_JOB_ARRAY_INDEX=1"}, []string{"task", "map", "--plan", ref}, 0, ""},
		{"reduce after maps", nil, []string{"task", "reduce", "--plan", ref, "--index", "1", "--wait", "5s"}, 0, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			env := cliEnv()
			for _, name := range coordinator.IndexEnv {
				env = append(env, name+"=")
			}
			res := runCLI(t, append(env, c.env...), c.args...)
			if res.status != c.status || (c.code != "" && !strings.Contains(res.stderr, string(c.code))) {
				t.Fatalf("exit %d, stderr %q; want exit %d with code %s", res.status, res.stderr, c.status, c.code)
			}
		})
	}
	if _, err := r.store.Head(t.Context(), filepath.ToSlash("jobs/"+j.PlanDigest.Hex()+"/reduce/1/commit.json"), ""); err != nil {
		t.Errorf("reduce task 1 did not commit: %v", err)
	}

	// A job with hold records and no task file (what a removal that cut
	// a renewal at its end keeps: its record released) has no task
	// commit records: NOT_FOUND, as a job with nothing at all, not
	// TASK_NOT_READY.
	other := planJob(t, r, 1, 1)
	hold := "jobs/" + other.PlanDigest.Hex() + "/hold/1"
	rec, err := manifest.Encode(&coordinator.HoldRecord{Schema: coordinator.HoldSchema, Plan: other.PlanDigest, Generation: 1,
		Purpose: coordinator.HoldRemove, Command: "shardproof verify", Started: "2026-01-02T03:04:05Z", Released: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.store.Put(t.Context(), hold, bytes.NewReader(rec), objstore.PutOptions{IfNoneMatch: true}); err != nil {
		t.Fatal(err)
	}
	oref := coordinator.PlanRef{Store: r.dir, Plan: other.PlanDigest}.String()
	res := runCLI(t, cliEnv(), "task", "aggregate", "--plan", oref)
	// Its error is its last line: taking the job logs the hold records'
	// removal first.
	lines := strings.Split(strings.TrimSpace(res.stderr), "\n")
	if res.status != errcode.ExitError || !strings.HasPrefix(lines[len(lines)-1], "shardproof: NOT_FOUND: aggregate of plan") {
		t.Fatalf("aggregate of a job with only hold records: exit %d, stderr %q; want NOT_FOUND", res.status, res.stderr)
	}
}

// TestVerifyProcessExecutorS3: the same with the release staged into S3
// (versitygw on loopback): the children reach the store by its s3:// URL
// and the credentials in their environment. Their reduce tasks merge the
// three map tasks' files two at a time first (--reduce-fan-in 2): the
// merged files go to the bucket by streamed upload and are gone with the
// job.
func TestVerifyProcessExecutorS3(t *testing.T) {
	url := s3test.Start(t)
	s, err := objstore.Open(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	r := &release{dir: url, store: s, res: stagetest.Synth(t, s, 3000, 5, 7)}
	want := r.localReport(t)
	res := runCLI(t, cliEnv(), "verify", "--executor", "process", "--store", url, "--root", r.res.Root.String(),
		"--map-tasks", "3", "--reducers", "4", "--parallelism", "2", "--task-binary", os.Args[0], "--reduce-fan-in", "2", "--json")
	got := cliReport(t, res)
	sameReport(t, "process over S3", want, got)
	if got.Execution.ShuffleBytes == 0 {
		t.Error("no shuffle bytes recorded")
	}
	if got.Execution.MergedFiles != 2*got.Execution.Reducers || got.Execution.MergedBytes == 0 {
		t.Errorf("merge level wrote %d files (%d bytes) for %d reducers, want 2 each", got.Execution.MergedFiles, got.Execution.MergedBytes, got.Execution.Reducers)
	}
	// The job's shuffle files and commit records are deleted from the
	// bucket once the report is stored.
	page, err := s.List(t.Context(), "jobs/"+got.Execution.Plan.Hex()+"/", "", 100)
	if err != nil || len(page.Objects) != 0 {
		t.Fatalf("job scratch left in S3: %d keys, err %v", len(page.Objects), err)
	}
	// A resume of the finished plan prints its report from the bucket's
	// plan report record, and runs nothing.
	again := runCLI(t, cliEnv(), "verify", "--executor", "process", "--store", url, "--resume", got.Execution.Plan.String(), "--json")
	if again.status != 0 || again.stdout != res.stdout || !strings.Contains(again.stderr, "had finished") {
		t.Fatalf("resume of the finished plan: exit %d, want its report\n%s%s", again.status, again.stdout, again.stderr)
	}
}

// TestVerifyScratchS3: with --scratch, a verification of a release in S3
// keeps its job's shuffle files and commit records in a local directory,
// for the local executor and for child tasks alike: none reach the bucket,
// while the plan and report are stored there, and the report is the one
// a verification without a scratch gives.
func TestVerifyScratchS3(t *testing.T) {
	url := s3test.Start(t)
	s, err := objstore.Open(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	r := &release{dir: url, store: s, res: stagetest.Synth(t, s, 3000, 5, 7)}
	root := r.res.Root.String()
	want := cliReport(t, runCLI(t, cliEnv(), "verify", "--store", url, "--root", root, "--json"))
	for _, executor := range []string{"local", "process"} {
		t.Run(executor, func(t *testing.T) {
			scratch := filepath.Join(t.TempDir(), "scratch") // verify creates it
			args := []string{"verify", "--executor", executor,
				"--store", url, "--scratch", scratch, "--root", root, "--reducers", "3", "--keep-job", "--json"}
			if executor == "process" {
				args = append(args, "--task-binary", os.Args[0])
			}
			got := cliReport(t, runCLI(t, cliEnv(), args...))
			sameReport(t, executor+" with a scratch", want, got)
			// The leaf index stage put in the bucket (a versioned
			// object, read by exact version) let every member go unread.
			if n := len(r.res.SnapshotDoc.Members); got.Execution.SnapshotMembersSkipped != n {
				t.Fatalf("%d of %d snapshot members skipped; want all, from the index in the bucket", got.Execution.SnapshotMembersSkipped, n)
			}
			page, err := s.List(t.Context(), "jobs/", "", 100)
			if err != nil || len(page.Objects) != 0 {
				t.Fatalf("the bucket holds %d job keys (err %v), want none", len(page.Objects), err)
			}
			if _, err := s.Head(t.Context(), "blobs/sha256/"+got.Execution.Plan.Hex(), ""); err != nil {
				t.Fatalf("the plan is not in the bucket: %v", err)
			}
			fs, err := objstore.Open(t.Context(), scratch)
			if err != nil {
				t.Fatal(err)
			}
			page, err = fs.List(t.Context(), "", "", 1000)
			if err != nil {
				t.Fatal(err)
			}
			commits := 0
			for _, o := range page.Objects {
				if !strings.HasPrefix(o.Key, "jobs/"+got.Execution.Plan.Hex()+"/") {
					t.Fatalf("scratch holds %s, outside the job", o.Key)
				}
				if strings.HasSuffix(o.Key, "/commit.json") {
					commits++
				}
			}
			if commits != got.Execution.MapTasks+3 {
				t.Fatalf("scratch holds %d commit records, want %d map + 3 reduce", commits, got.Execution.MapTasks)
			}
			// prune-jobs finds the kept job in the scratch store.
			res := runCLI(t, cliEnv(), "store", "prune-jobs", "--store", scratch, "--older-than", "0s")
			if res.status != 0 || !strings.Contains(res.stdout, "deleted\tjobs/"+got.Execution.Plan.Hex()+"/") {
				t.Fatalf("prune-jobs on the scratch: exit %d\n%s%s", res.status, res.stdout, res.stderr)
			}
		})
	}
}

// TestResumeWithAnEngine: a verification an engine could not finish (here
// a map task's leftover output that its rerun cannot match, NONDETERMINISM)
// prints the plan and the command that finishes it; once the cause is
// gone, `verify --executor process --resume PLAN` runs what did not
// commit and reports what the local executor does.
func TestResumeWithAnEngine(t *testing.T) {
	r := newRelease(t)
	want := r.localReport(t)
	j := planJob(t, r, 3, 2)
	stray := "jobs/" + j.PlanDigest.Hex() + "/map/1/r0.arrow"
	if _, err := r.store.Put(t.Context(), stray, strings.NewReader("stray"), objstore.PutOptions{IfNoneMatch: true}); err != nil {
		t.Fatal(err)
	}
	args := []string{"verify", "--executor", "process", "--store", r.dir, "--resume", j.PlanDigest.String(), "--task-binary", os.Args[0], "--json"}
	res := runCLI(t, cliEnv(), args...)
	hint := "--executor process --store '" + r.dir + "' --resume " + j.PlanDigest.String()
	if res.status != errcode.ExitInvalid || !strings.Contains(res.stderr, "NONDETERMINISM") || !strings.Contains(res.stderr, hint) {
		t.Fatalf("exit %d; want 1 with NONDETERMINISM and the resume command %q:\n%s", res.status, hint, res.stderr)
	}
	if err := r.store.(objstore.Deleter).DeletePrefix(t.Context(), "jobs/"+j.PlanDigest.Hex()+"/map/1/"); err != nil {
		t.Fatal(err)
	}
	got := cliReport(t, runCLI(t, cliEnv(), args...))
	sameReport(t, "resumed with the process executor", want, got)
	if got.Execution.Plan != j.PlanDigest || got.Execution.Executor != "process" {
		t.Errorf("execution %+v, want plan %s on the process executor", got.Execution, j.PlanDigest)
	}
}
