package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/objstore"
)

// cliRun runs `shardproof args…` in-process and returns stdout and stderr.
func cliRun(t *testing.T, args ...string) (stdout, stderr []byte, err error) {
	t.Helper()
	manifestFlags.pretty = false
	return runInProcess(t, nil, args...)
}

func testRelease() *manifest.Release {
	d := func(s string) manifest.Digest { return manifest.Sum([]byte(s)) }
	shards := make([]manifest.Shard, 2)
	tot := manifest.Totals{Shards: 2}
	for i := range shards {
		shards[i] = manifest.Shard{
			ID: fmt.Sprintf("shard-%05d-of-00002", i), MediaType: manifest.ParquetMediaType,
			Digest: d(fmt.Sprint("b", i)), Size: 1000, ObjectVersion: "v1",
			LogicalDigest: d(fmt.Sprint("l", i)), Records: 10, Tokens: 70, MemberSetDigest: d(fmt.Sprint("m", i)),
		}
		tot.Records += 10
		tot.Tokens += 70
	}
	return &manifest.Release{
		Schema: manifest.ReleaseSchema, DatasetSnapshot: d("snap"), TombstoneWatermark: 44192, BenchmarkFence: 3908,
		RecordSchema: d("schema"), Build: manifest.Build{MemberPartition: manifest.DefaultMemberPartition, EncryptionKeyVersion: "none", EncryptionAADScheme: "none"},
		Shards: shards, Totals: tot, OrderedMemberTupleRoot: d("root"),
	}
}

func putDoc(t *testing.T, dir string, body []byte) manifest.Digest {
	t.Helper()
	s, err := objstore.Open(t.Context(), dir)
	if err != nil {
		t.Fatal(err)
	}
	d, _, _, err := objstore.PutBlob(t.Context(), s, body)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestManifestShow(t *testing.T) {
	dir := t.TempDir()
	body, err := manifest.EncodeRelease(testRelease())
	if err != nil {
		t.Fatal(err)
	}
	d := putDoc(t, dir, body)

	for _, store := range []string{dir, "file://" + dir} {
		out, _, err := cliRun(t, "manifest", "show", "--store", store, d.String())
		if err != nil {
			t.Fatalf("manifest show --store %s: %v", store, err)
		}
		if sum := sha256.Sum256(out); manifest.Digest(sum) != d {
			t.Fatalf("output hashes to %x, want %s", sum, d)
		}
		if !bytes.Equal(out, body) {
			t.Fatalf("output is not the stored bytes")
		}
	}

	out, stderr, err := cliRun(t, "manifest", "show", "--pretty", "--store", dir, d.String())
	if err != nil {
		t.Fatal(err)
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, out); err != nil || !bytes.Equal(compact.Bytes(), body) {
		t.Fatalf("--pretty output is not the document indented: %v\n%s", err, out)
	}
	if !bytes.Contains(out, []byte("\n  \"schema\": \"training.shard.release.v1\"")) {
		t.Fatalf("--pretty output is not indented:\n%s", out)
	}
	if !strings.Contains(string(stderr), "2 shards, 20 records, 140 tokens") || !strings.Contains(string(stderr), d.String()) {
		t.Fatalf("release summary on stderr: %q", stderr)
	}

	// Every document kind is shown.
	rs := &manifest.RecordSchema{
		Schema:  manifest.RecordSchemaSchema,
		Fields:  []manifest.Field{{Name: "id", Type: "utf8"}, {Name: "src", Type: "utf8"}, {Name: "ver", Type: "int64"}, {Name: "split", Type: "utf8"}, {Name: "text", Type: "utf8"}},
		Content: "text", Tuple: manifest.TupleMap{SampleID: "id", SourceID: "src", SourceVersion: "ver", Split: "split"},
	}
	for _, doc := range []manifest.Validator{rs, &manifest.FenceLog{Schema: manifest.TombstonesSchema, Entries: []manifest.FenceEntry{{Seq: 1, SampleID: "x"}}}} {
		b, err := manifest.Encode(doc)
		if err != nil {
			t.Fatal(err)
		}
		out, _, err := cliRun(t, "manifest", "show", "--store", dir, putDoc(t, dir, b).String())
		if err != nil || !bytes.Equal(out, b) {
			t.Fatalf("show %T: %v", doc, err)
		}
	}
	rep := &manifest.Report{
		Schema: manifest.ReportSchema, Root: d, DatasetSnapshot: manifest.Sum([]byte("snap")), Verdict: manifest.Invalid,
		Counts:   manifest.Counts{Shards: 2, ShardsVerified: 1, Records: 10, DigestFailures: 1},
		Failures: []manifest.ShardFailure{{Shard: "shard-00001-of-00002", Side: "release", Code: string(errcode.DigestMismatch)}},
	}
	b, err := manifest.EncodeReport(rep)
	if err != nil {
		t.Fatal(err)
	}
	_, stderr, err = cliRun(t, "manifest", "show", "--pretty", "--store", dir, putDoc(t, dir, b).String())
	if err != nil || !strings.Contains(string(stderr), "INVALID for root "+d.String()+"; 1 of 2 shards verified") {
		t.Fatalf("report summary: %q, %v", stderr, err)
	}
}

func TestManifestShowRejects(t *testing.T) {
	dir := t.TempDir()
	body, err := manifest.EncodeRelease(testRelease())
	if err != nil {
		t.Fatal(err)
	}
	d := putDoc(t, dir, body)
	notDoc := putDoc(t, dir, []byte(`{"schema":"training.shard.release.v1","shards":[]}`))
	dupKey := putDoc(t, dir, bytes.Replace(body, []byte(`"benchmarkFence":3908,`), []byte(`"benchmarkFence":3908,"benchmarkFence":1,`), 1))
	parquet := putDoc(t, dir, []byte("PAR1\x00\x01\x02PAR1"))

	cases := []struct {
		name string
		args []string
		want errcode.Code
		exit int
	}{
		{"absent digest", []string{"--store", dir, manifest.Sum([]byte("nothing")).String()}, errcode.NotFound, errcode.ExitError},
		{"bad digest argument", []string{"--store", dir, "sha256:ABC"}, errcode.Usage, errcode.ExitUsage},
		{"no argument", []string{"--store", dir}, errcode.Usage, errcode.ExitUsage},
		{"no store", []string{"--store", "", d.String()}, errcode.Usage, errcode.ExitUsage},
		{"invalid document", []string{"--store", dir, notDoc.String()}, errcode.BadDocument, errcode.ExitInvalid},
		{"duplicate key", []string{"--store", dir, dupKey.String()}, errcode.BadDocument, errcode.ExitInvalid},
		{"not JSON", []string{"--store", dir, parquet.String()}, errcode.BadDocument, errcode.ExitInvalid},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, _, err := cliRun(t, append([]string{"manifest", "show"}, c.args...)...)
			if errcode.Of(err) != c.want || exitStatus(err) != c.exit {
				t.Fatalf("code %s exit %d (%v), want %s / %d", errcode.Of(err), exitStatus(err), err, c.want, c.exit)
			}
			if len(out) != 0 {
				t.Fatalf("wrote %d bytes to stdout on failure", len(out))
			}
		})
	}
}

// TestManifestShowCorrupt flips one byte of the stored file behind the
// store's back: the command must refuse to print it.
func TestManifestShowCorrupt(t *testing.T) {
	dir := t.TempDir()
	body, err := manifest.EncodeRelease(testRelease())
	if err != nil {
		t.Fatal(err)
	}
	d := putDoc(t, dir, body)
	var files []string
	filepath.WalkDir(dir, func(p string, e os.DirEntry, err error) error {
		if err == nil && !e.IsDir() {
			if b, _ := os.ReadFile(p); bytes.Equal(b, body) {
				files = append(files, p)
			}
		}
		return nil
	})
	if len(files) != 1 {
		t.Fatalf("found %d files holding the document in the file store", len(files))
	}
	corrupt := slices.Clone(body)
	corrupt[len(corrupt)/2] ^= 0x01
	os.Chmod(files[0], 0o644)
	if err := os.WriteFile(files[0], corrupt, 0o644); err != nil {
		t.Fatal(err)
	}
	out, _, err := cliRun(t, "manifest", "show", "--store", dir, d.String())
	if errcode.Of(err) != errcode.DigestMismatch || exitStatus(err) != errcode.ExitInvalid {
		t.Fatalf("corrupt blob: code %s exit %d (%v), want DIGEST_MISMATCH / 1", errcode.Of(err), exitStatus(err), err)
	}
	if len(out) != 0 {
		t.Fatal("printed bytes of a corrupt blob")
	}
}

func TestManifestShowTooLarge(t *testing.T) {
	dir := t.TempDir()
	big := bytes.Repeat([]byte(" "), manifest.MaxDocumentSize+1)
	d := putDoc(t, dir, big)
	out, _, err := cliRun(t, "manifest", "show", "--store", dir, d.String())
	if errcode.Of(err) != errcode.DocumentTooLarge || len(out) != 0 {
		t.Fatalf("oversized blob: code %s (%v), %d bytes out", errcode.Of(err), err, len(out))
	}
}

func TestManifestCheck(t *testing.T) {
	body, err := manifest.EncodeRelease(testRelease())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	good := filepath.Join(dir, "release.json")
	os.WriteFile(good, body, 0o644)
	out, _, err := cliRun(t, "manifest", "check", good)
	if want := manifest.ReleaseSchema + " " + manifest.Sum(body).String() + "\n"; err != nil || string(out) != want {
		t.Fatalf("check: %q, %v; want %q", out, err, want)
	}
	manifestFlags.pretty = false
	out, _, err = runInProcess(t, bytes.NewReader(body), "manifest", "check", "-")
	if err != nil || !strings.HasSuffix(string(out), manifest.Sum(body).String()+"\n") {
		t.Fatalf("check -: %q, %v", out, err)
	}
	for name, c := range map[string]struct {
		body []byte
		want errcode.Code
	}{
		"totals":      {bytes.Replace(body, []byte(`"records":20`), []byte(`"records":21`), 1), errcode.TotalsMismatch},
		"unknown key": {bytes.Replace(body, []byte(`{"schema"`), []byte(`{"x":1,"schema"`), 1), errcode.BadDocument},
		"too large":   {bytes.Repeat([]byte(" "), manifest.MaxDocumentSize+1), errcode.DocumentTooLarge},
	} {
		p := filepath.Join(dir, name)
		os.WriteFile(p, c.body, 0o644)
		out, _, err := cliRun(t, "manifest", "check", p)
		if errcode.Of(err) != c.want || exitStatus(err) != errcode.ExitInvalid || len(out) != 0 {
			t.Errorf("%s: code %s exit %d (%v), %d bytes out; want %s / 1", name, errcode.Of(err), exitStatus(err), err, len(out), c.want)
		}
	}
	if _, _, err := cliRun(t, "manifest", "check", filepath.Join(dir, "absent")); errcode.Of(err) != errcode.Usage || exitStatus(err) != errcode.ExitUsage {
		t.Errorf("absent file: %v", err)
	}
}

func TestManifestPut(t *testing.T) {
	dir, store := t.TempDir(), t.TempDir()
	// Hand-written, with whitespace: stored and hashed exactly as given.
	doc := []byte("{\"schema\": \"training.tombstones.v1\",\n \"entries\": [{\"seq\": 1, \"sampleId\": \"doc-7\"}]}\n")
	file := filepath.Join(dir, "tombstones.json")
	os.WriteFile(file, doc, 0o644)
	want := manifest.TombstonesSchema + " " + manifest.Sum(doc).String() + " v1\n"
	for range 2 { // the second put finds the same bytes and stores nothing
		out, _, err := cliRun(t, "manifest", "put", "--store", store, file)
		if err != nil || string(out) != want {
			t.Fatalf("put: %q, %v; want %q", out, err, want)
		}
	}
	out, _, err := cliRun(t, "manifest", "show", "--store", store, manifest.Sum(doc).String())
	if err != nil || !bytes.Equal(out, doc) {
		t.Fatalf("show after put: %q, %v", out, err)
	}
	bad := filepath.Join(dir, "bad.json")
	os.WriteFile(bad, []byte(`{"schema":"training.tombstones.v1","entries":[{"seq":2,"sampleId":"a"},{"seq":2,"sampleId":"b"}]}`), 0o644)
	if _, _, err := cliRun(t, "manifest", "put", "--store", store, bad); errcode.Of(err) != errcode.BadDocument {
		t.Fatalf("put of an invalid log: %v", err)
	}
	s, err := objstore.Open(t.Context(), store)
	if err != nil {
		t.Fatal(err)
	}
	page, err := s.List(t.Context(), "blobs/", "", 0)
	if err != nil || len(page.Objects) != 1 {
		t.Fatalf("store holds %d blobs (%v), want only the valid log", len(page.Objects), err)
	}
}

func TestCodes(t *testing.T) {
	out, _, err := cliRun(t, "codes")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(lines) != len(errcode.All())+1 || !strings.HasPrefix(lines[0], "CODE") {
		t.Fatalf("%d lines for %d codes:\n%s", len(lines), len(errcode.All()), out)
	}
	var codes []string
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		c := errcode.Code(f[0])
		if !errcode.Known(c) || f[1] != fmt.Sprint(c.Exit()) || !strings.HasSuffix(l, c.Meaning()) {
			t.Errorf("line %q does not match the catalogue", l)
		}
		codes = append(codes, f[0])
	}
	if !slices.IsSorted(codes) {
		t.Error("codes are not sorted")
	}
	if _, _, err := cliRun(t, "codes", "extra"); errcode.Of(err) != errcode.Usage {
		t.Errorf("codes with an argument: %v", err)
	}
}
