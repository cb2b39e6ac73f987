package mapper

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/file"

	"github.com/shardproof/shardproof/internal/canon"
	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/internal/pagelimit"
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/tuplehash"
)

// The column-reader path reads each column chunk with the typed Parquet
// readers, a page at a time, without building Arrow arrays: content bytes
// are hashed straight from the decoded page and never copied, other
// values are copied once into per-batch columns that implement the
// canon column interfaces. All columns of a row group advance together,
// batchRows rows at a time, so memory stays bounded by one batch whatever
// the footer claims.

// pageValues is the most values requested from one page at a time.
const pageValues = 1024

// crColumn is a batch column filled from a Parquet column chunk reader.
type crColumn interface {
	canon.Column
	reset()
	// read appends n rows from r.
	read(r file.ColumnChunkReader, n int64, maxDef int16) error
}

// validity records nulls of a nullable column.
type validity struct {
	nullable bool
	valid    []bool
}

func (v *validity) IsNull(i int) bool { return v.nullable && !v.valid[i] }

// levels reads n rows in page-sized pieces. readPage returns the levels
// and values read, values packed (nulls have a level but no value); put is
// called for each present value in order, null for each null.
func levels(n int64, maxDef int16, defs []int16, readPage func(max int64) (int64, int, error), put func(k int), null func()) error {
	var done int64
	for done < n {
		lv, nv, err := readPage(min(pageValues, n-done))
		if err != nil {
			return err
		}
		if lv == 0 {
			return fmt.Errorf("column chunk ended after %d of %d rows", done, n)
		}
		if maxDef == 0 {
			if int64(nv) != lv {
				return fmt.Errorf("required column: %d values for %d levels", nv, lv)
			}
			for k := 0; k < nv; k++ {
				put(k)
			}
		} else {
			k := 0
			for _, d := range defs[:lv] {
				if d == maxDef {
					if k >= nv {
						return fmt.Errorf("definition levels name more values than the page holds (%d)", nv)
					}
					put(k)
					k++
				} else {
					null()
				}
			}
		}
		done += lv
	}
	return nil
}

// fixedCol is an int64, int32, float64 or bool column.
type fixedCol[T int64 | int32 | float64 | bool] struct {
	validity
	v    []T
	page []T
	defs []int16
}

func (c *fixedCol[T]) Value(i int) T { return c.v[i] }

func (c *fixedCol[T]) reset() { c.v, c.valid = c.v[:0], c.valid[:0] }

func (c *fixedCol[T]) read(r file.ColumnChunkReader, n int64, maxDef int16) error {
	if c.page == nil {
		c.page, c.defs = make([]T, pageValues), make([]int16, pageValues)
	}
	var zero T
	var readPage func(max int64) (int64, int, error)
	// The page slice's element type matches the reader by construction in
	// newColumn; a mismatch is a file whose physical type lies about its
	// logical type, reported as a decode error.
	switch rr := r.(type) {
	case *file.Int64ColumnChunkReader:
		p, ok := any(c.page).([]int64)
		if !ok {
			return fmt.Errorf("column reader %T for a %T column", r, zero)
		}
		readPage = func(max int64) (int64, int, error) { return rr.ReadBatchInPage(max, p, c.defs, nil) }
	case *file.Int32ColumnChunkReader:
		p, ok := any(c.page).([]int32)
		if !ok {
			return fmt.Errorf("column reader %T for a %T column", r, zero)
		}
		readPage = func(max int64) (int64, int, error) { return rr.ReadBatchInPage(max, p, c.defs, nil) }
	case *file.Float64ColumnChunkReader:
		p, ok := any(c.page).([]float64)
		if !ok {
			return fmt.Errorf("column reader %T for a %T column", r, zero)
		}
		readPage = func(max int64) (int64, int, error) { return rr.ReadBatchInPage(max, p, c.defs, nil) }
	case *file.BooleanColumnChunkReader:
		p, ok := any(c.page).([]bool)
		if !ok {
			return fmt.Errorf("column reader %T for a %T column", r, zero)
		}
		readPage = func(max int64) (int64, int, error) { return rr.ReadBatchInPage(max, p, c.defs, nil) }
	default:
		return fmt.Errorf("column reader %T for a %T column", r, zero)
	}
	return levels(n, maxDef, c.defs, readPage,
		func(k int) { c.v = append(c.v, c.page[k]); c.valid = append(c.valid, true) },
		func() { c.v = append(c.v, zero); c.valid = append(c.valid, false) })
}

// bytesCol is a binary column; its values live in one arena per batch.
type bytesCol struct {
	validity
	offs  []int
	arena []byte
	page  []parquet.ByteArray
	defs  []int16
}

func (c *bytesCol) Value(i int) []byte { return c.arena[c.offs[i]:c.offs[i+1]] }

func (c *bytesCol) reset() {
	c.offs, c.arena, c.valid = append(c.offs[:0], 0), c.arena[:0], c.valid[:0]
}

func byteArrayPages(r file.ColumnChunkReader, page *[]parquet.ByteArray, defs *[]int16) (func(max int64) (int64, int, error), error) {
	rr, ok := r.(*file.ByteArrayColumnChunkReader)
	if !ok {
		return nil, fmt.Errorf("column reader %T for a byte array column", r)
	}
	if *page == nil {
		*page, *defs = make([]parquet.ByteArray, pageValues), make([]int16, pageValues)
	}
	p, d := *page, *defs
	// Values alias the decoded page and are consumed before the next page.
	return func(max int64) (int64, int, error) { return rr.ReadBatchInPage(max, p, d, nil) }, nil
}

func (c *bytesCol) read(r file.ColumnChunkReader, n int64, maxDef int16) error {
	readPage, err := byteArrayPages(r, &c.page, &c.defs)
	if err != nil {
		return err
	}
	return levels(n, maxDef, c.defs, readPage,
		func(k int) {
			c.arena = append(c.arena, c.page[k]...)
			c.offs = append(c.offs, len(c.arena))
			c.valid = append(c.valid, true)
		},
		func() { c.offs = append(c.offs, len(c.arena)); c.valid = append(c.valid, false) })
}

// stringCol is a utf8 column.
type stringCol struct{ bytesCol }

func (c *stringCol) Value(i int) string {
	b := c.bytesCol.Value(i)
	return unsafe.String(unsafe.SliceData(b), len(b))
}

// contentCol is the content column: each value is hashed as it is read,
// a page at a time.
type contentCol struct {
	validity
	digests    [][32]byte
	lens       []int
	page       []parquet.ByteArray
	pageDigest [][32]byte
	defs       []int16
	// hashNanos is the time spent hashing, for Timings.ContentDigest.
	hashNanos int64
}

func (c *contentCol) Digest(i int) *[32]byte { return &c.digests[i] }
func (c *contentCol) Len(i int) int          { return c.lens[i] }

func (c *contentCol) reset() { c.digests, c.lens, c.valid = c.digests[:0], c.lens[:0], c.valid[:0] }

func (c *contentCol) read(r file.ColumnChunkReader, n int64, maxDef int16) error {
	readValues, err := byteArrayPages(r, &c.page, &c.defs)
	if err != nil {
		return err
	}
	if c.pageDigest == nil {
		c.pageDigest = make([][32]byte, pageValues)
	}
	readPage := func(max int64) (int64, int, error) {
		lv, nv, err := readValues(max)
		if err == nil {
			start := time.Now()
			canon.ContentDigests(c.pageDigest[:nv], c.page[:nv])
			c.hashNanos += int64(time.Since(start))
		}
		return lv, nv, err
	}
	return levels(n, maxDef, c.defs, readPage,
		func(k int) {
			c.digests = append(c.digests, c.pageDigest[k])
			c.lens = append(c.lens, len(c.page[k]))
			c.valid = append(c.valid, true)
		},
		func() {
			c.digests = append(c.digests, [32]byte{})
			c.lens = append(c.lens, 0)
			c.valid = append(c.valid, false)
		})
}

// newColumns returns one batch column per field of s.
func newColumns(s *manifest.RecordSchema) ([]crColumn, error) {
	cols := make([]crColumn, len(s.Fields))
	for i, f := range s.Fields {
		v := validity{nullable: f.Nullable}
		switch {
		case f.Name == s.Content && s.Content != "":
			cols[i] = &contentCol{validity: v}
		case f.Type == canon.TypeUTF8:
			cols[i] = &stringCol{bytesCol{validity: v}}
		case f.Type == canon.TypeBinary:
			cols[i] = &bytesCol{validity: v}
		case f.Type == canon.TypeInt64:
			cols[i] = &fixedCol[int64]{validity: v}
		case f.Type == canon.TypeInt32:
			cols[i] = &fixedCol[int32]{validity: v}
		case f.Type == canon.TypeFloat64:
			cols[i] = &fixedCol[float64]{validity: v}
		case f.Type == canon.TypeBool:
			cols[i] = &fixedCol[bool]{validity: v}
		default:
			return nil, fmt.Errorf("field %q: type %q has no column reader", f.Name, f.Type)
		}
	}
	return cols, nil
}

// colCache keeps the batch columns of finished files for the next file
// of the same schema: a batch's columns hold about a megabyte of value,
// offset, validity and page buffers, which every file allocated, zeroed
// and left to the collector again (a sixth of verify's allocations).
type colCache struct {
	mu   sync.Mutex
	sets []colSet // most recently returned last
}

type colSet struct {
	key  string
	cols []crColumn
}

// columns is the cache the mapper's files share: at most maxCachedCols
// sets, a couple per worker.
var columns colCache

var maxCachedCols = 2 * runtime.GOMAXPROCS(0)

// schemaKey identifies the column set newColumns makes for s.
func schemaKey(s *manifest.RecordSchema) string {
	var b strings.Builder
	for _, f := range s.Fields {
		fmt.Fprintf(&b, "%q %s %t %t;", f.Name, f.Type, f.Nullable, f.Name == s.Content && s.Content != "")
	}
	return b.String()
}

// get returns a column set for s: a cached one, or new columns.
func (c *colCache) get(s *manifest.RecordSchema) (string, []crColumn, error) {
	key := schemaKey(s)
	c.mu.Lock()
	for i := len(c.sets) - 1; i >= 0; i-- {
		if c.sets[i].key == key {
			cols := c.sets[i].cols
			c.sets = slices.Delete(c.sets, i, i+1)
			c.mu.Unlock()
			return key, cols, nil
		}
	}
	c.mu.Unlock()
	cols, err := newColumns(s)
	return key, cols, err
}

// put keeps cols for the next file of their schema, dropping the oldest
// set when the cache is full.
func (c *colCache) put(key string, cols []crColumn) {
	for _, col := range cols {
		col.reset()
		if cc, ok := col.(*contentCol); ok {
			cc.hashNanos = 0
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.sets) >= maxCachedCols {
		c.sets = slices.Delete(c.sets, 0, 1)
	}
	c.sets = append(c.sets, colSet{key, cols})
}

// readColumns decodes the rows d.only selects (every row group when nil)
// into h, batchRows rows of all columns at a time. s is the schema h was made for; leaves are the file's
// leaf columns of its fields, in order (nil: every leaf, one per field).
// It adds the time spent hashing content and making tuples to d.
func (d *decoding) readColumns(ctx context.Context, pf *file.Reader, s *manifest.RecordSchema, leaves []int, h *canon.ShardHasher, each func(*tuplehash.Tuple, [32]byte) error) error {
	key, cols, err := columns.get(s)
	if err != nil {
		return err
	}
	defer func() {
		for _, c := range cols {
			if cc, ok := c.(*contentCol); ok {
				d.hashNanos += cc.hashNanos
			}
		}
		// Also after an error or a panic (bad bytes, a mapped file that
		// shrank): put resets them, and a column is a set of slices.
		columns.put(key, cols)
	}()
	if leaves == nil {
		if pf.MetaData().Schema.NumColumns() != len(cols) {
			return fmt.Errorf("file has %d leaf columns, schema %d fields", pf.MetaData().Schema.NumColumns(), len(cols))
		}
		leaves = make([]int, len(cols))
		for i := range leaves {
			leaves[i] = i
		}
	}
	view := make([]canon.Column, len(cols))
	for i, c := range cols {
		view[i] = c
	}
	readers := make([]file.ColumnChunkReader, len(cols))
	maxDef := make([]int16, len(cols))
	sel := d.only
	if sel == nil {
		sel = make([]rowRange, pf.NumRowGroups())
		for g := range sel {
			sel[g] = rowRange{g, 0, pf.MetaData().RowGroup(g).NumRows()}
		}
	}
	for _, rr := range sel {
		g := rr.group
		if g < 0 || g >= pf.NumRowGroups() {
			return fmt.Errorf("row group %d of %d", g, pf.NumRowGroups())
		}
		rg := pf.RowGroup(g)
		if n := rg.NumRows(); rr.first < 0 || rr.n < 0 || rr.first > n-rr.n {
			return fmt.Errorf("rows [%d, +%d) of row group %d, which has %d", rr.first, rr.n, g, n)
		}
		if rr.n == 0 {
			continue
		}
		for j := range cols {
			cc, err := rg.MetaData().ColumnChunk(leaves[j])
			if err != nil {
				return fmt.Errorf("row group %d column %d: %w", g, j, err)
			}
			d.props.MaxCompressedPageSize, d.props.MaxUncompressedPageSize = pagelimit.Chunk(cc.Compression(), cc.TotalCompressedSize(), maxPageBytes)
			if readers[j], err = rg.Column(leaves[j]); err != nil {
				return fmt.Errorf("row group %d column %d: %w", g, j, err)
			}
			desc := readers[j].Descriptor()
			if desc.MaxRepetitionLevel() != 0 {
				return fmt.Errorf("row group %d column %d is repeated", g, j)
			}
			maxDef[j] = desc.MaxDefinitionLevel()
			if rr.first > 0 {
				// Through the offset index if the file has one, to the
				// page holding the row; else page by page.
				if err := readers[j].SeekToRow(rr.first); err != nil {
					return fmt.Errorf("row group %d column %d: seek to row %d: %w", g, j, rr.first, err)
				}
			}
		}
		rows := rr.n
		for done := int64(0); done < rows; {
			if err := ctx.Err(); err != nil {
				return errcode.Wrap(errcode.Canceled, err, "decode")
			}
			n := min(batchRows, rows-done)
			for j, c := range cols {
				c.reset()
				if err := c.read(readers[j], n, maxDef[j]); err != nil {
					return fmt.Errorf("row group %d column %d: %w", g, j, err)
				}
			}
			start := time.Now()
			err := h.AddColumns(view, int(n), each)
			d.tupleNanos += int64(time.Since(start))
			if err != nil {
				return err
			}
			done += n
		}
		for _, r := range readers {
			r.Close()
		}
	}
	return nil
}
