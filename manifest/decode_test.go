package manifest

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/shardproof/shardproof/internal/errcode"
)

// record has the field types of the documents other packages decode with
// Decode (the coordinator's plans and commit records): untagged fields,
// a named string, a byte slice, a map of lists, an optional object.
type record struct {
	Schema  string              `json:"schema"`
	Plan    Digest              `json:"plan"`
	Side    uint8               // untagged: its JSON name is Side
	Name    named               `json:"name,omitempty"`
	Leaves  []byte              `json:"leaves"`
	Codes   []string            `json:",omitempty"`
	Example map[string][]string `json:"examples"`
	Ref     *recordRef          `json:"ref,omitempty"`
}

type named string

type recordRef struct {
	Key  string `json:"key"`
	Size int64  `json:"size"`
}

func validRecord() *record {
	return &record{Schema: "x.v1", Plan: dg("p"), Side: 1, Name: "n", Leaves: []byte("\x00\x01leaves\xff"),
		Codes: []string{"A"}, Example: map[string][]string{"MISSING_MEMBER": {"a", "b"}}, Ref: &recordRef{Key: "k", Size: 3}}
}

// Decode holds a document of another package's type to the rules of the
// manifests: what encoding/json alone lets through (a repeated key, which
// it decodes as the last, a key in another case, null for an object,
// bytes that are not UTF-8) is refused with BAD_DOCUMENT, and what
// Encode writes decodes to the same value.
func TestDecodeHoldsOtherTypesToTheManifestRules(t *testing.T) {
	good := string(mustEncode(t, validRecord()))
	var got record
	if err := Decode([]byte(good), &got); err != nil || !reflect.DeepEqual(&got, validRecord()) {
		t.Fatalf("round trip: %v\n%+v", err, got)
	}
	for _, c := range []struct{ name, old, new string }{
		{"repeated key", `"leaves":`, `"leaves":"AA==","leaves":`},
		{"repeated untagged key", `"Side":1`, `"Side":0,"Side":1`},
		{"repeated key in a nested object", `"size":3`, `"size":4,"size":3`},
		{"repeated map key", `"MISSING_MEMBER":`, `"MISSING_MEMBER":[],"MISSING_MEMBER":`},
		{"repeated map key, escaped", `"MISSING_MEMBER":`, `"MISSING_MEMBER":[],"\u004dISSING_MEMBER":`},
		{"key in another case", `"leaves":`, `"Leaves":`},
		{"untagged key in another case", `"Side":`, `"side":`},
		{"nested key in another case", `"size":`, `"Size":`},
		{"null object", `"ref":{"key":"k","size":3}`, `"ref":null`},
		{"null string", `"name":"n"`, `"name":null`},
		{"null number", `"Side":1`, `"Side":null`},
		{"byte slice as an array", `"leaves":"AAFsZWF2ZXP/"`, `"leaves":[0,1]`},
		{"not UTF-8", `"key":"k"`, "\"key\":\"k\xff\""},
		{"trailing bracket", `}}`, `}}]`},
		{"bad digest", `"plan":"sha256:`, `"plan":"sha256:A`},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := strings.Replace(good, c.old, c.new, 1)
			if b == good {
				t.Fatalf("%q not in %s", c.old, good)
			}
			// encoding/json alone takes it; Decode must not.
			var lenient record
			lenientErr := json.Unmarshal([]byte(b), &lenient)
			var got record
			err := Decode([]byte(b), &got)
			if c := errcode.Of(err); c != errcode.BadDocument && c != errcode.BadDigest {
				t.Fatalf("Decode: %v (encoding/json alone: %v), want BAD_DOCUMENT", err, lenientErr)
			}
		})
	}
	// null is a byte slice's nil, as encoding/json writes it.
	nilLeaves := validRecord()
	nilLeaves.Leaves = nil
	if err := Decode(mustEncode(t, nilLeaves), &got); err != nil || got.Leaves != nil {
		t.Fatalf("null leaves: %v, %q", err, got.Leaves)
	}
	if err := Decode([]byte(good), got); errcode.Of(err) != errcode.Internal {
		t.Fatalf("Decode into a non-pointer: %v, want INTERNAL", err)
	}
}

// Decode validates a document type as Encode does.
func TestDecodeValidates(t *testing.T) {
	r := validRelease()
	b := strings.Replace(string(mustEncode(t, r)), `"shards":3`, `"shards":4`, 1)
	var got Release
	if err := Decode([]byte(b), &got); errcode.Of(err) != errcode.TotalsMismatch {
		t.Fatalf("Decode of a release whose totals are off: %v, want TOTALS_MISMATCH", err)
	}
}

// A type the scan does not model is INTERNAL whatever the document holds,
// even a document without the field: a round trip of any document of it
// finds the gap, not only one that happens to hold the field.
func TestDecodeRefusesTypesTheScanDoesNotModel(t *testing.T) {
	type embedded struct{ A int }
	type embeddedTime struct{ time.Time }
	for name, v := range map[string]any{
		"time.Time":        &struct{ T time.Time }{},
		"json.RawMessage":  &struct{ R json.RawMessage }{},
		"UnmarshalText":    &struct{ D *Digest }{}, // supported: Digest itself
		"map keyed by int": &struct{ M map[int]string }{},
		"embedded pointer": &struct{ *embedded }{},
		"embedded and own field of one name": &struct {
			embedded
			A int
		}{},
		"embedded time.Time": &struct{ embeddedTime }{},
		"string option": &struct {
			N int `json:",string"`
		}{},
		// Built at run time: go vet refuses the type written out.
		"one name twice": reflect.New(reflect.StructOf([]reflect.StructField{
			{Name: "A", Type: reflect.TypeFor[int](), Tag: `json:"a"`},
			{Name: "B", Type: reflect.TypeFor[int](), Tag: `json:"a"`},
		})).Interface(),
		"array":             &struct{ A [4]int }{},
		"interface":         &struct{ I any }{},
		"nested in a slice": &struct{ S []struct{ T time.Time } }{},
	} {
		err := Decode([]byte(`{}`), v)
		if name == "UnmarshalText" {
			if err != nil {
				t.Errorf("%s: %v", name, err)
			}
			continue
		}
		if errcode.Of(err) != errcode.Internal {
			t.Errorf("%s: Decode of {} = %v, want INTERNAL", name, err)
		}
	}
}

// envelope embeds a header as a gate command embeds its Header, and holds
// a list of optional objects as a gate run holds its attestations.
type envelope struct {
	envelopeHeader
	Items []*recordRef `json:"items"`
	Ref   *recordRef   `json:"ref,omitempty"`
	Refs  map[string]*recordRef
}

type envelopeHeader struct {
	Type string `json:"type"`
	Now  int64  `json:"now"`
}

func validEnvelope() *envelope {
	return &envelope{envelopeHeader: envelopeHeader{Type: "t", Now: 7}, Items: []*recordRef{nil, {Key: "k", Size: 1}, nil},
		Refs: map[string]*recordRef{"a": {Key: "a"}}}
}

// envelopeFaults are faults of an encoded validEnvelope, each a
// replacement of old by new, and the start of the error it must be.
var envelopeFaults = []struct{ name, old, new, where string }{
	{"repeated promoted key", `"now":7`, `"now":0,"now":7`, "$.now: duplicate key"},
	{"promoted key in another case", `"now":`, `"Now":`, "$.Now: unknown field"},
	{"null promoted number", `"now":7`, `"now":null`, "$.now: want a number"},
	{"null promoted string", `"type":"t"`, `"type":null`, "$.type: want a string"},
	{"embedded struct's own name", `"type":"t"`, `"envelopeHeader":{},"type":"t"`, "$.envelopeHeader: unknown field"},
	{"null pointer field", `"items"`, `"ref":null,"items"`, "$.ref: want an object"},
	{"null pointer map value", `"a":{"key":"a","size":0}`, `"a":null`, "$.Refs.a: want an object"},
	{"number in a list of pointers", `[null,`, `[1,`, "$.items[0]: want an object"},
	{"nul instead of null", `[null,`, `[nul,`, "$.items[0]: invalid JSON"},
}

// An embedded struct's fields are the document's own, as encoding/json
// promotes them, held to the same rules: repeated, in another case, null.
// A list of pointers holds its nil elements as null, as encoding/json
// writes them; a pointer field or a map's pointer value is not null.
func TestDecodeEmbeddedAndNilElements(t *testing.T) {
	want := validEnvelope()
	good := string(mustEncode(t, want))
	var got envelope
	if err := Decode([]byte(good), &got); err != nil || !reflect.DeepEqual(&got, want) {
		t.Fatalf("round trip of %s: %v\n%+v", good, err, got)
	}
	for _, c := range envelopeFaults {
		b := strings.Replace(good, c.old, c.new, 1)
		if b == good {
			t.Fatalf("%s: %q not in %s", c.name, c.old, good)
		}
		var got envelope
		if err := Decode([]byte(b), &got); errcode.Of(err) != errcode.BadDocument || !strings.Contains(err.Error(), c.where) {
			t.Errorf("%s: Decode: %v, want BAD_DOCUMENT at %q", c.name, err, c.where)
		}
	}
}

// DecodeJSON applies Decode's rules with the caller's cap, and leaves the
// values to the caller: it does not validate a document type.
func TestDecodeJSON(t *testing.T) {
	r := validRelease()
	b := strings.Replace(string(mustEncode(t, r)), `"shards":3`, `"shards":4`, 1)
	var got Release
	if err := DecodeJSON([]byte(b), &got, len(b)); err != nil || got.Totals.Shards != 4 {
		t.Fatalf("DecodeJSON of a release whose totals are off: %v, %d shards, want it decoded as it is", err, got.Totals.Shards)
	}
	if err := DecodeJSON([]byte(b), &got, len(b)-1); errcode.Of(err) != errcode.DocumentTooLarge {
		t.Fatalf("DecodeJSON of %d bytes, cap %d: %v, want DOCUMENT_TOO_LARGE", len(b), len(b)-1, err)
	}
	dup := strings.Replace(b, `"shards":4`, `"shards":4,"shards":3`, 1)
	if err := DecodeJSON([]byte(dup), &got, len(dup)); errcode.Of(err) != errcode.BadDocument {
		t.Fatalf("DecodeJSON of a key twice: %v, want BAD_DOCUMENT", err)
	}
}

// commitLike has the shape DecodePicked is for: a head, a list of which a
// reader needs one element, and a list it needs none of.
type commitLike struct {
	Schema  string      `json:"schema"`
	Plan    Digest      `json:"plan"`
	Outputs []recordRef `json:"outputs"`
	Results []record    `json:"results"`
}

func validCommitLike() *commitLike {
	return &commitLike{Schema: "x.v1", Plan: dg("p"),
		Outputs: []recordRef{{Key: "k0", Size: 0}, {Key: "k1", Size: 1}, {Key: "k2", Size: 2}},
		Results: []record{*validRecord(), *validRecord()}}
}

// DecodePicked decodes the head of a document and the one element picked
// of a list, and sets each picked list's length.
func TestDecodePicked(t *testing.T) {
	want := validCommitLike()
	good := mustEncode(t, want)
	for _, index := range []int{0, 1, 2, 3, -1} {
		var got commitLike
		picks := []Pick{{Field: "outputs", Index: index}, {Field: "results", Index: -1}}
		if err := DecodePicked(good, &got, picks); err != nil {
			t.Fatalf("pick %d: %v", index, err)
		}
		if picks[0].Len != 3 || picks[1].Len != 2 {
			t.Fatalf("pick %d: lengths %d and %d, want 3 and 2", index, picks[0].Len, picks[1].Len)
		}
		var wantOut []recordRef
		if index >= 0 && index < 3 {
			wantOut = want.Outputs[index : index+1]
		}
		if got.Schema != want.Schema || got.Plan != want.Plan || len(got.Results) != 0 || len(got.Outputs) != len(wantOut) || len(wantOut) > 0 && got.Outputs[0] != wantOut[0] {
			t.Fatalf("pick %d: %+v", index, got)
		}
	}
	// A null list is nil, of length 0; whitespace between the members
	// stays out of the way.
	var got commitLike
	picks := []Pick{{Field: "outputs", Index: 0}}
	b := strings.Replace(string(good), `"outputs":[`, "\n \"outputs\" :\t[", 1)
	b = strings.Replace(b, `"results":[{`, `"results":null,"x":[{`, 1)
	b = b[:strings.Index(b, `,"x":`)] + "}"
	if err := DecodePicked([]byte(b), &got, picks); err != nil || got.Results != nil || picks[0].Len != 3 || got.Outputs[0] != want.Outputs[0] {
		t.Fatalf("%s: %v, %+v, %+v", b, err, got, picks)
	}
	// No picks cuts no list: the document is decoded whole, as Decode
	// decodes it (it was decoded as {}, every field left zero, and no
	// error said so).
	for _, none := range [][]Pick{nil, {}} {
		var all commitLike
		if err := DecodePicked(good, &all, none); err != nil || !reflect.DeepEqual(&all, want) {
			t.Fatalf("picks %#v: %v, %+v", none, err, all)
		}
	}
}

// A pick's Each sees every element of its list, in order, as its bytes
// in the document, each once the scan held it to the rules: an element
// the scan refuses is not given, and Each's own error ends the decode
// as it is.
func TestDecodePickedEach(t *testing.T) {
	want := validCommitLike()
	good := mustEncode(t, want)
	var seen []string
	each := func(k int, elem []byte) error {
		if k != len(seen) {
			t.Fatalf("element %d after %d", k, len(seen))
		}
		seen = append(seen, string(elem))
		return nil
	}
	var got commitLike
	picks := []Pick{{Field: "outputs", Index: -1, Each: each}, {Field: "results", Index: -1}}
	if err := DecodePicked(good, &got, picks); err != nil || len(got.Outputs) != 0 || picks[0].Len != 3 {
		t.Fatalf("%v, %+v, %+v", err, got, picks)
	}
	if len(seen) != len(want.Outputs) {
		t.Fatalf("%d elements seen, want %d", len(seen), len(want.Outputs))
	}
	for k, o := range want.Outputs {
		if b := strings.TrimSuffix(string(mustEncode(t, o)), "\n"); seen[k] != b {
			t.Errorf("element %d: %q, want %q", k, seen[k], b)
		}
	}

	seen = nil
	bad := strings.Replace(string(good), `"key":"k2"`, `"key":"k2","key":"k2"`, 1)
	if err := DecodePicked([]byte(bad), &got, picks); errcode.Of(err) != errcode.BadDocument || len(seen) != 2 {
		t.Fatalf("an element with a key twice: %v after %d elements seen, want BAD_DOCUMENT after 2", err, len(seen))
	}

	stop := errcode.New(errcode.ShuffleCorrupt, "element 1 refused")
	seen = nil
	picks[0].Each = func(k int, elem []byte) error {
		seen = append(seen, string(elem))
		if k == 1 {
			return stop
		}
		return nil
	}
	if err := DecodePicked(good, &got, picks); err != stop || len(seen) != 2 {
		t.Fatalf("Each refusing element 1: %v after %d elements, want its error after 2", err, len(seen))
	}
}

// DecodePicked holds the whole document to Decode's rules, the elements
// and lists it does not decode included: what Decode refuses, it refuses
// with the same code.
func TestDecodePickedIsAsStrictAsDecode(t *testing.T) {
	good := string(mustEncode(t, validCommitLike()))
	replaceLast := func(s, old, new string) string {
		i := strings.LastIndex(s, old)
		if i < 0 {
			return s
		}
		return s[:i] + new + s[i+len(old):]
	}
	for _, c := range []struct{ name, b string }{
		{"key twice in an output not picked", strings.Replace(good, `{"key":"k2"`, `{"key":"x","key":"k2"`, 1)},
		{"key in another case in an output not picked", strings.Replace(good, `"key":"k2"`, `"Key":"k2"`, 1)},
		{"unknown key in an output not picked", strings.Replace(good, `"size":2`, `"size":2,"sizes":2`, 1)},
		{"null output", strings.Replace(good, `{"key":"k2","size":2}`, `null`, 1)},
		{"output not UTF-8", strings.Replace(good, `"k2"`, "\"k2\xff\"", 1)},
		{"output of a string size", strings.Replace(good, `"size":2`, `"size":"2"`, 1)},
		{"invalid number in an output", strings.Replace(good, `"size":2`, `"size":2.`, 1)},
		{"unknown key in a result", replaceLast(good, `"Side":1`, `"Side":1,"side":1`)},
		{"key twice in a result", replaceLast(good, `"leaves":`, `"leaves":"AA==","leaves":`)},
		{"negative unsigned in a result", replaceLast(good, `"Side":1`, `"Side":-1`)},
		{"bad digest in a result", replaceLast(good, `"plan":"sha256:`, `"plan":"sha256:A`)},
		{"unpaired surrogate in a result", replaceLast(good, `"name":"n"`, `"name":"\ud800"`)},
		{"not base64 in a result", replaceLast(good, `"leaves":"AAFsZWF2ZXP/"`, `"leaves":"AAFsZWF2ZXP"`)},
		{"map key twice in a result", replaceLast(good, `"MISSING_MEMBER":`, `"MISSING_MEMBER":[],"MISSING_MEMBER":`)},
		{"list twice", strings.Replace(good, `"outputs":`, `"outputs":[],"outputs":`, 1)},
		{"list in another case", strings.Replace(good, `"results":`, `"Results":`, 1)},
		{"list as an object", strings.Replace(good, `"outputs":[{"key":"k0","size":0},`, `"outputs":{"a":{"key":"k0","size":0}},"x":[`, 1)},
		{"trailing bracket", good + "]"},
		{"unterminated", good[:len(good)-1]},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.b == good {
				t.Fatal("the case changes nothing")
			}
			var full, part commitLike
			err := Decode([]byte(c.b), &full)
			if err == nil {
				t.Fatalf("Decode takes %s", c.b)
			}
			perr := DecodePicked([]byte(c.b), &part, []Pick{{Field: "outputs", Index: 0}, {Field: "results", Index: -1}})
			if errcode.Of(perr) != errcode.Of(err) {
				t.Fatalf("DecodePicked: %v, want %s as Decode: %v", perr, errcode.Of(err), err)
			}
		})
	}
}

// DecodePicked holds a document to Decode's rules for embedded structs
// and lists of pointers too: it takes a promoted field and a null element,
// picked or not, and refuses what Decode refuses, at the same path.
func TestDecodePickedEmbeddedAndNilElements(t *testing.T) {
	want := validEnvelope()
	good := string(mustEncode(t, want))
	for index, elem := range want.Items {
		var got envelope
		picks := []Pick{{Field: "items", Index: index}}
		if err := DecodePicked([]byte(good), &got, picks); err != nil || picks[0].Len != 3 || got.envelopeHeader != want.envelopeHeader ||
			!reflect.DeepEqual(got.Items, []*recordRef{elem}) || !reflect.DeepEqual(got.Refs, want.Refs) {
			t.Fatalf("pick %d of %s: %v, %+v, %+v", index, good, err, got, picks)
		}
	}
	for _, c := range envelopeFaults {
		b := strings.Replace(good, c.old, c.new, 1)
		var got envelope
		if err := DecodePicked([]byte(b), &got, []Pick{{Field: "items", Index: 1}}); errcode.Of(err) != errcode.BadDocument || !strings.Contains(err.Error(), c.where) {
			t.Errorf("%s: DecodePicked: %v, want BAD_DOCUMENT at %q", c.name, err, c.where)
		}
	}
}

// A pick that names no list field, or a document type (validated whole),
// is the caller's mistake: INTERNAL.
func TestDecodePickedRefusesMisuse(t *testing.T) {
	good := mustEncode(t, validCommitLike())
	for name, c := range map[string]struct {
		v     any
		field string
	}{
		"string field":   {&commitLike{}, "schema"},
		"unknown field":  {&commitLike{}, "output"},
		"Go name":        {&commitLike{}, "Outputs"},
		"byte slice":     {&record{}, "leaves"},
		"not a pointer":  {commitLike{}, "outputs"},
		"document type":  {&Release{}, "shards"},
		"not a struct":   {&[]int{}, "outputs"},
		"unmodeled type": {&struct{ L []time.Time }{}, "L"},
	} {
		if err := DecodePicked(good, c.v, []Pick{{Field: c.field}}); errcode.Of(err) != errcode.Internal {
			t.Errorf("%s: %v, want INTERNAL", name, err)
		}
	}
}

// The strict scan allocates nothing per value but a map's set of keys, in
// a commit record's shape too (lists of records holding byte slices and
// maps), as in a release's (TestScanAllocatesPerDocument): a location, a
// number's text or a digest's string each was an allocation, most of the
// scan's time in a commit record of thousands of values.
func TestScanAllocatesNothingPerValue(t *testing.T) {
	allocs := map[int]float64{}
	for _, n := range []int{2, 200} {
		c := validCommitLike()
		c.Outputs, c.Results = nil, nil
		for len(c.Outputs) < n {
			c.Outputs = append(c.Outputs, recordRef{Key: "k", Size: int64(len(c.Outputs)) << 40})
			r := validRecord()
			r.Example = nil
			c.Results = append(c.Results, *r)
		}
		b := mustEncode(t, c)
		typ := reflect.TypeFor[commitLike]()
		if err := scanDocument(b, typ); err != nil {
			t.Fatal(err)
		}
		allocs[n] = testing.AllocsPerRun(10, func() { scanDocument(b, typ) })
	}
	if allocs[200] != allocs[2] {
		t.Fatalf("scanning 200 outputs and results allocates %.0f times, 2 of each %.0f", allocs[200], allocs[2])
	}
}

// An error names the path to the value at fault, its parents' members
// and elements as they were when the scan met it, not as the scan's path
// stack holds them later.
func TestScanErrorNamesThePath(t *testing.T) {
	good := string(mustEncode(t, validCommitLike()))
	i := strings.LastIndex(good, `"size":3`)
	for _, c := range []struct{ b, want string }{
		{good[:i] + `"size":"3"` + good[i+len(`"size":3`):], "$.results[1].ref.size: want a number"},
		{good[:i] + `"size":3.` + good[i+len(`"size":3`):], "$.results[1].ref.size: invalid JSON at byte"},
		{strings.Replace(good, `"size":2`, `"size":2,"size":2`, 1), "$.outputs[2].size: duplicate key"},
		{strings.Replace(good, `"MISSING_MEMBER":["a"`, `"MISSING_MEMBER":[7`, 1), "$.results[0].examples.MISSING_MEMBER[0]: want a string"},
	} {
		var got commitLike
		if err := Decode([]byte(c.b), &got); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Decode: %v, want %q", err, c.want)
		}
	}
}
