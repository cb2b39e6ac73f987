package mapper

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/parquet/file"

	"github.com/shardproof/shardproof/internal/canon"
	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/internal/freelist"
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/tuplehash"
)

// Member is one snapshot member's bytes, held for reading bucket by
// bucket (ReadBucket) and, if that does not do, whole (Map). A reducer
// with the snapshot's leaf index reads only the buckets whose release
// leaf differs; the tuples ReadBucket gives are checked by the caller
// against the indexed leaf, since the file's storage digest is not.
type Member struct {
	o   Options
	in  Input
	f   fileBytes
	bp  *[]byte
	res Result
	err error
	// groups is each row group's bucket range, parsed from the footer
	// the first time it is needed; listed reports a usable list.
	groups         []bucketRange
	parsed, listed bool
	why            string
	// cached are the row groups last decoded, whose tuples (own copies)
	// are held in tuples: consecutive buckets of one row group decode it
	// once.
	cached []int
	tuples []Tuple
	ids    []byte
	ends   []int
	intern map[string]string
}

// memberBuf is a Member's decoded-tuple buffers, kept between members:
// grown from nothing for every member, they were 800 MB of garbage in a
// 4M-record verify.
type memberBuf struct {
	tuples []Tuple
	ids    []byte
	ends   []int
}

var memberBufs = freelist.New[memberBuf](2 * runtime.GOMAXPROCS(0))

// maxPooledTuples bounds the buffers kept: a row group a hostile footer
// made huge is not retained.
const maxPooledTuples = 1 << 16

// bucketRange is the first and last bucket of one row group.
type bucketRange struct{ lo, hi uint32 }

// OpenMember waits for p's read (see Prefetch) and keeps the member's
// bytes; p is consumed. Close frees them.
func OpenMember(o Options, p *Fetch) *Member {
	o = o.withDefaults()
	m := &Member{o: o, in: p.in, bp: p.bp, res: Result{Side: p.in.Side, Index: p.in.Index, ShardID: p.in.Desc.ID}}
	<-p.done
	m.f, m.err = p.f, p.err
	m.res.Failures = append(m.res.Failures, p.fails...)
	start := time.Now()
	fail := func(code errcode.Code, format string, args ...any) {
		m.res.Failures = append(m.res.Failures, manifest.ShardFailure{
			Shard: p.in.Desc.ID, Side: p.in.Side.String(), Code: string(code), Detail: fmt.Sprintf(format, args...),
		})
	}
	if m.err == nil {
		m.err = m.f.finish(o, fail)
	} else if m.f.file != nil {
		m.f.file.Close()
		m.f.file = nil
	}
	if o.Timings != nil {
		o.Timings.Read.Add(p.nanos + int64(time.Since(start)))
	}
	return m
}

// ReadBucket emits the tuples of bucket b, in stored order, decoding
// only the row groups the member's footer lists as holding b (see
// canon.BucketRowGroupsKey), or reusing those it decoded last. ok is
// false, with nothing emitted that should be kept, when the member cannot
// be read that way: its read failed, its footer lists no bucket ranges or
// a list that does not fit it, or a row group does not decode. Nothing is
// checked against the member's descriptor: the caller authenticates the
// tuples (their bucket leaf), since a lying list can hide some of them.
func (m *Member) ReadBucket(ctx context.Context, b uint32, emit func(*Tuple) error) (ok bool, err error) {
	if m.err != nil || m.f.data == nil || len(m.res.Failures) > 0 || m.parsed && !m.listed {
		return false, nil
	}
	var want []int
	if m.parsed {
		want = m.covering(b)
	}
	if !m.parsed || !slices.Equal(want, m.cached) {
		if ok, err := m.decode(ctx, b); !ok || err != nil {
			return false, err
		}
	}
	for i := range m.tuples {
		if t := &m.tuples[i]; t.Bucket == b {
			// decode digests no tuple: only those of the buckets asked for.
			d, err := t.Tuple.Digest()
			if err != nil {
				return false, nil
			}
			t.Digest = d
			if err := emit(t); err != nil {
				return false, err
			}
		}
	}
	return true, nil
}

// covering returns the row groups whose listed range holds b.
func (m *Member) covering(b uint32) []int {
	gs := []int{} // not nil: nil reads every row group
	for g, r := range m.groups {
		if r.lo <= b && b <= r.hi {
			gs = append(gs, g)
		}
	}
	return gs
}

// decode decodes the row groups holding b into m.tuples.
func (m *Member) decode(ctx context.Context, b uint32) (bool, error) {
	if m.f.mapping != nil {
		defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	}
	want := canon.SnapshotMemberSchema()
	logicalSchema, err := canon.SchemaDigest(want)
	if err != nil {
		return false, err
	}
	if m.tuples == nil {
		b, _ := memberBufs.Get()
		m.tuples, m.ids, m.ends = b.tuples, b.ids, b.ends
	}
	m.cached, m.tuples, m.ids, m.ends = nil, m.tuples[:0], m.ids[:0], m.ends[:0]
	if m.intern == nil {
		m.intern = map[string]string{}
	}
	var groups []int
	d := decoding{want: want, logicalSchema: logicalSchema, tupleSchema: m.o.SchemaDigest, mapping: m.f.mapping, tuplesOnly: true}
	d.pick = func(pf *file.Reader) ([]int, string, bool) {
		if !m.parsed {
			m.parsed = true
			m.groups, m.why = bucketGroups(pf)
			m.listed = m.why == ""
		}
		if !m.listed {
			return nil, m.why, false
		}
		groups = m.covering(b)
		return groups, "", true
	}
	start := time.Now()
	dr, err := d.run(ctx, m.f.data, DecoderColumnReader, func(t *tuplehash.Tuple, _ [32]byte) error {
		m.ids = append(m.ids, t.SampleID...)
		m.ends = append(m.ends, len(m.ids))
		m.tuples = append(m.tuples, Tuple{Tuple: *t, Bucket: tuplehash.Bucket(t.SampleID, m.o.K)})
		c := &m.tuples[len(m.tuples)-1]
		c.SourceID, c.Split = m.str(t.SourceID), m.str(t.Split)
		return nil
	})
	if tm := m.o.Timings; tm != nil {
		tm.Decode.Add(int64(time.Since(start)) - d.hashNanos - d.tupleNanos)
		tm.Tuples.Add(d.tupleNanos + d.hashNanos)
	}
	if errors.Is(err, errMapFault) {
		return false, errcode.Wrap(errcode.IO, err, "decode %s version %s", m.in.Desc.Digest.BlobKey(), m.f.version)
	}
	if err != nil || !dr.decoded || len(dr.failures) > 0 {
		m.tuples = m.tuples[:0]
		return false, err
	}
	all := string(m.ids)
	lo := 0
	for i := range m.tuples {
		m.tuples[i].SampleID = all[lo:m.ends[i]]
		lo = m.ends[i]
	}
	m.cached = groups
	return true, nil
}

// str returns a copy of v shared by the member's equal values (sourceIds
// and splits repeat).
func (m *Member) str(v string) string {
	if c, ok := m.intern[v]; ok {
		return c
	}
	c := strings.Clone(v)
	if len(m.intern) < 4096 {
		m.intern[c] = c
	}
	return c
}

// bucketGroups parses the footer's BucketRowGroupsKey entry: each row
// group's first and last bucket, in order, ranges never going back. why
// says what is wrong with it.
func bucketGroups(pf *file.Reader) (groups []bucketRange, why string) {
	kv := pf.MetaData().KeyValueMetadata()
	v := kv.FindValue(canon.BucketRowGroupsKey)
	if v == nil {
		return nil, "the footer lists no row-group bucket ranges"
	}
	n := pf.NumRowGroups()
	if len(*v) > 22*n {
		return nil, "the row-group bucket list is longer than its row groups need"
	}
	for i, f := range strings.Split(*v, ",") {
		a, z, found := strings.Cut(f, "-")
		lo, err1 := strconv.ParseUint(a, 10, 32)
		hi, err2 := strconv.ParseUint(z, 10, 32)
		if !found || err1 != nil || err2 != nil || lo > hi || i > 0 && uint32(lo) < groups[i-1].hi {
			return nil, fmt.Sprintf("row-group bucket range %d (%.24q) is not lo-hi at or after the previous one", i, f)
		}
		groups = append(groups, bucketRange{uint32(lo), uint32(hi)})
	}
	if len(groups) != n {
		return nil, fmt.Sprintf("the footer lists %d row-group bucket ranges for %d row groups", len(groups), n)
	}
	return groups, ""
}

// Map maps the whole member as MapFetched does (storage digest, every
// check against its descriptor). The Member must not be read after.
func (m *Member) Map(ctx context.Context, emit func(*Tuple) error) (Result, error) {
	if m.err != nil || m.f.data == nil {
		logResult(m.res, m.err)
		return m.res, m.err
	}
	return mapData(ctx, m.o, m.in, &m.f, m.res, emit)
}

// Close frees the member's bytes.
func (m *Member) Close() {
	if m == nil {
		return
	}
	if m.f.file != nil {
		m.f.file.Close()
		m.f.file = nil
	}
	if m.f.mapping != nil {
		m.f.mapping.Close()
		m.f.mapping = nil
	}
	if m.tuples != nil && cap(m.tuples) <= maxPooledTuples {
		memberBufs.Put(memberBuf{m.tuples[:0], m.ids[:0], m.ends[:0]})
	}
	m.f.data, m.tuples, m.ids, m.ends, m.cached = nil, nil, nil, nil, nil
	if m.bp != nil {
		putBuf(m.bp)
		m.bp = nil
	}
}
