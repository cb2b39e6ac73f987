package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestProfileEnvironment: SHARDPROOF_CPUPROFILE, SHARDPROOF_MEMPROFILE and
// SHARDPROOF_TRACE make any command write a CPU profile, a heap profile
// (both gzipped pprof) and an execution trace, and leave its output alone.
func TestProfileEnvironment(t *testing.T) {
	dir := t.TempDir()
	cpu, mem, tr := filepath.Join(dir, "cpu.prof"), filepath.Join(dir, "mem.prof"), filepath.Join(dir, "run.trace")
	cmd := exec.Command(os.Args[0], "codes")
	cmd.Env = cliEnv("SHARDPROOF_CPUPROFILE="+cpu, "SHARDPROOF_MEMPROFILE="+mem, "SHARDPROOF_TRACE="+tr)
	out, err := cmd.Output()
	if err != nil || !bytes.Contains(out, []byte("DIGEST_MISMATCH")) {
		t.Fatalf("codes with profiling: err %v, output %q", err, out)
	}
	for _, f := range []struct{ name, prefix string }{
		{cpu, "\x1f\x8b"}, {mem, "\x1f\x8b"}, {tr, "go 1."},
	} {
		b, err := os.ReadFile(f.name)
		if err != nil || !bytes.HasPrefix(b, []byte(f.prefix)) {
			t.Fatalf("%s: %d bytes, err %v; want a file starting %q", filepath.Base(f.name), len(b), err, f.prefix)
		}
	}
}
