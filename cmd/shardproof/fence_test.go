package main

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/objstore"
	"github.com/shardproof/shardproof/raftgate"
)

// fenceDoc stores a fence document of schema with entries at seqs 1 to
// seq (items no synthetic release holds) and returns its digest.
func fenceDoc(t *testing.T, s objstore.Store, schema string, seq int) manifest.Digest {
	t.Helper()
	// Entries 1..seq, so the documents of one kind extend each other,
	// as an append-only log's versions do (gate fence advance refuses
	// one that rewrites the fence's log).
	b := fmt.Appendf(nil, `{"schema":%q,"entries":[`, schema)
	for i := 1; i <= seq; i++ {
		if i > 1 {
			b = append(b, ',')
		}
		b = fmt.Appendf(b, `{"seq":%d,"sampleId":"elsewhere-%d"}`, i, i)
	}
	b = append(b, "]}"...)
	d, _, _, err := objstore.PutBlob(t.Context(), s, b)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// permitStates maps each permit of root to its state.
func permitStates(t *testing.T, g *raftgate.Client, root manifest.Digest) map[string]string {
	t.Helper()
	ps, err := g.Permits(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, p := range ps {
		if p.Root == root {
			out[p.ID] = p.State
		}
	}
	return out
}

// A recheck of one fence kind records its watermark, but a release the
// other fence has passed keeps its permits closed: recheck says so
// (FENCE_BEHIND, exit 4) instead of "renewed" and exit 0, which its help
// promises only when every root was renewed.
func TestRecheckOneKindBehindTheOther(t *testing.T) {
	e := publishTwo(t, 600, 400)
	dir, s, gen1, node, g, run := e.dir, e.s, e.gen1, e.node, e.g, e.run
	tomb := fenceDoc(t, s, manifest.TombstonesSchema, 4)
	bench := fenceDoc(t, s, manifest.BenchmarkSchema, 7)
	for _, f := range [][]string{{"--tombstones", tomb.String()}, {"--benchmark", bench.String()}} {
		if out, err := cli(t, append([]string{"gate", "fence", "advance", "--store", dir, "--gate", node.URL()}, f...)...); err != nil {
			t.Fatalf("fence advance %v: %q %v", f, out, err)
		}
	}
	for _, mode := range [][]string{nil, {"--members"}} {
		out, err := run(append([]string{"recheck", "--root", gen1.Root.String(), "--tombstones", tomb.String()}, mode...)...)
		wantExit(t, err, errcode.FenceBehind, errcode.ExitRejected)
		if strings.Contains(out, "renewed") || !strings.Contains(out, "FENCE_BEHIND") {
			t.Fatalf("recheck %v of one kind: %q", mode, out)
		}
		if !strings.Contains(err.Error(), "benchmark 0 below the fence 7 (--benchmark)") {
			t.Fatalf("recheck %v: %v does not name the fence the release is behind", mode, err)
		}
	}
	if rel, err := g.Release(t.Context(), gen1.Root); err != nil || rel.TombstoneWatermark != 4 {
		t.Fatalf("the tombstone recheck was not recorded: %+v %v", rel, err)
	}
	for id, st := range permitStates(t, g, gen1.Root) {
		if st != raftgate.PermitClosed {
			t.Fatalf("permit %s of a release behind the benchmark fence is %s", id, st)
		}
	}
	// The other kind too: renewed.
	out, err := run("recheck", "--members", "--root", gen1.Root.String(), "--benchmark", bench.String())
	if err != nil || !strings.Contains(out, "renewed") {
		t.Fatalf("recheck of the other kind: %q %v", out, err)
	}
	for id, st := range permitStates(t, g, gen1.Root) {
		if st != raftgate.PermitOpen {
			t.Fatalf("permit %s after both rechecks is %s", id, st)
		}
	}
}

// A recheck made before the fence advance (so that runs go on) already
// shows zero hits at the new value: the advance leaves that root's
// permits open, where it closed them until the same recheck was made
// again. A root not rechecked is closed as before, and an advance past
// what the recheck reached closes the rechecked root's too.
func TestRecheckBeforeFenceAdvance(t *testing.T) {
	ctx := t.Context()
	e := publishTwo(t, 600, 400)
	dir, s, gen1, gen2, node, g, run := e.dir, e.s, e.gen1, e.gen2, e.node, e.g, e.run
	if _, err := g.CreateRun(ctx, &raftgate.CreateRun{Run: "r1", Alias: "main", WorldSize: 1, BarrierTimeoutMs: 60_000}); err != nil {
		t.Fatal(err)
	}
	var shards []manifest.Digest
	for _, sh := range gen1.Release.Shards {
		shards = append(shards, sh.Digest)
	}
	if _, err := g.Attest(ctx, "r1", 0, gen1.Root, shards); err != nil {
		t.Fatal(err)
	}
	advance := func(d manifest.Digest) string {
		t.Helper()
		out, err := cli(t, "gate", "fence", "advance", "--store", dir, "--gate", node.URL(), "--tombstones", d.String())
		if err != nil {
			t.Fatalf("fence advance: %q %v", out, err)
		}
		return out
	}

	t9 := fenceDoc(t, s, manifest.TombstonesSchema, 9)
	if out, err := run("recheck", "--members", "--root", gen1.Root.String(), "--tombstones", t9.String()); err != nil || !strings.Contains(out, "renewed") {
		t.Fatalf("recheck ahead of the fence: %q %v", out, err)
	}
	out := advance(t9)
	if !strings.Contains(out, "closed 1 permits") {
		t.Fatalf("advance to 9 closes only gen2's permit: %q", out)
	}
	kept := permitStates(t, g, gen1.Root)
	ids := slices.Sorted(maps.Keys(kept))
	if want := fmt.Sprintf("kept %d open (their releases were rechecked at this value): %s", len(ids), strings.Join(ids, ", ")); len(ids) == 0 || !strings.Contains(out, want) {
		t.Fatalf("advance to 9: %q, want %q", out, want)
	}
	for id, st := range kept {
		if st != raftgate.PermitOpen {
			t.Fatalf("permit %s of the root rechecked at 9 is %s after the advance to 9", id, st)
		}
	}
	for id, st := range permitStates(t, g, gen2.Root) {
		if st != raftgate.PermitClosed {
			t.Fatalf("permit %s of gen2, not rechecked, is %s after the advance", id, st)
		}
	}
	if _, err := g.AdmitCheckpoint(ctx, "r1", 1, gen1.Root); err != nil {
		t.Fatalf("checkpoint after the advance: %v", err)
	}
	if _, err := g.CreateRun(ctx, &raftgate.CreateRun{Run: "r2", Alias: "main", WorldSize: 1}); err != nil {
		t.Fatalf("new run after the advance: %v", err)
	}

	if out := advance(fenceDoc(t, s, manifest.TombstonesSchema, 10)); !strings.Contains(out, "closed 3 permits") {
		t.Fatalf("advance past the recheck: %q", out)
	}
	_, err := g.AdmitCheckpoint(ctx, "r1", 2, gen1.Root)
	wantExit(t, err, errcode.PermitClosed, errcode.ExitRejected)
}

// publish --report of a VERIFIED report checked below the watermarks the
// gate records for the release (raised by a recheck since) is refused
// before anything is registered, as gate register refuses it: it brought
// nothing, and left the gate naming a report that does not back them (and
// publish said "stored report reused" of a report below the fences).
func TestPublishReportOlderThanGate(t *testing.T) {
	ctx := t.Context()
	e := publishTwo(t, 600, 400)
	dir, s, gen1, node, g, run := e.dir, e.s, e.gen1, e.node, e.g, e.run
	tomb := fenceDoc(t, s, manifest.TombstonesSchema, 4)
	if out, err := cli(t, "gate", "fence", "advance", "--store", dir, "--gate", node.URL(), "--tombstones", tomb.String()); err != nil {
		t.Fatalf("fence advance: %q %v", out, err)
	}
	if out, err := run("recheck", "--members", "--root", gen1.Root.String(), "--tombstones", tomb.String()); err != nil {
		t.Fatalf("recheck: %q %v", out, err)
	}
	before, err := g.Release(ctx, gen1.Root)
	if err != nil || before.TombstoneWatermark != 4 {
		t.Fatalf("after the recheck: %+v %v", before, err)
	}
	// A new verification without the tombstone log: VERIFIED at 0.
	rep := cliReport(t, runCLI(t, cliEnv(), "verify", "--store", dir, "--root", gen1.Root.String(), "--json"))
	b, err := manifest.Encode(rep)
	if err != nil {
		t.Fatal(err)
	}
	old := manifest.Sum(b)
	if _, _, err := objstore.ReadBlob(ctx, s, old, manifest.MaxDocumentSize); err != nil || old == before.Report {
		t.Fatalf("report %s: %v (the gate names %s)", old, err, before.Report)
	}
	_, err = run("publish", "--alias", "third", "--root", gen1.Root.String(), "--report", old.String())
	wantExit(t, err, errcode.BadInput, errcode.ExitInvalid)
	if after, err := g.Release(ctx, gen1.Root); err != nil || after.Report != before.Report {
		t.Fatalf("a refused publish --report changed the report the gate names from %s to %s (%v)", before.Report, after.Report, err)
	}
	if al, err := g.Alias(ctx, "third"); errcode.Of(err) != errcode.UnknownAlias {
		t.Fatalf("alias third: %+v %v", al, err)
	}
	// Without --report, what the gate holds is reused.
	if out, err := run("publish", "--alias", "third", "--root", gen1.Root.String()); err != nil || !strings.Contains(out, "stored report reused") {
		t.Fatalf("publish without --report: %q %v", out, err)
	}
}
