package canon

import (
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/shardproof/shardproof/internal/errcode"
)

// Column is one decoded column of a batch of rows. Arrow arrays satisfy
// the typed column interfaces below as they are, so the Arrow path and
// the Parquet column-reader path of the mapper share one encoder.
type Column interface {
	IsNull(i int) bool
}

// StringColumn is a utf8 column (*array.String).
type StringColumn interface {
	Column
	Value(i int) string
}

// BytesColumn is a binary column (*array.Binary).
type BytesColumn interface {
	Column
	Value(i int) []byte
}

// Int64Column is an int64 column (*array.Int64).
type Int64Column interface {
	Column
	Value(i int) int64
}

// Int32Column is an int32 column (*array.Int32).
type Int32Column interface {
	Column
	Value(i int) int32
}

// Float64Column is a float64 column (*array.Float64).
type Float64Column interface {
	Column
	Value(i int) float64
}

// BoolColumn is a bool column (*array.Boolean).
type BoolColumn interface {
	Column
	Value(i int) bool
}

// ContentColumn is a content column whose bytes were hashed as they were
// decoded and not kept: it gives each value's sha256 and length.
type ContentColumn interface {
	Column
	Digest(i int) *[32]byte
	Len(i int) int
}

// Columns returns rec's columns as Columns.
func Columns(rec arrow.RecordBatch) []Column {
	cols := make([]Column, rec.NumCols())
	for i := range cols {
		cols[i] = rec.Column(i)
	}
	return cols
}

// checkColumn reports whether c can be read as a field with tag t.
func checkColumn(c Column, t Tag, content bool) bool {
	if content {
		if _, ok := c.(ContentColumn); ok {
			return true
		}
	}
	var ok bool
	switch t {
	case TagUTF8:
		_, ok = c.(StringColumn)
	case TagBinary:
		_, ok = c.(BytesColumn)
	case TagInt64:
		_, ok = c.(Int64Column)
	case TagInt32:
		_, ok = c.(Int32Column)
	case TagFloat64:
		_, ok = c.(Float64Column)
	case TagBool:
		_, ok = c.(BoolColumn)
	}
	return ok
}

func columnType(c Column) string {
	if a, ok := c.(arrow.Array); ok {
		return a.DataType().String()
	}
	return fmt.Sprintf("%T", c)
}

func errColumn(i int, c Column, t Tag) error {
	return errcode.New(errcode.SchemaMismatch, "column %d has type %s, want %s", i, columnType(c), t)
}
