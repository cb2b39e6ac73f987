package stage

import (
	"bytes"
	"context"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/shardproof/shardproof/coordinator"
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/objstore/file"
)

// rowsSource stages rows held in memory, without the checks of the
// source files Stage reads: a writer other than Stage.
type rowsSource []Row

func (s rowsSource) Len() int { return len(s) }

func (s rowsSource) keys(_ context.Context, add func(id string) error) error {
	for i := range s {
		if err := add(s[i].SampleID); err != nil {
			return err
		}
	}
	return nil
}

func (s rowsSource) Build(_ int, idx []int, b *array.RecordBuilder) error {
	for _, g := range idx {
		appendRow(b, &s[g])
	}
	return nil
}

// What docs/FORMATS.md says verify guarantees of the utf8 columns outside
// the tuple: lang and text are hashed as the bytes stored, and a release
// whose writer put bytes there that are not UTF-8 (stage refuses them)
// verifies when its digests and its snapshot agree, those bytes intact.
// verify checks UTF-8 only in sampleId, sourceId and split.
func TestVerifyHashesNonUTF8LangAndTextAsBytes(t *testing.T) {
	ctx := context.Background()
	s, err := file.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rows := rowsSource{
		{SampleID: "a", SourceID: "web", SourceVersion: 1, Split: "train", Lang: "en", Text: "plain", Tokens: 1},
		{SampleID: "b", SourceID: "web", SourceVersion: 1, Split: "train", Lang: "e\xff", Text: "cut \xe2\x82", Tokens: 2},
		{SampleID: "c", SourceID: "web", SourceVersion: 1, Split: "val", Lang: "de", Text: "\xed\xa0\x80 surrogate", Tokens: 3},
		{SampleID: "d", SourceID: "web", SourceVersion: 1, Split: "val", Lang: "fr", Text: "ok", Tokens: 4},
	}
	res, err := run(ctx, s, DefaultSchema(), rows, 1, t.TempDir(), Options{Shards: 2})
	if err != nil {
		t.Fatal(err)
	}
	out, err := coordinator.Verify(ctx, s, coordinator.Options{PlanOptions: coordinator.PlanOptions{Root: res.Root, Tool: "test"}})
	if err != nil {
		t.Fatalf("verify: %v", err)
	}
	if r := out.Report; r.Verdict != manifest.Verified || r.Counts.DecodeErrors != 0 || r.Counts.ShardsVerified != 2 {
		t.Fatalf("verdict %s, %d decode errors, %d shards verified (failures %+v); want VERIFIED, 0, 2", r.Verdict, r.Counts.DecodeErrors, r.Counts.ShardsVerified, r.Failures)
	}
	want := map[string]Row{}
	for _, r := range rows {
		want[r.SampleID] = r
	}
	for _, d := range res.Release.Shards {
		data, err := ReadFile(ctx, s, d)
		if err != nil {
			t.Fatal(err)
		}
		rec, err := DecodeParquet(ctx, data)
		if err != nil {
			t.Fatal(err)
		}
		got, err := RowsOf(rec)
		rec.Release()
		if err != nil {
			t.Fatal(err)
		}
		for _, g := range got {
			if w := want[g.SampleID]; !bytes.Equal([]byte(g.Lang), []byte(w.Lang)) || !bytes.Equal([]byte(g.Text), []byte(w.Text)) {
				t.Errorf("%s: lang %q text %q stored, want %q %q", g.SampleID, g.Lang, g.Text, w.Lang, w.Text)
			}
		}
	}
}
