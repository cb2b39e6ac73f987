package sha256x2

import (
	"crypto/sha256"
	"math/rand/v2"
	"testing"
)

// TestSum2MatchesSHA256: every pair of lengths from 0 to 300 bytes (the
// padding's one- and two-block tails, runs of unequal block counts on
// either side) and random pairs up to 5 KiB give crypto/sha256's digests.
func TestSum2MatchesSHA256(t *testing.T) {
	if !useSHANI {
		t.Log("no SHA extensions: Sum2 is crypto/sha256 twice")
	}
	r := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, 5<<10)
	for i := range buf {
		buf[i] = byte(r.Uint32())
	}
	check := func(a, b []byte) {
		t.Helper()
		da, db := Sum2(a, b)
		if da != sha256.Sum256(a) || db != sha256.Sum256(b) {
			t.Fatalf("Sum2 of %d and %d bytes differs from crypto/sha256", len(a), len(b))
		}
	}
	for na := 0; na <= 300; na++ {
		for nb := 0; nb <= 300; nb += 7 {
			check(buf[:na], buf[na:na+nb])
		}
	}
	for range 2000 {
		na, nb := r.IntN(len(buf)/2), r.IntN(len(buf)/2)
		off := r.IntN(len(buf) / 2)
		check(buf[off:off+na], buf[:nb])
	}
	same := buf[:1000]
	check(same, same)
}

func FuzzSum2(f *testing.F) {
	f.Add([]byte("abc"), []byte(""))
	f.Add(make([]byte, 55), make([]byte, 56))
	f.Add(make([]byte, 64), make([]byte, 119))
	f.Fuzz(func(t *testing.T, a, b []byte) {
		da, db := Sum2(a, b)
		if da != sha256.Sum256(a) || db != sha256.Sum256(b) {
			t.Fatalf("Sum2 of %d and %d bytes differs from crypto/sha256", len(a), len(b))
		}
	})
}

func benchPairs(b *testing.B, n int, two bool) {
	buf := make([]byte, 2*n)
	b.SetBytes(int64(2 * n))
	for b.Loop() {
		if two {
			Sum2(buf[:n], buf[n:])
		} else {
			sha256.Sum256(buf[:n])
			sha256.Sum256(buf[n:])
		}
	}
}

func BenchmarkPair(b *testing.B) {
	for _, n := range []int{120, 900, 1 << 20} {
		b.Run(sizeName(n)+"/sha256", func(b *testing.B) { benchPairs(b, n, false) })
		b.Run(sizeName(n)+"/sum2", func(b *testing.B) { benchPairs(b, n, true) })
	}
}

func sizeName(n int) string {
	switch {
	case n >= 1<<20:
		return "1MiB"
	case n == 900:
		return "900B"
	default:
		return "120B"
	}
}
