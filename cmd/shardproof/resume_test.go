//go:build unix

package main

import (
	"bytes"
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
	"github.com/shardproof/shardproof/manifest"
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
// process executor, its orphaned tasks are waited for before the resume
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
