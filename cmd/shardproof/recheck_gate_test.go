package main

import (
	"context"
	"regexp"
	"strings"
	"testing"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/objstore"
	"github.com/shardproof/shardproof/raftgate"
)

// gate recheck records only what a stored report shows: no report, a
// report of another root or kind, a document that is no report, or a
// --value/--hits that disagrees with the report changes nothing, and a
// permit closed by a fence advance stays closed until the report that
// found zero hits is named. The gate itself refuses a recheck command
// without a report, whoever sends it.
func TestGateRecheckNeedsEvidence(t *testing.T) {
	ctx := context.Background()
	e := publishTwo(t, 600, 400)
	dir, s, gen1, gen2, node, g, run := e.dir, e.s, e.gen1, e.gen2, e.node, e.g, e.run
	td, _, _, err := objstore.PutBlob(ctx, s, []byte(`{"schema":"training.tombstones.v1","entries":[{"seq":4,"sampleId":"gone"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	tomb := manifest.Digest(td)
	if out, err := cli(t, "gate", "fence", "advance", "--store", dir, "--gate", node.URL(), "--tombstones", tomb.String()); err != nil {
		t.Fatalf("fence advance: %q %v", out, err)
	}
	openPermits := func(root manifest.Digest) int {
		t.Helper()
		ps, err := g.Permits(ctx)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, p := range ps {
			if p.Root == root && p.State == raftgate.PermitOpen {
				n++
			}
		}
		return n
	}
	if n := openPermits(gen1.Root); n != 0 {
		t.Fatalf("gen1 has %d open permits after the fence advance", n)
	}
	before, _ := g.Release(ctx, gen1.Root)

	// The report of a full verification of gen1 against the log: zero hits.
	out, err := cli(t, "verify", "--store", dir, "--root", gen1.Root.String(), "--tombstones", tomb.String())
	if err != nil {
		t.Fatalf("verify: %q %v", out, err)
	}
	m := regexp.MustCompile(`report\s+(sha256:[0-9a-f]{64})`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no report digest in %q", out)
	}
	rep := m[1]
	// A recheck report of gen2, from the member files (recorded for gen2).
	out, err = run("recheck", "--members", "--root", gen2.Root.String(), "--tombstones", tomb.String())
	if err != nil {
		t.Fatalf("recheck gen2: %q %v", out, err)
	}
	m = regexp.MustCompile(`report (sha256:[0-9a-f]{64})`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no report digest in %q", out)
	}
	otherRep := m[1]

	root := gen1.Root.String()
	for _, c := range []struct {
		name string
		args []string
		code errcode.Code
		exit int
	}{
		{"no report", []string{"--kind", "tombstone", "--value", "4", "--hits", "0"}, errcode.Usage, errcode.ExitUsage},
		{"no kind", []string{"--report", rep}, errcode.Usage, errcode.ExitUsage},
		{"a value the report did not check", []string{"--kind", "tombstone", "--report", rep, "--value", "40"}, errcode.BadInput, errcode.ExitInvalid},
		{"hits the report did not find", []string{"--kind", "tombstone", "--report", rep, "--hits", "1"}, errcode.BadInput, errcode.ExitInvalid},
		{"a kind the report did not check", []string{"--kind", "benchmark", "--report", rep}, errcode.BadInput, errcode.ExitInvalid},
		{"another root's report", []string{"--kind", "tombstone", "--report", otherRep}, errcode.BadDocument, errcode.ExitInvalid},
		{"a manifest, not a report", []string{"--kind", "tombstone", "--report", root}, errcode.BadDocument, errcode.ExitInvalid},
		{"a report not in the store", []string{"--kind", "tombstone", "--report", manifest.Sum([]byte("nowhere")).String()}, errcode.NotFound, errcode.NotFound.Exit()},
	} {
		_, err := cli(t, append([]string{"gate", "recheck", root, "--store", dir, "--gate", node.URL()}, c.args...)...)
		if errcode.Of(err) != c.code || exitStatus(err) != c.exit {
			t.Errorf("%s: code %s exit %d (%v), want %s / %d", c.name, errcode.Of(err), exitStatus(err), err, c.code, c.exit)
		}
	}
	if after, _ := g.Release(ctx, gen1.Root); len(after.Rechecks) != len(before.Rechecks) || after.TombstoneWatermark != before.TombstoneWatermark {
		t.Fatalf("a refused recheck reached the gate: %d → %d rechecks, watermark %d → %d",
			len(before.Rechecks), len(after.Rechecks), before.TombstoneWatermark, after.TombstoneWatermark)
	}
	if n := openPermits(gen1.Root); n != 0 {
		t.Fatalf("a refused recheck opened %d permits", n)
	}

	// The gate refuses a recheck without a report, whoever sends it.
	_, err = g.Recheck(ctx, &raftgate.RecheckCmd{Root: gen1.Root, Kind: raftgate.FenceTombstone, Value: 99})
	if errcode.Of(err) != errcode.BadInput {
		t.Fatalf("recheck command without a report: %v, want BAD_INPUT", err)
	}

	// The report itself, with or without matching --value/--hits: renewed.
	out, err = cli(t, "gate", "recheck", root, "--store", dir, "--gate", node.URL(), "--kind", "tombstone", "--report", rep, "--value", "4", "--hits", "0")
	if err != nil || !strings.Contains(out, "renewed 1 permits") {
		t.Fatalf("gate recheck with the report: %q %v", out, err)
	}
	after, _ := g.Release(ctx, gen1.Root)
	if after.TombstoneWatermark != 4 || len(after.Rechecks) != len(before.Rechecks)+1 || after.Rechecks[len(after.Rechecks)-1].Report.String() != rep {
		t.Fatalf("after the recheck: watermark %d, rechecks %+v", after.TombstoneWatermark, after.Rechecks)
	}
	if n := openPermits(gen1.Root); n != 1 {
		t.Fatalf("gen1 has %d open permits after its recheck, want 1", n)
	}

	// The report checked at the watermarks the gate records is
	// registered; one checked below them would leave the gate naming a
	// report that does not back them: refused, and nothing changes.
	if out, err := cli(t, "gate", "register", "--store", dir, "--gate", node.URL(), "--report", rep); err != nil {
		t.Fatalf("register of the report at tombstone 4: %q %v", out, err)
	}
	if rel, _ := g.Release(ctx, gen1.Root); rel.Report.String() != rep || rel.TombstoneWatermark != 4 {
		t.Fatalf("after registering the report at 4: report %s, watermark %d", rel.Report, rel.TombstoneWatermark)
	}
	_, err = cli(t, "gate", "register", "--store", dir, "--gate", node.URL(), "--report", before.Report.String())
	if before.Report.IsZero() || errcode.Of(err) != errcode.BadInput {
		t.Fatalf("register of the report at tombstone 0: %v, want BAD_INPUT", err)
	}
	if rel, _ := g.Release(ctx, gen1.Root); rel.Report.String() != rep {
		t.Fatalf("a refused register changed the report named to %s", rel.Report)
	}
}

// No line of gate permits' or gate recheck's text output ends in
// whitespace: an open permit (no reason) ended its line in a space, and
// so did a recheck that renewed no permit, which a script that splits
// on spaces or diffs the output against a saved one trips on.
func TestPermitsAndRecheckLinesEndWithoutSpace(t *testing.T) {
	ctx := context.Background()
	e := publishTwo(t, 300, 200)
	dir, s, gen1, node := e.dir, e.s, e.gen1, e.node
	noTrailing := func(what, out string) {
		t.Helper()
		if out == "" {
			t.Fatalf("%s printed nothing", what)
		}
		for i, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
			if strings.TrimRight(line, " \t") != line {
				t.Errorf("%s: line %d ends in whitespace: %q", what, i+1, line)
			}
		}
	}
	permits := func(what string, wantOpen, wantClosed int) {
		t.Helper()
		out, err := cli(t, "gate", "permits", "--gate", node.URL())
		if err != nil {
			t.Fatalf("gate permits: %q %v", out, err)
		}
		if o, c := strings.Count(out, " OPEN "), strings.Count(out, " CLOSED "); o != wantOpen || c != wantClosed {
			t.Fatalf("gate permits %s: %d OPEN, %d CLOSED, want %d and %d\n%s", what, o, c, wantOpen, wantClosed, out)
		}
		noTrailing("gate permits "+what, out)
	}
	permits("before the advance", 2, 0)

	td, _, _, err := objstore.PutBlob(ctx, s, []byte(`{"schema":"training.tombstones.v1","entries":[{"seq":4,"sampleId":"gone"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	tomb := manifest.Digest(td)
	if out, err := cli(t, "gate", "fence", "advance", "--store", dir, "--gate", node.URL(), "--tombstones", tomb.String()); err != nil {
		t.Fatalf("fence advance: %q %v", out, err)
	}
	permits("after the advance", 0, 2)

	out, err := cli(t, "verify", "--store", dir, "--root", gen1.Root.String(), "--tombstones", tomb.String())
	if err != nil {
		t.Fatalf("verify: %q %v", out, err)
	}
	m := regexp.MustCompile(`report\s+(sha256:[0-9a-f]{64})`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no report digest in %q", out)
	}
	recheck := []string{"gate", "recheck", gen1.Root.String(), "--store", dir, "--gate", node.URL(), "--kind", "tombstone", "--report", m[1]}
	out, err = cli(t, recheck...)
	if err != nil || !strings.Contains(out, "renewed 1 permits") {
		t.Fatalf("gate recheck: %q %v", out, err)
	}
	noTrailing("gate recheck that renewed a permit", out)
	permits("after the recheck", 1, 1)
	// The same recheck again renews nothing: the permit is open.
	out, err = cli(t, recheck...)
	if err != nil || !strings.Contains(out, "renewed 0 permits") {
		t.Fatalf("gate recheck again: %q %v", out, err)
	}
	noTrailing("gate recheck that renewed none", out)
}
