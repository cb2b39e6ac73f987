package main

import (
	"strings"
	"testing"
)

// A command line that names no command is USAGE (exit 2) at every level;
// a group command alone prints its help and succeeds.
func TestUnknownCommandIsUsage(t *testing.T) {
	for _, args := range [][]string{{"nosuch"}, {"gate", "nosuch"}, {"run", "nosuch"}, {"store", "nosuch"}, {"manifest", "nosuch"}} {
		r := runCLI(t, cliEnv(), args...)
		if r.status != 2 || !strings.Contains(r.stderr, `shardproof: USAGE: unknown command "nosuch"`) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and USAGE", args, r.status, r.stderr)
		}
	}
	for _, args := range [][]string{{}, {"gate"}, {"store"}} {
		r := runCLI(t, cliEnv(), args...)
		if r.status != 0 || !strings.Contains(r.stdout, "Available Commands:") {
			t.Errorf("%v: exit %d, stdout %q; want the help and 0", args, r.status, r.stdout)
		}
	}
}

// --resume finishes a local job; the engines rerun tasks themselves.
func TestResumeIsLocalOnly(t *testing.T) {
	r := runCLI(t, cliEnv(), "verify", "--executor", "process", "--store", t.TempDir(),
		"--resume", "sha256:0000000000000000000000000000000000000000000000000000000000000000")
	if r.status != 2 || !strings.Contains(r.stderr, "USAGE: verify: --resume works with --executor local") {
		t.Fatalf("exit %d, stderr %q", r.status, r.stderr)
	}
}
