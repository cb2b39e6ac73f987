package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/objstore"
	"github.com/shardproof/shardproof/objstore/file"
	"github.com/shardproof/shardproof/raftgate"
	"github.com/shardproof/shardproof/stage"
	"github.com/shardproof/shardproof/stage/stagetest"
)

// recheck --members: zero hits renew the closed permits, hits make the
// release INVALID with the hit sampleIds as examples, a member file that
// no longer reads fails the recheck without a word to the gate, and a root
// the gate holds no VERIFIED report of is refused.
func TestRecheckMembersCLI(t *testing.T) {
	ctx := context.Background()
	e := publishTwo(t, 1500, 900)
	dir, s, gen1, gen2, node, g, run := e.dir, e.s, e.gen1, e.gen2, e.node, e.g, e.run
	fence := func(body string) manifest.Digest {
		t.Helper()
		d, _, _, err := objstore.PutBlob(ctx, s, []byte(body))
		if err != nil {
			t.Fatal(err)
		}
		if out, err := cli(t, "gate", "fence", "advance", "--store", dir, "--gate", node.URL(), "--tombstones", manifest.Digest(d).String()); err != nil {
			t.Fatalf("fence advance: %q %v", out, err)
		}
		return d
	}
	reportOf := func(out string) *manifest.RecheckReport {
		t.Helper()
		m := regexp.MustCompile(`report (sha256:[0-9a-f]{64})`).FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("no report digest in %q", out)
		}
		d, _ := manifest.ParseDigest(m[1])
		b, _, err := objstore.ReadBlob(ctx, s, d, manifest.MaxDocumentSize)
		if err != nil {
			t.Fatal(err)
		}
		r, err := manifest.DecodeRecheckReport(b)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}

	// Zero hits: both aliases' permits renewed, from the member files.
	clean := fence(`{"schema":"training.tombstones.v1","entries":[{"seq":4,"sampleId":"gone"}]}`)
	out, err := run("recheck", "--members", "--closed", "--tombstones", clean.String())
	if err != nil || strings.Count(out, "renewed") != 2 {
		t.Fatalf("recheck --members: %q %v", out, err)
	}
	rel1, _ := g.Release(ctx, gen1.Root)
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if !strings.HasPrefix(line, gen1.Root.String()) {
			continue
		}
		r := reportOf(line)
		if r.Root != gen1.Root || r.Basis != rel1.Report || r.DatasetSnapshot != gen1.Snapshot || r.Records != 1500 ||
			r.Members != int64(len(gen1.SnapshotDoc.Members)) || r.TombstoneWatermark != 4 || r.TombstoneHits != 0 {
			t.Fatalf("recheck report of gen1: %+v (gate report %s)", r, rel1.Report)
		}
	}
	if rel1.State != raftgate.ReleasePublished || rel1.TombstoneWatermark < 4 {
		t.Fatalf("gen1 after a clean recheck: %s at tombstone %d", rel1.State, rel1.TombstoneWatermark)
	}

	// Two of gen1's samples deleted: TOMBSTONE_HIT, INVALID, examples.
	hit := fence(`{"schema":"training.tombstones.v1","entries":[{"seq":4,"sampleId":"gone"},{"seq":5,"sampleId":"syn1-b"},{"seq":6,"sampleId":"syn1-a"},{"seq":7,"sampleId":"syn9-zz"}]}`)
	out, err = run("recheck", "--members", "--alias", "main", "--tombstones", hit.String())
	wantExit(t, err, errcode.TombstoneHit, errcode.ExitInvalid)
	r := reportOf(out)
	if r.TombstoneHits != 2 || !slices.Equal(r.Examples[string(errcode.TombstoneHit)], []string{"syn1-a", "syn1-b"}) {
		t.Fatalf("hits %d, examples %v; want 2: syn1-a, syn1-b", r.TombstoneHits, r.Examples)
	}
	// A full verification of the release's own shards finds the same.
	out, err = cli(t, "verify", "--store", dir, "--root", gen1.Root.String(), "--tombstones", hit.String(), "--json")
	if exitStatus(err) != errcode.ExitInvalid {
		t.Fatalf("verify with the tombstones: %v, want exit 1", err)
	}
	var full manifest.Report
	if err := json.Unmarshal([]byte(out), &full); err != nil {
		t.Fatalf("verify --json: %v", err)
	}
	if full.Counts.TombstoneHits != r.TombstoneHits || !slices.Equal(full.Examples[string(errcode.TombstoneHit)], r.Examples[string(errcode.TombstoneHit)]) {
		t.Fatalf("verify finds %d hits %v, the members %d %v", full.Counts.TombstoneHits, full.Examples, r.TombstoneHits, r.Examples)
	}
	if rel, _ := g.Release(ctx, gen1.Root); rel.State != raftgate.ReleaseInvalid {
		t.Fatalf("gen1 is %s after hits", rel.State)
	}
	// INVALID now: nothing to recheck from.
	_, err = run("recheck", "--members", "--root", gen1.Root.String(), "--tombstones", hit.String())
	wantExit(t, err, errcode.NotVerified, errcode.ExitRejected)
	// --closed leaves the INVALID root out (its permits stay closed
	// whatever a recheck finds) and renews gen2, which the advance closed.
	out, err = run("recheck", "--members", "--closed", "--tombstones", hit.String())
	if err != nil || strings.Contains(out, gen1.Root.String()) || !strings.Contains(out, gen2.Root.String()+"  renewed") {
		t.Fatalf("recheck --closed with an INVALID root about: %q %v", out, err)
	}

	// A member file of gen2 rewritten on disk: the recheck fails with the
	// member's code and the gate hears nothing.
	m := gen2.SnapshotDoc.Members[1]
	vdir := filepath.Join(dir, "blobs", "sha256", strings.TrimPrefix(m.Digest.String(), "sha256:"))
	versions, err := os.ReadDir(vdir)
	if err != nil || len(versions) != 1 {
		t.Fatalf("member %s versions: %v %v", m.ID, versions, err)
	}
	path := filepath.Join(vdir, versions[0].Name())
	b, _ := os.ReadFile(path)
	b[len(b)/2] ^= 0xff
	os.Chmod(path, 0o644)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	before, _ := g.Release(ctx, gen2.Root)
	_, err = run("recheck", "--members", "--alias", "other", "--tombstones", hit.String())
	wantExit(t, err, errcode.DigestMismatch, errcode.ExitInvalid)
	if after, _ := g.Release(ctx, gen2.Root); len(after.Rechecks) != len(before.Rechecks) || after.State != before.State {
		t.Fatalf("a failed recheck reached the gate: %d → %d rechecks, %s → %s", len(before.Rechecks), len(after.Rechecks), before.State, after.State)
	}

	// A root the gate only staged has no VERIFIED report to start from.
	gen3 := stagetest.Synth(t, s, 300, 2, 3)
	if _, err := g.Register(ctx, &raftgate.Register{Root: gen3.Root, Shards: []manifest.Digest{gen3.Release.Shards[0].Digest, gen3.Release.Shards[1].Digest}}); err != nil {
		t.Fatal(err)
	}
	_, err = run("recheck", "--members", "--root", gen3.Root.String(), "--tombstones", hit.String())
	wantExit(t, err, errcode.NotVerified, errcode.ExitRejected)
}

// twoAliases is a file store holding two synthetic releases, gen1
// published to alias main and gen2 to alias other, on a one-node gate;
// run runs the CLI with --store, --gate and -q.
type twoAliases struct {
	dir        string
	s          *file.Store
	gen1, gen2 stage.Result
	node       *raftgate.Node
	g          *raftgate.Client
	run        func(args ...string) (string, error)
}

func publishTwo(t *testing.T, n1, n2 int) *twoAliases {
	t.Helper()
	e := &twoAliases{}
	e.dir, e.s = tempFileStore(t)
	e.gen1 = stagetest.Synth(t, e.s, n1, 4, 1)
	e.gen2 = stagetest.Synth(t, e.s, n2, 3, 2)
	e.node, e.g = startLeader(t)
	base := []string{"--store", e.dir, "--gate", e.node.URL(), "-q"}
	e.run = func(args ...string) (string, error) { return cli(t, append(args, base...)...) }
	for _, p := range []struct {
		alias string
		root  manifest.Digest
	}{{"main", e.gen1.Root}, {"other", e.gen2.Root}} {
		if out, err := e.run("publish", "--alias", p.alias, "--root", p.root.String()); err != nil {
			t.Fatalf("publish %s: %q %v", p.alias, out, err)
		}
	}
	return e
}
