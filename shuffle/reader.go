package shuffle

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/klauspost/compress/zstd"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/internal/freelist"
	"github.com/shardproof/shardproof/tuplehash"
)

// maxAlloc caps any single buffer the Arrow decoder may allocate. A
// well-formed batch of BatchRows rows is far below it; a corrupt length
// prefix or declared decompressed size above it is refused instead of
// exhausting memory.
const maxAlloc = 256 << 20

// Reader streams a shuffle file one bucket at a time. It validates as it
// goes: the Arrow schema, non-null columns, sort order, that every bucket
// lies in [lo, hi) and equals the bucket of its sampleId. Any violation, or
// any decoder panic, is a *CorruptError and is sticky.
type Reader struct {
	name   string
	k      uint
	lo, hi uint32
	zr     *zstd.Decoder
	ipc    *ipc.Reader
	// rec is the record batch cols views (the IPC reader's own, valid
	// until its next batch); pos is the first of its rows not yet taken
	// into a bucket.
	rec    arrow.RecordBatch
	cols   columns
	pos, n int
	// bucket is the bucket NextDigests returned last; segs its rows, in
	// the batches that hold them (retained until the reader moves on),
	// and digests their tuple digests.
	bucket    uint32
	hasBucket bool
	segs      []segment
	digests   [][32]byte
	// loaded says rows hold the current bucket's rows.
	loaded bool
	err    error
	// rows and arena (the sampleId bytes of rows) are reused by every
	// bucket.
	rows  []Row
	arena []byte
	// small is the reader's own buffer of at most keepRows rows, which
	// rows returns to after a large bucket borrowed one from bigRows.
	small []Row
	// interned holds sourceId and split values: a handful of distinct
	// values repeated on every row.
	interned map[string]string
}

// segment is a run of the current bucket's rows in one record batch.
type segment struct {
	rec      arrow.RecordBatch
	cols     columns
	from, to int
}

// maxInterned bounds the intern table, so hostile data with unique values
// costs one map, not unbounded memory.
const maxInterned = 1024

func (r *Reader) intern(b string) string {
	if s, ok := r.interned[b]; ok {
		return s
	}
	s := strings.Clone(b)
	if len(r.interned) < maxInterned {
		if r.interned == nil {
			r.interned = make(map[string]string)
		}
		r.interned[s] = s
	}
	return s
}

type columns struct {
	bucket                *array.Uint32
	side                  *array.Uint8
	sample, source, split *array.String
	version               *array.Int64
	content, digest       *array.FixedSizeBinary
	// schema is the schemaDigest column's indices, schemas its dictionary.
	schema  *array.Int32
	schemas *array.FixedSizeBinary
}

// CorruptError reports a shuffle file that cannot be decoded or breaks the
// format's invariants.
type CorruptError struct {
	Name   string
	Reason string
}

// Error implements error.
func (e *CorruptError) Error() string {
	return fmt.Sprintf("%s: shuffle file %s: %s", errcode.ShuffleCorrupt, e.Name, e.Reason)
}

// ErrorCode implements errcode.Coder.
func (e *CorruptError) ErrorCode() errcode.Code { return errcode.ShuffleCorrupt }

// NewReader starts reading the zstd shuffle file r (named name in errors)
// whose rows must fall in buckets [lo, hi) of a k-bit partition.
func NewReader(r io.Reader, name string, k uint, lo, hi uint32) (*Reader, error) {
	return NewReaderCompression(r, Zstd, 0, name, k, lo, hi)
}

// NewReaderCompression is NewReader for a file stored with compression c
// whose length is size (0 if unknown). The length bounds what one record
// batch may claim before anything is allocated for it: a plain file's
// batch cannot be longer than the file, a zstd file's not more than 64
// times it.
func NewReaderCompression(r io.Reader, c Compression, size int64, name string, k uint, lo, hi uint32) (rd *Reader, err error) {
	rd = &Reader{name: name, k: k, lo: lo, hi: hi}
	defer rd.recoverInto(&err)
	defer func() {
		if err != nil {
			rd.Close()
		}
	}()
	var stream io.Reader
	limit := int64(maxAlloc)
	switch {
	case size > 0 && c == None:
		limit = min(limit, size)
	case size > 0:
		limit = min(limit, max(1<<20, 64*size))
	}
	switch c {
	case "", Zstd:
		// Concurrency 1 decodes synchronously: no goroutines per open file.
		rd.zr, err = zstd.NewReader(r, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true),
			zstd.WithDecoderMaxWindow(maxWindow), zstd.WithDecoderMaxMemory(maxAlloc))
		if err != nil {
			return nil, rd.corrupt("zstd: %v", err)
		}
		stream = zstdErrReader{rd.zr}
	case None:
		stream = bufio.NewReaderSize(r, plainReadAhead)
	default:
		return nil, errcode.New(errcode.Usage, "shuffle: unknown compression %q", c)
	}
	// Every shuffle file starts with the same schema message. Check those
	// bytes before arrow-go parses them: its schema decoder sizes slices
	// from counts in the message, and a crafted count is an allocation
	// the runtime cannot survive (not a panic one could recover).
	head := make([]byte, len(schemaMessage()))
	if _, err := io.ReadFull(stream, head); err != nil {
		if ferr := rd.readFailed(err); ferr != nil {
			return nil, ferr
		}
		return nil, rd.corrupt("schema message: %v", err)
	}
	if !bytes.Equal(head, schemaMessage()) {
		return nil, rd.corrupt("schema message differs from the shuffle schema's")
	}
	stream = io.MultiReader(bytes.NewReader(head), stream)
	ir, err := ipc.NewReader(stream, ipc.WithAllocator(freelist.NewAllocator(maxFree, maxAlloc)),
		ipc.WithBodySizeLimit(limit), ipc.WithMetadataSizeLimit(1<<20))
	if err != nil {
		if ferr := rd.readFailed(err); ferr != nil {
			return nil, ferr
		}
		return nil, rd.corrupt("open: %v", err)
	}
	rd.ipc = ir
	if !ir.Schema().Equal(Schema) {
		return nil, rd.corrupt("schema %s differs from the shuffle schema", ir.Schema())
	}
	return rd, nil
}

// plainReadAhead is a plain file's read-ahead. A reducer reads one file
// per map task at once, so this is paid hundreds of times over: at 16M
// records, 490 open files at 64 KiB (a zstd window's worth) were 31 MiB
// of live heap and about twice that of peak RSS, the reduce phase's peak.
// 16 KiB holds about half a record batch and costs one read call per
// 16 KiB of shuffle.
const plainReadAhead = 16 << 10

// maxFree is how many released buffers a Reader's allocator keeps: the
// IPC reader holds one record batch at a time and releases it before
// decoding the next, so the buffers of the last batch (a body and a few
// metadata buffers) serve the next one. A reducer reading hundreds of
// files at once then holds a batch's memory per file instead of
// allocating a fresh body for every batch, which at 16M records kept the
// garbage collector hundreds of megabytes behind.
const maxFree = 8

// schemaMessage is the encoded schema message every shuffle file begins
// with: what an IPC stream writer emits for Schema before anything else,
// that is an empty stream without its 8-byte end-of-stream marker.
var schemaMessage = sync.OnceValue(func() []byte {
	var b bytes.Buffer
	w := ipc.NewWriter(&b, ipc.WithSchema(Schema))
	if err := w.Close(); err != nil {
		panic(err) // an in-memory write of a constant schema
	}
	return b.Bytes()[:b.Len()-8]
})

// zstdErrReader keeps the zstd decoder's error text (checksum, corrupt
// block) in the chain the IPC reader reports.
type zstdErrReader struct{ r io.Reader }

func (z zstdErrReader) Read(p []byte) (int, error) {
	n, err := z.r.Read(p)
	if err != nil && err != io.EOF {
		err = fmt.Errorf("zstd: %w", err)
	}
	return n, err
}

// Close releases the decoders. It does not close the underlying reader.
func (r *Reader) Close() {
	if r == nil {
		return
	}
	r.dropSegments()
	if r.ipc != nil {
		r.ipc.Release()
		r.ipc = nil
	}
	if r.zr != nil {
		r.zr.Close()
		r.zr = nil
	}
}

// keepRows is the largest row buffer a Reader keeps from one bucket to
// the next.
const keepRows = 256

// Next returns the next non-empty bucket and all its rows, in shuffle
// order: NextDigests, then Rows. At the end of the file it returns
// io.EOF. rows and the sampleId strings in them belong to r and are valid
// until the next call of Next or NextDigests: a reducer diffs a bucket
// before it asks for the next one, and nothing is allocated per row.
func (r *Reader) Next() (bucket uint32, rows []Row, err error) {
	bucket, _, _, err = r.NextDigests()
	if err != nil {
		return 0, nil, err
	}
	if rows, err = r.Rows(); err != nil {
		return 0, nil, err
	}
	return bucket, rows, nil
}

// NextDigests moves to the next non-empty bucket and returns it, the
// tuple digests of its rows in file order, and whether every one of them
// is a release row, without making the rows themselves: a reducer whose
// release rows hash to the snapshot's bucket leaf needs nothing else, and
// asks Rows only for the buckets that differ. It checks what it reads:
// buckets strictly increasing and inside the reader's range; the rows'
// other columns are checked by Rows. digests belongs to r and is valid
// until the next call of Next or NextDigests. At the end of the file it
// returns io.EOF.
func (r *Reader) NextDigests() (bucket uint32, digests [][32]byte, allRelease bool, err error) {
	if r.err != nil {
		return 0, nil, false, r.err
	}
	defer r.recoverInto(&err)
	r.dropSegments()
	if cap(r.digests) > keepRows {
		bigDigests.Put(r.digests[:0])
		r.digests = nil
	}
	r.digests, r.loaded, allRelease = r.digests[:0], false, true
	started := false
	for {
		if r.pos >= r.n {
			if !r.ipc.Next() {
				if err := r.ipc.Err(); err != nil {
					if ferr := r.readFailed(err); ferr != nil {
						return 0, nil, false, ferr
					}
					return 0, nil, false, r.corrupt("read batch: %v", err)
				}
				if started {
					break
				}
				r.err = io.EOF
				return 0, nil, false, io.EOF
			}
			r.rec = r.ipc.RecordBatch()
			if err := r.bind(r.rec); err != nil {
				return 0, nil, false, err
			}
			continue
		}
		c := &r.cols
		buckets := c.bucket.Uint32Values()
		if !started {
			b := buckets[r.pos]
			if b < r.lo || b >= r.hi {
				return 0, nil, false, r.corrupt("bucket %d outside the range [%d, %d)", b, r.lo, r.hi)
			}
			if r.hasBucket && b <= r.bucket {
				return 0, nil, false, r.corrupt("rows out of order (bucket %d after bucket %d)", b, r.bucket)
			}
			r.bucket, r.hasBucket, started = b, true, true
		}
		from, to := r.pos, r.pos
		for to < r.n && buckets[to] == r.bucket {
			to++
		}
		if to == from {
			break // this batch goes on with the next bucket
		}
		for _, s := range c.side.Uint8Values()[from:to] {
			allRelease = allRelease && s == uint8(Release)
		}
		if len(r.digests) == cap(r.digests) && len(r.digests)+to-from > keepRows {
			// A large bucket: take a large buffer another reader gave
			// back rather than growing a new one.
			if d, ok := bigDigests.Get(); ok && cap(d) > cap(r.digests) {
				r.digests = append(d, r.digests...)
			}
		}
		for i := from; i < to; i++ {
			r.digests = append(r.digests, [32]byte(c.digest.Value(i)))
		}
		r.rec.Retain()
		r.segs = append(r.segs, segment{rec: r.rec, cols: *c, from: from, to: to})
		r.pos = to
		if to < r.n {
			break
		}
	}
	return r.bucket, r.digests, allRelease, nil
}

// Rows returns the rows of the bucket NextDigests returned last, in
// shuffle order, checking each: its side, that its sampleId hashes to the
// bucket, and the order of the rows. They belong to r and are valid until
// the next call of Next or NextDigests.
func (r *Reader) Rows() (rows []Row, err error) {
	if r.err != nil {
		return nil, r.err
	}
	if r.loaded {
		return r.rows, nil
	}
	if len(r.segs) == 0 {
		return nil, errcode.New(errcode.Internal, "shuffle: Rows without a bucket from NextDigests")
	}
	defer r.recoverInto(&err)
	// Reuse the last bucket's memory unless it was a large one: a file
	// can hold a few large buckets (a shard that is a contiguous hash
	// range lands in few buckets), and hundreds of open files each
	// keeping their largest would add up to far more than the one bucket
	// a reducer works on.
	if cap(r.rows) > keepRows {
		bigRows.Put(r.rows[:0])
		// Back to the reader's own small buffer, rather than growing a
		// new one from nothing for every bucket.
		r.rows, r.arena = r.small, nil
	}
	n, ids := len(r.digests), 0
	for _, s := range r.segs {
		offs := s.cols.sample.ValueOffsets()
		ids += int(offs[s.to] - offs[s.from])
	}
	if n > cap(r.rows) {
		if n > keepRows {
			if cap(r.rows) <= keepRows {
				r.small = r.rows[:0]
			}
			if b, ok := bigRows.Get(); ok && cap(b) >= n {
				r.rows = b
			}
		}
		r.rows = slices.Grow(r.rows[:0], n)
	}
	// The arena is sized first: rows alias it, so it must not move.
	r.rows, r.arena = r.rows[:0], slices.Grow(r.arena[:0], ids)
	for _, s := range r.segs {
		c := &s.cols
		for i := s.from; i < s.to; i++ {
			start := len(r.arena)
			r.arena = append(r.arena, c.sample.Value(i)...)
			r.rows = append(r.rows, Row{
				Bucket:        r.bucket,
				Side:          Side(c.side.Value(i)),
				SampleID:      unsafeString(r.arena[start:]),
				SourceID:      r.intern(c.source.Value(i)),
				SourceVersion: c.version.Value(i),
				Split:         r.intern(c.split.Value(i)),
			})
			dst := &r.rows[len(r.rows)-1]
			copy(dst.ContentDigest[:], c.content.Value(i))
			copy(dst.SchemaDigest[:], c.schemas.Value(int(c.schema.Value(i))))
			dst.TupleDigest = r.digests[len(r.rows)-1]
			if dst.Side > Snapshot {
				return nil, r.corrupt("row has side %d", dst.Side)
			}
			if b := tuplehash.Bucket(dst.SampleID, r.k); b != r.bucket {
				return nil, r.corrupt("row says bucket %d, its sampleId hashes to bucket %d", r.bucket, b)
			}
			if len(r.rows) > 1 && Compare(&r.rows[len(r.rows)-2], dst) > 0 {
				return nil, r.corrupt("rows out of order in bucket %d", r.bucket)
			}
		}
	}
	r.loaded = true
	return r.rows, nil
}

// dropSegments lets go of the batches holding the last bucket's rows.
func (r *Reader) dropSegments() {
	for i := range r.segs {
		r.segs[i].rec.Release()
		r.segs[i] = segment{}
	}
	r.segs = r.segs[:0]
}

// bigRows and bigDigests hold the buffers of large buckets between
// readers: at any time a reducer works on one bucket, so a few such
// buffers serve every file it reads.
var (
	bigRows    = freelist.New[[]Row](16)
	bigDigests = freelist.New[[][32]byte](16)
)

// bind checks a freshly decoded batch and points the column views at it.
func (r *Reader) bind(rec arrow.RecordBatch) error {
	if rec.NumCols() != int64(len(Schema.Fields())) {
		return r.corrupt("batch has %d columns", rec.NumCols())
	}
	n := int(rec.NumRows())
	for i, col := range rec.Columns() {
		if col.Len() != n {
			return r.corrupt("column %d has %d rows, batch %d", i, col.Len(), n)
		}
		if col.NullN() != 0 {
			return r.corrupt("column %s has nulls", Schema.Field(i).Name)
		}
	}
	var ok [9]bool
	r.cols.bucket, ok[0] = rec.Column(0).(*array.Uint32)
	r.cols.side, ok[1] = rec.Column(1).(*array.Uint8)
	r.cols.sample, ok[2] = rec.Column(2).(*array.String)
	r.cols.source, ok[3] = rec.Column(3).(*array.String)
	r.cols.version, ok[4] = rec.Column(4).(*array.Int64)
	r.cols.content, ok[5] = rec.Column(5).(*array.FixedSizeBinary)
	r.cols.split, ok[6] = rec.Column(6).(*array.String)
	if d, isDict := rec.Column(7).(*array.Dictionary); isDict {
		r.cols.schema, ok[7] = d.Indices().(*array.Int32)
		if ok[7] {
			r.cols.schemas, ok[7] = d.Dictionary().(*array.FixedSizeBinary)
		}
	}
	r.cols.digest, ok[8] = rec.Column(8).(*array.FixedSizeBinary)
	for i, good := range ok {
		if !good {
			return r.corrupt("column %d has type %s", i, rec.Column(i).DataType())
		}
	}
	for _, s := range []*array.String{r.cols.sample, r.cols.source, r.cols.split} {
		if err := checkOffsets(s); err != nil {
			return r.corrupt("%v", err)
		}
	}
	// The dictionary's width is the schema's (checked as bytes); its
	// values must be present and every index must name one.
	if r.cols.schemas.NullN() != 0 {
		return r.corrupt("schemaDigest dictionary has nulls")
	}
	for i, x := range r.cols.schema.Int32Values() {
		if x < 0 || int(x) >= r.cols.schemas.Len() {
			return r.corrupt("row %d names schemaDigest %d of a dictionary of %d", i, x, r.cols.schemas.Len())
		}
	}
	r.pos, r.n = 0, n
	return nil
}

// checkOffsets verifies a string column's offsets are monotonic and inside
// its data buffer, so Value never slices out of bounds.
func checkOffsets(s *array.String) error {
	offs := s.ValueOffsets()
	if len(offs) < s.Len()+1 {
		return fmt.Errorf("string column has %d offsets for %d rows", len(offs), s.Len())
	}
	data := len(s.ValueBytes())
	for i := 0; i < s.Len(); i++ {
		if offs[i] < 0 || offs[i] > offs[i+1] || int(offs[i+1]) > data+int(offs[0]) {
			return fmt.Errorf("string column offset %d out of bounds", i)
		}
	}
	return nil
}

// readFailed returns err, with the file's name, when it is the source's
// failure to deliver bytes (a lost S3 connection, a silent server,
// Ctrl-C, a bucket deleted or credentials refused under the run:
// STORE_UNAVAILABLE, CANCELED, IO, NO_SUCH_BUCKET, STORE_DENIED), and
// nil otherwise: the file was not shown to be corrupt, and
// SHUFFLE_CORRUPT sent the operator looking for damage. Bytes that fail their digest, and bare errors (a
// torn local file), stay SHUFFLE_CORRUPT.
func (r *Reader) readFailed(err error) error {
	switch errcode.Of(err) {
	case errcode.StoreUnavailable, errcode.Canceled, errcode.IO, errcode.StoreDenied, errcode.NoSuchBucket:
		r.err = fmt.Errorf("shuffle file %s: %w", r.name, err)
		return r.err
	}
	return nil
}

func (r *Reader) corrupt(format string, args ...any) error {
	r.err = &CorruptError{Name: r.name, Reason: fmt.Sprintf(format, args...)}
	return r.err
}

// recoverInto turns a decoder panic on hostile bytes into a CorruptError.
func (r *Reader) recoverInto(err *error) {
	if p := recover(); p != nil {
		*err = r.corrupt("decoder panic: %v", p)
	}
}
