package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shardproof/shardproof/internal/errcode"
)

// logLines returns stderr's structured log lines: everything but the
// progress and error lines, which start with "shardproof: ".
func logLines(stderr string) []string {
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(stderr), "\n") {
		if l != "" && !strings.HasPrefix(l, "shardproof: ") {
			out = append(out, l)
		}
	}
	return out
}

// TestLogFormatJSON: --log-format json makes every log line of a command
// one JSON object with its level and message (and digests as fields), so a
// collector parses verify's lines like the gate's; --log-level debug adds
// the tasks' lines.
func TestLogFormatJSON(t *testing.T) {
	r := newRelease(t)
	res := runCLI(t, cliEnv(), "verify", "--store", r.dir, "--root", r.res.Root.String(), "--log-format", "json", "--log-level", "debug")
	if res.status != errcode.ExitOK {
		t.Fatalf("exit %d\n%s", res.status, res.stderr)
	}
	m := reportLine.FindStringSubmatch(res.stdout)
	if m == nil {
		t.Fatalf("no report line in\n%s", res.stdout)
	}
	lines := logLines(res.stderr)
	var debug, stored int
	for _, l := range lines {
		var rec map[string]any
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Fatalf("log line is not JSON: %q: %v", l, err)
		}
		if rec["level"] == nil || rec["msg"] == nil || rec["time"] == nil {
			t.Errorf("log line lacks time, level or msg: %q", l)
		}
		if rec["level"] == "DEBUG" {
			debug++
		}
		if rec["msg"] == "verification report stored" {
			stored++
			if rec["report"] != m[1] || rec["root"] != r.res.Root.String() {
				t.Errorf("stored line names report %v root %v, want %s %s", rec["report"], rec["root"], m[1], r.res.Root)
			}
		}
	}
	if debug == 0 || stored != 1 {
		t.Errorf("%d debug lines and %d report lines, want some and 1:\n%s", debug, stored, res.stderr)
	}
	// Progress is a log record too; only the final error line, if any,
	// stays plain.
	if strings.Contains(res.stderr, "shardproof: verify: checked") || !strings.Contains(res.stderr, `"msg":"verify progress"`) {
		t.Errorf("progress under --log-format json:\n%s", res.stderr)
	}

	// The environment sets the same, and warn leaves out info and debug.
	res = runCLI(t, cliEnv("SHARDPROOF_LOG_FORMAT=json", "SHARDPROOF_LOG_LEVEL=warn"), "verify", "--store", r.dir, "--root", r.res.Root.String())
	if res.status != errcode.ExitOK {
		t.Fatalf("exit %d\n%s", res.status, res.stderr)
	}
	if l := logLines(res.stderr); len(l) != 0 {
		t.Errorf("at warn, a clean verify logs %d lines: %q", len(l), l)
	}
	// In text too, progress is info: warn leaves it out (it printed a
	// line a second whatever --log-level said, where JSON left it out).
	res = runCLI(t, cliEnv(), "verify", "--store", r.dir, "--root", r.res.Root.String(), "--log-level", "warn")
	if res.status != errcode.ExitOK || strings.TrimSpace(res.stderr) != "" {
		t.Errorf("at warn, a clean verify in text writes to stderr (exit %d):\n%s", res.status, res.stderr)
	}
	// Text, the default, is slog's key=value lines.
	res = runCLI(t, cliEnv(), "verify", "--store", r.dir, "--root", r.res.Root.String())
	for _, l := range logLines(res.stderr) {
		if !strings.HasPrefix(l, "time=") || !strings.Contains(l, " level=") {
			t.Errorf("text log line %q is not key=value", l)
		}
	}
}

// TestLogFlagsBad: an unknown format or level is USAGE before the command
// does anything.
func TestLogFlagsBad(t *testing.T) {
	for _, args := range [][]string{
		{"--log-format", "yaml"},
		{"--log-level", "chatty"},
		{"--log-level", "info+2"},
	} {
		dir := filepath.Join(t.TempDir(), "store")
		res := runCLI(t, cliEnv(), append([]string{"synth", "--samples", "100", "--store", dir}, args...)...)
		if res.status != errcode.ExitUsage || !strings.Contains(res.stderr, "USAGE") || !strings.Contains(res.stderr, args[1]) {
			t.Errorf("%v: exit %d, want %d with USAGE naming %q:\n%s", args, res.status, errcode.ExitUsage, args[1], res.stderr)
		}
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("%v: the store was created (%v)", args, err)
		}
	}
	res := runCLI(t, cliEnv("SHARDPROOF_LOG_FORMAT=xml"), "synth", "--samples", "100", "--store", t.TempDir())
	if res.status != errcode.ExitUsage || !strings.Contains(res.stderr, `"xml"`) {
		t.Errorf("SHARDPROOF_LOG_FORMAT=xml: exit %d:\n%s", res.status, res.stderr)
	}
}

// TestGateServeRaftLogLevel: hashicorp/raft's own lines follow
// --log-level like the gate's: a fresh single node's "heartbeat timeout
// reached" warning is logged at the default level and left out at
// error, and debug adds raft's info lines (its elections). Raft logged
// at warn whatever the flag said, so --log-level error still printed its
// warnings and --log-level debug showed none of its state changes.
func TestGateServeRaftLogLevel(t *testing.T) {
	start := func(extra ...string) string {
		t.Helper()
		return serveLogged(t, func() (string, []string) {
			addr := freeAddr(t)
			return "http://" + addr, append([]string{"--bootstrap", "--data", t.TempDir(), "--http-addr", addr, "--raft-addr", freeAddr(t)}, extra...)
		}).String()
	}
	if out := start(); !strings.Contains(out, "[WARN]  raft:") || strings.Contains(out, "[INFO]  raft:") {
		t.Errorf("at the default level, raft's warnings and not its info lines:\n%s", out)
	}
	if out := start("--log-level", "error"); strings.Contains(out, "raft:") {
		t.Errorf("--log-level error logs raft's lines below error:\n%s", out)
	}
	if out := start("--log-level", "debug"); !strings.Contains(out, "[INFO]  raft:") {
		t.Errorf("--log-level debug logs no raft info line:\n%s", out)
	}
}
