package stage

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/shardproof/shardproof/internal/canon"
	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/internal/scratchdir"
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/objstore"
	"github.com/shardproof/shardproof/snapindex"
	"github.com/shardproof/shardproof/tuplehash"
)

// ShardingFunction is the build.shardingFunction this package records: rows
// sorted ascending by (xxh64(sampleId, seed=sortSeed), sampleId), then shard
// i of n holds sorted positions [i*N/n, (i+1)*N/n).
const ShardingFunction = "sort-xxh64(sampleId,seed=sortSeed)/contiguous-ranges/v1"

// MemberPartition is the snapshot's and the release's memberPartition.
const MemberPartition = "xxh64/k=12"

// Result names what a staging run produced.
type Result struct {
	// Root is the digest of the release manifest's stored bytes.
	Root manifest.Digest
	// Snapshot is the digest of the snapshot manifest's stored bytes.
	Snapshot manifest.Digest
	// RecordSchema is the digest of the record schema document.
	RecordSchema manifest.Digest
	Release      *manifest.Release
	SnapshotDoc  *manifest.Snapshot
	Schema       *manifest.RecordSchema
	// Created counts objects newly written (0 when everything existed).
	Created int
}

// Options are the settings common to Stage and Synth.
type Options struct {
	// Shards is the number of release shards (>= 1, <= rows).
	Shards int
	// Parquet fixes the writer; Codec defaults to zstd level 3.
	Parquet ParquetOptions
	// TombstoneWatermark and BenchmarkFence are the fences the release is
	// built against; they are bound into orderedMemberTupleRoot.
	TombstoneWatermark uint64
	BenchmarkFence     uint64
	// Workers bounds the shards encoded at once (default 2).
	Workers int
	// Progress, if set, is called after each shard and member file.
	Progress func(done, total int)
}

// source yields the rows to stage by index.
type source interface {
	Len() int
	// keys calls add with the sampleId of every row, rows 0 to Len()-1
	// in order, and stops at add's first error.
	keys(ctx context.Context, add func(id string) error) error
	// Build appends rows idx, in that order, to b (whose schema is
	// ArrowSchema of the record schema); idx is shard's range of the
	// staging order.
	Build(shard int, idx []int, b *array.RecordBuilder) error
}

// partitioner is a source that must see the staging order before Build,
// e.g. to spool rows by shard.
type partitioner interface {
	partition(ctx context.Context, order *stagingOrder, seed uint64) error
}

type memberTuple struct {
	t      tuplehash.Tuple
	digest [32]byte
	bucket uint32
}

type writer struct {
	ctx      context.Context
	store    objstore.Store
	schema   *manifest.RecordSchema
	sd       manifest.Digest
	opts     Options
	mu       sync.Mutex
	created  int
	progress int
	total    int
}

// put stores a blob with a conditional create and counts new objects.
func (w *writer) put(data []byte) (manifest.Digest, objstore.Version, error) {
	d, v, created, err := objstore.PutBlob(w.ctx, w.store, data)
	if err != nil {
		return d, v, err
	}
	w.mu.Lock()
	if created {
		w.created++
	}
	w.mu.Unlock()
	return d, v, nil
}

func (w *writer) step() {
	w.mu.Lock()
	w.progress++
	p, t := w.progress, w.total
	w.mu.Unlock()
	if w.opts.Progress != nil {
		w.opts.Progress(p, t)
	}
}

// writeFile encodes rec as Parquet with schema s, stores it and returns its
// full descriptor. tupleSchema is the tuples' schemaDigest; each, if set,
// receives every tuple.
func (w *writer) writeFile(id string, rec arrow.RecordBatch, s *manifest.RecordSchema, tupleSchema manifest.Digest, each func(*tuplehash.Tuple, [32]byte) error) (manifest.Shard, error) {
	data, err := EncodeParquet(rec, s, w.opts.Parquet)
	if err != nil {
		return manifest.Shard{}, err
	}
	return w.storeFile(id, data, rec, s, tupleSchema, each)
}

// writeMember is writeFile for a snapshot member, whose row groups end at
// bucket boundaries (EncodeMemberParquet).
func (w *writer) writeMember(id string, rec arrow.RecordBatch, s *manifest.RecordSchema, buckets []uint32) (manifest.Shard, error) {
	data, err := EncodeMemberParquet(rec, s, w.opts.Parquet, buckets)
	if err != nil {
		return manifest.Shard{}, err
	}
	return w.storeFile(id, data, rec, s, w.sd, nil)
}

// storeFile stores the encoded file data holding rec and returns its full
// descriptor.
func (w *writer) storeFile(id string, data []byte, rec arrow.RecordBatch, s *manifest.RecordSchema, tupleSchema manifest.Digest, each func(*tuplehash.Tuple, [32]byte) error) (manifest.Shard, error) {
	desc, err := Describe(rec, s, tupleSchema, each)
	if err != nil {
		return manifest.Shard{}, err
	}
	d, v, err := w.put(data)
	if err != nil {
		return manifest.Shard{}, err
	}
	desc.ID, desc.Digest, desc.Size, desc.ObjectVersion = id, d, int64(len(data)), string(v)
	slog.Debug("stage: wrote file", "id", id, "digest", d.String(), "size", len(data), "records", desc.Records)
	w.step()
	return desc, nil
}

// Describe computes the decoded figures of a file holding rec with schema
// s: logicalDigest, records, tokens and memberSetDigest (MediaType set;
// ID, Digest, Size and ObjectVersion left to the caller).
func Describe(rec arrow.RecordBatch, s *manifest.RecordSchema, tupleSchema manifest.Digest, each func(*tuplehash.Tuple, [32]byte) error) (manifest.Shard, error) {
	sd, err := canon.SchemaDigest(s)
	if err != nil {
		return manifest.Shard{}, err
	}
	h, err := canon.NewShardHasher(s, sd, tupleSchema)
	if err != nil {
		return manifest.Shard{}, err
	}
	if err := h.AddBatch(rec, each); err != nil {
		return manifest.Shard{}, errcode.Wrap(errcode.BadInput, err, "describe")
	}
	return manifest.Shard{
		MediaType:       manifest.ParquetMediaType,
		LogicalDigest:   h.LogicalDigest(),
		Records:         h.Records,
		Tokens:          h.Tokens,
		MemberSetDigest: h.MemberSetDigest(),
	}, nil
}

// run stages src with the record schema s.
func run(ctx context.Context, store objstore.Store, s *manifest.RecordSchema, src source, seed uint64, tempDir string, o Options) (Result, error) {
	if o.Shards < 1 {
		return Result{}, errcode.New(errcode.Usage, "--shards must be at least 1, got %d", o.Shards)
	}
	n := src.Len()
	if n == 0 {
		return Result{}, errcode.New(errcode.BadInput, "no input rows")
	}
	if o.Shards > n {
		return Result{}, errcode.New(errcode.BadInput, "%d shards for %d rows: every shard must hold a row", o.Shards, n)
	}
	if err := canon.Check(s); err != nil {
		return Result{}, err
	}
	if o.Workers <= 0 {
		o.Workers = 2
	}
	o.Parquet = o.Parquet.withDefaults()
	if _, err := writerProperties(s, o.Parquet, 0); err != nil {
		return Result{}, err
	}
	// Spool and spill directories of stages killed before they could
	// remove them (kill -9, the OOM killer): gigabytes at scale.
	for _, prefix := range []string{StageTempPrefix, MembersTempPrefix, SortTempPrefix} {
		if n := scratchdir.Sweep(tempDir, prefix); n > 0 {
			slog.Info("stage: removed temporary directories of stages that died", "prefix", prefix, "count", n)
		}
	}
	order, err := sortRows(ctx, src, seed, o.Shards, tempDir)
	if err != nil {
		return Result{}, err
	}
	defer order.close()
	if p, ok := src.(partitioner); ok {
		if err := p.partition(ctx, order, seed); err != nil {
			return Result{}, err
		}
	}
	sb, err := manifest.Encode(s)
	if err != nil {
		return Result{}, err
	}
	members := o.Shards
	w := &writer{ctx: ctx, store: store, schema: s, opts: o, total: o.Shards + members}
	if w.sd, _, err = w.put(sb); err != nil {
		return Result{}, err
	}
	as, err := canon.ArrowSchema(s)
	if err != nil {
		return Result{}, err
	}

	// Release shards, o.Workers at a time; each adds its tuples to the
	// member spill, which member files read back and sort, so the snapshot
	// does not depend on scheduling.
	spill, err := newMemberSpill(tempDir, members, w.sd)
	if err != nil {
		return Result{}, err
	}
	defer spill.close()
	shards := make([]manifest.Shard, o.Shards)
	errs := make([]error, o.Shards)
	sem := make(chan struct{}, o.Workers)
	var wg sync.WaitGroup
	for i := range shards {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := ctx.Err(); err != nil {
				errs[i] = errcode.Wrap(errcode.Canceled, err, "stage")
				return
			}
			idx, err := order.shard(i)
			if err != nil {
				errs[i] = err
				return
			}
			b := array.NewRecordBuilder(memory.DefaultAllocator, as)
			defer b.Release()
			if err := src.Build(i, idx, b); err != nil {
				errs[i] = err
				return
			}
			// Past it, the builder's 32-bit offsets wrap; stage refuses
			// such inputs before it stores anything, synth here.
			for c, f := range b.Fields() {
				if f, ok := f.(*array.StringBuilder); ok && int64(f.DataLen()) > maxColumnBytes {
					errs[i] = errcode.New(errcode.BadInput, "%s: %s", ShardID(i, o.Shards), columnTooLarge(as.Field(c).Name))
					return
				}
			}
			rec := b.NewRecordBatch()
			defer rec.Release()
			ts, it := make([]memberTuple, 0, len(idx)), interner{}
			shards[i], errs[i] = w.writeFile(ShardID(i, o.Shards), rec, s, w.sd, func(t *tuplehash.Tuple, d [32]byte) error {
				ts = append(ts, memberTuple{t: it.clone(t), digest: d, bucket: tuplehash.Bucket(t.SampleID, tuplehash.DefaultK)})
				return nil
			})
			if errs[i] == nil {
				errs[i] = spill.add(ts)
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return Result{}, err
		}
	}

	// The snapshot: member files partition the tuples by contiguous bucket
	// ranges, each sorted by (bucket, sampleId, tuple digest).
	snap, leaves, err := w.writeMembers(spill, members)
	if err != nil {
		return Result{}, err
	}
	snapBytes, err := manifest.Encode(snap)
	if err != nil {
		return Result{}, err
	}
	snapDigest, _, err := w.put(snapBytes)
	if err != nil {
		return Result{}, err
	}
	// The snapshot's leaf index lets verify skip the members of buckets
	// that match (package snapindex).
	if _, err := snapindex.Put(ctx, store, snapDigest, tuplehash.DefaultK, leaves); err != nil {
		return Result{}, err
	}

	rel := &manifest.Release{
		Schema:             manifest.ReleaseSchema,
		DatasetSnapshot:    snapDigest,
		TombstoneWatermark: o.TombstoneWatermark,
		BenchmarkFence:     o.BenchmarkFence,
		RecordSchema:       w.sd,
		Build: manifest.Build{
			Serializer:           Serializer,
			SerializerVersion:    SerializerVersion,
			SortSeed:             seed,
			ShardingFunction:     ShardingFunction,
			Compression:          o.Parquet.Codec,
			CompressionLevel:     o.Parquet.Level,
			EncryptionKeyVersion: "none",
			EncryptionAADScheme:  "none",
			MemberPartition:      MemberPartition,
		},
		Shards:                 shards,
		OrderedMemberTupleRoot: tuplehash.BindRoot(snap.TupleRoot, snapDigest, o.TombstoneWatermark, o.BenchmarkFence),
	}
	rel.Totals = TotalsOf(shards)
	root, err := w.putRelease(rel)
	if err != nil {
		return Result{}, err
	}
	slog.Info("stage: release written", "root", root.String(), "snapshot", snapDigest.String(),
		"shards", len(shards), "records", rel.Totals.Records, "created", w.created)
	return Result{Root: root, Snapshot: snapDigest, RecordSchema: w.sd, Release: rel, SnapshotDoc: snap, Schema: s, Created: w.created}, nil
}

func (w *writer) putRelease(rel *manifest.Release) (manifest.Digest, error) {
	b, err := manifest.Encode(rel)
	if err != nil {
		return manifest.Digest{}, err
	}
	d, _, err := w.put(b)
	return d, err
}

// maxColumnBytes is the most bytes a string column of one shard may
// hold: an Arrow utf8 array's offsets are 32-bit, and a shard is written
// from one record batch.
var maxColumnBytes int64 = math.MaxInt32

func columnTooLarge(column string) string {
	return fmt.Sprintf("its %s values pass %d bytes, the most one Arrow string column holds: stage with more --shards", column, maxColumnBytes)
}

// TotalsOf sums descriptors into a Totals.
func TotalsOf(ds []manifest.Shard) manifest.Totals {
	t := manifest.Totals{Shards: int64(len(ds))}
	for _, d := range ds {
		t.Records += d.Records
		t.Tokens += d.Tokens
	}
	return t
}

// interner copies tuples out of a decoder's memory, sharing the few
// distinct sourceIds and splits of a shard instead of copying them per
// tuple (up to maxInterned of each; beyond that they are copied).
type interner map[string]string

const maxInterned = 4096

func (it interner) str(s string) string {
	if v, ok := it[s]; ok {
		return v
	}
	v := string([]byte(s))
	if len(it) < maxInterned {
		it[v] = v
	}
	return v
}

func (it interner) clone(t *tuplehash.Tuple) tuplehash.Tuple {
	c := *t
	c.SampleID = string([]byte(t.SampleID))
	c.SourceID = it.str(t.SourceID)
	c.Split = it.str(t.Split)
	return c
}

// memberRange returns the buckets [lo, hi) of member j of m.
func memberRange(j, m int) (lo, hi uint32) {
	nb := uint64(1) << tuplehash.DefaultK
	return uint32(uint64(j) * nb / uint64(m)), uint32(uint64(j+1) * nb / uint64(m))
}

// tupleOrder is the order of a member file's tuples: bucket, sampleId,
// tuple digest.
func tupleOrder(a, b memberTuple) int {
	return cmp.Or(cmp.Compare(a.bucket, b.bucket), cmp.Compare(a.t.SampleID, b.t.SampleID), bytes.Compare(a.digest[:], b.digest[:]))
}

// writeMembers writes m member files from the spilled tuples and returns
// the snapshot document with its tuple root. Each member's tuples are read
// back into one reused buffer and sorted: staging holds one member's
// tuples at a time.
func (w *writer) writeMembers(spill *memberSpill, m int) (*manifest.Snapshot, [][32]byte, error) {
	var buf []memberTuple
	ms := canon.SnapshotMemberSchema()
	as, err := canon.ArrowSchema(ms)
	if err != nil {
		return nil, nil, err
	}
	snap := &manifest.Snapshot{
		Schema:          manifest.SnapshotSchema,
		RecordSchema:    w.sd,
		MemberPartition: MemberPartition,
		Members:         make([]manifest.Shard, m),
	}
	acc := tuplehash.NewAccumulator(tuplehash.DefaultK)
	for j := range m {
		lo, hi := memberRange(j, m)
		if buf, err = spill.read(j, buf[:0]); err != nil {
			return nil, nil, err
		}
		ts := buf
		slices.SortFunc(ts, tupleOrder)
		// Members in order, each sorted: the accumulator sees every
		// tuple in bucket order.
		for i := range ts {
			if err := acc.Add(&ts[i].t); err != nil {
				return nil, nil, errcode.Wrap(errcode.BadInput, err, "tuple")
			}
		}
		b := array.NewRecordBuilder(memory.DefaultAllocator, as)
		for _, t := range ts {
			b.Field(0).(*array.StringBuilder).Append(t.t.SampleID)
			b.Field(1).(*array.StringBuilder).Append(t.t.SourceID)
			b.Field(2).(*array.Int64Builder).Append(t.t.SourceVersion)
			b.Field(3).(*array.StringBuilder).Append(t.t.Split)
			b.Field(4).(*array.BinaryBuilder).Append(t.t.LogicalContentDigest[:])
		}
		// As for a shard: stage refuses such inputs before it stores
		// anything, synth here.
		for c, f := range b.Fields() {
			if f, ok := f.(*array.StringBuilder); ok && int64(f.DataLen()) > maxColumnBytes {
				b.Release()
				return nil, nil, errcode.New(errcode.BadInput, "%s: %s", MemberID(j, m), columnTooLarge(as.Field(c).Name))
			}
		}
		rec := b.NewRecordBatch()
		b.Release()
		buckets := make([]uint32, len(ts))
		for i := range ts {
			buckets[i] = ts[i].bucket
		}
		snap.Members[j], err = w.writeMember(MemberID(j, m), rec, ms, buckets)
		rec.Release()
		if err != nil {
			return nil, nil, err
		}
		// Declared so verify's reducers can read the member themselves.
		snap.Members[j].Buckets = &manifest.BucketRange{Lo: lo, Hi: hi}
	}
	leaves := acc.Leaves()
	snap.TupleRoot = manifest.Digest(tuplehash.MerkleRoot(leaves))
	snap.Totals = TotalsOf(snap.Members)
	return snap, leaves, nil
}
