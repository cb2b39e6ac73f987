package stage

import (
	"github.com/shardproof/shardproof/internal/canon"
	"github.com/shardproof/shardproof/manifest"
)

// DefaultSchema returns the record schema stage and synth write: sample_id,
// source_id, source_version, split, lang, text (the content) and tokens.
func DefaultSchema() *manifest.RecordSchema {
	return &manifest.RecordSchema{
		Schema: manifest.RecordSchemaSchema,
		Fields: []manifest.Field{
			{Name: "sample_id", Type: canon.TypeUTF8},
			{Name: "source_id", Type: canon.TypeUTF8},
			{Name: "source_version", Type: canon.TypeInt64},
			{Name: "split", Type: canon.TypeUTF8},
			{Name: "lang", Type: canon.TypeUTF8},
			{Name: "text", Type: canon.TypeUTF8},
			{Name: "tokens", Type: canon.TypeInt64},
		},
		Content: "text",
		Tokens:  "tokens",
		Tuple: manifest.TupleMap{
			SampleID: "sample_id", SourceID: "source_id",
			SourceVersion: "source_version", Split: "split",
		},
	}
}

// Row is one record of DefaultSchema.
type Row struct {
	SampleID      string
	SourceID      string
	SourceVersion int64
	Split         string
	Lang          string
	Text          string
	Tokens        int64
}
