package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/shardproof/shardproof/internal/canon"
	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/objstore"
	"github.com/shardproof/shardproof/objstore/file"
	"github.com/shardproof/shardproof/stage"
	"github.com/shardproof/shardproof/stage/stagetest"
)

// stagingRun runs `shardproof args…` in-process and returns stdout.
func stagingRun(t *testing.T, args ...string) (string, error) {
	t.Helper()
	synthFlags.stagingFlags, stageFlags.stagingFlags = stagingFlags{}, stagingFlags{}
	synthFlags.samples, synthFlags.seed, stageFlags.seed = 0, 0, 0
	out, _, err := runInProcess(t, nil, args...)
	return string(out), err
}

func objectsIn(t *testing.T, dir string) int {
	t.Helper()
	s, err := objstore.Open(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	n, after := 0, ""
	for {
		p, err := s.List(context.Background(), "", after, 0)
		if err != nil {
			t.Fatal(err)
		}
		n += len(p.Objects)
		if after = p.Next; after == "" {
			return n
		}
	}
}

func TestSynthCLIIsDeterministicAndIdempotent(t *testing.T) {
	dir := t.TempDir()
	args := []string{"synth", "--samples", "2000", "--shards", "3", "--seed", "7", "--store", dir}
	out1, err := stagingRun(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out1), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "root sha256:") || !strings.HasPrefix(lines[1], "snapshot sha256:") {
		t.Fatalf("output %q: want root line then snapshot line", out1)
	}
	if _, err := manifest.ParseDigest(strings.TrimPrefix(lines[0], "root ")); err != nil {
		t.Fatal(err)
	}
	n := objectsIn(t, dir)
	snapFile := filepath.Join(t.TempDir(), "snap")
	out2, err := stagingRun(t, append(args, "--json", "--snapshot-out", snapFile)...)
	if err != nil {
		t.Fatal(err)
	}
	var js stageOutput
	if err := json.Unmarshal([]byte(out2), &js); err != nil {
		t.Fatalf("--json output %q: %v", out2, err)
	}
	if "root "+js.Root != lines[0] || "snapshot "+js.Snapshot != lines[1] || js.Created != 0 || js.Records != 2000 || js.Shards != 3 {
		t.Fatalf("second run %+v, first %q", js, out1)
	}
	if got := objectsIn(t, dir); got != n {
		t.Fatalf("second run: %d objects, first %d", got, n)
	}
	if b, _ := os.ReadFile(snapFile); strings.TrimSpace(string(b)) != js.Snapshot {
		t.Fatalf("--snapshot-out wrote %q", b)
	}
}

func TestStageCLI(t *testing.T) {
	// Source files: a synthetic release's rows.
	syn := stagetest.Store(t)
	sres := stagetest.Synth(t, syn, 600, 2, 9)
	src := t.TempDir()
	var inputs []string
	for i := range sres.Release.Shards {
		p := filepath.Join(src, sres.Release.Shards[i].ID+".parquet")
		os.WriteFile(p, stagetest.ShardBytes(t, syn, sres.Release.Shards[i]), 0o644)
		inputs = append(inputs, p)
	}
	dir := t.TempDir()
	out, err := stagingRun(t, append([]string{"stage", "--store", "file://" + dir, "--shards", "2", "--seed", "9"}, inputs...)...)
	if err != nil {
		t.Fatal(err)
	}
	if want := "root " + sres.Root.String() + "\nsnapshot " + sres.Snapshot.String() + "\n"; out != want {
		t.Fatalf("stage printed %q, want the synthetic release's digests %q", out, want)
	}

	// Bad inputs: exact code and exit status, and no object written.
	notDir := filepath.Join(src, "plainfile")
	os.WriteFile(notDir, []byte("x"), 0o644)
	for _, c := range []struct {
		name   string
		args   []string
		code   errcode.Code
		exit   int
		detail string
	}{
		{"missing columns", []string{"stage", "--shards", "1", inputs[0], missingColumnsFile(t, src)}, errcode.BadInput, errcode.ExitInvalid, "missing columns: source_id, source_version, split, lang, tokens"},
		{"zero shards", []string{"stage", "--shards", "0", inputs[0]}, errcode.Usage, errcode.ExitUsage, "--shards"},
		{"no files", []string{"stage", "--shards", "1"}, errcode.Usage, errcode.ExitUsage, "at least one"},
		{"synth zero shards", []string{"synth", "--samples", "10", "--shards", "0"}, errcode.Usage, errcode.ExitUsage, "--shards"},
		{"bad flag", []string{"synth", "--samples", "ten", "--shards", "1"}, errcode.Usage, errcode.ExitUsage, "samples"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			_, err := stagingRun(t, append(c.args, "--store", dir)...)
			if errcode.Of(err) != c.code || exitStatus(err) != c.exit || !strings.Contains(err.Error(), c.detail) {
				t.Fatalf("err %v (code %s, exit %d), want %s / %d containing %q", err, errcode.Of(err), exitStatus(err), c.code, c.exit, c.detail)
			}
			if n := objectsIn(t, dir); n != 0 {
				t.Fatalf("%d objects written", n)
			}
		})
	}
	// An unusable store path.
	_, err = stagingRun(t, "synth", "--samples", "10", "--shards", "1", "--store", filepath.Join(notDir, "store"))
	if errcode.Of(err) != errcode.StoreUnavailable || exitStatus(err) != errcode.ExitError {
		t.Fatalf("store under a plain file: %v (exit %d)", err, exitStatus(err))
	}
}

// missingColumnsFile writes a Parquet file with only sample_id and text.
func missingColumnsFile(t *testing.T, dir string) string {
	s := &manifest.RecordSchema{Schema: manifest.RecordSchemaSchema, Fields: []manifest.Field{{Name: "sample_id", Type: "utf8"}, {Name: "text", Type: "utf8"}}}
	rec := stage.BuildRows([]stage.Row{{SampleID: "x", Text: "y"}})
	defer rec.Release()
	as, err := canon.ArrowSchema(s)
	if err != nil {
		t.Fatal(err)
	}
	two := array.NewRecordBatch(as, []arrow.Array{rec.Column(0), rec.Column(5)}, rec.NumRows())
	defer two.Release()
	p := filepath.Join(dir, "two-columns.parquet")
	os.WriteFile(p, stagetest.EncodeRecord(t, two, s, stage.ParquetOptions{}), 0o644)
	return p
}

// A codec or level the Parquet writer does not have is a usage error
// before anything is written (gzip's writer panicked on one, leaving
// temporary directories and a store holding one blob), and the default
// level recorded is the one it always was.
func TestStagingRefusesLevelsTheCodecLacks(t *testing.T) {
	parent := t.TempDir()
	for _, c := range [][]string{
		{"--compression", "gzip", "--level", "99"},
		{"--compression", "gzip", "--level", "-5"},
		{"--compression", "zstd", "--level", "23"},
		{"--compression", "brotli"},
		{"--seed", "-1"},
	} {
		dir := filepath.Join(parent, "store")
		_, err := stagingRun(t, append([]string{"synth", "--samples", "10", "--shards", "2", "--store", dir}, c...)...)
		if errcode.Of(err) != errcode.Usage || exitStatus(err) != errcode.ExitUsage {
			t.Errorf("%v: %v, want USAGE (exit 2)", c, err)
		}
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("%v: the store was created (%v)", c, err)
		}
	}
	// The default level is 3 whatever the codec, as it always was:
	// releases staged before keep their roots.
	for codec, level := range map[string]int{"gzip": 3, "zstd": 3, "snappy": 3} {
		dir := filepath.Join(parent, codec)
		out, err := stagingRun(t, "synth", "--samples", "10", "--shards", "2", "--store", dir, "--compression", codec, "--json")
		if err != nil {
			t.Fatalf("%s: %v", codec, err)
		}
		var js stageOutput
		if err := json.Unmarshal([]byte(out), &js); err != nil {
			t.Fatal(err)
		}
		d, _ := manifest.ParseDigest(js.Root)
		s, err := file.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		b, _, err := objstore.ReadBlob(context.Background(), s, d, manifest.MaxDocumentSize)
		if err != nil {
			t.Fatal(err)
		}
		rel, err := manifest.DecodeRelease(b)
		if err != nil {
			t.Fatal(err)
		}
		if rel.Build.Compression != codec || rel.Build.CompressionLevel != level {
			t.Errorf("%s without --level: manifest records %s level %d, want level %d", codec, rel.Build.Compression, rel.Build.CompressionLevel, level)
		}
	}
}

// A --snapshot-out that cannot be written (its directory missing, or a
// directory itself) is USAGE before the store is created, for synth and
// stage: it was IO once the whole release was written, and the root,
// printed after it, never was.
func TestStagingRefusesAnUnwritableSnapshotOut(t *testing.T) {
	parent := t.TempDir()
	for _, out := range []string{filepath.Join(parent, "no-such-dir", "snapshot.txt"), parent} {
		for _, cmd := range [][]string{
			{"synth", "--samples", "10", "--shards", "2"},
			{"stage", "--shards", "2", filepath.Join(parent, "in.parquet")},
		} {
			dir := filepath.Join(parent, "store")
			_, err := stagingRun(t, append(cmd, "--store", dir, "--snapshot-out", out)...)
			if errcode.Of(err) != errcode.Usage || exitStatus(err) != errcode.ExitUsage || !strings.Contains(err.Error(), "--snapshot-out "+out) {
				t.Errorf("%s --snapshot-out %s: %v, want USAGE (exit 2) naming it", cmd[0], out, err)
			}
			if _, err := os.Stat(dir); !os.IsNotExist(err) {
				t.Errorf("%s --snapshot-out %s: the store was created (%v)", cmd[0], out, err)
			}
		}
	}
}

// An input stage cannot open (missing) or that is a directory is USAGE,
// exit 2, naming it, before the store is created, as a FILE is for every
// other command: it was BAD_INPUT, exit 1, which reads as "checked and
// invalid". One that opens and is not Parquet stays BAD_INPUT.
func TestStageRefusesAMissingInput(t *testing.T) {
	parent := t.TempDir()
	notParquet := filepath.Join(parent, "text.parquet")
	if err := os.WriteFile(notParquet, []byte("not parquet"), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(parent, "store")
	for _, c := range []struct {
		in   string
		code errcode.Code
		exit int
	}{
		{filepath.Join(parent, "missing.parquet"), errcode.Usage, errcode.ExitUsage},
		{parent, errcode.Usage, errcode.ExitUsage},
		{notParquet, errcode.BadInput, errcode.ExitInvalid},
	} {
		_, err := stagingRun(t, "stage", "--shards", "1", "--store", dir, c.in)
		if errcode.Of(err) != c.code || exitStatus(err) != c.exit || !strings.Contains(err.Error(), c.in) {
			t.Errorf("stage %s: %v, want %s (exit %d) naming it", c.in, err, c.code, c.exit)
		}
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("stage %s: the store was created (%v)", c.in, err)
		}
	}
}
