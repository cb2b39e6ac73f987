package mapper_test

import (
	"slices"
	"testing"

	"github.com/apache/arrow-go/v18/parquet/metadata"

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
		r, tuples, got := f.replacedAllocating(t, data)
		t.Logf("field %d: %d-byte shard: TotalAlloc %d MiB, codes %v", field, len(data), got>>20, codes(r))
		if want := []string{"DIGEST_MISMATCH", "FOOTER_CORRUPT", "SIZE_MISMATCH"}; !slices.Equal(codes(r), want) || r.Decoded || len(tuples) != 0 {
			t.Fatalf("field %d: codes %v decoded %v tuples %d; want %v, none", field, codes(r), r.Decoded, len(tuples), want)
		}
		if got > 64<<20 {
			t.Fatalf("field %d: mapping a %d-byte shard allocated %d MiB", field, len(data), got>>20)
		}
	}
}

// A shard replaced by one whose footer's schema is not one tree (its
// root declares 2^26 children, and 7 elements follow it) or whose tree costs
// far more than its bytes (4,000 leaves under a group of a 20,000-byte
// name) is FOOTER_CORRUPT before arrow-go builds the schema, and emits
// nothing: its schema builder made a slice of the declared children (1
// GiB) before finding no element for the eighth, and built a path of 20
// KB for each leaf (160 MiB).
func TestFooterSchemaTreeBomb(t *testing.T) { forDecoders(t, testFooterSchemaTreeBomb) }

func testFooterSchemaTreeBomb(t *testing.T, dec mapper.Decoder) {
	f := newFixture(t, 300, 1, dec)
	orig := stagetest.ShardBytes(t, f.s, f.res.Release.Shards[0])
	for name, data := range map[string][]byte{
		"root of 2^26 children":  stagetest.DeclareRootChildren(t, orig, 1<<26),
		"leaves under long name": stagetest.NestUnderLongName(t, orig, 20_000, 4000),
	} {
		r, tuples, got := f.replacedAllocating(t, data)
		t.Logf("%s: %d-byte shard: TotalAlloc %d KiB, codes %v", name, len(data), got>>10, codes(r))
		if want := []string{"DIGEST_MISMATCH", "FOOTER_CORRUPT", "SIZE_MISMATCH"}; !slices.Equal(codes(r), want) || r.Decoded || len(tuples) != 0 {
			t.Errorf("%s: codes %v decoded %v tuples %d; want %v, none", name, codes(r), r.Decoded, len(tuples), want)
		}
		if limit := uint64(16<<20 + 64*len(data)); got > limit {
			t.Errorf("%s: mapping a %d-byte shard allocated %d MiB, over %d MiB", name, len(data), got>>20, limit>>20)
		}
	}
}

// A shard replaced by one whose footer declares 4M rows, in the file's
// count alone or in its row group's too, is refused for its row count
// and costs allocations in proportion to its bytes: the tuple digests
// were reserved for the footer's count (128 MiB, 32 bytes a declared row)
// before a row was decoded. A file whose count is not its row groups' sum
// is FOOTER_CORRUPT before any page is read.
func TestFooterRowCountBeyondItsBytes(t *testing.T) {
	forDecoders(t, testFooterRowCountBeyondItsBytes)
}

func testFooterRowCountBeyondItsBytes(t *testing.T, dec mapper.Decoder) {
	f := newFixture(t, 300, 1, dec)
	orig := stagetest.ShardBytes(t, f.s, f.res.Release.Shards[0])
	const rows = 1<<22 - 1
	for _, c := range []struct {
		name string
		edit func(md *metadata.FileMetaData)
		code string
	}{
		{"file's count", func(md *metadata.FileMetaData) { md.FileMetaData.NumRows = rows }, "FOOTER_CORRUPT"},
		{"row group's too", func(md *metadata.FileMetaData) {
			md.FileMetaData.NumRows = rows
			md.FileMetaData.RowGroups[0].NumRows = rows
		}, "DECODE_ERROR"},
	} {
		data := stagetest.RewriteFooter(t, orig, c.edit)
		r, tuples, got := f.replacedAllocating(t, data)
		t.Logf("%s: %d-byte shard: TotalAlloc %d KiB, codes %v", c.name, len(data), got>>10, codes(r))
		want := []string{c.code, "DIGEST_MISMATCH", "SIZE_MISMATCH"}
		slices.Sort(want)
		if !slices.Equal(codes(r), want) || len(tuples) != 0 {
			t.Errorf("%s: codes %v tuples %d; want %v, none", c.name, codes(r), len(tuples), want)
		}
		if limit := uint64(16<<20 + 64*len(data)); got > limit {
			t.Errorf("%s: mapping a %d-byte shard allocated %d MiB, over %d MiB", c.name, len(data), got>>20, limit>>20)
		}
	}
}
