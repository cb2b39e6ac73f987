package stage

import "testing"

// spoolDepths returns the spool level at which each shard of [lo, hi)
// gets its own file, splitting as partition does, and checks every cut.
func spoolDepths(t *testing.T, lo, hi, fan, level int, depth []int) {
	t.Helper()
	rs := spoolRanges(lo, hi, fan)
	if len(rs) > fan || len(rs) < 2 && hi-lo > 1 {
		t.Fatalf("[%d, %d) fan %d: %d ranges", lo, hi, fan, len(rs))
	}
	at := lo
	for _, r := range rs {
		// A file is on disk twice while it is split: each holds under
		// 8/fan of its parent's shards (shallow ranges, 1/fan).
		if fan >= 8 && hi-lo > fan && (r.hi-r.lo)*fan > 8*(hi-lo) {
			t.Fatalf("[%d, %d) fan %d: range %v holds more than 8/%d of the shards", lo, hi, fan, r, fan)
		}
		if r.lo != at || r.hi <= r.lo {
			t.Fatalf("[%d, %d) fan %d: ranges %v do not cut it in order", lo, hi, fan, rs)
		}
		at = r.hi
		if r.hi-r.lo == 1 {
			depth[r.lo] = level
		} else {
			spoolDepths(t, r.lo, r.hi, fan, level+1, depth)
		}
	}
	if at != hi {
		t.Fatalf("[%d, %d) fan %d: ranges %v end at %d", lo, hi, fan, rs, at)
	}
}

// Every shard gets its own spool file after at most ceil(log_fan shards)
// levels, and the deepest takes exactly that many; no file holds more
// than 8/fan of its parent's shards; 30,500 shards (a billion records)
// with 128 open spools take three levels, and many rows two.
func TestSpoolRangesAreLogarithmic(t *testing.T) {
	for _, fan := range []int{2, 3, 7, 16, 128} {
		for _, n := range []int{1, 2, 3, 5, fan - 1, fan, fan + 1, 2 * fan, fan*fan - 1, fan * fan, fan*fan + 1, 30500} {
			if n < 1 {
				continue
			}
			want := 1
			for p := fan; p < n; p *= fan {
				want++
			}
			depth := make([]int, n)
			spoolDepths(t, 0, n, fan, 1, depth)
			deepest := 0
			for j, d := range depth {
				if d == 0 {
					t.Fatalf("%d shards, fan %d: shard %d has no spool file", n, fan, j)
				}
				deepest = max(deepest, d)
			}
			if deepest != want {
				t.Errorf("%d shards, fan %d: %d levels, want %d", n, fan, deepest, want)
			}
			if n == 30500 && fan == 128 {
				two := 0
				for _, d := range depth {
					if d == 2 {
						two++
					}
				}
				if two < n/3 {
					t.Errorf("30,500 shards: %d take two levels, want a third at least", two)
				}
				t.Logf("30,500 shards, fan 128: %d shards in 2 levels, %d in 3", two, n-two)
			}
		}
	}
}
