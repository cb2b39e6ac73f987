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
