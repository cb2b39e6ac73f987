//go:build unix

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shardproof/shardproof/stage"
)

// A synth killed with SIGKILL leaves its spool directories in $TMPDIR
// (nothing runs to remove them); the next synth removes them once their
// locks show nobody holds them (internal/scratchdir's test has a live
// holder's directory kept).
func TestKilledStageDebrisIsSwept(t *testing.T) {
	tmp := t.TempDir()
	env := cliEnv("TMPDIR=" + tmp)
	cmd := exec.CommandContext(t.Context(), os.Args[0], "synth", "--samples", "60000", "--shards", "8", "--store", filepath.Join(t.TempDir(), "store"))
	cmd.Env = env
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	debris := func() []string {
		var out []string
		es, _ := os.ReadDir(tmp)
		for _, e := range es {
			if strings.HasPrefix(e.Name(), stage.StageTempPrefix) || strings.HasPrefix(e.Name(), stage.MembersTempPrefix) {
				out = append(out, filepath.Join(tmp, e.Name()))
			}
		}
		return out
	}
	// Killed only once every directory has its lock: one killed between
	// its mkdir and its lock file is an older build's kind, swept only
	// after a day (failed this test once under load).
	locked := func() bool {
		ds := debris()
		for _, d := range ds {
			if _, err := os.Stat(filepath.Join(d, ".lock")); err != nil {
				return false
			}
		}
		return len(ds) > 0
	}
	for deadline := time.Now().Add(60 * time.Second); !locked(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatal("synth made no temporary directory")
		}
	}
	cmd.Process.Kill()
	cmd.Wait()
	left := debris()
	if len(left) == 0 {
		t.Fatal("the killed synth left nothing to sweep (it finished first?)")
	}
	// A lock is trusted once it is a minute old: age them.
	old := time.Now().Add(-time.Hour)
	for _, d := range left {
		os.Chtimes(filepath.Join(d, ".lock"), old, old)
	}
	r := runCLI(t, env, "synth", "--samples", "50", "--shards", "1", "--store", filepath.Join(t.TempDir(), "store2"))
	if r.status != 0 {
		t.Fatalf("second synth: exit %d, %s", r.status, r.stderr)
	}
	if still := debris(); len(still) != 0 {
		t.Fatalf("the dead synth's directories are still there: %v", still)
	}
}
