package canon

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
)

// Tag is the type tag byte that opens every field of a canonical record.
type Tag byte

// Type tags of the canonical record encoding v1.
const (
	TagUTF8    Tag = 1
	TagBinary  Tag = 2
	TagInt64   Tag = 3
	TagInt32   Tag = 4
	TagFloat64 Tag = 5
	TagBool    Tag = 6
)

// Field type names of manifest.Field.Type, as Arrow spells them.
const (
	TypeUTF8    = "utf8"
	TypeBinary  = "binary"
	TypeInt64   = "int64"
	TypeInt32   = "int32"
	TypeFloat64 = "float64"
	TypeBool    = "bool"
)

var typeTags = map[string]Tag{
	TypeUTF8: TagUTF8, TypeBinary: TagBinary, TypeInt64: TagInt64,
	TypeInt32: TagInt32, TypeFloat64: TagFloat64, TypeBool: TagBool,
}

var arrowTypes = map[string]arrow.DataType{
	TypeUTF8:    arrow.BinaryTypes.String,
	TypeBinary:  arrow.BinaryTypes.Binary,
	TypeInt64:   arrow.PrimitiveTypes.Int64,
	TypeInt32:   arrow.PrimitiveTypes.Int32,
	TypeFloat64: arrow.PrimitiveTypes.Float64,
	TypeBool:    arrow.FixedWidthTypes.Boolean,
}

// TagOf returns the canonical tag of a field type name.
func TagOf(typ string) (Tag, bool) {
	t, ok := typeTags[typ]
	return t, ok
}

// BucketRowGroupsKey is the Parquet footer key-value entry in which a
// member file whose row groups end at bucket boundaries (stage, serializer
// version 4) lists each row group's first and last bucket: "lo-hi" in
// decimal, one per row group in order, comma-separated. It lets verify's
// reducers decode only the row groups of a differing bucket (see package
// snapindex); they trust it no further than the bucket leaves of the rows
// they read.
const BucketRowGroupsKey = "shardproof.bucketRowGroups"

// BucketRunsKey is the Parquet footer key-value entry in which a member
// file (stage, serializer version 5) lists its bucket runs: "bucket:rows"
// in decimal for each run of rows of one bucket within one row group, in
// row order, comma-separated. With the file's page index (offset index),
// it lets a reducer decode only the pages holding one bucket's rows; like
// BucketRowGroupsKey it is trusted no further than the bucket leaves of
// the rows read.
const BucketRunsKey = "shardproof.bucketRuns"

// SnapshotMemberSchema returns the schema of snapshot member files: the
// tuple columns plus content_digest (exactly 32 bytes). It has no content
// column, which is why it is a Go value here and not a validated release
// record schema. Member-file logical digests are computed with it.
func SnapshotMemberSchema() *manifest.RecordSchema {
	return &manifest.RecordSchema{
		Schema: manifest.RecordSchemaSchema,
		Fields: []manifest.Field{
			{Name: "sample_id", Type: TypeUTF8},
			{Name: "source_id", Type: TypeUTF8},
			{Name: "source_version", Type: TypeInt64},
			{Name: "split", Type: TypeUTF8},
			{Name: "content_digest", Type: TypeBinary},
		},
		Tuple: manifest.TupleMap{
			SampleID: "sample_id", SourceID: "source_id",
			SourceVersion: "source_version", Split: "split",
		},
	}
}

// MemberContentColumn is the member-file column holding each tuple's
// logicalContentDigest.
const MemberContentColumn = "content_digest"

// SchemaDigest returns sha256 of the schema's canonical encoding: for a
// valid schema exactly (*manifest.RecordSchema).Digest. Unlike that method
// it also digests schemas that do not validate, because the mapper must
// name the schema it found in a foreign shard (SCHEMA_MIX) even when that
// schema uses types or roles a release schema may not.
func SchemaDigest(s *manifest.RecordSchema) (manifest.Digest, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil {
		return manifest.Digest{}, errcode.Wrap(errcode.BadDocument, err, "encode record schema")
	}
	return sha256.Sum256(bytes.TrimSuffix(buf.Bytes(), []byte("\n"))), nil
}

// Check verifies that s can be encoded: known types, unique names, a
// content column of type utf8 or binary that is not nullable (or none, for
// the member schema), tuple columns of the right types, and an int64 tokens
// column if one is named.
func Check(s *manifest.RecordSchema) error {
	if len(s.Fields) == 0 {
		return errcode.New(errcode.BadDocument, "record schema has no fields")
	}
	seen := make(map[string]manifest.Field, len(s.Fields))
	for _, f := range s.Fields {
		if _, ok := typeTags[f.Type]; !ok {
			return errcode.New(errcode.BadDocument, "field %q: unknown type %q", f.Name, f.Type)
		}
		if _, dup := seen[f.Name]; dup || f.Name == "" {
			return errcode.New(errcode.BadDocument, "field name %q empty or repeated", f.Name)
		}
		seen[f.Name] = f
	}
	want := func(role, name string, types ...string) error {
		f, ok := seen[name]
		if !ok {
			return errcode.New(errcode.BadDocument, "%s column %q is not a field", role, name)
		}
		if !slices.Contains(types, f.Type) {
			return errcode.New(errcode.BadDocument, "%s column %q has type %s, want %v", role, name, f.Type, types)
		}
		return nil
	}
	if s.Content != "" {
		if err := want("content", s.Content, TypeUTF8, TypeBinary); err != nil {
			return err
		}
		if seen[s.Content].Nullable {
			return errcode.New(errcode.BadDocument, "content column %q must not be nullable", s.Content)
		}
	}
	if s.Tokens != "" {
		if err := want("tokens", s.Tokens, TypeInt64); err != nil {
			return err
		}
	}
	for _, c := range []struct{ role, name, typ string }{
		{"tuple sampleId", s.Tuple.SampleID, TypeUTF8},
		{"tuple sourceId", s.Tuple.SourceID, TypeUTF8},
		{"tuple sourceVersion", s.Tuple.SourceVersion, TypeInt64},
		{"tuple split", s.Tuple.Split, TypeUTF8},
	} {
		if err := want(c.role, c.name, c.typ); err != nil {
			return err
		}
	}
	return nil
}

// ArrowSchema returns the Arrow schema of s: one field per record field, in
// order, with s's nullability.
func ArrowSchema(s *manifest.RecordSchema) (*arrow.Schema, error) {
	fields := make([]arrow.Field, len(s.Fields))
	for i, f := range s.Fields {
		t, ok := arrowTypes[f.Type]
		if !ok {
			return nil, errcode.New(errcode.BadDocument, "field %q: unknown type %q", f.Name, f.Type)
		}
		fields[i] = arrow.Field{Name: f.Name, Type: t, Nullable: f.Nullable}
	}
	return arrow.NewSchema(fields, nil), nil
}

// typeName returns the record-schema type name of an Arrow type; types the
// canonical encoding does not know are named by Arrow's own spelling, so a
// schema built from them differs from every encodable schema.
func typeName(t arrow.DataType) string {
	for name, at := range arrowTypes {
		if arrow.TypeEqual(at, t) {
			return name
		}
	}
	return "arrow:" + t.String()
}

// FromArrow describes an Arrow schema found in a shard as a record schema.
// The content, tuple and tokens roles are copied from want where a column
// of that name exists (and cleared otherwise), so a shard written with
// want's schema yields exactly want, and any other shard yields a schema
// whose digest differs from want's.
func FromArrow(as *arrow.Schema, want *manifest.RecordSchema) *manifest.RecordSchema {
	out := &manifest.RecordSchema{Schema: want.Schema}
	names := make(map[string]bool)
	for _, f := range as.Fields() {
		out.Fields = append(out.Fields, manifest.Field{Name: f.Name, Type: typeName(f.Type), Nullable: f.Nullable})
		names[f.Name] = true
	}
	keep := func(n string) string {
		if names[n] {
			return n
		}
		return ""
	}
	out.Content = keep(want.Content)
	out.Tokens = keep(want.Tokens)
	out.Tuple = manifest.TupleMap{
		SampleID: keep(want.Tuple.SampleID), SourceID: keep(want.Tuple.SourceID),
		SourceVersion: keep(want.Tuple.SourceVersion), Split: keep(want.Tuple.Split),
	}
	return out
}

// FieldIndex returns the index of the field named name, or -1.
func FieldIndex(s *manifest.RecordSchema, name string) int {
	for i, f := range s.Fields {
		if f.Name == name {
			return i
		}
	}
	return -1
}

// MissingColumns returns the names of s's fields absent from as, in schema
// order (nil when none is missing).
func MissingColumns(s *manifest.RecordSchema, as *arrow.Schema) []string {
	var miss []string
	for _, f := range s.Fields {
		if len(as.FieldIndices(f.Name)) == 0 {
			miss = append(miss, f.Name)
		}
	}
	return miss
}

// String returns the type name of t, as record schemas spell it.
func (t Tag) String() string {
	for name, tt := range typeTags {
		if tt == t {
			return name
		}
	}
	return fmt.Sprintf("tag(%d)", byte(t))
}
