package mapper

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/parquet/file"

	"github.com/shardproof/shardproof/internal/canon"
	"github.com/shardproof/shardproof/internal/errcode"
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
	// groups is the bucket of each row group, parsed from the footer the
	// first time it is needed; listed reports a usable list.
	groups         []uint32
	parsed, listed bool
	why            string
}

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

// ReadBucket decodes the row groups the member's footer lists for bucket
// b and emits their tuples, in stored order. ok is false, with nothing
// emitted that should be kept, when the member cannot be read that way:
// its read failed, its footer lists no buckets or a list that does not fit
// it, a row group does not decode, or a tuple lies in another bucket.
// Nothing is checked against the member's descriptor.
func (m *Member) ReadBucket(ctx context.Context, b uint32, emit func(*Tuple) error) (ok bool, err error) {
	if m.err != nil || m.f.data == nil || len(m.res.Failures) > 0 || m.parsed && !m.listed {
		return false, nil
	}
	if m.f.mapping != nil {
		defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	}
	want := canon.SnapshotMemberSchema()
	logicalSchema, err := canon.SchemaDigest(want)
	if err != nil {
		return false, err
	}
	d := decoding{want: want, logicalSchema: logicalSchema, tupleSchema: m.o.SchemaDigest, mapping: m.f.mapping}
	d.pick = func(pf *file.Reader) ([]int, string, bool) {
		if !m.parsed {
			m.parsed = true
			m.groups, m.why = bucketGroups(pf)
			m.listed = m.why == ""
		}
		if !m.listed {
			return nil, m.why, false
		}
		gs := []int{} // not nil: nil reads every row group
		for g, gb := range m.groups {
			if gb == b {
				gs = append(gs, g)
			}
		}
		return gs, "", true
	}
	var (
		tp      Tuple
		outside bool
	)
	start := time.Now()
	dr, err := d.run(ctx, m.f.data, DecoderColumnReader, func(t *tuplehash.Tuple, dg [32]byte) error {
		tp.Tuple, tp.Digest, tp.Bucket = *t, dg, tuplehash.Bucket(t.SampleID, m.o.K)
		if tp.Bucket != b {
			outside = true
			return errStopBucket
		}
		if err := emit(&tp); err != nil {
			return &emitError{err}
		}
		return nil
	})
	if tm := m.o.Timings; tm != nil {
		tm.Decode.Add(int64(time.Since(start)) - d.hashNanos - d.tupleNanos)
		tm.Tuples.Add(d.tupleNanos + d.hashNanos)
	}
	if ee := (*emitError)(nil); errors.As(err, &ee) {
		return false, ee.err
	}
	if errors.Is(err, errMapFault) {
		return false, errcode.Wrap(errcode.IO, err, "decode %s version %s", m.in.Desc.Digest.BlobKey(), m.f.version)
	}
	if err != nil {
		return false, err
	}
	return dr.decoded && !outside && len(dr.failures) == 0, nil
}

// errStopBucket stops a partial read at a tuple outside its bucket (a
// decode failure of the read, so ok is false).
var errStopBucket = errors.New("tuple outside the row group's bucket")

// bucketGroups parses the footer's BucketRowGroupsKey entry: one bucket
// per row group, never decreasing. why says what is wrong with it.
func bucketGroups(pf *file.Reader) (groups []uint32, why string) {
	kv := pf.MetaData().KeyValueMetadata()
	v := kv.FindValue(canon.BucketRowGroupsKey)
	if v == nil {
		return nil, "the footer lists no row-group buckets"
	}
	n := pf.NumRowGroups()
	if len(*v) > 11*n {
		return nil, "the row-group bucket list is longer than its row groups need"
	}
	for i, f := range strings.Split(*v, ",") {
		x, err := strconv.ParseUint(f, 10, 32)
		if err != nil || i > 0 && uint32(x) < groups[i-1] {
			return nil, fmt.Sprintf("row-group bucket %d (%.12q) is not a bucket at or after the previous one", i, f)
		}
		groups = append(groups, uint32(x))
	}
	if len(groups) != n {
		return nil, fmt.Sprintf("the footer lists %d row-group buckets for %d row groups", len(groups), n)
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
	m.f.data = nil
	if m.bp != nil {
		putBuf(m.bp)
		m.bp = nil
	}
}
