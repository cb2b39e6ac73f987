package manifest

import (
	"bytes"
	"encoding"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/shardproof/shardproof/internal/errcode"
)

// maxDepth caps object/array nesting. The scan is directed by the Go type
// being decoded, so a document can only nest as deep as its type does (at
// most 4 levels today); the cap is a second guard should a recursive type
// ever be added.
const maxDepth = 16

// scanDocument checks b against the shape of t before encoding/json sees
// it, because encoding/json is lenient where shardproof must be strict: it
// keeps the last of duplicate keys, matches keys case-insensitively and
// accepts null for any value. scanDocument requires exactly one JSON value
// of t's shape in which every object key is an exact, unrepeated field
// name, every digest parses strictly, unsigned numbers are not negative and
// only slices, maps and the pointers in a slice may be null (where
// encoding/json writes a nil). It runs in time linear in len(b), stops
// at the first fault and never recurses deeper than t.
//
// It is a small hand-written scanner over b rather than json.Decoder.Token,
// which allocates for every token and made decoding several times slower.
// encoding/json still decodes the values afterwards and re-checks the syntax.
//
// t must be of the types the scan models (supported): a type it does not
// is INTERNAL whatever b holds, so a round trip of any document of t finds
// it, not only one that happens to hold the field.
func scanDocument(b []byte, t reflect.Type) error {
	s := newScanner(b)
	return s.document(t)
}

func newScanner(b []byte) scanner {
	return scanner{b: b, path: make([]pathElem, 0, maxDepth+1)}
}

// document scans one document of t, the whole of s.b.
func (s *scanner) document(t reflect.Type) error {
	if err := supported(t); err != nil {
		return err
	}
	if err := s.value(t); err != nil {
		return err
	}
	if s.peek() != 0 || s.i < len(s.b) {
		return errcode.New(errcode.BadDocument, "trailing data after the document at byte %d", s.i)
	}
	return nil
}

type scanner struct {
	b    []byte
	i    int        // next byte to read
	path []pathElem // the members and elements the scan is in, outermost first

	// base64 is scratch room to check a byte slice's base64 in.
	base64 []byte

	// picking is set for DecodePicked: members then records every
	// top-level member's span, and of each top-level list that one of
	// picks names, the scan records one element's span and the length.
	picking bool
	picks   []Pick
	members []memberSpan
}

// memberSpan locates one top-level member of a document in its bytes.
type memberSpan struct {
	key, val, end int // its name's opening quote, its value's start and end
	pick          int // its index in scanner.picks, or -1
	elem, elemEnd int // the picked element's bytes; elemEnd 0 for none
}

// pathElem is one step of the path to the value being scanned: an object
// member or an array element. The path is a stack the scan pushes and
// pops, rendered only when an error is reported, so a successful scan
// builds no strings and allocates nothing per member.
type pathElem struct {
	key   []byte // object member name, when index < 0
	index int    // array element index, or -1 for an object member
}

// where renders the path to the value being scanned for an error:
// "$", "$.shards[3]".
func (s *scanner) where() string {
	var sb strings.Builder
	sb.WriteString("$")
	for _, p := range s.path {
		if p.index >= 0 {
			sb.WriteString("[" + strconv.Itoa(p.index) + "]")
		} else {
			sb.WriteString("." + truncate(string(p.key)))
		}
	}
	return sb.String()
}

func (s *scanner) push(key []byte, index int) {
	s.path = append(s.path, pathElem{key: key, index: index})
}

func (s *scanner) pop() { s.path = s.path[:len(s.path)-1] }

// syntaxError is malformed JSON, as opposed to well-formed JSON of the
// wrong shape.
type syntaxError struct {
	at   string
	off  int
	what string
}

func (e *syntaxError) Error() string {
	return fmt.Sprintf("%s: invalid JSON at byte %d: %s", e.at, e.off, e.what)
}

// ErrorCode implements errcode.Coder.
func (e *syntaxError) ErrorCode() errcode.Code { return errcode.BadDocument }

func (s *scanner) syntax(what string) error {
	return &syntaxError{at: s.where(), off: s.i, what: what}
}

// peek skips whitespace and returns the next byte, or 0 at the end.
func (s *scanner) peek() byte {
	for s.i < len(s.b) {
		switch c := s.b[s.i]; c {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return c
		}
	}
	return 0
}

// literal consumes the keyword lit ("true", "false" or "null").
func (s *scanner) literal(lit string) error {
	if !bytes.HasPrefix(s.b[s.i:], []byte(lit)) {
		return s.syntax("invalid literal")
	}
	s.i += len(lit)
	return nil
}

// str consumes a string (s.b[s.i] is '"') and returns its contents, decoded
// only when it contains escapes.
func (s *scanner) str() ([]byte, error) {
	s.i++
	start, escaped := s.i, false
	for s.i < len(s.b) {
		switch c := s.b[s.i]; {
		case c == '"':
			raw := s.b[start:s.i]
			s.i++
			if !escaped {
				return raw, nil
			}
			var v string
			if err := json.Unmarshal(s.b[start-1:s.i], &v); err != nil {
				return nil, s.syntax("invalid string")
			}
			return []byte(v), nil
		case c == '\\':
			escaped = true
			if s.i+1 >= len(s.b) {
				return nil, s.syntax("unterminated string")
			}
			switch s.b[s.i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				s.i += 2
			case 'u':
				r, ok := s.hex4(s.i)
				if !ok {
					return nil, s.syntax("invalid \\u escape")
				}
				s.i += 6
				// JSON's grammar allows an unpaired surrogate, and
				// encoding/json would silently turn it into U+FFFD: a
				// sampleId would then name another sample.
				switch {
				case 0xD800 <= r && r < 0xDC00:
					if lo, ok := s.hex4(s.i); !ok || lo < 0xDC00 || lo >= 0xE000 {
						return nil, errcode.New(errcode.BadDocument, "%s: unpaired UTF-16 surrogate \\u%04x", s.where(), r)
					}
					s.i += 6
				case 0xDC00 <= r && r < 0xE000:
					return nil, errcode.New(errcode.BadDocument, "%s: unpaired UTF-16 surrogate \\u%04x", s.where(), r)
				}
			default:
				return nil, s.syntax("invalid escape")
			}
		case c < 0x20:
			return nil, s.syntax("control character in string")
		default:
			s.i++
		}
	}
	return nil, s.syntax("unterminated string")
}

// hex4 decodes the escape \uXXXX starting at s.b[i].
func (s *scanner) hex4(i int) (rune, bool) {
	if i+6 > len(s.b) || s.b[i] != '\\' || s.b[i+1] != 'u' {
		return 0, false
	}
	var r rune
	for _, h := range s.b[i+2 : i+6] {
		switch {
		case '0' <= h && h <= '9':
			r = r<<4 | rune(h-'0')
		case 'a' <= h && h <= 'f':
			r = r<<4 | rune(h-'a'+10)
		case 'A' <= h && h <= 'F':
			r = r<<4 | rune(h-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}

// number consumes a number per the JSON grammar and returns its text.
func (s *scanner) number() ([]byte, error) {
	start := s.i
	digits := func() int {
		n := 0
		for s.i < len(s.b) && '0' <= s.b[s.i] && s.b[s.i] <= '9' {
			s.i++
			n++
		}
		return n
	}
	if s.b[s.i] == '-' {
		s.i++
	}
	intStart := s.i
	if n := digits(); n == 0 || n > 1 && s.b[intStart] == '0' {
		return nil, s.syntax("invalid number")
	}
	if s.i < len(s.b) && s.b[s.i] == '.' {
		s.i++
		if digits() == 0 {
			return nil, s.syntax("invalid number")
		}
	}
	if s.i < len(s.b) && (s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		s.i++
		if s.i < len(s.b) && (s.b[s.i] == '+' || s.b[s.i] == '-') {
			s.i++
		}
		if digits() == 0 {
			return nil, s.syntax("invalid number")
		}
	}
	return s.b[start:s.i], nil
}

var (
	digestType          = reflect.TypeFor[Digest]()
	jsonUnmarshalerType = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshalerType = reflect.TypeFor[encoding.TextUnmarshaler]()
)

var supportCache sync.Map // reflect.Type → error, nil when supported

// supported returns nil when the scan models every type reachable from t
// as encoding/json decodes it: booleans, strings, numbers, Digest, byte
// slices (base64 strings), pointers, slices, maps keyed by strings, and
// structs of such fields, embedded structs' promoted, without the ",string"
// option. Any other type (time.Time, json.RawMessage, a type with its own
// UnmarshalJSON or UnmarshalText, an array, an interface) is INTERNAL: its
// bytes would be judged by a shape the scan does not know.
func supported(t reflect.Type) error {
	if e, ok := supportCache.Load(t); ok {
		err, _ := e.(error)
		return err
	}
	err := supportedType(t, make(map[reflect.Type]bool))
	supportCache.Store(t, err)
	return err
}

func supportedType(t reflect.Type, seen map[reflect.Type]bool) error {
	if t == digestType || seen[t] {
		return nil
	}
	seen[t] = true
	if p := reflect.PointerTo(t); p.Implements(jsonUnmarshalerType) || p.Implements(textUnmarshalerType) {
		return errcode.New(errcode.Internal, "manifest scan does not support %s: it decodes itself", t)
	}
	switch t.Kind() {
	case reflect.Bool, reflect.String,
		reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64:
		return nil
	case reflect.Pointer, reflect.Slice:
		return supportedType(t.Elem(), seen)
	case reflect.Map:
		// encoding/json parses other keys ("1" and "01" both an int 1),
		// so two keys could be one.
		if k := t.Key(); k.Kind() != reflect.String || reflect.PointerTo(k).Implements(textUnmarshalerType) {
			return errcode.New(errcode.Internal, "manifest scan does not support %s: its keys are not strings", t)
		}
		return supportedType(t.Elem(), seen)
	case reflect.Struct:
		fs := jsonFields(t)
		if fs.err != nil {
			return fs.err
		}
		for _, ft := range fs.types {
			if err := supportedType(ft, seen); err != nil {
				return err
			}
		}
		return nil
	}
	return errcode.New(errcode.Internal, "manifest scan does not support %s", t)
}

func (s *scanner) value(t reflect.Type) error {
	c := s.peek()
	if s.i >= len(s.b) {
		return s.syntax("unexpected end of document")
	}
	if t == digestType {
		if c != '"' {
			return errcode.New(errcode.BadDigest, "%s: a digest must be a JSON string, found %s", s.where(), describe(c))
		}
		v, err := s.str()
		if err != nil {
			return err
		}
		if !validDigest(v) {
			return errcode.New(errcode.BadDigest, "%s: %q is not sha256:<64 lowercase hex>", s.where(), truncate(string(v)))
		}
		return nil
	}
	kind := t.Kind()
	if c == 'n' && (kind == reflect.Slice || kind == reflect.Map) {
		return s.literal("null")
	}
	switch kind {
	case reflect.Pointer:
		// An optional object: present means the object itself (null is
		// not a spelling of absent).
		return s.value(t.Elem())
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			// encoding/json writes a []byte as a base64 string, and
			// decodes it as base64.StdEncoding, checked here too: a
			// reader of part of a document (DecodePicked) decodes no
			// more than that part.
			if c != '"' {
				return s.wrongType("a base64 string", c)
			}
			v, err := s.str()
			if err != nil {
				return err
			}
			s.base64 = slices.Grow(s.base64[:0], base64.StdEncoding.DecodedLen(len(v)))
			if _, err := base64.StdEncoding.Decode(s.base64[:cap(s.base64)], v); err != nil {
				return errcode.New(errcode.BadDocument, "%s: not base64: %v", s.where(), err)
			}
			return nil
		}
		if c != '[' {
			return s.wrongType("an array", c)
		}
		if len(s.path) >= maxDepth {
			return errcode.New(errcode.BadDocument, "%s: nesting deeper than %d", s.where(), maxDepth)
		}
		s.i++
		if s.peek() == ']' {
			s.i++
			return nil
		}
		// A top-level list DecodePicked picks from: under the member
		// scanned last.
		var m *memberSpan
		if len(s.path) == 1 && len(s.members) > 0 {
			if m = &s.members[len(s.members)-1]; m.pick < 0 {
				m = nil
			}
		}
		// A list of pointers holds its nil elements as null: encoding/json
		// writes them so (a gate run's attestations, one per rank).
		nilElem := t.Elem().Kind() == reflect.Pointer
		for i := 0; ; i++ {
			start := s.i
			s.push(nil, i)
			var err error
			if nilElem && s.peek() == 'n' {
				err = s.literal("null")
			} else {
				err = s.value(t.Elem())
			}
			if err != nil {
				return err
			}
			s.pop()
			if m != nil {
				if i == s.picks[m.pick].Index {
					m.elem, m.elemEnd = start, s.i
				}
				s.picks[m.pick].Len = i + 1
				if each := s.picks[m.pick].Each; each != nil {
					if err := each(i, s.b[start:s.i]); err != nil {
						return err
					}
				}
			}
			switch s.peek() {
			case ',':
				s.i++
			case ']':
				s.i++
				return nil
			default:
				return s.syntax("want , or ] after an array element")
			}
		}
	case reflect.Struct, reflect.Map:
		if c != '{' {
			return s.wrongType("an object", c)
		}
		if len(s.path) >= maxDepth {
			return errcode.New(errcode.BadDocument, "%s: nesting deeper than %d", s.where(), maxDepth)
		}
		return s.object(t)
	case reflect.String:
		if c != '"' {
			return s.wrongType("a string", c)
		}
		_, err := s.str()
		return err
	case reflect.Bool:
		switch c {
		case 't':
			return s.literal("true")
		case 'f':
			return s.literal("false")
		}
		return s.wrongType("true or false", c)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64:
		if c != '-' && (c < '0' || c > '9') {
			return s.wrongType("a number", c)
		}
		n, err := s.number()
		if err != nil {
			return err
		}
		return s.checkNumber(n, t)
	}
	return errcode.New(errcode.Internal, "%s: manifest scan does not support %s", s.where(), t)
}

// validDigest reports whether v is the strict string form of a digest, as
// ParseDigest would, without making a string of it.
func validDigest(v []byte) bool {
	if len(v) != len(digestPrefix)+64 || string(v[:len(digestPrefix)]) != digestPrefix {
		return false
	}
	for _, c := range v[len(digestPrefix):] {
		if _, ok := lowerHex(c); !ok {
			return false
		}
	}
	return true
}

// plainInteger reports whether the number text n is an integer of at most
// max digits, with a sign when signed allows it: one that fits 64 bits
// without parsing it.
func plainInteger(n []byte, signed bool, max int) bool {
	if signed && len(n) > 0 && n[0] == '-' {
		n = n[1:]
	}
	if len(n) == 0 || len(n) > max {
		return false
	}
	for _, c := range n {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// checkNumber checks that the number text n fits t.
func (s *scanner) checkNumber(n []byte, t reflect.Type) error {
	switch t.Kind() {
	case reflect.Float32, reflect.Float64:
		if _, err := strconv.ParseFloat(string(n), t.Bits()); err != nil {
			return errcode.New(errcode.BadDocument, "%s: %s is out of range", s.where(), truncate(string(n)))
		}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if n[0] == '-' {
			return errcode.New(errcode.BadCount, "%s: negative value %s", s.where(), truncate(string(n)))
		}
		if t.Bits() == 64 && plainInteger(n, false, 19) {
			return nil
		}
		if _, err := strconv.ParseUint(string(n), 10, t.Bits()); err != nil {
			return errcode.New(errcode.BadDocument, "%s: %s is not a %d-bit unsigned integer", s.where(), truncate(string(n)), t.Bits())
		}
	default:
		if t.Bits() == 64 && plainInteger(n, true, 18) {
			return nil
		}
		if _, err := strconv.ParseInt(string(n), 10, t.Bits()); err != nil {
			return errcode.New(errcode.BadDocument, "%s: %s is not a %d-bit integer", s.where(), truncate(string(n)), t.Bits())
		}
	}
	return nil
}

// object scans the members of an object; s.b[s.i] is '{'.
func (s *scanner) object(t reflect.Type) error {
	s.i++
	if s.peek() == '}' {
		s.i++
		return nil
	}
	var (
		fields   *structFields
		seenBits uint64              // struct members seen, by field index
		seenKeys map[string]struct{} // map keys seen
	)
	if t.Kind() == reflect.Struct {
		fields = jsonFields(t)
		if fields.err != nil {
			return fields.err
		}
	} else {
		seenKeys = make(map[string]struct{})
	}
	top := len(s.path) == 0 && s.picking
	for {
		if s.peek() != '"' {
			return s.syntax("want a member name")
		}
		keyStart := s.i
		key, err := s.str()
		if err != nil {
			return err
		}
		s.push(key, -1)
		if s.peek() != ':' {
			return s.syntax("want : after a member name")
		}
		s.i++
		if top {
			// The member's value starts after the whitespace peek skips.
			s.peek()
			m := memberSpan{key: keyStart, val: s.i, pick: -1}
			for k := range s.picks {
				if s.picks[k].Field == string(key) {
					m.pick = k
				}
			}
			s.members = append(s.members, m)
		}
		var elem reflect.Type
		if fields != nil {
			f, ok := fields.byName[string(key)]
			if !ok {
				for name := range fields.byName {
					if strings.EqualFold(name, string(key)) {
						return errcode.New(errcode.BadDocument, "%s: unknown field, must be spelled %q", s.where(), name)
					}
				}
				return errcode.New(errcode.BadDocument, "%s: unknown field", s.where())
			}
			if seenBits&(1<<f.index) != 0 {
				return errcode.New(errcode.BadDocument, "%s: duplicate key", s.where())
			}
			seenBits |= 1 << f.index
			elem = f.typ
		} else {
			if _, dup := seenKeys[string(key)]; dup {
				return errcode.New(errcode.BadDocument, "%s: duplicate key", s.where())
			}
			seenKeys[string(key)] = struct{}{}
			elem = t.Elem()
		}
		if err := s.value(elem); err != nil {
			return err
		}
		s.pop()
		if top {
			s.members[len(s.members)-1].end = s.i
		}
		switch s.peek() {
		case ',':
			s.i++
		case '}':
			s.i++
			return nil
		default:
			return s.syntax("want , or } after an object member")
		}
	}
}

func (s *scanner) wrongType(want string, c byte) error {
	return errcode.New(errcode.BadDocument, "%s: want %s, found %s", s.where(), want, describe(c))
}

// describe names the kind of JSON value that starts with c.
func describe(c byte) string {
	switch {
	case c == 'n':
		return "null"
	case c == '{':
		return "an object"
	case c == '[':
		return "an array"
	case c == '"':
		return "a string"
	case c == 't' || c == 'f':
		return "a boolean"
	case c == '-' || '0' <= c && c <= '9':
		return "a number"
	}
	return "invalid JSON"
}

type structField struct {
	index int
	typ   reflect.Type
}

type structFields struct {
	byName map[string]structField
	types  []reflect.Type // the fields' types, in field order
	err    error
}

var fieldCache sync.Map // reflect.Type → *structFields

// jsonFields maps the exact JSON names of t's exported fields to their
// types and to a bit index used to detect repeated members. The fields of
// an embedded struct (not a pointer, no JSON name) are promoted as
// encoding/json promotes them, so a gate command's Header fields are its
// own. A struct whose names encoding/json resolves by rules the scan does
// not follow (an embedded pointer, two fields of one name at any depth, a
// number in a string) has err set.
func jsonFields(t reflect.Type) *structFields {
	if m, ok := fieldCache.Load(t); ok {
		return m.(*structFields)
	}
	fs := &structFields{byName: make(map[string]structField, t.NumField())}
	fs.add(t, t)
	if fs.err == nil && len(fs.byName) > 64 {
		fs.err = errcode.New(errcode.Internal, "%s has more than 64 JSON fields", t)
	}
	fieldCache.Store(t, fs)
	return fs
}

// add adds the fields of st, top or a struct embedded in it, to fs.
func (fs *structFields) add(top, st reflect.Type) {
	for f := range st.Fields() {
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if f.Anonymous && name == "" {
			ft := f.Type
			if ft.Kind() == reflect.Struct {
				fs.add(top, ft)
				if fs.err != nil {
					return
				}
				continue
			}
			if ft.Kind() == reflect.Pointer && ft.Elem().Kind() == reflect.Struct {
				fs.err = errcode.New(errcode.Internal, "manifest scan does not support %s: field %s is an embedded pointer", top, f.Name)
				return
			}
		}
		if !f.IsExported() || name == "-" && opts == "" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		if _, dup := fs.byName[name]; dup || slices.Contains(strings.Split(opts, ","), "string") {
			fs.err = errcode.New(errcode.Internal, "manifest scan does not support %s: field %s (json %q)", top, f.Name, f.Tag.Get("json"))
			return
		}
		fs.byName[name] = structField{index: len(fs.byName), typ: f.Type}
		fs.types = append(fs.types, f.Type)
	}
}
