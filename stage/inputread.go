package stage

import (
	"context"
	"io"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/shardproof/shardproof/internal/errcode"
)

// inputBatchBytes bounds the bytes of the rows read from an input at
// once, as decoded (the strings' lengths, 8 for each int64), as
// maxInputBatchRows bounds their number: 8192 rows of 64 KiB texts were
// half a gigabyte a batch, and of 256 KiB texts past the 2 GiB of an
// Arrow string column. A batch holds more only when one row alone does.
//
// The footer's sizes cannot give this bound: a dictionary-encoded column
// of one long text repeated is its dictionary page and a few bits a row,
// on disk and in the footer, and the text times the rows decoded (so is a
// DELTA_BYTE_ARRAY column of texts sharing a long prefix). eachBatch
// therefore reads each column's values as slices of their page or
// dictionary (a slice header each, nothing copied) and ends a batch by
// the lengths of the rows it copies out.
var inputBatchBytes int64 = 16 << 20

const maxInputBatchRows = 8192

// inputReadValues bounds the values one read of a column decodes into
// its page.
const inputReadValues = 1024

// inputColumn is one leaf column of an input as eachBatch reads it, one
// row group at a time.
type inputColumn struct {
	name string
	rd   file.ColumnChunkReader
	// The values of the last read not yet copied to a batch are
	// strs or ints [next:]. Strings alias the page or dictionary they
	// were decoded from, which the reader keeps until its next read, so
	// a column is read again only once they are all copied.
	strs []parquet.ByteArray
	ints []int64
	defs []int16
	next int
	// longest is the longest string read so far, or -1 before the first:
	// it sizes the next read, since a decoder that builds its values
	// (DELTA_BYTE_ARRAY) allocates them all at once: such a read holds
	// about inputBatchBytes unless its values are longer than any before.
	longest int
	sb      *array.StringBuilder
	ib      *array.Int64Builder
}

func (c *inputColumn) pending() int {
	if c.sb != nil {
		return len(c.strs) - c.next
	}
	return len(c.ints) - c.next
}

// read decodes the column's next values, up to the end of the page; none
// at the end of the row group's chunk.
func (c *inputColumn) read(path string) error {
	want := int64(inputReadValues)
	switch {
	case c.sb == nil:
	case c.longest < 0:
		want = 1
	default:
		want = max(1, min(want, inputBatchBytes/int64(c.longest+1)))
	}
	var defs []int16
	if c.rd.Descriptor().MaxDefinitionLevel() > 0 {
		if len(c.defs) < int(want) {
			c.defs = make([]int16, inputReadValues)
		}
		defs = c.defs[:want]
	}
	var (
		lvls int64
		n    int
		err  error
	)
	switch rd := c.rd.(type) {
	case *file.ByteArrayColumnChunkReader:
		if cap(c.strs) < int(want) {
			c.strs = make([]parquet.ByteArray, inputReadValues)
		}
		lvls, n, err = rd.ReadBatchInPage(want, c.strs[:want], defs, nil)
		c.strs = c.strs[:n]
		for _, v := range c.strs {
			c.longest = max(c.longest, len(v))
		}
	case *file.Int64ColumnChunkReader:
		if cap(c.ints) < int(want) {
			c.ints = make([]int64, inputReadValues)
		}
		lvls, n, err = rd.ReadBatchInPage(want, c.ints[:want], defs, nil)
		c.ints = c.ints[:n]
	default:
		return errcode.New(errcode.BadInput, "input %s: column %s: Parquet type %s is not read", path, c.name, c.rd.Type())
	}
	c.next = 0
	if err != nil {
		return errcode.Wrap(errcode.BadInput, err, "input %s: column %s: read", path, c.name)
	}
	if int64(n) < lvls {
		return errcode.New(errcode.BadInput, "input %s: column %s has nulls", path, c.name)
	}
	return nil
}

// size is the decoded length of the column's next value.
func (c *inputColumn) size() int64 {
	if c.sb != nil {
		return int64(len(c.strs[c.next]))
	}
	return 8
}

// copyNext appends the column's next value to its batch.
func (c *inputColumn) copyNext() {
	if c.sb != nil {
		c.sb.BinaryBuilder.Append(c.strs[c.next])
	} else {
		c.ib.Append(c.ints[c.next])
	}
	c.next++
}

func (c *inputColumn) close() {
	if cl, ok := c.rd.(io.Closer); ok {
		cl.Close()
	}
	c.rd, c.strs, c.ints, c.next = nil, c.strs[:0], c.ints[:0], 0
}

// eachBatch calls fn for every record batch of the given leaf columns (each
// a flat BYTE_ARRAY, read as utf8, or INT64 column), in row order, of at
// most maxInputBatchRows rows and inputBatchBytes decoded bytes (or one
// row); a null in any of them is BAD_INPUT, and so is a column whose
// values do not match its row group's row count.
func eachBatch(ctx context.Context, fr *pqarrow.FileReader, path string, leaves []int, fn func(arrow.RecordBatch) error) error {
	if onInputRead != nil {
		onInputRead(path)
	}
	pf := fr.ParquetReader()
	md := pf.MetaData()
	fields := make([]arrow.Field, len(leaves))
	for i, leaf := range leaves {
		if leaf < 0 || leaf >= md.Schema.NumColumns() {
			return errcode.New(errcode.BadInput, "input %s: no column %d", path, leaf)
		}
		d := md.Schema.Column(leaf)
		fields[i].Name = d.Name()
		switch {
		case d.MaxRepetitionLevel() > 0:
			return errcode.New(errcode.BadInput, "input %s: column %s is not a plain column", path, d.Name())
		case d.PhysicalType() == parquet.Types.ByteArray:
			fields[i].Type = arrow.BinaryTypes.String
		case d.PhysicalType() == parquet.Types.Int64:
			fields[i].Type = arrow.PrimitiveTypes.Int64
		default:
			return errcode.New(errcode.BadInput, "input %s: column %s: Parquet type %s is not read", path, d.Name(), d.PhysicalType())
		}
	}
	b := array.NewRecordBuilder(memory.DefaultAllocator, arrow.NewSchema(fields, nil))
	defer b.Release()
	cols := make([]*inputColumn, len(leaves))
	for i, f := range fields {
		cols[i] = &inputColumn{name: f.Name, longest: -1}
		if f.Type.ID() == arrow.STRING {
			cols[i].sb = b.Field(i).(*array.StringBuilder)
		} else {
			cols[i].ib = b.Field(i).(*array.Int64Builder)
		}
	}
	defer func() {
		for _, c := range cols {
			c.close()
		}
	}()
	rows, bytes := 0, int64(0)
	emit := func() error {
		if rows == 0 {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return errcode.Wrap(errcode.Canceled, err, "read %s", path)
		}
		rec := b.NewRecordBatch()
		defer rec.Release()
		rows, bytes = 0, 0
		if onInputBatch != nil {
			var n int64
			for _, col := range rec.Columns() {
				if s, ok := col.(*array.String); ok {
					n += int64(len(s.ValueBytes()))
				} else {
					n += 8 * int64(col.Len())
				}
			}
			onInputBatch(path, int(rec.NumRows()), n)
		}
		return fn(rec)
	}
	for g := range pf.NumRowGroups() {
		if err := ctx.Err(); err != nil {
			return errcode.Wrap(errcode.Canceled, err, "read %s", path)
		}
		rg := pf.RowGroup(g)
		n := rg.NumRows()
		if n < 0 {
			return errcode.New(errcode.BadInput, "input %s: row group %d: its footer says %d rows", path, g, n)
		}
		for i, c := range cols {
			pr, err := rg.GetColumnPageReader(leaves[i])
			if err != nil {
				return errcode.Wrap(errcode.BadInput, err, "input %s: row group %d: column %s", path, g, c.name)
			}
			// The column reader rg.Column makes, reading pages
			// through checkedPages: the one way arrow-go offers to
			// see each page before its decoders allocate by it.
			d := md.Schema.Column(leaves[i])
			//lint:ignore SA1019 rg.Column calls it with these arguments; no other constructor takes a PageReader
			c.rd = file.NewColumnReader(d, &checkedPages{PageReader: pr, descr: d, rows: n}, memory.DefaultAllocator, pf.BufferPool())
		}
		for r := range n {
			var size int64
			for _, c := range cols {
				if c.pending() == 0 {
					if err := c.read(path); err != nil {
						return err
					}
					if c.pending() == 0 {
						return errcode.New(errcode.BadInput, "input %s: row group %d: column %s ends after %d of its footer's %d rows", path, g, c.name, r, n)
					}
				}
				size += c.size()
			}
			if rows > 0 && (rows == maxInputBatchRows || bytes+size > inputBatchBytes) {
				if err := emit(); err != nil {
					return err
				}
			}
			for _, c := range cols {
				c.copyNext()
			}
			rows++
			bytes += size
		}
		for _, c := range cols {
			if c.pending() > 0 || c.rd.HasNext() {
				return errcode.New(errcode.BadInput, "input %s: row group %d: column %s holds more values than its footer's %d rows", path, g, c.name, n)
			}
			if err := c.rd.Err(); err != nil {
				return errcode.Wrap(errcode.BadInput, err, "input %s: row group %d: column %s", path, g, c.name)
			}
			c.close()
		}
	}
	return emit()
}
