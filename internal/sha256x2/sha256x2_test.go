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

// TestSumManyMatchesSHA256: lists of every length to 9 and random lists
// of messages of very unequal lengths (so lanes switch messages at
// different times, and one runs alone at the end) give crypto/sha256's
// digests in order.
func TestSumManyMatchesSHA256(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	buf := make([]byte, 8<<10)
	for i := range buf {
		buf[i] = byte(r.Uint32())
	}
	for trial := range 3000 {
		n := trial % 10
		if trial >= 100 {
			n = r.IntN(40)
		}
		msgs := make([][]byte, n)
		for i := range msgs {
			l := r.IntN(300)
			if r.IntN(4) == 0 {
				l = r.IntN(len(buf))
			}
			off := r.IntN(len(buf) - l + 1)
			msgs[i] = buf[off : off+l]
		}
		dst := make([][Size]byte, n+1)
		SumMany(dst, msgs)
		for i, m := range msgs {
			if dst[i] != sha256.Sum256(m) {
				t.Fatalf("trial %d: message %d of %d (%d bytes) differs from crypto/sha256", trial, i, n, len(m))
			}
		}
		if dst[n] != ([Size]byte{}) {
			t.Fatalf("trial %d: SumMany wrote past the messages", trial)
		}
	}
}

func BenchmarkMany(b *testing.B) {
	r := rand.New(rand.NewPCG(5, 6))
	buf := make([]byte, 1<<20)
	msgs := make([][]byte, 1024)
	total := 0
	for i := range msgs {
		l := 300 + r.IntN(1200) // text records: 300-1,500 bytes
		off := r.IntN(len(buf) - l)
		msgs[i] = buf[off : off+l]
		total += l
	}
	dst := make([][Size]byte, len(msgs))
	b.Run("sha256", func(b *testing.B) {
		b.SetBytes(int64(total))
		for b.Loop() {
			for i, m := range msgs {
				dst[i] = sha256.Sum256(m)
			}
		}
	})
	b.Run("pairs", func(b *testing.B) {
		b.SetBytes(int64(total))
		for b.Loop() {
			for i := 0; i+1 < len(msgs); i += 2 {
				dst[i], dst[i+1] = Sum2(msgs[i], msgs[i+1])
			}
		}
	})
	b.Run("many", func(b *testing.B) {
		b.SetBytes(int64(total))
		for b.Loop() {
			SumMany(dst, msgs)
		}
	})
}
