package manifest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/shardproof/shardproof/internal/errcode"
)

// TestFencePrefixGolden pins the prefix digests of the golden tombstone
// log and benchmark registry (testdata/fenceprefix.json, computed from the
// encoding FORMATS.md gives by a separate implementation): a writer in
// another language checks its encoding against them.
func TestFencePrefixGolden(t *testing.T) {
	b, err := os.ReadFile("testdata/fenceprefix.json")
	if err != nil {
		t.Fatal(err)
	}
	var vectors []struct {
		Log          string `json:"log"`
		Seq          uint64 `json:"seq"`
		PrefixDigest string `json:"prefixDigest"`
	}
	if err := json.Unmarshal(b, &vectors); err != nil {
		t.Fatal(err)
	}
	if len(vectors) != 10 {
		t.Fatalf("%d vectors, want 10", len(vectors))
	}
	schemas := map[string]string{"tombstones.json": TombstonesSchema, "benchmark.json": BenchmarkSchema}
	seen := map[string]bool{}
	for _, v := range vectors {
		doc, err := os.ReadFile(filepath.Join("testdata", v.Log))
		if err != nil {
			t.Fatal(err)
		}
		l, err := DecodeFenceLog(doc, schemas[v.Log])
		if err != nil {
			t.Fatal(err)
		}
		d, err := l.PrefixDigest(v.Seq)
		if err != nil {
			t.Fatalf("%s at %d: %v", v.Log, v.Seq, err)
		}
		if d.String() != v.PrefixDigest {
			t.Errorf("%s at %d: prefix digest %s, golden %s", v.Log, v.Seq, d, v.PrefixDigest)
		}
		if seen[d.String()] {
			t.Errorf("%s at %d: prefix digest %s repeats another vector's", v.Log, v.Seq, d)
		}
		seen[d.String()] = true
	}
}

// TestFencePrefixIsThePrefix: entries above n, and a log's later
// entries, leave the prefix digest at n as it was; changing, removing or
// adding an entry at or below n changes it.
func TestFencePrefixIsThePrefix(t *testing.T) {
	base := validFenceLog(TombstonesSchema)
	want, err := base.PrefixDigest(2)
	if err != nil {
		t.Fatal(err)
	}
	longer := validFenceLog(TombstonesSchema)
	longer.Entries = append(longer.Entries, FenceEntry{Seq: 11, SampleID: "later"})
	for name, l := range map[string]*FenceLog{
		"the same log":        validFenceLog(TombstonesSchema),
		"a later log":         longer,
		"entries above 2 cut": {Schema: TombstonesSchema, Entries: base.Entries[:2]},
	} {
		if d, err := l.PrefixDigest(2); err != nil || d != want {
			t.Errorf("%s: prefix digest at 2 is %s (%v), want %s", name, d, err, want)
		}
	}
	other := func(f func(*FenceLog)) *FenceLog {
		l := validFenceLog(TombstonesSchema)
		f(l)
		return l
	}
	for name, l := range map[string]*FenceLog{
		"another sampleId at 1": other(func(l *FenceLog) { l.Entries[0].SampleID = "syn5-2" }),
		"another digest at 2":   other(func(l *FenceLog) { l.Entries[1].ContentDigest = dg("x") }),
		"entry 1 moved to seq 0.5 (renumbered 1 → 2, 2 → 3)": other(func(l *FenceLog) {
			l.Entries = []FenceEntry{{Seq: 2, SampleID: "doc-1"}, {Seq: 3, ContentDigest: dg("eval item")}, {Seq: 10, SampleID: "ünïcode-é"}}
		}),
		"entry 1 dropped":      other(func(l *FenceLog) { l.Entries = l.Entries[1:] }),
		"the benchmark schema": other(func(l *FenceLog) { l.Schema = BenchmarkSchema }),
		"sampleId as a digest's bytes": other(func(l *FenceLog) {
			d := l.Entries[1].ContentDigest
			l.Entries[1] = FenceEntry{Seq: 2, SampleID: string(d[:])}
		}),
	} {
		if d, err := l.PrefixDigest(2); err != nil || d == want {
			t.Errorf("%s: prefix digest at 2 is %s (%v), want one other than %s", name, d, err, want)
		}
	}
}

// TestFencePrefixRefuses: a log with a seq twice (or out of order) is
// BAD_DOCUMENT, and one that does not reach n FENCE_BEHIND: neither has a
// prefix at n.
func TestFencePrefixRefuses(t *testing.T) {
	dup := &FenceLog{Schema: TombstonesSchema, Entries: []FenceEntry{{Seq: 7, SampleID: "syn5-1"}, {Seq: 7, SampleID: "syn5-2"}}}
	if _, err := dup.PrefixDigest(7); errcode.Of(err) != errcode.BadDocument {
		t.Errorf("seq 7 twice: %v, want BAD_DOCUMENT", err)
	}
	if _, err := validFenceLog(TombstonesSchema).PrefixDigest(11); errcode.Of(err) != errcode.FenceBehind {
		t.Errorf("a log reaching 10, at 11: %v, want FENCE_BEHIND", err)
	}
	empty := &FenceLog{Schema: BenchmarkSchema}
	if _, err := empty.PrefixDigest(0); err != nil {
		t.Errorf("an empty log at 0: %v", err)
	}
}
