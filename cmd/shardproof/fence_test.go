package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/objstore"
	"github.com/shardproof/shardproof/raftgate"
)

// fenceDoc stores a fence document of schema with one entry at seq (an
// item no synthetic release holds) and returns its digest.
func fenceDoc(t *testing.T, s objstore.Store, schema string, seq int) manifest.Digest {
	t.Helper()
	b := fmt.Appendf(nil, `{"schema":%q,"entries":[{"seq":%d,"sampleId":"elsewhere"}]}`, schema, seq)
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
