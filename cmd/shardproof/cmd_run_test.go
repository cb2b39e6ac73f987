package main

import (
	"strings"
	"testing"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/stage/stagetest"
)

// `run reassign` is a compare-and-set on the run's epoch: the same command
// with the same --expect-epoch, sent again after it applied, changes
// nothing; another from that epoch is STALE_EPOCH; without the flag it
// starts from the current epoch.
func TestRunReassignCLI(t *testing.T) {
	dir, s := tempFileStore(t)
	gen := stagetest.Synth(t, s, 400, 2, 1)
	node, _ := startLeader(t)
	if out, err := cli(t, "publish", "-q", "--store", dir, "--gate", node.URL(), "--alias", "main", "--root", gen.Root.String()); err != nil {
		t.Fatalf("publish: %q %v", out, err)
	}
	run := func(args ...string) (string, error) {
		return cli(t, append(append([]string{"run"}, args...), "--gate", node.URL())...)
	}
	if out, err := run("create", "job", "--alias", "main", "--world-size", "2"); err != nil {
		t.Fatalf("run create: %q %v", out, err)
	}
	for i := range 2 {
		out, err := run("reassign", "job", "--world-size", "2", "--reset", "1", "--expect-epoch", "0")
		if err != nil || !strings.Contains(out, "(epoch 1)") {
			t.Fatalf("reassign from epoch 0, attempt %d: %q %v", i+1, out, err)
		}
	}
	_, err := run("reassign", "job", "--world-size", "2", "--reset", "0", "--expect-epoch", "0")
	wantExit(t, err, errcode.StaleEpoch, errcode.ExitRejected)
	out, err := run("reassign", "job", "--world-size", "2", "--reset", "1")
	if err != nil || !strings.Contains(out, "(epoch 2)") {
		t.Fatalf("reassign from the current epoch: %q %v", out, err)
	}
}
