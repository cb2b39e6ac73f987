package mapper_test

import (
	"fmt"
	"testing"

	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/mapper"
	"github.com/shardproof/shardproof/stage/stagetest"
	"github.com/shardproof/shardproof/tuplehash"
)

// A member stage wrote one bucket per row group reads bucket by bucket:
// each bucket's tuples exactly (those the whole member maps into it), an
// empty bucket empty, and mapped whole afterwards it still reproduces
// its descriptor.
func TestMemberReadBucket(t *testing.T) {
	f := newFixture(t, 3000, 3, mapper.DecoderColumnReader)
	m := f.res.SnapshotDoc.Members[1]
	in := mapper.Input{Side: mapper.SideSnapshot, Index: 1, Desc: m}
	whole := map[uint32][][32]byte{}
	_, err := mapper.MapShard(t.Context(), f.o, in, func(tp *mapper.Tuple) error {
		whole[tp.Bucket] = append(whole[tp.Bucket], tp.Digest)
		return nil
	})
	if err != nil || len(whole) < 2 {
		t.Fatalf("mapping member whole: %v, %d buckets", err, len(whole))
	}
	mem := mapper.OpenMember(f.o, mapper.Prefetch(t.Context(), f.o, in, false))
	defer mem.Close()
	for b := m.Buckets.Lo; b < m.Buckets.Hi; b++ {
		var got [][32]byte
		ok, err := mem.ReadBucket(t.Context(), b, func(tp *mapper.Tuple) error {
			if tp.Bucket != b {
				t.Errorf("bucket %d read gave a tuple of bucket %d", b, tp.Bucket)
			}
			got = append(got, tp.Digest)
			return nil
		})
		if err != nil || !ok {
			t.Fatalf("bucket %d: ok %v, %v", b, ok, err)
		}
		if tuplehash.BucketLeaf(b, got) != tuplehash.BucketLeaf(b, whole[b]) {
			t.Fatalf("bucket %d: %d tuples read, %d mapped whole", b, len(got), len(whole[b]))
		}
	}
	res, err := mem.Map(t.Context(), func(*mapper.Tuple) error { return nil })
	if err != nil || !res.Decoded || len(res.Failures) > 0 || res.StorageDigest != m.Digest || res.MemberSetDigest != m.MemberSetDigest {
		t.Fatalf("Map after bucket reads: %+v, %v", res, err)
	}
}

// A member without a row-group bucket list (a release shard here, or a
// member of another writer) is not read bucket by bucket.
func TestMemberReadBucketWithoutList(t *testing.T) {
	f := newFixture(t, 1000, 2, mapper.DecoderColumnReader)
	d := f.res.Release.Shards[0]
	in := mapper.Input{Side: mapper.SideSnapshot, Index: 0, Desc: manifest.Shard{ID: d.ID, Digest: d.Digest, Size: d.Size, ObjectVersion: d.ObjectVersion}}
	mem := mapper.OpenMember(f.o, mapper.Prefetch(t.Context(), f.o, in, false))
	defer mem.Close()
	n := 0
	ok, err := mem.ReadBucket(t.Context(), 0, func(*mapper.Tuple) error { n++; return nil })
	if err != nil || ok {
		t.Fatalf("ReadBucket of a file without the list: ok %v, %v (%d tuples)", ok, err, n)
	}
}

// BenchmarkMemberReadBuckets reads every eighth, and every, bucket of a
// 32,768-record snapshot member (4,096 buckets of about 8 rows, as in a
// small release with many differing buckets) in order, as a reducer does,
// through one Member: neighbouring buckets share the member's pages.
func BenchmarkMemberReadBuckets(b *testing.B) {
	s := stagetest.Store(b)
	res := stagetest.Synth(b, s, 1<<15, 1, 42)
	o := mapper.Options{Store: s, Schema: res.Schema, SchemaDigest: res.RecordSchema}
	m := res.SnapshotDoc.Members[0]
	in := mapper.Input{Side: mapper.SideSnapshot, Index: 0, Desc: m}
	for _, step := range []uint32{8, 1} {
		b.Run(fmt.Sprintf("every%d", step), func(b *testing.B) {
			tuples := 0
			for b.Loop() {
				mem := mapper.OpenMember(o, mapper.Prefetch(b.Context(), o, in, false))
				for bk := m.Buckets.Lo; bk < m.Buckets.Hi; bk += step {
					ok, err := mem.ReadBucket(b.Context(), bk, func(*mapper.Tuple) error { tuples++; return nil })
					if err != nil || !ok {
						b.Fatalf("bucket %d: ok %v, %v", bk, ok, err)
					}
				}
				mem.Close()
			}
			b.ReportMetric(float64(tuples)/float64(b.N), "tuples/op")
		})
	}
	b.Run("whole", func(b *testing.B) {
		tuples := 0
		for b.Loop() {
			mem := mapper.OpenMember(o, mapper.Prefetch(b.Context(), o, in, false))
			if _, err := mem.Map(b.Context(), func(*mapper.Tuple) error { tuples++; return nil }); err != nil {
				b.Fatal(err)
			}
			mem.Close()
		}
		b.ReportMetric(float64(tuples)/float64(b.N), "tuples/op")
	})
}
