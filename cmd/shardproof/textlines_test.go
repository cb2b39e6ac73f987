package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/objstore"
	"github.com/shardproof/shardproof/stage"
	"github.com/shardproof/shardproof/stage/stagetest"
)

// runText runs `shardproof args…` in-process and returns everything it
// printed as text: stdout, stderr and, when it fails, the
// "shardproof: CODE: message" line exitStatus prints.
func runText(t *testing.T, args ...string) string {
	t.Helper()
	out, errOut, err := runInProcess(t, nil, args...)
	var failed bytes.Buffer
	if err != nil {
		old := stderr
		stderr = &failed
		exitStatus(err)
		stderr = old
	}
	return string(out) + string(errOut) + failed.String()
}

// Every text line the CLI prints ends without a space or a tab, its
// failure lines too: a line built as "label " + "" (an empty last
// column, a message or a detail that is empty) ended in a space, which
// a script that splits on spaces or compares the output with a saved
// one trips on. The commands run here cover the CLI's text outputs:
// successes, INVALID verdicts with failures listed, and refusals.
func TestTextLinesEndWithoutSpace(t *testing.T) {
	dir, s := tempFileStore(t)
	good := stagetest.Synth(t, s, 300, 3, 1)
	// A shard whose bytes are not those its digest names: a failure
	// line; and a sample gone: a member-level count with an example.
	damaged := stagetest.ReplaceShardBytes(t, s, stagetest.Synth(t, s, 300, 3, 2), 1, []byte("not the shard"))
	missing := stagetest.RewriteShard(t, s, stagetest.Synth(t, s, 300, 3, 3), 0, func(rows []stage.Row) []stage.Row { return rows[1:] })
	node, _ := startLeader(t)
	gate := []string{"--store", dir, "--gate", node.URL()}
	keys := t.TempDir()
	priv, _, _ := keyPair(t, keys, "verifier")
	reportLine := regexp.MustCompile(`(?m)^report\s+(sha256:[0-9a-f]{64})$`)

	var outputs []struct{ what, text string }
	run := func(args ...string) string {
		t.Helper()
		text := runText(t, args...)
		outputs = append(outputs, struct{ what, text string }{strings.Join(args, " "), text})
		return text
	}
	report := func(text string) string {
		t.Helper()
		m := reportLine.FindStringSubmatch(text)
		if m == nil {
			t.Fatalf("no report digest in %q", text)
		}
		return m[1]
	}

	run("codes")
	run("keys", "generate", "--private", filepath.Join(keys, "k.key"), "--public", filepath.Join(keys, "k.pub"))
	run("keys", "generate", "--private", priv, "--public", filepath.Join(keys, "again.pub")) // USAGE: exists
	run("manifest", "show", good.Root.String(), "--store", dir)
	run("manifest", "show", "sha256:"+strings.Repeat("0", 64), "--store", dir) // NOT_FOUND
	doc := filepath.Join(t.TempDir(), "tombstones.json")
	if err := os.WriteFile(doc, []byte(`{"schema":"training.tombstones.v1","entries":[{"seq":4,"sampleId":"gone"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	run("manifest", "check", doc)
	put := run("manifest", "put", doc, "--store", dir)
	tomb := strings.Fields(put)[1]
	run("manifest", "check", filepath.Join(keys, "k.pub")) // not a document
	run("store", "ls", "index/", "--store", dir)
	run("store", "put", "notes/a", doc, "--store", dir)
	run("store", "get", "notes/missing", "--store", dir) // NOT_FOUND
	run("store", "prune-jobs", "--dry-run", "--store", dir)

	goodReport := report(run("verify", "--store", dir, "--root", good.Root.String(), "--sign-key", priv))
	run("verify", "--store", dir, "--root", good.Root.String(), "--keep-job", "--json")
	run("verify", "--store", dir, "--root", damaged.Root.String())
	missingReport := report(run("verify", "--store", dir, "--root", missing.Root.String()))
	run("verify", "--store", dir) // USAGE
	run("verify", "--store", dir, "--root", "sha256:"+strings.Repeat("1", 64))
	run("verify", "--store", dir, "--resume", "sha256:"+strings.Repeat("2", 64))

	// A stored report whose failures have an empty detail and one
	// ending in a space, as a report may hold (another build's, or one
	// written by hand): publish --report lists its failures.
	b, _, err := objstore.ReadBlob(t.Context(), s, manifest.MustParseDigest(missingReport), manifest.MaxDocumentSize)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := manifest.DecodeReport(b)
	if err != nil {
		t.Fatal(err)
	}
	rep.Failures = []manifest.ShardFailure{
		{Shard: "shard-00000-of-00003", Side: "release", Code: "DECODE_ERROR"},
		{Shard: "shard-00001-of-00003", Side: "release", Code: "DECODE_ERROR", Detail: "cut short "},
	}
	rep.Counts.DecodeErrors = 2
	enc, err := manifest.Encode(rep)
	if err != nil {
		t.Fatal(err)
	}
	forged, _, _, err := objstore.PutBlob(t.Context(), s, enc)
	if err != nil {
		t.Fatal(err)
	}
	out := run(append([]string{"publish", "-q", "--alias", "gone", "--root", missing.Root.String(), "--report", manifest.Digest(forged).String()}, gate...)...)
	if !strings.Contains(out, "  release shard-00000-of-00003: DECODE_ERROR\n") || !strings.Contains(out, `  release shard-00001-of-00003: DECODE_ERROR: "cut short "`+"\n") {
		t.Errorf("publish of a report whose failures have an empty detail and one ending in a space: %q; want the first to end with its code, the second quoted", out)
	}
	run(append([]string{"publish", "-q", "--alias", "main", "--root", good.Root.String(), "--report", goodReport}, gate...)...)
	run(append([]string{"publish", "-q", "--alias", "main", "--root", good.Root.String()}, gate...)...) // already there
	run(append([]string{"publish", "-q", "--alias", "bad", "--root", damaged.Root.String()}, gate...)...)
	run(append([]string{"publish", "-q", "--alias", "main", "--root", missing.Root.String(), "--expect-generation", "7"}, gate...)...)
	run(append([]string{"publish", "-q", "--root", good.Root.String()}, gate...)...) // USAGE

	run("gate", "status", "--gate", node.URL())
	run("gate", "register", "--report", goodReport, "--store", dir, "--gate", node.URL())
	run("gate", "permits", "--gate", node.URL())
	run("gate", "history", "main", "--gate", node.URL())
	run("gate", "history", "nothing", "--gate", node.URL()) // UNKNOWN_ALIAS
	run("gate", "release", good.Root.String(), "--gate", node.URL())
	run("gate", "release", "sha256:"+strings.Repeat("4", 64), "--gate", node.URL()) // UNKNOWN_RELEASE
	run("gate", "release", damaged.Root.String(), "--gate", node.URL())             // INVALID, with failures
	run("gate", "fence", "--gate", node.URL())
	run("gate", "fence", "advance", "--tombstones", tomb, "--store", dir, "--gate", node.URL())
	run("gate", "permits", "--gate", node.URL())
	run(append([]string{"recheck", "-q", "--tombstones", tomb, "--root", good.Root.String(), "--sign-key", priv}, gate...)...)
	run(append([]string{"recheck", "-q", "--tombstones", tomb, "--root", damaged.Root.String()}, gate...)...)
	run(append([]string{"recheck", "-q", "--tombstones", tomb, "--root", "sha256:" + strings.Repeat("3", 64)}, gate...)...)
	run("gate", "release", good.Root.String(), "--gate", node.URL()) // with its recheck
	run("gate", "prune", "--gate", node.URL())
	run("run", "create", "r1", "--alias", "main", "--world-size", "1", "--gate", node.URL())
	run("run", "show", "r1", "--gate", node.URL())
	run("run", "cancel", "r1", "--gate", node.URL())
	run("run", "show", "r1", "--gate", node.URL())
	run("run", "show", "nothing", "--gate", node.URL()) // UNKNOWN_RUN
	// A reason given with a space at its end.
	run("run", "create", "r2", "--alias", "main", "--world-size", "1", "--gate", node.URL())
	run("run", "cancel", "r2", "--reason", "operator said so ", "--gate", node.URL())
	if out := run("run", "show", "r2", "--gate", node.URL()); !strings.Contains(out, `CANCELED: "operator said so "`+"\n") {
		t.Errorf("run show of a run cancelled with a reason ending in a space: %q; want the reason quoted", out)
	}
	run("run", "wait", "r2", "--gate", node.URL())
	run("run", "wait", "r1", "--gate", node.URL())

	// Failures whose message is empty, or ends in what another program
	// said, with a space at its end.
	for _, c := range []struct{ msg, want string }{
		{"", "shardproof: IO\n"},
		{"the store answered: ", "shardproof: IO: the store answered:\n"},
	} {
		var line bytes.Buffer
		old := stderr
		stderr = &line
		exitStatus(errcode.New(errcode.IO, "%s", c.msg))
		stderr = old
		if line.String() != c.want {
			t.Errorf("failure with message %q printed %q, want %q", c.msg, line.String(), c.want)
		}
	}

	for _, o := range outputs {
		if o.text == "" {
			continue
		}
		for i, line := range strings.Split(strings.TrimSuffix(o.text, "\n"), "\n") {
			if strings.TrimRight(line, " \t") != line {
				t.Errorf("shardproof %s: line %d ends in whitespace: %q", o.what, i+1, line)
			}
		}
	}
}
