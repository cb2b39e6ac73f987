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

// typedCol is a column with its value interface resolved once per batch,
// not per value: a type assertion to an interface for every value of
// every column was about a third of Encoder.Encode's time.
type typedCol struct {
	c   Column
	s   StringColumn
	b   BytesColumn
	i64 Int64Column
	i32 Int32Column
	f64 Float64Column
	bo  BoolColumn
	cc  ContentColumn
}

// resolve returns c as a field with tag t (a content field if content),
// and whether c can be read as one: a content field may also be a
// ContentColumn, whose values were hashed as they were decoded.
func resolve(c Column, t Tag, content bool) (typedCol, bool) {
	tc := typedCol{c: c}
	if content {
		if tc.cc, _ = c.(ContentColumn); tc.cc != nil {
			return tc, true
		}
	}
	var ok bool
	switch t {
	case TagUTF8:
		tc.s, ok = c.(StringColumn)
	case TagBinary:
		tc.b, ok = c.(BytesColumn)
	case TagInt64:
		tc.i64, ok = c.(Int64Column)
	case TagInt32:
		tc.i32, ok = c.(Int32Column)
	case TagFloat64:
		tc.f64, ok = c.(Float64Column)
	case TagBool:
		tc.bo, ok = c.(BoolColumn)
	}
	return tc, ok
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
