package manifest

import (
	"bytes"
	"reflect"
	"testing"

	"github.com/shardproof/shardproof/internal/errcode"
)

type dfEmb struct {
	E  string  `json:"e"`
	EL []int16 `json:"el"`
}

type dfLeaf struct {
	S  string   `json:"s"`
	Ds []Digest `json:"ds"`
}

type dfInner struct {
	A  int8             `json:"a"`
	B  uint16           `json:"b"`
	F  float32          `json:"f"`
	G  float64          `json:"g"`
	D  Digest           `json:"d"`
	Bs []byte           `json:"bs"`
	M  map[string][]int `json:"m"`
	P  *dfLeaf          `json:"p,omitempty"`
	U  uint64           `json:"u"`
	I  int64            `json:"i"`
	Bo bool             `json:"bo"`
}

type dfDoc struct {
	dfEmb
	Name     string              `json:"name"`
	L        []*dfInner          `json:"l"`
	LL       [][]int64           `json:"ll"`
	M        map[string]*dfInner `json:"m"`
	Bytes    [][]byte            `json:"bytes"`
	Ds       []Digest            `json:"ds"`
	Opt      *dfInner            `json:"opt,omitempty"`
	U32      uint32              `json:"u32"`
	Untagged []dfLeaf
}

// dfDoc holds what the scan models beyond a commit record's shape: an
// embedded struct's promoted list, pointers in a list (null among them),
// nested lists, maps of lists and of pointers, digests, byte slices and
// lists of them, numbers of every width at their limits, an untagged
// field.
var dfLists = []string{"l", "ll", "bytes", "ds", "el", "Untagged"}

func dfValue(v reflect.Value, name string) reflect.Value {
	switch name {
	case "l":
		return v.FieldByName("L")
	case "ll":
		return v.FieldByName("LL")
	case "bytes":
		return v.FieldByName("Bytes")
	case "ds":
		return v.FieldByName("Ds")
	case "el":
		return v.FieldByName("EL")
	}
	return v.FieldByName("Untagged")
}

// FuzzDecodePickedTypes checks DecodePicked against Decode on arbitrary
// bytes of dfDoc's shape, picking any set of its lists at any index (no
// picks included): one refuses what the other refuses, with the same
// code, and what both take, DecodePicked takes as Decode does, but for
// each picked list cut to its picked element, with its length set.
func FuzzDecodePickedTypes(f *testing.F) {
	in := &dfInner{A: -128, B: 65535, F: 3.4e38, G: -1e308, D: dg("x"), Bs: []byte{0, 1, 255}, M: map[string][]int{"a": {1}, "b": nil}, P: &dfLeaf{S: "s", Ds: []Digest{dg("a")}}, U: 18446744073709551615, I: -9223372036854775808, Bo: true}
	doc := &dfDoc{dfEmb: dfEmb{E: "e", EL: []int16{-32768, 32767}}, Name: "n\u2028<>&", L: []*dfInner{in, nil, {}}, LL: [][]int64{{1, 2}, nil, {}}, M: map[string]*dfInner{"k": in}, Bytes: [][]byte{nil, {}, []byte("hello")}, Ds: []Digest{dg("1"), dg("2")}, Opt: in, U32: 4294967295, Untagged: []dfLeaf{{S: "a"}, {Ds: []Digest{}}}}
	good := mustEncode(f, doc)
	f.Add(good, uint8(0xff), int8(0))
	f.Add(good, uint8(0x01), int8(1))
	f.Add(good, uint8(0x0f), int8(2))
	f.Add([]byte(`{"l":[null],"ll":null,"bytes":["AA==","=",null],"ds":[]}`), uint8(0xff), int8(0))
	f.Add([]byte(`{"Untagged":[{"s":"x","ds":null}],"el":[1e2]}`), uint8(0xff), int8(0))
	f.Add([]byte(`{"bytes":["AAA"],"u32":4294967296}`), uint8(0xff), int8(0))
	f.Add(bytes.Replace(good, []byte(`"a":-128`), []byte(`"a":-129`), 1), uint8(1), int8(0))
	f.Fuzz(func(t *testing.T, b []byte, which uint8, index int8) {
		var full, part dfDoc
		err := Decode(b, &full)
		var picks []Pick
		for k, name := range dfLists {
			if which&(1<<k) != 0 {
				picks = append(picks, Pick{Field: name, Index: int(index) + k%3 - 1})
			}
		}
		if which&0x40 != 0 && picks == nil {
			picks = []Pick{}
		}
		perr := DecodePicked(b, &part, picks)
		if errcode.Of(err) != errcode.Of(perr) {
			t.Fatalf("Decode: %v; DecodePicked: %v\n%q", err, perr, b)
		}
		if err != nil {
			return
		}
		want := full
		wv := reflect.ValueOf(&want).Elem()
		fv := reflect.ValueOf(&full).Elem()
		for _, p := range picks {
			l := dfValue(fv, p.Field)
			if p.Len != l.Len() {
				t.Fatalf("%s: Len %d, want %d", p.Field, p.Len, l.Len())
			}
			w := dfValue(wv, p.Field)
			switch {
			case l.IsNil():
			case p.Index >= 0 && p.Index < l.Len():
				s := reflect.MakeSlice(l.Type(), 1, 1)
				s.Index(0).Set(l.Index(p.Index))
				w.Set(s)
			default:
				w.Set(reflect.MakeSlice(l.Type(), 0, 0))
			}
		}
		if !reflect.DeepEqual(&want, &part) {
			t.Fatalf("picks %+v:\n got %+v\nwant %+v\n%q", picks, part, want, b)
		}
	})
}
