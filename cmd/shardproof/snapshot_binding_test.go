package main

import (
	"strings"
	"testing"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/stage/stagetest"
)

// A report is evidence about a release against the snapshot it names.
// verify --snapshot checks a release against another snapshot than the
// one its manifest binds, and its report says so; gate register must not
// take it for the release's own verdict. Here the release holds another
// dataset's samples (all of its own snapshot missing, all of another's
// extra) and is VERIFIED only against that other snapshot: registered, it
// went VERIFIED at the gate and `gate publish` moved an alias to it. It
// is refused like publish --report refuses it (BAD_INPUT), and the gate
// records nothing, so neither a VERIFIED nor an INVALID verdict about
// another snapshot reaches the release.
func TestRegisterReportOfAnotherSnapshot(t *testing.T) {
	ctx := t.Context()
	dir, s := tempFileStore(t)
	own := stagetest.Synth(t, s, 300, 2, 1)
	other := stagetest.Synth(t, s, 200, 2, 2)
	// other's shards under a manifest that names own's snapshot, its
	// root bound to it as an honest writer of a wrong release would.
	rel := stagetest.CloneRelease(other.Release)
	rel.DatasetSnapshot = own.Snapshot
	wrong := stagetest.Reissue(t, s, other, rel, true)
	node, g := startLeader(t)

	verify := func(args ...string) *manifest.Report {
		t.Helper()
		out, _ := cli(t, append([]string{"verify", "--store", dir, "--root", wrong.Root.String(), "--json"}, args...)...)
		rep, err := manifest.DecodeReport([]byte(strings.TrimSpace(out)))
		if err != nil {
			t.Fatalf("verify %v: %v\n%s", args, err, out)
		}
		return rep
	}
	if rep := verify(); rep.Verdict != manifest.Invalid || rep.Counts.Missing != 300 || rep.Counts.Extra != 200 {
		t.Fatalf("against its own snapshot: %s, %d missing, %d extra", rep.Verdict, rep.Counts.Missing, rep.Counts.Extra)
	}
	elsewhere := verify("--snapshot", other.Snapshot.String())
	if elsewhere.Verdict != manifest.Verified || elsewhere.DatasetSnapshot != other.Snapshot {
		t.Fatalf("against the other snapshot: %s, snapshot %s", elsewhere.Verdict, elsewhere.DatasetSnapshot)
	}
	b, err := manifest.Encode(elsewhere)
	if err != nil {
		t.Fatal(err)
	}
	report := putDoc(t, dir, b)

	for _, args := range [][]string{
		{"gate", "register", "--report", report.String()},
		{"gate", "register", "--report", report.String(), "--root", wrong.Root.String()},
	} {
		_, err = cli(t, append(args, "--store", dir, "--gate", node.URL())...)
		wantExit(t, err, errcode.BadInput, errcode.ExitInvalid)
		if !strings.Contains(err.Error(), own.Snapshot.String()) || !strings.Contains(err.Error(), other.Snapshot.String()) {
			t.Fatalf("%v: the refusal names neither snapshot: %v", args, err)
		}
		if rel, err := g.Release(ctx, wrong.Root); errcode.Of(err) != errcode.UnknownRelease {
			t.Fatalf("%v: the gate holds the release (%+v, %v)", args, rel, err)
		}
	}
	_, err = cli(t, "gate", "publish", "main", wrong.Root.String(), "--expect", "0", "--gate", node.URL())
	wantExit(t, err, errcode.UnknownRelease, errcode.ExitRejected)
	// publish --report refused it already.
	_, err = cli(t, "publish", "--store", dir, "--gate", node.URL(), "--alias", "main", "--root", wrong.Root.String(), "--report", report.String(), "-q")
	wantExit(t, err, errcode.BadInput, errcode.ExitInvalid)
}

// gate recheck takes a report's hits for the release's only if the report
// checked the root against the snapshot its manifest binds, as gate
// register does. A recheck report counts its hits in the member files of
// the snapshot it names, so one naming another snapshot (zero hits in
// another dataset) renewed a permit the fence advance closed; a
// verification report without failures against another snapshot (verify
// --snapshot) was sent too (the gate refused it only because that release
// is STAGED). Both are BAD_INPUT naming both snapshots, and nothing
// reaches the gate; the same recheck report naming the release's own
// snapshot renews the permit.
func TestGateRecheckReportOfAnotherSnapshot(t *testing.T) {
	ctx := t.Context()
	dir, s := tempFileStore(t)
	own := stagetest.Synth(t, s, 300, 2, 1)
	other := stagetest.Synth(t, s, 200, 2, 2)
	rel := stagetest.CloneRelease(other.Release)
	rel.DatasetSnapshot = own.Snapshot
	wrong := stagetest.Reissue(t, s, other, rel, true)
	node, g := startLeader(t)
	base := []string{"--store", dir, "--gate", node.URL()}
	if out, err := cli(t, append([]string{"publish", "-q", "--alias", "main", "--root", own.Root.String(), "--expect-generation", "0"}, base...)...); err != nil {
		t.Fatalf("publish: %q %v", out, err)
	}
	if out, err := cli(t, append([]string{"gate", "register", "--root", wrong.Root.String()}, base...)...); err != nil {
		t.Fatalf("register --root: %q %v", out, err)
	}
	tomb := putDoc(t, dir, []byte(`{"schema":"training.tombstones.v1","entries":[{"seq":4,"sampleId":"gone"}]}`))
	if out, err := cli(t, append([]string{"gate", "fence", "advance", "--tombstones", tomb.String()}, base...)...); err != nil {
		t.Fatalf("fence advance: %q %v", out, err)
	}
	ownRel, err := g.Release(ctx, own.Root)
	if err != nil {
		t.Fatal(err)
	}
	recheckReport := func(snapshot manifest.Digest) manifest.Digest {
		t.Helper()
		b, err := manifest.Encode(&manifest.RecheckReport{
			Schema: manifest.RecheckReportSchema, Root: own.Root, DatasetSnapshot: snapshot, Basis: ownRel.Report,
			Tombstones: tomb, TombstoneWatermark: 4, Members: 2, Records: 200,
			Examples: map[string][]string{}, Tool: "test",
		})
		if err != nil {
			t.Fatal(err)
		}
		return putDoc(t, dir, b)
	}
	out, _ := cli(t, "verify", "--store", dir, "--root", wrong.Root.String(), "--snapshot", other.Snapshot.String(), "--tombstones", tomb.String(), "--json")
	rep, err := manifest.DecodeReport([]byte(strings.TrimSpace(out)))
	if err != nil || rep.Verdict != manifest.Verified {
		t.Fatalf("verify against the other snapshot: %v\n%s", err, out)
	}
	b, err := manifest.Encode(rep)
	if err != nil {
		t.Fatal(err)
	}
	verification := putDoc(t, dir, b)

	for _, c := range []struct {
		name   string
		root   manifest.Digest
		report manifest.Digest
	}{
		{"a recheck report of another snapshot", own.Root, recheckReport(other.Snapshot)},
		{"a verification report against another snapshot", wrong.Root, verification},
	} {
		before, err := g.Release(ctx, c.root)
		if err != nil {
			t.Fatal(err)
		}
		_, err = cli(t, append([]string{"gate", "recheck", c.root.String(), "--kind", "tombstone", "--report", c.report.String()}, base...)...)
		wantExit(t, err, errcode.BadInput, errcode.ExitInvalid)
		if !strings.Contains(err.Error(), own.Snapshot.String()) || !strings.Contains(err.Error(), other.Snapshot.String()) {
			t.Fatalf("%s: the refusal names neither snapshot: %v", c.name, err)
		}
		if after, _ := g.Release(ctx, c.root); len(after.Rechecks) != len(before.Rechecks) || after.TombstoneWatermark != before.TombstoneWatermark {
			t.Fatalf("%s reached the gate: %d → %d rechecks, watermark %d → %d", c.name,
				len(before.Rechecks), len(after.Rechecks), before.TombstoneWatermark, after.TombstoneWatermark)
		}
	}
	out, err = cli(t, append([]string{"gate", "recheck", own.Root.String(), "--kind", "tombstone", "--report", recheckReport(own.Snapshot).String()}, base...)...)
	if err != nil || !strings.Contains(out, "renewed 1 permits") {
		t.Fatalf("gate recheck with a report of the release's own snapshot: %q %v", out, err)
	}
}
