package canon

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"flag"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/tuplehash"
)

var update = flag.Bool("update", false, "rewrite testdata/vectors.json (never for published vectors)")

// vectorSchema exercises every type, a nullable column and the content column.
func vectorSchema() *manifest.RecordSchema {
	return &manifest.RecordSchema{
		Schema: manifest.RecordSchemaSchema,
		Fields: []manifest.Field{
			{Name: "sample_id", Type: TypeUTF8},
			{Name: "source_id", Type: TypeUTF8},
			{Name: "source_version", Type: TypeInt64},
			{Name: "split", Type: TypeUTF8},
			{Name: "text", Type: TypeUTF8},
			{Name: "blob", Type: TypeBinary, Nullable: true},
			{Name: "quality", Type: TypeFloat64, Nullable: true},
			{Name: "shard_hint", Type: TypeInt32, Nullable: true},
			{Name: "dedup", Type: TypeBool, Nullable: true},
			{Name: "tokens", Type: TypeInt64},
		},
		Content: "text",
		Tokens:  "tokens",
		Tuple:   manifest.TupleMap{SampleID: "sample_id", SourceID: "source_id", SourceVersion: "source_version", Split: "split"},
	}
}

type vrow struct {
	id, src string
	ver     int64
	split   string
	text    string
	blob    []byte // nil = null
	quality *float64
	hint    *int32
	dedup   *bool
	tokens  int64
}

func vectorRows() []vrow {
	f := func(v float64) *float64 { return &v }
	i := func(v int32) *int32 { return &v }
	b := func(v bool) *bool { return &v }
	return []vrow{
		{"s-000", "web", 3, "train", "The quick brown fox.", []byte{0, 1, 2}, f(0.5), i(-7), b(true), 5},
		{"s-001", "books", 1, "val", "", nil, nil, nil, nil, 0},
		{"s-ü", "code", -1, "test", "naïve — ünïcode", []byte{}, f(math.Copysign(0, -1)), i(math.MaxInt32), b(false), math.MaxInt64},
	}
}

func buildBatch(t testing.TB, s *manifest.RecordSchema, rows []vrow) arrow.RecordBatch {
	as, err := ArrowSchema(s)
	if err != nil {
		t.Fatal(err)
	}
	bld := array.NewRecordBuilder(memory.DefaultAllocator, as)
	defer bld.Release()
	for _, r := range rows {
		bld.Field(0).(*array.StringBuilder).Append(r.id)
		bld.Field(1).(*array.StringBuilder).Append(r.src)
		bld.Field(2).(*array.Int64Builder).Append(r.ver)
		bld.Field(3).(*array.StringBuilder).Append(r.split)
		bld.Field(4).(*array.StringBuilder).Append(r.text)
		if r.blob == nil {
			bld.Field(5).AppendNull()
		} else {
			bld.Field(5).(*array.BinaryBuilder).Append(r.blob)
		}
		if r.quality == nil {
			bld.Field(6).AppendNull()
		} else {
			bld.Field(6).(*array.Float64Builder).Append(*r.quality)
		}
		if r.hint == nil {
			bld.Field(7).AppendNull()
		} else {
			bld.Field(7).(*array.Int32Builder).Append(*r.hint)
		}
		if r.dedup == nil {
			bld.Field(8).AppendNull()
		} else {
			bld.Field(8).(*array.BooleanBuilder).Append(*r.dedup)
		}
		bld.Field(9).(*array.Int64Builder).Append(r.tokens)
	}
	return bld.NewRecordBatch()
}

// refEncode is a second encoder written from the contract text alone.
func refEncode(r vrow) []byte {
	var b bytes.Buffer
	str := func(tag byte, s []byte) {
		b.WriteByte(tag)
		b.WriteByte(1)
		binary.Write(&b, binary.BigEndian, uint32(len(s)))
		b.Write(s)
	}
	null := func(tag byte) { b.WriteByte(tag); b.WriteByte(0) }
	i64 := func(v int64) { b.WriteByte(3); b.WriteByte(1); binary.Write(&b, binary.BigEndian, v) }
	str(1, []byte(r.id))
	str(1, []byte(r.src))
	i64(r.ver)
	str(1, []byte(r.split))
	cd := sha256.Sum256([]byte(r.text))
	b.WriteByte(1)
	b.WriteByte(1)
	b.Write(cd[:])
	if r.blob == nil {
		null(2)
	} else {
		str(2, r.blob)
	}
	if r.quality == nil {
		null(5)
	} else {
		b.WriteByte(5)
		b.WriteByte(1)
		binary.Write(&b, binary.BigEndian, math.Float64bits(*r.quality))
	}
	if r.hint == nil {
		null(4)
	} else {
		b.WriteByte(4)
		b.WriteByte(1)
		binary.Write(&b, binary.BigEndian, *r.hint)
	}
	if r.dedup == nil {
		null(6)
	} else {
		b.WriteByte(6)
		b.WriteByte(1)
		if *r.dedup {
			b.WriteByte(1)
		} else {
			b.WriteByte(0)
		}
	}
	i64(r.tokens)
	return b.Bytes()
}

type vectors struct {
	SchemaJSON   string   `json:"schemaJson"`
	SchemaDigest string   `json:"schemaDigest"`
	Records      []string `json:"recordsHex"`
	Contents     []string `json:"contentDigests"`
	Logical      string   `json:"logicalDigest"`
	LogicalBytes int64    `json:"logicalBytes"`
}

func TestGoldenVectors(t *testing.T) {
	s := vectorSchema()
	if err := Check(s); err != nil {
		t.Fatal(err)
	}
	sj, err := manifest.Encode(s)
	if err != nil {
		t.Fatal(err)
	}
	sd, err := SchemaDigest(s)
	if err != nil {
		t.Fatal(err)
	}
	rows := vectorRows()
	rec := buildBatch(t, s, rows)
	defer rec.Release()
	enc, err := NewEncoder(s)
	if err != nil {
		t.Fatal(err)
	}
	if err := enc.Bind(rec); err != nil {
		t.Fatal(err)
	}
	got := vectors{SchemaJSON: string(sj), SchemaDigest: sd.String()}
	lh := NewLogicalHasher(sd)
	ref := sha256.New()
	ref.Write([]byte("sp.logical.v1\x00"))
	ref.Write(sd[:])
	for i, r := range rows {
		row := enc.Encode(i)
		want := refEncode(r)
		if !bytes.Equal(row.Record, want) {
			t.Fatalf("row %d:\n got %x\nwant %x", i, row.Record, want)
		}
		if row.Content != sha256.Sum256([]byte(r.text)) {
			t.Fatalf("row %d: content digest differs", i)
		}
		lh.Add(row.Record)
		binary.Write(ref, binary.BigEndian, uint32(len(want)))
		ref.Write(want)
		got.Records = append(got.Records, hex.EncodeToString(row.Record))
		got.Contents = append(got.Contents, hex.EncodeToString(row.Content[:]))
		got.LogicalBytes += row.LogicalBytes
	}
	if l := lh.Sum(); !bytes.Equal(l[:], ref.Sum(nil)) {
		t.Fatalf("logical digest %s differs from reference %x", l, ref.Sum(nil))
	}
	got.Logical = lh.Sum().String()
	// logicalBytes by hand: row0 5+3+8+5+20+3+8+4+1+8, row1 5+5+8+3+0+8, row2 4+4+8+4+len(text)+0+8+4+1+8.
	wantLB := int64(65 + 29 + 41 + len("naïve — ünïcode"))
	if got.LogicalBytes != wantLB {
		t.Fatalf("logicalBytes %d, want %d", got.LogicalBytes, wantLB)
	}

	path := filepath.Join("testdata", "vectors.json")
	if *update {
		b, _ := json.MarshalIndent(got, "", "  ")
		if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var want vectors
	if err := json.Unmarshal(b, &want); err != nil {
		t.Fatal(err)
	}
	gb, _ := json.Marshal(got)
	wb, _ := json.Marshal(want)
	if !bytes.Equal(gb, wb) {
		t.Fatalf("golden vectors changed:\n got %s\nwant %s", gb, wb)
	}
}

func TestEncodeDoesNotAllocate(t *testing.T) {
	s := vectorSchema()
	rec := buildBatch(t, s, vectorRows())
	defer rec.Release()
	enc, _ := NewEncoder(s)
	if err := enc.Bind(rec); err != nil {
		t.Fatal(err)
	}
	enc.Encode(0)
	if n := testing.AllocsPerRun(100, func() { enc.Encode(2); enc.Encode(0) }); n != 0 {
		t.Fatalf("Encode allocates %.1f times per call", n)
	}
}

func TestBindRejectsWrongTypes(t *testing.T) {
	s := vectorSchema()
	rec := buildBatch(t, s, vectorRows())
	defer rec.Release()
	other := vectorSchema()
	other.Fields[2].Type = TypeInt32
	enc, _ := NewEncoder(other)
	if err := enc.Bind(rec); err == nil {
		t.Fatal("Bind accepted an int64 column for an int32 field")
	}
}

func TestFromArrowRoundTrip(t *testing.T) {
	s := vectorSchema()
	as, _ := ArrowSchema(s)
	want, _ := SchemaDigest(s)
	got, _ := SchemaDigest(FromArrow(as, s))
	if got != want {
		t.Fatalf("FromArrow(ArrowSchema(s)) digest %s, want %s", got, want)
	}
	// Dropping a column or changing a type changes the digest.
	changed := arrow.NewSchema(append(as.Fields()[:9:9], arrow.Field{Name: "tokens", Type: arrow.PrimitiveTypes.Int32}), nil)
	d2, _ := SchemaDigest(FromArrow(changed, s))
	if d2 == want {
		t.Fatal("a changed column type kept the schema digest")
	}
	if m := MissingColumns(s, arrow.NewSchema(as.Fields()[1:], nil)); len(m) != 1 || m[0] != "sample_id" {
		t.Fatalf("MissingColumns = %v", m)
	}
}

func TestCheck(t *testing.T) {
	if err := Check(SnapshotMemberSchema()); err != nil {
		t.Fatalf("member schema: %v", err)
	}
	bad := vectorSchema()
	bad.Fields[4].Nullable = true
	if err := Check(bad); err == nil {
		t.Fatal("nullable content column accepted")
	}
	bad = vectorSchema()
	bad.Tuple.SourceVersion = "split"
	if err := Check(bad); err == nil {
		t.Fatal("utf8 sourceVersion column accepted")
	}
	bad = vectorSchema()
	bad.Fields[1].Type = "utf16"
	if err := Check(bad); err == nil {
		t.Fatal("unknown type accepted")
	}
}

func TestSchemaDigestMatchesManifest(t *testing.T) {
	for _, s := range []*manifest.RecordSchema{vectorSchema(), SnapshotMemberSchema()} {
		want, err := s.Digest()
		if err != nil {
			t.Fatal(err)
		}
		got, err := SchemaDigest(s)
		if err != nil || got != want {
			t.Fatalf("SchemaDigest = %s, %v; manifest Digest = %s", got, err, want)
		}
	}
}

// TestLogicalHasherStream: the digest is sha256 of the prefix, the schema
// digest and every record with its u32be length, whatever the records'
// sizes: small ones gathered in the hasher's buffer, ones larger than the
// buffer written through, and runs that straddle a flush.
func TestLogicalHasherStream(t *testing.T) {
	schema := manifest.Digest(sha256.Sum256([]byte("schema")))
	want := sha256.New()
	want.Write([]byte(logicalPrefix))
	want.Write(schema[:])
	l := NewLogicalHasher(schema)
	for i, n := range []int{0, 1, 100, logicalBuf - 4, 3, logicalBuf, 2 * logicalBuf, 7, logicalBuf - 100, 200, 130} {
		rec := bytes.Repeat([]byte{byte(i)}, n)
		var hdr [4]byte
		binary.BigEndian.PutUint32(hdr[:], uint32(n))
		want.Write(hdr[:])
		want.Write(rec)
		l.Add(rec)
		if i == 4 { // a Sum mid-stream changes nothing after it
			l.Sum()
		}
	}
	if got := l.Sum(); [32]byte(got) != [32]byte(want.Sum(nil)) {
		t.Fatalf("logical digest %x, want %x", got, want.Sum(nil))
	}
}

// A negative token count, or counts whose sum overflows, is a decode
// error, not a meaningless total (a damaged uncompressed shard summed to
// -1945555039023940205).
func TestShardTokensNeverNegativeOrOverflowing(t *testing.T) {
	s := vectorSchema()
	sd, err := SchemaDigest(s)
	if err != nil {
		t.Fatal(err)
	}
	rows := vectorRows()
	for _, c := range []struct {
		name   string
		tokens []int64
		want   int64 // -1: DECODE_ERROR
	}{
		{"counts", []int64{5, 0, 7}, 12},
		{"negative", []int64{5, -1, 7}, -1},
		{"overflow", []int64{5, 0, math.MaxInt64}, -1},
	} {
		for i := range rows {
			rows[i].tokens = c.tokens[i]
		}
		h, err := NewShardHasher(s, sd, sd)
		if err != nil {
			t.Fatal(err)
		}
		rec := buildBatch(t, s, rows)
		err = h.AddBatch(rec, func(*tuplehash.Tuple, [32]byte) error { return nil })
		rec.Release()
		h.Release()
		switch {
		case c.want < 0 && errcode.Of(err) != errcode.DecodeError:
			t.Errorf("%s: %v, want DECODE_ERROR", c.name, err)
		case c.want >= 0 && (err != nil || h.Tokens != c.want):
			t.Errorf("%s: tokens %d (%v), want %d", c.name, h.Tokens, err, c.want)
		}
	}
}
