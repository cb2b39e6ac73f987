package raftgate

import (
	"strings"
	"testing"
	"time"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
)

// An error for a name the gate does not hold names it whole: a release
// root (71 bytes), and an alias, run or permit ID up to the 253 bytes
// the gate takes. They were cut at 64 bytes, so "no release sha256:…"
// lost the digest's last seven hex digits, and a client (recheck --json,
// run show) could not tell which root or run it had asked for. A name
// longer than any the gate takes is still cut, at 253 bytes.
func TestUnknownNamesAreNamedWhole(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	_, g := soloGate(t, "g")
	root := publishedRelease(t, ctx, g, "rel", 2)
	unknown := manifest.Sum([]byte("no such release"))
	long := strings.Repeat("n", maxNameLen)
	check := func(what string, err error, code errcode.Code, want string) {
		t.Helper()
		if errcode.Of(err) != code || err == nil || !strings.HasSuffix(err.Error(), want) {
			t.Errorf("%s: %v, want %s ending %q", what, err, code, want)
		}
	}
	_, err := g.Release(ctx, unknown)
	check("release", err, errcode.UnknownRelease, "no release "+unknown.String())
	_, err = g.Alias(ctx, long)
	check("alias", err, errcode.UnknownAlias, "no alias "+long)
	_, err = g.Run(ctx, long)
	check("run", err, errcode.UnknownRun, "no run "+long)
	_, err = g.Permit(ctx, "p-"+long)
	check("permit", err, errcode.UnknownPermit, "no permit "+("p-" + long)[:maxNameLen]+"…")
	// Commands name them whole too: a run created on an alias the gate
	// does not hold, a checkpoint of a run it does not.
	_, err = g.CreateRun(ctx, &CreateRun{Run: "r", Alias: long, WorldSize: 1})
	check("create run", err, errcode.UnknownAlias, "no alias "+long)
	_, err = g.AdmitCheckpoint(ctx, long, 1, root)
	check("checkpoint", err, errcode.UnknownRun, "no run "+long)
}
