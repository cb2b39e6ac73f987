package stage

import (
	"bytes"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/shardproof/shardproof/internal/canon"
	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
)

// Serializer is the build.serializer of releases written by this package.
const Serializer = "shardproof-stage"

// StageTempPrefix, MembersTempPrefix and SortTempPrefix name the
// temporary directories stage spools source rows, snapshot tuples and the
// runs and shards of an external sort to, in Options' temp directory
// ($TMPDIR by default); each stage removes its own, and the next stage
// removes those whose stage died (internal/scratchdir).
const (
	StageTempPrefix   = "shardproof-stage-"
	MembersTempPrefix = "shardproof-members-"
	SortTempPrefix    = "shardproof-sort-"
)

// SerializerVersion changes whenever the bytes written for the same rows
// and options change.
const SerializerVersion = "6"

// ParquetOptions fix every writer property that influences the bytes.
type ParquetOptions struct {
	// Codec is "zstd" (the default), "snappy", "gzip" or "none".
	Codec string
	// Level is the codec's level: zstd 1–22 (default 3), gzip 1–9
	// (default 6). snappy and none have none; it is recorded as given.
	Level int
	// RowGroupRows caps the rows per row group (default 8192).
	RowGroupRows int64

	// member selects the member file layout (EncodeMemberParquet): small
	// pages and an offset index, so one bucket's rows decode alone.
	member bool
}

func (o ParquetOptions) withDefaults() ParquetOptions {
	if o.Codec == "" {
		o.Codec = "zstd"
	}
	if o.Level == 0 {
		switch o.Codec {
		case "zstd":
			o.Level = 3
		case "gzip":
			o.Level = 6
		}
	}
	if o.RowGroupRows <= 0 {
		o.RowGroupRows = 8192
	}
	return o
}

// Check refuses a codec shardproof does not write and a level the codec
// does not have, after defaults (an empty codec is zstd, level 0 the
// codec's default). The level is recorded in the manifest, so a level the
// codec does not have would name bytes it cannot make (and gzip's writer
// panics on one).
func (o ParquetOptions) Check() error {
	o = o.withDefaults()
	if _, ok := codecs[o.Codec]; !ok {
		return errcode.New(errcode.Usage, "unknown compression %q (want zstd, snappy, gzip or none)", o.Codec)
	}
	lo, hi := 0, 0
	switch o.Codec {
	case "zstd":
		lo, hi = 1, 22
	case "gzip":
		lo, hi = 1, 9
	default:
		// snappy and none have no levels: the writer ignores it, and it
		// is recorded as given, as it always was (the CLI's default, 3,
		// is in the manifests of releases already staged; refusing it
		// would give their inputs another root).
		return nil
	}
	if o.Level < lo || o.Level > hi {
		return errcode.New(errcode.Usage, "compression %s: level %d outside [%d,%d]", o.Codec, o.Level, lo, hi)
	}
	return nil
}

// memberPageRows and memberPageBytes shape member files' pages: the
// writer checks the page size every memberPageRows rows and starts a new
// page past memberPageBytes.
const (
	memberPageRows  = 1024
	memberPageBytes = 32 << 10
)

// maxBatchBytes bounds the plain-encoded values (a 4-byte length and the
// bytes of each string) of one write batch of a string column. The
// writer checks a page against its size (1 MiB, member pages 32 KiB),
// and a dictionary against its page limit (arrow-go's 1 MiB), only after
// each batch of rows, so a page holds up to 1 MiB and one batch: 1,024
// texts of 64 KiB made a page past canon.MaxPageBytes, which verify
// refuses (DECODE_ERROR), so the release could never verify. 1 MiB, 48
// MiB and a page header stay under canon.MaxPageBytes even at the
// codecs' worst-case expansion (snappy's, n/6).
const maxBatchBytes = 48 << 20

// MaxValueBytes is the longest string value stage writes: one alone is a
// write batch (maxBatchBytes with its length). Stage refuses a longer
// one (BAD_INPUT).
const MaxValueBytes = maxBatchBytes - 4

// batchRows is the write batch, in rows, of a file holding rec: def (the
// writer's 1,024, or memberPageRows) when no def consecutive values of a
// string column hold more than maxBatchBytes, which keeps the bytes of
// every file of shorter values as they were; else as many rows as the
// longest value fits in maxBatchBytes. (Files it shortens the batch of,
// whose pages verify refused or came within 16 MiB of the cap, changed
// their bytes without a new SerializerVersion.)
func batchRows(rec arrow.RecordBatch, def int) (int, error) {
	widest, longest := int64(0), 0
	longCol := ""
	for c, col := range rec.Columns() {
		var offs []int32
		switch col := col.(type) {
		case *array.String:
			offs = col.ValueOffsets()
		case *array.Binary:
			offs = col.ValueOffsets()
		default:
			continue
		}
		n := len(offs) - 1
		for i := 0; i < n; i++ {
			if l := int(offs[i+1] - offs[i]); l > longest {
				longest, longCol = l, rec.Schema().Field(c).Name
			}
			j := min(i+def, n)
			widest = max(widest, int64(offs[j]-offs[i])+4*int64(j-i))
		}
	}
	if widest <= maxBatchBytes {
		return def, nil
	}
	if longest > MaxValueBytes {
		return 0, errcode.New(errcode.BadInput, "a %s value of %d bytes passes %d, the most a Parquet page verify reads holds", longCol, longest, MaxValueBytes)
	}
	return min(def, maxBatchBytes/(longest+4)), nil
}

var codecs = map[string]compress.Compression{
	"zstd":   compress.Codecs.Zstd,
	"snappy": compress.Codecs.Snappy,
	"gzip":   compress.Codecs.Gzip,
	"none":   compress.Codecs.Uncompressed,
}

// writerProperties are fixed so that equal rows give equal bytes: a
// constant created_by, no bloom filters, no page index but in member
// files (an offset index, no statistics), dictionaries only for the
// low-cardinality tuple and attribute columns.
//
// batch, if not 0, is the write batch in rows (batchRows).
func writerProperties(s *manifest.RecordSchema, o ParquetOptions, batch int) (*parquet.WriterProperties, error) {
	if err := o.Check(); err != nil {
		return nil, err
	}
	codec := codecs[o.Codec]
	opts := []parquet.WriterProperty{
		parquet.WithCreatedBy(Serializer + " " + SerializerVersion),
		parquet.WithVersion(parquet.V2_6),
		parquet.WithDataPageVersion(parquet.DataPageV1),
		parquet.WithCompression(codec),
		parquet.WithMaxRowGroupLength(o.RowGroupRows),
		parquet.WithDataPageSize(1 << 20),
		parquet.WithDictionaryDefault(true),
		parquet.WithPageIndexEnabled(false),
		parquet.WithStats(false),
	}
	if o.member {
		// Pages of memberPageRows rows or so (a bucket holds about 1,000
		// at 4M records and k=12) and an offset index: a reducer reading
		// one bucket decodes the pages holding its rows (BucketRunsKey),
		// not the row group's eight or so buckets. Version 5's pages of
		// 256 rows (8 KiB) read a bucket no faster (BenchmarkMemberBucket:
		// 380 against 330 µs) and cost DuckDB more per page.
		opts = append(opts,
			parquet.WithDataPageSize(memberPageBytes),
			parquet.WithBatchSize(memberPageRows),
			parquet.WithPageIndexEnabled(true))
	}
	if batch > 0 {
		opts = append(opts, parquet.WithBatchSize(int64(batch)))
	}
	if o.Codec == "zstd" || o.Codec == "gzip" {
		opts = append(opts, parquet.WithCompressionLevel(o.Level))
	}
	for _, f := range s.Fields {
		// Unique or long values gain nothing from a dictionary.
		if f.Name == s.Content || f.Name == s.Tuple.SampleID || f.Name == canon.MemberContentColumn {
			opts = append(opts, parquet.WithDictionaryFor(f.Name, false))
		}
	}
	return parquet.NewWriterProperties(opts...), nil
}

// EncodeParquet writes rec (whose schema must be ArrowSchema(s)) as one
// Parquet file with the Arrow schema stored in its metadata.
func EncodeParquet(rec arrow.RecordBatch, s *manifest.RecordSchema, o ParquetOptions) ([]byte, error) {
	return encode(rec, s, o, func(w *pqarrow.FileWriter, _ ParquetOptions) error { return w.Write(rec) })
}

// encode writes a Parquet file of rec's schema with the writer
// properties of s and o; write puts the rows (o has its defaults).
func encode(rec arrow.RecordBatch, s *manifest.RecordSchema, o ParquetOptions, write func(*pqarrow.FileWriter, ParquetOptions) error) ([]byte, error) {
	o = o.withDefaults()
	def := int(parquet.DefaultWriteBatchSize)
	if o.member {
		def = memberPageRows
	}
	batch, err := batchRows(rec, def)
	if err != nil {
		return nil, err
	}
	if batch == def {
		batch = 0
	}
	props, err := writerProperties(s, o, batch)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	w, err := pqarrow.NewFileWriter(rec.Schema(), &buf, props, pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema()))
	if err != nil {
		return nil, errcode.Wrap(errcode.Internal, err, "parquet writer")
	}
	if err := write(w, o); err != nil {
		w.Close()
		if errcode.Of(err) == errcode.Internal {
			return nil, errcode.Wrap(errcode.Internal, err, "write parquet")
		}
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, errcode.Wrap(errcode.Internal, err, "close parquet")
	}
	return buf.Bytes(), nil
}

// EncodeMemberParquet is EncodeParquet for a snapshot member whose rows
// are sorted by bucket: buckets[i] is row i's bucket. Row groups hold at
// most RowGroupRows rows, as EncodeParquet's do, but end at bucket
// boundaries: whole buckets, or one part of a bucket larger than a row
// group. The footer lists each row group's first and last bucket under
// canon.BucketRowGroupsKey and each bucket run under canon.BucketRunsKey,
// and pages are small with an offset index, so a reader can decode the
// pages of one bucket alone.
func EncodeMemberParquet(rec arrow.RecordBatch, s *manifest.RecordSchema, o ParquetOptions, buckets []uint32) ([]byte, error) {
	if int64(len(buckets)) != rec.NumRows() {
		return nil, errcode.New(errcode.Internal, "member: %d buckets for %d rows", len(buckets), rec.NumRows())
	}
	for i := 1; i < len(buckets); i++ {
		if buckets[i] < buckets[i-1] {
			return nil, errcode.New(errcode.Internal, "member: rows not sorted by bucket at row %d", i)
		}
	}
	// bucketEnd is the end of the bucket run starting at row i.
	bucketEnd := func(i int) int {
		j := i + 1
		for j < len(buckets) && buckets[j] == buckets[i] {
			j++
		}
		return j
	}
	o.member = true
	return encode(rec, s, o, func(w *pqarrow.FileWriter, o ParquetOptions) error {
		limit := int(o.RowGroupRows)
		var list, runs []byte
		for lo := 0; lo < len(buckets); {
			hi := bucketEnd(lo)
			if hi-lo > limit {
				// A bucket larger than a row group: row groups of it alone.
				hi = lo + limit
			} else {
				for hi < len(buckets) {
					next := bucketEnd(hi)
					if next-lo > limit {
						break
					}
					hi = next
				}
			}
			part := rec.NewSlice(int64(lo), int64(hi))
			err := w.Write(part)
			part.Release()
			if err != nil {
				return err
			}
			if len(list) > 0 {
				list = append(list, ',')
			}
			list = strconv.AppendUint(list, uint64(buckets[lo]), 10)
			list = append(list, '-')
			list = strconv.AppendUint(list, uint64(buckets[hi-1]), 10)
			for r := lo; r < hi; {
				end := min(bucketEnd(r), hi)
				if len(runs) > 0 {
					runs = append(runs, ',')
				}
				runs = strconv.AppendUint(runs, uint64(buckets[r]), 10)
				runs = append(runs, ':')
				runs = strconv.AppendUint(runs, uint64(end-r), 10)
				r = end
			}
			lo = hi
		}
		if err := w.AppendKeyValueMetadata(canon.BucketRunsKey, string(runs)); err != nil {
			return err
		}
		return w.AppendKeyValueMetadata(canon.BucketRowGroupsKey, string(list))
	})
}

// BuildRows returns rows as one record batch of DefaultSchema.
func BuildRows(rows []Row) arrow.RecordBatch {
	as, _ := canon.ArrowSchema(DefaultSchema())
	b := array.NewRecordBuilder(memory.DefaultAllocator, as)
	defer b.Release()
	for i := range rows {
		appendRow(b, &rows[i])
	}
	return b.NewRecordBatch()
}

func appendRow(b *array.RecordBuilder, r *Row) {
	b.Field(0).(*array.StringBuilder).Append(r.SampleID)
	b.Field(1).(*array.StringBuilder).Append(r.SourceID)
	b.Field(2).(*array.Int64Builder).Append(r.SourceVersion)
	b.Field(3).(*array.StringBuilder).Append(r.Split)
	b.Field(4).(*array.StringBuilder).Append(r.Lang)
	b.Field(5).(*array.StringBuilder).Append(r.Text)
	b.Field(6).(*array.Int64Builder).Append(r.Tokens)
}

// RowsOf returns the rows of a DefaultSchema record batch.
func RowsOf(rec arrow.RecordBatch) ([]Row, error) {
	want := DefaultSchema()
	if got := canon.FromArrow(rec.Schema(), want); !slices.Equal(got.Fields, want.Fields) {
		return nil, errcode.New(errcode.SchemaMismatch, "record batch fields %v are not the default schema's", got.Fields)
	}
	col := func(i int) *array.String { return rec.Column(i).(*array.String) }
	i64 := func(i int) *array.Int64 { return rec.Column(i).(*array.Int64) }
	rows := make([]Row, rec.NumRows())
	for i := range rows {
		rows[i] = Row{
			SampleID: strings.Clone(col(0).Value(i)), SourceID: strings.Clone(col(1).Value(i)),
			SourceVersion: i64(2).Value(i), Split: strings.Clone(col(3).Value(i)),
			Lang: strings.Clone(col(4).Value(i)), Text: strings.Clone(col(5).Value(i)),
			Tokens: i64(6).Value(i),
		}
	}
	return rows, nil
}

// ShardID names shard i of n as in the manifest example: shard-00017-of-00480.
func ShardID(i, n int) string { return fmt.Sprintf("shard-%05d-of-%05d", i, n) }

// MemberID names snapshot member file i of n.
func MemberID(i, n int) string { return fmt.Sprintf("member-%05d-of-%05d", i, n) }
