package mapper_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/shardproof/shardproof/internal/canon"
	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/mapper"
	"github.com/shardproof/shardproof/objstore"
	"github.com/shardproof/shardproof/stage"
	"github.com/shardproof/shardproof/stage/stagetest"
	"github.com/shardproof/shardproof/tuplehash"
)

var exhaustive = flag.Bool("exhaustive", false, "flip every footer byte in TestBitFlipsInFooter")

type fixture struct {
	s   objstore.Store
	res stage.Result
	o   mapper.Options
}

func newFixture(t *testing.T, samples, shards int, dec mapper.Decoder) *fixture {
	s := stagetest.Store(t)
	res := stagetest.Synth(t, s, samples, shards, 42)
	return &fixture{s: s, res: res, o: mapper.Options{Store: s, Schema: res.Schema, SchemaDigest: res.RecordSchema, Decoder: dec}}
}

// forDecoders runs a test once per decoding path: both must give the
// same results on every file.
func forDecoders(t *testing.T, test func(*testing.T, mapper.Decoder)) {
	for _, dec := range []mapper.Decoder{mapper.DecoderColumnReader, mapper.DecoderPQArrow} {
		t.Run(dec.String(), func(t *testing.T) { test(t, dec) })
	}
}

// mapOne maps one descriptor and returns the result and emitted tuples.
func (f *fixture) mapOne(t *testing.T, side mapper.Side, i int, d manifest.Shard) (mapper.Result, []mapper.Tuple) {
	t.Helper()
	var got []mapper.Tuple
	res, err := mapper.MapShard(context.Background(), f.o, mapper.Input{Side: side, Index: i, Desc: d}, func(tp *mapper.Tuple) error {
		got = append(got, *tp)
		return nil
	})
	if err != nil {
		t.Fatalf("MapShard %s: %v", d.ID, err)
	}
	if res.ShardID != d.ID || res.Side != side || res.Index != i {
		t.Fatalf("result names %s/%v/%d, want %s/%v/%d", res.ShardID, res.Side, res.Index, d.ID, side, i)
	}
	return res, got
}

func codes(r mapper.Result) []string {
	var c []string
	for _, f := range r.Failures {
		c = append(c, f.Code)
	}
	slices.Sort(c)
	return c
}

func TestCleanShardsReproduceDescriptors(t *testing.T) {
	forDecoders(t, testCleanShardsReproduceDescriptors)
}

func testCleanShardsReproduceDescriptors(t *testing.T, dec mapper.Decoder) {
	f := newFixture(t, 3000, 3, dec)
	relAcc, snapAcc := tuplehash.NewAccumulator(12), tuplehash.NewAccumulator(12)
	check := func(side mapper.Side, ds []manifest.Shard, acc *tuplehash.Accumulator) {
		for i, d := range ds {
			r, tuples := f.mapOne(t, side, i, d)
			if len(r.Failures) != 0 || !r.Decoded {
				t.Fatalf("%s: failures %v decoded %v", d.ID, r.Failures, r.Decoded)
			}
			if r.StorageDigest != d.Digest || r.StoredBytes != d.Size || r.LogicalDigest != d.LogicalDigest ||
				r.Records != d.Records || r.Tokens != d.Tokens || r.MemberSetDigest != d.MemberSetDigest {
				t.Fatalf("%s: result %+v\ndescriptor %+v", d.ID, r, d)
			}
			if int64(len(tuples)) != d.Records || r.LogicalBytes <= 0 {
				t.Fatalf("%s: %d tuples for %d records, logicalBytes %d", d.ID, len(tuples), d.Records, r.LogicalBytes)
			}
			var digests [][32]byte
			for _, tp := range tuples {
				dg, _ := tp.Tuple.Digest()
				if dg != tp.Digest || tp.Bucket != tuplehash.Bucket(tp.SampleID, 12) || tp.SchemaDigest != f.res.RecordSchema {
					t.Fatalf("%s: inconsistent tuple %+v", d.ID, tp)
				}
				digests = append(digests, dg)
				acc.Add(&tp.Tuple)
			}
			if tuplehash.MemberSetDigest(digests) != d.MemberSetDigest {
				t.Fatalf("%s: emitted tuples do not give the memberSetDigest", d.ID)
			}
		}
	}
	check(mapper.SideRelease, f.res.Release.Shards, relAcc)
	check(mapper.SideSnapshot, f.res.SnapshotDoc.Members, snapAcc)
	if relAcc.Root() != snapAcc.Root() || manifest.Digest(snapAcc.Root()) != f.res.SnapshotDoc.TupleRoot {
		t.Fatal("release and snapshot tuple roots differ on a clean release")
	}
}

// TestMappedAndReadAgree: every way the mapper gets a file store's bytes
// gives the same result and tuples for every file, a corrupted one
// included: read when decoded (MapShard, hashed after the read), read
// through the store's reader (NoMap, hashed while read), and mapped (a
// member opened for bucket reads, then mapped whole).
func TestMappedAndReadAgree(t *testing.T) {
	f := newFixture(t, 2000, 2, mapper.DecoderColumnReader)
	bad := bytes.Clone(stagetest.ShardBytes(t, f.s, f.res.Release.Shards[0]))
	bad[len(bad)/2] ^= 0x40
	res := stagetest.ReplaceShardBytes(t, f.s, f.res, 0, bad)
	for i, d := range append(slices.Clone(res.Release.Shards), res.SnapshotDoc.Members...) {
		side := mapper.SideRelease
		if i >= len(res.Release.Shards) {
			side = mapper.SideSnapshot
		}
		rres, rt := f.mapOne(t, side, i, d)
		f.o.NoMap = true
		nres, nt := f.mapOne(t, side, i, d)
		f.o.NoMap = false
		if !reflect.DeepEqual(rres, nres) || !slices.Equal(rt, nt) {
			t.Fatalf("%s: read when decoded gives %+v (%d tuples), read by the store's reader %+v (%d tuples)", d.ID, rres, len(rt), nres, len(nt))
		}
		in := mapper.Input{Side: side, Index: i, Desc: d}
		mem := mapper.OpenMember(f.o, mapper.Prefetch(t.Context(), f.o, in, false))
		var mt []mapper.Tuple
		mres, err := mem.Map(t.Context(), func(tp *mapper.Tuple) error {
			mt = append(mt, *tp)
			return nil
		})
		mem.Close()
		if err != nil {
			t.Fatalf("%s: mapped: %v", d.ID, err)
		}
		if !reflect.DeepEqual(rres, mres) || !slices.Equal(rt, mt) {
			t.Fatalf("%s: read gives %+v (%d tuples), mapped %+v (%d tuples)", d.ID, rres, len(rt), mres, len(mt))
		}
		if i == 0 && len(rres.Failures) == 0 {
			t.Fatalf("%s: a flipped bit went unnoticed", d.ID)
		}
	}
}

// replaced maps shard 0 after its bytes were replaced by data.
func (f *fixture) replaced(t *testing.T, data []byte) (mapper.Result, []mapper.Tuple) {
	t.Helper()
	res := stagetest.ReplaceShardBytes(t, f.s, f.res, 0, data)
	return f.mapOne(t, mapper.SideRelease, 0, res.Release.Shards[0])
}

// replacedAllocating is replaced, also returning the bytes the process
// allocated meanwhile (runtime.MemStats.TotalAlloc, after a collection):
// what a hostile file costs to map.
func (f *fixture) replacedAllocating(t *testing.T, data []byte) (mapper.Result, []mapper.Tuple, uint64) {
	t.Helper()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	r, tuples := f.replaced(t, data)
	runtime.ReadMemStats(&after)
	return r, tuples, after.TotalAlloc - before.TotalAlloc
}

func TestTruncated(t *testing.T) { forDecoders(t, testTruncated) }

func testTruncated(t *testing.T, dec mapper.Decoder) {
	f := newFixture(t, 600, 2, dec)
	orig := stagetest.ShardBytes(t, f.s, f.res.Release.Shards[0])
	for _, cut := range []int{1, len(orig) / 2, len(orig) - 5} {
		r, tuples := f.replaced(t, stagetest.Truncate(orig, cut))
		want := []string{"DIGEST_MISMATCH", "FOOTER_CORRUPT", "SIZE_MISMATCH"}
		if !slices.Equal(codes(r), want) || r.Decoded || len(tuples) != 0 {
			t.Fatalf("cut %d: codes %v decoded %v tuples %d; want %v, none", cut, codes(r), r.Decoded, len(tuples), want)
		}
		if r.StoredBytes != int64(len(orig)-cut) {
			t.Fatalf("cut %d: StoredBytes %d", cut, r.StoredBytes)
		}
		// The bytes where the magic should be may be record text: a
		// failure says which end lacks it, never what is there.
		kept := orig[:len(orig)-cut]
		for _, end := range [][]byte{kept[:min(4, len(kept))], kept[max(0, len(kept)-4):]} {
			for _, fl := range r.Failures {
				if string(end) != "PAR1" && (strings.Contains(fl.Detail, string(end)) || strings.Contains(fl.Detail, fmt.Sprintf("%q", end))) {
					t.Fatalf("cut %d: %s detail %q quotes the file's bytes %q", cut, fl.Code, fl.Detail, end)
				}
			}
		}
	}
}

func footerStart(data []byte) int {
	n := len(data)
	return n - 8 - int(binary.LittleEndian.Uint32(data[n-8:]))
}

func TestBitFlipInFooterLength(t *testing.T) { forDecoders(t, testBitFlipInFooterLength) }

func testBitFlipInFooterLength(t *testing.T, dec mapper.Decoder) {
	f := newFixture(t, 600, 2, dec)
	orig := stagetest.ShardBytes(t, f.s, f.res.Release.Shards[0])
	r, tuples := f.replaced(t, stagetest.FlipBit(orig, len(orig)-6, 7)) // footer length += 2^23
	if want := []string{"DIGEST_MISMATCH", "FOOTER_CORRUPT"}; !slices.Equal(codes(r), want) || len(tuples) != 0 {
		t.Fatalf("codes %v tuples %d, want %v", codes(r), len(tuples), want)
	}
}

// Every single-bit flip anywhere in the footer is reported, never a panic,
// and a shard that did not decode emits nothing.
func TestBitFlipsInFooter(t *testing.T) { forDecoders(t, testBitFlipsInFooter) }

func testBitFlipsInFooter(t *testing.T, dec mapper.Decoder) {
	f := newFixture(t, 300, 1, dec)
	d := f.res.Release.Shards[0]
	orig := stagetest.ShardBytes(t, f.s, d)
	// About 80 flips spread over the footer by default; every byte with
	// -exhaustive (the fuzz target explores further).
	step := max(1, (len(orig)-footerStart(orig))/80)
	if *exhaustive {
		step = 1
	}
	for off := footerStart(orig); off < len(orig); off += step {
		data := stagetest.FlipBit(orig, off, uint(off%8))
		r, tuples := mapBytes(t, f, d, data)
		c := codes(r)
		if !slices.Contains(c, "DIGEST_MISMATCH") || len(c) < 2 && r.Decoded && r.LogicalDigest != d.LogicalDigest {
			t.Fatalf("offset %d: codes %v", off, c)
		}
		if !r.Decoded && len(tuples) != 0 {
			t.Fatalf("offset %d: undecoded shard emitted %d tuples", off, len(tuples))
		}
		for _, fl := range r.Failures {
			if !errcode.Known(errcode.Code(fl.Code)) {
				t.Fatalf("offset %d: unknown code %s", off, fl.Code)
			}
		}
	}
}

// mapBytes maps data stored as a new version of d's key.
func mapBytes(t *testing.T, f *fixture, d manifest.Shard, data []byte) (mapper.Result, []mapper.Tuple) {
	t.Helper()
	d.ObjectVersion = string(stagetest.PutVersion(t, f.s, d.Digest.BlobKey(), data))
	return f.mapOne(t, mapper.SideRelease, 0, d)
}

func TestBitFlipInDataPage(t *testing.T) { forDecoders(t, testBitFlipInDataPage) }

func testBitFlipInDataPage(t *testing.T, dec mapper.Decoder) {
	f := newFixture(t, 600, 2, dec)
	d := f.res.Release.Shards[0]
	orig := stagetest.ShardBytes(t, f.s, d)
	// The text column is the bulk of the file: flip bits in its middle.
	for _, off := range []int{len(orig) / 3, len(orig) / 2, len(orig) * 2 / 3} {
		r, tuples := mapBytes(t, f, d, stagetest.FlipBit(orig, off, 3))
		c := codes(r)
		if !slices.Contains(c, "DIGEST_MISMATCH") || slices.Contains(c, "SIZE_MISMATCH") {
			t.Fatalf("offset %d: codes %v", off, c)
		}
		// Either decoding fails, or it yields other records.
		if r.Decoded == slices.Contains(c, "DECODE_ERROR") || r.Decoded && !slices.Contains(c, "LOGICAL_MISMATCH") {
			t.Fatalf("offset %d: decoded %v codes %v", off, r.Decoded, c)
		}
		if !r.Decoded && len(tuples) != 0 {
			t.Fatalf("offset %d: undecoded shard emitted tuples", off)
		}
	}
}

func TestRecompressedShardKeepsLogicalDigest(t *testing.T) {
	forDecoders(t, testRecompressedShardKeepsLogicalDigest)
}

func testRecompressedShardKeepsLogicalDigest(t *testing.T, dec mapper.Decoder) {
	f := newFixture(t, 600, 2, dec)
	d := f.res.Release.Shards[0]
	orig := stagetest.ShardBytes(t, f.s, d)
	for _, c := range []struct {
		codec string
		level int
	}{{"snappy", 0}, {"zstd", 9}, {"gzip", 6}} {
		data := stagetest.Recompress(t, orig, c.codec, c.level)
		r, tuples := mapBytes(t, f, d, data)
		if want := []string{"DIGEST_MISMATCH", "SIZE_MISMATCH"}; !slices.Equal(codes(r), want) {
			t.Fatalf("%s/%d: codes %v, want %v", c.codec, c.level, codes(r), want)
		}
		if !r.Decoded || r.LogicalDigest != d.LogicalDigest || int64(len(tuples)) != d.Records {
			t.Fatalf("%s: logical %s (want %s), %d tuples", c.codec, r.LogicalDigest, d.LogicalDigest, len(tuples))
		}
	}
}

// otherSchema renames lang to language: the tuple columns survive.
func otherSchema() *manifest.RecordSchema {
	s := stage.DefaultSchema()
	s.Fields[4].Name = "language"
	return s
}

func renamed(rec arrow.RecordBatch, s *manifest.RecordSchema) arrow.RecordBatch {
	as, _ := canon.ArrowSchema(s)
	return array.NewRecordBatch(as, rec.Columns(), rec.NumRows())
}

func TestSchemaMismatchEmitsTuplesWithFoundSchema(t *testing.T) {
	forDecoders(t, testSchemaMismatchEmitsTuplesWithFoundSchema)
}

func testSchemaMismatchEmitsTuplesWithFoundSchema(t *testing.T, dec mapper.Decoder) {
	f := newFixture(t, 600, 2, dec)
	rows := stagetest.ShardRows(t, f.s, f.res, 0)
	rec := stage.BuildRows(rows)
	defer rec.Release()
	other := otherSchema()
	od, _ := canon.SchemaDigest(other)
	orec := renamed(rec, other)
	d := stagetest.WriteShard(t, f.s, f.res.Release.Shards[0].ID, orec, other, od, stage.ParquetOptions{})
	r, tuples := f.mapOne(t, mapper.SideRelease, 0, d)
	if !slices.Equal(codes(r), []string{"SCHEMA_MISMATCH"}) || !r.Decoded || len(tuples) != len(rows) {
		t.Fatalf("codes %v decoded %v tuples %d", codes(r), r.Decoded, len(tuples))
	}
	for _, tp := range tuples {
		if tp.SchemaDigest != od {
			t.Fatalf("tuple schema digest %x, want the found schema %s", tp.SchemaDigest, od)
		}
	}

	// An added column of a type record schemas cannot hold (float32) is
	// skipped: the tuples still come out, naming the schema found.
	scores := array.NewFloat32Builder(memory.DefaultAllocator)
	for range rows {
		scores.Append(0.5)
	}
	sc := scores.NewArray()
	scores.Release()
	defer sc.Release()
	wide := array.NewRecordBatch(arrow.NewSchema(append(rec.Schema().Fields(), arrow.Field{Name: "score", Type: arrow.PrimitiveTypes.Float32}), nil),
		append(slices.Clone(rec.Columns()), sc), rec.NumRows())
	defer wide.Release()
	r3, tuples3 := mapBytes(t, f, f.res.Release.Shards[0], stagetest.EncodeRecord(t, wide, stage.DefaultSchema(), stage.ParquetOptions{}))
	if !slices.Contains(codes(r3), "SCHEMA_MISMATCH") || !r3.Decoded || len(tuples3) != len(rows) {
		t.Fatalf("extra float32 column: codes %v decoded %v tuples %d", codes(r3), r3.Decoded, len(tuples3))
	}
	wantFound := canon.FromArrow(wide.Schema(), stage.DefaultSchema())
	wd, _ := canon.SchemaDigest(wantFound)
	if tuples3[0].SchemaDigest != wd || wd == f.res.RecordSchema {
		t.Fatalf("tuples name schema %x, want the found schema %s", tuples3[0].SchemaDigest, wd)
	}
	for i, tp := range tuples3 {
		if tp.SampleID != tuples[i].SampleID || tp.LogicalContentDigest != tuples[i].LogicalContentDigest {
			t.Fatalf("tuple %d differs from the renamed-column shard's", i)
		}
	}

	// Without the content column no tuple can be formed.
	noText := &manifest.RecordSchema{Schema: manifest.RecordSchemaSchema, Fields: slices.Delete(slices.Clone(stage.DefaultSchema().Fields), 5, 6),
		Tuple: stage.DefaultSchema().Tuple}
	as, _ := canon.ArrowSchema(noText)
	cols := slices.Delete(slices.Clone(rec.Columns()), 5, 6)
	nrec := array.NewRecordBatch(as, cols, rec.NumRows())
	data := stagetest.EncodeRecord(t, nrec, noText, stage.ParquetOptions{})
	d2 := f.res.Release.Shards[0]
	r2, tuples2 := mapBytes(t, f, d2, data)
	if !slices.Contains(codes(r2), "SCHEMA_MISMATCH") || r2.Decoded || len(tuples2) != 0 {
		t.Fatalf("no content column: codes %v decoded %v tuples %d", codes(r2), r2.Decoded, len(tuples2))
	}
}

func TestDescriptorFigureMismatch(t *testing.T) { forDecoders(t, testDescriptorFigureMismatch) }

func testDescriptorFigureMismatch(t *testing.T, dec mapper.Decoder) {
	f := newFixture(t, 600, 2, dec)
	d := f.res.Release.Shards[1]
	d.Records++
	d.Tokens--
	d.LogicalDigest[0] ^= 1
	r, tuples := f.mapOne(t, mapper.SideRelease, 1, d)
	if want := []string{"COUNT_MISMATCH", "COUNT_MISMATCH", "LOGICAL_MISMATCH"}; !slices.Equal(codes(r), want) || !r.Decoded || len(tuples) == 0 {
		t.Fatalf("codes %v, want %v", codes(r), want)
	}
}

func TestVersionMissing(t *testing.T) { forDecoders(t, testVersionMissing) }

func testVersionMissing(t *testing.T, dec mapper.Decoder) {
	f := newFixture(t, 300, 1, dec)
	for _, v := range []string{"", "v999", "not-a-version"} {
		d := f.res.Release.Shards[0]
		d.ObjectVersion = v
		r, tuples := f.mapOne(t, mapper.SideRelease, 0, d)
		if !slices.Equal(codes(r), []string{"VERSION_MISSING"}) || r.Decoded || len(tuples) != 0 {
			t.Fatalf("version %q: codes %v", v, codes(r))
		}
	}
}

func TestOperationalErrors(t *testing.T) { forDecoders(t, testOperationalErrors) }

func testOperationalErrors(t *testing.T, dec mapper.Decoder) {
	f := newFixture(t, 300, 1, dec)
	d := f.res.Release.Shards[0]
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := mapper.MapShard(ctx, f.o, mapper.Input{Desc: d}, func(*mapper.Tuple) error { return nil })
	if errcode.Of(err) != errcode.Canceled {
		t.Fatalf("canceled: err %v", err)
	}
	stop := errors.New("reducer full")
	_, err = mapper.MapShard(context.Background(), f.o, mapper.Input{Desc: d}, func(*mapper.Tuple) error { return stop })
	if !errors.Is(err, stop) {
		t.Fatalf("emit error not returned: %v", err)
	}
}

// A shard of no rows, as arrow-go writes one (a row group of 0 rows whose
// column chunks hold no data page, at most a dictionary page), is a valid
// file: it
// maps clean, with no tuples, and its descriptor's figures are those of
// an empty record stream (docs/FORMATS.md, "Parquet mapping"). One made
// a release that held its snapshot exactly INVALID with FOOTER_CORRUPT
// ("chunk [0, +0) outside the data region"), as
// TestDifferentialAgainstOracle found.
func TestZeroRowShard(t *testing.T) { forDecoders(t, testZeroRowShard) }

func testZeroRowShard(t *testing.T, dec mapper.Decoder) {
	f := newFixture(t, 50, 1, dec)
	d := stagetest.WriteRows(t, f.s, f.res, "empty", nil)
	if d.Records != 0 {
		t.Fatalf("descriptor of no rows says %d records", d.Records)
	}
	r, tuples := f.mapOne(t, mapper.SideRelease, 0, d)
	if len(r.Failures) != 0 || !r.Decoded || len(tuples) != 0 || r.LogicalDigest != d.LogicalDigest || r.MemberSetDigest != d.MemberSetDigest {
		t.Fatalf("zero-row shard: failures %+v, decoded %v, %d tuples, logical %s (descriptor %s)", r.Failures, r.Decoded, len(tuples), r.LogicalDigest, d.LogicalDigest)
	}
}

// A file of thousands of columns, or of a column with a very long name,
// is one SCHEMA_MISMATCH whose detail stays within MaxFailureDetail:
// every failure goes into a commit record and the report, each of
// bounded size, so a few hundred such files must not make them too large
// to store. The found schema's digest, after the field lists, stays in
// the detail however long the fields' names, and a detail that fits
// lists every field, as it did before details were bounded.
func TestSchemaMismatchDetailBounded(t *testing.T) {
	f := newFixture(t, 40, 1, mapper.DecoderColumnReader)
	rows := stagetest.ShardRows(t, f.s, f.res, 0)
	rec := stage.BuildRows(rows)
	defer rec.Release()
	withColumns := func(names []string) arrow.RecordBatch {
		b := array.NewFloat32Builder(memory.DefaultAllocator)
		defer b.Release()
		for range rows {
			b.Append(0.5)
		}
		col := b.NewArray()
		defer col.Release()
		fields, cols := slices.Clone(rec.Schema().Fields()), slices.Clone(rec.Columns())
		for _, n := range names {
			fields = append(fields, arrow.Field{Name: n, Type: arrow.PrimitiveTypes.Float32})
			cols = append(cols, col)
		}
		return array.NewRecordBatch(arrow.NewSchema(fields, nil), cols, rec.NumRows())
	}
	columns := func(n int, format string) []string {
		var names []string
		for i := range n {
			names = append(names, fmt.Sprintf(format, i))
		}
		return names
	}
	for _, c := range []struct {
		name    string
		columns []string
		// listed is a column the detail names; more, how many of the
		// file's fields it counts without naming them ("" none).
		listed, more string
	}{
		{"3000 columns", columns(3000, "extra_feature_%04d"), "extra_feature_0000", "and 2991 more"},
		{"a name of 20,000 bytes", []string{strings.Repeat("n", 20000)}, "", "and 1 more"},
		{"24 names of 64 bytes", columns(24, "embedding_%02d_"+strings.Repeat("x", 51)), "embedding_00_", " more]"},
		{"20 short names, listed whole", columns(20, "c%02d"), "c19 ", ""},
	} {
		wide := withColumns(c.columns)
		r, _ := mapBytes(t, f, f.res.Release.Shards[0], stagetest.EncodeRecord(t, wide, stage.DefaultSchema(), stage.ParquetOptions{}))
		found, _ := canon.SchemaDigest(canon.FromArrow(wide.Schema(), stage.DefaultSchema()))
		wide.Release()
		var detail string
		for _, fl := range r.Failures {
			if fl.Code == string(errcode.SchemaMismatch) {
				detail = fl.Detail
			}
		}
		switch {
		case detail == "":
			t.Fatalf("%s: no SCHEMA_MISMATCH in %v", c.name, codes(r))
		case len(detail) > mapper.MaxFailureDetail:
			t.Fatalf("%s: SCHEMA_MISMATCH detail is %d bytes, more than %d", c.name, len(detail), mapper.MaxFailureDetail)
		case !strings.HasSuffix(detail, "(schema digest "+found.String()+")"):
			t.Fatalf("%s: detail lacks the found schema's digest %s at its end: %q", c.name, found, detail)
		case !strings.Contains(detail, c.listed) || c.more != "" && !strings.Contains(detail, c.more) || c.more == "" && strings.Contains(detail, " more"):
			t.Fatalf("%s: detail does not name %q, or count %q more: %q", c.name, c.listed, c.more, detail)
		}
	}
}
