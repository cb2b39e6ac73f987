package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shardproof/shardproof/coordinator"
	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/internal/slurmtest"
	"github.com/shardproof/shardproof/objstore"
)

// TestVerifySlurmExecutor runs verify --executor slurm against a real
// Slurm cluster on loopback: a map array, a reduce array held by afterok,
// each array task running `shardproof task` with SLURM_ARRAY_TASK_ID. The
// report equals the local executor's. Then a plan whose map task 1 cannot
// succeed (its commit record is corrupt, and it has run as often as a
// task may run again over a damaged record): the task script retries it, the
// map array fails, --kill-on-invalid-dep cancels the reducers, and the
// error carries the task's own code.
func TestVerifySlurmExecutor(t *testing.T) {
	c := slurmtest.Start(t)
	r := newRelease(t)
	want := r.localReport(t)
	// The job's files go to a scratch directory (a space in its path, for
	// the task script's quoting), where --keep-job leaves them.
	scratch := filepath.Join(t.TempDir(), "scr atch")
	// verify itself runs as a Kubernetes Indexed Job's pod would: sbatch
	// exports its environment, index variable and all, to the array
	// tasks, whose index is still SLURM_ARRAY_TASK_ID's.
	res := runCLI(t, cliEnv("SLURM_CONF="+c.Conf, "JOB_COMPLETION_INDEX=7"), "verify", "--executor", "slurm", "--store", r.dir,
		"--root", r.res.Root.String(), "--map-tasks", "4", "--reducers", "3", "--parallelism", "2",
		"--task-binary", os.Args[0], "--slurm-dir", t.TempDir(), "--scratch", scratch, "--keep-job", "--json")
	got := cliReport(t, res)
	sameReport(t, "slurm", want, got)
	if got.Execution.Executor != "slurm" || got.Execution.MapTasks != 4 || got.Execution.Reducers != 3 {
		t.Errorf("execution section %+v, want executor slurm with 4 map tasks and 3 reducers", got.Execution)
	}
	// The array's reduce tasks found the plan's snapshot leaf index (stage
	// wrote it) and, the release matching, read no member.
	if n := len(r.res.SnapshotDoc.Members); got.Execution.SnapshotMembersSkipped != n || got.Execution.SnapshotMembersRead != 0 {
		t.Errorf("Slurm reduce tasks read %d members and skipped %d of %d; want all skipped", got.Execution.SnapshotMembersRead, got.Execution.SnapshotMembersSkipped, n)
	}
	for _, k := range []string{"map/3/commit.json", "reduce/2/commit.json"} {
		if _, err := os.Stat(filepath.Join(scratch, "jobs", got.Execution.Plan.Hex(), k)); err != nil {
			t.Errorf("the Slurm tasks' %s is not in the scratch: %v", k, err)
		}
	}
	if _, err := os.Stat(filepath.Join(r.dir, "jobs", got.Execution.Plan.Hex())); !os.IsNotExist(err) {
		t.Errorf("the Slurm tasks wrote the job to the store: %v", err)
	}

	j := planJob(t, r, 3, 2)
	// Corrupt in each of the 3 versions a map task's runs may write: a
	// map task whose record is damaged runs again, up to 3 runs in all.
	bad := "jobs/" + j.PlanDigest.Hex() + "/map/1/commit.json"
	for range 3 {
		if _, err := r.store.Put(t.Context(), bad, strings.NewReader("{"), objstore.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	eng := &coordinator.Slurm{Binary: os.Args[0], Dir: dir, Attempts: 2, Env: cliEnv("SLURM_CONF=" + c.Conf)}
	_, err := coordinator.RunWith(t.Context(), r.store, r.dir, j.PlanDigest, eng)
	var terr *coordinator.TaskError
	if !errors.As(err, &terr) || terr.Kind != coordinator.KindMap || terr.Index != 1 || errcode.Of(err) != errcode.ShuffleCorrupt {
		t.Fatalf("got %v; want map task 1 failing with %s", err, errcode.ShuffleCorrupt)
	}
	if n := strings.Count(terr.Log, "retrying"); n != 1 {
		t.Errorf("task script retried %d times, want 1 (2 attempts): %s", n, terr.Log)
	}
	jobs := c.Run("scontrol", "show", "job", "-o")
	if !strings.Contains(jobs, "JobName=shardproof-"+j.PlanDigest.Hex()[:12]+"-reduce") ||
		!strings.Contains(jobs, "Reason=DependencyNeverSatisfied") {
		t.Errorf("reduce array was not cancelled by the failed dependency:\n%s", jobs)
	}
	for i := range 2 {
		key := fmt.Sprintf("jobs/%s/reduce/%d/commit.json", j.PlanDigest.Hex(), i)
		if _, err := r.store.Head(t.Context(), key, ""); !objstore.IsNotExist(err) {
			t.Errorf("reduce task %d: commit record %v; want none, a map task failed", i, err)
		}
	}
}

// TestSlurmExecutorOperatorPaths: what a site's Slurm does that the
// cluster above does not.
//   - The controller forgot the finished arrays (MinJobAge, 300 s by
//     default, passed during a long reduce phase): `scontrol show job`
//     answers "Invalid job id". The executor does not fail a
//     verification whose tasks all committed; the commit records decide.
//     (scontrol is decorated: its "show job" answers as after a purge.)
//   - Arrays larger than MaxArraySize (1001 by default) are USAGE before
//     anything is submitted, naming the flag to change.
//   - A relative --task-binary and --slurm-dir work (array tasks start in
//     the work directory, and slurmd opens their logs from its own).
func TestSlurmExecutorOperatorPaths(t *testing.T) {
	c := slurmtest.Start(t)
	r := newRelease(t)
	want := r.localReport(t)

	real, err := exec.LookPath("scontrol")
	if err != nil {
		t.Fatal(err)
	}
	wrap := t.TempDir()
	called := filepath.Join(wrap, "called")
	script := "#!/bin/sh\nif [ \"$1 $2\" = \"show job\" ]; then touch " + called + "; echo 'slurm_load_jobs error: Invalid job id specified' >&2; exit 1; fi\nexec " + real + " \"$@\"\n"
	if err := os.WriteFile(filepath.Join(wrap, "scontrol"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	// exec looks commands up on this process's PATH, not the child
	// environment's.
	path := wrap + string(os.PathListSeparator) + os.Getenv("PATH")
	t.Setenv("PATH", path)
	env := append(cliEnv("SLURM_CONF="+c.Conf), "PATH="+path)
	j := planJob(t, r, 2, 2)
	out, err := coordinator.RunWith(t.Context(), r.store, r.dir, j.PlanDigest, &coordinator.Slurm{Binary: os.Args[0], Dir: t.TempDir(), Env: env})
	if err != nil {
		t.Fatalf("arrays the controller forgot: %v", err)
	}
	sameReport(t, "slurm, purged", want, out.Report)
	if _, err := os.Stat(called); err != nil {
		t.Fatalf("the decorated scontrol was never asked: %v", err)
	}
	t.Setenv("PATH", os.Getenv("PATH")[len(wrap)+1:])

	// Reducers cut at member boundaries unless members are mapped.
	_, bigPlan, err := coordinator.NewPlan(t.Context(), r.store, coordinator.PlanOptions{
		Root: r.res.Root, MapTasks: 2, Reducers: 1002, MapMembers: true, Parallelism: 2, Tool: "shardproof " + version,
	})
	if err != nil {
		t.Fatal(err)
	}
	before := c.Run("squeue", "-h", "-o", "%i")
	_, err = coordinator.RunWith(t.Context(), r.store, r.dir, bigPlan, &coordinator.Slurm{Binary: os.Args[0], Dir: t.TempDir(), Env: cliEnv("SLURM_CONF=" + c.Conf)})
	if errcode.Of(err) != errcode.Usage || !strings.Contains(err.Error(), "MaxArraySize 1001") || !strings.Contains(err.Error(), "--reducers 1001") {
		t.Fatalf("1002 reducers: %v; want USAGE naming MaxArraySize and --reducers", err)
	}
	if after := c.Run("squeue", "-h", "-o", "%i"); after != before {
		t.Errorf("jobs submitted before the refusal: %q, then %q", before, after)
	}

	cwd := t.TempDir()
	if err := os.Symlink(os.Args[0], filepath.Join(cwd, "sp")); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), os.Args[0], "verify", "--executor", "slurm", "--store", r.dir, "--root", r.res.Root.String(),
		"--map-tasks", "2", "--reducers", "2", "--task-binary", "./sp", "--slurm-dir", "work", "--json")
	cmd.Env, cmd.Dir = cliEnv("SLURM_CONF="+c.Conf), cwd
	sameReport(t, "slurm, relative paths", want, cliReport(t, runChild(t, cmd, cmd.Args)))
	if logs, _ := filepath.Glob(filepath.Join(cwd, "work", "*-map-*.log")); len(logs) != 2 {
		t.Errorf("map task logs in the relative --slurm-dir: %v, want 2", logs)
	}
}
