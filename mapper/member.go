package mapper

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/parquet/file"

	"github.com/shardproof/shardproof/internal/canon"
	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/internal/freelist"
	"github.com/shardproof/shardproof/internal/sha256x2"
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
	// runs are the file's bucket runs (canon.BucketRunsKey) or, if it
	// lists none, its row groups as runs of their bucket ranges
	// (canon.BucketRowGroupsKey), parsed from the footer the first time
	// they are needed; listed reports a usable list.
	runs           []bucketRun
	parsed, listed bool
	why            string
	// cached are the rows last decoded, whose tuples (own copies) are
	// held in tuples: consecutive buckets of one row group listed by
	// range decode it once.
	cached []rowRange
	tuples []Tuple
	ids    []byte
	ends   []int
	intern map[string]string
	// encs are two tuple encodings, for digest2.
	encs [2][]byte
	// footer is the file's footer, parsed once for all bucket reads.
	footer keptFooter
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

// bucketRun is rows of buckets lo to hi (one bucket when listed by run,
// a row group's range when listed by row group).
type bucketRun struct {
	lo, hi uint32
	rows   rowRange
	// groupRows is the number of rows in the run's row group.
	groupRows int64
}

// readWindow is the row span a bucket read decodes at least, when its
// bucket is short: a run of fewer than readWindow/4 rows is widened to
// the aligned windows of readWindow rows holding it, so the buckets that
// share a page (stage writes members in pages of 1,024 rows) are decoded
// once for all of them, by consecutive reads (ReadBucket keeps the last
// rows decoded). A small release with many differing buckets reads
// dozens of buckets from each page: every one of them decompressed the
// same pages of every column again. A long run is not widened: its pages
// are its own, and rows of other buckets would be decoded for nothing.
const readWindow = 1024

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
		m.res.Failures = append(m.res.Failures, newFailure(p.in.Desc.ID, p.in.Side, code, format, args...))
	}
	if m.err == nil {
		m.err = m.f.finish(o, true, fail)
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
// only the rows the member's footer lists as holding b: its runs of b
// (canon.BucketRunsKey; through the page index, only the pages holding
// them; a short run with the rest of its read window, readWindow), or
// else the row groups whose bucket range holds b
// (canon.BucketRowGroupsKey), reusing the rows it decoded last when
// they hold b's, and the footer it parsed first. ok is false,
// with nothing emitted that should be kept, when the member cannot be
// read that way: its read failed, its footer lists neither or a list that
// does not fit it, or the rows do not decode. Nothing is checked against
// the member's descriptor: the caller authenticates the tuples (their
// bucket leaf), since a lying list can hide some of them.
func (m *Member) ReadBucket(ctx context.Context, b uint32, emit func(*Tuple) error) (ok bool, err error) {
	if m.err != nil || m.f.data == nil || len(m.res.Failures) > 0 || m.parsed && !m.listed {
		return false, nil
	}
	var want []rowRange
	if m.parsed {
		want = m.covering(b)
	}
	if !m.parsed || m.cached == nil || !within(want, m.cached) {
		if ok, err := m.decode(ctx, b); !ok || err != nil {
			return false, err
		}
	}
	// decode digests no tuple: only those of the buckets asked for, two
	// at a time.
	var pend *Tuple
	for i := range m.tuples {
		t := &m.tuples[i]
		if t.Bucket != b {
			continue
		}
		if pend == nil {
			pend = t
			continue
		}
		if !m.digest2(pend, t) {
			return false, nil
		}
		if err := emit(pend); err != nil {
			return false, err
		}
		if err := emit(t); err != nil {
			return false, err
		}
		pend = nil
	}
	if pend != nil {
		d, err := pend.Tuple.Digest()
		if err != nil {
			return false, nil
		}
		pend.Digest = d
		if err := emit(pend); err != nil {
			return false, err
		}
	}
	return true, nil
}

// digest2 sets the tuple digests of a and b, or reports that one cannot
// be encoded.
func (m *Member) digest2(a, b *Tuple) bool {
	var err error
	if m.encs[0], err = a.Tuple.AppendEncoding(m.encs[0][:0]); err != nil {
		return false
	}
	if m.encs[1], err = b.Tuple.AppendEncoding(m.encs[1][:0]); err != nil {
		return false
	}
	a.Digest, b.Digest = sha256x2.Sum2(m.encs[0], m.encs[1])
	return true
}

// covering returns the listed rows whose bucket range holds b.
func (m *Member) covering(b uint32) []rowRange { return covering(m.runs, b) }

// covering returns the rows of runs whose bucket range holds b, short
// runs widened to their read windows (readWindow), overlapping ranges of
// a row group merged.
func covering(runs []bucketRun, b uint32) []rowRange {
	sel := []rowRange{} // not nil: nil reads every row group
	for _, r := range runs {
		if r.lo > b || b > r.hi {
			continue
		}
		rr := r.rows
		if rr.n < readWindow/4 && r.groupRows >= rr.first+rr.n {
			lo := rr.first / readWindow * readWindow
			hi := min((rr.first+rr.n+readWindow-1)/readWindow*readWindow, r.groupRows)
			rr = rowRange{rr.group, lo, hi - lo}
		}
		if k := len(sel) - 1; k >= 0 && sel[k].group == rr.group && rr.first <= sel[k].first+sel[k].n {
			sel[k].n = max(sel[k].first+sel[k].n, rr.first+rr.n) - sel[k].first
			continue
		}
		sel = append(sel, rr)
	}
	return sel
}

// within reports whether every range of want lies inside one of have.
func within(want, have []rowRange) bool {
	for _, w := range want {
		in := false
		for _, h := range have {
			if h.group == w.group && h.first <= w.first && w.first+w.n <= h.first+h.n {
				in = true
				break
			}
		}
		if !in {
			return false
		}
	}
	return true
}

// decode decodes the listed rows holding b into m.tuples.
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
	var sel []rowRange
	d := decoding{want: want, logicalSchema: logicalSchema, tupleSchema: m.o.SchemaDigest, mapping: m.f.mapping, tuplesOnly: true, keep: &m.footer}
	d.pick = func(pf *file.Reader) ([]rowRange, string, bool) {
		if !m.parsed {
			m.parsed = true
			m.runs, m.why = listedRuns(pf)
			m.listed = m.why == ""
		}
		if !m.listed {
			return nil, m.why, false
		}
		sel = m.covering(b)
		return sel, "", true
	}
	start := time.Now()
	dr, err := d.run(ctx, m.f.data, DecoderColumnReader, func(t *tuplehash.Tuple, _ [32]byte) error {
		if err := checkText(t); err != nil {
			return err
		}
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
	m.cached = sel
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

// listedRuns parses the footer's bucket runs (BucketRunsKey) or, if it
// has none, its row-group bucket ranges (BucketRowGroupsKey, serializer
// version 4). why says what is wrong with the list.
func listedRuns(pf *file.Reader) ([]bucketRun, string) {
	runs, why := bucketRuns(pf)
	if runs == nil && why == "" {
		return bucketGroups(pf)
	}
	return runs, why
}

// bucketGroups parses the footer's BucketRowGroupsKey entry: each row
// group's first and last bucket, in order, ranges never going back, as
// one run per row group. why says what is wrong with it.
func bucketGroups(pf *file.Reader) (runs []bucketRun, why string) {
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
		if !found || err1 != nil || err2 != nil || lo > hi || i > 0 && uint32(lo) < runs[i-1].hi {
			return nil, fmt.Sprintf("row-group bucket range %d (%.24q) is not lo-hi at or after the previous one", i, f)
		}
		if i < n {
			nr := pf.MetaData().RowGroup(i).NumRows()
			runs = append(runs, bucketRun{uint32(lo), uint32(hi), rowRange{i, 0, nr}, nr})
		} else {
			runs = append(runs, bucketRun{lo: uint32(lo), hi: uint32(hi)})
		}
	}
	if len(runs) != n {
		return nil, fmt.Sprintf("the footer lists %d row-group bucket ranges for %d row groups", len(runs), n)
	}
	return runs, ""
}

// bucketRuns parses the footer's BucketRunsKey entry: "bucket:rows" for
// each run of one bucket's rows, in row order, buckets never going back,
// each run inside one row group, together every row of the file. No
// entry gives no runs and no why.
func bucketRuns(pf *file.Reader) (runs []bucketRun, why string) {
	md := pf.MetaData()
	v := md.KeyValueMetadata().FindValue(canon.BucketRunsKey)
	if v == nil {
		return nil, ""
	}
	total := md.NumRows
	if int64(len(*v)) > 22*max(total, 1) {
		return nil, "the bucket run list is longer than the file's rows need"
	}
	g, used := 0, int64(0)
	for i, f := range strings.Split(*v, ",") {
		a, z, found := strings.Cut(f, ":")
		b, err1 := strconv.ParseUint(a, 10, 32)
		n, err2 := strconv.ParseInt(z, 10, 64)
		if !found || err1 != nil || err2 != nil || n <= 0 || i > 0 && uint32(b) < runs[i-1].lo {
			return nil, fmt.Sprintf("bucket run %d (%.24q) is not bucket:rows at or after the previous bucket", i, f)
		}
		for g < md.NumRowGroups() && used == md.RowGroup(g).NumRows() {
			g, used = g+1, 0
		}
		if g == md.NumRowGroups() || n > md.RowGroup(g).NumRows()-used {
			return nil, fmt.Sprintf("bucket run %d (%.24q) does not fit in a row group", i, f)
		}
		runs = append(runs, bucketRun{uint32(b), uint32(b), rowRange{g, used, n}, md.RowGroup(g).NumRows()})
		used += n
	}
	for g < md.NumRowGroups() && used == md.RowGroup(g).NumRows() {
		g, used = g+1, 0
	}
	if g != md.NumRowGroups() {
		return nil, fmt.Sprintf("the bucket runs end in row group %d of %d, at its row %d", g, md.NumRowGroups(), used)
	}
	return runs, ""
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
	m.footer.Close()
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
