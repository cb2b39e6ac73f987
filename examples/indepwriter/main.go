// Command indepwriter writes a shardproof v1 release (record schema, Parquet
// shards, snapshot with member files and leaf index, bound root manifest)
// into a file store, from README.md, docs/FORMATS.md, docs/DEVIATIONS.md and
// DESIGN.md alone, without importing any shardproof package.
//
//	go run . -store /tmp/rel -records 3000 -shards 3 -members 4 [-fault missing|extra|duplicate|content|split|sourceversion]
//
// It prints the root digest (and the snapshot digest) on stdout.
package main

import (
	"bytes"
	"crypto/sha256"
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/parquet-go/parquet-go"
)

// ShardRow is one release record: the record schema's fields, in order.
type ShardRow struct {
	SampleID      string `parquet:"sample_id"`
	SourceID      string `parquet:"source_id"`
	SourceVersion int64  `parquet:"source_version"`
	Split         string `parquet:"split"`
	Lang          string `parquet:"lang"`
	Text          string `parquet:"text"`
	Tokens        int64  `parquet:"tokens"`

	nullLang, nullSampleID bool // only with -nullable
}

// MemberRow is a snapshot member file's row (FORMATS.md's fixed member schema).
type MemberRow struct {
	SampleID      string `parquet:"sample_id"`
	SourceID      string `parquet:"source_id"`
	SourceVersion int64  `parquet:"source_version"`
	Split         string `parquet:"split"`
	ContentDigest []byte `parquet:"content_digest"`
}

var recordSchema = RecordSchemaDoc{
	Schema: "training.record.schema.v1",
	Fields: []SchemaField{
		{"sample_id", "utf8", false},
		{"source_id", "utf8", false},
		{"source_version", "int64", false},
		{"split", "utf8", false},
		{"lang", "utf8", false},
		{"text", "utf8", false},
		{"tokens", "int64", false},
	},
	Content: "text",
	Tuple:   TupleColumns{"sample_id", "source_id", "source_version", "split"},
	Tokens:  "tokens",
}

const contentIdx = 5

// memberSchemaDigest: the record schema of FORMATS.md's fixed member schema,
// with "content": "" (no content column).
func memberSchemaDigest() Digest {
	doc := RecordSchemaDoc{
		Schema: "training.record.schema.v1",
		Fields: []SchemaField{
			{"sample_id", "utf8", false},
			{"source_id", "utf8", false},
			{"source_version", "int64", false},
			{"split", "utf8", false},
			{"content_digest", "binary", false},
		},
		Content: "",
		Tuple:   TupleColumns{"sample_id", "source_id", "source_version", "split"},
	}
	// sha256:36f2de01f0680daf4e3c409078e74c8ad57cde373ce6728a32c03f1e38c20ae7
	return sha256.Sum256(encodeDoc(doc))
}

func (r ShardRow) values() []Value {
	v := []Value{r.SampleID, r.SourceID, r.SourceVersion, r.Split, r.Lang, r.Text, r.Tokens}
	if r.nullLang {
		v[4] = nil
	}
	if r.nullSampleID {
		v[0] = nil
	}
	return v
}

func (r ShardRow) tuple(schema Digest) Tuple {
	return Tuple{r.SampleID, r.SourceID, r.SourceVersion, sha256.Sum256([]byte(r.Text)), r.Split, schema}
}

// ---- file store (FORMATS.md "Store layout") ----

type FileStore struct{ root string }

// Put stores body at key as version 1 (<root>/<key>/@<20-digit seq>),
// conditionally: an existing key with the same bytes is kept.
func (s FileStore) Put(key string, body []byte) (version string) {
	dir := filepath.Join(s.root, filepath.FromSlash(key))
	final := filepath.Join(dir, fmt.Sprintf("@%020d", 1))
	if old, err := os.ReadFile(final); err == nil {
		if !bytes.Equal(old, body) {
			log.Fatalf("%s exists with other bytes", key)
		}
		return "v1"
	}
	must(os.MkdirAll(dir, 0o755))
	tmpDir := filepath.Join(s.root, "@tmp")
	must(os.MkdirAll(tmpDir, 0o755))
	f, err := os.CreateTemp(tmpDir, "put-*")
	must(err)
	_, err = f.Write(body)
	must(err)
	must(f.Sync())
	must(f.Close())
	must(os.Link(f.Name(), final)) // conditional create
	must(os.Remove(f.Name()))
	return "v1"
}

func (s FileStore) PutBlob(body []byte) (Digest, string) {
	d := Digest(sha256.Sum256(body))
	return d, s.Put("blobs/sha256/"+d.Hex(), body)
}

func must(err error) {
	if err != nil {
		log.Fatal(err)
	}
}

func writeParquetOpts[T any](rows []T, opts ...parquet.WriterOption) []byte {
	var buf bytes.Buffer
	w := parquet.NewGenericWriter[T](&buf, opts...)
	if _, err := w.Write(rows); err != nil {
		log.Fatal(err)
	}
	must(w.Close())
	return buf.Bytes()
}

func writeParquet[T any](rows []T, kv map[string]string) []byte {
	var buf bytes.Buffer
	opts := []parquet.WriterOption{parquet.Compression(&parquet.Zstd)}
	for k, v := range kv {
		opts = append(opts, parquet.KeyValueMetadata(k, v))
	}
	w := parquet.NewGenericWriter[T](&buf, opts...)
	if _, err := w.Write(rows); err != nil {
		log.Fatal(err)
	}
	must(w.Close())
	return buf.Bytes()
}

func main() {
	storeDir := flag.String("store", "", "file store directory (created)")
	n := flag.Int("records", 3000, "records in the snapshot")
	nShards := flag.Int("shards", 3, "release shards")
	nMembers := flag.Int("members", 4, "snapshot member files")
	k := flag.Uint("k", 12, "memberPartition xxh64/k=<k>")
	fault := flag.String("fault", "none", "none|missing|extra|duplicate|content|split|sourceversion|sourceid")
	declare := flag.Bool("declare-buckets", true, "declare each member's bucket range")
	leafIndex := flag.Bool("leaf-index", true, "write index/snapshots/<hex>/leaves.v1")
	shardVariant := flag.String("shard-variant", "none", "Parquet variant of release shards: none|snappy|uncompressed|rowgroups|optional|nostring|reordered|extra|dict")
	memberVariant := flag.String("member-variant", "none", "Parquet variant of member files: none|fixed")
	tombWM := flag.Uint64("tombstone-watermark", 0, "release tombstoneWatermark (no tombstone log is written)")
	buildK := flag.Int("build-k", -1, "memberPartition k written in the release's build (default: -k)")
	shuffleMembers := flag.Bool("unsorted-members", false, "write member rows in reverse order")
	nullable := flag.Bool("nullable", false, "declare lang and tokens nullable (OPTIONAL columns)")
	nullLang := flag.Bool("null-lang", false, "with -nullable: every 7th record has a null lang")
	out := flag.String("out", "", "also write the documents to this local directory for `manifest check`")
	flag.Parse()
	if *storeDir == "" {
		log.Fatal("-store is required")
	}
	must(os.MkdirAll(*storeDir, 0o755))
	st := FileStore{*storeDir}
	partition := fmt.Sprintf("xxh64/k=%d", *k)
	buildPartition := partition
	if *buildK >= 0 {
		buildPartition = fmt.Sprintf("xxh64/k=%d", *buildK)
	}

	// 1. record schema document
	if *nullable {
		for i := range recordSchema.Fields {
			n := recordSchema.Fields[i].Name
			recordSchema.Fields[i].Nullable = n == "lang" || n == "tokens"
		}
		if *shardVariant == "none" {
			*shardVariant = "optional-some"
		}
	}
	schemaBytes := encodeDoc(recordSchema)
	schemaDigest, _ := st.PutBlob(schemaBytes)

	// 2. the dataset: what the snapshot says the release must hold
	splits := []string{"train", "train", "train", "validation", "test"}
	snap := make([]ShardRow, *n)
	for i := range snap {
		text := fmt.Sprintf("record %d: %s", i, strings.Repeat("lorem ipsum ", 1+i%17))
		snap[i] = ShardRow{
			SampleID:      fmt.Sprintf("doc-%07d", i),
			SourceID:      fmt.Sprintf("crawl/%d", i%5),
			SourceVersion: int64(1 + i%3),
			Split:         splits[i%len(splits)],
			Lang:          "en",
			Text:          text,
			Tokens:        int64(len(strings.Fields(text))),
		}
	}

	for i := range snap {
		snap[i].nullLang = *nullLang && i%7 == 0
	}
	// 3. the release: the same rows, then the fault asked for
	rel := append([]ShardRow(nil), snap...)
	switch *fault {
	case "none":
	case "missing":
		rel = append(rel[:10], rel[11:]...)
	case "extra":
		rel = append(rel, ShardRow{SampleID: "doc-extra-1", SourceID: "crawl/9", SourceVersion: 1, Split: "train", Lang: "en", Text: "not in the snapshot", Tokens: 4})
	case "duplicate":
		rel = append(rel, rel[20])
	case "content":
		rel[30].Text += " (substituted)"
	case "split":
		rel[40].Split = "test-leak"
	case "sourceversion":
		rel[50].SourceVersion += 100
	case "sourceid":
		rel[60].SourceID = "other/source"
	default:
		log.Fatalf("unknown fault %q", *fault)
	}

	// 4. snapshot member files: tuples sorted by (bucket, sampleId, tupleDigest),
	// member j holding buckets [j*2^k/m, (j+1)*2^k/m)
	type snapTuple struct {
		t Tuple
		d Digest
		b uint32
	}
	sts := make([]snapTuple, len(snap))
	snapTuples := make([]Tuple, len(snap))
	for i, r := range snap {
		t := r.tuple(schemaDigest)
		snapTuples[i] = t
		sts[i] = snapTuple{t, t.Digest(), Bucket(t.SampleID, *k)}
	}
	sort.Slice(sts, func(i, j int) bool {
		a, b := sts[i], sts[j]
		if a.b != b.b {
			return a.b < b.b
		}
		if a.t.SampleID != b.t.SampleID {
			return a.t.SampleID < b.t.SampleID
		}
		return bytes.Compare(a.d[:], b.d[:]) < 0
	})
	nb := 1 << *k
	var members []Descriptor
	var snapTotals Totals
	pos := 0
	for j := 0; j < *nMembers; j++ {
		lo, hi := j*nb / *nMembers, (j+1)*nb / *nMembers
		var rows []MemberRow
		var digests []Digest
		// a member file's logical digest is taken under the fixed member
		// record schema, not the snapshot's recordSchema
		lh := NewLogical(memberSchemaDigest())
		for pos < len(sts) && int(sts[pos].b) < hi {
			t := sts[pos].t
			cd := t.ContentDigest
			rows = append(rows, MemberRow{t.SampleID, t.SourceID, t.SourceVersion, t.Split, cd[:]})
			digests = append(digests, sts[pos].d)
			// the member record: the five member columns, content_digest an
			// ordinary binary field (tag 2, u32 length, 32 bytes)
			lh.Add(CanonicalRecord([]FieldType{Utf8, Utf8, Int64, Utf8, Binary},
				[]Value{t.SampleID, t.SourceID, t.SourceVersion, t.Split, cd[:]}, -1))
			pos++
		}
		if *shuffleMembers {
			for a, b := 0, len(rows)-1; a < b; a, b = a+1, b-1 {
				rows[a], rows[b] = rows[b], rows[a]
			}
			lh = NewLogical(memberSchemaDigest())
			for _, r := range rows {
				lh.Add(CanonicalRecord([]FieldType{Utf8, Utf8, Int64, Utf8, Binary},
					[]Value{r.SampleID, r.SourceID, r.SourceVersion, r.Split, r.ContentDigest}, -1))
			}
		}
		body := writeMember(*memberVariant, rows)
		d, ver := st.PutBlob(body)
		desc := Descriptor{
			ID:              fmt.Sprintf("member-%05d-of-%05d", j, *nMembers),
			MediaType:       "application/vnd.apache.parquet",
			Digest:          d.String(),
			Size:            int64(len(body)),
			ObjectVersion:   ver,
			LogicalDigest:   lh.Sum().String(),
			Records:         int64(len(rows)),
			Tokens:          0, // member files carry no tokens column
			MemberSetDigest: MemberSetDigest(digests).String(),
		}
		if *declare {
			desc.Buckets = &BucketRange{lo, hi}
		}
		members = append(members, desc)
		snapTotals.Shards++
		snapTotals.Records += int64(len(rows))
	}
	snapLeaves := Leaves(snapTuples, *k)
	snapRoot := MTH(snapLeaves)
	snapDoc := SnapshotDoc{
		Schema:          "training.dataset.snapshot.v1",
		RecordSchema:    schemaDigest.String(),
		MemberPartition: partition,
		Members:         members,
		Totals:          snapTotals,
		TupleRoot:       snapRoot.String(),
	}
	snapBytes := encodeDoc(snapDoc)
	snapDigest, _ := st.PutBlob(snapBytes)

	// 5. leaf index: "sp.leaves.v1\x00" ‖ root ‖ u8 k ‖ 2^k leaves
	if *leafIndex && *k <= 20 {
		var b bytes.Buffer
		b.WriteString("sp.leaves.v1\x00")
		b.Write(snapRoot[:])
		b.WriteByte(byte(*k))
		for _, l := range snapLeaves {
			b.Write(l[:])
		}
		st.Put("index/snapshots/"+snapDigest.Hex()+"/leaves.v1", b.Bytes())
	}

	// 6. release shards, in contiguous ranges of the release rows
	var shards []Descriptor
	var relTotals Totals
	var relTuples []Tuple
	types := make([]FieldType, len(recordSchema.Fields))
	for i, f := range recordSchema.Fields {
		types[i] = FieldType(f.Type)
	}
	for s := 0; s < *nShards; s++ {
		part := rel[s*len(rel) / *nShards : (s+1)*len(rel) / *nShards]
		lh := NewLogical(schemaDigest)
		var digests []Digest
		var tokens int64
		for _, r := range part {
			lh.Add(CanonicalRecord(types, r.values(), contentIdx))
			t := r.tuple(schemaDigest)
			relTuples = append(relTuples, t)
			digests = append(digests, t.Digest())
			tokens += r.Tokens
		}
		body := writeShard(*shardVariant, part)
		d, ver := st.PutBlob(body)
		shards = append(shards, Descriptor{
			ID:              fmt.Sprintf("shard-%05d-of-%05d", s, *nShards),
			MediaType:       "application/vnd.apache.parquet",
			Digest:          d.String(),
			Size:            int64(len(body)),
			ObjectVersion:   ver,
			LogicalDigest:   lh.Sum().String(),
			Records:         int64(len(part)),
			Tokens:          tokens,
			MemberSetDigest: MemberSetDigest(digests).String(),
		})
		relTotals.Shards++
		relTotals.Records += int64(len(part))
		relTotals.Tokens += tokens
	}

	// 7. the bound root manifest
	relRoot := MTH(Leaves(relTuples, *k))
	release := ReleaseDoc{
		Schema:             "training.shard.release.v1",
		DatasetSnapshot:    snapDigest.String(),
		TombstoneWatermark: *tombWM,
		BenchmarkFence:     0,
		RecordSchema:       schemaDigest.String(),
		Build: Build{
			Serializer:           "indepwriter",
			SerializerVersion:    "v0.1.0",
			SortSeed:             0,
			ShardingFunction:     "contiguous",
			Compression:          "zstd",
			CompressionLevel:     3,
			EncryptionKeyVersion: "none",
			EncryptionAadScheme:  "none",
			MemberPartition:      buildPartition,
		},
		Shards:                 shards,
		Totals:                 relTotals,
		OrderedMemberTupleRoot: BindRoot(relRoot, snapDigest, *tombWM, 0).String(),
	}
	relBytes := encodeDoc(release)
	rootDigest, _ := st.PutBlob(relBytes)

	if *out != "" {
		must(os.MkdirAll(*out, 0o755))
		must(os.WriteFile(filepath.Join(*out, "recordschema.json"), schemaBytes, 0o644))
		must(os.WriteFile(filepath.Join(*out, "snapshot.json"), snapBytes, 0o644))
		must(os.WriteFile(filepath.Join(*out, "release.json"), relBytes, 0o644))
	}
	fmt.Printf("root %s\nsnapshot %s\n", rootDigest, snapDigest)
}
