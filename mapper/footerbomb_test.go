package mapper_test

import (
	"runtime"
	"slices"
	"testing"

	"github.com/shardproof/shardproof/mapper"
	"github.com/shardproof/shardproof/stage/stagetest"
)

// A shard replaced in the store by one whose footer declares a list of
// 100M schema elements or row groups, a few bytes more than the original,
// is FOOTER_CORRUPT (besides its digest and size mismatch, which do not
// stop the decode) before arrow-go's generated Thrift code allocates the
// list's declared capacity (800 MB of pointers), and emits nothing.
func TestFooterListBeyondItsBytes(t *testing.T) { forDecoders(t, testFooterListBeyondItsBytes) }

func testFooterListBeyondItsBytes(t *testing.T, dec mapper.Decoder) {
	f := newFixture(t, 300, 1, dec)
	orig := stagetest.ShardBytes(t, f.s, f.res.Release.Shards[0])
	for _, field := range []int16{2, 4} {
		data := stagetest.InflateFooterList(t, orig, field, 100_000_000)
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		r, tuples := f.replaced(t, data)
		runtime.ReadMemStats(&after)
		got := after.TotalAlloc - before.TotalAlloc
		t.Logf("field %d: %d-byte shard: TotalAlloc %d MiB, codes %v", field, len(data), got>>20, codes(r))
		if want := []string{"DIGEST_MISMATCH", "FOOTER_CORRUPT", "SIZE_MISMATCH"}; !slices.Equal(codes(r), want) || r.Decoded || len(tuples) != 0 {
			t.Fatalf("field %d: codes %v decoded %v tuples %d; want %v, none", field, codes(r), r.Decoded, len(tuples), want)
		}
		if got > 64<<20 {
			t.Fatalf("field %d: mapping a %d-byte shard allocated %d MiB", field, len(data), got>>20)
		}
	}
}
