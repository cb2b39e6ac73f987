package mapper_test

import (
	"bytes"
	"encoding/binary"
	"math"
	"runtime"
	"slices"
	"testing"

	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/metadata"

	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/mapper"
	"github.com/shardproof/shardproof/stage/stagetest"
)

// A member whose footer puts a column chunk's offset index or column
// index, or its data page, anywhere (a length of 2 GiB, past the file,
// over the footer, before the data, a data page past the footer in a
// chunk whose dictionary page is in place) is FOOTER_CORRUPT, mapped
// whole, and read bucket by bucket gives no bucket, before any of it is
// read: a bucket read seeks through the offset index, and arrow-go read
// the row group's whole index range into a buffer of its length, 2 GiB
// for the first bucket read that sought. Mapped whole, none of them
// failed.
func TestIndexLocationsPointingAnywhere(t *testing.T) {
	f := newFixture(t, 3000, 1, mapper.DecoderColumnReader)
	m := f.res.SnapshotDoc.Members[0]
	orig := stagetest.ShardBytes(t, f.s, m)
	n := len(orig)
	footerStart := int64(n - 8 - int(binary.LittleEndian.Uint32(orig[n-8:n-4])))
	pf, err := file.NewParquetReader(bytes.NewReader(orig))
	if err != nil {
		t.Fatal(err)
	}
	dict := -1
	for c := range pf.MetaData().RowGroup(0).NumColumns() {
		if cc, _ := pf.MetaData().RowGroup(0).ColumnChunk(c); cc.HasDictionaryPage() && cc.DictionaryPageOffset() > 0 {
			dict = c
			break
		}
	}
	pf.Close()
	if dict < 0 {
		t.Fatal("the member has no dictionary-encoded column")
	}
	for _, tc := range []struct {
		name string
		edit func(md *metadata.FileMetaData)
	}{
		{"offset index of 2 GiB", func(md *metadata.FileMetaData) {
			l := int32(math.MaxInt32)
			md.FileMetaData.RowGroups[0].Columns[0].OffsetIndexLength = &l
		}},
		{"offset index past the file", func(md *metadata.FileMetaData) {
			o := int64(n) + 1<<20
			md.FileMetaData.RowGroups[0].Columns[0].OffsetIndexOffset = &o
		}},
		{"offset index over the footer", func(md *metadata.FileMetaData) {
			o := footerStart - 2
			md.FileMetaData.RowGroups[0].Columns[0].OffsetIndexOffset = &o
		}},
		{"offset index before the data", func(md *metadata.FileMetaData) {
			o := int64(0)
			md.FileMetaData.RowGroups[0].Columns[0].OffsetIndexOffset = &o
		}},
		{"column index of 2 GiB", func(md *metadata.FileMetaData) {
			o, l := int64(4), int32(math.MaxInt32)
			md.FileMetaData.RowGroups[0].Columns[0].ColumnIndexOffset = &o
			md.FileMetaData.RowGroups[0].Columns[0].ColumnIndexLength = &l
		}},
		{"data page past the footer", func(md *metadata.FileMetaData) {
			md.FileMetaData.RowGroups[0].Columns[dict].MetaData.DataPageOffset = footerStart + 1<<30
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := stagetest.RewriteFooter(t, orig, tc.edit)
			d := m
			d.Digest, d.Size = manifest.Sum(data), int64(len(data))
			d.ObjectVersion = string(stagetest.PutVersion(t, f.s, d.Digest.BlobKey(), data))
			in := mapper.Input{Side: mapper.SideSnapshot, Index: 0, Desc: d}
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			// As a reducer reads a member: bucket by bucket, until one
			// cannot be read that way.
			mem := mapper.OpenMember(f.o, mapper.Prefetch(t.Context(), f.o, in, false))
			read := 0
			for b := d.Buckets.Lo; b < d.Buckets.Hi; b++ {
				ok, err := mem.ReadBucket(t.Context(), b, func(*mapper.Tuple) error { return nil })
				if err != nil {
					t.Fatalf("bucket %d: %v", b, err)
				}
				if !ok {
					break
				}
				read++
			}
			mem.Close()
			runtime.ReadMemStats(&after)
			got := after.TotalAlloc - before.TotalAlloc
			r, err := mapper.MapShard(t.Context(), f.o, in, func(*mapper.Tuple) error { return nil })
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%d-byte member: bucket reads allocated %d KiB, %d of %d buckets read; mapped whole: codes %v", len(data), got>>10, read, d.Buckets.Hi-d.Buckets.Lo, codes(r))
			if want := []string{"FOOTER_CORRUPT"}; !slices.Equal(codes(r), want) || r.Decoded {
				t.Errorf("mapped whole: codes %v decoded %v; want %v", codes(r), r.Decoded, want)
			}
			if read != 0 {
				t.Errorf("%d buckets read", read)
			}
			if limit := uint64(4<<20 + 64*len(data)); got > limit {
				t.Errorf("bucket reads of a %d-byte member allocated %d MiB, over %d MiB", len(data), got>>20, limit>>20)
			}
		})
	}
}
