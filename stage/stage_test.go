package stage_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/objstore"
	"github.com/shardproof/shardproof/stage"
	"github.com/shardproof/shardproof/stage/stagetest"
	"github.com/shardproof/shardproof/tuplehash"
)

// countObjects lists every key in the store.
func countObjects(t *testing.T, s objstore.Store) int {
	t.Helper()
	n, after := 0, ""
	for {
		p, err := s.List(context.Background(), "", after, 0)
		if err != nil {
			t.Fatal(err)
		}
		n += len(p.Objects)
		if p.Next == "" {
			return n
		}
		after = p.Next
	}
}

func TestSynthDeterministicAndIdempotent(t *testing.T) {
	s := stagetest.Store(t)
	a := stagetest.Synth(t, s, 3000, 4, 7)
	// 4 shards + 4 member files + schema + snapshot + release.
	if a.Created != 11 {
		t.Fatalf("first run created %d objects, want 11", a.Created)
	}
	before := countObjects(t, s)
	b := stagetest.Synth(t, s, 3000, 4, 7)
	if b.Root != a.Root || b.Snapshot != a.Snapshot || b.RecordSchema != a.RecordSchema {
		t.Fatalf("second run: root %s snapshot %s, first %s %s", b.Root, b.Snapshot, a.Root, a.Snapshot)
	}
	if b.Created != 0 || countObjects(t, s) != before {
		t.Fatalf("second run created %d objects (store %d → %d)", b.Created, before, countObjects(t, s))
	}
	// A fresh store gets byte-identical objects, hence the same root.
	c := stagetest.Synth(t, stagetest.Store(t), 3000, 4, 7)
	if c.Root != a.Root {
		t.Fatalf("fresh store root %s, want %s", c.Root, a.Root)
	}
	// Another seed is another dataset.
	if d := stagetest.Synth(t, stagetest.Store(t), 3000, 4, 8); d.Root == a.Root || d.Snapshot == a.Snapshot {
		t.Fatal("seed 8 gave seed 7's digests")
	}
}

func TestSynthDescriptorsMatchStoredBytes(t *testing.T) {
	ctx := context.Background()
	s := stagetest.Store(t)
	res := stagetest.Synth(t, s, 4000, 5, 11)

	// The stored manifests decode strictly and are the ones returned.
	rb, _, err := objstore.ReadBlob(ctx, s, res.Root, manifest.MaxDocumentSize)
	if err != nil {
		t.Fatal(err)
	}
	rel, err := manifest.DecodeRelease(rb)
	if err != nil {
		t.Fatal(err)
	}
	sb, _, err := objstore.ReadBlob(ctx, s, res.Snapshot, manifest.MaxDocumentSize)
	if err != nil {
		t.Fatal(err)
	}
	snap, err := manifest.DecodeSnapshot(sb)
	if err != nil {
		t.Fatal(err)
	}
	schemaBytes, _, err := objstore.ReadBlob(ctx, s, rel.RecordSchema, manifest.MaxDocumentSize)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := manifest.DecodeRecordSchema(schemaBytes); err != nil {
		t.Fatal(err)
	}
	if rel.DatasetSnapshot != res.Snapshot || snap.RecordSchema != rel.RecordSchema || rel.Totals.Records != 4000 || snap.Totals.Records != 4000 {
		t.Fatalf("manifest links or totals wrong: %+v", rel.Totals)
	}
	b := rel.Build
	if b.Serializer != stage.Serializer || b.SortSeed != 11 || b.Compression != "zstd" || b.CompressionLevel != 3 ||
		b.EncryptionKeyVersion != "none" || b.MemberPartition != "xxh64/k=12" || b.ShardingFunction != stage.ShardingFunction {
		t.Fatalf("build fields: %+v", b)
	}

	// Every descriptor field is reproduced from the stored bytes.
	var text, stored, splits int64
	check := func(d manifest.Shard, schema *manifest.RecordSchema) {
		data := stagetest.ShardBytes(t, s, d) // verifies digest and size
		rec, err := stage.DecodeParquet(ctx, data)
		if err != nil {
			t.Fatal(err)
		}
		defer rec.Release()
		var outside int
		got, err := stage.Describe(rec, schema, rel.RecordSchema, func(tp *tuplehash.Tuple, _ [32]byte) error {
			if b := tuplehash.Bucket(tp.SampleID, tuplehash.DefaultK); d.Buckets != nil && (b < d.Buckets.Lo || b >= d.Buckets.Hi) {
				outside++
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if outside > 0 {
			t.Fatalf("%s: %d tuples outside the declared buckets %+v", d.ID, outside, *d.Buckets)
		}
		got.ID, got.Digest, got.Size, got.ObjectVersion, got.Buckets = d.ID, d.Digest, d.Size, d.ObjectVersion, d.Buckets
		if got != d {
			t.Fatalf("%s: recomputed %+v\ndescriptor %+v", d.ID, got, d)
		}
		stored += d.Size
	}
	for _, d := range rel.Shards {
		check(d, stage.DefaultSchema())
		for _, r := range stagetest.Rows(t, stagetest.ShardBytes(t, s, d)) {
			text += int64(len(r.Text))
			if r.Split == "train" {
				splits++
			}
		}
	}
	// Realistic text: mean ~1 KB, compresses 3-4x as training text does
	// (words alone gave 2.75x; see SynthVersion), ~90% train.
	if mean := text / 4000; mean < 700 || mean > 1400 {
		t.Errorf("mean text length %d bytes, want ~1 KB", mean)
	}
	if ratio := float64(text) / float64(stored); ratio < 3 || ratio > 4 {
		t.Errorf("text/stored ratio %.2f, want 3-4", ratio)
	}
	if splits < 3400 || splits > 3800 {
		t.Errorf("%d of 4000 train rows, want ~90%%", splits)
	}
	stored = 0
	next := uint32(0)
	for _, d := range snap.Members {
		if d.Tokens != 0 {
			t.Fatalf("member %s has tokens %d", d.ID, d.Tokens)
		}
		// Members declare contiguous ranges that tile the bucket space.
		if d.Buckets == nil || d.Buckets.Lo != next || d.Buckets.Hi <= d.Buckets.Lo {
			t.Fatalf("member %s declares buckets %v, want a range from %d", d.ID, d.Buckets, next)
		}
		next = d.Buckets.Hi
		check(d, memberSchema())
	}
	if next != 1<<tuplehash.DefaultK {
		t.Fatalf("member ranges end at %d, want %d", next, 1<<tuplehash.DefaultK)
	}

	// The tuple roots: the release's tuples are exactly the snapshot's.
	root, err := stage.ReleaseTupleRoot(ctx, s, rel, res.Schema)
	if err != nil {
		t.Fatal(err)
	}
	if root != snap.TupleRoot {
		t.Fatalf("release tuple root %s, snapshot %s", root, snap.TupleRoot)
	}
	if want := manifest.Digest(tuplehash.BindRoot(root, res.Snapshot, 0, 0)); rel.OrderedMemberTupleRoot != want {
		t.Fatalf("orderedMemberTupleRoot %s, want %s", rel.OrderedMemberTupleRoot, want)
	}
}

func TestShardingIsContiguousSortedRanges(t *testing.T) {
	s := stagetest.Store(t)
	res := stagetest.Synth(t, s, 1000, 3, 5)
	var prev string
	for i, d := range res.Release.Shards {
		rows := stagetest.ShardRows(t, s, res, i)
		if want := int64((i+1)*1000/3 - i*1000/3); d.Records != want || int64(len(rows)) != want {
			t.Fatalf("%s: %d records, want %d", d.ID, d.Records, want)
		}
		for _, r := range rows {
			k := sortKey(5, r.SampleID)
			if k < prev {
				t.Fatalf("%s: %s out of sort order", d.ID, r.SampleID)
			}
			prev = k
		}
	}
}

func writeSources(t *testing.T, dir string, rows []stage.Row, parts int) []string {
	var paths []string
	for p := range parts {
		path := filepath.Join(dir, "src-"+string(rune('a'+p))+".parquet")
		lo, hi := p*len(rows)/parts, (p+1)*len(rows)/parts
		if err := os.WriteFile(path, stagetest.Encode(t, rows[lo:hi], stage.ParquetOptions{Codec: "snappy"}), 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, path)
	}
	return paths
}

func TestStageFromFiles(t *testing.T) {
	ctx := context.Background()
	// Source rows: a synthetic release's rows, in shard order.
	syn := stagetest.Store(t)
	sres := stagetest.Synth(t, syn, 1500, 3, 3)
	var rows []stage.Row
	for i := range sres.Release.Shards {
		rows = append(rows, stagetest.ShardRows(t, syn, sres, i)...)
	}
	paths := writeSources(t, t.TempDir(), rows, 3)

	s := stagetest.Store(t)
	a, err := stage.Stage(ctx, s, stage.StageOptions{Inputs: paths, Shards: 3, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	// Same rows, same seed, same shard count: the synthetic release's root.
	if a.Root != sres.Root || a.Snapshot != sres.Snapshot {
		t.Fatalf("staged root %s, synth root %s", a.Root, sres.Root)
	}
	// Input order does not matter; a second run writes nothing.
	rev := []string{paths[2], paths[0], paths[1]}
	b, err := stage.Stage(ctx, s, stage.StageOptions{Inputs: rev, Shards: 3, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	if b.Root != a.Root || b.Created != 0 {
		t.Fatalf("restage: root %s created %d", b.Root, b.Created)
	}

	// Several spool passes (more shards than open spools) give the same
	// release as one pass, and the spool directory is removed.
	defer stage.SetMaxOpenSpools(2)()
	spoolDir := t.TempDir()
	c, err := stage.Stage(ctx, stagetest.Store(t), stage.StageOptions{Inputs: paths, Shards: 3, Seed: 3, TempDir: spoolDir})
	if err != nil {
		t.Fatal(err)
	}
	if c.Root != a.Root {
		t.Fatalf("two spool passes: root %s, want %s", c.Root, a.Root)
	}
	if left, _ := os.ReadDir(spoolDir); len(left) != 0 {
		t.Fatalf("spool files left behind: %v", left)
	}
}

func TestStageBadInputWritesNothing(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	good := writeSources(t, dir, []stage.Row{
		{SampleID: "a", SourceID: "web", SourceVersion: 1, Split: "train", Lang: "en", Text: "x", Tokens: 1},
		{SampleID: "b", SourceID: "web", SourceVersion: 1, Split: "train", Lang: "en", Text: "y", Tokens: 1},
	}, 1)[0]
	dup := filepath.Join(dir, "dup.parquet")
	if err := os.WriteFile(dup, stagetest.Encode(t, []stage.Row{{SampleID: "a", Split: "val"}}, stage.ParquetOptions{}), 0o644); err != nil {
		t.Fatal(err)
	}
	// A file with only some of the columns.
	partial := filepath.Join(dir, "partial.parquet")
	rec := stage.BuildRows([]stage.Row{{SampleID: "z", Text: "t"}})
	proj, err := rec.SetColumn(1, rec.Column(1)) // keep a valid batch to slice columns from
	if err != nil {
		t.Fatal(err)
	}
	defer proj.Release()
	rec.Release()
	onlyTwo := stagetest.EncodeRecord(t, projectColumns(t, proj, 0, 5), twoColumnSchema(), stage.ParquetOptions{})
	if err := os.WriteFile(partial, onlyTwo, 0o644); err != nil {
		t.Fatal(err)
	}
	longSplit := filepath.Join(dir, "longsplit.parquet")
	os.WriteFile(longSplit, stagetest.Encode(t, []stage.Row{{SampleID: "q", Split: strings.Repeat("s", 256)}}, stage.ParquetOptions{}), 0o644)
	negTokens := filepath.Join(dir, "negtokens.parquet")
	os.WriteFile(negTokens, stagetest.Encode(t, []stage.Row{{SampleID: "q", Split: "train", Tokens: -1}}, stage.ParquetOptions{}), 0o644)
	badUTF8 := filepath.Join(dir, "badutf8.parquet")
	os.WriteFile(badUTF8, stagetest.Encode(t, []stage.Row{{SampleID: "q\xff", Split: "train"}}, stage.ParquetOptions{}), 0o644)
	badSplit := filepath.Join(dir, "badsplit.parquet")
	os.WriteFile(badSplit, stagetest.Encode(t, []stage.Row{{SampleID: "q", Split: "train"}, {SampleID: "r", Split: "tr\xe2"}}, stage.ParquetOptions{}), 0o644)
	badSource := filepath.Join(dir, "badsource.parquet")
	os.WriteFile(badSource, stagetest.Encode(t, []stage.Row{{SampleID: "q", SourceID: "w\xffb", Split: "train"}}, stage.ParquetOptions{}), 0o644)
	// The bad byte in row 1: the error names the input's row.
	badLang := filepath.Join(dir, "badlang.parquet")
	os.WriteFile(badLang, stagetest.Encode(t, []stage.Row{{SampleID: "q", Split: "train", Lang: "en"}, {SampleID: "r", Split: "train", Lang: "e\xc3"}}, stage.ParquetOptions{}), 0o644)
	badText := filepath.Join(dir, "badtext.parquet")
	os.WriteFile(badText, stagetest.Encode(t, []stage.Row{{SampleID: "q", Split: "train", Text: "fine"}, {SampleID: "r", Split: "train", Text: "private words \xed\xa0\x80 (a UTF-16 surrogate)"}}, stage.ParquetOptions{}), 0o644)
	manyTokens := filepath.Join(dir, "manytokens.parquet")
	os.WriteFile(manyTokens, stagetest.Encode(t, []stage.Row{{SampleID: "q", Split: "train", Tokens: math.MaxInt64 - 1}}, stage.ParquetOptions{}), 0o644)
	// Two text columns (Parquet and Arrow allow it): which to stage is
	// the user's to say; stage took the first.
	twice := filepath.Join(dir, "twice.parquet")
	writeTwoTextColumns(t, twice)
	notParquet := filepath.Join(dir, "junk.parquet")
	os.WriteFile(notParquet, []byte("PAR1 this is not parquet PAR1"), 0o644)

	for _, c := range []struct {
		name   string
		o      stage.StageOptions
		code   errcode.Code
		detail string
	}{
		{"missing columns", stage.StageOptions{Inputs: []string{good, partial}, Shards: 1}, errcode.BadInput, "missing columns: source_id, source_version, split, lang, tokens"},
		{"column twice", stage.StageOptions{Inputs: []string{good, twice}, Shards: 1}, errcode.BadInput, "twice.parquet: columns named more than once: text"},
		{"zero shards", stage.StageOptions{Inputs: []string{good}, Shards: 0}, errcode.Usage, "--shards"},
		{"more shards than rows", stage.StageOptions{Inputs: []string{good}, Shards: 3}, errcode.BadInput, "3 shards for 2 rows"},
		{"no inputs", stage.StageOptions{Shards: 1}, errcode.Usage, "no input"},
		{"absent file", stage.StageOptions{Inputs: []string{filepath.Join(dir, "nope.parquet")}, Shards: 1}, errcode.BadInput, "nope.parquet"},
		{"not parquet", stage.StageOptions{Inputs: []string{notParquet}, Shards: 1}, errcode.BadInput, "junk.parquet"},
		{"duplicate sample", stage.StageOptions{Inputs: []string{good, dup}, Shards: 1}, errcode.BadInput, `sample_id "a" occurs more than once in the input (` + good + ` row 0 and ` + dup + ` row 0)`},
		{"split too long", stage.StageOptions{Inputs: []string{good, longSplit}, Shards: 1}, errcode.BadInput, "split longer than 255 bytes"},
		{"negative tokens", stage.StageOptions{Inputs: []string{good, negTokens}, Shards: 1}, errcode.BadInput, "negative tokens -1"},
		{"sampleId not UTF-8", stage.StageOptions{Inputs: []string{good, badUTF8}, Shards: 1}, errcode.BadInput, "badutf8.parquet: row 0: sample_id is not valid UTF-8"},
		{"split not UTF-8", stage.StageOptions{Inputs: []string{good, badSplit}, Shards: 1}, errcode.BadInput, "badsplit.parquet: row 1: split is not valid UTF-8"},
		// verify refuses such a shard (DECODE_ERROR).
		{"sourceId not UTF-8", stage.StageOptions{Inputs: []string{good, badSource}, Shards: 1}, errcode.BadInput, "badsource.parquet: row 0: source_id is not valid UTF-8"},
		// Parquet's STRING and Arrow's utf8 are UTF-8; verify hashes
		// lang and text as bytes and would not refuse them.
		{"lang not UTF-8", stage.StageOptions{Inputs: []string{good, badLang}, Shards: 1}, errcode.BadInput, "badlang.parquet: row 1: lang is not valid UTF-8"},
		{"text not UTF-8", stage.StageOptions{Inputs: []string{good, badText}, Shards: 1}, errcode.BadInput, "badtext.parquet: row 1: text is not valid UTF-8"},
		// A shard's total overflows, then (one row a shard) only the
		// release's: neither is found once shards are stored.
		{"tokens overflow a shard", stage.StageOptions{Inputs: []string{good, manyTokens}, Shards: 1}, errcode.BadInput, "manytokens.parquet: row 0: tokens 9223372036854775806 take the inputs' total past"},
		{"tokens overflow the totals", stage.StageOptions{Inputs: []string{good, manyTokens}, Shards: 3}, errcode.BadInput, "manytokens.parquet: row 0: tokens 9223372036854775806 take the inputs' total past"},
		{"bad codec", stage.StageOptions{Inputs: []string{good}, Shards: 1, Options: stage.Options{Parquet: stage.ParquetOptions{Codec: "lz77"}}}, errcode.Usage, "lz77"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := stagetest.Store(t)
			_, err := stage.Stage(ctx, s, c.o)
			if errcode.Of(err) != c.code || !strings.Contains(err.Error(), c.detail) {
				t.Fatalf("err = %v (code %s), want %s containing %q", err, errcode.Of(err), c.code, c.detail)
			}
			// Errors reach logs, which carry no sample text.
			if strings.Contains(err.Error(), "private words") {
				t.Fatalf("err = %v: it quotes the input's text", err)
			}
			if n := countObjects(t, s); n != 0 {
				t.Fatalf("bad input wrote %d objects", n)
			}
		})
	}
}

func TestSynthCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := stage.Synth(ctx, stagetest.Store(t), stage.SynthOptions{Samples: 100, Shards: 2, Seed: 1})
	if errcode.Of(err) != errcode.Canceled || !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want CANCELED", err)
	}
}

// Synth's member spill lives in TempDir only while it runs.
func TestSynthLeavesNoSpill(t *testing.T) {
	dir := t.TempDir()
	if _, err := stage.Synth(context.Background(), stagetest.Store(t), stage.SynthOptions{Samples: 500, Shards: 4, Seed: 2, TempDir: dir}); err != nil {
		t.Fatal(err)
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Fatalf("spill files left behind: %v", left)
	}
}

// The bytes staging writes are frozen per SerializerVersion: this root
// changes only if the Parquet bytes, a document's encoding, the sort,
// the sharding or the synthetic generator changes, and then
// SerializerVersion (or this constant and SynthVersion, for the
// generator) must change too.
func TestSynthGoldenRoot(t *testing.T) {
	res := stagetest.Synth(t, stagetest.Store(t), 500, 2, 1)
	if got := res.Root.String(); got != goldenSynthRoot {
		t.Fatalf("synth(500, 2, seed 1) root %s, frozen %s", got, goldenSynthRoot)
	}
}

// goldenSynthRoot is the root of synth(500 samples, 2 shards, seed 1).
const goldenSynthRoot = "sha256:2db49c3536205e4acd0d9c205a8b5bde2d8789b1f929d79865b68019aa898e6b"

// A shard is built as one Arrow record batch, whose string columns hold
// at most 2 GiB each (32-bit offsets, which wrap past it): stage refuses
// inputs that would put more in one shard before it stores anything, and
// synth refuses such a shard; more shards stage. The bound is lowered to
// 40 KiB here.
func TestShardColumnsBoundedBy32BitOffsets(t *testing.T) {
	ctx := context.Background()
	rows := make([]stage.Row, 100)
	for i := range rows {
		rows[i] = stage.Row{SampleID: fmt.Sprintf("row-%03d", i), SourceID: "web", Split: "train", Lang: "en", Text: strings.Repeat("t", 1<<10), Tokens: 1}
	}
	paths := writeSources(t, t.TempDir(), rows, 2)
	defer stage.SetMaxColumnBytes(40 << 10)()

	s := stagetest.Store(t)
	_, err := stage.Stage(ctx, s, stage.StageOptions{Inputs: paths, Shards: 2, Seed: 1})
	if errcode.Of(err) != errcode.BadInput || !strings.Contains(err.Error(), "its text values pass 40960 bytes") || !strings.Contains(err.Error(), "src-") {
		t.Fatalf("two shards of about 50 KiB of text: err = %v, want BAD_INPUT naming the input and the text column", err)
	}
	if n := countObjects(t, s); n != 0 {
		t.Fatalf("refused input stored %d objects", n)
	}
	if _, err := stage.Stage(ctx, s, stage.StageOptions{Inputs: paths, Shards: 4, Seed: 1}); err != nil {
		t.Fatalf("four shards of about 25 KiB: %v", err)
	}

	// synth's rows average about 1 KB of text.
	_, err = stage.Synth(ctx, stagetest.Store(t), stage.SynthOptions{Samples: 200, Shards: 2, Seed: 1})
	if errcode.Of(err) != errcode.BadInput || !strings.Contains(err.Error(), "its text values pass 40960 bytes") {
		t.Fatalf("synth, two shards of about 100 KB of text: err = %v, want BAD_INPUT naming the text column", err)
	}
}

// A snapshot member file is built as one Arrow record batch too, and its
// rows are a bucket range, not a shard: a member's sampleId, sourceId or
// split values may pass the bound while no shard's do. Here every row's
// sampleId falls in member 0's buckets, so member 0 holds all 100 KiB of
// them and each of the two shards about half; the bound is 80 KiB. Stage
// refuses it before storing anything, naming the input and the column,
// as for a shard; before, the member file was written with its offsets
// past the bound (past 2 GiB, wrapped).
func TestMemberColumnsBoundedBy32BitOffsets(t *testing.T) {
	ctx := context.Background()
	var rows []stage.Row
	for i := 0; len(rows) < 100; i++ {
		id := fmt.Sprintf("%s-%05d", strings.Repeat("m", 1<<10-6), i)
		if tuplehash.Bucket(id, tuplehash.DefaultK) >= 1<<(tuplehash.DefaultK-1) {
			continue
		}
		rows = append(rows, stage.Row{SampleID: id, SourceID: "web", Split: "train", Lang: "en", Text: "t", Tokens: 1})
	}
	paths := writeSources(t, t.TempDir(), rows, 2)
	defer stage.SetMaxColumnBytes(80 << 10)()

	s := stagetest.Store(t)
	_, err := stage.Stage(ctx, s, stage.StageOptions{Inputs: paths, Shards: 2, Seed: 1})
	if errcode.Of(err) != errcode.BadInput || !strings.Contains(err.Error(), "member 0 of 2") || !strings.Contains(err.Error(), "its sample_id values pass 81920 bytes") || !strings.Contains(err.Error(), "src-") {
		t.Fatalf("a member of 100 KiB of sampleIds, shards of about 50 KiB: err = %v, want BAD_INPUT naming the input, member 0 and sample_id", err)
	}
	if n := countObjects(t, s); n != 0 {
		t.Fatalf("refused input stored %d objects", n)
	}
	if _, err := stage.Stage(ctx, s, stage.StageOptions{Inputs: paths, Shards: 4, Seed: 1}); err != nil {
		t.Fatalf("four members, member 0 and 1 of about 50 KiB: %v", err)
	}
}

// writeTwoTextColumns writes a source file with every column and a
// second column named text.
func writeTwoTextColumns(t *testing.T, path string) {
	t.Helper()
	rec := stage.BuildRows([]stage.Row{{SampleID: "t", SourceID: "web", SourceVersion: 1, Split: "train", Lang: "en", Text: "first", Tokens: 1}})
	defer rec.Release()
	b := array.NewStringBuilder(memory.DefaultAllocator)
	defer b.Release()
	b.Append("second")
	other := b.NewArray()
	defer other.Release()
	fields := append(rec.Schema().Fields(), arrow.Field{Name: "text", Type: arrow.BinaryTypes.String})
	schema := arrow.NewSchema(fields, nil)
	both := array.NewRecordBatch(schema, append(rec.Columns(), other), 1)
	defer both.Release()
	writeParquet(t, path, both, nil, pqarrow.DefaultWriterProps())
}
