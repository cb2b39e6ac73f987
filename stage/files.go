package stage

import (
	"bufio"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/cespare/xxhash/v2"

	"github.com/shardproof/shardproof/internal/canon"
	"github.com/shardproof/shardproof/internal/errcode"
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
}

// fileSource stages Parquet inputs. After partition, spool[j] holds shard
// j's rows (with their global row index) in input order.
type fileSource struct {
	schema  *arrow.Schema
	inputs  []input
	rows    int
	tempDir string
	dir     string
	held    *scratchdir.Dir
	spool   []string
}

// openFile opens a Parquet input under recover: a malformed file must not
// crash the writer.
func openFile(path string, fn func(fr *pqarrow.FileReader) error) (err error) {
	f, err := os.Open(path)
	if err != nil {
		return errcode.Wrap(errcode.BadInput, err, "input %s", path)
	}
	defer f.Close()
	defer func() {
		if r := recover(); r != nil {
			err = errcode.New(errcode.BadInput, "input %s: not readable Parquet: %v", path, r)
		}
	}()
	pf, err := file.NewParquetReader(f)
	if err != nil {
		return errcode.Wrap(errcode.BadInput, err, "input %s: not Parquet", path)
	}
	defer pf.Close()
	canon.DropStoredArrowSchema(pf)
	fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{BatchSize: 8192}, memory.DefaultAllocator)
	if err != nil {
		return errcode.Wrap(errcode.BadInput, err, "input %s", path)
	}
	return fn(fr)
}

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
			in.rows = int(fr.ParquetReader().NumRows())
			return nil
		})
		if err != nil {
			return nil, err
		}
		s.inputs = append(s.inputs, in)
		s.rows += in.rows
	}
	return s, nil
}

// keys reads the sort keys, plus the values that could make a tuple or a
// total invalid, checked now so that bad input writes nothing.
func (s *fileSource) keys(ctx context.Context, add func(id string) error) error {
	for _, in := range s.inputs {
		p, rows := in.path, 0
		err := openFile(p, func(fr *pqarrow.FileReader) error {
			keyCols := []int{in.cols[0], in.cols[3], in.cols[6]}
			return eachBatch(ctx, fr, p, keyCols, func(rec arrow.RecordBatch) error {
				ids := rec.Column(0).(*array.String)
				split := rec.Column(1).(*array.String)
				tokens := rec.Column(2).(*array.Int64)
				for i := 0; i < ids.Len(); i++ {
					// verify refuses such a shard (DECODE_ERROR): a
					// release of them could never be VERIFIED.
					if !utf8.ValidString(ids.Value(i)) || !utf8.ValidString(split.Value(i)) {
						return errcode.New(errcode.BadInput, "input %s: row %d: sampleId or split is not valid UTF-8", p, rows+i)
					}
					if len(split.Value(i)) > tuplehash.MaxSplitLen {
						return errcode.New(errcode.BadInput, "input %s: row %d: split longer than %d bytes", p, rows+i, tuplehash.MaxSplitLen)
					}
					if tokens.Value(i) < 0 {
						return errcode.New(errcode.BadInput, "input %s: row %d: negative tokens %d", p, rows+i, tokens.Value(i))
					}
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
	}
	return nil
}

// matchColumns maps each wanted field to the file's column of that name.
func matchColumns(path string, got, want *arrow.Schema) ([]int, error) {
	var missing, wrong []string
	cols := make([]int, want.NumFields())
	for i, wf := range want.Fields() {
		idx := got.FieldIndices(wf.Name)
		switch {
		case len(idx) == 0:
			missing = append(missing, wf.Name)
		case !arrow.TypeEqual(got.Field(idx[0]).Type, wf.Type):
			wrong = append(wrong, wf.Name+" ("+got.Field(idx[0]).Type.String()+", want "+wf.Type.String()+")")
		default:
			cols[i] = idx[0]
		}
	}
	if len(missing) > 0 {
		return nil, errcode.New(errcode.BadInput, "input %s: missing columns: %s", path, strings.Join(missing, ", "))
	}
	if len(wrong) > 0 {
		return nil, errcode.New(errcode.BadInput, "input %s: wrong column types: %s", path, strings.Join(wrong, ", "))
	}
	return cols, nil
}

// eachBatch calls fn for every record batch of the given columns; a null
// in any of them is BAD_INPUT.
func eachBatch(ctx context.Context, fr *pqarrow.FileReader, path string, cols []int, fn func(arrow.RecordBatch) error) error {
	rr, err := fr.GetRecordReader(ctx, cols, nil)
	if err != nil {
		return errcode.Wrap(errcode.BadInput, err, "input %s", path)
	}
	defer rr.Release()
	for rr.Next() {
		rec := rr.RecordBatch()
		for i := 0; i < int(rec.NumCols()); i++ {
			if rec.Column(i).NullN() > 0 {
				return errcode.New(errcode.BadInput, "input %s: column %s has nulls", path, rec.ColumnName(i))
			}
		}
		if err := fn(rec); err != nil {
			return err
		}
	}
	if err := rr.Err(); err != nil {
		if ctx.Err() != nil {
			return errcode.Wrap(errcode.Canceled, ctx.Err(), "read %s", path)
		}
		return errcode.Wrap(errcode.BadInput, err, "input %s: read", path)
	}
	return nil
}

func (s *fileSource) Len() int { return s.rows }

// maxOpenSpools bounds the spool files written at once; more shards take
// more passes over the inputs.
var maxOpenSpools = 128

// spoolFlushRows is the rows a shard buffers before writing them out.
const spoolFlushRows = 2048

// partition spools every row to its shard's file. A row's shard is found
// from its sort key among the shards' first keys, so no step holds
// anything per row.
func (s *fileSource) partition(ctx context.Context, order *stagingOrder, seed uint64) error {
	shards := order.shards
	held, err := scratchdir.New(s.tempDir, StageTempPrefix)
	if err != nil {
		return errcode.Wrap(errcode.IO, err, "spool directory")
	}
	s.dir, s.held = held.Path, held
	s.spool = make([]string, shards)
	spoolSchema := arrow.NewSchema(append(s.schema.Fields(), arrow.Field{Name: "_row", Type: arrow.PrimitiveTypes.Int64}), nil)
	for lo := 0; lo < shards; lo += maxOpenSpools {
		if err := s.spoolPass(ctx, spoolSchema, order, seed, lo, min(lo+maxOpenSpools, shards)); err != nil {
			return err
		}
	}
	return nil
}

type spoolWriter struct {
	f  *os.File
	bw *bufio.Writer
	w  *ipc.Writer
	b  *array.RecordBuilder
}

func (w *spoolWriter) flush() error {
	if w.b.Field(0).Len() == 0 {
		return nil
	}
	rec := w.b.NewRecordBatch()
	defer rec.Release()
	return w.w.Write(rec)
}

// spoolPass reads every input once and spools the rows of shards [lo, hi).
func (s *fileSource) spoolPass(ctx context.Context, schema *arrow.Schema, order *stagingOrder, seed uint64, lo, hi int) (err error) {
	ws := make([]*spoolWriter, hi-lo)
	defer func() {
		for _, w := range ws {
			if w != nil {
				w.b.Release()
				w.f.Close()
			}
		}
	}()
	for j := lo; j < hi; j++ {
		s.spool[j] = filepath.Join(s.dir, strconv.Itoa(j)+".arrow")
		f, err := os.Create(s.spool[j])
		if err != nil {
			return errcode.Wrap(errcode.IO, err, "spool")
		}
		bw := bufio.NewWriterSize(f, 1<<20)
		ws[j-lo] = &spoolWriter{f: f, bw: bw, w: ipc.NewWriter(bw, ipc.WithSchema(schema)), b: array.NewRecordBuilder(memory.DefaultAllocator, schema)}
	}
	g := 0
	d := xxhash.NewWithSeed(seed)
	for _, in := range s.inputs {
		err := openFile(in.path, func(fr *pqarrow.FileReader) error {
			return eachBatch(ctx, fr, in.path, in.cols, func(rec arrow.RecordBatch) error {
				ids := rec.Column(0).(*array.String)
				for r := 0; r < int(rec.NumRows()); r++ {
					id := ids.Value(r)
					if j := order.shardOf(stagingHash(d, seed, id), id); j >= lo && j < hi {
						w := ws[j-lo]
						if err := appendFrom(w.b, rec.Columns(), r); err != nil {
							return err
						}
						w.b.Field(len(in.cols)).(*array.Int64Builder).Append(int64(g))
						if w.b.Field(0).Len() >= spoolFlushRows {
							if err := w.flush(); err != nil {
								return errcode.Wrap(errcode.IO, err, "spool")
							}
						}
					}
					g++
				}
				return nil
			})
		})
		if err != nil {
			return err
		}
	}
	for _, w := range ws {
		if err := w.flush(); err != nil {
			return errcode.Wrap(errcode.IO, err, "spool")
		}
		if err := w.w.Close(); err != nil {
			return errcode.Wrap(errcode.IO, err, "spool")
		}
		if err := w.bw.Flush(); err != nil {
			return errcode.Wrap(errcode.IO, err, "spool")
		}
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
	f, err := os.Open(s.spool[j])
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
