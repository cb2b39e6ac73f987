package slurmtest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestArrayWithDependency runs what the slurm executor relies on: a job
// array whose tasks see SLURM_ARRAY_TASK_ID, a second array held by an
// afterok dependency, and scontrol reporting both as COMPLETED.
func TestArrayWithDependency(t *testing.T) {
	c := Start(t)
	out := filepath.Join(c.Dir, "out")
	if err := os.Mkdir(out, 0o755); err != nil {
		t.Fatal(err)
	}
	first := c.Run("sbatch", "--parsable", "--array=0-3", "-o", filepath.Join(out, "a_%a.txt"),
		"--wrap", "echo task $SLURM_ARRAY_TASK_ID")
	second := c.Run("sbatch", "--parsable", "--array=0-1", "--dependency=afterok:"+first, "--kill-on-invalid-dep=yes",
		"-o", filepath.Join(out, "b_%a.txt"), "--wrap", "ls "+out+" | grep -c '^a_'")
	deadline := time.Now().Add(60 * time.Second)
	for c.Run("squeue", "-h", "-j", first+","+second) != "" {
		if time.Now().After(deadline) {
			t.Fatalf("jobs still queued after 60s:\n%s", c.Logs())
		}
		time.Sleep(300 * time.Millisecond)
	}
	for i := range 4 {
		b, err := os.ReadFile(filepath.Join(out, fmt.Sprintf("a_%d.txt", i)))
		if err != nil || strings.TrimSpace(string(b)) != fmt.Sprintf("task %d", i) {
			t.Errorf("array task %d wrote %q, %v", i, b, err)
		}
	}
	for i := range 2 {
		// The dependent task ran only after all four outputs existed.
		b, err := os.ReadFile(filepath.Join(out, fmt.Sprintf("b_%d.txt", i)))
		if err != nil || strings.TrimSpace(string(b)) != "4" {
			t.Errorf("dependent task %d saw %q outputs, %v", i, b, err)
		}
	}
	for _, id := range []string{first, second} {
		for _, line := range strings.Split(c.Run("scontrol", "show", "job", "-o", id), "\n") {
			if !strings.Contains(line, "JobState=COMPLETED") || !strings.Contains(line, "ExitCode=0:0") {
				t.Errorf("job %s: %s", id, line)
			}
		}
	}
}
