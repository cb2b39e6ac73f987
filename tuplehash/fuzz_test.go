package tuplehash

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"math"
	"strconv"
	"strings"
	"testing"
)

func fuzzTuple(sampleID, sourceID string, sv int64, lcd []byte, split string, schema []byte) (Tuple, bool) {
	if len(split) > MaxSplitLen {
		return Tuple{}, false
	}
	t := Tuple{SampleID: sampleID, SourceID: sourceID, SourceVersion: sv, Split: split}
	copy(t.LogicalContentDigest[:], lcd)
	copy(t.SchemaDigest[:], schema)
	return t, true
}

// FuzzTupleRoundTrip checks Decode(Encode(t)) == t, agreement with the
// reference encoder, and that the digest is sha256 of the encoding. Because
// Decode is a left inverse of Encode, Encode is injective.
func FuzzTupleRoundTrip(f *testing.F) {
	for _, tu := range vectorInputs() {
		f.Add(tu.SampleID, tu.SourceID, tu.SourceVersion, tu.LogicalContentDigest[:], tu.Split, tu.SchemaDigest[:])
	}
	f.Add("x", "y", int64(math.MinInt64), []byte{1}, strings.Repeat("\xff", 255), []byte{})
	f.Fuzz(func(t *testing.T, sampleID, sourceID string, sv int64, lcd []byte, split string, schema []byte) {
		tu, ok := fuzzTuple(sampleID, sourceID, sv, lcd, split, schema)
		if !ok {
			if _, err := (&Tuple{Split: split}).Encode(); err == nil {
				t.Fatalf("a %d-byte split encoded", len(split))
			}
			return
		}
		enc, err := tu.Encode()
		if err != nil {
			t.Fatal(err)
		}
		if ref := refEncode(tu.SampleID, tu.SourceID, tu.SourceVersion, tu.LogicalContentDigest, tu.Split, tu.SchemaDigest); !bytes.Equal(enc, ref) {
			t.Fatalf("encoding differs from reference:\n got %x\nwant %x", enc, ref)
		}
		back, err := Decode(enc)
		if err != nil {
			t.Fatalf("Decode(Encode(t)): %v", err)
		}
		if back != tu {
			t.Fatalf("Decode(Encode(t)) = %+v, want %+v", back, tu)
		}
		d, err := tu.Digest()
		if err != nil {
			t.Fatal(err)
		}
		if d != sha256.Sum256(enc) {
			t.Fatal("Digest is not sha256 of the encoding")
		}
		// Any change of length or trailing byte must be rejected.
		if _, err := Decode(append(enc, 0)); err == nil {
			t.Fatal("Decode accepted a trailing byte")
		}
		if _, err := Decode(enc[:len(enc)-1]); err == nil {
			t.Fatal("Decode accepted a truncated encoding")
		}
	})
}

// FuzzTupleInjective checks directly that two different tuples never
// share an encoding or a digest.
func FuzzTupleInjective(f *testing.F) {
	f.Add("ab", "c", "train", int64(1), "a", "bc", "train", int64(1))
	f.Add("", "", "", int64(0), "", "", "", int64(0))
	f.Add("a", "", "b", int64(-1), "", "a", "b", int64(-1))
	f.Fuzz(func(t *testing.T, s1, o1, sp1 string, v1 int64, s2, o2, sp2 string, v2 int64) {
		a, ok1 := fuzzTuple(s1, o1, v1, nil, sp1, nil)
		b, ok2 := fuzzTuple(s2, o2, v2, nil, sp2, nil)
		if !ok1 || !ok2 {
			return
		}
		ea, err := a.Encode()
		if err != nil {
			t.Fatal(err)
		}
		eb, err := b.Encode()
		if err != nil {
			t.Fatal(err)
		}
		if (a == b) != bytes.Equal(ea, eb) {
			t.Fatalf("tuples equal=%v but encodings equal=%v: %+v %+v", a == b, bytes.Equal(ea, eb), a, b)
		}
		da, _ := a.Digest()
		db, _ := b.Digest()
		if (a == b) != (da == db) {
			t.Fatalf("tuples equal=%v but digests equal=%v", a == b, da == db)
		}
	})
}

// FuzzDecode feeds arbitrary bytes to Decode: it must not panic, and
// whatever it accepts must be the canonical encoding of the tuple returned
// (one tuple, one encoding).
func FuzzDecode(f *testing.F) {
	for _, tu := range vectorInputs() {
		enc, err := tu.Encode()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(enc)
	}
	f.Add([]byte{})
	f.Add([]byte(tuplePrefix))
	f.Add([]byte("sp.tuple.v2\x00"))
	long, _ := hex.DecodeString("73702e7475706c652e763100ffffffff")
	f.Add(long)
	f.Fuzz(func(t *testing.T, b []byte) {
		tu, err := Decode(b)
		if err != nil {
			return
		}
		enc, err := tu.Encode()
		if err != nil {
			t.Fatalf("decoded tuple does not encode: %v", err)
		}
		if !bytes.Equal(enc, b) {
			t.Fatalf("Decode accepted a non-canonical encoding:\n in  %x\n out %x", b, enc)
		}
	})
}

// TestDecodeRejects lists the malformed encodings Decode must refuse with
// an error (and without panicking): every truncation of a valid encoding,
// trailing bytes, a wrong or missing prefix and lengths that overrun.
func TestDecodeRejects(t *testing.T) {
	valid, err := vectorInputs()[2].Encode()
	if err != nil {
		t.Fatal(err)
	}
	bad := map[string][]byte{
		"empty":            {},
		"prefix only":      []byte(tuplePrefix),
		"v2 prefix":        append([]byte("sp.tuple.v2\x00"), valid[len(tuplePrefix):]...),
		"no NUL in prefix": append([]byte("sp.tuple.v1"), valid[len(tuplePrefix):]...),
		"trailing byte":    append(bytes.Clone(valid), 0),
		"sampleId overrun": append([]byte(tuplePrefix), 0xff, 0xff, 0xff, 0xff, 'a'),
		"split overrun":    append(bytes.Clone(valid[:len(valid)-32-len(vectorInputs()[2].Split)-1]), 0xff),
	}
	for n := len(tuplePrefix); n < len(valid); n++ {
		bad["truncated at "+strconv.Itoa(n)] = valid[:n]
	}
	for name, b := range bad {
		if tu, err := Decode(b); err == nil {
			t.Errorf("%s: Decode accepted %x as %+v", name, b, tu)
		}
	}
}
