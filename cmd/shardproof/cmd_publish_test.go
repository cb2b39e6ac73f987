package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/objstore"
	"github.com/shardproof/shardproof/objstore/file"
	"github.com/shardproof/shardproof/raftgate"
	"github.com/shardproof/shardproof/stage"
	"github.com/shardproof/shardproof/stage/stagetest"
	"github.com/shardproof/shardproof/trainer"
)

// cli runs `shardproof args…` in-process and returns stdout. Flags of the
// invoked command are reset first, since cobra keeps parsed values (and
// Changed) between runs of one process.
func cli(t *testing.T, args ...string) (string, error) {
	t.Helper()
	out, errOut, err := runInProcess(t, nil, args...)
	if testing.Verbose() {
		t.Logf("shardproof %s\n%s%s", strings.Join(args, " "), out, errOut)
	}
	return string(out), err
}

// tempFileStore opens a file store in a new temporary directory, closed
// when the test ends.
func tempFileStore(t *testing.T) (string, *file.Store) {
	t.Helper()
	dir := t.TempDir()
	s, err := file.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return dir, s
}

// startLeader starts a single-node gate and waits until it leads; the
// client is closed at the end of the test.
func startLeader(t *testing.T) (*raftgate.Node, *raftgate.Client) {
	t.Helper()
	node := raftgate.StartTestNode(t, raftgate.TestConfig(t.TempDir(), "gate1"))
	g := raftgate.NewClient(node.URL())
	t.Cleanup(g.Close)
	for deadline := time.Now().Add(10 * time.Second); !node.IsLeader(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no leader")
		}
	}
	return node, g
}

func wantExit(t *testing.T, err error, code errcode.Code, exit int) {
	t.Helper()
	if errcode.Of(err) != code || exitStatus(err) != exit {
		t.Fatalf("code %s exit %d (%v), want %s / %d", errcode.Of(err), exitStatus(err), err, code, exit)
	}
}

// The cutover through the CLI: publish, a refused candidate, a stale CAS,
// a worker that reads its run's root after the alias moved, and a recheck
// that renews a closed permit.
func TestPublishWorkerRecheckCLI(t *testing.T) {
	ctx := context.Background()
	dir, s := tempFileStore(t)
	gen1 := stagetest.Synth(t, s, 1500, 4, 1)
	gen2 := stagetest.Synth(t, s, 1500, 4, 2)
	node, g := startLeader(t)
	base := []string{"--store", dir, "--gate", node.URL(), "-q"}
	pub := func(extra ...string) (string, error) {
		return cli(t, append(append([]string{"publish"}, base...), extra...)...)
	}

	out, err := pub("--alias", "main", "--root", gen1.Root.String())
	if err != nil || !strings.Contains(out, "published main generation 1 -> "+gen1.Root.String()) {
		t.Fatalf("publish gen1: %q %v", out, err)
	}
	// Its verification's shuffle files and commit records are gone.
	if page, err := s.List(ctx, "jobs/", "", 10); err != nil || len(page.Objects) != 0 {
		t.Fatalf("publish left job scratch: %+v %v", page.Objects, err)
	}
	// A stale CAS lost generation 1 to another root; one from the future
	// names a generation that does not exist.
	_, err = pub("--alias", "main", "--root", gen2.Root.String(), "--expect-generation", "0")
	wantExit(t, err, errcode.PublishConflict, errcode.ExitRejected)
	_, err = pub("--alias", "main", "--root", gen2.Root.String(), "--expect-generation", "5")
	wantExit(t, err, errcode.GenerationConflict, errcode.ExitRejected)

	// A swapped shard: the candidate pins a version holding another
	// shard's bytes. Verify finds it; the alias stays.
	swapped := stagetest.ReplaceShardBytes(t, s, gen2, 1, stagetest.ShardBytes(t, s, gen2.Release.Shards[0]))
	out, err = pub("--alias", "main", "--root", swapped.Root.String(), "--expect-generation", "1")
	wantExit(t, err, errcode.DigestMismatch, errcode.ExitInvalid)
	if !strings.Contains(out, "verdict   INVALID") || !strings.Contains(out, "DIGEST_MISMATCH") {
		t.Fatalf("INVALID summary: %q", out)
	}
	if al, _ := g.Alias(ctx, "main"); al.Generation != 1 || al.Root != gen1.Root {
		t.Fatalf("alias moved to %d %s", al.Generation, al.Root)
	}

	if _, err := g.CreateRun(ctx, &raftgate.CreateRun{Run: "r1", Alias: "main", WorldSize: 2, BarrierTimeoutMs: 30_000}); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Attest(ctx, "r1", 1, gen1.Root, []manifest.Digest{gen1.Release.Shards[1].Digest, gen1.Release.Shards[3].Digest}); err != nil {
		t.Fatal(err)
	}
	out, err = pub("--alias", "main", "--root", gen2.Root.String(), "--expect-generation", "1")
	if err != nil || !strings.Contains(out, "generation 2") {
		t.Fatalf("publish gen2: %q %v", out, err)
	}
	// Rank 0 starts after the switch and still reads generation 1.
	worker := func(cache string) (string, error) {
		return cli(t, "worker", "--store", dir, "--gate", node.URL(), "--run", "r1", "--rank", "0", "--cache", cache, "--once", "-q")
	}
	out, err = worker(t.TempDir())
	if err != nil || !strings.Contains(out, "ready run=r1 rank=0 root="+gen1.Root.String()) {
		t.Fatalf("worker: %q %v", out, err)
	}

	// Fence advance closes the run's permit; recheck renews it.
	tomb, _, _, err := objstore.PutBlob(ctx, s, []byte(`{"schema":"training.tombstones.v1","entries":[{"seq":4,"sampleId":"gone"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	tombD := manifest.Digest(tomb)
	out, err = cli(t, "gate", "fence", "advance", "--store", dir, "--gate", node.URL(), "--tombstones", tombD.String())
	if err != nil || !strings.Contains(out, "tombstone fence 4") || !strings.Contains(out, "closed 2 permits") {
		t.Fatalf("fence advance: %q %v", out, err)
	}
	// The gate's own form still works (and a lower value is refused).
	_, err = cli(t, "gate", "fence", "tombstone", "3", "--gate", node.URL())
	wantExit(t, err, errcode.FenceRegression, errcode.ExitRejected)
	_, err = g.AdmitCheckpoint(ctx, "r1", 0, gen1.Root)
	wantExit(t, err, errcode.PermitClosed, errcode.ExitRejected)
	// --closed finds the roots with closed permits: generation 1 (the
	// run) and generation 2 (the alias).
	// Its verifications keep their jobs in a scratch.
	scratch := filepath.Join(t.TempDir(), "scratch")
	out, err = cli(t, append(append([]string{"recheck"}, base...), "--closed", "--root", gen1.Root.String(), "--tombstones", tombD.String(), "--scratch", scratch)...)
	if err != nil || strings.Count(out, "renewed") != 2 || !strings.Contains(out, gen2.Root.String()) {
		t.Fatalf("recheck: %q %v", out, err)
	}
	if _, err := os.Stat(filepath.Join(scratch, "@tmp")); err != nil {
		t.Fatalf("recheck --scratch wrote nothing to the scratch: %v", err)
	}
	if _, err := g.AdmitCheckpoint(ctx, "r1", 0, gen1.Root); err != nil {
		t.Fatalf("checkpoint after recheck: %v", err)
	}
	// Generation 1 was rechecked at the new fence: publishing it again
	// reuses what the gate holds. A root never checked against the new
	// log is refused before any verify work.
	out, err = pub("--alias", "main", "--root", gen1.Root.String(), "--expect-generation", "2")
	if err != nil || !strings.Contains(out, "stored report reused") || !strings.Contains(out, "generation 3") {
		t.Fatalf("republish gen1: %q %v", out, err)
	}
	gen3 := stagetest.Synth(t, s, 600, 2, 3)
	_, err = pub("--alias", "main", "--root", gen3.Root.String(), "--expect-generation", "3")
	wantExit(t, err, errcode.FenceBehind, errcode.ExitRejected)
	// Usage errors.
	_, err = pub("--alias", "main")
	wantExit(t, err, errcode.Usage, errcode.ExitUsage)
	_, err = cli(t, "worker", "--store", dir, "--run", "r1", "--cache", t.TempDir())
	wantExit(t, err, errcode.Usage, errcode.ExitUsage)
}

// damagedCopy copies the file store at dir to a new directory and flips
// one bit of the stored bytes of shard, as a store copied through a bad
// disk or link holds them, and returns the copy's directory.
func damagedCopy(t *testing.T, dir string, shard manifest.Digest) string {
	t.Helper()
	bad := filepath.Join(t.TempDir(), "store")
	if err := os.CopyFS(bad, os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}
	versions, err := filepath.Glob(filepath.Join(bad, filepath.FromSlash(shard.BlobKey()), "@*"))
	if err != nil || len(versions) != 1 {
		t.Fatalf("versions of %s: %v %v", shard, versions, err)
	}
	b, err := os.ReadFile(versions[0])
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 4
	if err := os.WriteFile(versions[0], b, 0o644); err != nil {
		t.Fatal(err)
	}
	return bad
}

// gate register --report of a report that verify wrote from a damaged
// copy of a release the gate holds VERIFIED (here PUBLISHED) fails with
// the damage's code and registers nothing, as publish does: it made the
// release INVALID and closed the permits of its alias and runs for good.
// The same report of a root the gate never proved is registered INVALID.
func TestGateRegisterOfDamagedCopy(t *testing.T) {
	ctx := context.Background()
	dir, s := tempFileStore(t)
	gen1 := stagetest.Synth(t, s, 1200, 4, 1)
	gen2 := stagetest.Synth(t, s, 800, 2, 2)
	node, g := startLeader(t)
	if out, err := cli(t, "publish", "--store", dir, "--gate", node.URL(), "-q", "--alias", "main", "--root", gen1.Root.String()); err != nil {
		t.Fatalf("publish: %q %v", out, err)
	}
	before, err := g.Release(ctx, gen1.Root)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli(t, "gate", "register", "--store", dir, "--gate", node.URL(), "--root", gen2.Root.String()); err != nil {
		t.Fatal(err)
	}
	bad := damagedCopy(t, dir, gen1.Release.Shards[2].Digest)
	bad = damagedCopy(t, bad, gen2.Release.Shards[0].Digest)
	report := func(root manifest.Digest) string {
		t.Helper()
		out, err := cli(t, "verify", "--store", bad, "--root", root.String())
		if exitStatus(err) != errcode.ExitInvalid || !strings.Contains(out, "DIGEST_MISMATCH") {
			t.Fatalf("verify of the damaged copy: exit %d, %q", exitStatus(err), out)
		}
		for _, line := range strings.Split(out, "\n") {
			if f := strings.Fields(line); len(f) == 2 && f[0] == "report" {
				return f[1]
			}
		}
		t.Fatalf("verify printed no report: %q", out)
		return ""
	}
	register := func(report string) (string, error) {
		return cli(t, "gate", "register", "--store", bad, "--gate", node.URL(), "--report", report)
	}

	rep1 := report(gen1.Root)
	out, err := register(rep1)
	wantExit(t, err, errcode.DigestMismatch, errcode.ExitInvalid)
	if !strings.Contains(err.Error(), "nothing was registered") || !strings.Contains(err.Error(), before.Report.String()) {
		t.Fatalf("refusal: %v", err)
	}
	if rel, _ := g.Release(ctx, gen1.Root); rel.State != raftgate.ReleasePublished || rel.Report != before.Report {
		t.Fatalf("after gate register of the damaged copy's report (%q): release %s, report %s", out, rel.State, rel.Report)
	}
	// The alias's permit is open: a run can start on it.
	if _, err := g.CreateRun(ctx, &raftgate.CreateRun{Run: "r1", Alias: "main", WorldSize: 1}); err != nil {
		t.Fatalf("a run on the alias after the damaged copy: %v", err)
	}

	// A root never proven: the verdict is the release's.
	out, err = register(report(gen2.Root))
	if rel, _ := g.Release(ctx, gen2.Root); rel.State != raftgate.ReleaseInvalid || exitStatus(err) != errcode.ExitInvalid || !strings.Contains(out, "INVALID") {
		t.Fatalf("a STAGED root with a damaged shard: release %s, exit %d, output %q", rel.State, exitStatus(err), out)
	}
}

// TestRecheckClosedKeepsRollbackWindow: after a fence advance, the
// command it prints (recheck --closed) rechecks the roots of the alias's
// rollback window too, so the alias can roll back to its generation
// before. Their permits are superseded, not closed, and --closed
// rechecked the current root alone: the rollback was then
// ROLLBACK_INELIGIBLE until each earlier root was rechecked by --root.
func TestRecheckClosedKeepsRollbackWindow(t *testing.T) {
	gen1, _, node, base, tomb := twoGenerations(t)
	out, err := cli(t, append([]string{"gate", "fence", "advance", "--tombstones", manifest.Digest(tomb).String()}, base...)...)
	if err != nil || !strings.Contains(out, "recheck with: shardproof recheck --closed") {
		t.Fatalf("fence advance: %q %v", out, err)
	}
	out, err = cli(t, append([]string{"recheck", "-q", "--members", "--closed", "--tombstones", manifest.Digest(tomb).String()}, base...)...)
	if err != nil || strings.Count(out, "renewed") != 2 || !strings.Contains(out, gen1.Root.String()) {
		t.Fatalf("recheck --closed: %q %v", out, err)
	}
	out, err = cli(t, "gate", "rollback", "main", gen1.Root.String(), "--expect", "2", "--gate", node.URL())
	if err != nil || !strings.Contains(out, "main generation 3") {
		t.Fatalf("rollback to generation 1 after recheck --closed: %q %v", out, err)
	}
}

// TestRecheckJSONWithNothingToRecheck: recheck --json prints a list,
// empty when --closed finds nothing to recheck, not null (which a
// consumer iterating over the outcomes, jq '.[]', refuses).
func TestRecheckJSONWithNothingToRecheck(t *testing.T) {
	dir, _ := tempFileStore(t)
	node, _ := startLeader(t)
	out, err := cli(t, "recheck", "-q", "--closed", "--json", "--store", dir, "--gate", node.URL(),
		"--tombstones", manifest.Sum([]byte("no document is read")).String())
	if err != nil {
		t.Fatal(err)
	}
	var outs []json.RawMessage
	if err := json.Unmarshal([]byte(out), &outs); err != nil || outs == nil || len(outs) != 0 {
		t.Fatalf("recheck --closed --json with nothing closed printed %q (%v), want []", out, err)
	}
}

// TestRecheckJSONOutcomes: recheck --json prints one object per root
// asked for, in camelCase like every other --json document, naming its
// root and, unless it was renewed, the code and message of its failure:
// a root with hits, a renewed one and one the gate does not know, in
// the order given. It printed the outcome struct's Go field names
// ("ReportDigest", "Hits"), no root and no code, so a consumer could not
// tell the hit root from the renewed one, and left out a root that
// failed before any outcome (UNKNOWN_RELEASE) altogether.
func TestRecheckJSONOutcomes(t *testing.T) {
	ctx := context.Background()
	e := publishTwo(t, 300, 200)
	d, _, _, err := objstore.PutBlob(ctx, e.s, []byte(`{"schema":"training.tombstones.v1","entries":[{"seq":5,"sampleId":"syn1-a"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	hit := manifest.Digest(d).String()
	if out, err := cli(t, "gate", "fence", "advance", "--store", e.dir, "--gate", e.node.URL(), "--tombstones", hit); err != nil {
		t.Fatalf("fence advance: %q %v", out, err)
	}
	unknown := manifest.Sum([]byte("no such release"))
	out, err := e.run("recheck", "--members", "--json", "--tombstones", hit,
		"--root", e.gen1.Root.String(), "--root", e.gen2.Root.String(), "--root", unknown.String())
	wantExit(t, err, errcode.TombstoneHit, errcode.ExitInvalid)
	var outs []map[string]json.RawMessage
	if err := json.Unmarshal([]byte(out), &outs); err != nil || len(outs) != 3 {
		t.Fatalf("recheck --json printed %q (%v), want 3 outcomes", out, err)
	}
	field := func(i int, key string, v any) {
		t.Helper()
		raw, ok := outs[i][key]
		if !ok {
			t.Fatalf("outcome %d has no %q: %s", i, key, out)
		}
		if err := json.Unmarshal(raw, v); err != nil {
			t.Fatalf("outcome %d %q: %v", i, key, err)
		}
	}
	for i, want := range []struct {
		root    manifest.Digest
		renewed bool
		code    errcode.Code
	}{
		{e.gen1.Root, false, errcode.TombstoneHit},
		{e.gen2.Root, true, ""},
		{unknown, false, errcode.UnknownRelease},
	} {
		var root manifest.Digest
		var renewed bool
		var code errcode.Code
		field(i, "root", &root)
		field(i, "renewed", &renewed)
		if _, ok := outs[i]["code"]; ok {
			field(i, "code", &code)
		}
		if root != want.root || renewed != want.renewed || code != want.code {
			t.Errorf("outcome %d: root %s renewed %v code %q, want %s %v %q", i, root, renewed, code, want.root, want.renewed, want.code)
		}
		if _, ok := outs[i]["ReportDigest"]; ok {
			t.Errorf("outcome %d has Go field names: %s", i, out)
		}
	}
	var hits map[string]int64
	var reopened []string
	field(0, "hits", &hits)
	field(1, "reopened", &reopened)
	if hits["tombstone"] != 1 || len(reopened) != 1 {
		t.Fatalf("gen1 hits %v, gen2 reopened %v; want 1 tombstone hit and gen2's permit", hits, reopened)
	}
	var msg string
	field(2, "message", &msg)
	// The gate's answer names the whole root (it was cut at 64 bytes).
	if _, ok := outs[2]["reportDigest"]; ok || msg != "no release "+unknown.String() {
		t.Fatalf("the unknown root's outcome: %s", out)
	}
}

// TestFenceAdvanceHintsRollbackWindow: a fence advance that closes no
// permit (the alias's current root was rechecked before it) still leaves
// the earlier generation of its rollback window behind the fence, and
// prints the recheck that brings it back, naming how many roots, in both
// forms (advance --tombstones D, and fence tombstone VALUE). The hint
// was printed only when a permit closed, so the operator learned of the
// window from a ROLLBACK_INELIGIBLE rollback; once the roots are
// rechecked no hint is printed. The hint repeats the --store and --gate
// the advance was given, and runs as printed: without them a user
// copying it got USAGE (no store given), or asked another gate.
func TestFenceAdvanceHintsRollbackWindow(t *testing.T) {
	gen1, gen2, node, base, tomb := twoGenerations(t)
	tombD := manifest.Digest(tomb).String()
	if out, err := cli(t, append([]string{"recheck", "-q", "--members", "--root", gen2.Root.String(), "--tombstones", tombD}, base...)...); err != nil {
		t.Fatalf("recheck of generation 2 before the advance: %q %v", out, err)
	}
	hint := "1 roots to recheck (closed permits, rollback windows behind the fences); recheck with: shardproof recheck --closed --tombstones "
	out, err := cli(t, append([]string{"gate", "fence", "advance", "--tombstones", tombD}, base...)...)
	want := hint + tombD + " " + strings.Join(base, " ") + "\n"
	if err != nil || !strings.Contains(out, "closed 0 permits") || !strings.Contains(out, want) {
		t.Fatalf("fence advance that closes nothing: %q %v, want the hint %q", out, err, want)
	}
	printed := strings.Fields(strings.TrimSuffix(out[strings.Index(out, "recheck with: shardproof ")+len("recheck with: shardproof "):], "\n"))
	out, err = cli(t, "gate", "fence", "tombstone", "4", "--gate", node.URL())
	if err != nil || !strings.Contains(out, hint+"DIGEST (a tombstone log whose watermark is at least 4) --gate "+node.URL()+"\n") {
		t.Fatalf("gate fence tombstone 4: %q %v, want the hint %q", out, err, hint)
	}
	out, err = cli(t, append(printed, "-q")...)
	if err != nil || strings.Count(out, "renewed") != 1 || !strings.Contains(out, gen1.Root.String()) {
		t.Fatalf("the recheck the hint printed, %q: %q %v", printed, out, err)
	}
	out, err = cli(t, "gate", "fence", "tombstone", "4", "--gate", node.URL())
	if err != nil || strings.Contains(out, "recheck") {
		t.Fatalf("gate fence tombstone 4 with nothing left to recheck: %q %v, want no hint", out, err)
	}
	if out, err := cli(t, "gate", "rollback", "main", gen1.Root.String(), "--expect", "2", "--gate", node.URL()); err != nil {
		t.Fatalf("rollback to generation 1: %q %v", out, err)
	}
}

// TestFenceHintNamesTheFencesRootsAreBehind: the recheck a fence
// advance prints names the documents of the fences the roots are behind,
// not the one just advanced. Both generations are rechecked for
// tombstones at 4, then the benchmark fence passes them: advancing the
// tombstone fence to 4 leaves them behind the benchmark fence alone, and
// the hint names --benchmark only (it named --tombstones, whose recheck
// renews nothing: FENCE_BEHIND). Past both fences it names both, and
// the recheck it names, run with documents that reach those fences,
// renews both roots, after which no hint is printed.
func TestFenceHintNamesTheFencesRootsAreBehind(t *testing.T) {
	gen1, gen2, node, base, tomb := twoGenerations(t)
	tombD := manifest.Digest(tomb).String()
	if out, err := cli(t, append([]string{"recheck", "-q", "--members", "--root", gen1.Root.String(), "--root", gen2.Root.String(), "--tombstones", tombD}, base...)...); err != nil || strings.Count(out, "renewed") != 2 {
		t.Fatalf("recheck of both generations before the advances: %q %v", out, err)
	}
	hint := "2 roots to recheck (closed permits, rollback windows behind the fences); recheck with: shardproof recheck --closed "
	bench := "--benchmark DIGEST (a benchmark registry whose watermark is at least 3)"
	conn := " " + strings.Join(base, " ") + "\n"
	out, err := cli(t, "gate", "fence", "benchmark", "3", "--gate", node.URL())
	if err != nil || !strings.Contains(out, hint+bench+" --gate "+node.URL()+"\n") {
		t.Fatalf("gate fence benchmark 3: %q %v, want the hint %q", out, err, hint+bench)
	}
	out, err = cli(t, append([]string{"gate", "fence", "advance", "--tombstones", tombD}, base...)...)
	if err != nil || !strings.Contains(out, hint+bench+conn) || strings.Contains(out, "recheck --closed --tombstones") {
		t.Fatalf("tombstone advance with both roots behind the benchmark fence only: %q %v, want the hint %q", out, err, hint+bench+conn)
	}
	s, err := file.Open(base[1])
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var docs []string
	for _, doc := range []string{
		`{"schema":"training.tombstones.v1","entries":[{"seq":4,"sampleId":"gone"},{"seq":5,"sampleId":"gone too"}]}`,
		`{"schema":"training.benchmark.v1","entries":[{"seq":3,"sampleId":"held out"}]}`,
	} {
		d, _, _, err := objstore.PutBlob(context.Background(), s, []byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, manifest.Digest(d).String())
	}
	// The tombstone fence names its log since the advance above: it
	// moves on only with a log that extends it (docs[0] keeps seq 4).
	out, err = cli(t, append([]string{"gate", "fence", "advance", "--tombstones", docs[0]}, base...)...)
	both := hint + "--tombstones " + docs[0] + " " + bench + conn
	if err != nil || !strings.Contains(out, both) {
		t.Fatalf("tombstone advance to 5: %q %v, want the hint %q", out, err, both)
	}
	if out, err := cli(t, "gate", "fence", "tombstone", "6", "--gate", node.URL()); errcode.Of(err) != errcode.FenceLogMismatch {
		t.Fatalf("gate fence tombstone 6 on a fence that names its log: %q %v, want FENCE_LOG_MISMATCH", out, err)
	}
	out, err = cli(t, append([]string{"recheck", "-q", "--members", "--closed", "--tombstones", docs[0], "--benchmark", docs[1]}, base...)...)
	if err != nil || strings.Count(out, "renewed") != 2 {
		t.Fatalf("the recheck the hint names: %q %v", out, err)
	}
	out, err = cli(t, "gate", "fence", "tombstone", "5", "--gate", node.URL())
	if err != nil || strings.Contains(out, "recheck") {
		t.Fatalf("gate fence tombstone 5 with nothing left to recheck: %q %v, want no hint", out, err)
	}
}

// unlistedPermits is a real gate client whose Permits fails.
type unlistedPermits struct{ *raftgate.Client }

func (unlistedPermits) Permits(context.Context) ([]*raftgate.Permit, error) {
	return nil, errcode.New(errcode.GateUnavailable, "permits: connection refused")
}

// TestRecheckHintWarnsWhenUnlisted: when the roots to recheck cannot be
// listed after an advance, the hint is a warning on stderr naming the
// code and the recheck to run; nothing goes to stdout, and the caller
// has no error to return (the fence has advanced).
func TestRecheckHintWarnsWhenUnlisted(t *testing.T) {
	_, g := startLeader(t)
	var out, errOut strings.Builder
	cmd := &cobra.Command{}
	cmd.SetContext(context.Background())
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	printRecheckHint(cmd, unlistedPermits{g}, raftgate.FenceTombstone, 4, "sha256:00")
	if out.Len() != 0 || !strings.Contains(errOut.String(), "warning: the fence advanced") ||
		!strings.Contains(errOut.String(), "GATE_UNAVAILABLE") || !strings.Contains(errOut.String(), "shardproof recheck --closed --tombstones sha256:00") {
		t.Fatalf("stdout %q, stderr %q", out.String(), errOut.String())
	}
}

// TestRecheckHintQuotesFlags: the recheck a fence advance prints repeats
// the store and gate flags given on its command line, an S3 URL quoted
// for the shell (its ? and & would end the command), and leaves out
// those that were not given (the environment gives them again).
func TestRecheckHintQuotesFlags(t *testing.T) {
	_, g := startLeader(t)
	var out, errOut strings.Builder
	cmd := &cobra.Command{}
	cmd.SetContext(context.Background())
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	var store, gate, token string
	cmd.Flags().StringVar(&store, "store", "", "")
	cmd.Flags().StringVar(&gate, "gate", "", "")
	cmd.Flags().StringVar(&token, "gate-token-file", "", "")
	if err := cmd.ParseFlags([]string{"--store", "s3://bucket/rel?region=eu-west-1&path_style=true", "--gate", "http://127.0.0.1:7480"}); err != nil {
		t.Fatal(err)
	}
	printRecheckHint(cmd, unlistedPermits{g}, raftgate.FenceTombstone, 4, "sha256:00")
	want := "shardproof recheck --closed --tombstones sha256:00 --store 's3://bucket/rel?region=eu-west-1&path_style=true' --gate http://127.0.0.1:7480\n"
	if !strings.HasSuffix(errOut.String(), want) {
		t.Fatalf("stderr %q, want it to end %q", errOut.String(), want)
	}
}

// TestPublishScratch: publish --scratch verifies with the job's files in
// the scratch store (its puts made the scratch's temp directory) and
// removes them there; the release's store never holds a jobs/ tree.
func TestPublishScratch(t *testing.T) {
	dir, s := tempFileStore(t)
	rel := stagetest.Synth(t, s, 1500, 4, 1)
	node, _ := startLeader(t)
	scratch := filepath.Join(t.TempDir(), "scratch")
	out, err := cli(t, "publish", "--store", dir, "--scratch", scratch, "--gate", node.URL(), "-q",
		"--alias", "main", "--root", rel.Root.String())
	if err != nil || !strings.Contains(out, "published main generation 1 -> "+rel.Root.String()) {
		t.Fatalf("publish --scratch: %q %v", out, err)
	}
	if _, err := os.Stat(filepath.Join(scratch, "@tmp")); err != nil {
		t.Fatalf("nothing was written to the scratch: %v", err)
	}
	for _, d := range []string{filepath.Join(scratch, "jobs"), filepath.Join(dir, "jobs")} {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Fatalf("%s after publish: %v", d, err)
		}
	}
}

// A worker stopped by a signal while it waits at the barrier: an init
// container (--once) exits CANCELED, since it never saw the barrier open;
// a sidecar exits 0.
func TestWorkerStoppedAtTheBarrier(t *testing.T) {
	if testing.Short() {
		t.Skip("runs worker processes")
	}
	ctx := context.Background()
	dir, s := tempFileStore(t)
	gen := stagetest.Synth(t, s, 600, 4, 1)
	node, g := startLeader(t)
	if _, err := cli(t, "publish", "--store", dir, "--gate", node.URL(), "-q", "--alias", "main", "--root", gen.Root.String()); err != nil {
		t.Fatal(err)
	}
	if _, err := g.CreateRun(ctx, &raftgate.CreateRun{Run: "r1", Alias: "main", WorldSize: 2, BarrierTimeoutMs: 600_000}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		flags []string
		want  int
	}{{[]string{"--once"}, errcode.ExitError}, {nil, errcode.ExitOK}} {
		args := append([]string{"worker", "--store", dir, "--gate", node.URL(), "--run", "r1", "--rank", "0", "--cache", t.TempDir(), "--listen", "127.0.0.1:0"}, tc.flags...)
		cmd := exec.Command(os.Args[0], args...)
		cmd.Env = cliEnv()
		var stderr syncBuffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		listen := servingAddr(t, cmd, &stderr)
		// Rank 0 attests; rank 1 never comes, so the barrier stays closed.
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			var st trainer.Status
			if resp, err := readyClient.Get("http://" + listen + "/status"); err == nil {
				json.NewDecoder(resp.Body).Decode(&st)
				resp.Body.Close()
			}
			if st.State == trainer.StateWaiting {
				break
			}
			if time.Now().After(deadline) {
				cmd.Process.Kill()
				t.Fatalf("%v: rank 0 did not attest\n%s", tc.flags, stderr.String())
			}
		}
		cmd.Process.Signal(os.Interrupt)
		err := cmd.Wait()
		status := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			status = ee.ExitCode()
		}
		if status != tc.want || (tc.want != 0 && !strings.Contains(stderr.String(), string(errcode.Canceled))) {
			t.Fatalf("worker %v stopped at the barrier: exit %d, want %d\n%s", tc.flags, status, tc.want, stderr.String())
		}
	}
}

// A sidecar stopped by a signal while ready has stopped being ready: it
// prints no "ready run=…" line on its way out (only --once prints one, as
// the barrier opens), where it printed one as it stopped.
func TestSidecarStoppedWhileReadyPrintsNoReadyLine(t *testing.T) {
	if testing.Short() {
		t.Skip("runs worker processes")
	}
	ctx := context.Background()
	dir, s := tempFileStore(t)
	gen := stagetest.Synth(t, s, 300, 2, 1)
	node, g := startLeader(t)
	if _, err := cli(t, "publish", "--store", dir, "--gate", node.URL(), "-q", "--alias", "main", "--root", gen.Root.String()); err != nil {
		t.Fatal(err)
	}
	if _, err := g.CreateRun(ctx, &raftgate.CreateRun{Run: "r1", Alias: "main", WorldSize: 1, BarrierTimeoutMs: 600_000}); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "worker", "--store", dir, "--gate", node.URL(), "--run", "r1", "--rank", "0", "--cache", t.TempDir(), "--listen", "127.0.0.1:0")
	cmd.Env = cliEnv()
	var stdout, stderr syncBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	listen := servingAddr(t, cmd, &stderr)
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		var st trainer.Status
		if resp, err := readyClient.Get("http://" + listen + "/status"); err == nil {
			json.NewDecoder(resp.Body).Decode(&st)
			resp.Body.Close()
		}
		if st.State == trainer.StateReady {
			break
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatalf("the sidecar never got ready\n%s", stderr.String())
		}
	}
	cmd.Process.Signal(os.Interrupt)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("sidecar stopped while ready: %v\n%s", err, stderr.String())
	}
	if strings.Contains(stdout.String(), "ready run=") {
		t.Fatalf("a sidecar stopped while ready printed a ready line:\n%s", stdout.String())
	}
}

// twoGenerations publishes two synthesized releases as generations 1
// and 2 of alias main on a new gate and stores a tombstone log of
// watermark 4. It returns both, the gate, the --store and --gate flags,
// and the log's digest.
func twoGenerations(t *testing.T) (gen1, gen2 stage.Result, node *raftgate.Node, base []string, tomb [32]byte) {
	t.Helper()
	dir, s := tempFileStore(t)
	gen1 = stagetest.Synth(t, s, 600, 2, 1)
	gen2 = stagetest.Synth(t, s, 600, 2, 2)
	node, _ = startLeader(t)
	base = []string{"--store", dir, "--gate", node.URL()}
	for i, r := range []manifest.Digest{gen1.Root, gen2.Root} {
		if out, err := cli(t, append([]string{"publish", "-q", "--alias", "main", "--root", r.String(), "--expect-generation", strconv.Itoa(i)}, base...)...); err != nil {
			t.Fatalf("publish generation %d: %q %v", i+1, out, err)
		}
	}
	tomb, _, _, err := objstore.PutBlob(context.Background(), s, []byte(`{"schema":"training.tombstones.v1","entries":[{"seq":4,"sampleId":"gone"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	return gen1, gen2, node, base, tomb
}

// servingRE finds the address a worker started with --listen says it
// serves at.
var servingRE = regexp.MustCompile(`worker run=\S+ rank=\d+ serving http://(\S+) `)

// servingAddr waits for the worker cmd, started with --listen
// 127.0.0.1:0, to say where it serves, and returns that address. The
// port is the one the kernel gave the child: a port a test picked (and
// closed) could be taken by another process before the child bound it.
func servingAddr(t *testing.T, cmd *exec.Cmd, stderr *syncBuffer) string {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		if m := servingRE.FindStringSubmatch(stderr.String()); m != nil {
			return m[1]
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatalf("the worker did not say where it serves\n%s", stderr.String())
		}
	}
}
