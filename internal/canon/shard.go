package canon

import (
	"crypto/sha256"
	"math"
	"runtime"
	"slices"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/internal/freelist"
	"github.com/shardproof/shardproof/internal/sha256x2"
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/tuplehash"
)

// ShardHasher computes every decoded figure of one shard or member file
// from its record batches in stored order: the logical digest, records,
// tokens, logical bytes, the tuples and the memberSetDigest. The writer
// (stage) and the verifier (mapper) both use it, so the figures a manifest
// declares and the figures a verifier recomputes come from one definition.
type ShardHasher struct {
	enc          *Encoder
	lh           *LogicalHasher
	tupleSchema  [32]byte
	sid, src     int
	ver, split   int
	memberDigest int // member files: the content_digest column, else -1
	tokens       int // -1 when the schema names no tokens column

	Records      int64
	Tokens       int64
	LogicalBytes int64
	digests      [][32]byte
	tuple        tuplehash.Tuple
	// pair and encs are two records' tuples and tuple encodings: tuple
	// digests are computed two at a time (sha256x2.Sum2).
	pair [2]tuplehash.Tuple
	encs [2][]byte

	// TuplesOnly, set for a member file's partial read (a reducer reading
	// the buckets it needs), makes AddColumns give only the tuples: no
	// canonical encoding, logical digest, figures or tuple digests (each
	// gets a zero digest; the caller digests the tuples it keeps). Only
	// for member schemas, whose content digest is a column.
	TuplesOnly bool
}

// NewShardHasher returns a hasher for records of schema s. logicalSchema is
// the digest bound into the logical digest (the digest of s itself);
// tupleSchema is every tuple's schemaDigest (for member files: the release
// record schema the snapshot describes, not the member schema). Without a
// content column, s must have a binary content_digest column holding each
// tuple's logicalContentDigest.
func NewShardHasher(s *manifest.RecordSchema, logicalSchema, tupleSchema manifest.Digest) (*ShardHasher, error) {
	enc, err := NewEncoder(s)
	if err != nil {
		return nil, err
	}
	h := &ShardHasher{
		digests: getDigests(),
		enc:     enc, lh: NewLogicalHasher(logicalSchema), tupleSchema: tupleSchema,
		sid: FieldIndex(s, s.Tuple.SampleID), src: FieldIndex(s, s.Tuple.SourceID),
		ver: FieldIndex(s, s.Tuple.SourceVersion), split: FieldIndex(s, s.Tuple.Split),
		memberDigest: -1, tokens: -1,
	}
	if s.Tokens != "" {
		h.tokens = FieldIndex(s, s.Tokens)
	}
	if s.Content == "" {
		h.memberDigest = FieldIndex(s, MemberContentColumn)
		if h.memberDigest < 0 || s.Fields[h.memberDigest].Type != TypeBinary {
			return nil, errcode.New(errcode.BadDocument, "schema has neither a content column nor a binary %s column", MemberContentColumn)
		}
	}
	for _, i := range []int{h.sid, h.src, h.ver, h.split} {
		if i < 0 {
			return nil, errcode.New(errcode.BadDocument, "schema lacks a tuple column")
		}
	}
	if s.Fields[h.sid].Type != TypeUTF8 || s.Fields[h.src].Type != TypeUTF8 ||
		s.Fields[h.split].Type != TypeUTF8 || s.Fields[h.ver].Type != TypeInt64 ||
		(h.tokens >= 0 && s.Fields[h.tokens].Type != TypeInt64) {
		return nil, errcode.New(errcode.BadDocument, "tuple or tokens column has the wrong type")
	}
	return h, nil
}

// AddBatch adds every row of rec, calling each (if non-nil) with the row's
// tuple and tuple digest. The tuple is reused between calls. A value that
// cannot form a tuple (null tuple column, split over 255 bytes, content
// digest not 32 bytes) is a DECODE_ERROR; each's error is returned as is.
func (h *ShardHasher) AddBatch(rec arrow.RecordBatch, each func(t *tuplehash.Tuple, digest [32]byte) error) error {
	return h.AddColumns(Columns(rec), int(rec.NumRows()), each)
}

// AddColumns is AddBatch for n rows of decoded columns, one per field.
func (h *ShardHasher) AddColumns(cols []Column, n int, each func(t *tuplehash.Tuple, digest [32]byte) error) error {
	if err := h.enc.BindColumns(cols); err != nil {
		return err
	}
	// BindColumns checked every column's type against the schema, and
	// NewShardHasher checked the roles' types.
	sid := cols[h.sid].(StringColumn)
	src := cols[h.src].(StringColumn)
	split := cols[h.split].(StringColumn)
	ver := cols[h.ver].(Int64Column)
	var tok Int64Column
	if h.tokens >= 0 {
		tok = cols[h.tokens].(Int64Column)
	}
	var md BytesColumn
	if h.memberDigest >= 0 {
		md = cols[h.memberDigest].(BytesColumn)
	}
	if h.TuplesOnly && md != nil {
		return h.tuplesOnly(sid, src, split, ver, md, n, each)
	}
	// Records are taken two at a time: both are encoded and added to the
	// logical digest in order, their tuple digests computed together,
	// then both are counted and handed to each in order.
	for i := 0; i < n; i += 2 {
		m := min(2, n-i)
		for k := range m {
			rec := h.Records + int64(k)
			if sid.IsNull(i+k) || src.IsNull(i+k) || split.IsNull(i+k) || ver.IsNull(i+k) {
				return errcode.New(errcode.DecodeError, "record %d: null tuple column", rec)
			}
			row := h.enc.Encode(i + k)
			h.lh.Add(row.Record)
			h.LogicalBytes += row.LogicalBytes
			if tok != nil && !tok.IsNull(i+k) {
				// A count is never negative, and a sum past int64 is
				// damage, not a corpus: either would report a
				// meaningless total.
				v := tok.Value(i + k)
				if v < 0 || h.Tokens > math.MaxInt64-v {
					return errcode.New(errcode.DecodeError, "record %d: token count %d is negative or overflows the shard's total", rec, v)
				}
				h.Tokens += v
			}
			t := &h.pair[k]
			t.SampleID, t.SourceID, t.Split = sid.Value(i+k), src.Value(i+k), split.Value(i+k)
			t.SourceVersion = ver.Value(i + k)
			t.SchemaDigest = h.tupleSchema
			if md != nil {
				if md.IsNull(i+k) || len(md.Value(i+k)) != 32 {
					return errcode.New(errcode.DecodeError, "record %d: %s is not 32 bytes", rec, MemberContentColumn)
				}
				copy(t.LogicalContentDigest[:], md.Value(i+k))
			} else {
				t.LogicalContentDigest = row.Content
			}
			enc, err := t.AppendEncoding(h.encs[k][:0])
			if err != nil {
				return errcode.Wrap(errcode.DecodeError, err, "record %d", rec)
			}
			h.encs[k] = enc
		}
		var d [2][32]byte
		if m == 2 {
			d[0], d[1] = sha256x2.Sum2(h.encs[0], h.encs[1])
		} else {
			d[0] = sha256.Sum256(h.encs[0])
		}
		for k := range m {
			h.digests = append(h.digests, d[k])
			h.Records++
			if each != nil {
				if err := each(&h.pair[k], d[k]); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// tuplesOnly is AddColumns's loop for TuplesOnly: the same checks of
// the tuple columns, no encoding and no digests.
func (h *ShardHasher) tuplesOnly(sid, src, split StringColumn, ver Int64Column, md BytesColumn, n int, each func(t *tuplehash.Tuple, digest [32]byte) error) error {
	t := &h.tuple
	t.SchemaDigest = h.tupleSchema
	for i := 0; i < n; i++ {
		if sid.IsNull(i) || src.IsNull(i) || split.IsNull(i) || ver.IsNull(i) {
			return errcode.New(errcode.DecodeError, "record %d: null tuple column", h.Records)
		}
		if md.IsNull(i) || len(md.Value(i)) != 32 {
			return errcode.New(errcode.DecodeError, "record %d: %s is not 32 bytes", h.Records, MemberContentColumn)
		}
		t.SampleID, t.SourceID, t.Split = sid.Value(i), src.Value(i), split.Value(i)
		t.SourceVersion = ver.Value(i)
		copy(t.LogicalContentDigest[:], md.Value(i))
		h.Records++
		if each != nil {
			if err := each(t, [32]byte{}); err != nil {
				return err
			}
		}
	}
	return nil
}

// Grow reserves room for n more rows' tuple digests.
func (h *ShardHasher) Grow(n int) { h.digests = slices.Grow(h.digests, max(n, 0)) }

// LogicalDigest returns the logical digest of the rows added so far.
func (h *ShardHasher) LogicalDigest() manifest.Digest { return h.lh.Sum() }

// MemberSetDigest returns the memberSetDigest of the rows added so far.
func (h *ShardHasher) MemberSetDigest() manifest.Digest {
	sorted := getDigests()
	defer func() { putDigests(sorted) }()
	return tuplehash.MemberSetDigestInto(h.digests, &sorted)
}

// Release hands the hasher's tuple digests to the next hasher; h and its
// TupleDigests must not be used after. Calling it is optional: a verifier
// does, after each file, so the digest buffers (a megabyte per 32k
// records, one more to sort them) are not allocated, zeroed and collected
// again for every file.
func (h *ShardHasher) Release() {
	putDigests(h.digests)
	h.digests = nil
}

// digestBufs keeps tuple digest buffers between files, a couple per
// worker; buffers above maxPooledDigests entries are left to the
// collector, so a file that declared a huge row count is not retained.
var digestBufs = freelist.New[[][32]byte](2 * runtime.GOMAXPROCS(0))

const maxPooledDigests = 1 << 20

func getDigests() [][32]byte {
	b, _ := digestBufs.Get()
	return b[:0]
}

func putDigests(b [][32]byte) {
	if b != nil && cap(b) <= maxPooledDigests {
		digestBufs.Put(b[:0])
	}
}

// TupleDigests returns the tuple digests added so far, in stored order.
// The slice is the hasher's own; callers must not modify it.
func (h *ShardHasher) TupleDigests() [][32]byte { return h.digests }
