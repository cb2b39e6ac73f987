package manifest

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
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
// only slices and maps may be null. It runs in time linear in len(b) and
// never recurses deeper than t.
func scanDocument(b []byte, t reflect.Type) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	s := scanner{dec: dec}
	if err := s.value(t, nil, 0); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errcode.New(errcode.BadDocument, "trailing data after the document")
	}
	return nil
}

type scanner struct {
	dec *json.Decoder
}

// location locates a value for error messages. It is a chain of parent links
// rendered only when an error is reported, so a successful scan builds no
// strings.
type location struct {
	parent *location
	key    string // object member name, when index < 0
	index  int    // array element index, or -1 for an object member
}

func (p *location) String() string {
	if p == nil {
		return "$"
	}
	if p.index >= 0 {
		return p.parent.String() + "[" + strconv.Itoa(p.index) + "]"
	}
	return p.parent.String() + "." + truncate(p.key)
}

var digestType = reflect.TypeFor[Digest]()

func (s *scanner) token(path *location) (json.Token, error) {
	tok, err := s.dec.Token()
	if err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, errcode.Wrap(errcode.BadDocument, err, "%s: invalid JSON", path)
	}
	return tok, nil
}

func (s *scanner) value(t reflect.Type, path *location, depth int) error {
	tok, err := s.token(path)
	if err != nil {
		return err
	}
	if t == digestType {
		str, ok := tok.(string)
		if !ok {
			return errcode.New(errcode.BadDigest, "%s: a digest must be a JSON string, found %s", path, describe(tok))
		}
		if _, err := ParseDigest(str); err != nil {
			return errcode.New(errcode.BadDigest, "%s: %q is not sha256:<64 lowercase hex>", path, truncate(str))
		}
		return nil
	}
	switch t.Kind() {
	case reflect.Struct, reflect.Map, reflect.Slice:
		if tok == nil && t.Kind() != reflect.Struct {
			return nil
		}
		if depth >= maxDepth {
			return errcode.New(errcode.BadDocument, "%s: nesting deeper than %d", path, maxDepth)
		}
		if t.Kind() == reflect.Slice {
			if tok != json.Delim('[') {
				return wrongType(path, "an array", tok)
			}
			for i := 0; s.dec.More(); i++ {
				if err := s.value(t.Elem(), &location{parent: path, index: i}, depth+1); err != nil {
					return err
				}
			}
			_, err := s.token(path)
			return err
		}
		if tok != json.Delim('{') {
			return wrongType(path, "an object", tok)
		}
		return s.object(t, path, depth)
	case reflect.String:
		if _, ok := tok.(string); !ok {
			return wrongType(path, "a string", tok)
		}
	case reflect.Bool:
		if _, ok := tok.(bool); !ok {
			return wrongType(path, "true or false", tok)
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n, ok := tok.(json.Number)
		if !ok {
			return wrongType(path, "an integer", tok)
		}
		if _, err := strconv.ParseInt(string(n), 10, t.Bits()); err != nil {
			return errcode.New(errcode.BadDocument, "%s: %s is not a %d-bit integer", path, truncate(string(n)), t.Bits())
		}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		n, ok := tok.(json.Number)
		if !ok {
			return wrongType(path, "an integer", tok)
		}
		if strings.HasPrefix(string(n), "-") {
			return errcode.New(errcode.BadCount, "%s: negative value %s", path, truncate(string(n)))
		}
		if _, err := strconv.ParseUint(string(n), 10, t.Bits()); err != nil {
			return errcode.New(errcode.BadDocument, "%s: %s is not a %d-bit unsigned integer", path, truncate(string(n)), t.Bits())
		}
	case reflect.Float32, reflect.Float64:
		n, ok := tok.(json.Number)
		if !ok {
			return wrongType(path, "a number", tok)
		}
		if _, err := strconv.ParseFloat(string(n), t.Bits()); err != nil {
			return errcode.New(errcode.BadDocument, "%s: %s is out of range", path, truncate(string(n)))
		}
	default:
		return errcode.New(errcode.Internal, "%s: manifest scan does not support %s", path, t)
	}
	return nil
}

// object scans the members of an object whose '{' has been read.
func (s *scanner) object(t reflect.Type, path *location, depth int) error {
	var fields map[string]reflect.Type
	if t.Kind() == reflect.Struct {
		fields = jsonFields(t)
	}
	seen := make(map[string]struct{})
	for s.dec.More() {
		tok, err := s.token(path)
		if err != nil {
			return err
		}
		key := tok.(string) // inside an object, Token only yields string keys
		sub := &location{parent: path, key: key, index: -1}
		if _, dup := seen[key]; dup {
			return errcode.New(errcode.BadDocument, "%s: duplicate key", sub)
		}
		seen[key] = struct{}{}
		var elem reflect.Type
		if fields == nil {
			elem = t.Elem()
		} else if elem = fields[key]; elem == nil {
			return errcode.New(errcode.BadDocument, "%s: unknown field", sub)
		}
		if err := s.value(elem, sub, depth+1); err != nil {
			return err
		}
	}
	_, err := s.token(path)
	return err
}

func wrongType(path *location, want string, tok json.Token) error {
	return errcode.New(errcode.BadDocument, "%s: want %s, found %s", path, want, describe(tok))
}

func describe(tok json.Token) string {
	switch v := tok.(type) {
	case nil:
		return "null"
	case json.Delim:
		if v == '{' {
			return "an object"
		}
		return "an array"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case json.Number:
		return "a number"
	}
	return "an unexpected token"
}

var fieldCache sync.Map // reflect.Type → map[string]reflect.Type

// jsonFields maps the exact JSON names of t's exported fields to their types.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	if m, ok := fieldCache.Load(t); ok {
		return m.(map[string]reflect.Type)
	}
	m := make(map[string]reflect.Type, t.NumField())
	for f := range t.Fields() {
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		m[name] = f.Type
	}
	fieldCache.Store(t, m)
	return m
}
