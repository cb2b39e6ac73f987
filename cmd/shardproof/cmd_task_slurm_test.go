package main

import (
	"errors"
	"fmt"
	"os"
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
// succeed (its commit record is corrupt): the task script retries it, the
// map array fails, --kill-on-invalid-dep cancels the reducers, and the
// error carries the task's own code.
func TestVerifySlurmExecutor(t *testing.T) {
	c := slurmtest.Start(t)
	r := newRelease(t)
	want := r.localReport(t)
	// The job's files go to a scratch directory (a space in its path, for
	// the task script's quoting), where --keep-job leaves them.
	scratch := filepath.Join(t.TempDir(), "scr atch")
	res := runCLI(t, cliEnv("SLURM_CONF="+c.Conf), "verify", "--executor", "slurm", "--store", r.dir,
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
	bad := "jobs/" + j.PlanDigest.Hex() + "/map/1/commit.json"
	if _, err := r.store.Put(t.Context(), bad, strings.NewReader("{"), objstore.PutOptions{IfNoneMatch: true}); err != nil {
		t.Fatal(err)
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
