package mapper

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
	"log/slog"
	"math/bits"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/shardproof/shardproof/internal/canon"
	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/internal/freelist"
	"github.com/shardproof/shardproof/internal/mmapfile"
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/objstore"
	"github.com/shardproof/shardproof/tuplehash"
)

// Side says which document a mapped file belongs to.
type Side uint8

// The sides of a verification.
const (
	SideRelease  Side = 0 // a shard of the release manifest
	SideSnapshot Side = 1 // a member file of the snapshot manifest
)

// String returns "release" or "snapshot", as ShardFailure.Side spells it.
func (s Side) String() string {
	if s == SideSnapshot {
		return "snapshot"
	}
	return "release"
}

// Tuple is one member found in a file, with its tuple digest and bucket.
type Tuple struct {
	tuplehash.Tuple
	Digest [32]byte
	Bucket uint32
}

// Options are shared by every MapShard call of one verification.
type Options struct {
	// Store holds the shards at blobs/sha256/<hex>.
	Store objstore.Store
	// Schema is the release's record schema; SchemaDigest its digest (the
	// manifest's recordSchema).
	Schema       *manifest.RecordSchema
	SchemaDigest manifest.Digest
	// K is the number of bucket bits (0 means tuplehash.DefaultK).
	K uint
	// Decoder selects the Parquet decoding path; the zero value is the
	// faster one (see BenchmarkMapShard).
	Decoder Decoder
	// MaxBytes caps the bytes read of one file (default MaxShardBytes).
	MaxBytes int64
	// Timings, if non-nil, accumulates where MapShard spends its time.
	Timings *Timings
	// NoMap reads every file through the store's reader, hashing it as
	// it arrives, even when the store hands out an *os.File, which is
	// otherwise copied right before it is hashed or, for a member read
	// by bucket, mapped (see fileBytes.finish).
	NoMap bool
}

// Timings accumulates the time MapShard calls spend per stage, in
// nanoseconds summed over calls (see manifest.StageSeconds). It is safe
// for concurrent use.
type Timings struct {
	Read, StorageDigest, Decode, ContentDigest, Tuples atomic.Int64
}

// Input is one file to map.
type Input struct {
	Side Side
	// Index is the file's position in the manifest's shards or the
	// snapshot's members.
	Index int
	Desc  manifest.Shard
}

// Result holds the figures recomputed from one file.
type Result struct {
	Side    Side
	Index   int
	ShardID string
	// Records, Tokens, LogicalDigest and MemberSetDigest are valid when
	// Decoded is true.
	Records, Tokens                int64
	LogicalDigest, MemberSetDigest manifest.Digest
	// StorageDigest is sha256 of the bytes read; StoredBytes their count.
	StorageDigest manifest.Digest
	StoredBytes   int64
	// LogicalBytes is the decoded value bytes (see canon.Row).
	LogicalBytes int64
	Failures     []manifest.ShardFailure
	// FailuresOmitted holds the codes of the file's failures that its
	// task's commit record leaves out of Failures, one per failure: a
	// record lists at most the failures a report would, and the
	// aggregation counts these too. The mapper leaves it empty.
	FailuresOmitted []string `json:",omitempty"`
	// Decoded reports that every record decoded and tuples were emitted.
	Decoded bool
	// Skipped marks a snapshot member a reducer did not need to read:
	// every bucket it declares matched the snapshot's leaf index (see
	// package snapindex). Only Side, Index and ShardID are set, and
	// Failures when the store no longer holds the member's version with
	// its size (CheckStored).
	Skipped bool `json:",omitempty"`
	// BucketsRead marks a snapshot member a reducer read bucket by
	// bucket, through the row groups of the buckets it needed alone:
	// their number. The tuples of each hashed to the snapshot's indexed
	// leaf; the file's storage digest and whole-file figures were not
	// checked, and only Side, Index and ShardID are set besides.
	BucketsRead int `json:",omitempty"`
}

// MaxShardBytes is the default cap on one file: shards are decoded from
// memory, so a file larger than this is reported, not read.
const MaxShardBytes = 2 << 30

// MapShard maps one file: see the package doc. emit is called once per
// tuple, after the whole file decoded, in stored order; the *Tuple is only
// valid during the call. An error from emit is returned as is.
func MapShard(ctx context.Context, o Options, in Input, emit func(*Tuple) error) (Result, error) {
	var tuples []Tuple
	it := newInterner()
	res, err := MapShardStream(ctx, o, in, func(t *Tuple) error {
		if tuples == nil {
			tuples = make([]Tuple, 0, min(max(in.Desc.Records, 1), 1<<20))
		}
		c := *t
		c.SampleID, c.SourceID, c.Split = string([]byte(t.SampleID)), it.intern(t.SourceID), it.intern(t.Split)
		tuples = append(tuples, c)
		return nil
	})
	if err != nil || !res.Decoded {
		return res, err
	}
	for i := range tuples {
		if err := ctx.Err(); err != nil {
			return res, errcode.Wrap(errcode.Canceled, err, "map %s", in.Desc.ID)
		}
		if err := emit(&tuples[i]); err != nil {
			return res, err
		}
	}
	return res, nil
}

// checkText refuses a tuple whose string columns are not UTF-8. Arrow's
// utf8 type promises it and nothing checked it: such sampleIds went into
// reports as examples, which JSON turns into U+FFFD, so two of them in one
// reducer's range made the stored result fail its own check
// (SHUFFLE_CORRUPT, no verdict), and elsewhere collapsed into one example.
// The file fails with DECODE_ERROR instead; the message names the column,
// never the value.
func checkText(t *tuplehash.Tuple) error {
	switch {
	case !utf8.ValidString(t.SampleID):
		return errors.New("a sampleId is not valid UTF-8")
	case !utf8.ValidString(t.SourceID):
		return errors.New("a sourceId is not valid UTF-8")
	case !utf8.ValidString(t.Split):
		return errors.New("a split is not valid UTF-8")
	}
	return nil
}

// emitError carries an error returned by emit through the decoder, which
// would otherwise report it as the file's DECODE_ERROR.
type emitError struct{ err error }

func (e *emitError) Error() string { return e.err.Error() }

// MapShardStream is MapShard without buffering: emit is called as records
// decode, in stored order, and the *Tuple, strings included, is only
// valid during the call. Unless the returned Result has Decoded set and
// the error is nil, the caller MUST discard every tuple emitted for this
// file: a half-decoded file never reaches the reducers.
func MapShardStream(ctx context.Context, o Options, in Input, emit func(*Tuple) error) (Result, error) {
	return MapFetched(ctx, o, Prefetch(ctx, o, in, false), emit)
}

// Fetch is one file's bytes read ahead of its decoding: Prefetch starts
// reading on a goroutine of its own, so that a caller mapping file after
// file (a map task's inputs, a reducer's snapshot members) decodes one
// while the store delivers the next. On S3 a file costs a round trip and
// its transfer before the first byte is hashed; read ahead, that wait
// overlaps the previous file's decoding. Every Fetch MUST be passed to
// MapFetched or Release, exactly once.
type Fetch struct {
	in    Input
	done  chan struct{}
	bp    *[]byte
	f     fileBytes
	fails []manifest.ShardFailure
	err   error
	nanos int64
}

// Prefetch starts reading in's file with o. With async false the read
// happens here, before Prefetch returns.
func Prefetch(ctx context.Context, o Options, in Input, async bool) *Fetch {
	o = o.withDefaults()
	p := &Fetch{in: in, done: make(chan struct{}), bp: getBuf()}
	run := func() {
		defer close(p.done)
		start := time.Now()
		p.f, p.err = open(ctx, o, in.Desc, p.bp, func(code errcode.Code, format string, args ...any) {
			p.fails = append(p.fails, newFailure(in.Desc.ID, in.Side, code, format, args...))
		})
		p.nanos = int64(time.Since(start))
	}
	if async {
		go run()
	} else {
		run()
	}
	return p
}

// Input returns the input p reads.
func (p *Fetch) Input() Input { return p.in }

// Release waits for the read to end and frees what it holds, for a Fetch
// that will not be mapped (its map task failed first).
func (p *Fetch) Release() {
	if p == nil {
		return
	}
	<-p.done
	if p.f.file != nil {
		p.f.file.Close()
	}
	if p.f.mapping != nil {
		p.f.mapping.Close()
	}
	putBuf(p.bp)
}

func (o Options) withDefaults() Options {
	if o.K == 0 {
		o.K = tuplehash.DefaultK
	}
	if o.MaxBytes <= 0 {
		o.MaxBytes = MaxShardBytes
	}
	return o
}

// MapFetched is MapShardStream for a file Prefetch read (or is reading)
// with the same Options; it waits for the read and releases p.
func MapFetched(ctx context.Context, o Options, p *Fetch, emit func(*Tuple) error) (Result, error) {
	in := p.in
	res := Result{Side: in.Side, Index: in.Index, ShardID: in.Desc.ID}
	fail := func(code errcode.Code, format string, args ...any) {
		res.Failures = append(res.Failures, newFailure(in.Desc.ID, in.Side, code, format, args...))
	}
	o = o.withDefaults()
	<-p.done
	defer putBuf(p.bp)
	tm := o.Timings
	if tm == nil {
		tm = new(Timings)
	}
	f, err := p.f, p.err
	res.Failures = append(res.Failures, p.fails...)
	start := time.Now()
	if err == nil {
		// A local file is read now, right before it is hashed.
		err = f.finish(o, false, fail)
	} else if f.file != nil {
		f.file.Close()
	}
	tm.Read.Add(p.nanos + int64(time.Since(start)))
	if err != nil || f.data == nil {
		logResult(res, err)
		return res, err
	}
	if f.mapping != nil {
		defer f.mapping.Close()
	}
	return mapData(ctx, o, in, &f, res, emit)
}

// mapData is MapFetched once the file's bytes are at hand in f (mapped,
// or read and maybe hashed); res holds the failures of reading them.
func mapData(ctx context.Context, o Options, in Input, f *fileBytes, res Result, emit func(*Tuple) error) (Result, error) {
	fail := func(code errcode.Code, format string, args ...any) {
		res.Failures = append(res.Failures, newFailure(in.Desc.ID, in.Side, code, format, args...))
	}
	tm := o.Timings
	if tm == nil {
		tm = new(Timings)
	}
	data, mapping, version, sum := f.data, f.mapping, f.version, f.sum
	var err error
	if mapping != nil {
		// A file truncated while mapped faults on its lost pages: make
		// that a recoverable panic (see hashMapped and decoding.run).
		defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	}
	if !f.summed {
		start := time.Now()
		sum, err = hashMapped(data, mapping)
		tm.StorageDigest.Add(int64(time.Since(start)))
		if err != nil {
			err = errcode.Wrap(errcode.IO, err, "read %s version %s", in.Desc.Digest.BlobKey(), version)
			logResult(res, err)
			return res, err
		}
	}
	res.StorageDigest, res.StoredBytes = sum, int64(len(data))
	if res.StoredBytes != in.Desc.Size {
		fail(errcode.SizeMismatch, "manifest.size=%d, bytes read=%d (version %s)", in.Desc.Size, res.StoredBytes, version)
	}
	if res.StorageDigest != in.Desc.Digest {
		fail(errcode.DigestMismatch, "manifest.digest=%s, sha256 of bytes read=%s (version %s)", in.Desc.Digest, res.StorageDigest, version)
	}

	// What the file must contain: the release schema, or for member files
	// the member schema whose tuples name the release schema.
	want, logicalSchema := o.Schema, o.SchemaDigest
	if in.Side == SideSnapshot {
		want = canon.SnapshotMemberSchema()
		if logicalSchema, err = canon.SchemaDigest(want); err != nil {
			return res, err
		}
	}
	var (
		tp      Tuple
		outside int64
		first   uint32
	)
	rng := in.Desc.Buckets
	d := decoding{want: want, logicalSchema: logicalSchema, tupleSchema: o.SchemaDigest, mapping: mapping}
	start := time.Now()
	dr, err := d.run(ctx, data, o.Decoder, func(t *tuplehash.Tuple, dg [32]byte) error {
		if err := checkText(t); err != nil {
			return err
		}
		tp.Tuple, tp.Digest, tp.Bucket = *t, dg, tuplehash.Bucket(t.SampleID, o.K)
		if rng != nil && (tp.Bucket < rng.Lo || tp.Bucket >= rng.Hi) {
			if outside == 0 {
				first = tp.Bucket
			}
			outside++
		}
		if err := emit(&tp); err != nil {
			return &emitError{err}
		}
		return nil
	})
	// Decoding is what the run took besides hashing content and making
	// tuples, which it timed itself.
	tm.Decode.Add(int64(time.Since(start)) - d.hashNanos - d.tupleNanos)
	tm.ContentDigest.Add(d.hashNanos)
	tm.Tuples.Add(d.tupleNanos)
	if ee := (*emitError)(nil); errors.As(err, &ee) {
		return res, ee.err
	}
	if errors.Is(err, errMapFault) {
		err = errcode.Wrap(errcode.IO, err, "decode %s version %s", in.Desc.Digest.BlobKey(), version)
	}
	if err != nil {
		logResult(res, err)
		return res, err
	}
	for _, f := range dr.failures {
		fail(f.code, "%s", f.detail)
	}
	if !dr.decoded {
		logResult(res, nil)
		return res, nil
	}
	res.Decoded = true
	res.Records, res.Tokens, res.LogicalBytes = dr.records, dr.tokens, dr.logicalBytes
	res.LogicalDigest, res.MemberSetDigest = dr.logical, dr.memberSet
	if res.LogicalDigest != in.Desc.LogicalDigest {
		fail(errcode.LogicalMismatch, "manifest.logicalDigest=%s, recomputed from %d decoded records=%s", in.Desc.LogicalDigest, res.Records, res.LogicalDigest)
	}
	var diffs []string
	if res.Records != in.Desc.Records {
		diffs = append(diffs, fmt.Sprintf("manifest.records=%d, decoded records=%d", in.Desc.Records, res.Records))
	}
	if res.Tokens != in.Desc.Tokens {
		diffs = append(diffs, fmt.Sprintf("manifest.tokens=%d, sum of decoded tokens=%d", in.Desc.Tokens, res.Tokens))
	}
	if res.MemberSetDigest != in.Desc.MemberSetDigest {
		diffs = append(diffs, fmt.Sprintf("manifest.memberSetDigest=%s, recomputed=%s", in.Desc.MemberSetDigest, res.MemberSetDigest))
	}
	if outside > 0 {
		diffs = append(diffs, fmt.Sprintf("manifest.buckets=[%d, %d), but %d decoded tuples lie outside it (the first in bucket %d)", rng.Lo, rng.Hi, outside, first))
		// Reducers may read a member for its declared range alone: one
		// that breaks it contributes no tuples, however it is read.
		res.Decoded = false
	}
	for _, d := range diffs {
		fail(errcode.CountMismatch, "%s", d)
	}
	logResult(res, nil)
	return res, nil
}

// MaxFailureDetail is the most bytes of a failure's detail. Every
// failure of every file goes into its task's commit record and the
// report, each capped at manifest.MaxDocumentSize: a detail that names
// what a file holds (a SCHEMA_MISMATCH lists the file's fields, a
// decoder's error may quote a column) would otherwise grow with the
// file, and a few hundred files of thousands of columns made a report,
// or a commit record, no verification could store.
const MaxFailureDetail = 1024

// newFailure is a failure of file id, its detail cut to MaxFailureDetail
// bytes (at a character boundary, saying how long it was), as the
// commit record's JSON gives it back (asJSON).
func newFailure(id string, side Side, code errcode.Code, format string, args ...any) manifest.ShardFailure {
	return manifest.ShardFailure{Shard: asJSON(id), Side: side.String(), Code: string(code), Detail: capDetail(asJSON(fmt.Sprintf(format, args...)))}
}

// asJSON returns s with each byte that is not part of valid UTF-8
// replaced by U+FFFD, as encoding/json writes and so decodes it. A
// detail may quote what a file holds (a SCHEMA_MISMATCH lists the names
// of its fields), any bytes; a task cuts its failures
// (manifest.ListedFailures) by their order and the bytes of their JSON,
// and the aggregation, which reads them from the commit records, must
// see the same failures: a byte 0xff is 6 bytes of JSON ("\ufffd") where
// the U+FFFD it decodes to is 3, and the two sort differently.
func asJSON(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			b.WriteRune(utf8.RuneError)
		} else {
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

func capDetail(s string) string {
	if len(s) <= MaxFailureDetail {
		return s
	}
	tail := fmt.Sprintf("… (%d bytes in all)", len(s))
	cut := MaxFailureDetail - len(tail)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + tail
}

func logResult(res Result, err error) {
	if err != nil {
		slog.Warn("map: operational error", "shard", res.ShardID, "side", res.Side.String(), "code", errcode.Of(err))
		return
	}
	// At debug: a line per failure grows with the release (4,000
	// corrupted shards logged 8,000), and the report lists them.
	for _, f := range res.Failures {
		slog.Debug("map: shard failure", "shard", res.ShardID, "side", f.Side, "code", f.Code, "storageDigest", res.StorageDigest.String())
	}
}

// bufs holds read buffers, outside the Go heap (mmapfile.Alloc): a
// file's bytes are needed only while it is decoded, and reusing them
// saves allocating and faulting in every file. In the heap, buffers the size of
// a shard raised the collector's target by as much and verify's peak RSS
// by 70-80 MB. It keeps about two per core: one being decoded, one read
// ahead.
var bufs = freelist.New[[]byte](2*runtime.GOMAXPROCS(0) + 1)

// getBuf returns a holder for a read buffer: empty, filled when a read
// needs one (takeBuf), and given back with putBuf.
func getBuf() *[]byte { return new([]byte) }

// takeBuf returns a kept buffer, emptied, or nil.
func takeBuf() []byte {
	b, _ := bufs.Get()
	return b[:0]
}

// putBuf keeps the buffer *p holds for another read, or frees it: an
// outsized one, or one the list has no room for. *p must not be used
// after.
func putBuf(p *[]byte) {
	if p == nil {
		return
	}
	b := *p
	*p = nil
	if cap(b) == 0 {
		return
	}
	if cap(b) > 256<<20 || !bufs.Put(b[:0]) {
		mmapfile.Free(b)
	}
}

// growBuf returns b with room for at least n bytes and b's contents: b
// itself if it has it, or else a new buffer from mmapfile.Alloc (a power
// of two of at least 1 MiB: only the pages a read writes become
// resident) into which b is copied, b being freed.
func growBuf(b []byte, n int) ([]byte, error) {
	if cap(b) >= n {
		return b, nil
	}
	nb, err := mmapfile.Alloc(max(1<<20, 1<<bits.Len(uint(n-1))))
	if err != nil {
		return b, errcode.Wrap(errcode.IO, err, "read buffer")
	}
	nb = nb[:copy(nb, b)]
	mmapfile.Free(b)
	return nb, nil
}

// errMapFault is a memory fault inside a mapped file: it shrank while
// verify read it.
var errMapFault = errors.New("mapped file changed size while being read")

// hashMapped returns sha256 of data, or errMapFault if data is mapped
// and faults (see MapShardStream).
func hashMapped(data []byte, m *mmapfile.Mapping) (sum [32]byte, err error) {
	if m != nil {
		defer func() {
			if p := recover(); p != nil {
				if !m.Fault(p) {
					panic(p)
				}
				err = errMapFault
			}
		}()
	}
	return sha256.Sum256(data), nil
}

// fileBytes is one file version as read: its bytes, mapped or in a
// buffer, and their sha256 when it was computed while reading.
type fileBytes struct {
	data    []byte
	mapping *mmapfile.Mapping
	version objstore.Version
	sum     [32]byte
	summed  bool
	// file, when set, is a local file read opened but left to map: a
	// read ahead (Prefetch) opens it early and maps it when its turn
	// comes, since mapping populates the pages and that work is best done
	// right before the hashing that reads them. finish maps it.
	file *os.File
	key  string
	buf  *[]byte
	// descSize is the descriptor's size, for messages.
	descSize int64
}

// finish reads or maps f.file, if open left one, and closes it. A file
// decoded whole is read into a buffer (f.buf), unhashed (mapData hashes
// it): on this project's VMs sha256 and zstd ran a third slower over a
// file's mapped page-cache pages than over a copy of them, which cost
// about 0.5 CPU-seconds per GB of shards in the storage digest alone. A
// file read only in parts (mapIt: a snapshot member whose buckets a
// reducer reads) is mapped, so that only the pages read are touched.
func (f *fileBytes) finish(o Options, mapIt bool, fail func(errcode.Code, string, ...any)) error {
	file := f.file
	if file == nil {
		return nil
	}
	f.file = nil
	defer file.Close()
	fi, err := file.Stat()
	if err != nil {
		return errcode.Wrap(errcode.IO, err, "read %s version %s", f.key, f.version)
	}
	if fi.Size() > o.MaxBytes {
		fail(errcode.SizeMismatch, "manifest.size=%d, store size=%d exceeds the %d-byte cap (version %s); not read", f.descSize, fi.Size(), o.MaxBytes, f.version)
		return nil
	}
	if mapIt {
		if m, err := mmapfile.Map(file, fi.Size()); err == nil {
			f.data, f.mapping = m.Bytes(), m
			return nil
		}
		// Not mappable (a platform or file system without mmap): read it.
	}
	if err := f.readBody(file, o, fi.Size(), false); err != nil {
		return err
	}
	if f.data == nil {
		fail(errcode.SizeMismatch, "manifest.size=%d, version %s holds more than the %d-byte cap; not decoded", f.descSize, f.version, o.MaxBytes)
	}
	return nil
}

// CheckStored checks, without reading it, that the store holds the version
// d names with d's size: what can be said of a snapshot member that a
// reducer had no bucket to read (every bucket it declares matched the
// snapshot's leaf index). The leaf index proves the member's leaves, not
// that the member file is still there: a member deleted or replaced out of
// band is VERSION_MISSING or SIZE_MISMATCH here, as it is to a full read.
// An error is the store's own (I/O, unreachable).
func CheckStored(ctx context.Context, st objstore.Store, side Side, d manifest.Shard) ([]manifest.ShardFailure, error) {
	var out []manifest.ShardFailure
	fail := func(code errcode.Code, format string, args ...any) {
		out = append(out, newFailure(d.ID, side, code, format, args...))
	}
	key, v := d.Digest.BlobKey(), objstore.Version(d.ObjectVersion)
	if v == "" {
		fail(errcode.VersionMissing, "manifest.objectVersion is empty; refusing to read the latest version of %s", key)
		return out, nil
	}
	info, err := st.Head(ctx, key, v)
	switch {
	case objstore.IsNotExist(err):
		fail(errcode.VersionMissing, "store has no version %s of %s", v, key)
	case err != nil:
		return nil, err
	case info.Size != d.Size:
		fail(errcode.SizeMismatch, "manifest.size=%d, store size=%d (version %s)", d.Size, info.Size, v)
	}
	return out, nil
}

// open starts reading exactly the descriptor's version, or records a
// failure (and leaves no data) when the version is absent or too large.
// A remote body (S3) is read into *buf, which open grows as needed, and
// hashed as it arrives, so the storage digest costs nothing beyond
// waiting for the network. A local file (the file store's *os.File) is
// only opened: finish reads or maps it, and the caller must close a
// mapping after its last use of the bytes.
func open(ctx context.Context, o Options, d manifest.Shard, buf *[]byte, fail func(errcode.Code, string, ...any)) (fileBytes, error) {
	key, v := d.Digest.BlobKey(), objstore.Version(d.ObjectVersion)
	f := fileBytes{version: v, key: key, buf: buf, descSize: d.Size}
	if v == "" {
		fail(errcode.VersionMissing, "manifest.objectVersion is empty; refusing to read the latest version of %s", key)
		return f, nil
	}
	info, err := o.Store.Head(ctx, key, v)
	if objstore.IsNotExist(err) {
		fail(errcode.VersionMissing, "store has no version %s of %s", v, key)
		return f, nil
	}
	if err != nil {
		return f, err
	}
	tooLarge := func(size int64) {
		fail(errcode.SizeMismatch, "manifest.size=%d, store size=%d exceeds the %d-byte cap (version %s); not read", d.Size, size, o.MaxBytes, v)
	}
	if info.Size > o.MaxBytes {
		tooLarge(info.Size)
		return f, nil
	}
	rc, err := o.Store.Get(ctx, key, v)
	if objstore.IsNotExist(err) {
		fail(errcode.VersionMissing, "store has no version %s of %s", v, key)
		return f, nil
	}
	if err != nil {
		return f, err
	}
	if file, ok := rc.(*os.File); ok && !o.NoMap {
		// The evidence is the bytes, not the metadata: finish reads what
		// the open file holds then.
		f.file = file
		return f, nil
	}
	defer rc.Close()
	if err := f.readBody(rc, o, info.Size, true); err != nil {
		if ctx.Err() != nil {
			return f, errcode.Wrap(errcode.Canceled, ctx.Err(), "read %s", key)
		}
		return f, err
	}
	if f.data == nil {
		fail(errcode.SizeMismatch, "manifest.size=%d, version %s holds more than the %d-byte cap; not decoded", d.Size, v, o.MaxBytes)
	}
	return f, nil
}

// readBody reads r into f.buf and, if hashIt is set, hashes it as it
// arrives. Head's size sizes the buffer, but whatever the version holds
// is read (up to the cap): the evidence is the bytes, not the metadata. A
// body over the cap leaves f.data nil.
func (f *fileBytes) readBody(r io.Reader, o Options, size int64, hashIt bool) error {
	var h hash.Hash
	r = io.LimitReader(r, o.MaxBytes+1)
	if hashIt {
		h = sha256.New()
		r = io.TeeReader(r, h)
	}
	if cap(*f.buf) == 0 {
		*f.buf = takeBuf()
	}
	b, err := readAll(r, (*f.buf)[:0], int(min(size, o.MaxBytes))+1)
	*f.buf = b
	if err != nil {
		return errcode.Wrap(errcode.Of(err), err, "read %s version %s", f.key, f.version)
	}
	if int64(len(b)) > o.MaxBytes {
		return nil
	}
	f.data = b
	if hashIt {
		f.summed = true
		h.Sum(f.sum[:0])
	}
	return nil
}

// readAll appends everything r yields to b (a buffer growBuf manages),
// first growing b to hold at least hint bytes.
func readAll(r io.Reader, b []byte, hint int) ([]byte, error) {
	b, err := growBuf(b, hint)
	if err != nil {
		return b, err
	}
	for {
		if len(b) == cap(b) {
			if b, err = growBuf(b, len(b)+bytes.MinRead); err != nil {
				return b, err
			}
		}
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return b, err
		}
	}
}

// interner shares the few distinct sourceId and split strings of a file.
type interner map[string]string

func newInterner() interner { return make(interner) }

func (it interner) intern(s string) string {
	if v, ok := it[s]; ok {
		return v
	}
	v := string([]byte(s))
	it[v] = v
	return v
}
