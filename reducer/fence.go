package reducer

import (
	"encoding/binary"

	"github.com/RoaringBitmap/roaring/v2/roaring64"

	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/tuplehash"
)

// Set is a tombstone log or benchmark registry prepared for lookups:
// roaring64 bitmaps as the fast filter, exact sets as confirmation.
type Set struct {
	idBits      *roaring64.Bitmap
	ids         map[string]struct{}
	contentBits *roaring64.Bitmap
	contents    map[[32]byte]struct{}
}

// NewSet indexes every entry of l. A nil log gives an empty set.
func NewSet(l *manifest.FenceLog) *Set {
	s := &Set{
		idBits:      roaring64.New(),
		ids:         map[string]struct{}{},
		contentBits: roaring64.New(),
		contents:    map[[32]byte]struct{}{},
	}
	if l == nil {
		return s
	}
	for _, e := range l.Entries {
		if e.SampleID != "" {
			s.idBits.Add(tuplehash.Key64(e.SampleID))
			s.ids[e.SampleID] = struct{}{}
		}
		if !e.ContentDigest.IsZero() {
			s.contentBits.Add(contentKey(e.ContentDigest))
			s.contents[e.ContentDigest] = struct{}{}
		}
	}
	return s
}

func contentKey(d [32]byte) uint64 { return binary.BigEndian.Uint64(d[:8]) }

// Hit reports whether a tuple with this sampleId or content digest is in the
// set.
func (s *Set) Hit(sampleID string, content [32]byte) bool {
	if s == nil {
		return false
	}
	if s.idBits.Contains(tuplehash.Key64(sampleID)) {
		if _, ok := s.ids[sampleID]; ok {
			return true
		}
	}
	if s.contentBits.Contains(contentKey(content)) {
		if _, ok := s.contents[content]; ok {
			return true
		}
	}
	return false
}

// Len returns the number of distinct entries (sampleIds plus digests).
func (s *Set) Len() int {
	if s == nil {
		return 0
	}
	return len(s.ids) + len(s.contents)
}
