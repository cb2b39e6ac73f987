package tuplehash

// This file is a second implementation of the v1 formats, written from the
// text of DESIGN.md ("Normative formats") without calling into the package.
// The golden tests require both implementations to agree with the frozen
// vectors, so a change to either one's bytes is caught.

import (
	"crypto/sha256"
	"encoding/binary"
	"math/bits"
	"sort"
)

// refEncode builds "sp.tuple.v1\x00" ‖ u32be len ‖ sampleId ‖ u32be len ‖
// sourceId ‖ i64be sourceVersion ‖ 32B logicalContentDigest ‖ u8 len ‖
// split ‖ 32B schemaDigest, one field at a time.
func refEncode(sampleID, sourceID string, sourceVersion int64, lcd [32]byte, split string, schema [32]byte) []byte {
	var out []byte
	out = append(out, 's', 'p', '.', 't', 'u', 'p', 'l', 'e', '.', 'v', '1', 0)
	var n4 [4]byte
	n4[0] = byte(len(sampleID) >> 24)
	n4[1] = byte(len(sampleID) >> 16)
	n4[2] = byte(len(sampleID) >> 8)
	n4[3] = byte(len(sampleID))
	out = append(out, n4[:]...)
	out = append(out, []byte(sampleID)...)
	n4[0] = byte(len(sourceID) >> 24)
	n4[1] = byte(len(sourceID) >> 16)
	n4[2] = byte(len(sourceID) >> 8)
	n4[3] = byte(len(sourceID))
	out = append(out, n4[:]...)
	out = append(out, []byte(sourceID)...)
	u := uint64(sourceVersion) // two's complement, as i64be requires
	for shift := 56; shift >= 0; shift -= 8 {
		out = append(out, byte(u>>uint(shift)))
	}
	out = append(out, lcd[:]...)
	out = append(out, byte(len(split)))
	out = append(out, []byte(split)...)
	out = append(out, schema[:]...)
	return out
}

// refSortedConcat returns the digests sorted ascending and concatenated.
func refSortedConcat(ds [][32]byte) []byte {
	raw := make([]string, len(ds))
	for i, d := range ds {
		raw[i] = string(d[:])
	}
	sort.Strings(raw) // bytewise order of the raw digests
	var out []byte
	for _, h := range raw {
		out = append(out, h...)
	}
	return out
}

func refMemberSet(ds [][32]byte) [32]byte {
	msg := []byte("sp.memberset.v1\x00")
	msg = binary.BigEndian.AppendUint64(msg, uint64(len(ds)))
	msg = append(msg, refSortedConcat(ds)...)
	return sha256.Sum256(msg)
}

func refBucketLeaf(bucket uint32, ds [][32]byte) [32]byte {
	msg := []byte("sp.bucket.v1\x00")
	msg = binary.BigEndian.AppendUint32(msg, bucket)
	msg = binary.BigEndian.AppendUint64(msg, uint64(len(ds)))
	msg = append(msg, refSortedConcat(ds)...)
	return sha256.Sum256(msg)
}

// refMerkleRoot is the iterative (stack) form of the RFC 6962 Merkle Tree
// Hash: push each leaf hash, merge the top two while the number of leaves
// seen so far has another trailing zero bit, then fold the stack right to
// left. It is independent of the recursive split used by MerkleRoot.
func refMerkleRoot(leaves [][32]byte) [32]byte {
	if len(leaves) == 0 {
		return sha256.Sum256(nil)
	}
	node := func(l, r [32]byte) [32]byte {
		return sha256.Sum256(append(append([]byte{1}, l[:]...), r[:]...))
	}
	var stack [][32]byte
	for i, l := range leaves {
		stack = append(stack, sha256.Sum256(append([]byte{0}, l[:]...)))
		for n := i + 1; n%2 == 0; n /= 2 {
			top := len(stack)
			stack = append(stack[:top-2], node(stack[top-2], stack[top-1]))
		}
	}
	for len(stack) > 1 {
		top := len(stack)
		stack = append(stack[:top-2], node(stack[top-2], stack[top-1]))
	}
	return stack[0]
}

func refBindRoot(root, snapshot [32]byte, tombstone, bench uint64) [32]byte {
	msg := []byte("sp.root.v1\x00")
	msg = append(msg, root[:]...)
	msg = append(msg, snapshot[:]...)
	msg = binary.BigEndian.AppendUint64(msg, tombstone)
	msg = binary.BigEndian.AppendUint64(msg, bench)
	return sha256.Sum256(msg)
}

// refXXH64 is XXH64 from the xxHash specification, so the bucket vectors do
// not depend on the xxhash module the package uses.
func refXXH64(b []byte, seed uint64) uint64 {
	const (
		p1 uint64 = 11400714785074694791
		p2 uint64 = 14029467366897019727
		p3 uint64 = 1609587929392839161
		p4 uint64 = 9650029242287828579
		p5 uint64 = 2870177450012600261
	)
	round := func(acc, in uint64) uint64 {
		acc += in * p2
		return bits.RotateLeft64(acc, 31) * p1
	}
	merge := func(acc, v uint64) uint64 {
		acc ^= round(0, v)
		return acc*p1 + p4
	}
	le64 := binary.LittleEndian.Uint64
	n := len(b)
	var h uint64
	if n >= 32 {
		v1, v2, v3, v4 := seed+p1+p2, seed+p2, seed, seed-p1
		for len(b) >= 32 {
			v1 = round(v1, le64(b[0:]))
			v2 = round(v2, le64(b[8:]))
			v3 = round(v3, le64(b[16:]))
			v4 = round(v4, le64(b[24:]))
			b = b[32:]
		}
		h = bits.RotateLeft64(v1, 1) + bits.RotateLeft64(v2, 7) + bits.RotateLeft64(v3, 12) + bits.RotateLeft64(v4, 18)
		h = merge(h, v1)
		h = merge(h, v2)
		h = merge(h, v3)
		h = merge(h, v4)
	} else {
		h = seed + p5
	}
	h += uint64(n)
	for len(b) >= 8 {
		h ^= round(0, le64(b))
		h = bits.RotateLeft64(h, 27)*p1 + p4
		b = b[8:]
	}
	if len(b) >= 4 {
		h ^= uint64(binary.LittleEndian.Uint32(b)) * p1
		h = bits.RotateLeft64(h, 23)*p2 + p3
		b = b[4:]
	}
	for _, c := range b {
		h ^= uint64(c) * p5
		h = bits.RotateLeft64(h, 11) * p1
	}
	h ^= h >> 33
	h *= p2
	h ^= h >> 29
	h *= p3
	h ^= h >> 32
	return h
}

func refBucket(sampleID string, k uint) uint32 {
	return uint32(refXXH64([]byte(sampleID), 0) >> (64 - k))
}
