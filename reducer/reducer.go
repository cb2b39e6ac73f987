package reducer

import (
	"cmp"
	"context"
	"io"
	"slices"
	"strings"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/shuffle"
	"github.com/shardproof/shardproof/tuplehash"
)

// MaxExamples is the number of example sampleIds kept per class.
const MaxExamples = 20

// Source yields the rows of one shuffle file one bucket at a time, buckets
// strictly increasing, io.EOF at the end. The rows of a bucket need only
// stay valid until the next call of Next. *shuffle.Reader implements it.
type Source interface {
	Next() (bucket uint32, rows []shuffle.Row, err error)
}

// Options configure one reduce task.
type Options struct {
	// K is the number of bucket bits; buckets [Lo, Hi) are this task's.
	K      uint
	Lo, Hi uint32
	// Tombstones and Benchmark may be nil (not checked).
	Tombstones, Benchmark *Set
	// Snapshot, when set, gives the snapshot side of a bucket on demand,
	// and SnapshotLeaves holds the snapshot's bucket leaves for [Lo, Hi)
	// (32 bytes each, from a leaf index checked against its tuple root).
	// A bucket whose release leaf equals the indexed one holds exactly
	// the snapshot's tuples: it is counted without asking Snapshot. The
	// sources then must yield no snapshot rows.
	Snapshot       BucketSource
	SnapshotLeaves []byte
}

// DigestSource is a Source that can give a bucket's tuple digests before
// its rows. NextDigests moves to the next bucket as Next does and returns
// its digests and whether all its rows are release rows; Rows then makes
// the bucket's rows, as Next would have returned them. *shuffle.Reader
// implements it.
type DigestSource interface {
	Source
	NextDigests() (bucket uint32, digests [][32]byte, allRelease bool, err error)
	Rows() ([]shuffle.Row, error)
}

// BucketSource gives the snapshot rows of one bucket, in shuffle order,
// for buckets asked in increasing order. The rows need only stay valid
// until the next call.
type BucketSource interface {
	Bucket(b uint32) ([]shuffle.Row, error)
}

// Result is what one reduce task hands to aggregation. It is deterministic:
// it depends only on the rows of the range, not on how they were split
// among sources.
type Result struct {
	Lo uint32 `json:"lo"`
	Hi uint32 `json:"hi"`
	// Counts holds Records (release tuples), SnapshotRecords and the
	// member-level counters; shard-level counters stay zero (Validate
	// refuses a result read back whose do not).
	Counts manifest.Counts `json:"counts"`
	// Examples maps a code to at most MaxExamples smallest sampleIds.
	Examples map[string][]string `json:"examples"`
	// ReleaseLeaves and SnapshotLeaves hold 32 bytes per bucket of
	// [Lo, Hi), in bucket order.
	ReleaseLeaves  []byte `json:"releaseLeaves"`
	SnapshotLeaves []byte `json:"snapshotLeaves"`
}

// NewResult returns an empty Result for buckets [lo, hi).
func NewResult(lo, hi uint32) *Result {
	return &Result{
		Lo: lo, Hi: hi,
		Examples:       map[string][]string{},
		ReleaseLeaves:  make([]byte, 0, 32*int(hi-lo)),
		SnapshotLeaves: make([]byte, 0, 32*int(hi-lo)),
	}
}

// Reduce merges sources over buckets [o.Lo, o.Hi) and diffs every bucket.
func Reduce(ctx context.Context, o Options, sources []Source) (*Result, error) {
	if o.K < 1 || o.K > 32 || o.Lo > o.Hi || uint64(o.Hi) > 1<<o.K {
		return nil, errcode.New(errcode.Internal, "reducer: bad range [%d, %d) for k=%d", o.Lo, o.Hi, o.K)
	}
	if (o.Snapshot == nil) != (o.SnapshotLeaves == nil) || o.SnapshotLeaves != nil && len(o.SnapshotLeaves) != 32*int(o.Hi-o.Lo) {
		return nil, errcode.New(errcode.Internal, "reducer: %d snapshot leaf bytes for [%d, %d), or leaves without a snapshot source", len(o.SnapshotLeaves), o.Lo, o.Hi)
	}
	heads := make([]head, len(sources))
	for i, s := range sources {
		heads[i].src = s
		// Only with a leaf index can a bucket be settled by its
		// digests; without one, every bucket is merged row by row.
		if ds, ok := s.(DigestSource); ok && o.Snapshot != nil {
			heads[i].lazy = ds
		}
		if err := heads[i].advance(); err != nil {
			return nil, err
		}
	}
	res := NewResult(o.Lo, o.Hi)
	d := &differ{res: res, tomb: o.Tombstones, bench: o.Benchmark}
	var (
		rows, rel []shuffle.Row
		runs      [][]shuffle.Row
		took      []*head
	)
	for b := o.Lo; b < o.Hi; b++ {
		if b%64 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, errcode.Wrap(errcode.Canceled, err, "reduce")
			}
		}
		took = took[:0]
		for i := range heads {
			h := &heads[i]
			if h.done {
				continue
			}
			if h.bucket < b {
				return nil, errcode.New(errcode.ShuffleCorrupt, "reducer: source %d yielded bucket %d outside or behind the range at %d", i, h.bucket, b)
			}
			if h.bucket == b {
				took = append(took, h)
			}
		}
		// A bucket matching the snapshot's leaf is counted from its
		// digests as they are: its counts do not depend on the rows'
		// order, and its rows are made only if fences need them.
		matched := false
		if o.Snapshot != nil {
			var err error
			if matched, err = d.matches(b, took, [32]byte(o.SnapshotLeaves[32*(b-o.Lo):])); err != nil {
				return nil, err
			}
		}
		if !matched {
			runs = runs[:0]
			for _, h := range took {
				r, err := h.load()
				if err != nil {
					return nil, err
				}
				runs = append(runs, r)
			}
			rows = merge(rows[:0], runs)
			if o.Snapshot != nil {
				// The snapshot side is needed only now.
				snap, err := o.Snapshot.Bucket(b)
				if err != nil {
					return nil, err
				}
				rel = append(rel[:0], rows...)
				rows = merge(rows[:0], [][]shuffle.Row{rel, snap})
			}
			if err := d.bucket(b, rows); err != nil {
				return nil, err
			}
		}
		// Only now, with the bucket diffed, may the sources reuse the
		// memory of its rows.
		for _, h := range took {
			if err := h.advance(); err != nil {
				return nil, err
			}
		}
	}
	for i := range heads {
		if !heads[i].done {
			return nil, errcode.New(errcode.ShuffleCorrupt, "reducer: source %d holds bucket %d outside [%d, %d)", i, heads[i].bucket, o.Lo, o.Hi)
		}
	}
	return res, nil
}

// merge appends the rows of runs, each already in shuffle order (as every
// source yields them), to dst in shuffle order: a k-way merge over a
// binary heap of the runs' next rows, so a bucket's rows are never
// re-sorted.
func merge(dst []shuffle.Row, runs [][]shuffle.Row) []shuffle.Row {
	if len(runs) == 1 {
		return append(dst, runs[0]...)
	}
	h := make([][]shuffle.Row, 0, len(runs))
	for _, r := range runs {
		if len(r) > 0 {
			h = append(h, r)
		}
	}
	less := func(i, j int) bool { return shuffle.Compare(&h[i][0], &h[j][0]) < 0 }
	down := func(i int) {
		for {
			c := 2*i + 1
			if c >= len(h) {
				return
			}
			if c+1 < len(h) && less(c+1, c) {
				c++
			}
			if !less(c, i) {
				return
			}
			h[i], h[c] = h[c], h[i]
			i = c
		}
	}
	for i := len(h)/2 - 1; i >= 0; i-- {
		down(i)
	}
	for len(h) > 0 {
		dst = append(dst, h[0][0])
		if h[0] = h[0][1:]; len(h[0]) == 0 {
			h[0] = h[len(h)-1]
			h = h[:len(h)-1]
		}
		down(0)
	}
	return dst
}

// head is a source's current bucket. From a DigestSource it holds the
// bucket's digests, and its rows only once load asks for them.
type head struct {
	src        Source
	lazy       DigestSource
	bucket     uint32
	digests    [][32]byte
	allRelease bool
	rows       []shuffle.Row
	loaded     bool
	started    bool
	done       bool
}

func (h *head) advance() error {
	var (
		b   uint32
		err error
	)
	h.loaded = false
	if h.lazy != nil {
		b, h.digests, h.allRelease, err = h.lazy.NextDigests()
	} else {
		b, h.rows, err = h.src.Next()
		h.loaded = true
	}
	if err == io.EOF {
		h.done, h.rows, h.digests = true, nil, nil
		return nil
	}
	if err != nil {
		return err
	}
	if h.started && b <= h.bucket {
		return errcode.New(errcode.ShuffleCorrupt, "reducer: source yielded bucket %d after %d", b, h.bucket)
	}
	h.bucket, h.started = b, true
	return nil
}

// load returns the rows of the head's bucket, making them if need be.
func (h *head) load() ([]shuffle.Row, error) {
	if !h.loaded {
		rows, err := h.lazy.Rows()
		if err != nil {
			return nil, err
		}
		h.rows, h.loaded = rows, true
	}
	return h.rows, nil
}

type differ struct {
	res         *Result
	tomb, bench *Set
	rel, snap   [][32]byte
	// sortScratch is the copy each bucket leaf sorts through.
	sortScratch [][32]byte
}

func (d *differ) bucket(b uint32, rows []shuffle.Row) error {
	if want := d.res.Lo + uint32(len(d.res.ReleaseLeaves)/32); b != want || b >= d.res.Hi {
		return errcode.New(errcode.Internal, "reducer: bucket %d given, expected %d", b, want)
	}
	// Rows from Reduce arrive merged; anything else is sorted here.
	if !slices.IsSortedFunc(rows, func(a, b shuffle.Row) int { return shuffle.Compare(&a, &b) }) {
		shuffle.Sort(rows)
	}
	d.rel, d.snap = d.rel[:0], d.snap[:0]
	for i := 0; i < len(rows); {
		j := i + 1
		for j < len(rows) && rows[j].SampleID == rows[i].SampleID {
			j++
		}
		if rows[i].Bucket != b {
			return errcode.New(errcode.ShuffleCorrupt, "reducer: row of bucket %d merged into bucket %d", rows[i].Bucket, b)
		}
		d.sample(rows[i:j])
		i = j
	}
	rl := tuplehash.BucketLeafInto(b, d.rel, &d.sortScratch)
	sl := tuplehash.BucketLeafInto(b, d.snap, &d.sortScratch)
	d.res.ReleaseLeaves = append(d.res.ReleaseLeaves, rl[:]...)
	d.res.SnapshotLeaves = append(d.res.SnapshotLeaves, sl[:]...)
	return nil
}

// matches reports whether the release rows of bucket b, in the heads hs
// (no snapshot rows among them), hash to the snapshot's leaf want. If they
// do, the bucket's tuples are the snapshot's exactly, and matches counts
// it as d.bucket would with the snapshot's rows: every release record is
// also a snapshot record, no member is missing, extra, duplicated or
// changed, and only tombstone and benchmark hits remain to look for, in
// rows made for that alone. The digests authenticate the bucket: each is
// the sha256 of a tuple, and the leaf the sha256 of them all.
func (d *differ) matches(b uint32, hs []*head, want [32]byte) (bool, error) {
	d.rel = d.rel[:0]
	for _, h := range hs {
		if h.lazy != nil {
			if !h.allRelease {
				return false, nil
			}
			d.rel = append(d.rel, h.digests...)
			continue
		}
		for i := range h.rows {
			if h.rows[i].Side != shuffle.Release || h.rows[i].Bucket != b {
				return false, nil
			}
			d.rel = append(d.rel, h.rows[i].TupleDigest)
		}
	}
	if tuplehash.BucketLeafInto(b, d.rel, &d.sortScratch) != want {
		return false, nil
	}
	if want := d.res.Lo + uint32(len(d.res.ReleaseLeaves)/32); b != want {
		return false, nil
	}
	if d.tomb != nil || d.bench != nil {
		for _, h := range hs {
			rows, err := h.load()
			if err != nil {
				return false, err
			}
			for i := range rows {
				d.fences(&rows[i])
			}
		}
	}
	c := &d.res.Counts
	c.Records += int64(len(d.rel))
	c.SnapshotRecords += int64(len(d.rel))
	d.res.ReleaseLeaves = append(d.res.ReleaseLeaves, want[:]...)
	d.res.SnapshotLeaves = append(d.res.SnapshotLeaves, want[:]...)
	return true, nil
}

// fences counts the tombstone and benchmark hits of one release row.
func (d *differ) fences(r *shuffle.Row) {
	c := &d.res.Counts
	if d.tomb.Hit(r.SampleID, r.ContentDigest) {
		c.TombstoneHits++
		d.example(errcode.TombstoneHit, r.SampleID)
	}
	if d.bench.Hit(r.SampleID, r.ContentDigest) {
		c.BenchmarkHits++
		d.example(errcode.BenchmarkHit, r.SampleID)
	}
}

// sample diffs the rows of one sampleId, sorted release side first (side
// 0), then by tuple digest.
func (d *differ) sample(rows []shuffle.Row) {
	nrel := 0
	for nrel < len(rows) && rows[nrel].Side == shuffle.Release {
		nrel++
	}
	rel, snap := rows[:nrel], rows[nrel:]
	c := &d.res.Counts
	c.Records += int64(len(rel))
	c.SnapshotRecords += int64(len(snap))
	id := rows[0].SampleID
	for i := range rel {
		d.rel = append(d.rel, rel[i].TupleDigest)
		d.fences(&rel[i])
	}
	for i := range snap {
		d.snap = append(d.snap, snap[i].TupleDigest)
	}
	r, s := int64(len(rel)), int64(len(snap))
	switch {
	case s == 0:
		c.Extra += r
		d.example(errcode.ExtraMember, id)
	case r < s:
		c.Missing += s - r
		d.example(errcode.MissingMember, id)
	case r > s:
		c.Duplicate += r - s
		d.example(errcode.DuplicateMember, id)
	default:
		d.fields(id, rel, snap)
	}
}

// fields compares equal-sized release and snapshot groups of one sampleId;
// both are sorted by tuple digest.
func (d *differ) fields(id string, rel, snap []shuffle.Row) {
	same := true
	for i := range rel {
		if rel[i].TupleDigest != snap[i].TupleDigest {
			same = false
			break
		}
	}
	if same {
		return
	}
	c := &d.res.Counts
	found := false
	check := func(differs bool, n *int64, code errcode.Code) {
		if differs {
			*n++
			d.example(code, id)
			found = true
		}
	}
	check(differ32(rel, snap, func(r *shuffle.Row) [32]byte { return r.ContentDigest }), &c.ContentSubstitution, errcode.ContentSubstitution)
	check(differOrdered(rel, snap, func(r *shuffle.Row) int64 { return r.SourceVersion }), &c.SourceVersionChange, errcode.SourceVersionChange)
	check(differOrdered(rel, snap, func(r *shuffle.Row) string { return r.SourceID }), &c.SourceIDChange, errcode.SourceIDChange)
	check(differOrdered(rel, snap, func(r *shuffle.Row) string { return r.Split }), &c.SplitConflict, errcode.SplitConflict)
	check(differ32(rel, snap, func(r *shuffle.Row) [32]byte { return r.SchemaDigest }), &c.SchemaMix, errcode.SchemaMix)
	if !found {
		c.ContentSubstitution++
		d.example(errcode.ContentSubstitution, id)
	}
}

// differOrdered reports whether the sorted multisets of f over a and b
// differ. len(a) == len(b).
func differOrdered[T cmp.Ordered](a, b []shuffle.Row, f func(*shuffle.Row) T) bool {
	if len(a) == 1 {
		return f(&a[0]) != f(&b[0])
	}
	x, y := make([]T, len(a)), make([]T, len(b))
	for i := range a {
		x[i], y[i] = f(&a[i]), f(&b[i])
	}
	slices.Sort(x)
	slices.Sort(y)
	return !slices.Equal(x, y)
}

func differ32(a, b []shuffle.Row, f func(*shuffle.Row) [32]byte) bool {
	if len(a) == 1 {
		return f(&a[0]) != f(&b[0])
	}
	x, y := make([][32]byte, len(a)), make([][32]byte, len(b))
	for i := range a {
		x[i], y[i] = f(&a[i]), f(&b[i])
	}
	tuplehash.SortDigests(x)
	tuplehash.SortDigests(y)
	return !slices.Equal(x, y)
}

func (d *differ) example(code errcode.Code, id string) {
	// id aliases the source's memory: keep a copy.
	d.res.Examples[string(code)] = AddExample(d.res.Examples[string(code)], strings.Clone(id))
}

// AddExample inserts id into the sorted list ex, keeping at most
// MaxExamples smallest distinct ids.
func AddExample(ex []string, id string) []string {
	i, found := slices.BinarySearch(ex, id)
	if found || i >= MaxExamples {
		return ex
	}
	ex = slices.Insert(ex, i, id)
	if len(ex) > MaxExamples {
		ex = ex[:MaxExamples]
	}
	return ex
}

// Merge adds o's counts and examples into r, and reports whether every
// count's sum fits an int64 (manifest.AddFigure): counts a commit record
// declares, each one a count, sum past it only when forged. On false r
// is left as it was. Leaves are not merged: they belong to disjoint
// ranges and are concatenated in range order by the caller.
func (r *Result) Merge(o *Result) bool {
	sum := r.Counts
	if !addCounts(&sum, &o.Counts) {
		return false
	}
	r.Counts = sum
	for code, ids := range o.Examples {
		for _, id := range ids {
			r.Examples[code] = AddExample(r.Examples[code], id)
		}
	}
	return true
}

// addCounts adds every counter of b to a, and reports whether every sum
// fits (manifest.AddFigure); on false a holds some sums and not others.
func addCounts(a, b *manifest.Counts) bool {
	ok := true
	add := func(x *int64, y int64) {
		var fit bool
		*x, fit = manifest.AddFigure(*x, y)
		ok = ok && fit
	}
	add(&a.Shards, b.Shards)
	add(&a.ShardsVerified, b.ShardsVerified)
	add(&a.Records, b.Records)
	add(&a.SnapshotRecords, b.SnapshotRecords)
	add(&a.DigestFailures, b.DigestFailures)
	add(&a.SizeMismatches, b.SizeMismatches)
	add(&a.VersionMissing, b.VersionMissing)
	add(&a.LogicalMismatches, b.LogicalMismatches)
	add(&a.CountMismatches, b.CountMismatches)
	add(&a.DecodeErrors, b.DecodeErrors)
	add(&a.SchemaMismatches, b.SchemaMismatches)
	add(&a.TupleRootMismatches, b.TupleRootMismatches)
	add(&a.Missing, b.Missing)
	add(&a.Extra, b.Extra)
	add(&a.Duplicate, b.Duplicate)
	add(&a.ContentSubstitution, b.ContentSubstitution)
	add(&a.SourceVersionChange, b.SourceVersionChange)
	add(&a.SourceIDChange, b.SourceIDChange)
	add(&a.SplitConflict, b.SplitConflict)
	add(&a.SchemaMix, b.SchemaMix)
	add(&a.TombstoneHits, b.TombstoneHits)
	add(&a.BenchmarkHits, b.BenchmarkHits)
	return ok
}

// Validate checks a Result read back from a commit record: its range and
// leaf lengths, its counts (none negative, and no shard-level counter,
// which a reduce task never sets: the aggregation counts shards from the
// map tasks' records) and its examples.
func (r *Result) Validate(lo, hi uint32) error {
	if r.Lo != lo || r.Hi != hi {
		return errcode.New(errcode.ShuffleCorrupt, "reduce result covers [%d, %d), plan says [%d, %d)", r.Lo, r.Hi, lo, hi)
	}
	n := 32 * int(hi-lo)
	if len(r.ReleaseLeaves) != n || len(r.SnapshotLeaves) != n {
		return errcode.New(errcode.ShuffleCorrupt, "reduce result has %d/%d leaf bytes, want %d", len(r.ReleaseLeaves), len(r.SnapshotLeaves), n)
	}
	if err := r.Counts.Validate(); err != nil {
		return errcode.Wrap(errcode.ShuffleCorrupt, err, "reduce result")
	}
	if c := &r.Counts; c.Shards != 0 || c.ShardsVerified != 0 || c.DigestFailures != 0 || c.SizeMismatches != 0 ||
		c.VersionMissing != 0 || c.LogicalMismatches != 0 || c.CountMismatches != 0 || c.DecodeErrors != 0 ||
		c.SchemaMismatches != 0 || c.TupleRootMismatches != 0 {
		return errcode.New(errcode.ShuffleCorrupt, "reduce result has shard-level counts (shards %d, shardsVerified %d, or a shard failure's), which a reduce task never sets", c.Shards, c.ShardsVerified)
	}
	for code, ids := range r.Examples {
		if !manifest.IsExampleClass(code) {
			return errcode.New(errcode.ShuffleCorrupt, "reduce result has examples for %.40q, not a member-level failure code", code)
		}
		if len(ids) > MaxExamples || !slices.IsSorted(ids) {
			return errcode.New(errcode.ShuffleCorrupt, "reduce result examples for %s are not a sorted list of at most %d", code, MaxExamples)
		}
	}
	return nil
}

// Combine merges sources over buckets [lo, hi) into one stream of rows in
// shuffle order, handing emit each bucket's merged rows (valid only during
// the call): a merge level, which lets a reduce task read many shuffle
// files a group at a time. Every row is made and checked as Reduce would
// check a differing bucket's; the rows emitted are the sources' rows, so
// Reduce over the merged streams gives the Result it gives over the
// sources.
func Combine(ctx context.Context, lo, hi uint32, sources []Source, emit func(rows []shuffle.Row) error) error {
	heads := make([]head, len(sources))
	for i, s := range sources {
		heads[i].src = s
		if err := heads[i].advance(); err != nil {
			return err
		}
	}
	var (
		rows []shuffle.Row
		runs [][]shuffle.Row
		took []*head
	)
	for b := lo; b < hi; b++ {
		if b%64 == 0 {
			if err := ctx.Err(); err != nil {
				return errcode.Wrap(errcode.Canceled, err, "reduce: merge level")
			}
		}
		took, runs = took[:0], runs[:0]
		for i := range heads {
			h := &heads[i]
			if h.done {
				continue
			}
			if h.bucket < b {
				return errcode.New(errcode.ShuffleCorrupt, "reducer: source %d yielded bucket %d outside or behind the range at %d", i, h.bucket, b)
			}
			if h.bucket == b {
				took = append(took, h)
				runs = append(runs, h.rows)
			}
		}
		if len(took) == 0 {
			continue
		}
		rows = merge(rows[:0], runs)
		if err := emit(rows); err != nil {
			return err
		}
		for _, h := range took {
			if err := h.advance(); err != nil {
				return err
			}
		}
	}
	for i := range heads {
		if !heads[i].done {
			return errcode.New(errcode.ShuffleCorrupt, "reducer: source %d holds bucket %d outside [%d, %d)", i, heads[i].bucket, lo, hi)
		}
	}
	return nil
}
