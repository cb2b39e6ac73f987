package main

import (
	"context"
	"strings"
	"testing"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/objstore"
	"github.com/shardproof/shardproof/stage/stagetest"
)

// putFenceLog stores a fence document and returns its digest.
func putFenceLog(t *testing.T, s objstore.Store, doc string) manifest.Digest {
	t.Helper()
	d, _, _, err := objstore.PutBlob(context.Background(), s, []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	return manifest.Digest(d)
}

// The hunt's case: the tombstone fence is advanced to 7 with a log whose
// seq 7 erases syn5-1, a sample the release holds. A release checked
// against another log whose seq 7 erases someone else had no hit: verify
// said VERIFIED, publish moved the alias and a run could pin it, with
// the erased sample in it. Now the gate keeps the prefix digest of the
// fence's log, and publish (verifying, or with --report), gate register
// --report and gate fence advance refuse the other log
// (FENCE_LOG_MISMATCH, exit 4) and change nothing; the fence's own log
// finds the hit.
func TestFenceLogOtherLogRefusedCLI(t *testing.T) {
	ctx := context.Background()
	dir, s := tempFileStore(t)
	rel := stagetest.Synth(t, s, 300, 2, 5)
	node, g := startLeader(t)
	gate := []string{"--store", dir, "--gate", node.URL()}
	pub := append([]string{"-q"}, gate...)
	erased := putFenceLog(t, s, `{"schema":"training.tombstones.v1","entries":[{"seq":3,"sampleId":"nobody-1"},{"seq":7,"sampleId":"syn5-1"}]}`)
	other := putFenceLog(t, s, `{"schema":"training.tombstones.v1","entries":[{"seq":3,"sampleId":"nobody-1"},{"seq":7,"sampleId":"nobody-2"}]}`)

	out, err := cli(t, append([]string{"gate", "fence", "advance", "--tombstones", erased.String()}, gate...)...)
	if err != nil {
		t.Fatalf("advance: %q %v", out, err)
	}
	f, err := g.Fences(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if f.Tombstone != 7 || f.TombstoneLog.IsZero() || !strings.Contains(out, "prefix digest "+f.TombstoneLog.String()) {
		t.Fatalf("fences after the advance: %+v; output %q", f, out)
	}
	before, err := g.State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	unchanged := func(what string) {
		t.Helper()
		st, err := g.State(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(st.Releases) != len(before.Releases) || len(st.Aliases) != len(before.Aliases) || st.Fences != before.Fences {
			t.Fatalf("%s changed the gate: %d releases, %d aliases, fences %+v; before %d, %d, %+v",
				what, len(st.Releases), len(st.Aliases), st.Fences, len(before.Releases), len(before.Aliases), before.Fences)
		}
	}

	_, err = cli(t, append([]string{"publish", "--alias", "main", "--root", rel.Root.String(), "--tombstones", other.String()}, pub...)...)
	wantExit(t, err, errcode.FenceLogMismatch, errcode.ExitRejected)
	unchanged("publish --tombstones OTHER")

	// verify alone does not know the gate: it checks what it is given.
	out, err = cli(t, "verify", "--store", dir, "--root", rel.Root.String(), "--tombstones", other.String())
	m := reportLine.FindStringSubmatch(out)
	if err != nil || m == nil {
		t.Fatalf("verify against the other log: %q %v", out, err)
	}
	_, err = cli(t, append([]string{"publish", "--alias", "main", "--root", rel.Root.String(), "--report", m[1]}, pub...)...)
	wantExit(t, err, errcode.FenceLogMismatch, errcode.ExitRejected)
	unchanged("publish --report (checked against OTHER)")
	_, err = cli(t, append([]string{"gate", "register", "--report", m[1]}, gate...)...)
	wantExit(t, err, errcode.FenceLogMismatch, errcode.ExitRejected)
	unchanged("gate register --report (checked against OTHER)")

	// The other log does not extend the fence's: no advance with it.
	longer := putFenceLog(t, s, `{"schema":"training.tombstones.v1","entries":[{"seq":3,"sampleId":"nobody-1"},{"seq":7,"sampleId":"nobody-2"},{"seq":9,"sampleId":"nobody-3"}]}`)
	_, err = cli(t, append([]string{"gate", "fence", "advance", "--tombstones", longer.String()}, gate...)...)
	wantExit(t, err, errcode.FenceLogMismatch, errcode.ExitRejected)
	unchanged("gate fence advance with a log rewriting seq 7")

	// The fence's own log finds the erased sample.
	_, err = cli(t, append([]string{"publish", "--alias", "main", "--root", rel.Root.String(), "--tombstones", erased.String()}, pub...)...)
	wantExit(t, err, errcode.TombstoneHit, errcode.ExitInvalid)
	if _, err := g.Alias(ctx, "main"); errcode.Of(err) != errcode.UnknownAlias {
		t.Fatalf("alias after the refusals: %v, want UNKNOWN_ALIAS", err)
	}
}

// A recheck renews permits a fence advance closed only against the log the
// fence was advanced with: recheck and gate recheck with a report of
// another log whose seq 7 differs are FENCE_LOG_MISMATCH and leave the
// permit closed; the fence's log renews it.
func TestFenceLogRecheckCLI(t *testing.T) {
	ctx := context.Background()
	dir, s := tempFileStore(t)
	rel := stagetest.Synth(t, s, 300, 2, 5)
	node, g := startLeader(t)
	gate := []string{"--store", dir, "--gate", node.URL()}
	pub := append([]string{"-q"}, gate...)
	if out, err := cli(t, append([]string{"publish", "--alias", "main", "--root", rel.Root.String()}, pub...)...); err != nil {
		t.Fatalf("publish: %q %v", out, err)
	}
	fenceLog := putFenceLog(t, s, `{"schema":"training.tombstones.v1","entries":[{"seq":7,"sampleId":"nobody-1"}]}`)
	other := putFenceLog(t, s, `{"schema":"training.tombstones.v1","entries":[{"seq":7,"sampleId":"nobody-2"}]}`)
	if out, err := cli(t, append([]string{"gate", "fence", "advance", "--tombstones", fenceLog.String()}, gate...)...); err != nil {
		t.Fatalf("advance: %q %v", out, err)
	}
	permit := func() string {
		t.Helper()
		al, err := g.Alias(ctx, "main")
		if err != nil {
			t.Fatal(err)
		}
		ps, err := g.Permits(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range ps {
			if p.ID == al.Permit {
				return p.State
			}
		}
		t.Fatalf("no permit %s", al.Permit)
		return ""
	}
	if st := permit(); st != "CLOSED" {
		t.Fatalf("the alias's permit after the advance is %s, want CLOSED", st)
	}

	_, err := cli(t, append([]string{"recheck", "--alias", "main", "--tombstones", other.String()}, pub...)...)
	wantExit(t, err, errcode.FenceLogMismatch, errcode.ExitRejected)
	out, err := cli(t, "verify", "--store", dir, "--root", rel.Root.String(), "--tombstones", other.String())
	m := reportLine.FindStringSubmatch(out)
	if err != nil || m == nil {
		t.Fatalf("verify against the other log: %q %v", out, err)
	}
	_, err = cli(t, append([]string{"gate", "recheck", rel.Root.String(), "--kind", "tombstone", "--report", m[1]}, gate...)...)
	wantExit(t, err, errcode.FenceLogMismatch, errcode.ExitRejected)
	if gr, err := g.Release(ctx, rel.Root); err != nil || len(gr.Rechecks) != 0 || permit() != "CLOSED" {
		t.Fatalf("after the refused rechecks: release %+v (%v), permit %s; want no recheck recorded and the permit CLOSED", gr, err, permit())
	}

	if out, err := cli(t, append([]string{"recheck", "--alias", "main", "--tombstones", fenceLog.String()}, pub...)...); err != nil {
		t.Fatalf("recheck against the fence's log: %q %v", out, err)
	}
	if st := permit(); st != "OPEN" {
		t.Fatalf("the alias's permit after the recheck is %s, want OPEN", st)
	}
}

// gate register with a report below the tombstone fence (it checked a
// benchmark registry only) of a release whose gate watermark reaches the
// fence on a report of another log, registered before the fence named
// its log: the register raised the benchmark watermark and left the
// release satisfying both fences, so gate publish could move an alias to
// it, with no check against the fence's log behind it. Now it is
// FENCE_LOG_MISMATCH and registers nothing.
func TestFenceLogGateRegisterBelowFenceCLI(t *testing.T) {
	ctx := context.Background()
	dir, s := tempFileStore(t)
	rel := stagetest.Synth(t, s, 300, 2, 5)
	node, g := startLeader(t)
	gate := []string{"--store", dir, "--gate", node.URL()}
	pub := append([]string{"-q"}, gate...)
	erased := putFenceLog(t, s, `{"schema":"training.tombstones.v1","entries":[{"seq":3,"sampleId":"nobody-1"},{"seq":7,"sampleId":"syn5-1"}]}`)
	other := putFenceLog(t, s, `{"schema":"training.tombstones.v1","entries":[{"seq":3,"sampleId":"nobody-1"},{"seq":7,"sampleId":"nobody-2"}]}`)
	bench := putFenceLog(t, s, `{"schema":"training.benchmark.v1","entries":[{"seq":2,"sampleId":"nobody-3"}]}`)

	out, err := cli(t, "verify", "--store", dir, "--root", rel.Root.String(), "--tombstones", other.String())
	m := reportLine.FindStringSubmatch(out)
	if err != nil || m == nil {
		t.Fatalf("verify against the other log: %q %v", out, err)
	}
	if out, err := cli(t, append([]string{"gate", "register", "--report", m[1]}, gate...)...); err != nil {
		t.Fatalf("register at fence 0: %q %v", out, err)
	}
	if out, err := cli(t, append([]string{"gate", "fence", "advance", "--tombstones", erased.String()}, gate...)...); err != nil {
		t.Fatalf("advance: %q %v", out, err)
	}
	out, err = cli(t, "verify", "--store", dir, "--root", rel.Root.String(), "--benchmark", bench.String())
	mb := reportLine.FindStringSubmatch(out)
	if err != nil || mb == nil {
		t.Fatalf("verify against the benchmark registry: %q %v", out, err)
	}
	before, err := g.Release(ctx, rel.Root)
	if err != nil {
		t.Fatal(err)
	}
	_, err = cli(t, append([]string{"gate", "register", "--report", mb[1]}, gate...)...)
	wantExit(t, err, errcode.FenceLogMismatch, errcode.ExitRejected)
	after, err := g.Release(ctx, rel.Root)
	if err != nil || after.Report != before.Report || after.BenchmarkFence != before.BenchmarkFence {
		t.Fatalf("the refused register changed the release: %+v -> %+v (%v)", before, after, err)
	}
	_, err = cli(t, append([]string{"publish", "--alias", "main", "--root", rel.Root.String(), "--report", mb[1]}, pub...)...)
	wantExit(t, err, errcode.FenceLogMismatch, errcode.ExitRejected)
	if _, err := g.Alias(ctx, "main"); errcode.Of(err) != errcode.UnknownAlias {
		t.Fatalf("alias after the refusals: %v, want UNKNOWN_ALIAS", err)
	}
}
