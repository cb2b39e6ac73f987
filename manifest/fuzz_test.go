package manifest

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/shardproof/shardproof/internal/errcode"
)

// fuzzDecoder checks one decoder on arbitrary bytes: it never panics, every
// rejection has a catalogued code, and whatever it accepts re-encodes to a
// document that decodes to the same value (and re-encodes to the same
// bytes).
func fuzzDecoder[T any](f *testing.F, seeds [][]byte, decode func([]byte) (*T, error)) {
	for _, s := range seeds {
		f.Add(s)
		// Seed the interesting neighbours too.
		f.Add(bytes.Replace(s, []byte(`":`), []byte(`":null,"x":`), 1))
		f.Add(append(bytes.Clone(s), s...))
		if i := bytes.IndexByte(s, ','); i > 0 {
			f.Add(append(bytes.Clone(s[:i+1]), s[1:]...)) // repeats the first key
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := decode(b)
		if err != nil {
			if c := errcode.Of(err); !errcode.Known(c) || c == errcode.Internal {
				t.Fatalf("rejection without a document code: %v", err)
			}
			return
		}
		enc, err := Encode(v)
		if err != nil {
			t.Fatalf("a decoded document does not encode: %v", err)
		}
		v2, err := decode(enc)
		if err != nil {
			t.Fatalf("re-encoded document does not decode: %v\n%s", err, enc)
		}
		if !reflect.DeepEqual(v, v2) {
			t.Fatalf("round trip changed the value:\n%+v\n%+v", v, v2)
		}
		if enc2, _ := Encode(v2); !bytes.Equal(enc, enc2) {
			t.Fatalf("encoding is not stable:\n%s\n%s", enc, enc2)
		}
	})
}

func FuzzDecodeRelease(f *testing.F) {
	one := validRelease()
	one.Shards = one.Shards[:1]
	one.Totals = totalsOf(one.Shards)
	fuzzDecoder(f, [][]byte{mustEncode(f, validRelease()), mustEncode(f, one)}, DecodeRelease)
}

func FuzzDecodeSnapshot(f *testing.F) {
	fuzzDecoder(f, [][]byte{mustEncode(f, validSnapshot()), mustEncode(f, rangedSnapshot())}, DecodeSnapshot)
}

func FuzzDecodeFenceLog(f *testing.F) {
	seeds := [][]byte{
		mustEncode(f, validFenceLog(TombstonesSchema)),
		mustEncode(f, &FenceLog{Schema: TombstonesSchema, Entries: []FenceEntry{}}),
	}
	fuzzDecoder(f, seeds, func(b []byte) (*FenceLog, error) { return DecodeFenceLog(b, TombstonesSchema) })
}

func FuzzDecodeBenchmarkLog(f *testing.F) {
	fuzzDecoder(f, [][]byte{mustEncode(f, validFenceLog(BenchmarkSchema))},
		func(b []byte) (*FenceLog, error) { return DecodeFenceLog(b, BenchmarkSchema) })
}

func FuzzDecodeRecordSchema(f *testing.F) {
	noTokens := validRecordSchema()
	noTokens.Tokens = ""
	fuzzDecoder(f, [][]byte{mustEncode(f, validRecordSchema()), mustEncode(f, noTokens)}, DecodeRecordSchema)
}

func FuzzDecodeReport(f *testing.F) {
	fuzzDecoder(f, [][]byte{mustEncode(f, validReport(false)), mustEncode(f, validReport(true))}, DecodeReport)
}

// FuzzDecodeAny dispatches by schema; seeds are every kind of document.
func FuzzDecodeAny(f *testing.F) {
	for _, c := range docCases() {
		f.Add(mustEncode(f, c.doc))
	}
	f.Add(mustEncode(f, validRecheckReport()))
	f.Add([]byte(`{"schema":"` + ReleaseSchema + `","schema":"` + ReportSchema + `"}`))
	f.Add([]byte(strings.Repeat("[", 64) + strings.Repeat("]", 64)))
	f.Fuzz(func(t *testing.T, b []byte) {
		schema, v, err := DecodeAny(b)
		if err != nil {
			if c := errcode.Of(err); !errcode.Known(c) || c == errcode.Internal {
				t.Fatalf("rejection without a document code: %v", err)
			}
			return
		}
		enc, err := Encode(v)
		if err != nil {
			t.Fatalf("a decoded %s does not encode: %v", schema, err)
		}
		schema2, v2, err := DecodeAny(enc)
		if err != nil || schema2 != schema || !reflect.DeepEqual(v, v2) {
			t.Fatalf("round trip of a %s: %v", schema, err)
		}
	})
}

// FuzzScanSyntax holds the hand-written scanner to encoding/json's grammar:
// it never calls valid JSON malformed, and never accepts a whole document
// that encoding/json calls malformed.
func FuzzScanSyntax(f *testing.F) {
	for _, c := range docCases() {
		b := mustEncode(f, c.doc)
		f.Add(b)
		f.Add(bytes.ReplaceAll(b, []byte(`":`), []byte(`" : `)))
	}
	f.Add(mustEncode(f, validRecord()))
	for _, s := range []string{`{"schema":"a\u00e9\n\"\\\/"}`, `{"tombstoneWatermark":1e3}`, `{"tombstoneWatermark":-0.5E+2}`,
		`{"tombstoneWatermark":01}`, `{"shards":[1,]}`, `{"schema":"\x01"}`, `{"schema":"\ud800"}`, "{\"schema\":\"a\"}\t\r\n ", `{,}`, `{"a" 1}`} {
		f.Add([]byte(s))
	}
	types := []reflect.Type{reflect.TypeFor[Release](), reflect.TypeFor[Report](), reflect.TypeFor[FenceLog](), reflect.TypeFor[record]()}
	f.Fuzz(func(t *testing.T, b []byte) {
		valid := json.Valid(b)
		for _, typ := range types {
			err := scanDocument(b, typ)
			var se *syntaxError
			if errors.As(err, &se) && valid {
				t.Fatalf("%s: valid JSON rejected as malformed: %v\n%q", typ, err, b)
			}
			if err == nil && !valid {
				t.Fatalf("%s: malformed JSON accepted:\n%q", typ, b)
			}
		}
	})
}

// FuzzParseMemberPartition: a string is accepted exactly when it is the
// one spelling of a k in range.
func FuzzParseMemberPartition(f *testing.F) {
	for _, s := range []string{DefaultMemberPartition, "xxh64/k=1", "xxh64/k=24", "xxh64/k=25", "xxh64/k=012", "xxh64/k=+3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		k, err := ParseMemberPartition(s)
		if err != nil {
			if errcode.Of(err) != errcode.BadDocument {
				t.Fatalf("code %s", errcode.Of(err))
			}
			for k := 1; k <= MaxMemberPartitionK; k++ {
				if s == "xxh64/k="+strconv.Itoa(k) {
					t.Fatalf("rejected %q", s)
				}
			}
			return
		}
		if k < 1 || k > MaxMemberPartitionK || s != "xxh64/k="+strconv.Itoa(int(k)) {
			t.Fatalf("accepted %q as k=%d", s, k)
		}
	})
}

// FuzzDecodePicked checks DecodePicked against Decode on arbitrary bytes:
// one refuses what the other refuses, with the same code, and what both
// take, DecodePicked takes as Decode does, its picked element and list
// lengths included.
func FuzzDecodePicked(f *testing.F) {
	good := mustEncode(f, validCommitLike())
	for _, s := range [][]byte{good, []byte(`{"outputs":null,"results":[]}`)} {
		f.Add(s, uint8(1))
		f.Add(bytes.Replace(s, []byte(`"size":2`), []byte(`"size":2,"size":2`), 1), uint8(0))
		f.Add(bytes.Replace(s, []byte(`"leaves":"`), []byte(`"leaves":"=`), 1), uint8(0))
	}
	f.Fuzz(func(t *testing.T, b []byte, index uint8) {
		var full, part commitLike
		err := Decode(b, &full)
		picks := []Pick{{Field: "outputs", Index: int(index) - 1}, {Field: "results", Index: -1}}
		perr := DecodePicked(b, &part, picks)
		if errcode.Of(err) != errcode.Of(perr) {
			t.Fatalf("Decode: %v; DecodePicked: %v", err, perr)
		}
		if err != nil {
			return
		}
		i := int(index) - 1
		if picks[0].Len != len(full.Outputs) || picks[1].Len != len(full.Results) || part.Schema != full.Schema || part.Plan != full.Plan || len(part.Results) != 0 {
			t.Fatalf("picked %+v (lengths %d, %d) of %+v", part, picks[0].Len, picks[1].Len, full)
		}
		if i >= 0 && i < len(full.Outputs) {
			if len(part.Outputs) != 1 || part.Outputs[0] != full.Outputs[i] {
				t.Fatalf("output %d picked as %+v, decoded %+v", i, part.Outputs, full.Outputs[i])
			}
		} else if len(part.Outputs) != 0 {
			t.Fatalf("output %d of %d picked as %+v", i, len(full.Outputs), part.Outputs)
		}
	})
}
