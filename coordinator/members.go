package coordinator

import (
	"context"
	"io"
	"runtime"
	"slices"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/shardproof/shardproof/internal/freelist"
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/mapper"
	"github.com/shardproof/shardproof/shuffle"
	"github.com/shardproof/shardproof/tuplehash"
)

// memberSource is a reducer.Source over the snapshot members a reducer
// reads itself (BucketRange.Members). A member declares that its tuples
// lie in buckets [lo, hi), and declared ranges are disjoint, so its tuples
// are already the snapshot side of a bucket range: the source maps one
// member at a time (every check the map side would make), puts its tuples
// in shuffle order and hands them out bucket by bucket, never through a
// shuffle file. A member that does not decode contributes no tuples, as
// in a map task; nor does one holding a tuple outside its declared range
// (the mapper reports that member's COUNT_MISMATCH).
type memberSource struct {
	ctx     context.Context
	opts    mapper.Options
	members []manifest.Shard
	todo    []int
	// results holds the mapper's figures for each member read, in order.
	results  []mapper.Result
	progress func(mapper.Result)
	// mapNanos is the time spent mapping members, which the mapper's
	// timings already count.
	mapNanos int64

	memberBufs
	pos    int
	intern map[string]string
	// next is the member after the one being merged, read ahead.
	next *mapper.Fetch
	// lazy sources (Bucket) read a member only when asked for one of
	// its buckets, and never ahead; loaded is the member whose rows are
	// all held, -1 if none.
	lazy   bool
	loaded int
	// leaves are the snapshot's indexed bucket leaves from bucket lo on
	// (lazy sources).
	leaves []byte
	lo     uint32
	// open is the member held for reading bucket by bucket (-1: none),
	// read holds the buckets read from it so far.
	open   int
	member *mapper.Member
	read   int
	// part holds the tuples of the one bucket last read from open.
	part    []shuffle.Row
	partIDs []byte
	digests [][32]byte
	scratch [][32]byte
}

// memberBufs hold one member's tuples; reducers hand them on to the next
// (memberBufPool), so each member is not a new allocation of a few
// megabytes for the collector to trace.
type memberBufs struct {
	rows []shuffle.Row
	ids  []byte
	ends []int
}

var memberBufPool = freelist.New[memberBufs](runtime.GOMAXPROCS(0))

func newMemberSource(ctx context.Context, opts mapper.Options, members []manifest.Shard, todo []int, progress func(mapper.Result)) *memberSource {
	s := &memberSource{ctx: ctx, opts: opts, members: members, todo: todo, progress: progress, intern: map[string]string{}, loaded: -1, open: -1}
	s.memberBufs, _ = memberBufPool.Get()
	return s
}

// newLazyMemberSource is newMemberSource for a reducer with the
// snapshot's leaf index (leaves, 32 bytes per bucket from bucket lo on):
// it serves reducer.BucketSource, and reads of a member only the buckets
// asked for, through their row groups, when the member's footer lists
// the row groups' bucket ranges (stage's do) and what it reads hashes
// to the indexed leaf; otherwise it maps the whole member. A member none
// of whose buckets is asked for is never read (see finish).
func newLazyMemberSource(ctx context.Context, opts mapper.Options, members []manifest.Shard, todo []int, progress func(mapper.Result), leaves []byte, lo uint32) *memberSource {
	s := newMemberSource(ctx, opts, members, todo, progress)
	s.lazy, s.leaves, s.lo = true, leaves, lo
	return s
}

// Bucket implements reducer.BucketSource: the snapshot rows of bucket b.
// Members declaring only buckets before b that were never asked for are
// skipped unread.
func (s *memberSource) Bucket(b uint32) ([]shuffle.Row, error) {
	for {
		if s.loaded >= 0 {
			for s.pos < len(s.rows) && s.rows[s.pos].Bucket < b {
				s.pos++
			}
			if s.pos < len(s.rows) {
				end := s.pos
				for end < len(s.rows) && s.rows[end].Bucket == b {
					end++
				}
				rows := s.rows[s.pos:end]
				s.pos = end
				return rows, nil
			}
			if s.members[s.loaded].Buckets.Hi > b {
				// The member declaring b is read and holds none of it.
				return nil, nil
			}
			s.loaded, s.rows, s.pos = -1, s.rows[:0], 0
		}
		if s.open >= 0 && s.members[s.open].Buckets.Hi <= b {
			s.closeOpen()
		}
		if s.open < 0 {
			if len(s.todo) == 0 {
				return nil, nil
			}
			i := s.todo[0]
			r := s.members[i].Buckets
			if r.Lo > b {
				return nil, nil
			}
			s.todo = s.todo[1:]
			if r.Hi <= b {
				if err := s.skip(i); err != nil {
					return nil, err
				}
				continue
			}
			start := time.Now()
			s.member = mapper.OpenMember(s.opts, s.fetch(i, false))
			s.mapNanos += int64(time.Since(start))
			s.open, s.read = i, 0
		}
		rows, ok, err := s.readBucket(b)
		if err != nil {
			return nil, wrap(err, "snapshot member %s", s.members[s.open].ID)
		}
		if ok {
			s.read++
			return rows, nil
		}
		// Not readable bucket by bucket, or what was read is not the
		// snapshot's: map the whole member, with every check.
		i, m := s.open, s.member
		s.open, s.member = -1, nil
		err = s.fill(i, func(emit func(*mapper.Tuple) error) (mapper.Result, error) { return m.Map(s.ctx, emit) })
		m.Close()
		if err != nil {
			return nil, err
		}
		s.loaded = i
	}
}

// readBucket reads bucket b from the open member's row groups. ok is
// true when the tuples read hash to the snapshot's indexed leaf of b.
func (s *memberSource) readBucket(b uint32) ([]shuffle.Row, bool, error) {
	start := time.Now()
	defer func() { s.mapNanos += int64(time.Since(start)) }()
	s.part, s.partIDs, s.ends, s.digests = s.part[:0], s.partIDs[:0], s.ends[:0], s.digests[:0]
	clear(s.intern)
	ok, err := s.member.ReadBucket(s.ctx, b, func(t *mapper.Tuple) error {
		s.part, s.partIDs = s.appendRow(s.part, s.partIDs, t)
		s.digests = append(s.digests, t.Digest)
		return nil
	})
	if err != nil || !ok {
		return nil, false, err
	}
	k := 32 * int(b-s.lo)
	if tuplehash.BucketLeafInto(b, s.digests, &s.scratch) != [32]byte(s.leaves[k:k+32]) {
		return nil, false, nil
	}
	setIDs(s.part, s.partIDs, s.ends)
	return s.part, true, nil
}

// closeOpen records the member read bucket by bucket and frees it.
func (s *memberSource) closeOpen() {
	i := s.open
	s.member.Close()
	s.open, s.member = -1, nil
	res := mapper.Result{Side: mapper.SideSnapshot, Index: i, ShardID: s.members[i].ID, BucketsRead: s.read}
	s.results = append(s.results, res)
	if s.progress != nil {
		s.progress(res)
	}
}

// finish records the member still open and skips the members a lazy
// source was never asked to read.
func (s *memberSource) finish() error {
	if s.open >= 0 {
		s.closeOpen()
	}
	// A release that matches its snapshot skips every member here: the
	// lookups run side by side (one round trip each on S3), the results
	// are recorded in order.
	failures := make([][]manifest.ShardFailure, len(s.todo))
	var g errgroup.Group
	g.SetLimit(skipLookups)
	for k, i := range s.todo {
		g.Go(func() (err error) {
			failures[k], err = s.lookUp(i)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	for k, i := range s.todo {
		s.record(i, failures[k])
	}
	s.todo = nil
	return nil
}

// skipLookups bounds the member lookups finish runs at once.
const skipLookups = 16

// skip records member i as not read, after checking that the store still
// holds its version with its size (a Head, no body).
func (s *memberSource) skip(i int) error {
	failures, err := s.lookUp(i)
	if err != nil {
		return err
	}
	s.record(i, failures)
	return nil
}

// lookUp checks that the store holds member i's version with its size.
func (s *memberSource) lookUp(i int) ([]manifest.ShardFailure, error) {
	failures, err := mapper.CheckStored(s.ctx, s.opts.Store, mapper.SideSnapshot, s.members[i])
	if err != nil {
		return nil, wrap(err, "snapshot member %s", s.members[i].ID)
	}
	return failures, nil
}

// record records member i as skipped, with the failures of its lookup.
func (s *memberSource) record(i int, failures []manifest.ShardFailure) {
	res := mapper.Result{Side: mapper.SideSnapshot, Index: i, ShardID: s.members[i].ID, Skipped: true, Failures: failures}
	s.results = append(s.results, res)
	if s.progress != nil {
		s.progress(res)
	}
}

// release hands the source's buffers on; s must not be used after.
func (s *memberSource) release() {
	s.next.Release()
	s.next = nil
	s.member.Close()
	s.member = nil
	// The rows' strings would keep the last member's bytes alive.
	clear(s.rows[:cap(s.rows)])
	memberBufPool.Put(memberBufs{rows: s.rows[:0], ids: s.ids[:0], ends: s.ends[:0]})
	s.memberBufs = memberBufs{}
}

// Next implements reducer.Source.
func (s *memberSource) Next() (uint32, []shuffle.Row, error) {
	for s.pos >= len(s.rows) {
		if len(s.todo) == 0 {
			return 0, nil, io.EOF
		}
		i := s.todo[0]
		s.todo = s.todo[1:]
		if err := s.load(i); err != nil {
			return 0, nil, err
		}
	}
	b := s.rows[s.pos].Bucket
	end := s.pos + 1
	for end < len(s.rows) && s.rows[end].Bucket == b {
		end++
	}
	rows := s.rows[s.pos:end]
	s.pos = end
	return b, rows, nil
}

// load maps member i into s.rows, sorted into shuffle order.
func (s *memberSource) load(i int) error {
	cur := s.next
	if cur == nil || cur.Input().Index != i {
		cur.Release()
		cur = s.fetch(i, false)
	}
	// The next member is read while this one decodes and merges.
	s.next = nil
	if len(s.todo) > 0 {
		s.next = s.fetch(s.todo[0], true)
	}
	return s.fill(i, func(emit func(*mapper.Tuple) error) (mapper.Result, error) {
		return mapper.MapFetched(s.ctx, s.opts, cur, emit)
	})
}

// fill puts the tuples mapping member i gives into s.rows, sorted into
// shuffle order, and records the mapper's result.
func (s *memberSource) fill(i int, mapMember func(emit func(*mapper.Tuple) error) (mapper.Result, error)) error {
	desc := s.members[i]
	// The descriptor's count sizes the rows once (a hint, bounded).
	n := int(min(max(desc.Records, 0), MapTaskTuples))
	s.rows, s.pos, s.ids, s.ends = slices.Grow(s.rows[:0], n), 0, s.ids[:0], slices.Grow(s.ends[:0], n)
	clear(s.intern)
	start := time.Now()
	res, err := mapMember(func(t *mapper.Tuple) error {
		s.rows, s.ids = s.appendRow(s.rows, s.ids, t)
		return nil
	})
	s.mapNanos += int64(time.Since(start))
	if err != nil {
		return wrap(err, "snapshot member %s", desc.ID)
	}
	s.results = append(s.results, res)
	if s.progress != nil {
		s.progress(res)
	}
	if !res.Decoded {
		s.rows = s.rows[:0]
		return nil
	}
	setIDs(s.rows, s.ids, s.ends)
	return nil
}

// appendRow appends t to rows as a snapshot row, its sampleId's bytes to
// ids and their end to s.ends (setIDs makes them strings later). The
// tuple's strings are the decoder's: the few distinct sourceIds and
// splits are shared copies.
func (s *memberSource) appendRow(rows []shuffle.Row, ids []byte, t *mapper.Tuple) ([]shuffle.Row, []byte) {
	ids = append(ids, t.SampleID...)
	s.ends = append(s.ends, len(ids))
	return append(rows, shuffle.Row{
		Bucket: t.Bucket, Side: shuffle.Snapshot,
		SourceID: s.str(t.SourceID), SourceVersion: t.SourceVersion,
		ContentDigest: t.LogicalContentDigest, Split: s.str(t.Split),
		SchemaDigest: t.SchemaDigest, TupleDigest: t.Digest,
	}), ids
}

// setIDs gives rows their sampleIds, kept end to end in ids (row k's ends
// at ends[k]) as one string, and puts the rows in shuffle order.
func setIDs(rows []shuffle.Row, ids []byte, ends []int) {
	all := string(ids)
	lo := 0
	for k := range rows {
		rows[k].SampleID = all[lo:ends[k]]
		lo = ends[k]
	}
	// Writers sort members by (bucket, sampleId, tuple digest), which is
	// shuffle order for one side: then this is one pass.
	if !slices.IsSortedFunc(rows, func(a, b shuffle.Row) int { return shuffle.Compare(&a, &b) }) {
		shuffle.Sort(rows)
	}
}

// fetch starts reading member i (see mapper.Prefetch).
func (s *memberSource) fetch(i int, async bool) *mapper.Fetch {
	return mapper.Prefetch(s.ctx, s.opts, mapper.Input{Side: mapper.SideSnapshot, Index: i, Desc: s.members[i]}, async)
}

// maxInterned bounds the strings one member shares: a dataset whose
// sourceIds are all distinct gains nothing from sharing them.
const maxInterned = 4096

func (s *memberSource) str(v string) string {
	if c, ok := s.intern[v]; ok {
		return c
	}
	c := string([]byte(v))
	if len(s.intern) < maxInterned {
		s.intern[c] = c
	}
	return c
}
