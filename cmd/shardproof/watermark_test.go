package main

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shardproof/shardproof/coordinator"
	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/objstore"
	"github.com/shardproof/shardproof/objstore/file"
	"github.com/shardproof/shardproof/publish"
	"github.com/shardproof/shardproof/raftgate"
)

// claimingRelease synthesizes, through the CLI, a release that claims
// tombstoneWatermark 5 and benchmarkFence 3, and stores fence documents
// of each kind reaching 2 to 9: tombs[w] and benches[w] have watermark w.
func claimingRelease(t *testing.T) (dir string, s objstore.Store, root manifest.Digest, tombs, benches map[uint64]manifest.Digest) {
	t.Helper()
	dir = filepath.Join(t.TempDir(), "store")
	out, err := cli(t, "synth", "--samples", "600", "--shards", "3", "--seed", "21",
		"--tombstone-watermark", "5", "--benchmark-fence", "3", "--store", dir)
	if err != nil {
		t.Fatalf("synth: %q %v", out, err)
	}
	for _, l := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(l, "root "); ok {
			root = manifest.MustParseDigest(v)
		}
	}
	fs, err := file.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fs.Close() })
	tombs, benches = map[uint64]manifest.Digest{}, map[uint64]manifest.Digest{}
	for w := uint64(2); w <= 9; w++ {
		for _, k := range []struct {
			schema string
			docs   map[uint64]manifest.Digest
		}{{manifest.TombstonesSchema, tombs}, {manifest.BenchmarkSchema, benches}} {
			// Items no synthetic release holds: only the watermarks matter.
			b := fmt.Appendf(nil, `{"schema":%q,"entries":[{"seq":1,"sampleId":"elsewhere-1"},{"seq":%d,"sampleId":"elsewhere-%d"}]}`, k.schema, w, w)
			d, _, _, err := objstore.PutBlob(t.Context(), fs, b)
			if err != nil {
				t.Fatal(err)
			}
			k.docs[w] = d
		}
	}
	return dir, fs, root, tombs, benches
}

// blobCount is the number of objects under blobs/ in s.
func blobCount(t *testing.T, s objstore.Store) int {
	t.Helper()
	n, after := 0, ""
	for {
		page, err := s.List(t.Context(), "blobs/", after, 1000)
		if err != nil {
			t.Fatal(err)
		}
		n += len(page.Objects)
		if page.Next == "" {
			return n
		}
		after = page.Next
	}
}

// A release's tombstoneWatermark and benchmarkFence claim that it holds no
// sample a tombstone up to that seq deleted and no benchmark item up to
// that seq. verify makes it VERIFIED only against fence documents that
// reach both claims; below them (none given included) it refuses before
// reading a byte, storing neither plan nor report, with every executor.
// It used to report VERIFIED, the claims checked against nothing.
func TestVerifyWatermarkClaims(t *testing.T) {
	dir, s, root, tombs, benches := claimingRelease(t)
	verify := func(args ...string) cliResult {
		return runCLI(t, cliEnv(), append([]string{"verify", "--store", dir, "--root", root.String()}, args...)...)
	}
	blobs := blobCount(t, s)
	for _, c := range []struct {
		name string
		args []string
		want []string
	}{
		{"no fence document", nil, []string{"tombstoneWatermark 5, but no tombstone log", "benchmarkFence 3, but no benchmark registry"}},
		{"a tombstone log short of the claim", []string{"--tombstones", tombs[4].String(), "--benchmark", benches[3].String()},
			[]string{"tombstoneWatermark 5, but the tombstone log checked reaches only 4"}},
		{"a benchmark registry short of the claim", []string{"--tombstones", tombs[9].String(), "--benchmark", benches[2].String()},
			[]string{"benchmarkFence 3, but the benchmark registry checked reaches only 2"}},
		{"no benchmark registry", []string{"--tombstones", tombs[5].String()}, []string{"benchmarkFence 3, but no benchmark registry"}},
		{"another executor", []string{"--executor", "process", "--tombstones", tombs[5].String()}, []string{"benchmarkFence 3"}},
	} {
		res := verify(c.args...)
		if res.status != errcode.ExitInvalid || !strings.Contains(res.stderr, "shardproof: WATERMARK_UNCHECKED: ") || strings.Contains(res.stdout, "VERIFIED") {
			t.Errorf("%s: exit %d, want %d with WATERMARK_UNCHECKED\nstdout: %s\nstderr: %s", c.name, res.status, errcode.ExitInvalid, res.stdout, res.stderr)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(res.stderr, w) {
				t.Errorf("%s: stderr lacks %q: %s", c.name, w, res.stderr)
			}
		}
	}
	if n := blobCount(t, s); n != blobs {
		t.Fatalf("refused verifications stored %d blobs (plans or reports)", n-blobs)
	}

	// Documents at the claims, or beyond them, verify it.
	for _, args := range [][]string{
		{"--tombstones", tombs[5].String(), "--benchmark", benches[3].String()},
		{"--tombstones", tombs[9].String(), "--benchmark", benches[3].String(), "--executor", "process"},
	} {
		rep := cliReport(t, verify(append(args, "--json", "--keep-job")...))
		if rep.Verdict != manifest.Verified || rep.TombstoneWatermark < 5 || rep.BenchmarkFence != 3 {
			t.Fatalf("%v: verdict %s at tombstone %d, benchmark %d", args, rep.Verdict, rep.TombstoneWatermark, rep.BenchmarkFence)
		}
	}

	// A plan made elsewhere (an older build) that names documents short
	// of the claims: resuming it is refused too.
	rep := cliReport(t, verify("--tombstones", tombs[5].String(), "--benchmark", benches[3].String(), "--json", "--keep-job"))
	b, _, err := objstore.ReadBlob(t.Context(), s, rep.Execution.Plan, manifest.MaxDocumentSize)
	if err != nil {
		t.Fatal(err)
	}
	var plan coordinator.Plan
	if err := json.Unmarshal(b, &plan); err != nil {
		t.Fatal(err)
	}
	plan.Tombstones, plan.Nonce = tombs[4], "elsewhere"
	if b, err = manifest.Encode(&plan); err != nil {
		t.Fatal(err)
	}
	pd, _, _, err := objstore.PutBlob(t.Context(), s, b)
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"verify", "--store", dir, "--resume", manifest.Digest(pd).String()},
		{"task", "map", "--plan", dir + "#" + manifest.Digest(pd).String(), "--index", "0"},
	} {
		res := runCLI(t, cliEnv(), args...)
		if res.status != errcode.ExitInvalid || !strings.Contains(res.stderr, "WATERMARK_UNCHECKED: plan "+manifest.Digest(pd).String()) {
			t.Errorf("%v: exit %d, want %d with WATERMARK_UNCHECKED\n%s", args, res.status, errcode.ExitInvalid, res.stderr)
		}
	}
}

// publish, gate register and recheck take a release's claims as verify
// does: fence documents short of them are refused before anything is
// registered, and so is a VERIFIED report checked below them (what verify
// wrote before it checked the claims), whether named with --report,
// registered by hand, or held by the gate for reuse.
func TestPublishWatermarkClaims(t *testing.T) {
	ctx := t.Context()
	dir, s, root, tombs, benches := claimingRelease(t)
	node, g := startLeader(t)
	base := []string{"--store", dir, "--gate", node.URL(), "-q"}
	run := func(args ...string) (string, error) { return cli(t, append(args, base...)...) }
	unknown := func(what string) {
		t.Helper()
		if rel, err := g.Release(ctx, root); errcode.Of(err) != errcode.UnknownRelease {
			t.Fatalf("%s: the gate holds the release (%+v, %v)", what, rel, err)
		}
	}

	_, err := run("publish", "--alias", "main", "--root", root.String())
	wantExit(t, err, errcode.WatermarkUnchecked, errcode.ExitInvalid)
	unknown("publish without fence documents")
	_, err = run("publish", "--alias", "main", "--root", root.String(), "--tombstones", tombs[4].String(), "--benchmark", benches[3].String())
	wantExit(t, err, errcode.WatermarkUnchecked, errcode.ExitInvalid)
	unknown("publish with a tombstone log short of the claim")

	// The report an older build wrote without fence documents: VERIFIED
	// at watermarks 0.
	out, err := cli(t, "verify", "--store", dir, "--root", root.String(), "--tombstones", tombs[5].String(), "--benchmark", benches[3].String(), "--json")
	if err != nil {
		t.Fatalf("verify: %v", err)
	}
	old, err := manifest.DecodeReport([]byte(strings.TrimSpace(out)))
	if err != nil {
		t.Fatal(err)
	}
	old.TombstoneWatermark, old.BenchmarkFence, old.Tombstones, old.Benchmark = 0, 0, manifest.Digest{}, manifest.Digest{}
	b, err := manifest.Encode(old)
	if err != nil {
		t.Fatal(err)
	}
	od, _, _, err := objstore.PutBlob(ctx, s, b)
	if err != nil {
		t.Fatal(err)
	}
	oldD := manifest.Digest(od)
	_, err = run("publish", "--alias", "main", "--root", root.String(), "--report", oldD.String())
	wantExit(t, err, errcode.WatermarkUnchecked, errcode.ExitInvalid)
	unknown("publish --report of a report below the claims")
	_, err = cli(t, "gate", "register", "--store", dir, "--gate", node.URL(), "--report", oldD.String())
	wantExit(t, err, errcode.WatermarkUnchecked, errcode.ExitInvalid)
	unknown("gate register of a report below the claims")

	// An older build's publish registered it: the gate holds it VERIFIED
	// at the current fences (0), but it is not reused for a publish.
	b, _, err = objstore.ReadBlob(ctx, s, root, manifest.MaxDocumentSize)
	if err != nil {
		t.Fatal(err)
	}
	rel, err := manifest.DecodeRelease(b)
	if err != nil {
		t.Fatal(err)
	}
	var shards []manifest.Digest
	for _, sh := range rel.Shards {
		shards = append(shards, sh.Digest)
	}
	if _, err := g.Register(ctx, &raftgate.Register{Root: root, Shards: shards, Report: publish.Summary(old, oldD)}); err != nil {
		t.Fatal(err)
	}
	_, err = run("publish", "--alias", "main", "--root", root.String())
	wantExit(t, err, errcode.WatermarkUnchecked, errcode.ExitInvalid)
	if al, err := g.Alias(ctx, "main"); errcode.Of(err) != errcode.UnknownAlias {
		t.Fatalf("alias main: %+v %v", al, err)
	}

	// With documents at the claims it is verified and published.
	out, err = run("publish", "--alias", "main", "--root", root.String(), "--tombstones", tombs[5].String(), "--benchmark", benches[3].String())
	if err != nil || !strings.Contains(out, "published main generation 1") {
		t.Fatalf("publish at the claims: %q %v", out, err)
	}
	if gr, err := g.Release(ctx, root); err != nil || gr.TombstoneWatermark != 5 || gr.BenchmarkFence != 3 || gr.Report == oldD {
		t.Fatalf("release after publish: %+v %v", gr, err)
	}

	// A full recheck verifies again, so it needs both kinds too; a
	// recheck from the member files proves nothing of the claims and
	// takes one kind.
	_, err = run("recheck", "--root", root.String(), "--tombstones", tombs[9].String())
	wantExit(t, err, errcode.WatermarkUnchecked, errcode.ExitInvalid)
	if out, err := run("recheck", "--root", root.String(), "--tombstones", tombs[9].String(), "--benchmark", benches[3].String()); err != nil || !strings.Contains(out, "renewed") {
		t.Fatalf("full recheck at the claims: %q %v", out, err)
	}
	if out, err := run("recheck", "--members", "--root", root.String(), "--tombstones", tombs[9].String()); err != nil || !strings.Contains(out, "renewed") {
		t.Fatalf("recheck --members: %q %v", out, err)
	}
}
