package raftgate

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"strings"
)

// atEnd reports whether dec, having decoded one document, has nothing but
// white space left. dec.More says no more before a stray ']' or '}' as
// before the end: a backup with one appended restored.
func atEnd(dec *json.Decoder) bool {
	_, err := dec.Token()
	return err == io.EOF
}

// checkKeys walks one JSON value and rejects what encoding/json would let
// through silently: a duplicate key (json keeps the last) and a key that
// matches a field only case-insensitively (json accepts "tYpe" for
// "type"). Unknown keys are left to DisallowUnknownFields, type errors to
// the decoder.
func checkKeys(b []byte, t reflect.Type) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	return walk(dec, t, "")
}

var unmarshalerType = reflect.TypeFor[json.Unmarshaler]()

func walk(dec *json.Decoder, t reflect.Type, path string) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	d, isDelim := tok.(json.Delim)
	if !isDelim {
		return nil
	}
	if t != nil && reflect.PointerTo(t).Implements(unmarshalerType) {
		t = nil // its own decoder judges it; just skip the value
	}
	switch d {
	case '{':
		var fields map[string]reflect.Type
		var elem reflect.Type // a map's values: its keys are data
		if t != nil && t.Kind() == reflect.Struct {
			fields = jsonFields(t)
		} else if t != nil && t.Kind() == reflect.Map {
			elem = t.Elem()
		}
		seen := map[string]bool{}
		for dec.More() {
			kt, err := dec.Token()
			if err != nil {
				return err
			}
			k, _ := kt.(string)
			if seen[k] {
				return fmt.Errorf("duplicate key %q %s", truncate(k), where(path))
			}
			seen[k] = true
			ft := elem
			if fields != nil {
				var ok bool
				if ft, ok = fields[k]; !ok {
					for name := range fields {
						if strings.EqualFold(name, k) {
							return fmt.Errorf("key %q %s must be spelled %q", truncate(k), where(path), name)
						}
					}
				}
			}
			if err := walk(dec, ft, path+"."+k); err != nil {
				return err
			}
		}
	case '[':
		var et reflect.Type
		if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			et = t.Elem()
		}
		for dec.More() {
			if err := walk(dec, et, path+"[]"); err != nil {
				return err
			}
		}
	}
	_, err = dec.Token() // the closing delimiter
	return err
}

// where names the object at path for an error: "at the top level", or
// "in fences.tombstone".
func where(path string) string {
	if path == "" {
		return "at the top level"
	}
	return "in " + strings.TrimPrefix(path, ".")
}

// jsonFields maps the JSON names of t's fields (embedded structs
// flattened) to their types.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if f.Anonymous && f.Type.Kind() == reflect.Struct {
			for k, v := range jsonFields(f.Type) {
				out[k] = v
			}
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = f.Type
	}
	return out
}
