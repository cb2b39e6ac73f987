package stage

import (
	"context"
	"os"
	"sort"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/shardproof/shardproof/internal/canon"
	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/objstore"
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
	// Options are the common staging settings (Shards is taken from above).
	Options
}

// Stage stages the rows of o.Inputs with DefaultSchema. Every input is
// checked before anything is written: a file that cannot be read or lacks
// required columns is BAD_INPUT naming the file and the missing columns.
func Stage(ctx context.Context, store objstore.Store, o StageOptions) (Result, error) {
	opts := o.Options
	opts.Shards = o.Shards
	if o.Shards < 1 {
		return Result{}, errcode.New(errcode.Usage, "--shards must be at least 1, got %d", o.Shards)
	}
	if len(o.Inputs) == 0 {
		return Result{}, errcode.New(errcode.Usage, "no input files")
	}
	src, err := loadFiles(ctx, o.Inputs)
	if err != nil {
		return Result{}, err
	}
	defer src.release()
	return run(ctx, store, DefaultSchema(), src, o.Seed, opts)
}

// fileSource holds the projected record batches of the inputs. It keeps
// the rows in memory (Arrow buffers), which bounds Stage to inputs that fit.
type fileSource struct {
	recs  []arrow.RecordBatch
	start []int // start[i] is the global index of recs[i]'s first row
	n     int
}

func loadFiles(ctx context.Context, paths []string) (*fileSource, error) {
	s := &fileSource{}
	as, err := canon.ArrowSchema(DefaultSchema())
	if err != nil {
		return nil, err
	}
	for _, p := range paths {
		if err := s.load(ctx, as, p); err != nil {
			s.release()
			return nil, err
		}
	}
	return s, nil
}

func (s *fileSource) load(ctx context.Context, want *arrow.Schema, path string) (err error) {
	f, err := os.Open(path)
	if err != nil {
		return errcode.Wrap(errcode.BadInput, err, "input %s", path)
	}
	defer f.Close()
	defer func() {
		// A malformed input file must not crash the writer.
		if r := recover(); r != nil {
			err = errcode.New(errcode.BadInput, "input %s: not readable Parquet: %v", path, r)
		}
	}()
	pf, err := file.NewParquetReader(f)
	if err != nil {
		return errcode.Wrap(errcode.BadInput, err, "input %s: not Parquet", path)
	}
	defer pf.Close()
	fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{BatchSize: 8192}, memory.DefaultAllocator)
	if err != nil {
		return errcode.Wrap(errcode.BadInput, err, "input %s", path)
	}
	got, err := fr.Schema()
	if err != nil {
		return errcode.Wrap(errcode.BadInput, err, "input %s: schema", path)
	}
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
		return errcode.New(errcode.BadInput, "input %s: missing columns: %s", path, strings.Join(missing, ", "))
	}
	if len(wrong) > 0 {
		return errcode.New(errcode.BadInput, "input %s: wrong column types: %s", path, strings.Join(wrong, ", "))
	}
	rr, err := fr.GetRecordReader(ctx, cols, nil)
	if err != nil {
		return errcode.Wrap(errcode.BadInput, err, "input %s", path)
	}
	defer rr.Release()
	for rr.Next() {
		rec := rr.RecordBatch()
		for i := range cols {
			if rec.Column(i).NullN() > 0 {
				return errcode.New(errcode.BadInput, "input %s: column %s has nulls", path, want.Field(i).Name)
			}
		}
		// Rebuild with the record schema's field names and nullability.
		rec = array.NewRecordBatch(want, rec.Columns(), rec.NumRows())
		s.recs = append(s.recs, rec)
		s.start = append(s.start, s.n)
		s.n += int(rec.NumRows())
	}
	if err := rr.Err(); err != nil {
		return errcode.Wrap(errcode.BadInput, err, "input %s: read", path)
	}
	return nil
}

func (s *fileSource) release() {
	for _, r := range s.recs {
		r.Release()
	}
	s.recs = nil
}

func (s *fileSource) Len() int { return s.n }

func (s *fileSource) locate(i int) (arrow.RecordBatch, int) {
	k := sort.Search(len(s.start), func(j int) bool { return s.start[j] > i }) - 1
	return s.recs[k], i - s.start[k]
}

func (s *fileSource) SampleID(i int) string {
	rec, r := s.locate(i)
	return rec.Column(0).(*array.String).Value(r)
}

// Build copies rows idx of the inputs into b, column by column.
func (s *fileSource) Build(idx []int, b *array.RecordBuilder) error {
	for _, i := range idx {
		rec, r := s.locate(i)
		for c := 0; c < int(rec.NumCols()); c++ {
			switch col := rec.Column(c).(type) {
			case *array.String:
				b.Field(c).(*array.StringBuilder).Append(col.Value(r))
			case *array.Int64:
				b.Field(c).(*array.Int64Builder).Append(col.Value(r))
			default:
				return errcode.New(errcode.Internal, "column %d: unexpected Arrow type %s", c, col.DataType())
			}
		}
	}
	return nil
}
