package tuplehash

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

func testTuples(n int) []Tuple {
	ts := make([]Tuple, n)
	for i := range ts {
		ts[i] = Tuple{
			SampleID:             fmt.Sprintf("sample-%06d", i),
			SourceID:             "src",
			SourceVersion:        int64(i % 3),
			LogicalContentDigest: sha(fmt.Sprint("content", i)),
			Split:                "train",
			SchemaDigest:         sha("schema"),
		}
	}
	return ts
}

func rootOf(t *testing.T, k uint, ts []Tuple) [32]byte {
	t.Helper()
	a := NewAccumulator(k)
	for i := range ts {
		if err := a.Add(&ts[i]); err != nil {
			t.Fatal(err)
		}
	}
	return a.Root()
}

// TestAccumulatorOrderAndWorkers shows the unbound root depends only on the
// multiset of tuples: not on record order, nor on how tuples are dealt to
// several workers whose Accumulators are merged.
func TestAccumulatorOrderAndWorkers(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, k := range []uint{1, 4, DefaultK} {
		t.Run(fmt.Sprint("k=", k), func(t *testing.T) {
			ts := testTuples(500)
			want := rootOf(t, k, ts)

			for trial := range 5 {
				rng.Shuffle(len(ts), func(i, j int) { ts[i], ts[j] = ts[j], ts[i] })
				if got := rootOf(t, k, ts); got != want {
					t.Fatalf("trial %d: root changed with record order", trial)
				}
				workers := make([]*Accumulator, 1+rng.IntN(7))
				for i := range workers {
					workers[i] = NewAccumulator(k)
				}
				for i := range ts {
					if err := workers[rng.IntN(len(workers))].Add(&ts[i]); err != nil {
						t.Fatal(err)
					}
				}
				total := NewAccumulator(k)
				for _, i := range rng.Perm(len(workers)) {
					total.Merge(workers[i])
				}
				if got := total.Root(); got != want {
					t.Fatalf("trial %d: root changed when split among %d workers", trial, len(workers))
				}
			}

			// The root must see every member: dropping, duplicating or
			// changing one changes it.
			if got := rootOf(t, k, ts[1:]); got == want {
				t.Error("root unchanged after dropping a tuple")
			}
			if got := rootOf(t, k, append(ts[:len(ts):len(ts)], ts[0])); got == want {
				t.Error("root unchanged after duplicating a tuple")
			}
			changed := append([]Tuple(nil), ts...)
			changed[0].SourceVersion++
			if got := rootOf(t, k, changed); got == want {
				t.Error("root unchanged after changing a sourceVersion")
			}
		})
	}
}

func TestAccumulatorLeaves(t *testing.T) {
	a := NewAccumulator(4)
	ts := testTuples(40)
	byBucket := map[uint32][][32]byte{}
	for i := range ts {
		if err := a.Add(&ts[i]); err != nil {
			t.Fatal(err)
		}
		d, _ := ts[i].Digest()
		b := Bucket(ts[i].SampleID, 4)
		byBucket[b] = append(byBucket[b], d)
	}
	leaves := a.Leaves()
	if len(leaves) != 16 {
		t.Fatalf("%d leaves for k=4, want 16 (empty buckets included)", len(leaves))
	}
	for b := range uint32(16) {
		if want := refBucketLeaf(b, byBucket[b]); leaves[b] != want {
			t.Errorf("leaf %d differs from the reference", b)
		}
	}
	if a.Root() != refMerkleRoot(leaves) {
		t.Error("Accumulator.Root differs from the reference Merkle root of its leaves")
	}
}

var sink [32]byte

func BenchmarkTupleDigest(b *testing.B) {
	ts := testTuples(1024)
	b.ReportAllocs()
	b.SetBytes(int64(ts[0].EncodedLen()))
	for i := 0; b.Loop(); i++ {
		d, err := ts[i%len(ts)].Digest()
		if err != nil {
			b.Fatal(err)
		}
		sink = d
	}
}

func BenchmarkBucket(b *testing.B) {
	ts := testTuples(1024)
	var s uint32
	for i := 0; b.Loop(); i++ {
		s += Bucket(ts[i%len(ts)].SampleID, DefaultK)
	}
	sink[0] = byte(s)
}

func BenchmarkMemberSetDigest(b *testing.B) {
	ts := testTuples(10000)
	ds := make([][32]byte, len(ts))
	for i := range ts {
		ds[i], _ = ts[i].Digest()
	}
	work := make([][32]byte, len(ds))
	b.ReportAllocs()
	b.SetBytes(int64(32 * len(ds)))
	for b.Loop() {
		copy(work, ds) // unsorted input each time, as a mapper sees it
		sink = MemberSetDigest(work)
	}
}

// TestSortDigestsBytewise checks the word-wise comparison against
// bytes.Compare, including digests that share their first 8 bytes.
func TestSortDigestsBytewise(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	ds := make([][32]byte, 2000)
	for i := range ds {
		for j := range ds[i] {
			ds[i][j] = byte(rng.IntN(256))
		}
		if i%3 == 0 && i > 0 { // same first 8 (or more) bytes as a neighbour
			copy(ds[i][:8+rng.IntN(24)], ds[i-1][:])
		}
	}
	ds = append(ds, ds[5], [32]byte{}, [32]byte{0xff}) // duplicates and extremes
	got := slices.Clone(ds)
	SortDigests(got)
	want := slices.Clone(ds)
	slices.SortFunc(want, func(a, b [32]byte) int { return bytes.Compare(a[:], b[:]) })
	if !slices.Equal(got, want) {
		t.Fatal("SortDigests disagrees with bytewise order")
	}
}

// TestSortDigests checks the counting sort against a plain sort, on
// uniform digests, on digests sharing their leading bytes (the slot
// fallback) and with duplicates, at sizes around every threshold.
func TestSortDigests(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 9))
	gen := map[string]func(i int) [32]byte{
		"uniform": func(int) (d [32]byte) {
			for k := range d {
				d[k] = byte(rng.Uint32())
			}
			return d
		},
		"sharedPrefix": func(int) (d [32]byte) {
			d[31] = byte(rng.Uint32())
			d[20] = byte(rng.Uint32())
			return d
		},
		"duplicates": func(i int) (d [32]byte) {
			d[0], d[9] = byte(i%3), byte(i%5)
			return d
		},
	}
	for name, g := range gen {
		for _, n := range []int{0, 1, 2, 11, 12, 13, 64, 1000, 70000} {
			in := make([][32]byte, n)
			for i := range in {
				in[i] = g(i)
			}
			want := slices.Clone(in)
			slices.SortFunc(want, func(a, b [32]byte) int { return bytes.Compare(a[:], b[:]) })
			got := slices.Clone(in)
			SortDigests(got)
			if !slices.Equal(got, want) {
				t.Fatalf("%s n=%d: SortDigests differs from a bytewise sort", name, n)
			}
			before := slices.Clone(in)
			if MemberSetDigestOf(in) != MemberSetDigest(slices.Clone(in)) {
				t.Fatalf("%s n=%d: MemberSetDigestOf != MemberSetDigest", name, n)
			}
			if !slices.Equal(in, before) {
				t.Fatalf("%s n=%d: MemberSetDigestOf reordered its input", name, n)
			}
		}
	}
}
