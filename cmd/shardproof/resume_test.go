//go:build unix

package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shardproof/shardproof/coordinator"
	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/internal/procid"
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/objstore"
)

// planResume stores a plan of r's release (one map task per shard) and
// starts `verify --resume` of it, tasks one at a time, as a child process
// in a process group of its own (so the tasks of the process executor
// can be waited for once it is killed).
func planResume(t *testing.T, r *release, nonce string, args ...string) (manifest.Digest, *exec.Cmd, *bytes.Buffer) {
	t.Helper()
	_, pd, err := coordinator.NewPlan(t.Context(), r.store, coordinator.PlanOptions{
		Root: r.res.Root, MapTasks: 5, Reducers: 2, Parallelism: 1, Tool: "shardproof " + version, Nonce: nonce,
	})
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], append([]string{"verify", "--store", r.dir, "--resume", pd.String(), "--json", "--parallelism", "1"}, args...)...)
	cmd.Env = cliEnv()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGCONT)
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	})
	return pd, cmd, &stdout
}

// waitFor polls until a file matches pattern (under dir) and returns
// true, or returns false once cmd has exited without one.
func waitFor(t *testing.T, cmd *exec.Cmd, exited <-chan error, pattern string) bool {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(200 * time.Microsecond) {
		if m, _ := filepath.Glob(pattern); len(m) > 0 {
			return true
		}
		select {
		case <-exited:
			return false
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%v: no %s after 2 minutes", cmd.Args, pattern)
		}
	}
}

// Two `verify --resume` of one plan at once: the second is refused at
// once with JOB_IN_USE naming the first (stopped mid-run, so it holds the
// job for certain), `store prune-jobs` keeps the job however old, and
// once the first has finished, the second prints its report, byte for
// byte, and the job's files are gone. The second used to run the job as
// well, and fail with TASK_NOT_READY when the first deleted the job's
// files under it (or the first failed, when the second did), leaving
// half a job behind.
func TestVerifyCLIResumeConcurrent(t *testing.T) {
	r := newRelease(t)
	var (
		pd     manifest.Digest
		first  *exec.Cmd
		stdout *bytes.Buffer
		exited chan error
	)
	for attempt := 1; ; attempt++ {
		pd, first, stdout = planResume(t, r, fmt.Sprint("concurrent ", attempt))
		exited = make(chan error, 1)
		go func() { exited <- first.Wait() }()
		// Stopped once its first map task has committed: mid-run.
		if !waitFor(t, first, exited, filepath.Join(r.dir, "jobs", pd.Hex(), "map", "0", "commit.json", "@*")) {
			t.Fatal("the first resume exited before its first map task committed")
		}
		syscall.Kill(first.Process.Pid, syscall.SIGSTOP)
		if m, _ := filepath.Glob(filepath.Join(r.dir, "index", "plans", pd.Hex(), "report.v1", "@*")); len(m) == 0 {
			break
		}
		// This machine was too slow to stop it before it finished.
		syscall.Kill(first.Process.Pid, syscall.SIGCONT)
		<-exited
		if attempt == 5 {
			t.Fatal("the first resume finished before it could be stopped, five times")
		}
	}
	second := runCLI(t, cliEnv(), "verify", "--store", r.dir, "--resume", pd.String(), "--json")
	if second.status != errcode.ExitError || !strings.Contains(second.stderr, "shardproof: JOB_IN_USE: plan "+pd.String()) ||
		!strings.Contains(second.stderr, fmt.Sprintf("(pid %d on host", first.Process.Pid)) || second.stdout != "" {
		t.Fatalf("a second resume while the first runs: exit %d, want %d with JOB_IN_USE naming pid %d\n%s%s",
			second.status, errcode.ExitError, first.Process.Pid, second.stdout, second.stderr)
	}
	if runtime.GOOS == "linux" && !strings.Contains(second.stderr, "running on this machine") {
		t.Errorf("the first resume was not looked up on this machine: %s", second.stderr)
	}
	if strings.Contains(second.stderr, "finishes it") {
		t.Errorf("the refusal prints the resume hint, as if this run had stopped: %s", second.stderr)
	}
	// With an engine alike.
	engine := runCLI(t, cliEnv(), "verify", "--store", r.dir, "--resume", pd.String(), "--executor", "process")
	if engine.status != errcode.ExitError || !strings.Contains(engine.stderr, "shardproof: JOB_IN_USE: plan "+pd.String()) || strings.Contains(engine.stderr, "finishes it") {
		t.Fatalf("a second resume with the process executor: exit %d\n%s", engine.status, engine.stderr)
	}
	// prune-jobs leaves a held job alone, however old it is.
	prune := runCLI(t, cliEnv(), "store", "prune-jobs", "--store", r.dir, "--older-than", "0s")
	if prune.status != 0 || !strings.Contains(prune.stdout, "kept\tjobs/"+pd.Hex()+"/") || !strings.Contains(prune.stdout, fmt.Sprintf(" verify\" (pid %d on host", first.Process.Pid)) {
		t.Fatalf("prune-jobs while a resume runs: exit %d\n%s%s", prune.status, prune.stdout, prune.stderr)
	}
	if _, err := os.Stat(filepath.Join(r.dir, "jobs", pd.Hex(), "map", "0", "commit.json")); err != nil {
		t.Fatalf("prune-jobs deleted a held job: %v", err)
	}

	syscall.Kill(first.Process.Pid, syscall.SIGCONT)
	if err := <-exited; err != nil {
		t.Fatalf("the first resume, continued: %v", err)
	}
	js := cliReport(t, cliResult{stdout: stdout.String()})
	if js.Verdict != manifest.Verified || js.Execution.Plan != pd {
		t.Fatalf("first resume: verdict %s plan %s", js.Verdict, js.Execution.Plan)
	}
	again := runCLI(t, cliEnv(), "verify", "--store", r.dir, "--resume", pd.String(), "--json")
	if again.status != 0 || again.stdout != stdout.String() || !strings.Contains(again.stderr, "had finished") {
		t.Fatalf("the second resume, once the first finished: exit %d, want the first's report\n%s%s", again.status, again.stdout, again.stderr)
	}
	if _, err := os.Stat(filepath.Join(r.dir, "jobs", pd.Hex())); !os.IsNotExist(err) {
		t.Fatalf("the job's files are left: %v", err)
	}
}

// exitStatusOf is the exit status Wait's error gives.
func exitStatusOf(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

// TestVerifyCLIKilledAndResumed: a verification killed with SIGKILL
// during its map phase, after it, during its reduce phase, or once its
// report is recorded (deleting its job's files), is finished by `verify
// --resume`: the report equals an undisturbed run's, nothing of the job
// is left, and `store prune-jobs` finds nothing. The killed run is itself
// a `verify --resume` of a plan stored beforehand, so its plan is known;
// it runs exactly what a verify runs once it has planned. With the
// process executor, its orphaned tasks (on Linux none: they die with it,
// TestVerifyCLIKilledTasksDie) are waited for before the resume
// (TestConcurrentDuplicateTasks runs copies of a task at once).
func TestVerifyCLIKilledAndResumed(t *testing.T) {
	r := newRelease(t)
	want := r.localReport(t)
	if err := coordinator.RemoveJob(t.Context(), r.store, want.Execution.Plan); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		executor, at string
	}{
		{"local", "map/0/commit.json"},
		{"local", "map/4/commit.json"},
		{"local", "reduce/0/commit.json"},
		{"local", "report"},
		{"process", "map/0/commit.json"},
		{"process", "reduce/0/commit.json"},
	} {
		t.Run(c.executor+" "+c.at, func(t *testing.T) {
			pd, cmd, _ := planResume(t, r, c.executor+" "+c.at, "--executor", c.executor)
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			at := filepath.Join(r.dir, "jobs", pd.Hex(), c.at, "@*")
			if c.at == "report" {
				at = filepath.Join(r.dir, "index", "plans", pd.Hex(), "report.v1", "@*")
			}
			if !waitFor(t, cmd, exited, at) {
				t.Skip("the run finished before it could be killed")
			}
			syscall.Kill(cmd.Process.Pid, syscall.SIGKILL)
			if status := exitStatusOf(<-exited); status != -1 {
				t.Skipf("the run exited (%d) before it was killed", status)
			}
			for deadline := time.Now().Add(time.Minute); syscall.Kill(-cmd.Process.Pid, 0) == nil; time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("the killed run's tasks did not end")
				}
			}
			res := runCLI(t, cliEnv(), "verify", "--store", r.dir, "--resume", pd.String(), "--json", "--executor", c.executor)
			js := cliReport(t, res)
			sameReport(t, "resumed after kill -9 at "+c.at, want, js)
			if js.Execution.Plan != pd {
				t.Fatalf("resumed report of plan %s, want %s", js.Execution.Plan, pd)
			}
			if _, err := os.Stat(filepath.Join(r.dir, "jobs", pd.Hex())); !os.IsNotExist(err) {
				t.Fatalf("the job's files are left after the resume: %v", err)
			}
			if jobs, err := coordinator.ListJobs(t.Context(), r.store); err != nil || len(jobs) != 0 {
				t.Fatalf("jobs left for prune-jobs: %+v, %v", jobs, err)
			}
		})
	}
}

// A job whose hold record this build cannot read (a newer build's, with
// a field this one does not know, renewed a moment ago) is held:
// `store prune-jobs`, its dry run too, keeps it and `verify --resume`
// is JOB_IN_USE, each saying that the record could not be read and why,
// not an empty command, PID and host; `verify --resume --take-over`
// takes it at once and finishes the job. (Such a record was taken for a
// holder that is gone at once: the newer build's live holder was taken
// over, and two processes ran the job.)
func TestVerifyCLIResumeUnreadableHolder(t *testing.T) {
	r := newRelease(t)
	ctx := t.Context()
	_, pd, err := coordinator.NewPlan(ctx, r.store, coordinator.PlanOptions{
		Root: r.res.Root, MapTasks: 2, Reducers: 1, Parallelism: 1, Tool: "shardproof " + version, Nonce: "unreadable holder",
	})
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(&coordinator.HoldRecord{Schema: coordinator.HoldSchema, Plan: pd, Generation: 1, Purpose: coordinator.HoldRun,
		Command: "shardproof verify", Process: procid.ID{Host: "elsewhere", PID: 4242, Machine: "another-boot/pid:[1]", Start: 1},
		Started: time.Now().UTC().Format(time.RFC3339)})
	if err != nil {
		t.Fatal(err)
	}
	b = bytes.Replace(b, []byte(`"process":`), []byte(`"lease":"7","process":`), 1)
	if _, err := r.store.Put(ctx, "jobs/"+pd.Hex()+"/hold/1", bytes.NewReader(b), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	// The record was renewed 10 seconds ago: older than --older-than 0s
	// by either clock, and fresh.
	renewed := time.Now().Add(-10 * time.Second)
	versions, err := filepath.Glob(filepath.Join(r.dir, "jobs", pd.Hex(), "hold", "1", "*"))
	if err != nil || len(versions) == 0 {
		t.Fatalf("the hold record's versions: %v, %v", versions, err)
	}
	for _, v := range versions {
		if err := os.Chtimes(v, renewed, renewed); err != nil {
			t.Fatal(err)
		}
	}
	const unreadable = "in use by a holder whose record could not be read (generation 1: BAD_DOCUMENT: decode: BAD_DOCUMENT: $.lease: unknown field)"
	kept := "kept\tjobs/" + pd.Hex() + "/"
	pruneFlags.olderThan, pruneFlags.dryRun = 24*time.Hour, false
	stdout, _, err := runInProcess(t, nil, "store", "prune-jobs", "--store", r.dir, "--older-than", "0s", "--dry-run")
	if out := string(stdout); err != nil || !strings.Contains(out, kept) || !strings.Contains(out, unreadable+", renewed") {
		t.Fatalf("prune-jobs --dry-run of a job whose holder's record cannot be read: %q, %v", out, err)
	}
	if out, err := storeRun(t, nil, "store", "prune-jobs", "--store", r.dir, "--older-than", "0s"); err != nil ||
		!strings.Contains(out, kept) || !strings.Contains(out, unreadable) {
		t.Fatalf("prune-jobs of a job whose holder's record cannot be read: %q, %v", out, err)
	}

	args := []string{"verify", "--store", r.dir, "--resume", pd.String(), "--json"}
	held := runCLI(t, cliEnv(), args...)
	if held.status != errcode.ExitError || !strings.Contains(held.stderr, "JOB_IN_USE") ||
		!strings.Contains(held.stderr, "its job is held by a process whose hold record could not be read (generation 1: ") ||
		!strings.Contains(held.stderr, "$.lease: unknown field") || strings.Contains(held.stderr, "pid 0") ||
		!strings.Contains(held.stderr, "--resume "+pd.String()+" --take-over") || held.stdout != "" {
		t.Fatalf("resume of a job whose holder's record cannot be read: exit %d, want %d, JOB_IN_USE saying the record could not be read\n%s",
			held.status, errcode.ExitError, held.stderr)
	}
	taken := runCLI(t, cliEnv(), append(args, "--take-over")...)
	if js := cliReport(t, taken); js.Verdict != manifest.Verified || js.Execution.Plan != pd {
		t.Fatalf("resume --take-over: verdict %s, plan %s", js.Verdict, js.Execution.Plan)
	}
	if !strings.Contains(taken.stderr, "plan "+pd.String()+": took its job over from a process whose hold record could not be read (generation 1: ") ||
		strings.Contains(taken.stderr, "pid 0") {
		t.Fatalf("resume --take-over does not say the holder's record could not be read:\n%s", taken.stderr)
	}
}

// TestVerifyCLIResumeTakeOver: a job whose holder on another machine
// renewed its hold a moment ago (and whose machine then went down) is
// JOB_IN_USE for `verify --resume`, which names --take-over; `verify
// --resume --take-over` takes the job at once, prints the holder it
// displaced, and finishes the job. A holder running on this machine is
// still JOB_IN_USE for --take-over and keeps the job; --take-over without
// --resume is a usage error.
func TestVerifyCLIResumeTakeOver(t *testing.T) {
	r := newRelease(t)
	ctx := t.Context()
	plan := func(nonce string) manifest.Digest {
		_, pd, err := coordinator.NewPlan(ctx, r.store, coordinator.PlanOptions{
			Root: r.res.Root, MapTasks: 2, Reducers: 1, Parallelism: 1, Tool: "shardproof " + version, Nonce: nonce,
		})
		if err != nil {
			t.Fatal(err)
		}
		return pd
	}
	var pd manifest.Digest
	for _, executor := range []string{"local", "process"} {
		pd = plan("take-over " + executor)
		b, err := json.Marshal(&coordinator.HoldRecord{Schema: coordinator.HoldSchema, Plan: pd, Generation: 1, Purpose: coordinator.HoldRun,
			Command: "shardproof verify", Process: procid.ID{Host: "elsewhere", PID: 4242, Machine: "another-boot/pid:[1]", Start: 1},
			Started: time.Now().UTC().Format(time.RFC3339)})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.store.Put(ctx, "jobs/"+pd.Hex()+"/hold/1", bytes.NewReader(b), objstore.PutOptions{}); err != nil {
			t.Fatal(err)
		}
		args := []string{"verify", "--store", r.dir, "--resume", pd.String(), "--json", "--executor", executor}
		held := runCLI(t, cliEnv(), args...)
		if held.status != errcode.ExitError || !strings.Contains(held.stderr, "JOB_IN_USE") || !strings.Contains(held.stderr, "pid 4242 on host elsewhere") ||
			!strings.Contains(held.stderr, "--resume "+pd.String()+" --take-over") {
			t.Fatalf("%s: resume of a job held on another machine: exit %d, want %d, JOB_IN_USE naming the holder and --take-over\n%s", executor, held.status, errcode.ExitError, held.stderr)
		}
		taken := runCLI(t, cliEnv(), append(args, "--take-over")...)
		if js := cliReport(t, taken); js.Verdict != manifest.Verified || js.Execution.Plan != pd {
			t.Fatalf("%s: resume --take-over: verdict %s, plan %s", executor, js.Verdict, js.Execution.Plan)
		}
		if !strings.Contains(taken.stderr, "plan "+pd.String()+`: took its job over from "shardproof verify" (pid 4242 on host elsewhere, run since`) ||
			!strings.Contains(taken.stderr, "hold last renewed") || !strings.Contains(taken.stderr, "it stops at its next renewal") {
			t.Fatalf("%s: resume --take-over does not name the holder it displaced:\n%s", executor, taken.stderr)
		}
		if _, err := os.Stat(filepath.Join(r.dir, "jobs", pd.Hex())); !os.IsNotExist(err) {
			t.Fatalf("%s: the job's files are left: %v", executor, err)
		}
	}

	usage := runCLI(t, cliEnv(), "verify", "--store", r.dir, "--root", r.res.Root.String(), "--take-over")
	if usage.status != errcode.ExitUsage || !strings.Contains(usage.stderr, "--take-over") {
		t.Fatalf("--take-over without --resume: exit %d, want %d\n%s", usage.status, errcode.ExitUsage, usage.stderr)
	}

	// A plan that does not exist (mistyped) is refused, and no job is
	// made for it.
	typo := manifest.Sum([]byte("a plan never stored"))
	missing := runCLI(t, cliEnv(), "verify", "--store", r.dir, "--resume", typo.String(), "--take-over")
	if missing.status == 0 || !strings.Contains(missing.stderr, "NOT_FOUND") {
		t.Fatalf("resume --take-over of a plan never stored: exit %d, want NOT_FOUND\n%s", missing.status, missing.stderr)
	}
	if _, err := os.Stat(filepath.Join(r.dir, "jobs", typo.Hex())); !os.IsNotExist(err) {
		t.Fatalf("resume --take-over of a plan never stored made its job: %v", err)
	}

	if runtime.GOOS != "linux" {
		return
	}
	// This test process holds the job: a live process of this machine.
	pd = plan("take-over from this machine")
	h, err := coordinator.Acquire(ctx, r.store, pd, coordinator.HoldRun)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release()
	refused := runCLI(t, cliEnv(), "verify", "--store", r.dir, "--resume", pd.String(), "--json", "--take-over")
	if refused.status != errcode.ExitError || !strings.Contains(refused.stderr, "JOB_IN_USE") ||
		!strings.Contains(refused.stderr, fmt.Sprintf("(pid %d on host", os.Getpid())) || !strings.Contains(refused.stderr, "running on this machine") ||
		strings.Contains(refused.stderr, "took its job over") || refused.stdout != "" {
		t.Fatalf("resume --take-over of a job held on this machine: exit %d, want %d with JOB_IN_USE naming pid %d\n%s%s",
			refused.status, errcode.ExitError, os.Getpid(), refused.stdout, refused.stderr)
	}
	if m, _ := filepath.Glob(filepath.Join(r.dir, "jobs", pd.Hex(), "*", "*")); len(m) != 1 || h.Lost() != nil {
		t.Fatalf("a refused take-over left %v in the job; the holder lost it: %v", m, h.Lost())
	}
}
