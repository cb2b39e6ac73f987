package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A command line that names no command is USAGE (exit 2) at every level;
// a group command alone prints its help and succeeds.
func TestUnknownCommandIsUsage(t *testing.T) {
	for _, args := range [][]string{{"nosuch"}, {"gate", "nosuch"}, {"run", "nosuch"}, {"store", "nosuch"}, {"manifest", "nosuch"}, {"cache", "nosuch"}} {
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

// --resume takes its inputs and its shape from the plan, with every
// executor: a flag the plan records is refused, not silently ignored.
func TestResumeTakesNoInputs(t *testing.T) {
	plan := "sha256:" + strings.Repeat("0", 64)
	for _, c := range []struct{ flag, value string }{
		{"--root", plan}, {"--snapshot", plan}, {"--tombstones", plan}, {"--benchmark", plan},
		{"--map-tasks", "4"}, {"--reducers", "8"}, {"--reduce-fan-in", "16"},
		{"--shuffle-compression", "zstd"}, {"--shuffle-checksum", "sha256"},
		{"--map-members", "true"}, {"--read-all-members", "true"},
	} {
		for _, executor := range []string{"local", "process"} {
			store := t.TempDir()
			r := runCLI(t, cliEnv(), "verify", "--executor", executor, "--store", store, c.flag+"="+c.value, "--resume", plan)
			if r.status != 2 || !strings.Contains(r.stderr, "USAGE: verify: --resume takes the root") || !strings.Contains(r.stderr, "do not give "+c.flag) {
				t.Errorf("%s --resume with %s: exit %d, stderr %q; want USAGE naming the flag", executor, c.flag, r.status, r.stderr)
			}
			if ents, _ := os.ReadDir(store); len(ents) != 0 {
				t.Errorf("%s --resume with %s wrote into the store: %d entries", executor, c.flag, len(ents))
			}
		}
	}
}

// A negative count is USAGE (exit 2) before anything runs, where verify
// took --map-tasks -3 for "the default" and went on; 0 stays the default.
func TestNegativeCountIsUsage(t *testing.T) {
	root := "sha256:" + strings.Repeat("0", 64)
	store := t.TempDir()
	for _, c := range []struct {
		flag string
		args []string
	}{
		{"--map-tasks -3", []string{"verify", "--store", store, "--root", root, "--map-tasks", "-3"}},
		{"--reducers -1", []string{"verify", "--store", store, "--root", root, "--reducers", "-1"}},
		{"--parallelism -2", []string{"verify", "--store", store, "--root", root, "--parallelism", "-2"}},
		{"--k8s-parallelism -1", []string{"verify", "--store", store, "--root", root, "--executor", "kubernetes", "--k8s-parallelism", "-1"}},
		{"--world-size -4", []string{"run", "create", "r1", "--alias", "a", "--world-size", "-4"}},
		{"--rank -1", []string{"worker", "--store", store, "--run", "r1", "--rank", "-1", "--cache", t.TempDir()}},
		{"--rank-wait -1s", []string{"worker", "--store", store, "--run", "r1", "--rank", "1", "--rank-wait", "-1s", "--cache", t.TempDir()}},
		{"--samples -5", []string{"synth", "--store", store, "--samples", "-5", "--shards", "1"}},
		{"--index -5", []string{"task", "map", "--plan", "file://" + store + "#" + root, "--index", "-5"}},
		{"--expect-epoch -1", []string{"run", "reassign", "r1", "--world-size", "2", "--expect-epoch", "-1"}},
	} {
		r := runCLI(t, cliEnv(), c.args...)
		if r.status != 2 || !strings.Contains(r.stderr, "USAGE: shardproof "+c.args[0]) || !strings.Contains(r.stderr, c.flag+": must not be negative") {
			t.Errorf("%v: exit %d, stderr %q; want 2, USAGE naming %s", c.args, r.status, r.stderr, c.flag)
		}
	}
	// A missing store is reported by its code on the line's front, also
	// when the store wraps it in the key's name.
	r := runCLI(t, cliEnv(), "manifest", "show", "--store", store, root)
	if r.status != 3 || !strings.HasPrefix(r.stderr, "shardproof: NOT_FOUND: blobs/sha256/") {
		t.Errorf("manifest show of a missing blob: exit %d, stderr %q; want 3 and a line starting with the code", r.status, r.stderr)
	}
}

// A required digest flag left out is named as required, before any gate
// is asked, rather than reported as a malformed empty digest.
func TestMissingDigestIsUsage(t *testing.T) {
	for _, args := range [][]string{
		{"run", "attest", "r1", "--rank", "0", "--gate", "http://127.0.0.1:1"},
		{"run", "checkpoint", "r1", "--step", "3", "--gate", "http://127.0.0.1:1"},
	} {
		r := runCLI(t, cliEnv(), args...)
		if r.status != 2 || !strings.Contains(r.stderr, "USAGE: shardproof run "+args[1]+": --root is required") {
			t.Errorf("%v: exit %d, stderr %q; want 2 and --root required", args, r.status, r.stderr)
		}
	}
}

// The all-zero digest is well formed but names no document: given for a
// document, it is USAGE, where it used to read as "flag not given" (verify
// --tombstones sha256:000… checked no fence and said VERIFIED).
func TestZeroDigestIsUsage(t *testing.T) {
	zero := "sha256:" + strings.Repeat("0", 64)
	root := "sha256:" + strings.Repeat("1", 64)
	store := t.TempDir()
	for _, args := range [][]string{
		{"verify", "--store", store, "--root", root, "--tombstones", zero},
		{"verify", "--store", store, "--root", root, "--benchmark", zero},
		{"verify", "--store", store, "--root", zero},
		{"publish", "--store", store, "--alias", "a", "--root", root, "--report", zero, "--gate", "http://127.0.0.1:1"},
		{"run", "attest", "r1", "--rank", "0", "--root", root, "--shards", zero, "--gate", "http://127.0.0.1:1"},
		{"gate", "recheck", root, "--store", store, "--kind", "tombstone", "--report", zero, "--gate", "http://127.0.0.1:1"},
	} {
		r := runCLI(t, cliEnv(), args...)
		if r.status != 2 || !strings.Contains(r.stderr, zero+" names no document") {
			t.Errorf("%v: exit %d, stderr %q; want 2 and the zero digest refused", args, r.status, r.stderr)
		}
	}
}

// An error wrapped in context names its code once, at the front of the
// line, however many layers repeated it.
func TestErrorLineNamesItsCodeOnce(t *testing.T) {
	missing := "sha256:" + strings.Repeat("1", 64)
	r := runCLI(t, cliEnv(), "gate", "register", "--store", t.TempDir(), "--report", missing, "--gate", "http://127.0.0.1:1", "--retry", "0")
	if r.status != 3 || !strings.HasPrefix(r.stderr, "shardproof: NOT_FOUND: report "+missing) || strings.Count(r.stderr, "NOT_FOUND") != 1 {
		t.Fatalf("exit %d, stderr %q; want 3 and NOT_FOUND once, first", r.status, r.stderr)
	}
}

// --store defaults to $SHARDPROOF_STORE in every command, not only in
// manifest and store: synth writes there and verify reads there.
func TestStoreFromEnvironment(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	env := cliEnv("SHARDPROOF_STORE=" + dir)
	r := runCLI(t, env, "synth", "--samples", "50", "--shards", "2")
	root, ok := strings.CutPrefix(strings.SplitN(r.stdout, "\n", 2)[0], "root ")
	if r.status != 0 || !ok {
		t.Fatalf("synth without --store: exit %d, stdout %q, stderr %q", r.status, r.stdout, r.stderr)
	}
	if r = runCLI(t, env, "verify", "--root", root); r.status != 0 || !strings.Contains(r.stdout, "VERIFIED") {
		t.Fatalf("verify without --store: exit %d, stdout %q, stderr %q", r.status, r.stdout, r.stderr)
	}
	if r = runCLI(t, cliEnv(), "verify", "--root", root); r.status != 2 {
		t.Fatalf("verify with neither --store nor $SHARDPROOF_STORE: exit %d, stderr %q; want 2", r.status, r.stderr)
	}
}

// An engine setting given for an executor it does not apply to is USAGE,
// where it was silently ignored (verify --image foo ran locally).
func TestExecutorSettingsApplyToTheirExecutor(t *testing.T) {
	root := "sha256:" + strings.Repeat("1", 64)
	store := t.TempDir()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--image", "x"}, "--image applies to --executor kubernetes, not local"},
		{[]string{"--slurm-partition", "p"}, "--slurm-partition applies to --executor slurm, not local"},
		{[]string{"--executor", "process", "--namespace", "n"}, "--namespace applies to --executor kubernetes, not process"},
		{[]string{"--executor", "kubernetes", "--task-binary", "b", "--emit", store}, "--task-binary applies to --executor process or slurm, not kubernetes"},
		{[]string{"--executor", "process", "--task-attempts", "0"}, "--task-attempts 0: a task runs at least once"},
		{[]string{"--executor", "kubernetes", "--emit", store}, "--executor kubernetes needs --image IMAGE"},
	} {
		r := runCLI(t, cliEnv(), append([]string{"verify", "--store", store, "--root", root}, c.args...)...)
		if r.status != 2 || !strings.Contains(r.stderr, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", c.args, r.status, r.stderr, c.want)
		}
	}
}

// A run create --barrier-timeout below a millisecond is USAGE before the
// gate is asked: the command carries whole milliseconds, and the gate
// takes 0 for its default, so --barrier-timeout 0 or 500us made a run
// whose barrier waited ten minutes.
func TestBarrierTimeoutBelowAMillisecondIsUsage(t *testing.T) {
	for _, d := range []string{"0", "0s", "500us", "999999ns"} {
		r := runCLI(t, cliEnv(), "run", "create", "r1", "--alias", "a", "--world-size", "1", "--barrier-timeout", d, "--gate", "http://127.0.0.1:1", "--retry", "0")
		if r.status != 2 || !strings.Contains(r.stderr, "USAGE: shardproof run create: --barrier-timeout") || !strings.Contains(r.stderr, "at least 1ms") {
			t.Errorf("--barrier-timeout %s: exit %d, stderr %q; want 2, USAGE naming the flag", d, r.status, r.stderr)
		}
	}
}

// worker --poll outside 10ms to 1h is USAGE (exit 2) before any work: no
// cache directory is made and no gate is asked (none listens at the URL
// given, which would be GATE_UNAVAILABLE). 0 and below were the default
// in silence, 1ns re-read the run in a busy loop, and 1000000h made the
// barrier's slices (five polls) wrap negative; a value no Duration holds
// is the flag's own USAGE. The bounds themselves are taken.
func TestWorkerPollOutOfRangeIsUsage(t *testing.T) {
	store := t.TempDir()
	for _, poll := range []string{"-1s", "0", "1ns", "9ms", "1h0m1s", "1000000h", "99999999999h"} {
		cache := filepath.Join(t.TempDir(), "cache")
		r := runCLI(t, cliEnv(), "worker", "--gate", "http://127.0.0.1:1", "--store", store, "--run", "r1", "--rank", "0", "--cache", cache, "--once", "--poll", poll)
		if r.status != 2 || !strings.Contains(r.stderr, "USAGE: shardproof worker") || !strings.Contains(r.stderr, "--poll") {
			t.Errorf("--poll %s: exit %d, stderr %q; want 2, USAGE naming --poll", poll, r.status, r.stderr)
		}
		if _, err := os.Stat(cache); !os.IsNotExist(err) {
			t.Errorf("--poll %s made the cache directory: %v", poll, err)
		}
	}
	// Taken: the worker goes on to open its store, which is missing.
	missing := filepath.Join(store, "missing")
	for _, poll := range []string{"10ms", "1h"} {
		r := runCLI(t, cliEnv(), "worker", "--gate", "http://127.0.0.1:1", "--store", missing, "--run", "r1", "--rank", "0", "--cache", filepath.Join(t.TempDir(), "cache"), "--once", "--poll", poll)
		if r.status != 3 || !strings.Contains(r.stderr, "STORE_UNAVAILABLE") {
			t.Errorf("--poll %s: exit %d, stderr %q; want it taken, and the missing store's STORE_UNAVAILABLE", poll, r.status, r.stderr)
		}
	}
}

// worker --listen that is no HOST:PORT is USAGE (exit 2) naming the flag,
// as gate serve's --http-addr, before the cache directory is made: it was
// IO, exit 3, from the listener, the status a script retries. An address
// that is one is taken: the worker goes on to its missing store.
func TestWorkerMalformedListenIsUsage(t *testing.T) {
	store := t.TempDir()
	for _, listen := range []string{"bogus", "127.0.0.1", "127.0.0.1:70000", "[::1", "127.0.0.1:-1"} {
		cache := filepath.Join(t.TempDir(), "cache")
		r := runCLI(t, cliEnv(), "worker", "--gate", "http://127.0.0.1:1", "--store", store, "--run", "r1", "--rank", "0", "--cache", cache, "--once", "--listen", listen)
		if r.status != 2 || !strings.Contains(r.stderr, "USAGE: shardproof worker: --listen") || !strings.Contains(r.stderr, "want HOST:PORT") {
			t.Errorf("--listen %s: exit %d, stderr %q; want 2, USAGE naming --listen", listen, r.status, r.stderr)
		}
		if _, err := os.Stat(cache); !os.IsNotExist(err) {
			t.Errorf("--listen %s made the cache directory: %v", listen, err)
		}
	}
	r := runCLI(t, cliEnv(), "worker", "--gate", "http://127.0.0.1:1", "--store", filepath.Join(store, "missing"), "--run", "r1", "--rank", "0", "--cache", filepath.Join(t.TempDir(), "cache"), "--once", "--listen", "127.0.0.1:0")
	if r.status != 3 || !strings.Contains(r.stderr, "STORE_UNAVAILABLE") {
		t.Errorf("--listen 127.0.0.1:0: exit %d, stderr %q; want it taken, and the missing store's STORE_UNAVAILABLE", r.status, r.stderr)
	}
}

// A local file the command line names that cannot be opened (missing) or
// is a directory is USAGE, exit 2, naming it, and nothing is stored or
// sent to the gate, as for gate serve --restore's FILE and the key and
// token files: manifest check and put's FILE, store put's FILE, run
// create and reassign's --assignment and run attest's --shards-file were
// IO, exit 3, the status a script retries.
func TestMissingArgFileIsUsage(t *testing.T) {
	dir := t.TempDir()
	store := filepath.Join(dir, "store")
	if err := os.Mkdir(store, 0o755); err != nil {
		t.Fatal(err)
	}
	root := "sha256:" + strings.Repeat("1", 64)
	// Nothing listens at this gate: a command that reached it would
	// fail GATE_UNAVAILABLE, exit 3.
	gate := []string{"--gate", "http://127.0.0.1:1", "--retry", "0"}
	for _, file := range []string{filepath.Join(dir, "missing"), dir} {
		for _, args := range [][]string{
			{"manifest", "check", file},
			{"manifest", "put", "--store", store, file},
			{"store", "put", "--store", store, "k/x", file},
			append([]string{"run", "create", "r", "--alias", "a", "--world-size", "2", "--assignment", file}, gate...),
			append([]string{"run", "reassign", "r", "--world-size", "2", "--assignment", file}, gate...),
			append([]string{"run", "attest", "r", "--rank", "0", "--root", root, "--shards-file", file}, gate...),
		} {
			r := runCLI(t, cliEnv(), args...)
			if r.status != 2 || !strings.Contains(r.stderr, "shardproof: USAGE: ") || !strings.Contains(r.stderr, file) {
				t.Errorf("%v: exit %d, stderr %q; want 2, USAGE naming %s", args, r.status, r.stderr, file)
			}
		}
	}
	if ents, _ := os.ReadDir(store); len(ents) != 0 {
		t.Errorf("the refused commands wrote into the store: %d entries", len(ents))
	}
}
