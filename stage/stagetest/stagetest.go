// Package stagetest builds releases, correct and faulty, for tests of the
// packages that verify them (mapper, reducer, coordinator, cmd). Every
// helper writes through a real objstore.Store; faults are made the way a
// buggy writer or a corrupted store would make them, so the verifier under
// test meets real bytes.
package stagetest

import (
	"bytes"
	"context"
	"encoding/binary"
	"strconv"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	pqfile "github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/metadata"

	"github.com/shardproof/shardproof/internal/pqfooter"
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/objstore"
	"github.com/shardproof/shardproof/objstore/file"
	"github.com/shardproof/shardproof/stage"
	"github.com/shardproof/shardproof/tuplehash"
)

// Store returns a fresh file store in a test temp directory.
func Store(t testing.TB) objstore.Store {
	t.Helper()
	s, err := file.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// Synth stages a synthetic release of samples records in shards shards.
func Synth(t testing.TB, s objstore.Store, samples, shards int, seed int64) stage.Result {
	t.Helper()
	res, err := stage.Synth(context.Background(), s, stage.SynthOptions{Samples: samples, Shards: shards, Seed: seed})
	if err != nil {
		t.Fatalf("synth: %v", err)
	}
	return res
}

// ShardBytes reads the bytes of a descriptor's exact version, verified.
func ShardBytes(t testing.TB, s objstore.Store, d manifest.Shard) []byte {
	t.Helper()
	b, err := stage.ReadFile(context.Background(), s, d)
	if err != nil {
		t.Fatalf("read %s: %v", d.ID, err)
	}
	return b
}

// Rows decodes Parquet bytes of DefaultSchema into rows.
func Rows(t testing.TB, data []byte) []stage.Row {
	t.Helper()
	rec, err := stage.DecodeParquet(context.Background(), data)
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Release()
	rows, err := stage.RowsOf(rec)
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

// ShardRows returns the rows of release shard i.
func ShardRows(t testing.TB, s objstore.Store, res stage.Result, i int) []stage.Row {
	t.Helper()
	return Rows(t, ShardBytes(t, s, res.Release.Shards[i]))
}

// Encode writes rows as DefaultSchema Parquet with o (zero value: the
// release's own zstd level 3).
func Encode(t testing.TB, rows []stage.Row, o stage.ParquetOptions) []byte {
	t.Helper()
	rec := stage.BuildRows(rows)
	defer rec.Release()
	return EncodeRecord(t, rec, stage.DefaultSchema(), o)
}

// EncodeRecord writes a record batch of any schema as Parquet.
func EncodeRecord(t testing.TB, rec arrow.RecordBatch, schema *manifest.RecordSchema, o stage.ParquetOptions) []byte {
	t.Helper()
	b, err := stage.EncodeParquet(rec, schema, o)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Recompress re-encodes DefaultSchema Parquet bytes with another codec or
// level: same records, so the same logical digest, different bytes.
func Recompress(t testing.TB, data []byte, codec string, level int) []byte {
	t.Helper()
	return Encode(t, Rows(t, data), stage.ParquetOptions{Codec: codec, Level: level})
}

// WriteShard stores Parquet bytes of a record batch with schema (a valid
// new blob) and returns its complete descriptor named id. Tuples get
// schemaDigest tupleSchema (the release's recordSchema, or the digest of
// schema to model a writer that used another schema).
func WriteShard(t testing.TB, s objstore.Store, id string, rec arrow.RecordBatch, schema *manifest.RecordSchema, tupleSchema manifest.Digest, o stage.ParquetOptions) manifest.Shard {
	t.Helper()
	data := EncodeRecord(t, rec, schema, o)
	desc, err := stage.Describe(rec, schema, tupleSchema, nil)
	if err != nil {
		t.Fatal(err)
	}
	d, v, _, err := objstore.PutBlob(context.Background(), s, data)
	if err != nil {
		t.Fatal(err)
	}
	desc.ID, desc.Digest, desc.Size, desc.ObjectVersion = id, d, int64(len(data)), string(v)
	return desc
}

// WriteRows is WriteShard for DefaultSchema rows with the release schema.
func WriteRows(t testing.TB, s objstore.Store, res stage.Result, id string, rows []stage.Row) manifest.Shard {
	t.Helper()
	rec := stage.BuildRows(rows)
	defer rec.Release()
	return WriteShard(t, s, id, rec, stage.DefaultSchema(), res.RecordSchema, stage.ParquetOptions{})
}

// Reissue stores rel as a new release manifest (totals recomputed) and
// returns res with the new Root and Release. With recomputeRoot, the
// orderedMemberTupleRoot is recomputed from the shards' actual tuples, as
// an honest writer of a wrong release would; otherwise it is left as is.
func Reissue(t testing.TB, s objstore.Store, res stage.Result, rel *manifest.Release, recomputeRoot bool) stage.Result {
	t.Helper()
	ctx := context.Background()
	rel.Totals = stage.TotalsOf(rel.Shards)
	if recomputeRoot {
		root, err := stage.ReleaseTupleRoot(ctx, s, rel, res.Schema)
		if err != nil {
			t.Fatal(err)
		}
		rel.OrderedMemberTupleRoot = tuplehash.BindRoot(root, rel.DatasetSnapshot, rel.TombstoneWatermark, rel.BenchmarkFence)
	}
	b, err := manifest.Encode(rel)
	if err != nil {
		t.Fatal(err)
	}
	d, _, _, err := objstore.PutBlob(ctx, s, b)
	if err != nil {
		t.Fatal(err)
	}
	res.Root, res.Release = d, rel
	return res
}

// CloneRelease returns a deep copy of rel, to modify before Reissue.
func CloneRelease(rel *manifest.Release) *manifest.Release {
	c := *rel
	c.Shards = append([]manifest.Shard(nil), rel.Shards...)
	return &c
}

// RewriteShard replaces shard i by a valid shard holding edit(rows) and
// reissues a consistent manifest (descriptor, totals and tuple root all
// describe the new bytes), so only the diff against the snapshot can tell
// what changed: missing, extra, duplicate, substituted members and so on.
func RewriteShard(t testing.TB, s objstore.Store, res stage.Result, i int, edit func([]stage.Row) []stage.Row) stage.Result {
	t.Helper()
	rows := edit(ShardRows(t, s, res, i))
	rel := CloneRelease(res.Release)
	rel.Shards[i] = WriteRows(t, s, res, rel.Shards[i].ID, rows)
	return Reissue(t, s, res, rel, true)
}

// ReplaceShardBytes stores data as a new version at shard i's existing key
// (as a store that lost immutability, or an operator overwriting a blob,
// would) and reissues the manifest pointing at that version with the old
// digest, size and figures: the verifier must find the mismatch.
func ReplaceShardBytes(t testing.TB, s objstore.Store, res stage.Result, i int, data []byte) stage.Result {
	t.Helper()
	rel := CloneRelease(res.Release)
	d := rel.Shards[i]
	v := PutVersion(t, s, d.Digest.BlobKey(), data)
	rel.Shards[i].ObjectVersion = string(v)
	return Reissue(t, s, res, rel, false)
}

// PutVersion stores data as a new version of key without a conditional
// create and returns the version.
func PutVersion(t testing.TB, s objstore.Store, key string, data []byte) objstore.Version {
	t.Helper()
	v, err := s.Put(context.Background(), key, bytes.NewReader(data), objstore.PutOptions{Size: int64(len(data))})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// Truncate returns data without its last n bytes.
func Truncate(data []byte, n int) []byte { return append([]byte(nil), data[:len(data)-n]...) }

// FlipBit returns a copy of data with bit (off*8 + bit) inverted.
func FlipBit(data []byte, off int, bit uint) []byte {
	c := append([]byte(nil), data...)
	c[off] ^= 1 << bit
	return c
}

// InflateFooterList returns a copy of the Parquet file data whose footer's
// list field (2 schema, 4 row_groups, 5 key_value_metadata of
// FileMetaData) declares count entries, its elements left as they were,
// with the footer length updated: a footer bomb a few bytes larger than
// data, as a hostile writer would make one.
func InflateFooterList(t testing.TB, data []byte, field int16, count uint64) []byte {
	t.Helper()
	n := len(data)
	fl := int(binary.LittleEndian.Uint32(data[n-8 : n-4]))
	start := n - 8 - fl
	footer := data[start : n-8]
	_, value, _, ok, err := pqfooter.TopField(footer, field)
	if err != nil || !ok {
		t.Fatalf("footer has no field %d (%v)", field, err)
	}
	h := footer[value]
	if h&0x0f != 12 {
		t.Fatalf("field %d is not a list of structs (header %#x)", field, h)
	}
	// Skip the old count (in the header, or a varint after it).
	rest := value + 1
	if h>>4 == 15 {
		_, k := binary.Uvarint(footer[rest:])
		rest += k
	}
	enc := binary.AppendUvarint([]byte{0xf0 | h&0x0f}, count)
	var out []byte
	out = append(out, data[:start+value]...)
	out = append(out, enc...)
	out = append(out, footer[rest:]...)
	out = binary.LittleEndian.AppendUint32(out, uint32(fl-(rest-value)+len(enc)))
	return append(out, "PAR1"...)
}

// RewriteFooter returns a copy of the Parquet file data whose footer is
// the one arrow-go decodes from it, changed by edit (its Thrift struct,
// md.FileMetaData, is what is written) and written back in place of the
// old, with the footer length updated: a footer a hostile writer made,
// over the original pages.
func RewriteFooter(t testing.TB, data []byte, edit func(md *metadata.FileMetaData)) []byte {
	t.Helper()
	n := len(data)
	fl := int(binary.LittleEndian.Uint32(data[n-8 : n-4]))
	start := n - 8 - fl
	md, err := metadata.NewFileMetaData(data[start:n-8], nil)
	if err != nil {
		t.Fatal(err)
	}
	edit(md)
	footer, err := md.Serialize(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out := append(append([]byte(nil), data[:start]...), footer...)
	out = binary.LittleEndian.AppendUint32(out, uint32(len(footer)))
	return append(out, "PAR1"...)
}

// DeclareRootChildren returns a copy of the Parquet file data whose
// footer's schema root declares n children (RewriteFooter): a schema of
// more elements than its list holds, within the list's bytes.
func DeclareRootChildren(t testing.TB, data []byte, n int32) []byte {
	t.Helper()
	return RewriteFooter(t, data, func(md *metadata.FileMetaData) { md.FileMetaData.Schema[0].NumChildren = &n })
}

// NestUnderLongName returns a copy of the Parquet file data whose
// footer's schema is its root holding one group, named with nameLen
// bytes, of leaves copies of its first leaf (RewriteFooter): each leaf's
// path repeats the group's name, which the footer holds once.
func NestUnderLongName(t testing.TB, data []byte, nameLen, leaves int) []byte {
	t.Helper()
	return RewriteFooter(t, data, func(md *metadata.FileMetaData) {
		s := md.FileMetaData.Schema
		root, group, leaf := *s[0], *s[1], *s[1]
		one, n := int32(1), int32(leaves)
		root.NumChildren = &one
		group.Name, group.NumChildren = strings.Repeat("g", nameLen), &n
		group.Type, group.ConvertedType, group.LogicalType = nil, nil, nil
		out := append(s[:0:0], &root, &group)
		for i := range leaves {
			l := leaf
			l.Name = strconv.Itoa(i)
			out = append(out, &l)
		}
		md.FileMetaData.Schema = out
	})
}

// PatchPageSize returns a copy of the Parquet file data whose first page
// header of its last column chunk has field (2, uncompressed_page_size,
// or 3, compressed_page_size; a Thrift compact PageHeader holds its type,
// then the two sizes, each an i32 field) set to size. The chunk is the
// last before the footer, which is found from the file's end, so the
// bytes the new varint adds move nothing the footer points to.
func PatchPageSize(t testing.TB, data []byte, field int, size int32) []byte {
	t.Helper()
	pf, err := pqfile.NewParquetReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	md := pf.MetaData()
	rg := md.RowGroup(md.NumRowGroups() - 1)
	cc, err := rg.ColumnChunk(rg.NumColumns() - 1)
	if err != nil {
		t.Fatal(err)
	}
	off := cc.DataPageOffset()
	if cc.HasDictionaryPage() && cc.DictionaryPageOffset() > 0 {
		off = cc.DictionaryPageOffset()
	}
	pf.Close()
	pos := int(off)
	varint := func() {
		for data[pos]&0x80 != 0 {
			pos++
		}
		pos++
	}
	for f := 1; f < field; f++ {
		if data[pos] != 0x15 {
			t.Fatalf("page header at %d: field %d header %#x, want 0x15", off, f, data[pos])
		}
		pos++
		varint()
	}
	if data[pos] != 0x15 {
		t.Fatalf("page header at %d: field %d header %#x, want 0x15", off, field, data[pos])
	}
	pos++
	start := pos
	varint()
	enc := binary.AppendUvarint(nil, uint64(uint32(size<<1)^uint32(size>>31)))
	return append(append(append([]byte(nil), data[:start]...), enc...), data[pos:]...)
}
