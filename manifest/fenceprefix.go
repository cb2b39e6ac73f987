package manifest

import (
	"crypto/sha256"
	"encoding/binary"

	"github.com/shardproof/shardproof/internal/errcode"
)

// fencePrefixDomain starts every prefix digest; the log's schema and a NUL
// follow it, so a tombstone log and a benchmark registry with the same
// entries have different prefix digests.
const fencePrefixDomain = "sp.fenceprefix.v1\x00"

// Entry tags of the prefix encoding.
const (
	fencePrefixSampleID      = 0x01
	fencePrefixContentDigest = 0x02
)

// PrefixDigest returns the prefix digest of l at seq n: what the gate
// keeps beside a fence advanced to n with l, so that a later log can be
// checked to be the same log up to n (an append-only log at seq n is a
// prefix of every later one). It is sha256 over
//
//	"sp.fenceprefix.v1\x00" ‖ schema ‖ "\x00" ‖ u64be n ‖ u64be count ‖
//	for each entry with seq ≤ n, in seq order:
//	  u64be seq ‖ 0x01 ‖ u32be len ‖ sampleId      (an entry by sampleId)
//	  u64be seq ‖ 0x02 ‖ 32 bytes contentDigest    (an entry by content)
//
// where count is the number of those entries. Entries above n, and the
// document's bytes (spacing, key order), do not change it. l must be
// valid (Validate): seqs strictly increase, so a seq twice is BAD_DOCUMENT,
// never two entries under one seq. A log that does not reach n (its
// highest seq is below n) has no prefix at n: a later log may still add
// entries at or below n, and that is FENCE_BEHIND.
func (l *FenceLog) PrefixDigest(n uint64) (Digest, error) {
	if err := l.Validate(); err != nil {
		return Digest{}, err
	}
	if w := l.Watermark(); w < n {
		return Digest{}, errcode.New(errcode.FenceBehind, "the %s reaches seq %d, below %d: it has no prefix at %d", l.Schema, w, n, n)
	}
	count := 0
	for _, e := range l.Entries {
		if e.Seq > n {
			break
		}
		count++
	}
	h := sha256.New()
	var b []byte
	b = append(b, fencePrefixDomain...)
	b = append(b, l.Schema...)
	b = append(b, 0)
	b = binary.BigEndian.AppendUint64(b, n)
	b = binary.BigEndian.AppendUint64(b, uint64(count))
	for _, e := range l.Entries[:count] {
		b = binary.BigEndian.AppendUint64(b, e.Seq)
		if e.SampleID != "" {
			b = append(b, fencePrefixSampleID)
			b = binary.BigEndian.AppendUint32(b, uint32(len(e.SampleID)))
			b = append(b, e.SampleID...)
		} else {
			b = append(b, fencePrefixContentDigest)
			b = append(b, e.ContentDigest[:]...)
		}
		if len(b) >= 64<<10 {
			h.Write(b)
			b = b[:0]
		}
	}
	h.Write(b)
	var d Digest
	h.Sum(d[:0])
	return d, nil
}
