package tuplehash

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"unsafe"

	"github.com/cespare/xxhash/v2"
)

// Domain-separation prefixes of the v1 formats (DESIGN.md, normative formats).
const (
	tuplePrefix     = "sp.tuple.v1\x00"
	memberSetPrefix = "sp.memberset.v1\x00"
	bucketPrefix    = "sp.bucket.v1\x00"
	rootBindPrefix  = "sp.root.v1\x00"
)

// MaxSplitLen is the longest split name the u8 length prefix allows.
const MaxSplitLen = math.MaxUint8

// MaxIDLen is the longest sampleId or sourceId the u32 length prefix allows.
const MaxIDLen = math.MaxUint32

// DefaultK is the default number of bucket bits (xxh64/k=12, 4096 buckets).
const DefaultK = 12

// Tuple is one member of a release or snapshot.
type Tuple struct {
	SampleID             string
	SourceID             string
	SourceVersion        int64
	LogicalContentDigest [32]byte
	Split                string
	SchemaDigest         [32]byte
}

// ErrSplitTooLong is returned when a split does not fit the u8 length prefix.
var ErrSplitTooLong = errors.New("tuplehash: split longer than 255 bytes")

// EncodedLen returns the length of t's v1 encoding.
func (t *Tuple) EncodedLen() int {
	return len(tuplePrefix) + 4 + len(t.SampleID) + 4 + len(t.SourceID) + 8 + 32 + 1 + len(t.Split) + 32
}

// AppendEncoding appends the tuple encoding v1 of t to dst:
//
//	"sp.tuple.v1\x00" ‖ u32be len ‖ sampleId ‖ u32be len ‖ sourceId ‖
//	i64be sourceVersion ‖ 32B logicalContentDigest ‖ u8 len ‖ split ‖ 32B schemaDigest
func (t *Tuple) AppendEncoding(dst []byte) ([]byte, error) {
	if len(t.Split) > MaxSplitLen {
		return dst, ErrSplitTooLong
	}
	if uint64(len(t.SampleID)) > MaxIDLen || uint64(len(t.SourceID)) > MaxIDLen {
		return dst, errors.New("tuplehash: id longer than 2^32-1 bytes")
	}
	dst = append(dst, tuplePrefix...)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(t.SampleID)))
	dst = append(dst, t.SampleID...)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(t.SourceID)))
	dst = append(dst, t.SourceID...)
	dst = binary.BigEndian.AppendUint64(dst, uint64(t.SourceVersion))
	dst = append(dst, t.LogicalContentDigest[:]...)
	dst = append(dst, byte(len(t.Split)))
	dst = append(dst, t.Split...)
	dst = append(dst, t.SchemaDigest[:]...)
	return dst, nil
}

// Encode returns the tuple encoding v1 of t.
func (t *Tuple) Encode() ([]byte, error) {
	return t.AppendEncoding(make([]byte, 0, t.EncodedLen()))
}

// Digest returns sha256 of t's v1 encoding.
func (t *Tuple) Digest() ([32]byte, error) {
	var buf [256]byte
	b, err := t.AppendEncoding(buf[:0])
	if err != nil {
		return [32]byte{}, err
	}
	return sha256.Sum256(b), nil
}

// Decode parses a v1 tuple encoding. It rejects trailing bytes, so
// Decode(Encode(t)) == t and no two tuples share an encoding.
func Decode(b []byte) (Tuple, error) {
	var t Tuple
	if !bytes.HasPrefix(b, []byte(tuplePrefix)) {
		return t, errors.New("tuplehash: missing sp.tuple.v1 prefix")
	}
	r := b[len(tuplePrefix):]
	str32 := func() (string, error) {
		if len(r) < 4 {
			return "", errors.New("tuplehash: short length")
		}
		n := binary.BigEndian.Uint32(r)
		r = r[4:]
		if uint64(len(r)) < uint64(n) {
			return "", fmt.Errorf("tuplehash: length %d exceeds remaining %d bytes", n, len(r))
		}
		s := string(r[:n])
		r = r[n:]
		return s, nil
	}
	var err error
	if t.SampleID, err = str32(); err != nil {
		return t, err
	}
	if t.SourceID, err = str32(); err != nil {
		return t, err
	}
	if len(r) < 8+32+1 {
		return t, errors.New("tuplehash: short tuple")
	}
	t.SourceVersion = int64(binary.BigEndian.Uint64(r))
	r = r[8:]
	copy(t.LogicalContentDigest[:], r[:32])
	r = r[32:]
	n := int(r[0])
	r = r[1:]
	if len(r) < n+32 {
		return t, errors.New("tuplehash: short split or schema digest")
	}
	t.Split = string(r[:n])
	r = r[n:]
	copy(t.SchemaDigest[:], r[:32])
	r = r[32:]
	if len(r) != 0 {
		return t, fmt.Errorf("tuplehash: %d trailing bytes", len(r))
	}
	return t, nil
}

// Bucket returns xxh64(sampleId, seed 0) >> (64 - k). k must be in [1, 32].
func Bucket(sampleID string, k uint) uint32 {
	return uint32(xxhash.Sum64String(sampleID) >> (64 - k))
}

// Key64 is the 64-bit key of a sampleId used in roaring64 bitmaps:
// xxh64(sampleId, seed 0). A bitmap hit is always confirmed exactly.
func Key64(sampleID string) uint64 { return xxhash.Sum64String(sampleID) }

// MemberSetDigest returns sha256("sp.memberset.v1\x00" ‖ u64be count ‖ sorted
// tuple digests). It sorts digests in place; record order does not matter.
func MemberSetDigest(digests [][32]byte) [32]byte {
	SortDigests(digests)
	return memberSetSorted(digests)
}

// MemberSetDigestOf is MemberSetDigest without reordering digests: it
// sorts a copy.
func MemberSetDigestOf(digests [][32]byte) [32]byte {
	return MemberSetDigestInto(digests, nil)
}

// MemberSetDigestInto is MemberSetDigestOf sorting the copy into
// *scratch, grown as needed, so a caller hashing file after file reuses
// one buffer. A nil scratch allocates.
func MemberSetDigestInto(digests [][32]byte, scratch *[][32]byte) [32]byte {
	sorted := grow(scratch, len(digests))
	sortInto(sorted, digests)
	return memberSetSorted(sorted)
}

// grow returns *scratch resized to n (a new slice when scratch is nil).
func grow(scratch *[][32]byte, n int) [][32]byte {
	if scratch == nil {
		return make([][32]byte, n)
	}
	*scratch = slices.Grow((*scratch)[:0], n)[:n]
	return *scratch
}

func memberSetSorted(digests [][32]byte) [32]byte {
	h := sha256.New()
	h.Write([]byte(memberSetPrefix))
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(digests)))
	h.Write(n[:])
	h.Write(flatten(digests))
	var out [32]byte
	h.Sum(out[:0])
	return out
}

// SortDigests sorts digests ascending (bytewise).
func SortDigests(d [][32]byte) { sortDigests(d, nil) }

// sortDigests sorts d, copying it into *scratch (nil: a new slice) first.
func sortDigests(d [][32]byte, scratch *[][32]byte) {
	if len(d) <= smallSort {
		sortSmall(d)
		return
	}
	src := grow(scratch, len(d))
	copy(src, d)
	sortInto(d, src)
}

// smallSort is the length up to which an insertion sort beats the rest.
const smallSort = 12

// compareDigests orders digests bytewise, comparing the first eight bytes
// as one integer.
func compareDigests(a, b *[32]byte) int {
	x, y := binary.BigEndian.Uint64(a[:8]), binary.BigEndian.Uint64(b[:8])
	if x != y {
		if x < y {
			return -1
		}
		return 1
	}
	return bytes.Compare(a[8:], b[8:])
}

func sortSmall(d [][32]byte) {
	if len(d) > smallSort {
		slices.SortFunc(d, func(a, b [32]byte) int { return compareDigests(&a, &b) })
		return
	}
	for i := 1; i < len(d); i++ {
		for j := i; j > 0 && compareDigests(&d[j], &d[j-1]) < 0; j-- {
			d[j], d[j-1] = d[j-1], d[j]
		}
	}
}

// sortInto writes src, sorted, to dst (of the same length): a counting
// sort on the leading bits scatters the digests into about four per
// slot, then each slot is sorted on its own. Digests are uniform, so this
// is linear; a crafted set sharing its leading bits falls back to
// pdqsort inside its slot, never to a quadratic sort.
func sortInto(dst, src [][32]byte) {
	n := len(src)
	if n <= smallSort {
		copy(dst, src)
		sortSmall(dst)
		return
	}
	width := min(max(bits.Len(uint(n))-2, 1), 16)
	shift := 16 - width
	counts := make([]int, 1<<width+1)
	for i := range src {
		counts[int(binary.BigEndian.Uint16(src[i][:2])>>shift)+1]++
	}
	for i := 1; i < len(counts); i++ {
		counts[i] += counts[i-1]
	}
	next := slices.Clone(counts[:len(counts)-1])
	for i := range src {
		k := int(binary.BigEndian.Uint16(src[i][:2]) >> shift)
		dst[next[k]] = src[i]
		next[k]++
	}
	for k := 0; k+1 < len(counts); k++ {
		if counts[k+1]-counts[k] > 1 {
			sortSmall(dst[counts[k]:counts[k+1]])
		}
	}
}

// flatten views digests as one byte slice, so a hash takes them in one
// Write rather than one call per 32 bytes.
func flatten(digests [][32]byte) []byte {
	if len(digests) == 0 {
		return nil
	}
	return unsafe.Slice(&digests[0][0], 32*len(digests))
}

// BucketLeaf returns sha256("sp.bucket.v1\x00" ‖ u32be bucket ‖ u64be count ‖
// sorted tuple digests). It sorts digests in place. An empty bucket has a
// leaf too (count 0), so every bucket contributes exactly one leaf.
func BucketLeaf(bucket uint32, digests [][32]byte) [32]byte {
	return BucketLeafInto(bucket, digests, nil)
}

// BucketLeafInto is BucketLeaf sorting through *scratch, grown as needed,
// so a reducer computing leaf after leaf reuses one buffer. A nil scratch
// allocates.
func BucketLeafInto(bucket uint32, digests [][32]byte, scratch *[][32]byte) [32]byte {
	sortDigests(digests, scratch)
	h := sha256.New()
	h.Write([]byte(bucketPrefix))
	var hdr [12]byte
	binary.BigEndian.PutUint32(hdr[0:4], bucket)
	binary.BigEndian.PutUint64(hdr[4:12], uint64(len(digests)))
	h.Write(hdr[:])
	h.Write(flatten(digests))
	var out [32]byte
	h.Sum(out[:0])
	return out
}

// MerkleRoot returns the RFC 6962 Merkle Tree Hash of leaves, where each
// element of leaves is the leaf's data (here: a 32-byte bucket leaf):
//
//	MTH({})      = sha256()
//	MTH({d0})    = sha256(0x00 ‖ d0)
//	MTH(D[n])    = sha256(0x01 ‖ MTH(D[0:k]) ‖ MTH(D[k:n])), k = largest power of two < n
func MerkleRoot(leaves [][32]byte) [32]byte {
	if len(leaves) == 0 {
		return sha256.Sum256(nil)
	}
	return mth(leaves)
}

func mth(d [][32]byte) [32]byte {
	if len(d) == 1 {
		var b [33]byte
		b[0] = 0x00
		copy(b[1:], d[0][:])
		return sha256.Sum256(b[:])
	}
	k := 1
	for k*2 < len(d) {
		k *= 2
	}
	l, r := mth(d[:k]), mth(d[k:])
	var b [65]byte
	b[0] = 0x01
	copy(b[1:33], l[:])
	copy(b[33:], r[:])
	return sha256.Sum256(b[:])
}

// BindRoot binds an unbound tuple Merkle root to a snapshot and fences:
// sha256("sp.root.v1\x00" ‖ merkleRoot ‖ datasetSnapshot ‖ u64be tombstoneWatermark ‖
// u64be benchmarkFence). This is the release's orderedMemberTupleRoot.
func BindRoot(merkleRoot, datasetSnapshot [32]byte, tombstoneWatermark, benchmarkFence uint64) [32]byte {
	h := sha256.New()
	h.Write([]byte(rootBindPrefix))
	h.Write(merkleRoot[:])
	h.Write(datasetSnapshot[:])
	var w [16]byte
	binary.BigEndian.PutUint64(w[0:8], tombstoneWatermark)
	binary.BigEndian.PutUint64(w[8:16], benchmarkFence)
	h.Write(w[:])
	var out [32]byte
	h.Sum(out[:0])
	return out
}

// Accumulator collects tuple digests by bucket and computes leaves and the
// unbound root. The result depends only on the multiset of digests added,
// not on order or on how tuples were split among Accumulators (see Merge).
// It holds every digest in memory: use it for tests and small sets; the
// reducer computes leaves bucket by bucket instead.
type Accumulator struct {
	K       uint
	buckets map[uint32][][32]byte
}

// NewAccumulator returns an Accumulator for k bucket bits.
func NewAccumulator(k uint) *Accumulator {
	return &Accumulator{K: k, buckets: make(map[uint32][][32]byte)}
}

// Add records one tuple.
func (a *Accumulator) Add(t *Tuple) error {
	d, err := t.Digest()
	if err != nil {
		return err
	}
	b := Bucket(t.SampleID, a.K)
	a.buckets[b] = append(a.buckets[b], d)
	return nil
}

// Merge adds every digest of o into a.
func (a *Accumulator) Merge(o *Accumulator) {
	for b, ds := range o.buckets {
		a.buckets[b] = append(a.buckets[b], ds...)
	}
}

// Leaves returns one leaf per bucket, 2^K of them, in bucket order.
func (a *Accumulator) Leaves() [][32]byte {
	n := uint32(1) << a.K
	leaves := make([][32]byte, n)
	for b := uint32(0); b < n; b++ {
		leaves[b] = BucketLeaf(b, slices.Clone(a.buckets[b]))
	}
	return leaves
}

// Root returns the unbound Merkle root over Leaves.
func (a *Accumulator) Root() [32]byte { return MerkleRoot(a.Leaves()) }
