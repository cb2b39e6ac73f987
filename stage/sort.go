package stage

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"

	"github.com/cespare/xxhash/v2"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/internal/scratchdir"
)

// The staging order is ShardingFunction's: rows ascending by
// (xxh64(sampleId, seed), sampleId). sortRows computes it within a memory
// budget. Keys are gathered in runs of at most sortRunBytes; a release
// whose keys fit in one run is sorted in memory, as it always was. A
// larger one is an external sort: each run is sorted and written to a file
// in SortTempPrefix's directory, the runs are merged at most sortFanIn at
// a time (in levels, each run file removed once merged), and the final
// merge writes each shard's row indices to a file of its own as the order
// reaches it, so that no step holds more than a run of keys, sortFanIn
// read buffers or one shard's indices. Either way a duplicate sampleId is
// BAD_INPUT before anything is stored.

// sortRunBytes bounds the memory of one run of keys: what its slices
// hold, keyBytes per key of capacity plus the sampleIds' buffer. At
// 64 MiB a run holds about 1.85M synthetic keys.
var sortRunBytes = 64 << 20

// sortFanIn is the most run files merged at once: it bounds the open
// files and the read buffers (sortFanIn × runReadBuffer) of a merge.
var sortFanIn = 128

// keyHashMask is applied to every key's hash; tests narrow it to make
// hash ties common. It is all ones outside tests.
var keyHashMask uint64 = math.MaxUint64

// keyBytes is the memory a key takes in a run besides its sampleId: the
// sortKey and its offset in the run's sampleIds.
const keyBytes = 16 + 4

const runReadBuffer = 64 << 10

// sortKey is a row's place in the staging order: its hash and its index
// (the sampleId, for ties, is kept beside it).
type sortKey struct {
	h uint64
	i int64
}

// stagingHash is the hash the staging order sorts by first.
func stagingHash(d *xxhash.Digest, seed uint64, id string) uint64 {
	d.ResetWithSeed(seed)
	d.WriteString(id)
	return d.Sum64() & keyHashMask
}

// compareKeys orders two keys as the staging order does.
func compareKeys(ah uint64, aid []byte, bh uint64, bid []byte) int {
	return cmp.Or(cmp.Compare(ah, bh), bytes.Compare(aid, bid))
}

// duplicateID is the error of a sampleId at rows a and b of the source
// (global row indices; sortRows names their files where the source can).
func duplicateID(id []byte, a, b int64) error {
	return &dupError{id: string(id), rows: [2]int64{min(a, b), max(a, b)}}
}

type dupError struct {
	id    string
	rows  [2]int64
	where [2]string // "FILE row R", once the source named them
}

func (e *dupError) Error() string {
	msg := fmt.Sprintf("%s: sample_id %q occurs more than once in the input", errcode.BadInput, e.id)
	if e.where[0] != "" {
		msg += fmt.Sprintf(" (%s and %s)", e.where[0], e.where[1])
	}
	return msg
}

func (e *dupError) ErrorCode() errcode.Code { return errcode.BadInput }

// rowLocator is a source that can name where a row of it comes from.
type rowLocator interface {
	where(row int64) string
}

// cut is the first key of a shard.
type cut struct {
	h  uint64
	id string
}

// stagingOrder is the staging order of n rows cut into shards: shard j
// holds positions [j*n/shards, (j+1)*n/shards). It is either in memory
// (keys) or spilled, one file of row indices per shard.
type stagingOrder struct {
	n, shards int
	keys      []sortKey
	dir       *scratchdir.Dir
	cuts      []cut
	// runs counts the run files written, merges the merges that wrote
	// more (0 and 0 in memory).
	runs, merges int
}

// bounds returns shard j's positions [lo, hi) in the order.
func (o *stagingOrder) bounds(j int) (lo, hi int) {
	return j * o.n / o.shards, (j + 1) * o.n / o.shards
}

// shardOf returns the shard holding the row whose key is (h, id), which
// must be one of the order's.
func (o *stagingOrder) shardOf(h uint64, id string) int {
	// The first cut above the key, less one: cuts[0] is the smallest key.
	j, _ := slices.BinarySearchFunc(o.cuts, cut{h, id}, func(c, k cut) int {
		if r := cmp.Or(cmp.Compare(c.h, k.h), cmp.Compare(c.id, k.id)); r != 0 {
			return r
		}
		return -1 // equal keys count as below: the search ends past them
	})
	return j - 1
}

func (o *stagingOrder) shardPath(j int) string {
	return filepath.Join(o.dir.Path, fmt.Sprintf("shard%05d", j))
}

// shard returns the row indices of shard j in staging order. A spilled
// shard's file is removed once read: each shard is read once.
func (o *stagingOrder) shard(j int) ([]int, error) {
	lo, hi := o.bounds(j)
	idx := make([]int, hi-lo)
	if o.dir == nil {
		for k := range idx {
			idx[k] = int(o.keys[lo+k].i)
		}
		return idx, nil
	}
	b, err := os.ReadFile(o.shardPath(j))
	if err != nil {
		return nil, errcode.Wrap(errcode.IO, err, "sort: shard %d", j)
	}
	os.Remove(o.shardPath(j))
	if len(b) != 8*len(idx) {
		return nil, errcode.Wrap(errcode.IO, io.ErrUnexpectedEOF, "sort: shard %d: %d bytes for %d rows", j, len(b), len(idx))
	}
	for k := range idx {
		idx[k] = int(binary.LittleEndian.Uint64(b[8*k:]))
	}
	return idx, nil
}

// close removes the spilled files.
func (o *stagingOrder) close() {
	if o.dir != nil {
		o.dir.Remove()
	}
}

// sortRows returns the staging order of src's rows with the sort seed,
// cut into shards, and rejects duplicate sampleIds (a snapshot holds each
// member exactly once).
func sortRows(ctx context.Context, src source, seed uint64, shards int, tempDir string) (*stagingOrder, error) {
	o, err := sortRowsOf(ctx, src, seed, shards, tempDir)
	var d *dupError
	if l, ok := src.(rowLocator); ok && errors.As(err, &d) {
		d.where = [2]string{l.where(d.rows[0]), l.where(d.rows[1])}
	}
	return o, err
}

func sortRowsOf(ctx context.Context, src source, seed uint64, shards int, tempDir string) (*stagingOrder, error) {
	n := src.Len()
	s := newKeySorter(ctx, seed, n, tempDir)
	err := src.keys(ctx, s.add)
	if err == nil && s.base+int64(len(s.keys)) != int64(n) {
		err = errcode.New(errcode.Internal, "sort: %d keys for %d rows", s.base+int64(len(s.keys)), n)
	}
	if err != nil {
		s.close()
		return nil, err
	}
	o := &stagingOrder{n: n, shards: shards, cuts: make([]cut, shards)}
	if s.dir == nil {
		// One run: the order stays in memory.
		if err := s.sortRun(); err != nil {
			return nil, err
		}
		for j := range shards {
			lo, _ := o.bounds(j)
			k := s.keys[lo]
			o.cuts[j] = cut{k.h, string(s.id(k))}
		}
		o.keys = s.keys
		return o, nil
	}
	if err := s.spill(); err != nil {
		s.close()
		return nil, err
	}
	s.keys, s.offs, s.ids = nil, nil, nil
	o.dir = s.dir
	o.runs = len(s.runs)
	if err := s.merge(o); err != nil {
		o.close()
		return nil, err
	}
	o.merges = s.made - o.runs
	slog.Info("stage: sorted keys on disk", "rows", n, "runs", o.runs, "intermediateMerges", o.merges, "runBytes", sortRunBytes)
	return o, nil
}

// keySorter gathers keys in runs and spills the runs that fill.
type keySorter struct {
	ctx     context.Context
	seed    uint64
	d       *xxhash.Digest
	tempDir string
	// The run: keys of rows base, base+1, …, and their sampleIds,
	// ids[offs[r]:offs[r+1]] for the run's row r.
	base int64
	keys []sortKey
	offs []uint32
	ids  []byte
	// Spilled runs, once the first run filled.
	dir  *scratchdir.Dir
	runs []string
	made int
}

// newKeySorter returns a keySorter for n rows.
func newKeySorter(ctx context.Context, seed uint64, n int, tempDir string) *keySorter {
	s := &keySorter{ctx: ctx, seed: seed, d: xxhash.NewWithSeed(seed), tempDir: tempDir}
	// Half the budget for the keys at first, the rest for their
	// sampleIds; room grows either within the budget.
	s.keys = make([]sortKey, 0, min(n, sortRunBytes/(2*keyBytes)+1))
	s.offs = append(make([]uint32, 0, cap(s.keys)+1), 0)
	return s
}

func (s *keySorter) id(k sortKey) []byte {
	r := k.i - s.base
	return s.ids[s.offs[r]:s.offs[r+1]]
}

// add adds the key of the next row.
func (s *keySorter) add(id string) error {
	row := s.base + int64(len(s.keys))
	if row%65536 == 0 && s.ctx.Err() != nil {
		return errcode.Wrap(errcode.Canceled, s.ctx.Err(), "sort")
	}
	if !s.room(len(id)) {
		if len(s.keys) > 0 {
			if err := s.spill(); err != nil {
				return err
			}
		}
		if !s.room(len(id)) {
			// A sampleId larger than the budget: a run holds at least
			// one key.
			s.keys, s.offs = grow(s.keys, len(s.keys)+1), grow(s.offs, len(s.offs)+1)
			s.ids = grow(s.ids, len(s.ids)+len(id))
		}
	}
	s.keys = append(s.keys, sortKey{stagingHash(s.d, s.seed, id), row})
	s.ids = append(s.ids, id...)
	s.offs = append(s.offs, uint32(len(s.ids)))
	return nil
}

// held is the memory the run's slices hold: their capacity, used or not.
func (s *keySorter) held() int {
	return cap(s.keys)*16 + cap(s.offs)*4 + cap(s.ids) // a sortKey is 16 bytes
}

// room reports whether the run can take one more key whose sampleId is
// idLen bytes, growing its slices (doubling them, or as far as the budget
// allows) only while what they hold stays within sortRunBytes; false: the
// run must be spilled first.
func (s *keySorter) room(idLen int) bool {
	if len(s.ids)+idLen > math.MaxUint32 {
		return false
	}
	if len(s.keys) == cap(s.keys) {
		c := len(s.keys) + min(max(len(s.keys), 1024), (sortRunBytes-s.held())/keyBytes)
		if c <= len(s.keys) {
			return false
		}
		s.keys, s.offs = grow(s.keys, c), grow(s.offs, c+1)
	}
	if need := len(s.ids) + idLen; need > cap(s.ids) {
		c := min(max(2*cap(s.ids), need, 64<<10), cap(s.ids)+sortRunBytes-s.held())
		if c < need {
			return false
		}
		s.ids = grow(s.ids, c)
	}
	return true
}

// grow returns s with capacity c exactly (append would round it up by
// as much as a quarter).
func grow[T any](s []T, c int) []T {
	n := make([]T, len(s), c)
	copy(n, s)
	return n
}

// sortRun sorts the run and rejects a sampleId it holds twice.
func (s *keySorter) sortRun() error {
	slices.SortFunc(s.keys, func(a, b sortKey) int {
		if a.h != b.h {
			return cmp.Compare(a.h, b.h)
		}
		// Equal hashes (rare, and every duplicate sampleId): by id.
		return cmp.Or(bytes.Compare(s.id(a), s.id(b)), cmp.Compare(a.i, b.i))
	})
	for x := 1; x < len(s.keys); x++ {
		if a, b := s.keys[x-1], s.keys[x]; a.h == b.h && bytes.Equal(s.id(a), s.id(b)) {
			return duplicateID(s.id(b), a.i, b.i)
		}
	}
	return nil
}

// newFile creates the next file in the sort's directory, which it makes
// first if need be.
func (s *keySorter) newFile() (*os.File, error) {
	if s.dir == nil {
		dir, err := scratchdir.New(s.tempDir, SortTempPrefix)
		if err != nil {
			return nil, errcode.Wrap(errcode.IO, err, "sort directory")
		}
		s.dir = dir
	}
	s.made++
	f, err := os.Create(filepath.Join(s.dir.Path, fmt.Sprintf("run%06d", s.made)))
	if err != nil {
		return nil, errcode.Wrap(errcode.IO, err, "sort")
	}
	return f, nil
}

// spill sorts the run, writes it to a run file and starts the next run.
func (s *keySorter) spill() error {
	if err := s.sortRun(); err != nil {
		return err
	}
	f, err := s.newFile()
	if err != nil {
		return err
	}
	s.runs = append(s.runs, f.Name())
	w := runWriter{bw: bufio.NewWriterSize(f, 1<<20)}
	for _, k := range s.keys {
		w.put(k.h, k.i, s.id(k))
	}
	if err := w.close(f); err != nil {
		return err
	}
	s.base += int64(len(s.keys))
	s.keys, s.offs, s.ids = s.keys[:0], s.offs[:1], s.ids[:0]
	return nil
}

// merge merges the run files, sortFanIn at a time, until one merge
// reaches the order's every key, and writes each shard's row indices to
// its file.
func (s *keySorter) merge(o *stagingOrder) error {
	for len(s.runs) > sortFanIn {
		var next []string
		for g := 0; g < len(s.runs); g += sortFanIn {
			group := s.runs[g:min(g+sortFanIn, len(s.runs))]
			if len(group) == 1 {
				next = append(next, group[0])
				continue
			}
			f, err := s.newFile()
			if err != nil {
				return err
			}
			next = append(next, f.Name())
			w := runWriter{bw: bufio.NewWriterSize(f, 1<<20)}
			err = mergeRuns(s.ctx, group, func(h uint64, i int64, id []byte) error {
				w.put(h, i, id)
				return nil
			})
			if err == nil {
				err = w.close(f)
			} else {
				f.Close()
			}
			if err != nil {
				return err
			}
		}
		s.runs = next
	}
	c := &shardCutter{o: o}
	err := mergeRuns(s.ctx, s.runs, c.add)
	if err == nil {
		err = c.closeShard()
	} else if c.f != nil {
		c.f.Close()
	}
	if err == nil && c.pos != o.n {
		err = errcode.New(errcode.Internal, "sort: merged %d keys of %d", c.pos, o.n)
	}
	return err
}

// close removes what the sorter spilled (after an error).
func (s *keySorter) close() {
	if s.dir != nil {
		s.dir.Remove()
	}
}

// A run file is a sequence of keys in staging order, each a little-endian
// u64 hash, the row index and the sampleId's length as uvarints, and the
// sampleId. The files live only as long as the sort.
type runWriter struct {
	bw  *bufio.Writer
	buf []byte
}

func (w *runWriter) put(h uint64, i int64, id []byte) {
	w.buf = binary.LittleEndian.AppendUint64(w.buf[:0], h)
	w.buf = binary.AppendUvarint(w.buf, uint64(i))
	w.buf = binary.AppendUvarint(w.buf, uint64(len(id)))
	w.bw.Write(w.buf)
	w.bw.Write(id) // bufio keeps the first write error for Flush
}

// close flushes and closes f, the file w writes to.
func (w *runWriter) close(f *os.File) error {
	err := w.bw.Flush()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return errcode.Wrap(errcode.IO, err, "sort")
	}
	return nil
}

type runReader struct {
	f  *os.File
	br *bufio.Reader
	h  uint64
	i  int64
	id []byte
}

// next reads the next key; false at the end of the file.
func (r *runReader) next() (bool, error) {
	var hb [8]byte
	if _, err := io.ReadFull(r.br, hb[:]); err != nil {
		if err == io.EOF {
			return false, nil
		}
		return false, r.fail(err)
	}
	i, err := binary.ReadUvarint(r.br)
	if err != nil {
		return false, r.fail(err)
	}
	n, err := binary.ReadUvarint(r.br)
	if err != nil {
		return false, r.fail(err)
	}
	if i > math.MaxInt64 || n > math.MaxUint32 {
		return false, r.fail(errors.New("key out of range"))
	}
	r.h, r.i = binary.LittleEndian.Uint64(hb[:]), int64(i)
	r.id = slices.Grow(r.id[:0], int(n))[:n]
	if _, err := io.ReadFull(r.br, r.id); err != nil {
		return false, r.fail(err)
	}
	return true, nil
}

func (r *runReader) fail(err error) error {
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return errcode.Wrap(errcode.IO, err, "sort: run %s", filepath.Base(r.f.Name()))
}

// mergeRuns calls emit with every key of the run files in staging order,
// rejects a sampleId found twice, and removes the files once read.
func mergeRuns(ctx context.Context, paths []string, emit func(h uint64, i int64, id []byte) error) error {
	var heap []*runReader
	defer func() {
		for _, r := range heap {
			r.f.Close()
		}
	}()
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			return errcode.Wrap(errcode.IO, err, "sort")
		}
		r := &runReader{f: f, br: bufio.NewReaderSize(f, runReadBuffer)}
		ok, err := r.next()
		if err != nil || !ok {
			f.Close()
			if err != nil {
				return err
			}
			continue
		}
		heap = append(heap, r)
	}
	less := func(a, b *runReader) bool { return compareKeys(a.h, a.id, b.h, b.id) < 0 }
	down := func(x int) {
		for {
			m := x
			for _, c := range [...]int{2*x + 1, 2*x + 2} {
				if c < len(heap) && less(heap[c], heap[m]) {
					m = c
				}
			}
			if m == x {
				return
			}
			heap[x], heap[m] = heap[m], heap[x]
			x = m
		}
	}
	for x := len(heap)/2 - 1; x >= 0; x-- {
		down(x)
	}
	var prevH uint64
	var prev []byte
	var prevI int64
	for count := 0; len(heap) > 0; count++ {
		if count%65536 == 0 && ctx.Err() != nil {
			return errcode.Wrap(errcode.Canceled, ctx.Err(), "sort")
		}
		r := heap[0]
		if count > 0 && r.h == prevH && bytes.Equal(r.id, prev) {
			return duplicateID(r.id, prevI, r.i)
		}
		if err := emit(r.h, r.i, r.id); err != nil {
			return err
		}
		prevH, prev, prevI = r.h, append(prev[:0], r.id...), r.i
		ok, err := r.next()
		if err != nil {
			return err
		}
		if !ok {
			r.f.Close()
			heap[0] = heap[len(heap)-1]
			heap = heap[:len(heap)-1]
		}
		down(0)
	}
	for _, p := range paths {
		os.Remove(p)
	}
	return nil
}

// shardCutter receives the merged order and writes each shard's row
// indices to the shard's file, one shard at a time.
type shardCutter struct {
	o   *stagingOrder
	pos int
	j   int
	f   *os.File
	bw  *bufio.Writer
	hi  int
	b   [8]byte
}

func (c *shardCutter) add(h uint64, i int64, id []byte) error {
	if c.pos == c.hi {
		if c.f != nil {
			if err := c.closeShard(); err != nil {
				return err
			}
			c.j++
		}
		if c.j >= c.o.shards {
			return errcode.New(errcode.Internal, "sort: more keys than the %d rows", c.o.n)
		}
		f, err := os.Create(c.o.shardPath(c.j))
		if err != nil {
			return errcode.Wrap(errcode.IO, err, "sort")
		}
		c.f, c.bw = f, bufio.NewWriterSize(f, 256<<10)
		_, c.hi = c.o.bounds(c.j)
		c.o.cuts[c.j] = cut{h, string(id)}
	}
	binary.LittleEndian.PutUint64(c.b[:], uint64(i))
	c.bw.Write(c.b[:])
	c.pos++
	return nil
}

func (c *shardCutter) closeShard() error {
	if c.f == nil {
		return nil
	}
	w := runWriter{bw: c.bw}
	err := w.close(c.f)
	c.f = nil
	return err
}
