package mapper_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/shardproof/shardproof/mapper"
	"github.com/shardproof/shardproof/stage/stagetest"
)

// A shard replaced by one whose page header declares a page of 48 MiB,
// compressed or uncompressed, in a file of 9 KB, is DECODE_ERROR without
// the page's allocation: the reader allocated any declared size up to
// the 64 MiB page bound before reading the page (61 MiB), and failed
// after. Now a page's compressed bytes are bounded by its chunk's (148
// here), and its uncompressed bytes by what they can decompress to (zstd:
// 65,536 times; internal/pagelimit). A page past the 64 MiB bound (80
// MiB) was refused before, and still is. The pqarrow decoder, which only
// benchmarks use, makes its page readers itself and bounds every chunk's
// pages by the file's largest chunk (7 KB of text here, whose pages may
// decompress past 64 MiB): its uncompressed pages are bounded by 64 MiB.
func TestPageLargerThanItsShard(t *testing.T) { forDecoders(t, testPageLargerThanItsShard) }

func testPageLargerThanItsShard(t *testing.T, dec mapper.Decoder) {
	f := newFixture(t, 20, 1, dec)
	orig := stagetest.ShardBytes(t, f.s, f.res.Release.Shards[0])
	for _, tc := range []struct {
		field int
		size  int32
	}{{3, 48 << 20}, {2, 48 << 20}, {3, 80 << 20}, {2, 80 << 20}} {
		name := fmt.Sprintf("field %d = %d MiB", tc.field, tc.size>>20)
		data := stagetest.PatchPageSize(t, orig, tc.field, tc.size)
		r, tuples, got := f.replacedAllocating(t, data)
		t.Logf("%s: %d-byte shard: TotalAlloc %d KiB, codes %v", name, len(data), got>>10, codes(r))
		if want := []string{"DECODE_ERROR", "DIGEST_MISMATCH", "SIZE_MISMATCH"}; !slices.Equal(codes(r), want) || r.Decoded || len(tuples) != 0 {
			t.Errorf("%s: codes %v decoded %v tuples %d; want %v, none", name, codes(r), r.Decoded, len(tuples), want)
		}
		if dec == mapper.DecoderPQArrow && tc.field == 2 {
			continue
		}
		if limit := uint64(4<<20 + 64*len(data)); got > limit {
			t.Errorf("%s: mapping a %d-byte shard allocated %d KiB, over %d KiB", name, len(data), got>>10, limit>>10)
		}
	}
}
