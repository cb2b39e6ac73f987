package main

// Digests of docs/FORMATS.md, written from the docs alone (no shardproof import).

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math"
	"sort"

	"github.com/cespare/xxhash/v2"
)

type Digest [32]byte

func (d Digest) String() string { return "sha256:" + hex.EncodeToString(d[:]) }
func (d Digest) Hex() string    { return hex.EncodeToString(d[:]) }

func u32(b *bytes.Buffer, v uint32) {
	var x [4]byte
	binary.BigEndian.PutUint32(x[:], v)
	b.Write(x[:])
}
func u64(b *bytes.Buffer, v uint64) {
	var x [8]byte
	binary.BigEndian.PutUint64(x[:], v)
	b.Write(x[:])
}

// Tuple is the six-field tuple of DESIGN.md.
type Tuple struct {
	SampleID      string
	SourceID      string
	SourceVersion int64
	ContentDigest Digest // logicalContentDigest = sha256(content)
	Split         string
	SchemaDigest  Digest
}

func (t Tuple) Encoding() []byte {
	var b bytes.Buffer
	b.WriteString("sp.tuple.v1\x00")
	u32(&b, uint32(len(t.SampleID)))
	b.WriteString(t.SampleID)
	u32(&b, uint32(len(t.SourceID)))
	b.WriteString(t.SourceID)
	u64(&b, uint64(t.SourceVersion))
	b.Write(t.ContentDigest[:])
	if len(t.Split) > 255 {
		panic("split > 255 bytes")
	}
	b.WriteByte(byte(len(t.Split)))
	b.WriteString(t.Split)
	b.Write(t.SchemaDigest[:])
	return b.Bytes()
}

func (t Tuple) Digest() Digest { return sha256.Sum256(t.Encoding()) }

func Bucket(sampleID string, k uint) uint32 {
	return uint32(xxhash.Sum64String(sampleID) >> (64 - k))
}

func sortDigests(ds []Digest) {
	sort.Slice(ds, func(i, j int) bool { return bytes.Compare(ds[i][:], ds[j][:]) < 0 })
}

func MemberSetDigest(ds []Digest) Digest {
	s := append([]Digest(nil), ds...)
	sortDigests(s)
	var b bytes.Buffer
	b.WriteString("sp.memberset.v1\x00")
	u64(&b, uint64(len(s)))
	for _, d := range s {
		b.Write(d[:])
	}
	return sha256.Sum256(b.Bytes())
}

func BucketLeaf(bucket uint32, ds []Digest) Digest {
	s := append([]Digest(nil), ds...)
	sortDigests(s)
	var b bytes.Buffer
	b.WriteString("sp.bucket.v1\x00")
	u32(&b, bucket)
	u64(&b, uint64(len(s)))
	for _, d := range s {
		b.Write(d[:])
	}
	return sha256.Sum256(b.Bytes())
}

// MTH per RFC 6962 section 2.1.
func MTH(leaves []Digest) Digest {
	n := len(leaves)
	if n == 0 {
		return sha256.Sum256(nil)
	}
	if n == 1 {
		return sha256.Sum256(append([]byte{0x00}, leaves[0][:]...))
	}
	k := 1
	for k*2 < n {
		k *= 2
	}
	l, r := MTH(leaves[:k]), MTH(leaves[k:])
	buf := make([]byte, 0, 65)
	buf = append(buf, 0x01)
	buf = append(buf, l[:]...)
	buf = append(buf, r[:]...)
	return sha256.Sum256(buf)
}

// Leaves returns the 2^k bucket leaves of a tuple multiset.
func Leaves(tuples []Tuple, k uint) []Digest {
	n := 1 << k
	per := make([][]Digest, n)
	for _, t := range tuples {
		b := Bucket(t.SampleID, k)
		per[b] = append(per[b], t.Digest())
	}
	leaves := make([]Digest, n)
	for b := 0; b < n; b++ {
		leaves[b] = BucketLeaf(uint32(b), per[b])
	}
	return leaves
}

func BindRoot(merkle, snapshot Digest, tomb, bench uint64) Digest {
	var b bytes.Buffer
	b.WriteString("sp.root.v1\x00")
	b.Write(merkle[:])
	b.Write(snapshot[:])
	u64(&b, tomb)
	u64(&b, bench)
	return sha256.Sum256(b.Bytes())
}

// ---- canonical record and logical digest ----

type FieldType string

const (
	Utf8    FieldType = "utf8"
	Binary  FieldType = "binary"
	Int64   FieldType = "int64"
	Int32   FieldType = "int32"
	Float64 FieldType = "float64"
	Bool    FieldType = "bool"
)

var tags = map[FieldType]byte{Utf8: 1, Binary: 2, Int64: 3, Int32: 4, Float64: 5, Bool: 6}

// Value is one field's value; nil means null.
type Value any

// CanonicalRecord encodes values (in schema order). contentIdx is the content
// column's index (-1 for none); its value is encoded as the 32-byte sha256.
func CanonicalRecord(types []FieldType, vals []Value, contentIdx int) []byte {
	var b bytes.Buffer
	for i, ft := range types {
		b.WriteByte(tags[ft])
		v := vals[i]
		if v == nil {
			b.WriteByte(0x00)
			continue
		}
		b.WriteByte(0x01)
		if i == contentIdx {
			var raw []byte
			switch x := v.(type) {
			case string:
				raw = []byte(x)
			case []byte:
				raw = x
			}
			d := sha256.Sum256(raw)
			b.Write(d[:])
			continue
		}
		switch ft {
		case Utf8:
			s := v.(string)
			u32(&b, uint32(len(s)))
			b.WriteString(s)
		case Binary:
			s := v.([]byte)
			u32(&b, uint32(len(s)))
			b.Write(s)
		case Int64:
			u64(&b, uint64(v.(int64)))
		case Int32:
			var x [4]byte
			binary.BigEndian.PutUint32(x[:], uint32(v.(int32)))
			b.Write(x[:])
		case Float64:
			u64(&b, math.Float64bits(v.(float64)))
		case Bool:
			if v.(bool) {
				b.WriteByte(1)
			} else {
				b.WriteByte(0)
			}
		default:
			panic(fmt.Sprint("type ", ft))
		}
	}
	return b.Bytes()
}

type LogicalHasher struct{ buf bytes.Buffer }

func NewLogical(schema Digest) *LogicalHasher {
	h := &LogicalHasher{}
	h.buf.WriteString("sp.logical.v1\x00")
	h.buf.Write(schema[:])
	return h
}

func (h *LogicalHasher) Add(rec []byte) {
	u32(&h.buf, uint32(len(rec)))
	h.buf.Write(rec)
}

func (h *LogicalHasher) Sum() Digest { return sha256.Sum256(h.buf.Bytes()) }
