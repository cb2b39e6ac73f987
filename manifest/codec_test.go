package manifest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/shardproof/shardproof/internal/errcode"
)

func TestRoundTripAndDeterminism(t *testing.T) {
	for _, c := range docCases() {
		t.Run(c.name, func(t *testing.T) {
			b := mustEncode(t, c.doc)
			for range 5 {
				if again := mustEncode(t, c.doc); !bytes.Equal(again, b) {
					t.Fatalf("Encode is not deterministic:\n%s\n%s", b, again)
				}
			}
			// By value and by pointer give the same bytes.
			if byValue := mustEncode(t, reflect.ValueOf(c.doc).Elem().Interface()); !bytes.Equal(byValue, b) {
				t.Fatalf("Encode by value differs from by pointer")
			}
			if bytes.HasSuffix(b, []byte("\n")) || bytes.Contains(b, []byte("\n")) {
				t.Fatalf("stored bytes contain a newline")
			}
			got, err := c.decode(b)
			if err != nil {
				t.Fatalf("decode of own encoding: %v", err)
			}
			if !reflect.DeepEqual(got, c.doc) {
				t.Fatalf("decode(encode(v)) != v:\n got %+v\nwant %+v", got, c.doc)
			}
			if re := mustEncode(t, got); !bytes.Equal(re, b) {
				t.Fatalf("encode(decode(b)) != b")
			}
			schema, anyDoc, err := DecodeAny(b)
			if err != nil {
				t.Fatalf("DecodeAny: %v", err)
			}
			if !reflect.DeepEqual(anyDoc, c.doc) || !strings.Contains(string(b), `"schema":"`+schema+`"`) {
				t.Fatalf("DecodeAny = %q %+v", schema, anyDoc)
			}
		})
	}
}

// TestEncodeMapOrder pins that map keys come out sorted whatever the
// insertion order, so two writers of one report produce one digest.
func TestEncodeMapOrder(t *testing.T) {
	r := validReport(true)
	r.Counts.TombstoneHits = 2
	r.Counts.ContentSubstitution = 2
	keys := []string{"TOMBSTONE_HIT", "CONTENT_SUBSTITUTION", "MISSING_MEMBER"}
	var first []byte
	for i := range 10 {
		r.Examples = map[string][]string{}
		for j := range keys {
			k := keys[(i+j)%len(keys)]
			r.Examples[k] = []string{"a", "b"}
		}
		b := mustEncode(t, r)
		if first == nil {
			first = b
		} else if !bytes.Equal(first, b) {
			t.Fatal("report bytes depend on map insertion order")
		}
	}
	i1 := bytes.Index(first, []byte("CONTENT_SUBSTITUTION"))
	i2 := bytes.Index(first, []byte("MISSING_MEMBER"))
	i3 := bytes.Index(first, []byte("TOMBSTONE_HIT"))
	if !(i1 < i2 && i2 < i3) {
		t.Fatalf("examples keys not sorted: %s", first)
	}
}

func TestEncodeRefusesInvalid(t *testing.T) {
	r := validRelease()
	r.Totals.Records++
	for name, enc := range map[string]func() ([]byte, error){
		"Encode(ptr)":   func() ([]byte, error) { return Encode(r) },
		"Encode(value)": func() ([]byte, error) { return Encode(*r) },
		"EncodeRelease": func() ([]byte, error) { return EncodeRelease(r) },
	} {
		b, err := enc()
		if b != nil || errcode.Of(err) != errcode.TotalsMismatch {
			t.Errorf("%s of an invalid release: %d bytes, err %v; want no bytes and TOTALS_MISMATCH", name, len(b), err)
		}
	}
	s := validSnapshot()
	s.Members = nil
	if _, err := EncodeSnapshot(s); errcode.Of(err) != errcode.BadDocument {
		t.Errorf("EncodeSnapshot with no members: %v", err)
	}
	l := validFenceLog(TombstonesSchema)
	l.Entries[1].Seq = 1
	if _, err := EncodeFenceLog(l); errcode.Of(err) != errcode.BadDocument {
		t.Errorf("EncodeFenceLog with a repeated seq: %v", err)
	}
	rs := validRecordSchema()
	rs.Content = "nope"
	if _, err := EncodeRecordSchema(rs); errcode.Of(err) != errcode.BadDocument {
		t.Errorf("EncodeRecordSchema with a missing content column: %v", err)
	}
	rep := validReport(false)
	rep.Verdict = Invalid
	if _, err := EncodeReport(rep); errcode.Of(err) != errcode.BadDocument {
		t.Errorf("EncodeReport INVALID with zero failures: %v", err)
	}
}

func TestRecordSchemaDigest(t *testing.T) {
	s := validRecordSchema()
	d, err := s.Digest()
	if err != nil {
		t.Fatal(err)
	}
	if d != Sum(mustEncode(t, s)) {
		t.Fatal("Digest is not sha256 of the canonical encoding")
	}
	back, err := DecodeRecordSchema(mustEncode(t, s))
	if err != nil {
		t.Fatal(err)
	}
	if d2, _ := back.Digest(); d2 != d {
		t.Fatal("digest changed across a round trip")
	}
	// The same schema in other bytes is refused: it would be named by a
	// digest that is not sha256 of its canonical JSON.
	canonical := mustEncode(t, s)
	var indented bytes.Buffer
	if err := json.Indent(&indented, canonical, "", " "); err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{
		"trailing newline": append(slices.Clone(canonical), '\n'),
		"indented":         indented.Bytes(),
	} {
		if _, err := DecodeRecordSchema(b); errcode.Of(err) != errcode.BadDocument || !strings.Contains(err.Error(), d.String()) {
			t.Errorf("%s: %v, want BAD_DOCUMENT naming the canonical digest %s", name, err, d)
		}
	}
	s.Fields[4].Nullable = false
	s.Fields[5].Nullable = false
	if d3, _ := s.Digest(); d3 == d {
		t.Fatal("digest ignores nullability")
	}
	s.Fields[0], s.Fields[1] = s.Fields[1], s.Fields[0]
	if d4, _ := s.Digest(); d4 == d {
		t.Fatal("digest ignores field order")
	}
	s.Tokens = "text"
	if _, err := s.Digest(); errcode.Of(err) != errcode.BadDocument {
		t.Fatalf("Digest of an invalid schema: %v, want BAD_DOCUMENT", err)
	}
}

func TestParseMemberPartition(t *testing.T) {
	for in, want := range map[string]uint{"xxh64/k=1": 1, "xxh64/k=12": 12, "xxh64/k=24": 24, "xxh64/k=9": 9} {
		k, err := ParseMemberPartition(in)
		if err != nil || k != want {
			t.Errorf("ParseMemberPartition(%q) = %d, %v; want %d", in, k, err, want)
		}
	}
	for _, in := range []string{"", "xxh64/k=0", "xxh64/k=25", "xxh64/k=012", "xxh64/k=+1", "xxh64/k=-1",
		"xxh64/k=", "xxh64/k=1 ", " xxh64/k=1", "XXH64/k=12", "xxh32/k=12", "xxh64/k=1x", "xxh64/k=99999999999999999999"} {
		if k, err := ParseMemberPartition(in); errcode.Of(err) != errcode.BadDocument {
			t.Errorf("ParseMemberPartition(%q) = %d, %v; want BAD_DOCUMENT", in, k, err)
		}
	}
}

func TestTotalsErrorEvidence(t *testing.T) {
	r := validRelease()
	r.Totals.Tokens = 5
	_, err := DecodeRelease(encodeUnchecked(t, r))
	var te *TotalsError
	if !errors.As(err, &te) {
		t.Fatalf("err = %v, want *TotalsError", err)
	}
	want := totalsOf(r.Shards).Tokens
	if te.Field != "tokens" || te.Declared != 5 || te.Sum != want {
		t.Fatalf("TotalsError = %+v, want tokens declared 5 sum %d", te, want)
	}
	if errcode.Of(err) != errcode.TotalsMismatch {
		t.Fatalf("code %s", errcode.Of(err))
	}
}

func TestFenceLogWatermarkAndSchema(t *testing.T) {
	l := validFenceLog(BenchmarkSchema)
	b := mustEncode(t, l)
	got, err := DecodeFenceLog(b, BenchmarkSchema)
	if err != nil {
		t.Fatal(err)
	}
	if got.Watermark() != 10 {
		t.Fatalf("watermark %d, want 10", got.Watermark())
	}
	// A benchmark registry is not a tombstone log, even though both are valid.
	if _, err := DecodeFenceLog(b, TombstonesSchema); errcode.Of(err) != errcode.BadDocument {
		t.Fatalf("benchmark registry decoded as tombstones: %v", err)
	}
	if _, err := DecodeFenceLog(b, ReleaseSchema); errcode.Of(err) != errcode.BadDocument {
		t.Fatalf("DecodeFenceLog with a non-fence schema: %v", err)
	}
	empty := mustEncode(t, &FenceLog{Schema: TombstonesSchema, Entries: []FenceEntry{}})
	if l, err := DecodeFenceLog(empty, TombstonesSchema); err != nil || l.Watermark() != 0 {
		t.Fatalf("empty log: %v", err)
	}
}

func TestCountsFailedNoOverflow(t *testing.T) {
	c := Counts{DigestFailures: math.MaxInt64, SizeMismatches: 1}
	if !c.Failed() {
		t.Fatal("Failed() = false when counters overflow a sum")
	}
	for i := range reflect.TypeFor[Counts]().NumField() {
		var c Counts
		f := reflect.TypeFor[Counts]().Field(i)
		reflect.ValueOf(&c).Elem().Field(i).SetInt(1)
		notFailure := f.Name == "Shards" || f.Name == "ShardsVerified" || f.Name == "Records" || f.Name == "SnapshotRecords"
		if c.Failed() == notFailure {
			t.Errorf("Counts{%s: 1}.Failed() = %v", f.Name, c.Failed())
		}
	}
}

// encodeUnchecked encodes v without validation, to build bad documents.
func encodeUnchecked(t testing.TB, v any) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := newEncoder(&buf).Encode(v); err != nil {
		t.Fatal(err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

func TestEncodeRefusesOversized(t *testing.T) {
	r := validRelease()
	long := strings.Repeat("x", MaxNameLen-8)
	r.Shards = validShards(MaxDocumentSize / (2 * MaxNameLen))
	for i := range r.Shards {
		r.Shards[i].ID = fmt.Sprintf("%08d", i) + long
		r.Shards[i].ObjectVersion = long
	}
	r.Totals = totalsOf(r.Shards)
	if b, err := EncodeRelease(r); errcode.Of(err) != errcode.DocumentTooLarge || b != nil {
		t.Fatalf("EncodeRelease of a >64 MiB release: %d bytes, %v", len(b), err)
	}
}

func TestEncodeKeepsHTMLCharacters(t *testing.T) {
	if b := mustEncode(t, validReport(true)); !bytes.Contains(b, []byte("<&>")) {
		t.Fatalf("HTML characters were escaped: %s", b)
	}
}

// BenchmarkDecodeRelease decodes a 20,000-shard release (about 10% of the
// size cap), the cost every verify, worker and gate pays per root.
func BenchmarkDecodeRelease(b *testing.B) {
	r := validRelease()
	r.Shards = validShards(20000)
	r.Totals = totalsOf(r.Shards)
	doc := mustEncode(b, r)
	b.SetBytes(int64(len(doc)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeRelease(doc); err != nil {
			b.Fatal(err)
		}
	}
}

func TestSurrogatePairAccepted(t *testing.T) {
	doc := strings.Replace(string(mustEncode(t, validRelease())), `"gen-9021"`, `"gen-\ud83d\ude00\u00e9"`, 1)
	r, err := DecodeRelease([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if r.Shards[0].ObjectVersion != "gen-😀é" {
		t.Fatalf("objectVersion %q", r.Shards[0].ObjectVersion)
	}
}

// The strict scan allocates per document, not per member or element: it
// keeps the path to the value it scans on a stack and renders it only for
// an error. It allocated a location for every key and array element, and
// a string for every digest and number (76 allocations for a release of
// one shard, 8,029 for 500 shards).
func TestScanAllocatesPerDocument(t *testing.T) {
	r := validRelease()
	r.Shards = validShards(500)
	r.Totals = totalsOf(r.Shards)
	b := mustEncode(t, r)
	typ := reflect.TypeFor[Release]()
	if err := scanDocument(b, typ); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(20, func() { scanDocument(b, typ) }); n > 2 {
		t.Fatalf("scan of a release of 500 shards (%d bytes): %v allocations, want at most 2", len(b), n)
	}
}
