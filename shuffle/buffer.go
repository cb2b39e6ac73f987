package shuffle

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"io"
	"math"
	"slices"
	"sort"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/klauspost/compress/zstd"

	"github.com/shardproof/shardproof/internal/errcode"
)

// Buffer collects rows the way a map task produces them, column by column
// in flat byte slices, and writes them as one shuffle file in shuffle
// order. It holds no pointers per row, so a map task's partitions cost the
// garbage collector nothing to scan and grow without per-row allocations;
// the record batches are assembled from those slices directly, without
// Arrow's array builders. A Buffer is reused across files with Reset.
//
// The zero value is an empty Buffer. A Buffer is not safe for concurrent
// use.
type Buffer struct {
	bucket  []uint32
	side    []uint8
	version []int64
	// sample, source and split are the string columns: values
	// concatenated, with len+1 offsets.
	sample, source, split strColumn
	// content and tuple hold 32 bytes per row.
	content, tuple []byte
	// schema holds each row's index into schemas, the distinct schema
	// digests in the order they were first appended: a map task's tuples
	// name one or two (the release's record schema and its snapshot's),
	// more only when shards of another schema are mixed in.
	schema    []int32
	schemas   [][32]byte
	schemaIdx map[[32]byte]int32 // over schemas, once they are many
}

// Encoder turns Buffers into shuffle files. It keeps the scratch memory of
// sorting, batching and compressing from one file to the next, so a map
// task needs one Encoder however many partitions it writes. The zero
// value is ready to use; an Encoder is not safe for concurrent use.
type Encoder struct {
	// Compression of the files written (zero value: Zstd).
	Compression Compression
	// BatchRows is the number of rows per record batch, at most
	// MaxBatchRows (zero value: BatchRows). Larger batches cost less to
	// write and read, and a reader holds one per file.
	BatchRows int

	order  []sortKey
	counts []int
	batch  batchScratch
	dict   fileDict
	zw     *zstd.Encoder
	out    bytes.Buffer
}

// strColumn is a string column: values concatenated, with len+1 offsets.
// A Buffer never holds 4 GiB of one column: a map task's tuples are
// bounded far below that.
type strColumn struct {
	offs []uint32
	data []byte
}

func (c *strColumn) add(s string) {
	if len(c.offs) == 0 {
		c.offs = append(c.offs, 0)
	}
	c.data = append(c.data, s...)
	if len(c.data) > math.MaxUint32 {
		panic("shuffle: a Buffer column exceeds 4 GiB")
	}
	c.offs = append(c.offs, uint32(len(c.data)))
}

func (c *strColumn) value(i int) []byte { return c.data[c.offs[i]:c.offs[i+1]] }

func (c *strColumn) truncate(n int) {
	if len(c.offs) == 0 {
		return
	}
	c.data = c.data[:c.offs[n]]
	c.offs = c.offs[:n+1]
}

// Len returns the number of rows in b.
func (b *Buffer) Len() int { return len(b.bucket) }

// Append copies r into b.
func (b *Buffer) Append(r *Row) {
	b.bucket = append(b.bucket, r.Bucket)
	b.side = append(b.side, uint8(r.Side))
	b.version = append(b.version, r.SourceVersion)
	b.sample.add(r.SampleID)
	b.source.add(r.SourceID)
	b.split.add(r.Split)
	b.content = append(b.content, r.ContentDigest[:]...)
	b.schema = append(b.schema, b.schemaIndex(&r.SchemaDigest))
	b.tuple = append(b.tuple, r.TupleDigest[:]...)
}

// Grow reserves room for n more rows in the fixed-size columns (the
// strings' bytes still grow as they come), so a map task that knows its
// inputs' record counts appends its tuples without copying its columns
// over and over as they grow.
func (b *Buffer) Grow(n int) {
	if n <= 0 {
		return
	}
	b.bucket, b.side, b.version = slices.Grow(b.bucket, n), slices.Grow(b.side, n), slices.Grow(b.version, n)
	b.content, b.tuple, b.schema = slices.Grow(b.content, 32*n), slices.Grow(b.tuple, 32*n), slices.Grow(b.schema, n)
	for _, c := range []*strColumn{&b.sample, &b.source, &b.split} {
		c.offs = slices.Grow(c.offs, n+1)
	}
}

// manySchemas is the number of distinct schema digests beyond which a
// Buffer looks them up in a map rather than scanning them.
const manySchemas = 8

// schemaIndex returns d's index in b.schemas, adding it if it is new.
func (b *Buffer) schemaIndex(d *[32]byte) int32 {
	if n := len(b.schema); n > 0 && b.schemas[b.schema[n-1]] == *d {
		return b.schema[n-1] // the common case: the previous row's
	}
	if b.schemaIdx != nil {
		if i, ok := b.schemaIdx[*d]; ok {
			return i
		}
	} else {
		for i := range b.schemas {
			if b.schemas[i] == *d {
				return int32(i)
			}
		}
	}
	if len(b.schemas) >= math.MaxInt32 {
		panic("shuffle: a Buffer holds 2^31 schema digests")
	}
	i := int32(len(b.schemas))
	b.schemas = append(b.schemas, *d)
	if b.schemaIdx != nil {
		b.schemaIdx[*d] = i
	} else if len(b.schemas) > manySchemas {
		b.schemaIdx = make(map[[32]byte]int32, 2*len(b.schemas))
		for k, s := range b.schemas {
			b.schemaIdx[s] = int32(k)
		}
	}
	return i
}

// Truncate drops every row after the first n: a map task takes back the
// tuples of a file that turned out not to decode.
func (b *Buffer) Truncate(n int) {
	if n < 0 || n > b.Len() {
		panic("shuffle: Truncate out of range")
	}
	b.bucket, b.side, b.version = b.bucket[:n], b.side[:n], b.version[:n]
	b.sample.truncate(n)
	b.source.truncate(n)
	b.split.truncate(n)
	b.content, b.tuple, b.schema = b.content[:32*n], b.tuple[:32*n], b.schema[:n]
}

// Reset empties b, keeping its memory for the next file.
func (b *Buffer) Reset() {
	b.Truncate(0)
	b.schemas, b.schemaIdx = b.schemas[:0], nil
}

// Row returns row i (in insertion order); its strings alias b until the
// next change to b.
func (b *Buffer) Row(i int) Row {
	r := Row{
		Bucket:        b.bucket[i],
		Side:          Side(b.side[i]),
		SampleID:      unsafeString(b.sample.value(i)),
		SourceID:      unsafeString(b.source.value(i)),
		SourceVersion: b.version[i],
		Split:         unsafeString(b.split.value(i)),
	}
	copy(r.ContentDigest[:], b.content[32*i:])
	r.SchemaDigest = b.schemas[b.schema[i]]
	copy(r.TupleDigest[:], b.tuple[32*i:])
	return r
}

func unsafeString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// sortKey orders the rows of one bucket by the first eight bytes of their
// sampleId, so almost every comparison is one integer comparison.
type sortKey struct {
	key uint64
	row int
}

// idPrefix is the first eight bytes of id, zero-padded: comparing
// prefixes orders ids as bytes.Compare does, except that equal prefixes
// need the whole ids.
func idPrefix(id []byte) uint64 {
	var p [8]byte
	copy(p[:], id)
	return binary.BigEndian.Uint64(p[:])
}

// compare is Compare on rows i and j of b.
func (b *Buffer) compare(i, j int) int {
	if c := cmp.Compare(b.bucket[i], b.bucket[j]); c != 0 {
		return c
	}
	if c := bytes.Compare(b.sample.value(i), b.sample.value(j)); c != 0 {
		return c
	}
	if c := cmp.Compare(b.side[i], b.side[j]); c != 0 {
		return c
	}
	return bytes.Compare(b.tuple[32*i:32*i+32], b.tuple[32*j:32*j+32])
}

// sort fills e.order with the rows of b in shuffle order: a counting sort
// by bucket (a file's buckets lie in one reducer's range, and a shard that
// is a contiguous hash range lands in a few of them), then each bucket's
// rows by sampleId prefix and, on ties, the whole order of Compare.
func (e *Encoder) sort(b *Buffer) {
	n := b.Len()
	e.order = slices.Grow(e.order[:0], n)[:n]
	if n == 0 {
		return
	}
	byRow := func(x, y sortKey) int {
		if x.key != y.key {
			return cmp.Compare(x.key, y.key)
		}
		return b.compare(x.row, y.row)
	}
	lo, hi := b.bucket[0], b.bucket[0]
	for _, x := range b.bucket {
		lo, hi = min(lo, x), max(hi, x)
	}
	span := int(hi-lo) + 1
	if span > 4*n+1024 {
		// Sparse buckets: a comparison sort on (bucket, prefix) is cheaper
		// than counting over the span.
		for i := range n {
			e.order[i] = sortKey{key: idPrefix(b.sample.value(i)), row: i}
		}
		slices.SortFunc(e.order, func(x, y sortKey) int {
			if c := cmp.Compare(b.bucket[x.row], b.bucket[y.row]); c != 0 {
				return c
			}
			return byRow(x, y)
		})
		return
	}
	e.counts = slices.Grow(e.counts[:0], span+1)[:span+1]
	clear(e.counts)
	for _, x := range b.bucket {
		e.counts[x-lo+1]++
	}
	for k := 1; k <= span; k++ {
		e.counts[k] += e.counts[k-1]
	}
	for i := range n {
		k := b.bucket[i] - lo
		e.order[e.counts[k]] = sortKey{key: idPrefix(b.sample.value(i)), row: i}
		e.counts[k]++
	}
	// counts[k] is now the end of bucket k's rows.
	start := 0
	for k := 0; k < span; k++ {
		end := e.counts[k]
		switch {
		case end-start > maxInsertion:
			slices.SortFunc(e.order[start:end], byRow)
		case end-start > 1:
			insertionSort(e.order[start:end], b)
		}
		start = end
	}
}

// maxInsertion is the longest bucket run insertionSort sorts; a map task
// holds about 32 rows of a bucket at the default 4,096 buckets.
const maxInsertion = 64

// insertionSort sorts a short run of one bucket's keys: by prefix, and on
// equal prefixes by the whole order of Compare. It is slices.SortFunc's
// insertion sort without a comparison function call per step, which was
// most of the sort's time.
func insertionSort(o []sortKey, b *Buffer) {
	for i := 1; i < len(o); i++ {
		x := o[i]
		j := i
		for j > 0 {
			y := o[j-1]
			if x.key > y.key || x.key == y.key && b.compare(x.row, y.row) >= 0 {
				break
			}
			o[j] = y
			j--
		}
		o[j] = x
	}
}

// WriteTo writes b's rows, in shuffle order, as one shuffle file: the same
// bytes Write gives for the same rows, whatever order they were appended
// in.
func (b *Buffer) WriteTo(w io.Writer) (int64, error) {
	var e Encoder
	out, err := e.Encode(b)
	if err != nil {
		return 0, err
	}
	n, err := w.Write(out)
	if err != nil {
		return int64(n), errcode.Wrap(errcode.IO, err, "shuffle: write")
	}
	return int64(n), nil
}

// Encode returns the shuffle file of b's rows, the bytes WriteTo writes.
// They are e's own, valid until the next call of Encode. The Arrow IPC
// stream is compressed as it is written, so only the compressed file is
// ever held whole.
func (e *Encoder) Encode(b *Buffer) ([]byte, error) {
	e.sort(b)
	return e.encode(b, e.order)
}

// EncodeRanges writes one shuffle file per bucket range from a single
// Buffer: file r holds the rows whose bucket is below ends[r] and not
// below ends[r-1] (0 for r = 0), the bytes Encode gives for a Buffer of
// just those rows. ends must be ascending, and every row's bucket below
// the last end. A map task keeps all its tuples in one Buffer and sorts
// them once, rather than one Buffer per reducer, each of which grew to a
// whole task's tuples in turn (a shard that is a contiguous hash range
// sends all its tuples to one reducer). write is called for every r, in
// order, with bytes valid only during the call.
func (e *Encoder) EncodeRanges(b *Buffer, ends []uint32, write func(r int, file []byte, rows int) error) error {
	e.sort(b)
	start := 0
	for r, end := range ends {
		if r > 0 && end < ends[r-1] {
			return errcode.New(errcode.Internal, "shuffle: bucket range ends not ascending at %d", r)
		}
		n := start + sort.Search(len(e.order)-start, func(i int) bool { return b.bucket[e.order[start+i].row] >= end })
		out, err := e.encode(b, e.order[start:n])
		if err != nil {
			return err
		}
		if err := write(r, out, n-start); err != nil {
			return err
		}
		start = n
	}
	if start != len(e.order) {
		return errcode.New(errcode.Internal, "shuffle: %d rows at or above the last bucket range end %d", len(e.order)-start, ends[len(ends)-1])
	}
	return nil
}

// encode writes the rows of b listed in order, already in shuffle order.
func (e *Encoder) encode(b *Buffer, order []sortKey) ([]byte, error) {
	e.out.Reset()
	if e.Compression == None {
		if err := e.writeIPC(&e.out, b, order); err != nil {
			return nil, err
		}
		return e.out.Bytes(), nil
	}
	if e.zw == nil {
		zw, err := newEncoder(&e.out)
		if err != nil {
			return nil, err
		}
		e.zw = zw
	} else {
		e.zw.Reset(&e.out)
	}
	if err := e.writeIPC(e.zw, b, order); err != nil {
		return nil, err
	}
	if err := e.zw.Close(); err != nil {
		return nil, errcode.Wrap(errcode.Internal, err, "shuffle: zstd")
	}
	return e.out.Bytes(), nil
}

// batchScratch holds one record batch's column buffers, gathered from a
// Buffer in shuffle order; it is reused for every batch.
type batchScratch struct {
	bucket                 []uint32
	side                   []uint8
	version                []int64
	sampleOffs, sourceOffs []int32
	splitOffs              []int32
	sample, source, split  []byte
	content, tupleDig      []byte
	schema                 []int32
}

// fileDict is the dictionary of one file's schemaDigest column: the
// distinct digests its rows name, in ascending order, so a file's bytes
// depend only on its rows.
type fileDict struct {
	of     []int32 // a Buffer's schema index → index in the dictionary
	used   []int32 // the Buffer's schema indices the file's rows name
	bytes  []byte
	values arrow.Array // FixedSizeBinary(32) over bytes
}

func (d *fileDict) build(b *Buffer, order []sortKey) {
	d.of = slices.Grow(d.of[:0], len(b.schemas))[:len(b.schemas)]
	for i := range d.of {
		d.of[i] = -1
	}
	d.used = d.used[:0]
	for _, k := range order {
		if x := b.schema[k.row]; d.of[x] < 0 {
			d.of[x] = 0
			d.used = append(d.used, x)
		}
	}
	slices.SortFunc(d.used, func(x, y int32) int { return bytes.Compare(b.schemas[x][:], b.schemas[y][:]) })
	d.bytes = d.bytes[:0]
	for j, x := range d.used {
		d.of[x] = int32(j)
		d.bytes = append(d.bytes, b.schemas[x][:]...)
	}
	d.values = fixedArray(digestType, len(d.used), d.bytes)
}

func (e *Encoder) writeIPC(w io.Writer, b *Buffer, order []sortKey) error {
	e.dict.build(b, order)
	defer e.dict.values.Release()
	iw := ipc.NewWriter(w, ipc.WithSchema(Schema), ipc.WithAllocator(memory.DefaultAllocator))
	n := e.BatchRows
	if n <= 0 {
		n = BatchRows
	}
	if n > MaxBatchRows {
		return errcode.New(errcode.Internal, "shuffle: %d rows per batch, at most %d", n, MaxBatchRows)
	}
	for start := 0; start < len(order); start += n {
		rec, err := b.gather(&e.batch, &e.dict, order[start:min(start+n, len(order))])
		if err != nil {
			iw.Close()
			return err
		}
		err = iw.Write(rec)
		rec.Release()
		if err != nil {
			iw.Close()
			return errcode.Wrap(errcode.IO, err, "shuffle: write batch")
		}
	}
	if err := iw.Close(); err != nil {
		return errcode.Wrap(errcode.IO, err, "shuffle: close")
	}
	return nil
}

// gather builds the record batch of rows, reading b's columns through the
// row numbers in order. The scratch columns are sized first and filled by
// index, a column at a time: the reads miss the cache (rows are in
// shuffle order, not append order), and a loop of nothing else keeps many
// of them in flight. Row at a time, with appends, this took 0.9 CPU-s of
// a 4M-record verify; BenchmarkEncode/none spends 27% less in it.
func (b *Buffer) gather(s *batchScratch, dict *fileDict, order []sortKey) (arrow.RecordBatch, error) {
	n := len(order)
	var nSample, nSource, nSplit int
	for _, k := range order {
		i := k.row
		nSample += int(b.sample.offs[i+1] - b.sample.offs[i])
		nSource += int(b.source.offs[i+1] - b.source.offs[i])
		nSplit += int(b.split.offs[i+1] - b.split.offs[i])
	}
	if nSample > math.MaxInt32 || nSource > math.MaxInt32 || nSplit > math.MaxInt32 {
		return nil, errcode.New(errcode.Internal, "shuffle: a batch's strings exceed 2 GiB")
	}
	s.bucket, s.side, s.version = slices.Grow(s.bucket[:0], n)[:n], slices.Grow(s.side[:0], n)[:n], slices.Grow(s.version[:0], n)[:n]
	s.sampleOffs, s.sourceOffs, s.splitOffs = slices.Grow(s.sampleOffs[:0], n+1)[:n+1], slices.Grow(s.sourceOffs[:0], n+1)[:n+1], slices.Grow(s.splitOffs[:0], n+1)[:n+1]
	s.sample, s.source, s.split = withSlack(s.sample, nSample), withSlack(s.source, nSource), withSlack(s.split, nSplit)
	s.content, s.tupleDig, s.schema = slices.Grow(s.content[:0], 32*n)[:32*n], slices.Grow(s.tupleDig[:0], 32*n)[:32*n], slices.Grow(s.schema[:0], n)[:n]
	for j, k := range order {
		s.bucket[j] = b.bucket[k.row]
	}
	for j, k := range order {
		s.side[j] = b.side[k.row]
	}
	for j, k := range order {
		s.version[j] = b.version[k.row]
	}
	for j, k := range order {
		s.schema[j] = dict.of[b.schema[k.row]]
	}
	gatherStrings(s.sampleOffs, s.sample, &b.sample, order)
	gatherStrings(s.sourceOffs, s.source, &b.source, order)
	gatherStrings(s.splitOffs, s.split, &b.split, order)
	gather32(s.content, b.content, order)
	gather32(s.tupleDig, b.tuple, order)
	schemaIdx := fixedArray(arrow.PrimitiveTypes.Int32, n, arrow.Int32Traits.CastToBytes(s.schema))
	defer schemaIdx.Release()
	cols := []arrow.Array{
		fixedArray(arrow.PrimitiveTypes.Uint32, n, arrow.Uint32Traits.CastToBytes(s.bucket)),
		fixedArray(arrow.PrimitiveTypes.Uint8, n, s.side),
		stringArray(n, s.sampleOffs, s.sample[:nSample]),
		stringArray(n, s.sourceOffs, s.source[:nSource]),
		fixedArray(arrow.PrimitiveTypes.Int64, n, arrow.Int64Traits.CastToBytes(s.version)),
		fixedArray(digestType, n, s.content),
		stringArray(n, s.splitOffs, s.split[:nSplit]),
		array.NewDictionaryArray(schemaDictType, schemaIdx, dict.values),
		fixedArray(digestType, n, s.tupleDig),
	}
	rec := array.NewRecordBatch(Schema, cols, int64(n))
	for _, c := range cols {
		c.Release()
	}
	return rec, nil
}

// gatherStrings copies the values of c named by order into data, their
// end offsets into offs[1:]; data must hold them and shortSlack bytes
// more. Values of up to shortSlack bytes (sampleIds, splits, most
// sourceIds) are moved as one 16-byte block each, not through copy: a
// call of memmove per value was two thirds of the gather's time. The
// block's bytes past the value are overwritten by the next one, or lie
// in the slack.
func gatherStrings(offs []int32, data []byte, c *strColumn, order []sortKey) {
	o := uint32(0)
	offs[0] = 0
	src, so := c.data, c.offs
	for j, k := range order {
		a, b := so[k.row], so[k.row+1]
		n := b - a
		if n <= shortSlack && int(a)+shortSlack <= len(src) && int(o)+shortSlack <= len(data) {
			*(*[shortSlack]byte)(data[o:]) = *(*[shortSlack]byte)(src[a:])
		} else {
			copy(data[o:], src[a:b])
		}
		o += n
		offs[j+1] = int32(o)
	}
}

// shortSlack is the block gatherStrings moves short values in.
const shortSlack = 16

// withSlack returns b resized to n bytes and shortSlack more.
func withSlack(b []byte, n int) []byte {
	return slices.Grow(b[:0], n+shortSlack)[:n+shortSlack]
}

// gather32 copies the 32-byte values of src named by order into dst.
func gather32(dst, src []byte, order []sortKey) {
	d := unsafe.Slice((*[32]byte)(unsafe.Pointer(unsafe.SliceData(dst))), len(dst)/32)
	v := unsafe.Slice((*[32]byte)(unsafe.Pointer(unsafe.SliceData(src))), len(src)/32)
	for j, k := range order {
		d[j] = v[k.row]
	}
}

// fixedArray wraps values (no nulls) of a fixed-width type without copying.
func fixedArray(t arrow.DataType, n int, values []byte) arrow.Array {
	d := array.NewData(t, n, []*memory.Buffer{nil, memory.NewBufferBytes(values)}, nil, 0, 0)
	defer d.Release()
	return array.MakeFromData(d)
}

// stringArray wraps a string column (no nulls) without copying.
func stringArray(n int, offs []int32, data []byte) arrow.Array {
	d := array.NewData(arrow.BinaryTypes.String, n, []*memory.Buffer{
		nil, memory.NewBufferBytes(arrow.Int32Traits.CastToBytes(offs)), memory.NewBufferBytes(data),
	}, nil, 0, 0)
	defer d.Release()
	return array.MakeFromData(d)
}
