package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/raftgate"
)

// gateCLI is one finished CLI invocation.
type gateCLI struct {
	stdout, stderr string
	status         int
}

func runGateCLI(t *testing.T, args ...string) gateCLI {
	t.Helper()
	// The test binary runs as the CLI (see TestMain): real flags, real
	// exit statuses, no separate build.
	cmd := exec.CommandContext(t.Context(), os.Args[0], args...)
	cmd.Env = cliEnv("SHARDPROOF_GATE=")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := gateCLI{stdout: stdout.String(), stderr: stderr.String()}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		r.status = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run %v: %v", args, err)
	}
	return r
}

// expect checks the exit status and that stderr names code.
func (r gateCLI) expect(t *testing.T, status int, code errcode.Code) gateCLI {
	t.Helper()
	if r.status != status || (code != "" && !strings.Contains(r.stderr, "shardproof: "+string(code)+":")) {
		t.Fatalf("exit %d, want %d with %s\nstdout: %s\nstderr: %s", r.status, status, code, r.stdout, r.stderr)
	}
	return r
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// startGateServe runs `shardproof gate serve` as a child process and
// waits until it serves. stop sends SIGINT and checks a clean exit; it runs
// at the end of the test if not called before.
func startGateServe(t *testing.T, dir string, extra ...string) (gateURL string, stop func()) {
	t.Helper()
	g := startGateProcess(t, dir, extra...)
	return g.url, g.stop
}

// servedGate is a `shardproof gate serve` child process.
type servedGate struct {
	url    string
	stop   func()
	proc   *os.Process
	stderr *syncBuffer
}

// startGateProcess is startGateServe, giving the process and its stderr
// too.
func startGateProcess(t *testing.T, dir string, extra ...string) *servedGate {
	t.Helper()
	for attempt := 1; ; attempt++ {
		g, taken := tryGateServe(t, dir, extra...)
		if !taken {
			return g
		}
		// freeAddr closes its listener before the child binds the port:
		// another process took one in between. New ports, fresh state.
		if attempt == 3 {
			t.Fatal("gate serve: ports taken three times")
		}
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
	}
}

// tryGateServe is one attempt of startGateServe; taken reports a child
// that exited because one of its ports was already in use.
func tryGateServe(t *testing.T, dir string, extra ...string) (g *servedGate, taken bool) {
	t.Helper()
	httpAddr := freeAddr(t)
	args := append([]string{"gate", "serve", "--data", dir, "--http-addr", httpAddr, "--raft-addr", freeAddr(t)}, extra...)
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = cliEnv()
	var stderr syncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cmd.Process.Signal(os.Interrupt)
			select {
			case <-exited:
				if waitErr != nil {
					t.Errorf("gate serve exited with %v after SIGINT\n%s", waitErr, stderr.String())
				}
			case <-time.After(10 * time.Second):
				cmd.Process.Kill()
				t.Errorf("gate serve did not stop on SIGINT")
			}
		})
	}
	scheme, probe := "http://", readyClient
	if slices.Contains(extra, "--tls-cert") {
		// Readiness only: the tests check the certificate themselves.
		scheme, probe = "https://", &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := probe.Get(scheme + httpAddr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				t.Cleanup(stop)
				return &servedGate{url: scheme + httpAddr, stop: stop, proc: cmd.Process, stderr: &stderr}, false
			}
		}
		select {
		case <-exited:
			if strings.Contains(stderr.String(), "address already in use") {
				return nil, true
			}
			t.Fatalf("gate serve exited before it was ready: %v\n%s", waitErr, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatalf("gate serve not ready: %v\n%s", err, stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// syncBuffer is a bytes.Buffer safe to read while a child writes it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// storeRelease writes testRelease and a VERIFIED report of it to a file
// store and returns the store dir, the root and the report digest.
func storeRelease(t *testing.T) (dir string, root, report manifest.Digest, shards []manifest.Digest) {
	t.Helper()
	dir = t.TempDir()
	rel := testRelease()
	b, err := manifest.Encode(rel)
	if err != nil {
		t.Fatal(err)
	}
	root = putDoc(t, dir, b)
	rep := &manifest.Report{
		Schema: manifest.ReportSchema, Root: root, DatasetSnapshot: rel.DatasetSnapshot,
		TombstoneWatermark: rel.TombstoneWatermark, BenchmarkFence: rel.BenchmarkFence, Verdict: manifest.Verified,
		Counts:   manifest.Counts{Shards: 2, ShardsVerified: 2, Records: 20, SnapshotRecords: 20},
		Examples: map[string][]string{}, Tool: "test",
	}
	if b, err = manifest.Encode(rep); err != nil {
		t.Fatal(err)
	}
	report = putDoc(t, dir, b)
	for _, s := range rel.Shards {
		shards = append(shards, s.Digest)
	}
	return dir, root, report, shards
}

// dropAnswers forwards each request to target and then drops the
// connection without answering: the command runs, the client never learns.
func dropAnswers(t *testing.T, target string) string {
	u, _ := url.Parse(target)
	proxy := httputil.NewSingleHostReverseProxy(u)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &discard{h: http.Header{}}
		proxy.ServeHTTP(rec, r)
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			conn.Close()
		}
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String()
}

type discard struct{ h http.Header }

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(b []byte) (int, error) { return len(b), nil }
func (d *discard) WriteHeader(int)             {}

func TestGateCLI(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs a gate server")
	}
	storeDir, root, report, shards := storeRelease(t)
	gate, _ := startGateServe(t, t.TempDir(), "--bootstrap")
	g := func(args ...string) gateCLI {
		t.Helper()
		return runGateCLI(t, append(args, "--gate", gate)...)
	}

	r := g("gate", "register", "--store", storeDir, "--report", report.String()).expect(t, 0, "")
	if !strings.Contains(r.stdout, root.String()+" VERIFIED") {
		t.Fatalf("register output: %s", r.stdout)
	}
	g("gate", "publish", "main", root.String(), "--expect", "0").expect(t, 0, "")
	// Same command again: the same result, no new generation.
	r = g("gate", "publish", "main", root.String(), "--expect", "0", "--json").expect(t, 0, "")
	var pr raftgate.PublishResult
	if err := json.Unmarshal([]byte(r.stdout), &pr); err != nil || pr.Generation != 1 || pr.Root != root {
		t.Fatalf("publish --json: %+v %v\n%s", pr, err, r.stdout)
	}
	g("gate", "publish", "main", root.String(), "--expect", "5").expect(t, errcode.ExitRejected, errcode.GenerationConflict)

	// A write whose answer is lost exits 5; running it again is safe.
	runGateCLI(t, "gate", "publish", "main", root.String(), "--expect", "1", "--gate", dropAnswers(t, gate), "--retry", "1s").
		expect(t, errcode.ExitIndeterminate, errcode.Indeterminate)
	r = g("gate", "publish", "main", root.String(), "--expect", "1", "--json").expect(t, 0, "")
	if err := json.Unmarshal([]byte(r.stdout), &pr); err != nil || pr.Generation != 2 {
		t.Fatalf("retry after indeterminate: %+v\n%s", pr, r.stdout)
	}

	g("run", "create", "job", "--alias", "main", "--world-size", "2", "--barrier-timeout", "1m").expect(t, 0, "")
	// Round-robin: shard 0 → rank 0, shard 1 → rank 1.
	g("run", "attest", "job", "--rank", "0", "--root", root.String(), "--shards", shards[0].String()).expect(t, 0, "")
	g("run", "wait", "job", "--timeout", "2s").expect(t, errcode.ExitRejected, errcode.BarrierClosed)
	g("run", "attest", "job", "--rank", "1", "--root", root.String(), "--shards", shards[1].String()).expect(t, 0, "")
	r = g("run", "wait", "job", "--timeout", "10s").expect(t, 0, "")
	if !strings.Contains(r.stdout, "barrier OPEN, 2/2 ranks attested") {
		t.Fatalf("wait output: %s", r.stdout)
	}
	g("run", "checkpoint", "job", "--step", "10", "--root", root.String()).expect(t, 0, "")

	// A foreign root fails a run before step 0.
	g("run", "create", "job2", "--alias", "main", "--world-size", "1").expect(t, 0, "")
	g("run", "attest", "job2", "--rank", "0", "--root", manifest.Sum([]byte("foreign")).String(), "--shards", "").
		expect(t, errcode.ExitRejected, errcode.RootMismatch)
	g("run", "wait", "job2", "--timeout", "5s").expect(t, errcode.ExitRejected, errcode.RootMismatch)

	// Mistakes in arguments are USAGE (exit 2) before any request, not
	// the gate's BAD_INPUT (exit 1, which reads as "INVALID").
	dir := t.TempDir()
	for name, body := range map[string]string{"empty.json": "[]", "null.json": "null", "trailing.json": "[[0],[1]] [[1],[0]]", "bracket.json": "[[0],[1]]]", "short.json": "[[0,1]]"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		g("run", "create", "a-"+strings.TrimSuffix(name, ".json"), "--alias", "main", "--world-size", "2", "--assignment", filepath.Join(dir, name)).
			expect(t, errcode.ExitInvalid, errcode.BadInput)
	}
	for _, args := range [][]string{
		{"run", "create", "", "--alias", "main", "--world-size", "1"},
		{"run", "create", "..", "--alias", "main", "--world-size", "1"},
		{"run", "create", "w0", "--alias", "main", "--world-size", "0"},
		{"run", "create", "noalias", "--world-size", "1"},
		{"run", "create", "neg", "--alias", "main", "--world-size", "1", "--barrier-timeout", "-5s"},
		{"run", "create", "decade", "--alias", "main", "--world-size", "1", "--barrier-timeout", "87601h"},
		{"run", "reassign", "job", "--world-size", "2", "--reset", "7"},
		{"gate", "fence", "bogus", "5"},
		{"gate", "publish", "bad alias!", root.String(), "--expect", "0"},
		{"gate", "publish", "fresh", root.String(), "--expect", "0", "--retain", "5000"},
		{"gate", "rollback", "main", root.String()},
		{"run", "checkpoint", "job", "--step", "-5", "--root", root.String()},
		{"run", "checkpoint", "job", "--root", root.String()},
	} {
		g(args...).expect(t, errcode.ExitUsage, errcode.Usage)
	}

	// A shard list that is not the rank's assignment is refused before it
	// reaches the gate, which would fail the whole run: both flags at once,
	// a repeated shard, another rank's shard, a list from before a
	// reassignment. With --epoch of an epoch the run has left, the gate
	// answers STALE_EPOCH instead.
	g("run", "create", "job3", "--alias", "main", "--world-size", "2", "--barrier-timeout", "1m").expect(t, 0, "")
	list := filepath.Join(t.TempDir(), "rank0.txt")
	if err := os.WriteFile(list, []byte(shards[0].String()+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	attest3 := func(args ...string) gateCLI {
		return g(append([]string{"run", "attest", "job3", "--root", root.String()}, args...)...)
	}
	attest3("--rank", "0", "--shards", shards[0].String(), "--shards-file", list).expect(t, errcode.ExitUsage, errcode.Usage)
	attest3("--rank", "0").expect(t, errcode.ExitInvalid, errcode.BadInput) // rank 0 has a shard to attest
	attest3("--rank", "0", "--shards", shards[0].String()+","+shards[0].String()).expect(t, errcode.ExitInvalid, errcode.BadInput)
	attest3("--rank", "0", "--shards", shards[1].String()).expect(t, errcode.ExitInvalid, errcode.BadInput)
	// With --epoch too, while the run is at that epoch: the gate would
	// fail the run with SHARD_NOT_ASSIGNED.
	attest3("--rank", "0", "--shards", shards[1].String(), "--epoch", "0").expect(t, errcode.ExitInvalid, errcode.BadInput)
	attest3("--rank", "0", "--shards", shards[0].String()+","+shards[0].String(), "--epoch", "0").expect(t, errcode.ExitInvalid, errcode.BadInput)
	attest3("--rank", "2", "--shards", shards[1].String()).expect(t, errcode.ExitUsage, errcode.Usage)
	attest3("--rank", "0", "--shards-file", list).expect(t, 0, "")
	g("run", "reassign", "job3", "--world-size", "1").expect(t, 0, "") // epoch 1: rank 0 holds both shards
	attest3("--rank", "0", "--shards-file", list).expect(t, errcode.ExitInvalid, errcode.BadInput)
	attest3("--rank", "0", "--shards-file", list, "--epoch", "0").expect(t, errcode.ExitRejected, errcode.StaleEpoch)
	r = g("run", "show", "job3").expect(t, 0, "")
	if !strings.Contains(r.stdout, "epoch 1") || strings.Contains(r.stdout, "FAILED") || !regexp.MustCompile(`barrier deadline 20\d\d-\d\d-\d\dT`).MatchString(r.stdout) {
		t.Fatalf("run show after refused attestations: %s", r.stdout)
	}
	attest3("--rank", "0", "--shards", shards[0].String()+","+shards[1].String(), "--epoch", "1").expect(t, 0, "")
	g("run", "wait", "job3", "--timeout", "10s").expect(t, 0, "")

	// A world larger than the release leaves the last rank no shards: it
	// attests an empty list, with neither flag.
	world := len(shards) + 1
	g("run", "create", "job4", "--alias", "main", "--world-size", strconv.Itoa(world), "--barrier-timeout", "1m").expect(t, 0, "")
	for rank, d := range shards {
		g("run", "attest", "job4", "--rank", strconv.Itoa(rank), "--root", root.String(), "--shards", d.String()).expect(t, 0, "")
	}
	g("run", "attest", "job4", "--rank", strconv.Itoa(world-1), "--root", root.String()).expect(t, 0, "")
	g("run", "wait", "job4", "--timeout", "10s").expect(t, 0, "")
	g("run", "cancel", "job4").expect(t, 0, "")
	// A cancel that gave no reason says so, as run show does, where
	// the error read "was cancelled: " with nothing after it.
	r = g("run", "wait", "job4", "--timeout", "2s").expect(t, errcode.ExitRejected, errcode.RunFailed)
	if !strings.Contains(r.stderr, "run job4 was cancelled: no reason given\n") {
		t.Fatalf("wait on a run cancelled without a reason: %s", r.stderr)
	}

	// Advancing a fence past the release closes its permits.
	r = g("gate", "fence", "tombstone", "50000").expect(t, 0, "")
	if !strings.Contains(r.stdout, "closed 3 permits") { // the alias's, job's and job3's
		t.Fatalf("fence output: %s", r.stdout)
	}
	g("run", "checkpoint", "job", "--step", "20", "--root", root.String()).expect(t, errcode.ExitRejected, errcode.PermitClosed)
	g("gate", "fence", "tombstone", "10").expect(t, errcode.ExitRejected, errcode.FenceRegression)

	r = g("gate", "history", "main", "--json").expect(t, 0, "")
	var a raftgate.Alias
	if err := json.Unmarshal([]byte(r.stdout), &a); err != nil || a.Generation != 2 || len(a.History) != 2 || a.Retain != raftgate.DefaultRetain {
		t.Fatalf("history --json: %+v %v", a, err)
	}
	r = g("gate", "permits", "--open").expect(t, 0, "")
	if strings.TrimSpace(r.stdout) != "" {
		t.Fatalf("open permits after the fence advance: %s", r.stdout)
	}
	r = g("gate", "permits", "--root", root.String()).expect(t, 0, "")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	for _, l := range lines {
		if !strings.Contains(l, "root "+root.String()) {
			t.Fatalf("permits --root %s lists another root: %q", root, l)
		}
	}
	if len(lines) == 0 || lines[0] == "" {
		t.Fatalf("permits --root %s: none listed", root)
	}
	// A malformed filter is refused, not a silently empty list.
	g("gate", "permits", "--root", "sha256:abc").expect(t, errcode.ExitUsage, errcode.Usage)
	r = g("run", "show", "job").expect(t, 0, "")
	if !strings.Contains(r.stdout, "rank 1: shards [1], attested") {
		t.Fatalf("run show: %s", r.stdout)
	}
	r = g("gate", "status").expect(t, 0, "")
	if !strings.Contains(r.stdout, "Leader") || !strings.Contains(r.stdout, "tombstone 50000") {
		t.Fatalf("status: %s", r.stdout)
	}
	g("gate", "publish", "main", "sha256:nope", "--expect", "2").expect(t, errcode.ExitUsage, errcode.Usage)
	runGateCLI(t, "gate", "status", "--gate", "http://"+freeAddr(t), "--retry", "300ms").expect(t, errcode.ExitError, errcode.GateUnavailable)
	// A wait no gate answered is not a closed barrier.
	runGateCLI(t, "run", "wait", "job", "--timeout", "700ms", "--gate", "http://"+freeAddr(t)).expect(t, errcode.ExitError, errcode.GateUnavailable)
	g("run", "wait", "job", "--timeout", "0s").expect(t, errcode.ExitUsage, errcode.Usage)

	// An INVALID report is recorded, and the exit status says so, as
	// verify's does: a script cannot mistake it for a registration that
	// made the release publishable.
	r = g("gate", "register", "--store", storeDir, "--report", invalidReport(t, storeDir, root).String()).expect(t, errcode.ExitInvalid, "")
	if !strings.Contains(r.stdout, root.String()+" INVALID") {
		t.Fatalf("register of an INVALID report: %s", r.stdout)
	}
	g("gate", "publish", "main", root.String(), "--expect", "2").expect(t, errcode.ExitRejected, errcode.NotVerified)

	// prune drops the failed and the cancelled run and their permits; the
	// running run, the alias's permits and its current (now INVALID) root
	// stay.
	g("gate", "prune", "--older-than", "-1s").expect(t, errcode.ExitUsage, errcode.Usage)
	r = g("gate", "prune").expect(t, 0, "")
	if !strings.Contains(r.stdout, "pruned 0 runs, 0 permits, the shard lists of 0 releases") {
		t.Fatalf("prune with the default 30 days: %s", r.stdout)
	}
	r = g("gate", "prune", "--older-than", "0s", "--json").expect(t, 0, "")
	var pruned raftgate.PruneResult
	if err := json.Unmarshal([]byte(r.stdout), &pruned); err != nil || !slices.Equal(pruned.Runs, []string{"job2", "job4"}) || len(pruned.Permits) != 2 || len(pruned.Releases) != 0 {
		t.Fatalf("prune --json: %+v %v\n%s", pruned, err, r.stdout)
	}
	g("run", "show", "job").expect(t, 0, "")
	// The pruned run's ID is never reused: showing it, and creating it
	// again with the very same flags, are RUN_PRUNED, not a new run on
	// whatever the alias names now.
	g("run", "show", "job2").expect(t, errcode.ExitRejected, errcode.RunPruned)
	g("run", "create", "job2", "--alias", "main", "--world-size", "1").expect(t, errcode.ExitRejected, errcode.RunPruned)
	g("run", "show", "never").expect(t, errcode.ExitRejected, errcode.UnknownRun)
}

// invalidReport stores an INVALID report of root: one member missing.
func invalidReport(t *testing.T, dir string, root manifest.Digest) manifest.Digest {
	t.Helper()
	rel := testRelease()
	rep := &manifest.Report{
		Schema: manifest.ReportSchema, Root: root, DatasetSnapshot: rel.DatasetSnapshot,
		TombstoneWatermark: rel.TombstoneWatermark, BenchmarkFence: rel.BenchmarkFence, Verdict: manifest.Invalid,
		Counts:   manifest.Counts{Shards: 2, ShardsVerified: 2, Records: 20, SnapshotRecords: 21, Missing: 1},
		Examples: map[string][]string{string(errcode.MissingMember): {"gone"}}, Tool: "test",
	}
	b, err := manifest.Encode(rep)
	if err != nil {
		t.Fatal(err)
	}
	return putDoc(t, dir, b)
}

func TestGateServeCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("runs three gate servers")
	}
	firstDir := t.TempDir()
	first, stopFirst := startGateServe(t, firstDir, "--id", "n1", "--bootstrap")
	join := strings.TrimPrefix(first, "http://")
	second, _ := startGateServe(t, t.TempDir(), "--id", "n2", "--join", join)
	third, _ := startGateServe(t, t.TempDir(), "--id", "n3", "--join", join)
	all := strings.Join([]string{first, second, third}, ",")

	// status is the node's own view: n3 lists itself once it has applied
	// the entry recording its join, which may come a heartbeat after the
	// node answers, and n2 and itself as voters once the leader promoted
	// them (joiners are learners until they caught up).
	for deadline := time.Now().Add(10 * time.Second); ; {
		r := runGateCLI(t, "gate", "status", "--gate", third).expect(t, 0, "")
		missing := ""
		for _, want := range []string{"node n3: Follower", "leader n1", "member n2", "member n3"} {
			if !strings.Contains(r.stdout, want) {
				missing = want
			}
		}
		if missing == "" && (strings.Contains(r.stdout, "nonvoter") || strings.Contains(r.stdout, "learner:")) {
			missing = "every member a voter"
		}
		if missing == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status of a joined node lacks %q:\n%s", missing, r.stdout)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// A write sent to a follower is forwarded to the leader.
	runGateCLI(t, "gate", "fence", "tombstone", "5", "--gate", third).expect(t, 0, "")
	// Members that applied the same commands report the same state.
	digestOf := func(url string) string {
		r := runGateCLI(t, "gate", "status", "--digest", "--gate", url).expect(t, 0, "")
		for _, line := range strings.Split(r.stdout, "\n") {
			if strings.HasPrefix(line, "state: sha256:") {
				return line
			}
		}
		t.Fatalf("status --digest of %s names no state:\n%s", url, r.stdout)
		return ""
	}
	agree := func(what string, urls ...string) {
		t.Helper()
		for deadline := time.Now().Add(15 * time.Second); ; {
			a, b, c := digestOf(urls[0]), digestOf(urls[1]), digestOf(urls[2])
			if a == b && b == c {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s:\n%s\n%s\n%s", what, a, b, c)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	agree("members disagree", first, second, third)
	// Stop the leader; a client that knows every member carries on.
	stopFirst()
	runGateCLI(t, "gate", "fence", "benchmark", "7", "--gate", all).expect(t, 0, "")
	r := runGateCLI(t, "gate", "fence", "--json", "--gate", all).expect(t, 0, "")
	var f raftgate.Fences
	if err := json.Unmarshal([]byte(r.stdout), &f); err != nil || f != (raftgate.Fences{Tombstone: 5, Benchmark: 7}) {
		t.Fatalf("fences after failover: %+v %v\n%s", f, err, r.stdout)
	}

	// The first node's start command kept --bootstrap: on its state, that
	// of a 3-member cluster, it is refused.
	serve := func(dir string, extra ...string) cliResult {
		return runRefused(t, append([]string{"gate", "serve", "--data", dir, "--id", "n1", "--http-addr", freeAddr(t), "--raft-addr", freeAddr(t)}, extra...)...)
	}
	if res := serve(firstDir, "--bootstrap"); res.status != errcode.ExitUsage || !strings.Contains(res.stderr, "3-member gate cluster") {
		t.Fatalf("restart with --bootstrap: exit %d: %s", res.status, res.stderr)
	}
	// Wiped, it must not found a second cluster: with neither flag it is
	// refused and creates nothing; with --bootstrap it would (the flag
	// belongs to a gate's first start), with --join it rejoins.
	if err := os.RemoveAll(firstDir); err != nil {
		t.Fatal(err)
	}
	if res := serve(firstDir); res.status != errcode.ExitUsage || !strings.Contains(res.stderr, "holds no gate state") || !strings.Contains(res.stderr, "--join") {
		t.Fatalf("wiped member started with neither flag: exit %d: %s", res.status, res.stderr)
	}
	if _, err := os.Stat(firstDir); !os.IsNotExist(err) {
		t.Fatalf("the refused start created its data directory: %v", err)
	}
	rejoined, _ := startGateServe(t, firstDir, "--id", "n1", "--join", strings.TrimPrefix(second, "http://")+","+strings.TrimPrefix(third, "http://"))
	agree("the rejoined member disagrees", rejoined, second, third)
	// Shrinking the cluster: a typo changes nothing, a member leaves the
	// configuration status shows.
	runGateCLI(t, "gate", "remove", "n9", "--gate", all).expect(t, errcode.ExitInvalid, errcode.BadInput)
	runGateCLI(t, "gate", "remove", "n3", "--gate", second+","+rejoined).expect(t, 0, "")
	for deadline := time.Now().Add(10 * time.Second); ; {
		st := runGateCLI(t, "gate", "status", "--gate", rejoined).expect(t, 0, "").stdout
		if strings.Contains(st, "member n1: http ") && strings.Contains(st, "member n2: http ") && !strings.Contains(st, "member n3") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status after removing n3:\n%s", st)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// `gate serve` is the server: the client flags of the other gate commands
// are not its flags, so they are neither listed nor accepted.
func TestGateServeTakesNoClientFlags(t *testing.T) {
	// An unusable --http-addr makes a serve that got past its flags fail
	// at once instead of serving.
	_, _, err := runInProcess(t, nil, "gate", "serve", "--retry", "1s", "--data", t.TempDir(), "--http-addr", "256.0.0.1:1")
	if errcode.Of(err) != errcode.Usage || !strings.Contains(err.Error(), "unknown flag: --retry") {
		t.Fatalf("gate serve --retry: %v, want a USAGE error for an unknown flag", err)
	}
	out, _, err := runInProcess(t, nil, "gate", "serve", "--help")
	if err != nil || strings.Contains(string(out), "--gate string") || !strings.Contains(string(out), "--http-addr") {
		t.Fatalf("gate serve --help (%v):\n%s", err, out)
	}
	for _, c := range [][]string{{"gate", "status", "--help"}, {"gate", "fence", "advance", "--help"}} {
		out, _, err := runInProcess(t, nil, c...)
		if err != nil || !strings.Contains(string(out), "--gate") {
			t.Fatalf("%v lists no --gate (%v):\n%s", c, err, out)
		}
	}
}

// readyClient polls /readyz with a short timeout.
var readyClient = &http.Client{Timeout: 2 * time.Second}

// Raft timeouts hashicorp/raft would refuse are USAGE before the node
// creates anything; valid ones start a node.
func TestGateServeRaftTimings(t *testing.T) {
	for _, bad := range [][]string{
		{"--raft-lease", "2s"},
		{"--raft-heartbeat", "2s", "--raft-election", "1s"},
		{"--raft-heartbeat", "1ms"},
	} {
		dir := filepath.Join(t.TempDir(), "gate")
		res := runRefused(t, append([]string{"gate", "serve", "--bootstrap", "--data", dir, "--http-addr", freeAddr(t), "--raft-addr", freeAddr(t)}, bad...)...)
		if res.status != errcode.ExitUsage || !strings.Contains(res.stderr, "--raft-lease") {
			t.Errorf("%v: exit %d: %s", bad, res.status, res.stderr)
		}
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("%v: data directory created (%v)", bad, err)
		}
	}
	gate, _ := startGateServe(t, t.TempDir(), "--bootstrap", "--raft-heartbeat", "300ms", "--raft-election", "400ms", "--raft-lease", "150ms")
	runGateCLI(t, "gate", "fence", "tombstone", "3", "--gate", gate).expect(t, 0, "")
	// The values reach Raft: status reports what it runs with.
	if st := runGateCLI(t, "gate", "status", "--gate", gate).expect(t, 0, "").stdout; !strings.Contains(st, "raft timeouts: heartbeat 300ms, election 400ms, lease 150ms") {
		t.Fatalf("status does not show the timeouts given:\n%s", st)
	}
	// The defaults are hashicorp/raft's.
	def, _ := startGateServe(t, t.TempDir(), "--bootstrap")
	if st := runGateCLI(t, "gate", "status", "--gate", def).expect(t, 0, "").stdout; !strings.Contains(st, "raft timeouts: heartbeat 1000ms, election 1000ms, lease 500ms") || !strings.Contains(st, "write timeout: 30s\n") {
		t.Fatalf("status of a node with default timeouts:\n%s", st)
	}
}

// gate serve --write-timeout sets Config.WriteTimeout: a value that is not
// a positive duration is USAGE before the node creates anything (0 would
// have meant raftgate's default, not "none"), and a valid one is the one
// the node runs with, as gate status reports it.
func TestGateServeWriteTimeout(t *testing.T) {
	for _, bad := range []string{"0", "-1s", "30"} {
		dir := filepath.Join(t.TempDir(), "gate")
		res := runRefused(t, "gate", "serve", "--bootstrap", "--data", dir, "--http-addr", freeAddr(t), "--raft-addr", freeAddr(t), "--write-timeout", bad)
		if res.status != errcode.ExitUsage || !strings.Contains(res.stderr, "USAGE") || !strings.Contains(res.stderr, "write-timeout") {
			t.Errorf("--write-timeout %s: exit %d: %s", bad, res.status, res.stderr)
		}
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("--write-timeout %s: data directory created (%v)", bad, err)
		}
	}
	out, _, err := runInProcess(t, nil, "gate", "serve", "--help")
	if err != nil || !strings.Contains(string(out), "--write-timeout duration") || !strings.Contains(string(out), "long-poll") {
		t.Fatalf("gate serve --help does not document --write-timeout (%v):\n%s", err, out)
	}
	gate, _ := startGateServe(t, t.TempDir(), "--bootstrap", "--write-timeout", "45s")
	if st := runGateCLI(t, "gate", "status", "--gate", gate).expect(t, 0, "").stdout; !strings.Contains(st, "write timeout: 45s\n") {
		t.Fatalf("status of a node started with --write-timeout 45s:\n%s", st)
	}
}

// runRefused runs a `gate serve` the test expects to be refused: one that
// is not would serve until killed, so 20 s bound it and the test fails
// rather than hangs.
func runRefused(t *testing.T, args ...string) cliResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Env = cliEnv()
	return runChild(t, cmd, args)
}

// TestGateServeToken: a gate started with --token-file refuses client
// commands without the token (UNAUTHENTICATED, exit 2, nothing changed),
// serves them with --gate-token-file or $SHARDPROOF_GATE_TOKEN_FILE, and
// a token file too short to be one is refused before anything starts.
func TestGateServeToken(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a gate server")
	}
	storeDir, root, report, _ := storeRelease(t)
	tokFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokFile, []byte("c2hhcmRwcm9vZiBnYXRlIHRva2Vu\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	short := filepath.Join(t.TempDir(), "short")
	if err := os.WriteFile(short, []byte("abc\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	data := t.TempDir()
	res := runRefused(t, "gate", "serve", "--bootstrap", "--data", filepath.Join(data, "refused"), "--token-file", short,
		"--http-addr", freeAddr(t), "--raft-addr", freeAddr(t))
	gateCLI(res).expect(t, errcode.ExitUsage, errcode.Usage)
	if _, err := os.Stat(filepath.Join(data, "refused")); !os.IsNotExist(err) {
		t.Fatalf("a refused start created its data directory: %v", err)
	}

	gate, _ := startGateServe(t, filepath.Join(data, "gate"), "--bootstrap", "--token-file", tokFile)
	g := func(args ...string) gateCLI {
		t.Helper()
		return runGateCLI(t, append(args, "--gate", gate, "--retry", "0")...)
	}
	g("gate", "register", "--store", storeDir, "--report", report.String()).expect(t, errcode.ExitUsage, errcode.Unauthenticated)
	g("gate", "status").expect(t, errcode.ExitUsage, errcode.Unauthenticated)
	g("gate", "status", "--gate-token-file", short).expect(t, errcode.ExitUsage, errcode.Usage)

	g("gate", "register", "--store", storeDir, "--report", report.String(), "--gate-token-file", tokFile).expect(t, 0, "")
	g("gate", "history", "main", "--gate-token-file", tokFile).expect(t, errcode.ExitRejected, errcode.UnknownAlias)
	cmd := exec.CommandContext(t.Context(), os.Args[0], "gate", "publish", "main", root.String(), "--expect", "0", "--gate", gate)
	cmd.Env = cliEnv("SHARDPROOF_GATE=", "SHARDPROOF_GATE_TOKEN_FILE="+tokFile)
	if res := runChild(t, cmd, cmd.Args); res.status != 0 {
		t.Fatalf("publish with $SHARDPROOF_GATE_TOKEN_FILE: exit %d\n%s", res.status, res.stderr)
	}
	// The worker (and publish and recheck, which build their client the
	// same way) sends the token too: without it the gate refuses it,
	// with it the gate answers (here: no such run).
	worker := []string{"worker", "--store", storeDir, "--run", "nope", "--rank", "0", "--cache", t.TempDir(), "--once", "-q"}
	worker = append(worker, "--gate", gate)
	runGateCLI(t, worker...).expect(t, errcode.ExitUsage, errcode.Unauthenticated)
	runGateCLI(t, append(worker, "--gate-token-file", tokFile)...).expect(t, errcode.ExitRejected, errcode.UnknownRun)

	r := g("gate", "history", "main", "--gate-token-file", tokFile, "--json").expect(t, 0, "")
	var a raftgate.Alias
	if err := json.Unmarshal([]byte(r.stdout), &a); err != nil || a.Generation != 1 || a.Root != root {
		t.Fatalf("history after publish: %+v %v", a, err)
	}
}

// TestGateBackupRestore: `gate backup` writes the leader's state, refuses
// to overwrite a file without --force, and `gate serve --bootstrap
// --restore` founds a new gate on it that answers with the old alias and
// fence.
func TestGateBackupRestore(t *testing.T) {
	if testing.Short() {
		t.Skip("runs gate servers")
	}
	storeDir, root, report, _ := storeRelease(t)
	gate, stop := startGateServe(t, t.TempDir(), "--bootstrap")
	g := func(gate string, args ...string) gateCLI {
		t.Helper()
		return runGateCLI(t, append(args, "--gate", gate, "--retry", "0")...)
	}
	g(gate, "gate", "register", "--store", storeDir, "--report", report.String()).expect(t, 0, "")
	g(gate, "gate", "publish", "main", root.String(), "--expect", "0").expect(t, 0, "")
	g(gate, "gate", "fence", "tombstone", "3").expect(t, 0, "")

	file := filepath.Join(t.TempDir(), "gate.backup")
	var out struct {
		Bytes       int             `json:"bytes"`
		StateDigest manifest.Digest `json:"stateDigest"`
		StateIndex  *uint64         `json:"stateIndex"`
		Aliases     int             `json:"aliases"`
	}
	var b []byte
	// The backup's index and sha256 are what gate status --digest shows
	// at that index. The gate may apply a command of its own between the
	// two reads (its cluster-version raise): then both are read again.
	for attempt := 1; ; attempt++ {
		if attempt > 1 {
			os.Remove(file)
		}
		r := g(gate, "gate", "backup", file, "--json").expect(t, 0, "")
		var err error
		if b, err = os.ReadFile(file); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
			t.Fatalf("backup --json: %v\n%s", err, r.stdout)
		}
		if out.Bytes != len(b) || out.StateDigest != manifest.Sum(b) || out.Aliases != 1 {
			t.Fatalf("backup says %+v; the file holds %d bytes with sha256 %s", out, len(b), manifest.Sum(b))
		}
		if out.StateIndex == nil || *out.StateIndex == 0 {
			t.Fatalf("backup names no command index after three commands:\n%s", r.stdout)
		}
		var st raftgate.Status
		r = g(gate, "gate", "status", "--digest", "--json").expect(t, 0, "")
		if err := json.Unmarshal([]byte(r.stdout), &st); err != nil || st.StateDigest == nil {
			t.Fatalf("status --digest --json: %v\n%s", err, r.stdout)
		}
		if st.StateIndex == *out.StateIndex {
			if *st.StateDigest != out.StateDigest {
				t.Fatalf("at command index %d the backup's state is %s, gate status --digest says %s", st.StateIndex, out.StateDigest, *st.StateDigest)
			}
			break
		}
		if attempt == 5 {
			t.Fatalf("backup at command index %d, status at %d, five times", *out.StateIndex, st.StateIndex)
		}
	}
	g(gate, "gate", "backup", file).expect(t, errcode.ExitUsage, errcode.Usage)
	r := g(gate, "gate", "backup", file, "--force").expect(t, 0, "")
	if !regexp.MustCompile(`, state sha256:[0-9a-f]{64} at command index [1-9][0-9]*: `).MatchString(r.stdout) {
		t.Fatalf("backup does not print the command index:\n%s", r.stdout)
	}
	if entries, _ := os.ReadDir(filepath.Dir(file)); len(entries) != 1 {
		t.Fatalf("backup left temporary files: %v", entries)
	}
	stop()

	// Without --bootstrap, or with a backup that is not one, nothing starts.
	newDir := filepath.Join(t.TempDir(), "new")
	gateCLI(runRefused(t, "gate", "serve", "--data", newDir, "--restore", file,
		"--http-addr", freeAddr(t), "--raft-addr", freeAddr(t))).expect(t, errcode.ExitUsage, errcode.Usage)
	bad := filepath.Join(t.TempDir(), "bad")
	os.WriteFile(bad, b[:len(b)/2], 0o600)
	gateCLI(runRefused(t, "gate", "serve", "--data", newDir, "--bootstrap", "--restore", bad,
		"--http-addr", freeAddr(t), "--raft-addr", freeAddr(t))).expect(t, errcode.ExitInvalid, errcode.BadDocument)
	if _, err := os.Stat(newDir); !os.IsNotExist(err) {
		t.Fatalf("a refused restore created %s", newDir)
	}

	restored, _ := startGateServe(t, newDir, "--bootstrap", "--restore", file)
	r = g(restored, "gate", "history", "main", "--json").expect(t, 0, "")
	var a raftgate.Alias
	if err := json.Unmarshal([]byte(r.stdout), &a); err != nil || a.Generation != 1 || a.Root != root {
		t.Fatalf("history on the restored gate: %+v %v", a, err)
	}
	g(restored, "gate", "fence", "tombstone", "2").expect(t, errcode.ExitRejected, errcode.FenceRegression)
	g(restored, "gate", "fence", "tombstone", "4").expect(t, 0, "")
}

// TestGateServeRestoreOfADirectory: --restore given a directory (the
// backup's folder, or --data's by mistake) is USAGE, saying it is a
// directory, and creates nothing; it failed IO (exit 3) on reading it,
// which reads as a disk to look at rather than an argument to fix.
func TestGateServeRestoreOfADirectory(t *testing.T) {
	dir := t.TempDir()
	newDir := filepath.Join(dir, "new")
	r := gateCLI(runRefused(t, "gate", "serve", "--data", newDir, "--bootstrap", "--restore", dir,
		"--http-addr", freeAddr(t), "--raft-addr", freeAddr(t))).expect(t, errcode.ExitUsage, errcode.Usage)
	if !strings.Contains(r.stderr, dir+" is a directory") {
		t.Fatalf("restore of a directory does not say so:\n%s", r.stderr)
	}
	if _, err := os.Stat(newDir); !os.IsNotExist(err) {
		t.Fatalf("a refused restore created %s", newDir)
	}
}

// TestGateBackupOfNoGate: a server that answers GET /v1/state with 200
// and JSON that holds no gate state ("null", "{}": a wrong --gate) is
// not backed up. Such a file founded an empty gate on restore, which
// answered every alias UNKNOWN_ALIAS.
func TestGateBackupOfNoGate(t *testing.T) {
	for _, body := range []string{"null", "{}"} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintln(w, body)
		}))
		file := filepath.Join(t.TempDir(), "gate.backup")
		runGateCLI(t, "gate", "backup", file, "--gate", srv.URL, "--retry", "0").expect(t, errcode.ExitInvalid, errcode.BadDocument)
		srv.Close()
		if _, err := os.Stat(file); !os.IsNotExist(err) {
			t.Fatalf("a backup of %s was written: %v", body, err)
		}
	}
}

// TestGateBackupOfOlderGate: a gate of a build that does not send the
// state's command index (X-Shardproof-State-Index) is still backed up;
// the backup says the index is unknown instead of naming one.
func TestGateBackupOfOlderGate(t *testing.T) {
	state, err := raftgate.EncodeState(raftgate.NewState())
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(state)
	}))
	defer srv.Close()
	dir := t.TempDir()
	r := runGateCLI(t, "gate", "backup", filepath.Join(dir, "a"), "--gate", srv.URL, "--retry", "0").expect(t, 0, "")
	if !strings.Contains(r.stdout, " command index unknown (the gate does not send it: an older build): ") {
		t.Fatalf("backup of a gate that sends no index:\n%s", r.stdout)
	}
	r = runGateCLI(t, "gate", "backup", filepath.Join(dir, "b"), "--gate", srv.URL, "--retry", "0", "--json").expect(t, 0, "")
	var out map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || out["stateDigest"] == nil || out["stateIndex"] != nil {
		t.Fatalf("backup --json of a gate that sends no index: %v\n%s", err, r.stdout)
	}
}

// TestGateServeTLS: a gate on TLS serves https:// clients that trust its
// CA (--gate-ca or $SHARDPROOF_GATE_CA), refuses with USAGE those that do
// not, and takes its TLS flags together only.
func TestGateServeTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a gate server")
	}
	dir := t.TempDir()
	pki := raftgate.NewTestPKI(t, dir, "gate")
	res := runRefused(t, "gate", "serve", "--bootstrap", "--data", filepath.Join(dir, "half"), "--tls-cert", pki.CertFile,
		"--http-addr", freeAddr(t), "--raft-addr", freeAddr(t))
	gateCLI(res).expect(t, errcode.ExitUsage, errcode.Usage)

	gate, _ := startGateServe(t, filepath.Join(dir, "gate"), "--bootstrap", "--tls-cert", pki.CertFile, "--tls-key", pki.KeyFile, "--tls-ca", pki.CAFile)
	if !strings.HasPrefix(gate, "https://") {
		t.Fatalf("gate URL %s", gate)
	}
	r := runGateCLI(t, "gate", "status", "--gate", gate, "--gate-ca", pki.CAFile, "--json").expect(t, 0, "")
	var st raftgate.Status
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil || st.ID != "gate-1" || st.RaftState != "Leader" {
		t.Fatalf("status over TLS: %+v %v", st, err)
	}
	runGateCLI(t, "gate", "status", "--gate", gate, "--retry", "0").expect(t, errcode.ExitUsage, errcode.Usage)
	cmd := exec.CommandContext(t.Context(), os.Args[0], "gate", "fence", "tombstone", "1", "--gate", gate)
	cmd.Env = cliEnv("SHARDPROOF_GATE=", "SHARDPROOF_GATE_CA="+pki.CAFile)
	if res := runChild(t, cmd, cmd.Args); res.status != 0 || !strings.Contains(res.stdout, "1") {
		t.Fatalf("fence with $SHARDPROOF_GATE_CA: exit %d\n%s%s", res.status, res.stdout, res.stderr)
	}
}

// nonLoopbackIP returns an address of this machine that is not loopback,
// the way another host reaches a gate.
func nonLoopbackIP(t *testing.T) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() && !n.IP.IsLinkLocalUnicast() {
			return n.IP.String()
		}
	}
	t.Skip("this machine has no address but loopback")
	return ""
}

// serveLogged runs `gate serve` with the arguments args returns, waits
// until probe/readyz answers and returns the child's stderr; it stops the
// child with SIGINT at the end of the test. args names addresses from
// freeAddr, which closes its listener before the child binds the port:
// another process may take it in between, so a child that exits with
// "address already in use" starts again with what args returns next (new
// ports, a fresh data directory).
func serveLogged(t *testing.T, args func() (probe string, args []string)) *syncBuffer {
	t.Helper()
	for attempt := 1; ; attempt++ {
		probe, a := args()
		stderr, taken := tryServeLogged(t, probe, a...)
		if !taken {
			return stderr
		}
		if attempt == 3 {
			t.Fatalf("gate serve: ports taken three times\n%s", stderr.String())
		}
	}
}

// tryServeLogged is one attempt of serveLogged; taken reports a child
// that exited because one of its ports was already in use.
func tryServeLogged(t *testing.T, probe string, args ...string) (stderr *syncBuffer, taken bool) {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"gate", "serve"}, args...)...)
	cmd.Env = cliEnv()
	stderr = &syncBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			t.Errorf("gate serve did not stop on SIGINT")
		}
	})
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if resp, err := readyClient.Get(probe + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return stderr, false
			}
		}
		select {
		case <-exited:
			if strings.Contains(stderr.String(), "address already in use") {
				return stderr, true
			}
			t.Fatalf("gate serve exited before it was ready\n%s", stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("gate serve not ready\n%s", stderr.String())
		}
	}
}

// serveLogged starts the child again, on new ports, when one it was given
// is taken: here the first HTTP address is held by a listener of the test.
func TestServeLoggedStartsAgainOnATakenPort(t *testing.T) {
	if testing.Short() {
		t.Skip("runs gate servers")
	}
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	var tries []string
	stderr := serveLogged(t, func() (string, []string) {
		addr := freeAddr(t)
		if len(tries) == 0 {
			addr = held.Addr().String()
		}
		tries = append(tries, addr)
		return "http://" + addr, []string{"--bootstrap", "--data", t.TempDir(), "--http-addr", addr, "--raft-addr", freeAddr(t)}
	})
	if len(tries) != 2 || tries[1] == tries[0] {
		t.Fatalf("gate serve started on %v, want the held address and then another", tries)
	}
	if s := stderr.String(); strings.Contains(s, "address already in use") || !strings.Contains(s, tries[1]) {
		t.Fatalf("the stderr returned is not the second child's:\n%s", s)
	}
}

// TestGateTokenInClearText: a gate token sent over plain http to a host
// that is not loopback can be read by whoever sees the traffic. Client
// commands warn once, naming the URL, and still work (a gate on a network
// its operators trust keeps running without TLS); `gate serve
// --token-file` without TLS on an address other hosts reach warns at
// start. Over loopback, or without a token, nothing is said.
func TestGateTokenInClearText(t *testing.T) {
	if testing.Short() {
		t.Skip("runs gate servers")
	}
	ip := nonLoopbackIP(t)
	storeDir, _, report, _ := storeRelease(t)
	tokFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokFile, []byte("c2hhcmRwcm9vZiBnYXRlIHRva2Vu\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	const clientWarning = "the gate token is sent in clear text"
	const serveWarning = "the gate token travels in clear text"

	// Bound to every interface: reachable from other hosts.
	var port string
	stderr := serveLogged(t, func() (string, []string) {
		port = strings.TrimPrefix(freeAddr(t), "127.0.0.1:")
		return "http://127.0.0.1:" + port, []string{"--bootstrap", "--data", t.TempDir(), "--token-file", tokFile,
			"--http-addr", "0.0.0.0:" + port, "--raft-addr", freeAddr(t)}
	})
	if s := stderr.String(); strings.Count(s, serveWarning) != 1 || !regexp.MustCompile(`httpAddr=\S+:`+port).MatchString(s) {
		t.Fatalf("gate serve with a token on 0.0.0.0 without TLS: want one warning naming its address\n%s", s)
	}

	remote := "http://" + net.JoinHostPort(ip, port)
	// Two requests (the release, then the register) to the same URL: one
	// warning, naming it, and the command works.
	r := runGateCLI(t, "gate", "register", "--store", storeDir, "--report", report.String(), "--gate", remote, "--gate-token-file", tokFile, "--retry", "0").expect(t, 0, "")
	if strings.Count(r.stderr, clientWarning) != 1 || !strings.Contains(r.stderr, "url="+remote) {
		t.Fatalf("a token sent to %s: want one warning naming the URL\n%s", remote, r.stderr)
	}
	// The same over loopback, or without a token: no warning.
	r = runGateCLI(t, "gate", "status", "--gate", "http://127.0.0.1:"+port, "--gate-token-file", tokFile, "--retry", "0").expect(t, 0, "")
	if strings.Contains(r.stderr, clientWarning) {
		t.Fatalf("a token sent over loopback warned\n%s", r.stderr)
	}
	r = runGateCLI(t, "gate", "status", "--gate", "http://localhost:"+port, "--gate-token-file", tokFile, "--retry", "0").expect(t, 0, "")
	if strings.Contains(r.stderr, clientWarning) {
		t.Fatalf("a token sent to localhost warned\n%s", r.stderr)
	}
	r = runGateCLI(t, "gate", "status", "--gate", remote, "--retry", "0").expect(t, errcode.ExitUsage, errcode.Unauthenticated)
	if strings.Contains(r.stderr, clientWarning) {
		t.Fatalf("a request without a token warned\n%s", r.stderr)
	}

	// A token-guarded gate on loopback only says nothing at start.
	stderr = serveLogged(t, func() (string, []string) {
		lo := freeAddr(t)
		return "http://" + lo, []string{"--bootstrap", "--data", t.TempDir(), "--token-file", tokFile, "--http-addr", lo, "--raft-addr", freeAddr(t)}
	})
	if s := stderr.String(); strings.Contains(s, serveWarning) {
		t.Fatalf("gate serve with a token on loopback warned\n%s", s)
	}
}

// gate status on a member that halted at a committed command its build
// cannot decode says so first, with the log index and what to do (upgrade
// and restart), and exits 3 GATE_HALTED instead of 0 with a role and
// indexes that look healthy.
func TestGateStatusOfHaltedMember(t *testing.T) {
	n := raftgate.StartTestNode(t, raftgate.TestConfig(t.TempDir(), "g1"))
	for deadline := time.Now().Add(10 * time.Second); !n.IsLeader(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no leader")
		}
	}
	// A newer build's command, as a leader running it would commit it.
	f := n.Raft().Apply([]byte(`{"type":"advanceFence","now":1,"kind":"tombstone","value":5,"spareChecked":true,"future":1}`), 5*time.Second)
	if err := f.Error(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); n.Halted() == nil; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the member did not halt")
		}
	}
	r := runGateCLI(t, "gate", "status", "--gate", n.URL()).expect(t, errcode.ExitError, errcode.GateHalted)
	if want := fmt.Sprintf("HALTED at log index %d: ", f.Index()); !strings.HasPrefix(r.stdout, want) {
		t.Fatalf("gate status of a halted member:\n%s\nwant it to start %q", r.stdout, want)
	}
	// Both say what to do.
	for _, out := range []string{r.stdout, r.stderr} {
		if !strings.Contains(out, "upgrade it to the other members' build and restart it on its data directory") {
			t.Fatalf("gate status of a halted member does not say to upgrade and restart it:\n%s", out)
		}
	}
}

// gate status on a leader that removed itself (gate remove of the leader's
// ID: its Raft shuts down) says first that the node is no longer a member,
// with the configuration it holds, and exits 3 NOT_LEADER, what the node
// answers every read and write. It printed "Shutdown" and exited 0. A
// remaining member's status is not affected.
func TestGateStatusOfRemovedMember(t *testing.T) {
	c, old := clusterWhoseLeaderRemovedItself(t)
	r := runGateCLI(t, "gate", "status", "--gate", old.URL()).expect(t, errcode.ExitError, errcode.NotLeader)
	want := "REMOVED: node " + old.ID() + " is no longer a member of the gate cluster: its Raft configuration lists "
	if !strings.HasPrefix(r.stdout, want) || !strings.Contains(r.stderr, "no longer a member") {
		t.Fatalf("gate status of the removed leader:\nstdout: %s\nstderr: %s\nwant stdout to start %q", r.stdout, r.stderr, want)
	}
	for _, n := range c.Nodes {
		if n == old {
			continue
		}
		r := runGateCLI(t, "gate", "status", "--gate", n.URL()).expect(t, 0, "")
		if strings.Contains(r.stdout, "REMOVED") {
			t.Fatalf("gate status of the member %s:\n%s", n.ID(), r.stdout)
		}
	}
}

// clusterWhoseLeaderRemovedItself makes a cluster of three whose leader
// removes itself (gate remove of its own ID) and returns it once that
// leader's Raft has shut down. A leader on FastTiming's 100 ms lease may
// lose its leadership on a loaded machine: while it commits its removal
// (the remaining two must both answer within the lease, since it no
// longer counts itself), which is INDETERMINATE, or before the request
// reaches it, which it then forwards to the new leader, which removes a
// follower (its Raft goes on). Neither is the case under test, so it
// starts over on a new cluster, up to five times.
func clusterWhoseLeaderRemovedItself(t *testing.T) (*raftgate.TestCluster, *raftgate.Node) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	for attempt := 1; ; attempt++ {
		c := raftgate.MakeCluster(t, 3)
		old := c.Leader(10 * time.Second)
		term := old.Raft().CurrentTerm()
		cl := raftgate.NewClient(old.URL())
		err := cl.RemoveMember(ctx, old.ID())
		cl.Close()
		moved := raftgate.IsIndeterminate(err)
		if err != nil && (!moved || attempt == 5) {
			t.Fatalf("remove the leader %s: %v", old.ID(), err)
		}
		// A leader that committed its own removal shuts its Raft down in
		// the term it led; a node that forwarded the request had heard
		// from a leader of a later term.
		for deadline := time.Now().Add(10 * time.Second); !moved && old.Raft().State() != raft.Shutdown; time.Sleep(20 * time.Millisecond) {
			moved = old.Raft().CurrentTerm() != term
			if moved && attempt == 5 {
				t.Fatalf("%s was no longer the leader when it removed itself, five times", old.ID())
			}
			if time.Now().After(deadline) {
				t.Fatalf("the removed leader's Raft is %s", old.Raft().State())
			}
		}
		if !moved {
			return c, old
		}
		if err == nil {
			err = errors.New("the request was forwarded to a new leader")
		}
		t.Logf("attempt %d: %s lost its leadership around its removal: %v; again on a new cluster", attempt, old.ID(), err)
		c.Shutdown()
	}
}

// gate status prints the node's build version and the cluster version;
// in a cluster with a member on a build from before the version
// handshake, that member's status says it reports none, and the
// upgraded leader's lists what each member reports, which keeps the
// cluster version where it is.
func TestGateStatusPrintsVersions(t *testing.T) {
	c := raftgate.MakeCluster(t, 2, func(cfg *raftgate.Config) {
		if cfg.ID == "node1" {
			raftgate.OlderBuild(0)(cfg)
		}
	})
	old, up := c.Nodes[0], c.Nodes[1]
	for deadline := time.Now().Add(20 * time.Second); !up.IsLeader(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("node2 never led")
		}
		if old.IsLeader() {
			old.Raft().LeadershipTransfer()
		}
	}
	r := runGateCLI(t, "gate", "status", "--gate", old.URL()).expect(t, 0, "")
	if !strings.Contains(r.stdout, "command-schema version: build none (a build before the version handshake), cluster 0\n") {
		t.Fatalf("status of the old member:\n%s", r.stdout)
	}
	bv := raftgate.CommandVersion
	want := fmt.Sprintf("cluster version rises once every member reports %d: node1: none (a build before the version handshake); node2: %d\n", bv, bv)
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		r = runGateCLI(t, "gate", "status", "--gate", up.URL()).expect(t, 0, "")
		if strings.Contains(r.stdout, fmt.Sprintf("command-schema version: build %d, cluster 0\n", bv)) && strings.Contains(r.stdout, want) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status of the upgraded leader:\n%s\nwant build %d, cluster 0 and %q", r.stdout, bv, want)
		}
	}

	n := raftgate.StartTestNode(t, raftgate.TestConfig(t.TempDir(), "g1"))
	for deadline := time.Now().Add(20 * time.Second); n.ClusterVersion() != raftgate.CommandVersion; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("a new single-node gate never raised its version")
		}
	}
	r = runGateCLI(t, "gate", "status", "--gate", n.URL()).expect(t, 0, "")
	if !strings.Contains(r.stdout, fmt.Sprintf("command-schema version: build %d, cluster %d\n", bv, bv)) || strings.Contains(r.stdout, "rises once") {
		t.Fatalf("status of an upgraded gate:\n%s", r.stdout)
	}
	// Its cluster identity, in both forms; none below version 3.
	if !strings.Contains(r.stdout, "cluster ID: "+n.ClusterID()+"\n") || n.ClusterID() == "" {
		t.Fatalf("status of a gate at version %d names no cluster ID %q:\n%s", bv, n.ClusterID(), r.stdout)
	}
	r = runGateCLI(t, "gate", "status", "--json", "--gate", n.URL()).expect(t, 0, "")
	if !strings.Contains(r.stdout, `"clusterID": "`+n.ClusterID()+`"`) {
		t.Fatalf("status --json of a gate at version %d names no cluster ID:\n%s", bv, r.stdout)
	}
	if r = runGateCLI(t, "gate", "status", "--gate", old.URL()).expect(t, 0, ""); strings.Contains(r.stdout, "cluster ID") {
		t.Fatalf("status of a cluster at version 0 names a cluster ID:\n%s", r.stdout)
	}
}

// gate status on a member that joined on an empty directory and is still
// a learner says so: it grants no vote until the leader promotes it. Here
// its join is held on the way to the leader, so it is not answered yet.
func TestGateStatusOfLearner(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	c := raftgate.MakeCluster(t, 1)
	arrived, release := make(chan struct{}, 1), make(chan struct{})
	target, _ := url.Parse(c.Nodes[0].URL())
	rp := httputil.NewSingleHostReverseProxy(target)
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/join" {
			select {
			case arrived <- struct{}{}:
			default:
			}
			<-release
		}
		rp.ServeHTTP(w, r)
	}))
	defer proxy.Close()
	cfg := raftgate.TestConfig(t.TempDir(), "node2")
	cfg.Join, cfg.Bootstrap = proxy.Listener.Addr().String(), false
	n := raftgate.NewNode(cfg)
	defer n.Shutdown()
	started := make(chan error, 1)
	go func() { started <- n.Start(ctx) }()
	select {
	case <-arrived:
	case err := <-started:
		t.Fatalf("start returned before its join was answered: %v", err)
	}
	r := runGateCLI(t, "gate", "status", "--gate", n.URL()).expect(t, 0, "")
	close(release)
	if !strings.Contains(r.stdout, "learner: joined on an empty directory; its join was not answered") {
		t.Fatalf("gate status of a learner:\n%s", r.stdout)
	}
	if err := <-started; err != nil {
		t.Fatal(err)
	}
	raftgate.WaitPromoted(t, n, 10*time.Second)
	r = runGateCLI(t, "gate", "status", "--gate", n.URL()).expect(t, 0, "")
	if strings.Contains(r.stdout, "learner") || !strings.Contains(r.stdout, "member node2: http "+n.HTTPAddr()+", raft "+n.RaftAddr()+", voter") {
		t.Fatalf("gate status of the promoted member:\n%s", r.stdout)
	}
}

// A gate serve whose HTTP or Raft port is in use fails IO, exit 3, and
// leaves its --data as it found it: it created DIR (and raft.db in it)
// before binding, and the next start, on a free port, found a directory
// it had not made. A DIR that did not exist still does not; an empty one
// stays empty.
func TestGateServePortInUseCreatesNothing(t *testing.T) {
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	taken := held.Addr().String()
	for _, port := range []string{"--http-addr", "--raft-addr"} {
		for _, premade := range []bool{false, true} {
			dir := filepath.Join(t.TempDir(), "gate")
			if premade {
				if err := os.Mkdir(dir, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			addrs := map[string]string{"--http-addr": freeAddr(t), "--raft-addr": freeAddr(t)}
			addrs[port] = taken
			r := runRefused(t, "gate", "serve", "--bootstrap", "--data", dir, "--http-addr", addrs["--http-addr"], "--raft-addr", addrs["--raft-addr"])
			if r.status != errcode.ExitError || !strings.Contains(r.stderr, "shardproof: IO:") || !strings.Contains(r.stderr, "address already in use") {
				t.Fatalf("%s in use (DIR made before: %v): exit %d, want 3 with IO\n%s", port, premade, r.status, r.stderr)
			}
			entries, err := os.ReadDir(dir)
			switch {
			case !premade && !errors.Is(err, os.ErrNotExist):
				t.Errorf("%s in use: DIR left behind (%v): %v", port, err, entries)
			case premade && (err != nil || len(entries) != 0):
				t.Errorf("%s in use: the empty DIR given holds %v (%v)", port, entries, err)
			}
		}
	}
}

// A gate serve that fails after it made its --data (here its --join is
// no gate: the start binds its ports, makes DIR, opens raft.db, writes
// the learner marker and only then asks the member for its status)
// removes what it made, DIR and the parents it made for it, where it left
// a DIR whose marker refused the next start with --bootstrap as "a member
// whose join was not answered", though it had asked no one to add it.
// That start now founds the gate. A DIR that existed keeps what it held.
func TestFailedStartRemovesTheDataDirItMade(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a gate server")
	}
	notGate := httptest.NewServer(http.NotFoundHandler())
	defer notGate.Close()
	join := strings.TrimPrefix(notGate.URL, "http://")
	for _, premade := range []bool{false, true} {
		parent := filepath.Join(t.TempDir(), "volume")
		dir := filepath.Join(parent, "gate")
		note := filepath.Join(dir, "note")
		if premade {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(note, []byte("kept\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		r := runRefused(t, "gate", "serve", "--id", "joiner", "--join", join, "--data", dir, "--http-addr", freeAddr(t), "--raft-addr", freeAddr(t))
		if r.status != errcode.ExitUsage || !strings.Contains(r.stderr, "shardproof: USAGE: join via "+join) {
			t.Fatalf("a join via a server that is no gate (DIR made before: %v): exit %d, want 2 with USAGE\n%s", premade, r.status, r.stderr)
		}
		if !premade {
			if _, err := os.Stat(parent); !errors.Is(err, os.ErrNotExist) {
				entries, _ := os.ReadDir(dir)
				t.Fatalf("the failed start left what it made: %v, DIR holds %v", err, entries)
			}
			continue
		}
		if b, err := os.ReadFile(note); err != nil || string(b) != "kept\n" {
			t.Fatalf("the DIR given, after the failed start: %q, %v", b, err)
		}
	}

	dir := filepath.Join(t.TempDir(), "gate")
	runRefused(t, "gate", "serve", "--id", "joiner", "--join", join, "--data", dir, "--http-addr", freeAddr(t), "--raft-addr", freeAddr(t))
	gate, stop := startGateServe(t, dir, "--bootstrap", "--id", "joiner")
	runGateCLI(t, "gate", "status", "--gate", gate).expect(t, 0, "")
	stop()
}
