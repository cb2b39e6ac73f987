package stage_test

import (
	"strconv"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/cespare/xxhash/v2"

	"github.com/shardproof/shardproof/internal/canon"
	"github.com/shardproof/shardproof/manifest"
)

func memberSchema() *manifest.RecordSchema { return canon.SnapshotMemberSchema() }

// sortKey orders like the recorded sharding function: xxh64 with the seed,
// then sampleId (as fixed-width hex so strings compare like the pair).
func sortKey(seed uint64, id string) string {
	d := xxhash.NewWithSeed(seed)
	d.WriteString(id)
	h := strconv.FormatUint(d.Sum64(), 16)
	for len(h) < 16 {
		h = "0" + h
	}
	return h + "\x00" + id
}

func twoColumnSchema() *manifest.RecordSchema {
	return &manifest.RecordSchema{
		Schema: manifest.RecordSchemaSchema,
		Fields: []manifest.Field{{Name: "sample_id", Type: "utf8"}, {Name: "text", Type: "utf8"}},
	}
}

func projectColumns(t *testing.T, rec arrow.RecordBatch, cols ...int) arrow.RecordBatch {
	t.Helper()
	var fields []arrow.Field
	var arrs []arrow.Array
	for _, c := range cols {
		fields = append(fields, rec.Schema().Field(c))
		arrs = append(arrs, rec.Column(c))
	}
	return array.NewRecordBatch(arrow.NewSchema(fields, nil), arrs, rec.NumRows())
}
