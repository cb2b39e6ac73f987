package stage

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/cespare/xxhash/v2"

	"github.com/shardproof/shardproof/internal/canon"
	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/internal/pagelimit"
	"github.com/shardproof/shardproof/internal/pqfooter"
	"github.com/shardproof/shardproof/internal/scratchdir"
	"github.com/shardproof/shardproof/objstore"
	"github.com/shardproof/shardproof/tuplehash"
)

// StageOptions configure Stage.
type StageOptions struct {
	// Inputs are source Parquet files carrying the record schema's columns
	// (extra columns are ignored).
	Inputs []string
	// Shards is the number of release shards.
	Shards int
	// Seed is the sort seed recorded in build.sortSeed.
	Seed uint64
	// TempDir holds the spool files of the rows and of the snapshot's
	// tuples, and the sort's files when its keys do not fit in memory
	// (default os.TempDir()).
	TempDir string
	// Options are the common staging settings (Shards is taken from above).
	Options
}

// Stage stages the rows of o.Inputs with DefaultSchema. Every input is
// checked before anything is written: a file that cannot be read or lacks
// required columns is BAD_INPUT naming the file and the missing columns.
//
// Memory holds a run of sort keys (sortRows) and a couple of shards at a
// time: rows are first spooled, per shard, to temporary Arrow IPC files,
// then each shard is read back, put in sort order and written.
func Stage(ctx context.Context, store objstore.Store, o StageOptions) (Result, error) {
	opts := o.Options
	opts.Shards = o.Shards
	if o.Shards < 1 {
		return Result{}, errcode.New(errcode.Usage, "--shards must be at least 1, got %d", o.Shards)
	}
	if len(o.Inputs) == 0 {
		return Result{}, errcode.New(errcode.Usage, "no input files")
	}
	src, err := openInputs(ctx, o.Inputs)
	if err != nil {
		return Result{}, err
	}
	defer src.close()
	src.tempDir = o.TempDir
	return run(ctx, store, DefaultSchema(), src, o.Seed, o.TempDir, opts)
}

// input is one checked source file.
type input struct {
	path string
	cols []int // file column of each schema field
	rows int
	// keys is a checksum of the key columns' values (sampleId, split,
	// tokens) as keys read them: the spool pass, which reads the file
	// again, must find the same ones (keySum).
	keys uint64
}

// keySum is a running checksum of the key columns of an input's rows.
type keySum struct{ d *xxhash.Digest }

func newKeySum() keySum { return keySum{xxhash.New()} }

func (k keySum) add(rec arrow.RecordBatch, id, split, tokens int) {
	ids := rec.Column(id).(*array.String)
	sp := rec.Column(split).(*array.String)
	tk := rec.Column(tokens).(*array.Int64)
	var b [8]byte
	for i := 0; i < ids.Len(); i++ {
		for _, v := range [...]string{ids.Value(i), sp.Value(i)} {
			binary.LittleEndian.PutUint64(b[:], uint64(len(v)))
			k.d.Write(b[:])
			k.d.WriteString(v)
		}
		binary.LittleEndian.PutUint64(b[:], uint64(tk.Value(i)))
		k.d.Write(b[:])
	}
}

// fileSource stages Parquet inputs. After partition, the spool file of
// shard j (spoolPath) holds its rows, each with its global row index.
type fileSource struct {
	schema  *arrow.Schema
	inputs  []input
	rows    int
	tempDir string
	dir     string
	held    *scratchdir.Dir
}

// inputStreamBuffer is the read buffer of each input column chunk's page
// stream. Unbuffered, arrow-go reads a whole column chunk into memory
// before its first page: a DuckDB row group of 120,000 texts of 8 KB is
// a 500 MB text chunk, and so was stage's memory, however few rows it
// batched.
const inputStreamBuffer = 1 << 20

// maxInputPageBytes bounds an input's page, compressed or not, as the
// reader allocates for it. arrow-go's default allows 64 MiB compressed,
// which refused DuckDB's pages of up to 100 MB of long texts written
// uncompressed (or barely compressible); a page is only as large as its
// writer made it. A page is also bounded by its chunk's bytes, at most
// its file's size, and what its codec can make of them
// (pagelimit.File): the reader allocates a page's declared sizes before
// it reads the page, and a 1 KB file whose page header declared 200 MiB
// allocated 200 MiB before the read failed.
const maxInputPageBytes = 256 << 20

// openFile opens a Parquet input under recover: a malformed file must not
// crash the writer.
func openFile(path string, fn func(fr *pqarrow.FileReader) error) (err error) {
	f, err := os.Open(path)
	if err != nil {
		return errcode.Wrap(errcode.BadInput, err, "input %s", path)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return errcode.Wrap(errcode.BadInput, err, "input %s", path)
	}
	defer func() {
		if r := recover(); r != nil {
			err = errcode.New(errcode.BadInput, "input %s: not readable Parquet: %v", path, r)
		}
	}()
	props := parquet.NewReaderProperties(memory.DefaultAllocator)
	props.BufferedStreamEnabled, props.BufferSize = true, inputStreamBuffer
	var r parquet.ReaderAtSeeker = f
	if wrapInput != nil {
		r = wrapInput(f)
	}
	// arrow-go allocates each footer list's declared capacity before
	// reading its elements: a 1 KB file declaring 100M row groups made it
	// allocate 762 MiB. pqfooter refuses a count beyond the footer's bytes.
	if err := pqfooter.CheckFile(r, fi.Size()); err != nil {
		return errcode.Wrap(errcode.BadInput, err, "input %s: not Parquet", path)
	}
	pf, err := file.NewParquetReader(r, file.WithReadProps(props))
	if err != nil {
		return errcode.Wrap(errcode.BadInput, err, "input %s: not Parquet", path)
	}
	defer pf.Close()
	// The page readers, made as each row group's columns are read, take
	// their limits from props then.
	props.MaxCompressedPageSize, props.MaxUncompressedPageSize = pagelimit.File(pf.MetaData(), fi.Size(), maxInputPageBytes)
	canon.DropStoredArrowSchema(pf)
	fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{}, memory.DefaultAllocator)
	if err != nil {
		return errcode.Wrap(errcode.BadInput, err, "input %s", path)
	}
	return fn(fr)
}

// maxInputRows bounds the rows a footer may claim, and all inputs
// together: a staging order indexes rows with int64 and a shard's rows
// are counted in int, far below this; a footer beyond it is not a real
// file's.
const maxInputRows = 1 << 48

// openInputs checks every input's columns and counts its rows; keys
// reads and checks their values.
func openInputs(ctx context.Context, paths []string) (*fileSource, error) {
	as, err := canon.ArrowSchema(DefaultSchema())
	if err != nil {
		return nil, err
	}
	s := &fileSource{schema: as}
	for _, p := range paths {
		in := input{path: p}
		err := openFile(p, func(fr *pqarrow.FileReader) error {
			got, err := fr.Schema()
			if err != nil {
				return errcode.Wrap(errcode.BadInput, err, "input %s: schema", p)
			}
			if in.cols, err = matchColumns(p, got, as); err != nil {
				return err
			}
			// Record readers take Parquet leaf columns, which differ
			// from Arrow fields once a nested column (a struct, a list)
			// comes before ours: an input with one failed to decode.
			for i, f := range in.cols {
				leaf := fr.Manifest.Fields[f].ColIndex
				if leaf < 0 {
					return errcode.New(errcode.BadInput, "input %s: column %s is not a plain column", p, as.Field(i).Name)
				}
				in.cols[i] = leaf
			}
			// Untrusted: a footer may claim any count.
			n := fr.ParquetReader().NumRows()
			if n < 0 || n > maxInputRows {
				return errcode.New(errcode.BadInput, "input %s: its footer says %d rows", p, n)
			}
			in.rows = int(n)
			return nil
		})
		if err != nil {
			return nil, err
		}
		if s.rows+in.rows > maxInputRows {
			return nil, errcode.New(errcode.BadInput, "input %s: its footer's %d rows make more than %d in all", p, in.rows, maxInputRows)
		}
		s.inputs = append(s.inputs, in)
		s.rows += in.rows
	}
	return s, nil
}

// keys reads the sort keys, plus the values that could make a tuple or a
// total invalid, checked now so that bad input writes nothing.
func (s *fileSource) keys(ctx context.Context, add func(id string) error) error {
	// The release's totals.tokens, which every shard's total is part
	// of: past int64, the shard that overflowed failed only once shards
	// before it were stored.
	var total int64
	for k := range s.inputs {
		in := &s.inputs[k]
		p, rows, sum := in.path, 0, newKeySum()
		err := openFile(p, func(fr *pqarrow.FileReader) error {
			keyCols := []int{in.cols[0], in.cols[3], in.cols[6]}
			return eachBatch(ctx, fr, p, keyCols, func(rec arrow.RecordBatch) error {
				sum.add(rec, 0, 1, 2)
				ids := rec.Column(0).(*array.String)
				split := rec.Column(1).(*array.String)
				tokens := rec.Column(2).(*array.Int64)
				for i := 0; i < ids.Len(); i++ {
					// verify refuses such a shard (DECODE_ERROR): a
					// release of them could never be VERIFIED.
					if !utf8.ValidString(ids.Value(i)) {
						return errcode.New(errcode.BadInput, "input %s: row %d: sample_id is not valid UTF-8", p, rows+i)
					}
					if !utf8.ValidString(split.Value(i)) {
						return errcode.New(errcode.BadInput, "input %s: row %d: split is not valid UTF-8", p, rows+i)
					}
					if len(split.Value(i)) > tuplehash.MaxSplitLen {
						return errcode.New(errcode.BadInput, "input %s: row %d: split longer than %d bytes", p, rows+i, tuplehash.MaxSplitLen)
					}
					if tokens.Value(i) < 0 {
						return errcode.New(errcode.BadInput, "input %s: row %d: negative tokens %d", p, rows+i, tokens.Value(i))
					}
					if total > math.MaxInt64-tokens.Value(i) {
						return errcode.New(errcode.BadInput, "input %s: row %d: tokens %d take the inputs' total past %d", p, rows+i, tokens.Value(i), int64(math.MaxInt64))
					}
					total += tokens.Value(i)
					if err := add(ids.Value(i)); err != nil {
						return err
					}
				}
				rows += ids.Len()
				return nil
			})
		})
		if err != nil {
			return err
		}
		if rows != in.rows {
			return errcode.New(errcode.BadInput, "input %s: %d rows read, its footer says %d", p, rows, in.rows)
		}
		in.keys = sum.d.Sum64()
	}
	return nil
}

// matchColumns maps each wanted field to the file's column of that name.
// A name that two top-level columns carry is BAD_INPUT: which of them
// the user means to stage is not for stage to guess (it took the first).
func matchColumns(path string, got, want *arrow.Schema) ([]int, error) {
	var missing, twice, wrong []string
	cols := make([]int, want.NumFields())
	for i, wf := range want.Fields() {
		idx := got.FieldIndices(wf.Name)
		switch {
		case len(idx) == 0:
			missing = append(missing, wf.Name)
		case len(idx) > 1:
			twice = append(twice, wf.Name)
		case !arrow.TypeEqual(got.Field(idx[0]).Type, wf.Type):
			wrong = append(wrong, wf.Name+" ("+got.Field(idx[0]).Type.String()+", want "+wf.Type.String()+")")
		default:
			cols[i] = idx[0]
		}
	}
	if len(missing) > 0 {
		return nil, errcode.New(errcode.BadInput, "input %s: missing columns: %s", path, strings.Join(missing, ", "))
	}
	if len(twice) > 0 {
		return nil, errcode.New(errcode.BadInput, "input %s: columns named more than once: %s", path, strings.Join(twice, ", "))
	}
	if len(wrong) > 0 {
		return nil, errcode.New(errcode.BadInput, "input %s: wrong column types: %s", path, strings.Join(wrong, ", "))
	}
	return cols, nil
}

func (s *fileSource) Len() int { return s.rows }

// where names the input and the row in it of the source's row.
func (s *fileSource) where(row int64) string {
	for _, in := range s.inputs {
		if row < int64(in.rows) {
			return fmt.Sprintf("%s row %d", in.path, row)
		}
		row -= int64(in.rows)
	}
	return fmt.Sprintf("row %d", row)
}

// maxOpenSpools bounds the spool files written at once (each with its
// write buffer and a batch of rows); more shards take more spool levels,
// not more reads of the inputs.
var maxOpenSpools = 128

// spoolFlushRows and spoolFlushBytes bound the rows an open spool file
// buffers before writing them out: the rows, or the bytes of their
// strings, whichever comes first. Counting rows alone, 128 open files
// held 128 × 2048 rows, which is gigabytes once texts are tens of KB
// (3.3 GB RSS staging 1 GiB of 64 KiB texts in 128 shards), and a
// batch of 1 MiB texts passed the 2 GiB an Arrow string column holds.
const spoolFlushRows = 2048

var spoolFlushBytes = 1 << 20

// Tests watch the spool through these; they are nil otherwise.
var (
	// onInputRead is called each time an input's rows are read.
	onInputRead func(path string)
	// onSpoolSplit is called before a spool file of the given level (1
	// for those the inputs were read into) is split.
	onSpoolSplit func(level int)
	// onSpooled is called once every shard has its spool file, with the
	// levels the deepest shard took and the rows written to spool files.
	onSpooled func(levels int, written int64)
	// onSpoolBatch is called with the rows and string bytes of each
	// batch written to a spool file.
	onSpoolBatch func(rows, bytes int)
	// onInputBatch is called with the rows and decoded bytes (strings'
	// lengths, 8 for each int64) of each batch read from an input.
	onInputBatch func(path string, rows int, bytes int64)
	// wrapInput, if set, is what an input is read through.
	wrapInput func(f *os.File) parquet.ReaderAtSeeker
)

// shardRange is the shards [lo, hi) whose rows one spool file holds.
type shardRange struct{ lo, hi int }

// spoolRanges cuts shards [lo, hi) into at most fan contiguous ranges.
// A range of one shard is that shard's spool file; a larger one is split
// again, by reading only its own file, and one of at most fan^d shards
// reaches its shards in d such splits. With n shards and fan^(L-1) < n
// <= fan^L, each range holds fan^(L-2) shards (shallow) or more, up to
// fan^(L-1) (deep), so the deepest shard takes L levels. Few ranges are
// deep, so that many rows are rewritten only L-1 times, but at least
// fan/8: a file's rows are on disk twice while it is split, and this
// keeps every file under 8/fan of the shards (1/16 at 128).
func spoolRanges(lo, hi, fan int) []shardRange {
	n := hi - lo
	if n <= fan {
		rs := make([]shardRange, n)
		for k := range rs {
			rs[k] = shardRange{lo + k, lo + k + 1}
		}
		return rs
	}
	shallow := 1
	for shallow*fan*fan < n {
		shallow *= fan
	}
	deep := max(1, fan/8)
	for (fan-deep)*shallow+deep*shallow*fan < n {
		deep++
	}
	rs := make([]shardRange, 0, fan)
	for range fan - deep {
		rs = append(rs, shardRange{lo, lo + shallow})
		lo += shallow
	}
	rest := hi - lo
	for k := range deep {
		rs = append(rs, shardRange{lo + k*rest/deep, lo + (k+1)*rest/deep})
	}
	return rs
}

// spoolPath is the file of range r's rows.
func (s *fileSource) spoolPath(r shardRange) string {
	if r.hi-r.lo == 1 {
		return filepath.Join(s.dir, strconv.Itoa(r.lo)+".arrow")
	}
	return filepath.Join(s.dir, strconv.Itoa(r.lo)+"-"+strconv.Itoa(r.hi)+".arrow")
}

// partition spools every row to its shard's file, in levels: one read of
// the inputs spools rows to at most maxOpenSpools files, each holding a
// contiguous range of shards, and each file of more than one shard is
// split the same way by reading only that file, until every shard has a
// file of its own. The inputs are read once whatever the shard count,
// and each row is written to at most ceil(log_maxOpenSpools(shards))
// spool files (spoolRanges). A
// row's shard is found from its sort key among the shards' first keys,
// so no step holds anything per row.
func (s *fileSource) partition(ctx context.Context, order *stagingOrder, seed uint64) error {
	held, err := scratchdir.New(s.tempDir, StageTempPrefix)
	if err != nil {
		return errcode.Wrap(errcode.IO, err, "spool directory")
	}
	s.dir, s.held = held.Path, held
	sp := &spooler{
		s:      s,
		ctx:    ctx,
		order:  order,
		d:      xxhash.NewWithSeed(seed),
		seed:   seed,
		fan:    max(2, maxOpenSpools),
		schema: arrow.NewSchema(append(s.schema.Fields(), arrow.Field{Name: "_row", Type: arrow.PrimitiveTypes.Int64}), nil),
	}
	top := spoolRanges(0, order.shards, sp.fan)
	if err := sp.fromInputs(top); err != nil {
		return err
	}
	for _, r := range top {
		if err := sp.split(r, 1); err != nil {
			return err
		}
	}
	slog.Info("stage: spooled rows by shard", "rows", s.rows, "shards", order.shards, "levels", sp.levels, "rowsWritten", sp.written)
	if onSpooled != nil {
		onSpooled(sp.levels, sp.written)
	}
	return nil
}

// spooler writes the spool levels of one partition.
type spooler struct {
	s      *fileSource
	ctx    context.Context
	order  *stagingOrder
	d      *xxhash.Digest
	seed   uint64
	fan    int
	schema *arrow.Schema
	// levels is the deepest level written, written the rows written to
	// spool files at every level.
	levels  int
	written int64
}

// shardOf returns the shard of the row whose sampleId is id.
func (sp *spooler) shardOf(id string) int {
	return sp.order.shardOf(stagingHash(sp.d, sp.seed, id), id)
}

type spoolWriter struct {
	f  *os.File
	bw *bufio.Writer
	w  *ipc.Writer
	b  *array.RecordBuilder
	// bytes is the length of the strings b holds.
	bytes int
}

func (w *spoolWriter) flush() error {
	rows := w.b.Field(0).Len()
	if rows == 0 {
		return nil
	}
	if onSpoolBatch != nil {
		onSpoolBatch(rows, w.bytes)
	}
	rec := w.b.NewRecordBatch()
	defer rec.Release()
	w.bytes = 0
	return w.w.Write(rec)
}

// spoolSet is the open spool files of one level's ranges.
type spoolSet struct {
	sp     *spooler
	ranges []shardRange
	ws     []*spoolWriter
	rowCol int // the _row field, after the schema's
}

// create opens a spool file for each range, which the caller closes.
func (sp *spooler) create(rs []shardRange, level int) (*spoolSet, error) {
	set := &spoolSet{sp: sp, ranges: rs, ws: make([]*spoolWriter, len(rs)), rowCol: sp.schema.NumFields() - 1}
	sp.levels = max(sp.levels, level)
	for k, r := range rs {
		f, err := os.Create(sp.s.spoolPath(r))
		if err != nil {
			set.close()
			return nil, errcode.Wrap(errcode.IO, err, "spool")
		}
		bw := bufio.NewWriterSize(f, 1<<20)
		set.ws[k] = &spoolWriter{f: f, bw: bw, w: ipc.NewWriter(bw, ipc.WithSchema(sp.schema)), b: array.NewRecordBuilder(memory.DefaultAllocator, sp.schema)}
	}
	return set, nil
}

// add spools row r of cols (the schema's fields, in order), row g of the
// source, to the file of the range holding shard j.
func (set *spoolSet) add(j int, cols []arrow.Array, r int, g int64) error {
	k, _ := slices.BinarySearchFunc(set.ranges, j, func(r shardRange, j int) int {
		if r.hi <= j {
			return -1
		}
		if r.lo > j {
			return 1
		}
		return 0
	})
	w := set.ws[k]
	if err := appendFrom(w.b, cols, r); err != nil {
		return err
	}
	for _, col := range cols {
		if col, ok := col.(*array.String); ok {
			w.bytes += col.ValueLen(r)
		}
	}
	w.b.Field(set.rowCol).(*array.Int64Builder).Append(g)
	set.sp.written++
	if w.b.Field(0).Len() >= spoolFlushRows || w.bytes >= spoolFlushBytes {
		if err := w.flush(); err != nil {
			return errcode.Wrap(errcode.IO, err, "spool")
		}
	}
	return nil
}

// finish writes out and closes every file of the set.
func (set *spoolSet) finish() error {
	for _, w := range set.ws {
		err := w.flush()
		if err == nil {
			err = w.w.Close()
		}
		if err == nil {
			err = w.bw.Flush()
		}
		if err != nil {
			return errcode.Wrap(errcode.IO, err, "spool")
		}
	}
	return nil
}

// close releases the set's builders and closes its files.
func (set *spoolSet) close() {
	for _, w := range set.ws {
		if w != nil {
			w.b.Release()
			w.f.Close()
		}
	}
}

// fromInputs reads every input once and spools its rows to the files of
// ranges rs (level 1).
func (sp *spooler) fromInputs(rs []shardRange) error {
	set, err := sp.create(rs, 1)
	if err != nil {
		return err
	}
	defer set.close()
	// The bytes of each shard's values in each column: a shard is built
	// as one record batch, whose string columns hold at most
	// maxColumnBytes each.
	ncols := sp.s.schema.NumFields()
	colBytes := make([]int64, sp.order.shards*ncols)
	// And of each snapshot member's tuple strings (sample_id,
	// source_id, split): a member file is one record batch too, of a
	// bucket range rather than a shard, so a member may pass the bound
	// where no shard does.
	members, memberOf := sp.order.shards, memberOfBucket(sp.order.shards)
	memberCols := []int{0, 1, 3}
	memberBytes := make([]int64, members*len(memberCols))
	var g int64
	for _, in := range sp.s.inputs {
		start, sum := g, newKeySum()
		err := openFile(in.path, func(fr *pqarrow.FileReader) error {
			return eachBatch(sp.ctx, fr, in.path, in.cols, func(rec arrow.RecordBatch) error {
				if g-start+rec.NumRows() > int64(in.rows) {
					return errInputChanged(in.path)
				}
				sum.add(rec, 0, 3, 6)
				ids := rec.Column(0).(*array.String)
				for r := 0; r < int(rec.NumRows()); r++ {
					j := sp.shardOf(ids.Value(r))
					for c, col := range rec.Columns() {
						if col, ok := col.(*array.String); ok {
							// Every string column is utf8, which Parquet's
							// STRING and Arrow's utf8 say is UTF-8: verify
							// refuses a shard whose sourceId is not
							// (DECODE_ERROR), and hashes lang and text as
							// bytes (docs/FORMATS.md), so a release of
							// them would carry text no UTF-8 reader takes.
							// keys checked sample_id and split; the message
							// names the column, never the value.
							if c != 0 && c != 3 && !utf8.ValidString(col.Value(r)) {
								return errcode.New(errcode.BadInput, "input %s: row %d: %s is not valid UTF-8", in.path, g-start, sp.s.schema.Field(c).Name)
							}
							// A longer value is a Parquet page verify
							// refuses (batchRows): the release could
							// never verify.
							if col.ValueLen(r) > MaxValueBytes {
								return errcode.New(errcode.BadInput, "input %s: row %d: %s value of %d bytes passes %d, the most a Parquet page verify reads holds", in.path, g-start, sp.s.schema.Field(c).Name, col.ValueLen(r), MaxValueBytes)
							}
							if colBytes[j*ncols+c] += int64(col.ValueLen(r)); colBytes[j*ncols+c] > maxColumnBytes {
								return errcode.New(errcode.BadInput, "input %s: row %d: shard %d of %d: %s", in.path, g-start, j, sp.order.shards, columnTooLarge(sp.s.schema.Field(c).Name))
							}
						}
					}
					m := int(memberOf[tuplehash.Bucket(ids.Value(r), tuplehash.DefaultK)])
					for k, c := range memberCols {
						if memberBytes[m*len(memberCols)+k] += int64(rec.Column(c).(*array.String).ValueLen(r)); memberBytes[m*len(memberCols)+k] > maxColumnBytes {
							return errcode.New(errcode.BadInput, "input %s: row %d: member %d of %d: %s", in.path, g-start, m, members, columnTooLarge(sp.s.schema.Field(c).Name))
						}
					}
					if err := set.add(j, rec.Columns(), r, g); err != nil {
						return err
					}
					g++
				}
				return nil
			})
		})
		if err != nil {
			return err
		}
		// Rows placed by keys that are not the ones sorted would be
		// missing from their shards' spools, or staged out of order.
		if g-start != int64(in.rows) || sum.d.Sum64() != in.keys {
			return errInputChanged(in.path)
		}
	}
	return set.finish()
}

func errInputChanged(path string) error {
	return errcode.New(errcode.BadInput, "input %s changed while it was staged (its sampleId, split or tokens values differ between the sort's read and the spool's): stage inputs that nothing writes to", path)
}

// split spools the rows of range r's file, of the given level, to files
// of its subranges and removes it, then splits those in turn; a range of
// one shard is left as that shard's spool file.
func (sp *spooler) split(r shardRange, level int) error {
	if r.hi-r.lo == 1 {
		return nil
	}
	if onSpoolSplit != nil {
		onSpoolSplit(level)
	}
	sub := spoolRanges(r.lo, r.hi, sp.fan)
	if err := sp.splitFile(sp.s.spoolPath(r), sub, level+1); err != nil {
		return err
	}
	for _, c := range sub {
		if err := sp.split(c, level+1); err != nil {
			return err
		}
	}
	return nil
}

// splitFile spools the rows of the spool file path to the files of
// ranges rs, of the given level, and removes path.
func (sp *spooler) splitFile(path string, rs []shardRange, level int) error {
	set, err := sp.create(rs, level)
	if err != nil {
		return err
	}
	defer set.close()
	f, err := os.Open(path)
	if err != nil {
		return errcode.Wrap(errcode.IO, err, "spool")
	}
	defer f.Close()
	rd, err := ipc.NewReader(bufio.NewReaderSize(f, 1<<20))
	if err != nil {
		return errcode.Wrap(errcode.IO, err, "spool")
	}
	defer rd.Release()
	for rd.Next() {
		if err := sp.ctx.Err(); err != nil {
			return errcode.Wrap(errcode.Canceled, err, "spool")
		}
		rec := rd.RecordBatch()
		cols := rec.Columns()
		ids := cols[0].(*array.String)
		rows := cols[len(cols)-1].(*array.Int64)
		for x := 0; x < int(rec.NumRows()); x++ {
			if err := set.add(sp.shardOf(ids.Value(x)), cols[:len(cols)-1], x, rows.Value(x)); err != nil {
				return err
			}
		}
	}
	if err := rd.Err(); err != nil {
		return errcode.Wrap(errcode.IO, err, "spool")
	}
	if err := set.finish(); err != nil {
		return err
	}
	f.Close()
	if err := os.Remove(path); err != nil {
		return errcode.Wrap(errcode.IO, err, "spool")
	}
	return nil
}

// appendFrom appends row r of cols (in schema order) to b's first fields.
func appendFrom(b *array.RecordBuilder, cols []arrow.Array, r int) error {
	for c, col := range cols {
		switch col := col.(type) {
		case *array.String:
			b.Field(c).(*array.StringBuilder).Append(col.Value(r))
		case *array.Int64:
			b.Field(c).(*array.Int64Builder).Append(col.Value(r))
		default:
			return errcode.New(errcode.Internal, "column %d: unexpected Arrow type %s", c, col.DataType())
		}
	}
	return nil
}

// Build reads the spool of shard j, which holds rows idx, and appends
// them in idx order.
func (s *fileSource) Build(j int, idx []int, b *array.RecordBuilder) error {
	f, err := os.Open(s.spoolPath(shardRange{j, j + 1}))
	if err != nil {
		return errcode.Wrap(errcode.IO, err, "spool")
	}
	defer f.Close()
	rd, err := ipc.NewReader(bufio.NewReaderSize(f, 1<<20))
	if err != nil {
		return errcode.Wrap(errcode.IO, err, "spool")
	}
	defer rd.Release()
	type loc struct{ rec, row int32 }
	where := make(map[int]loc, len(idx))
	var recs []arrow.RecordBatch
	defer func() {
		for _, r := range recs {
			r.Release()
		}
	}()
	for rd.Next() {
		rec := rd.RecordBatch()
		rec.Retain()
		recs = append(recs, rec)
		rows := rec.Column(int(rec.NumCols()) - 1).(*array.Int64)
		for r := 0; r < rows.Len(); r++ {
			where[int(rows.Value(r))] = loc{int32(len(recs) - 1), int32(r)}
		}
	}
	if err := rd.Err(); err != nil {
		return errcode.Wrap(errcode.IO, err, "spool")
	}
	for _, g := range idx {
		l, ok := where[g]
		if !ok {
			return errcode.New(errcode.Internal, "row %d missing from spool %d", g, j)
		}
		rec := recs[l.rec]
		// The last spool column is _row, which the shard does not hold.
		if err := appendFrom(b, rec.Columns()[:rec.NumCols()-1], int(l.row)); err != nil {
			return err
		}
	}
	return nil
}

func (s *fileSource) close() {
	if s.held != nil {
		s.held.Remove()
	}
}
