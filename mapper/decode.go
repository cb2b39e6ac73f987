package mapper

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/metadata"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/shardproof/shardproof/internal/canon"
	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/internal/freelist"
	"github.com/shardproof/shardproof/internal/mmapfile"
	"github.com/shardproof/shardproof/internal/pagelimit"
	"github.com/shardproof/shardproof/internal/pqfooter"
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/tuplehash"
)

// Decoder selects how Parquet pages become records.
type Decoder uint8

// Decoders. BenchmarkMapShard compares them; the zero value is the default.
const (
	// DecoderColumnReader reads column chunks with the typed Parquet
	// column readers and hashes content straight from decoded pages.
	DecoderColumnReader Decoder = iota
	// DecoderPQArrow builds Arrow record batches with pqarrow.
	DecoderPQArrow
)

// String names the decoder as the benchmarks do.
func (d Decoder) String() string {
	if d == DecoderPQArrow {
		return "pqarrow"
	}
	return "columnreader"
}

// batchRows is the rows per decoded batch: bounds memory per batch
// whatever a hostile footer claims.
const batchRows = 8192

// maxPageBytes bounds the page size a page header may declare, before
// the reader allocates for it: 64 times the 1 MiB pages stage writes,
// and more than any page stage writes (a page of one long value). A
// page is also bounded by its chunk's bytes (internal/pagelimit).
const maxPageBytes = canon.MaxPageBytes

// pages is the allocator of Parquet page buffers and Arrow arrays: page
// readers allocate and release the same few buffers for every column
// chunk, so released ones are kept for the next (a few per column per
// worker).
var pages = freelist.NewAllocator(32, 0)

// streamBuffer is the read buffer of one column chunk's page stream (see
// decoding.run): big enough for any page header.
const streamBuffer = 32 << 10

// maxRows bounds the rows a footer may declare per file.
const maxRows = 1 << 32

type failure struct {
	code   errcode.Code
	detail string
}

type decodeResult struct {
	failures           []failure
	decoded            bool
	records, tokens    int64
	logicalBytes       int64
	logical, memberSet manifest.Digest
}

// rowRange is n rows of row group group from its row first.
type rowRange struct {
	group    int
	first, n int64
}

// decoding holds what a file must contain.
type decoding struct {
	want          *manifest.RecordSchema
	logicalSchema manifest.Digest // bound into the logical digest
	tupleSchema   manifest.Digest // every tuple's schemaDigest
	// mapping, if non-nil, holds the data being decoded: a fault inside
	// it is the file shrinking under verify, an I/O error, not bad bytes.
	mapping *mmapfile.Mapping

	// hashNanos and tupleNanos are the time spent hashing content values
	// and making tuples (column-reader path; the pqarrow path counts both
	// as tuples).
	hashNanos, tupleNanos int64

	// pick, when set, chooses the rows to decode once the footer parsed
	// (column-reader path only): a partial read, whose records the
	// footer's totals do not describe, so finish's checks are skipped and
	// the file counts as decoded if the chosen rows decode. ok false
	// fails the read as DECODE_ERROR with the detail given.
	pick func(pf *file.Reader) (sel []rowRange, detail string, ok bool)
	only []rowRange
	// tuplesOnly gives each the tuples with zero digests (see
	// canon.ShardHasher.TuplesOnly): a member's partial read.
	tuplesOnly bool
	// keep, when set, holds the file's parsed footer across partial
	// reads (pick) of the same bytes: the first run that parses and checks
	// it without a failure leaves it there, and later runs start from it
	// rather than parsing the footer and the schema again (a third of
	// reading one small bucket of a member). The caller closes it.
	keep *keptFooter
	// props are the reader's properties: readColumns sets their page
	// limits to each chunk's (pagelimit.Chunk) before making its reader,
	// which takes them then.
	props *parquet.ReaderProperties
}

// keptFooter is a file's footer parsed and checked by decoding.run.
type keptFooter struct {
	pf    *file.Reader
	props *parquet.ReaderProperties
}

// Close releases the kept footer.
func (k *keptFooter) Close() {
	if k != nil && k.pf != nil {
		k.pf.Close()
		k.pf = nil
	}
}

func (r *decodeResult) fail(code errcode.Code, format string, args ...any) {
	r.failures = append(r.failures, failure{code, fmt.Sprintf(format, args...)})
}

// run decodes data. It never panics: a panic inside the Parquet or Arrow
// code is a DECODE_ERROR (or FOOTER_CORRUPT while reading the footer).
func (d *decoding) run(ctx context.Context, data []byte, dec Decoder, each func(*tuplehash.Tuple, [32]byte) error) (res decodeResult, err error) {
	phase := errcode.FooterCorrupt
	defer func() {
		if p := recover(); p != nil {
			res.decoded = false
			if d.mapping.Fault(p) {
				err = errMapFault
				return
			}
			res.fail(phase, "panic while decoding: %v", p)
		}
	}()
	if d.keep != nil && d.keep.pf != nil && d.pick != nil && dec == DecoderColumnReader {
		phase = errcode.DecodeError
		d.props = d.keep.props
		return d.runKept(ctx, d.keep.pf, each)
	}
	footerStart, ok := checkFooter(data, &res)
	if !ok {
		return res, nil
	}
	// arrow-go allocates each footer list's declared capacity before
	// reading its elements (763 MiB for a shard whose footer declared
	// 100M row groups), and each schema group's children at its declared
	// num_children (1 GiB for a root declaring 2^26): refuse a count
	// beyond the footer's bytes or elements, and a footer whose decode
	// costs more than its bytes pay for, first.
	if err := pqfooter.Check(data[footerStart : len(data)-8]); err != nil {
		res.fail(errcode.FooterCorrupt, "footer does not parse: %v", err)
		return res, nil
	}
	props := parquet.NewReaderProperties(pages)
	props.MaxCompressedPageSize, props.MaxUncompressedPageSize = maxPageBytes, maxPageBytes
	// Unbuffered, arrow-go copies each whole column chunk out of data
	// into a fresh allocation before reading its pages: a second copy of
	// every stored byte, and most of verify's garbage. Buffered, a page
	// header passes through a small buffer and the page body is read
	// straight from data into the page reader's own (recycled) buffer.
	props.BufferedStreamEnabled, props.BufferSize = true, streamBuffer
	pf, err := file.NewParquetReader(bytes.NewReader(data), file.WithReadProps(props))
	if err != nil {
		res.fail(errcode.FooterCorrupt, "footer does not parse: %v", err)
		return res, nil
	}
	kept := false
	defer func() {
		if !kept {
			pf.Close()
		}
	}()
	bounds, ok := checkChunks(pf, footerStart, &res)
	if !ok {
		return res, nil
	}
	// The reader allocates a page's declared sizes before reading it: no
	// page holds more than its chunk's bytes, nor decompresses to more
	// than its codec makes of them. pqarrow makes its readers itself,
	// with the bounds of the file's largest chunk; readColumns sets each
	// chunk's.
	props.MaxCompressedPageSize, props.MaxUncompressedPageSize = bounds.compressed, bounds.uncompressed
	d.props = props
	canon.DropStoredArrowSchema(pf)
	phase = errcode.DecodeError
	fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{BatchSize: batchRows}, pages)
	if err != nil {
		res.fail(errcode.DecodeError, "Arrow reader: %v", err)
		return res, nil
	}
	as, err := fr.Schema()
	if err != nil {
		res.fail(errcode.SchemaMismatch, "Parquet schema has no Arrow mapping: %v", err)
		return res, nil
	}
	h, used, leaves, ok := d.hasher(pf, canon.FromArrow(as, d.want), &res)
	if !ok {
		return res, nil
	}
	defer h.Release()
	h.TuplesOnly = d.tuplesOnly
	if !d.tuplesOnly {
		// The footer's row count, its row groups' sum (checkChunks), sizes
		// the tuple digests, but no more than a row for each 8 bytes of
		// the file's data: row groups declaring rows their chunks' few
		// bytes cannot hold reserve 4 bytes a byte (the digests grow past
		// the reservation as rows are decoded).
		h.Grow(int(min(pf.NumRows(), 1<<22, footerStart/8)))
	}
	if d.pick != nil {
		sel, detail, ok := d.pick(pf)
		if !ok || dec != DecoderColumnReader {
			res.fail(errcode.DecodeError, "rows not chosen: %s", detail)
			return res, nil
		}
		d.only = sel
		if d.keep != nil && len(res.failures) == 0 && used == d.want && leaves == nil {
			d.keep.pf, d.keep.props, kept = pf, props, true
		}
	}
	if dec == DecoderColumnReader {
		if err := d.readColumns(ctx, pf, used, leaves, h, each); err != nil {
			if ee := (*emitError)(nil); errors.As(err, &ee) || errcode.Of(err) == errcode.Canceled {
				return res, err
			}
			res.fail(errcode.DecodeError, "after %d records: %v", h.Records, err)
			return res, nil
		}
		if d.pick != nil {
			res.decoded, res.records = true, h.Records
			return res, nil
		}
		return d.finish(pf, h, res), nil
	}
	rr, err := fr.GetRecordReader(ctx, leaves, nil)
	if err != nil {
		res.fail(errcode.DecodeError, "record reader: %v", err)
		return res, nil
	}
	defer rr.Release()
	for rr.Next() {
		if err := ctx.Err(); err != nil {
			return res, errcode.Wrap(errcode.Canceled, err, "decode")
		}
		start := time.Now()
		err := h.AddBatch(rr.RecordBatch(), each)
		d.tupleNanos += int64(time.Since(start))
		if err != nil {
			if ee := (*emitError)(nil); errors.As(err, &ee) {
				return res, err
			}
			res.fail(errcode.DecodeError, "record %d: %v", h.Records, err)
			return res, nil
		}
	}
	if err := rr.Err(); err != nil {
		res.fail(errcode.DecodeError, "after %d records: %v", h.Records, err)
		return res, nil
	}
	return d.finish(pf, h, res), nil
}

// runKept is run's partial read (pick) from a footer an earlier run
// parsed and checked without a failure, for the wanted schema: the same
// rows decode the same way, with the same checks of every value.
func (d *decoding) runKept(ctx context.Context, pf *file.Reader, each func(*tuplehash.Tuple, [32]byte) error) (res decodeResult, err error) {
	h, err := canon.NewShardHasher(d.want, d.logicalSchema, d.tupleSchema)
	if err != nil {
		res.fail(errcode.Internal, "record schema: %v", err)
		return res, nil
	}
	defer h.Release()
	h.TuplesOnly = d.tuplesOnly
	sel, detail, ok := d.pick(pf)
	if !ok {
		res.fail(errcode.DecodeError, "rows not chosen: %s", detail)
		return res, nil
	}
	d.only = sel
	if err := d.readColumns(ctx, pf, d.want, nil, h, each); err != nil {
		if ee := (*emitError)(nil); errors.As(err, &ee) || errcode.Of(err) == errcode.Canceled {
			return res, err
		}
		res.fail(errcode.DecodeError, "after %d records: %v", h.Records, err)
		return res, nil
	}
	res.decoded, res.records = true, h.Records
	return res, nil
}

// finish checks the row count against the footer and records the figures.
func (d *decoding) finish(pf *file.Reader, h *canon.ShardHasher, res decodeResult) decodeResult {
	if n := pf.NumRows(); h.Records != n {
		res.fail(errcode.DecodeError, "footer declares %d rows, decoded %d", n, h.Records)
		return res
	}
	res.decoded = true
	res.records, res.tokens, res.logicalBytes = h.Records, h.Tokens, h.LogicalBytes
	res.logical, res.memberSet = h.LogicalDigest(), h.MemberSetDigest()
	return res
}

// hasher returns the ShardHasher for the schema found in the file, the
// schema it hashes and the leaf columns to read (nil: all). A found schema
// other than the wanted one is SCHEMA_MISMATCH; its records are still
// decoded if they can form tuples, which then carry the found schema's
// digest (the reducers report SCHEMA_MIX). Columns of types the canonical
// encoding does not know are skipped then: they cannot be hashed, and the
// shard's logical digest cannot match anyway.
func (d *decoding) hasher(pf *file.Reader, found *manifest.RecordSchema, res *decodeResult) (*canon.ShardHasher, *manifest.RecordSchema, []int, bool) {
	fd, err := canon.SchemaDigest(found)
	if err != nil {
		res.fail(errcode.SchemaMismatch, "found schema cannot be digested: %v", err)
		return nil, nil, nil, false
	}
	wd, err := canon.SchemaDigest(d.want)
	if err != nil {
		res.fail(errcode.Internal, "wanted schema cannot be digested: %v", err)
		return nil, nil, nil, false
	}
	if fd == wd {
		h, err := canon.NewShardHasher(d.want, d.logicalSchema, d.tupleSchema)
		if err != nil {
			res.fail(errcode.Internal, "record schema: %v", err)
			return nil, nil, nil, false
		}
		return h, d.want, nil, true
	}
	res.fail(errcode.SchemaMismatch, "%s", schemaMismatch(wd, fd, d.want, found))
	used := *found
	used.Fields = nil
	var leaves []int
	for _, f := range found.Fields {
		if _, ok := canon.TagOf(f.Type); !ok {
			continue
		}
		leaf := pf.MetaData().Schema.ColumnIndexByName(f.Name)
		if leaf < 0 {
			return nil, nil, nil, false
		}
		used.Fields = append(used.Fields, f)
		leaves = append(leaves, leaf)
	}
	h, err := canon.NewShardHasher(&used, fd, fd)
	if err != nil {
		// No tuple can be formed: the file contributes nothing to the diff.
		return nil, nil, nil, false
	}
	return h, &used, leaves, true
}

// schemaMismatch is a SCHEMA_MISMATCH's detail: the fields and digests
// of the schema wanted and of the one found. One that fits in
// MaxFailureDetail lists every field; otherwise each schema gets half of
// what the rest leaves (the found one also what the wanted one left),
// and lists its first fields (at most maxListedFields) that fit in it,
// then how many more, so the found schema's digest, last, is never cut,
// however long the fields' names.
func schemaMismatch(wd, fd manifest.Digest, want, found *manifest.RecordSchema) string {
	detail := func(w, f string) string {
		return fmt.Sprintf("recordSchema %s has fields [%s]; the file has fields [%s] (schema digest %s)", wd, w, f, fd)
	}
	if s := detail(fieldList(want, -1), fieldList(found, -1)); len(s) <= MaxFailureDetail {
		return s
	}
	w := fieldList(want, (MaxFailureDetail-len(detail("", "")))/2)
	return detail(w, fieldList(found, MaxFailureDetail-len(detail(w, ""))))
}

// fieldList lists s's fields, in at most budget bytes unless budget is
// negative: the first maxListedFields at most that fit, then "and N
// more".
func fieldList(s *manifest.RecordSchema, budget int) string {
	// Room kept for the count of those not listed, whatever their number.
	tail := len(fmt.Sprintf(", and %d more", len(s.Fields)))
	var b strings.Builder
	for i, f := range s.Fields {
		// As the detail will be (asJSON): bytes of a name, or of a
		// found type (a struct's lists its children's names), that are
		// not UTF-8 take 3 bytes each there, and the budget must hold
		// them.
		p := asJSON(f.Name + " " + f.Type)
		if f.Nullable {
			p += "?"
		}
		sep := ""
		if i > 0 {
			sep = ", "
		}
		need := len(sep) + len(p)
		if i < len(s.Fields)-1 {
			need += tail
		}
		if budget >= 0 && (i == maxListedFields || b.Len()+need > budget) {
			fmt.Fprintf(&b, "%sand %d more", sep, len(s.Fields)-i)
			break
		}
		b.WriteString(sep)
		b.WriteString(p)
	}
	return b.String()
}

// maxListedFields is the most fields a SCHEMA_MISMATCH that would pass
// MaxFailureDetail lists of a schema.
const maxListedFields = 16

// checkFooter checks the magic bytes and the footer length against the
// bytes read, before any Parquet code parses them. It returns the offset
// where the footer starts.
func checkFooter(data []byte, res *decodeResult) (int64, bool) {
	n := int64(len(data))
	if n < 12 {
		res.fail(errcode.FooterCorrupt, "file is %d bytes, shorter than magic + footer length + magic (12)", n)
		return 0, false
	}
	if string(data[:4]) != "PAR1" || string(data[n-4:]) != "PAR1" {
		// Which end lacks it, not the bytes there: in a damaged or
		// uncompressed file they may be record text.
		res.fail(errcode.FooterCorrupt, "missing PAR1 magic (head %s, tail %s)", magicState(data[:4]), magicState(data[n-4:]))
		return 0, false
	}
	fl := int64(binary.LittleEndian.Uint32(data[n-8 : n-4]))
	if fl == 0 || fl > n-12 {
		res.fail(errcode.FooterCorrupt, "footer length %d does not fit in %d bytes", fl, n)
		return 0, false
	}
	return n - 8 - fl, true
}

// pageBounds are the largest compressed and uncompressed page sizes the
// chunks of a file allow (pagelimit.Chunk).
type pageBounds struct{ compressed, uncompressed int64 }

// checkChunks checks every row group's row count, every column chunk's
// byte range, and the pages and page index it locates, against the bytes
// before the footer, so no page or index read can reach outside the file
// or into the footer, and returns the page bounds of its largest chunk.
// A chunk of no bytes in a row group of no rows has no range to check.
func checkChunks(pf *file.Reader, footerStart int64, res *decodeResult) (pageBounds, bool) {
	b := pageBounds{1, 1}
	md := pf.MetaData()
	cols := md.Schema.NumColumns()
	var rows int64
	for i := 0; i < md.NumRowGroups(); i++ {
		rg := md.RowGroup(i)
		if rg.NumRows() < 0 || rows+rg.NumRows() > maxRows {
			res.fail(errcode.FooterCorrupt, "row group %d declares %d rows", i, rg.NumRows())
			return b, false
		}
		rows += rg.NumRows()
		if rg.NumColumns() != cols {
			res.fail(errcode.FooterCorrupt, "row group %d has %d column chunks, schema %d columns", i, rg.NumColumns(), cols)
			return b, false
		}
		for j := 0; j < cols; j++ {
			cc, err := rg.ColumnChunk(j)
			if err != nil {
				res.fail(errcode.FooterCorrupt, "row group %d column %d: %v", i, j, err)
				return b, false
			}
			// A bucket read seeks through the offset index, and arrow-go
			// reads a row group's whole page index range (from its
			// chunks' first location to their last one's end) into a
			// buffer of its length before parsing any of it: a member
			// whose footer declared an offset index of 2 GiB allocated
			// 2 GiB for every bucket read that sought.
			for _, ix := range [...]struct {
				what string
				loc  *metadata.IndexLocation
			}{{"offset index", cc.GetOffsetIndexLocation()}, {"column index", cc.GetColumnIndexLocation()}} {
				if l := ix.loc; l != nil && (l.Offset < 4 || l.Length <= 0 || int64(l.Length) > footerStart-l.Offset) {
					res.fail(errcode.FooterCorrupt, "row group %d column %d: %s [%d, +%d) outside the data region [4, %d)", i, j, ix.what, l.Offset, l.Length, footerStart)
					return b, false
				}
			}
			start := cc.DataPageOffset()
			if cc.HasDictionaryPage() && cc.DictionaryPageOffset() > 0 && cc.DictionaryPageOffset() < start {
				start = cc.DictionaryPageOffset()
			}
			size := cc.TotalCompressedSize()
			if rg.NumRows() == 0 && cc.NumValues() == 0 {
				// A row group of no rows, as arrow-go writes a shard of
				// no records: a chunk holds no page, or only its
				// dictionary page, with data page offset 0. Neither is
				// read (reads stop at the row group's row count), but a
				// chunk with bytes must still lie in the data region.
				if size == 0 {
					continue
				}
				if start == 0 && cc.HasDictionaryPage() {
					start = cc.DictionaryPageOffset()
				}
			}
			if start < 4 || size <= 0 || size > footerStart || start > footerStart-size {
				res.fail(errcode.FooterCorrupt, "row group %d column %d: chunk [%d, +%d) outside the data region [4, %d)", i, j, start, size, footerStart)
				return b, false
			}
			// The reader starts at the chunk's first byte, but seeks to
			// its data page offset, and reads its dictionary page at its
			// own: both must lie in the chunk (a row group of no rows may
			// have no data page, at offset 0).
			if dp := cc.DataPageOffset(); (dp != 0 || rg.NumRows() != 0 || cc.NumValues() != 0) && !inChunk(dp, start, size) {
				res.fail(errcode.FooterCorrupt, "row group %d column %d: data page offset %d outside its chunk [%d, +%d)", i, j, dp, start, size)
				return b, false
			}
			if do := cc.DictionaryPageOffset(); cc.HasDictionaryPage() && do > 0 && !inChunk(do, start, size) {
				res.fail(errcode.FooterCorrupt, "row group %d column %d: dictionary page offset %d outside its chunk [%d, +%d)", i, j, do, start, size)
				return b, false
			}
			if cc.NumValues() < 0 || cc.NumValues() > maxRows {
				res.fail(errcode.FooterCorrupt, "row group %d column %d declares %d values", i, j, cc.NumValues())
				return b, false
			}
			c, u := pagelimit.Chunk(cc.Compression(), size, maxPageBytes)
			b = pageBounds{max(b.compressed, c), max(b.uncompressed, u)}
		}
	}
	if n := md.GetNumRows(); n != rows {
		res.fail(errcode.FooterCorrupt, "footer declares %d rows, its row groups %d", n, rows)
		return b, false
	}
	return b, true
}

// inChunk reports whether off lies in the size bytes from start.
func inChunk(off, start, size int64) bool { return off >= start && off-start < size }

// decoders lists every Decoder, for tests and benchmarks.
var decoders = []Decoder{DecoderColumnReader, DecoderPQArrow}

// magicState says whether b is the Parquet magic, without quoting it.
func magicState(b []byte) string {
	if string(b) == "PAR1" {
		return "PAR1"
	}
	return "not PAR1"
}
