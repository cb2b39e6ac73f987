package mapper

import (
	"crypto/sha256"
	"encoding/json"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/shardproof/shardproof/internal/canon"
	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
)

// A detail cut to MaxFailureDetail is valid UTF-8 (cut at a character
// boundary) and a prefix of the whole, which one within the bound is,
// unchanged; a SCHEMA_MISMATCH of schemas of any number of fields of
// any names (multi-byte among them) fits without a cut, names whole
// fields only, ends with the found schema's digest, and lists every
// field when they all fit.
func TestDetailBoundsMultiByte(t *testing.T) {
	chars := []rune{'a', 'é', '€', '😀', '\u0301', '_'}
	r := rand.New(rand.NewPCG(7, 11))
	text := func(n int) string {
		var b strings.Builder
		for b.Len() < n {
			b.WriteRune(chars[r.IntN(len(chars))])
		}
		return b.String()
	}
	for range 5000 {
		s := text(900 + r.IntN(300))
		got := capDetail(s)
		cut, _, _ := strings.Cut(got, "… (")
		switch {
		case len(s) <= MaxFailureDetail && got != s:
			t.Fatalf("a detail of %d bytes changed", len(s))
		case len(got) > MaxFailureDetail || !utf8.ValidString(got) || !strings.HasPrefix(s, cut):
			t.Fatalf("a detail of %d bytes cut to %d bytes, valid UTF-8 %v, a prefix %v", len(s), len(got), utf8.ValidString(got), strings.HasPrefix(s, cut))
		}
	}
	wd, fd := manifest.Digest(sha256.Sum256([]byte("want"))), manifest.Digest(sha256.Sum256([]byte("found")))
	schema := func() *manifest.RecordSchema {
		s := &manifest.RecordSchema{}
		long := r.IntN(3) == 0
		for range r.IntN(40) {
			n := r.IntN(12)
			if long {
				n = r.IntN(600)
			}
			s.Fields = append(s.Fields, manifest.Field{Name: text(n), Type: "utf8", Nullable: r.IntN(2) == 0})
		}
		return s
	}
	empty := len(schemaMismatch(wd, fd, &manifest.RecordSchema{}, &manifest.RecordSchema{}))
	for range 5000 {
		want, found := schema(), schema()
		got := schemaMismatch(wd, fd, want, found)
		fits := empty+len(fieldList(want, -1))+len(fieldList(found, -1)) <= MaxFailureDetail
		switch {
		case len(got) > MaxFailureDetail || !utf8.ValidString(got) || capDetail(got) != got:
			t.Fatalf("detail of %d bytes, valid UTF-8 %v", len(got), utf8.ValidString(got))
		case !strings.HasSuffix(got, "(schema digest "+fd.String()+")"):
			t.Fatalf("detail does not end with the found digest: %q", got)
		case fits == strings.Contains(got, " more"):
			t.Fatalf("fields all fit %v, and the detail counts fields it does not list: %q", fits, got)
		}
	}
}

// A failure's strings are what a commit record's JSON gives back: asJSON
// of any bytes is what JSON makes of them (each byte outside valid UTF-8
// one U+FFFD), and leaves valid UTF-8 as it is.
func TestFailureAsJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 5))
	pieces := []string{"a", "é", "€", "😀", "\xff", "\xe2\x82", "\xed\xa0\x80", "\ufffd", "\x00", "\u2028", "\""}
	for range 5000 {
		var b strings.Builder
		for range r.IntN(12) {
			b.WriteString(pieces[r.IntN(len(pieces))])
		}
		s := b.String()
		enc, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		var back string
		if err := json.Unmarshal(enc, &back); err != nil {
			t.Fatal(err)
		}
		if got := asJSON(s); got != back || utf8.ValidString(s) && got != s {
			t.Fatalf("asJSON(%q) = %q; JSON gives back %q", s, got, back)
		}
	}
}

// TestFailureDetailBoundAfterReplacement: a detail quoting bytes that are
// not UTF-8 is made valid (each such byte U+FFFD, 3 bytes) before it is
// cut, so the detail a report holds is within MaxFailureDetail, not up
// to three times it.
func TestFailureDetailBoundAfterReplacement(t *testing.T) {
	for _, n := range []int{MaxFailureDetail / 3, MaxFailureDetail - 10, MaxFailureDetail, 4 * MaxFailureDetail} {
		f := newFailure("shard-\xff", SideRelease, errcode.SchemaMismatch, "fields [%s]", strings.Repeat("\xff", n))
		if len(f.Detail) > MaxFailureDetail || !utf8.ValidString(f.Detail) || !utf8.ValidString(f.Shard) {
			t.Fatalf("%d bytes 0xff: detail of %d bytes (valid UTF-8 %v), shard %q; want at most %d bytes of UTF-8",
				n, len(f.Detail), utf8.ValidString(f.Detail), f.Shard, MaxFailureDetail)
		}
	}
}

// TestSchemaMismatchDetailNotUTF8: field names of bytes that are not
// UTF-8 are budgeted as the detail will hold them (U+FFFD, 3 bytes for
// each), so a SCHEMA_MISMATCH naming one still fits MaxFailureDetail
// whole and ends with the found schema's digest, which a cut after the
// replacement would have taken off.
func TestSchemaMismatchDetailNotUTF8(t *testing.T) {
	wd, fd := manifest.Digest(sha256.Sum256([]byte("want"))), manifest.Digest(sha256.Sum256([]byte("found")))
	want := &manifest.RecordSchema{Fields: []manifest.Field{{Name: "sample_id", Type: "utf8"}, {Name: "text", Type: "utf8"}}}
	for _, n := range []int{100, 200, 300, 600} {
		found := &manifest.RecordSchema{Fields: append(slices.Clone(want.Fields), manifest.Field{Name: strings.Repeat("\xff", n), Type: "float32"})}
		f := newFailure("shard", SideRelease, errcode.SchemaMismatch, "%s", schemaMismatch(wd, fd, want, found))
		if len(f.Detail) > MaxFailureDetail || !utf8.ValidString(f.Detail) || !strings.HasSuffix(f.Detail, "(schema digest "+fd.String()+")") {
			t.Fatalf("a field of %d bytes 0xff: detail of %d bytes, valid UTF-8 %v: %q", n, len(f.Detail), utf8.ValidString(f.Detail), f.Detail)
		}
	}
}

// TestSchemaMismatchDetailTypeNotUTF8: a found field's type names what
// the file holds too (a struct column's type lists its children's
// names, any bytes), so it is budgeted as the detail will hold it like
// a name: a SCHEMA_MISMATCH with a struct child named by bytes that are
// not UTF-8 still ends with the found schema's digest.
func TestSchemaMismatchDetailTypeNotUTF8(t *testing.T) {
	wd, fd := manifest.Digest(sha256.Sum256([]byte("want"))), manifest.Digest(sha256.Sum256([]byte("found")))
	want := &manifest.RecordSchema{Fields: []manifest.Field{{Name: "sample_id", Type: "utf8"}, {Name: "text", Type: "utf8"}}}
	for _, n := range []int{100, 200, 300, 600} {
		child := arrow.Field{Name: strings.Repeat("\xff", n), Type: arrow.PrimitiveTypes.Int64}
		as := arrow.NewSchema([]arrow.Field{
			{Name: "sample_id", Type: arrow.BinaryTypes.String},
			{Name: "meta", Type: arrow.StructOf(child)},
		}, nil)
		found := canon.FromArrow(as, want)
		f := newFailure("shard", SideRelease, errcode.SchemaMismatch, "%s", schemaMismatch(wd, fd, want, found))
		if len(f.Detail) > MaxFailureDetail || !utf8.ValidString(f.Detail) || !strings.HasSuffix(f.Detail, "(schema digest "+fd.String()+")") {
			t.Fatalf("a struct child of %d bytes 0xff: detail of %d bytes, valid UTF-8 %v: %q", n, len(f.Detail), utf8.ValidString(f.Detail), f.Detail)
		}
	}
}
