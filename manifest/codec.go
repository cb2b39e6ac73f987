package manifest

import (
	"bytes"
	"encoding/json"
	"io"
	"reflect"
	"unicode/utf8"

	"github.com/shardproof/shardproof/internal/errcode"
)

// MaxDocumentSize caps every document shardproof decodes (64 MiB: a release
// of ~200,000 shards).
const MaxDocumentSize = 64 << 20

// Validator is implemented by every document type. Validate returns nil or
// an error whose errcode.Of is a stable code (BAD_DOCUMENT, BAD_DIGEST,
// BAD_COUNT, TOTALS_MISMATCH).
type Validator interface {
	Validate() error
}

// Encode returns the deterministic stored bytes of a document: compact JSON,
// fields in declaration order, map keys sorted, no trailing newline. A
// document type (one with a Validate method) is validated first, so an
// invalid document is never encoded and so never stored.
//
// A document larger than MaxDocumentSize is refused too: no reader would
// accept it.
func Encode(v any) ([]byte, error) {
	isDoc, err := validate(v)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if err := newEncoder(&buf).Encode(v); err != nil {
		return nil, errcode.Wrap(errcode.BadDocument, err, "encode")
	}
	b := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	if isDoc && len(b) > MaxDocumentSize {
		return nil, errcode.New(errcode.DocumentTooLarge, "document would be %d bytes, cap %d", len(b), MaxDocumentSize)
	}
	return b, nil
}

// newEncoder returns the one JSON encoder configuration of stored
// documents: HTML characters are not escaped, so "<" stays one byte.
func newEncoder(w io.Writer) *json.Encoder {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return enc
}

// validate calls v's Validate method, also when v is a document passed by
// value (the method has a pointer receiver), and reports whether v is a
// document at all.
func validate(v any) (bool, error) {
	if x, ok := v.(Validator); ok {
		return true, x.Validate()
	}
	rv := reflect.ValueOf(v)
	if !rv.IsValid() || rv.Kind() == reflect.Pointer {
		return false, nil
	}
	p := reflect.New(rv.Type())
	p.Elem().Set(rv)
	if x, ok := p.Interface().(Validator); ok {
		return true, x.Validate()
	}
	return false, nil
}

// EncodeRelease validates r and returns its stored bytes.
func EncodeRelease(r *Release) ([]byte, error) { return Encode(r) }

// EncodeSnapshot validates s and returns its stored bytes.
func EncodeSnapshot(s *Snapshot) ([]byte, error) { return Encode(s) }

// EncodeFenceLog validates l and returns its stored bytes.
func EncodeFenceLog(l *FenceLog) ([]byte, error) { return Encode(l) }

// EncodeRecordSchema validates s and returns its canonical bytes, whose
// sha256 is the record schema digest.
func EncodeRecordSchema(s *RecordSchema) ([]byte, error) { return Encode(s) }

// EncodeReport validates r and returns its stored bytes.
func EncodeReport(r *Report) ([]byte, error) { return Encode(r) }

// Decode strictly decodes the JSON document b into v, a non-nil pointer,
// by the rules of this package's documents, for documents that other
// packages define (a verification plan, a task's commit record): at most
// MaxDocumentSize bytes of UTF-8 holding exactly one JSON value of v's
// shape, in which every object key is an exact, unrepeated field name,
// every digest parses strictly, unsigned numbers are not negative and only
// slices, maps and the pointers in a slice are null (see scanDocument); then encoding/json decodes
// the values, and a document type (one with a Validate method) is
// validated, as Encode validates it before encoding. encoding/json alone
// keeps the last of duplicate keys and matches keys in any case, where
// another reader of the same bytes may keep the first key or none.
//
// The error's code is BAD_DOCUMENT, BAD_DIGEST, BAD_COUNT or
// DOCUMENT_TOO_LARGE, or the document's Validate's; INTERNAL when v's type
// holds one the scan does not model (see supported).
func Decode(b []byte, v any) error {
	if err := checkBytes(b, MaxDocumentSize); err != nil {
		return err
	}
	return decodeShape(b, v, true)
}

// DecodeJSON decodes b into v, a non-nil pointer, by Decode's rules, but
// with maxSize in place of MaxDocumentSize and without calling a Validate
// method: for JSON that is not a stored document, whose reader sets its
// own cap and checks the values itself (a gate's commands and states, up
// to a gigabyte).
func DecodeJSON(b []byte, v any, maxSize int) error {
	if err := checkBytes(b, maxSize); err != nil {
		return err
	}
	return decodeShape(b, v, false)
}

// A Pick names a top-level list of a document and the one element of it
// DecodePicked decodes.
type Pick struct {
	Field string // the list field's JSON name
	Index int    // the element to decode; none when out of range (-1)
	Len   int    // set by DecodePicked: the list's length in the document
	// Each, if non-nil, is called with every element's bytes (part of
	// the document's, leading whitespace included), k counting from 0,
	// once the scan held the element to the rules, in order, before the
	// rest of the document is scanned: a reader that needs a figure of
	// each element reads it there, without a decode. Its error ends
	// DecodePicked, which returns it as it is. What it read counts only
	// when DecodePicked returns nil: a later part may still fail.
	Each func(k int, elem []byte) error
}

// DecodePicked is Decode for a reader that needs one element of a long
// list in a document, or none: b is held to every rule Decode holds it
// to, as a document of v's type, every element of every list included,
// but each top-level list a pick names is decoded into v holding only the
// element at the pick's Index, as its one element (none when Index is out
// of range; nil when the list is null or absent), and the pick's Len is
// set to the list's length in b. The scan of the whole document costs a
// fraction of decoding it: a reader of one element of a list of
// thousands, or of a document's head alone, skips the rest for that
// fraction, not a full decode.
//
// v must point to a struct that is not a document type (v is not the
// document, so it is not validated), and each pick must name one of its
// list fields: otherwise INTERNAL. Errors are Decode's.
func DecodePicked(b []byte, v any, picks []Pick) error {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() || rv.Elem().Kind() != reflect.Struct {
		return errcode.New(errcode.Internal, "decode into %T: want a non-nil pointer to a struct", v)
	}
	if _, ok := v.(Validator); ok {
		return errcode.New(errcode.Internal, "decode picked elements of %T: a document type is validated whole", v)
	}
	t := rv.Type().Elem()
	fields := jsonFields(t)
	for k := range picks {
		f, ok := fields.byName[picks[k].Field]
		if !ok || f.typ.Kind() != reflect.Slice || f.typ.Elem().Kind() == reflect.Uint8 {
			return errcode.New(errcode.Internal, "decode into %T: %q is not a list field", v, picks[k].Field)
		}
		picks[k].Len = 0
	}
	if err := checkBytes(b, MaxDocumentSize); err != nil {
		return err
	}
	s := newScanner(b)
	s.picking, s.picks = true, picks
	if err := s.document(t); err != nil {
		return err
	}
	// The document again with each picked list cut to its element: the
	// bytes encoding/json decodes, all of them scanned above.
	n := 2
	for _, m := range s.members {
		n += m.val - m.key + 3
		if m.pick < 0 {
			n += m.end - m.val
		} else {
			n += m.elemEnd - m.elem
		}
	}
	part := make([]byte, 0, n)
	part = append(part, '{')
	for k, m := range s.members {
		if k > 0 {
			part = append(part, ',')
		}
		part = append(part, b[m.key:m.val]...)
		switch {
		case m.pick < 0 || b[m.val] == 'n':
			part = append(part, b[m.val:m.end]...)
		default:
			part = append(part, '[')
			part = append(part, b[m.elem:m.elemEnd]...)
			part = append(part, ']')
		}
	}
	part = append(part, '}')
	if err := json.Unmarshal(part, v); err != nil {
		return errcode.Wrap(errcode.BadDocument, err, "decode")
	}
	return nil
}

// decodeStrict decodes one document of v's type from b: size cap, UTF-8,
// schema identifier, exact shape (scanDocument), then encoding/json for the
// values and the document's own Validate.
func decodeStrict(b []byte, schema string, v Validator) error {
	if err := checkBytes(b, MaxDocumentSize); err != nil {
		return err
	}
	if schema != "" {
		if got, ok := peekSchema(b); ok && got != schema {
			return errcode.New(errcode.BadDocument, "schema %q, want %q", truncate(got), schema)
		}
	}
	return decodeShape(b, v, true)
}

// checkBytes checks a document's size and that it is UTF-8: encoding/json
// would turn each invalid byte of a string into U+FFFD, so two strings
// that differ would decode alike.
func checkBytes(b []byte, maxSize int) error {
	if len(b) > maxSize {
		return errcode.New(errcode.DocumentTooLarge, "document is %d bytes, cap %d", len(b), maxSize)
	}
	if !utf8.Valid(b) {
		return errcode.New(errcode.BadDocument, "document is not valid UTF-8")
	}
	return nil
}

// decodeShape scans b against v's type, decodes it into v and, when
// validate is set, validates it when v is a document type.
func decodeShape(b []byte, v any, validate bool) error {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		return errcode.New(errcode.Internal, "decode into %T: want a non-nil pointer", v)
	}
	if err := scanDocument(b, rv.Type().Elem()); err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		// scanDocument accepted the shape, so this is a value encoding/json
		// alone rejects.
		return errcode.Wrap(errcode.BadDocument, err, "decode")
	}
	if x, ok := v.(Validator); ok && validate {
		return x.Validate()
	}
	return nil
}

// peekSchema returns the value of "schema" when it is the document's first
// key, as every encoded document has it. It reads only that far, so a
// document of the wrong kind is named as such before its body is scanned.
func peekSchema(b []byte) (string, bool) {
	dec := json.NewDecoder(bytes.NewReader(b))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return "", false
	}
	if tok, err := dec.Token(); err != nil || tok != "schema" {
		return "", false
	}
	tok, err := dec.Token()
	s, ok := tok.(string)
	return s, err == nil && ok
}

// DecodeRelease strictly decodes and validates a release manifest.
func DecodeRelease(b []byte) (*Release, error) {
	var r Release
	if err := decodeStrict(b, ReleaseSchema, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// DecodeSnapshot strictly decodes and validates a snapshot manifest.
func DecodeSnapshot(b []byte) (*Snapshot, error) {
	var s Snapshot
	if err := decodeStrict(b, SnapshotSchema, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// DecodeFenceLog strictly decodes a tombstone log or benchmark registry;
// schema must be TombstonesSchema or BenchmarkSchema and the document must
// carry that schema.
func DecodeFenceLog(b []byte, schema string) (*FenceLog, error) {
	if schema != TombstonesSchema && schema != BenchmarkSchema {
		return nil, errcode.New(errcode.BadDocument, "%q is not a fence log schema", truncate(schema))
	}
	var l FenceLog
	if err := decodeStrict(b, schema, &l); err != nil {
		return nil, err
	}
	if l.Schema != schema {
		return nil, errcode.New(errcode.BadDocument, "schema %q, want %q", l.Schema, schema)
	}
	return &l, nil
}

// DecodeRecordSchema strictly decodes and validates a record schema, and
// requires b to be its canonical encoding: the record schema digest is
// sha256 of that encoding, and it is what logical digests and tuples
// name, so a schema stored with other bytes (spaces, another field order,
// a trailing newline) would be named by a digest that is not its own.
func DecodeRecordSchema(b []byte) (*RecordSchema, error) {
	var s RecordSchema
	if err := decodeStrict(b, RecordSchemaSchema, &s); err != nil {
		return nil, err
	}
	c, err := EncodeRecordSchema(&s)
	if err != nil {
		return nil, err
	}
	if !bytes.Equal(c, b) {
		return nil, errcode.New(errcode.BadDocument, "record schema is not in its canonical encoding (compact JSON, fields in order, no trailing newline): its digest would not be sha256 of the canonical JSON, %s", Sum(c))
	}
	return &s, nil
}

// DecodeReport strictly decodes and validates a verification report.
func DecodeReport(b []byte) (*Report, error) {
	var r Report
	if err := decodeStrict(b, ReportSchema, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// DecodeAny strictly decodes a document of any known kind, chosen by its
// "schema" field, and returns the schema identifier and a pointer to the
// decoded document (*Release, *Snapshot, *FenceLog, *RecordSchema,
// *Report or *RecheckReport).
func DecodeAny(b []byte) (string, Validator, error) {
	if len(b) > MaxDocumentSize {
		return "", nil, errcode.New(errcode.DocumentTooLarge, "document is %d bytes, cap %d", len(b), MaxDocumentSize)
	}
	schema, err := SchemaOf(b)
	if err != nil {
		return "", nil, err
	}
	var doc Validator
	switch schema {
	case ReleaseSchema:
		doc, err = DecodeRelease(b)
	case SnapshotSchema:
		doc, err = DecodeSnapshot(b)
	case TombstonesSchema, BenchmarkSchema:
		doc, err = DecodeFenceLog(b, schema)
	case RecordSchemaSchema:
		doc, err = DecodeRecordSchema(b)
	case ReportSchema:
		doc, err = DecodeReport(b)
	case RecheckReportSchema:
		doc, err = DecodeRecheckReport(b)
	default:
		return "", nil, errcode.New(errcode.BadDocument, "unknown schema %q", truncate(schema))
	}
	if err != nil {
		return "", nil, err
	}
	return schema, doc, nil
}

// SchemaOf returns a document's top-level "schema" string wherever it is;
// values of other keys are skipped without being kept.
func SchemaOf(b []byte) (string, error) {
	if s, ok := peekSchema(b); ok {
		return s, nil
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return "", errcode.New(errcode.BadDocument, "a document must be a JSON object")
	}
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			return "", errcode.Wrap(errcode.BadDocument, err, "invalid JSON")
		}
		if key == "schema" {
			tok, err := dec.Token()
			if s, ok := tok.(string); err == nil && ok {
				return s, nil
			}
			return "", errcode.New(errcode.BadDocument, "schema: want a string")
		}
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return "", errcode.Wrap(errcode.BadDocument, err, "invalid JSON")
		}
	}
	return "", errcode.New(errcode.BadDocument, "no schema field")
}
