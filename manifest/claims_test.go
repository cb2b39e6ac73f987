package manifest

import (
	"strings"
	"testing"

	"github.com/shardproof/shardproof/internal/errcode"
)

// A release's watermark claims are backed only by fence documents that
// reach them; a document beyond a claim backs it too.
func TestCheckWatermarks(t *testing.T) {
	r := &Release{TombstoneWatermark: 44192, BenchmarkFence: 3908}
	for _, c := range []struct {
		tombstone, benchmark uint64
		want                 []string // "" when backed
	}{
		{44192, 3908, nil},
		{50000, 4000, nil},
		{44191, 3908, []string{"tombstoneWatermark 44192, but the tombstone log checked reaches only 44191"}},
		{44192, 0, []string{"benchmarkFence 3908, but no benchmark registry (or an empty one) was checked"}},
		{0, 0, []string{"tombstoneWatermark 44192, but no tombstone log", "benchmarkFence 3908, but no benchmark registry"}},
	} {
		err := r.CheckWatermarks(c.tombstone, c.benchmark)
		if c.want == nil {
			if err != nil {
				t.Errorf("%d/%d: %v, want nil", c.tombstone, c.benchmark, err)
			}
			continue
		}
		if errcode.Of(err) != errcode.WatermarkUnchecked {
			t.Errorf("%d/%d: %v, want WATERMARK_UNCHECKED", c.tombstone, c.benchmark, err)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%d/%d: %q lacks %q", c.tombstone, c.benchmark, err, w)
			}
		}
	}
	if err := (&Release{}).CheckWatermarks(0, 0); err != nil {
		t.Errorf("claims of 0 without documents: %v", err)
	}
}
