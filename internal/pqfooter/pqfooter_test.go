package pqfooter_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/metadata"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/shardproof/shardproof/internal/depcheck"
	"github.com/shardproof/shardproof/internal/pqfooter"
	"github.com/shardproof/shardproof/stage"
	"github.com/shardproof/shardproof/stage/stagetest"
)

func TestImports(t *testing.T) { depcheck.AssertImports(t) }

func footerOf(data []byte) []byte {
	n := len(data)
	return data[n-8-int(binary.LittleEndian.Uint32(data[n-8:n-4])) : n-8]
}

// wideNested writes rows of a schema of many columns, one a list of
// strings (path_in_schema of three names), in row groups of 7 rows, with
// statistics, the page index and size statistics, and the Arrow schema
// stored in the key-value metadata.
func wideNested(t *testing.T, cols, rows int) []byte {
	t.Helper()
	fields := []arrow.Field{{Name: "tags", Type: arrow.ListOf(arrow.BinaryTypes.String), Nullable: true}}
	for i := range cols {
		fields = append(fields, arrow.Field{Name: "c" + string(rune('a'+i%26)) + string(rune('a'+i/26)), Type: arrow.PrimitiveTypes.Int64})
	}
	sc := arrow.NewSchema(fields, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	defer b.Release()
	for r := range rows {
		lb := b.Field(0).(*array.ListBuilder)
		lb.Append(true)
		lb.ValueBuilder().(*array.StringBuilder).AppendValues([]string{"x", "yy"}, nil)
		for c := 1; c <= cols; c++ {
			b.Field(c).(*array.Int64Builder).Append(int64(r * c))
		}
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	var buf bytes.Buffer
	props := parquet.NewWriterProperties(parquet.WithMaxRowGroupLength(7), parquet.WithStats(true),
		parquet.WithPageIndexEnabled(true), parquet.WithDictionaryDefault(true))
	w, err := pqarrow.NewFileWriter(sc, &buf, props, pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema()))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(rec); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// longGroup writes a file of no rows whose one column is a struct, named
// with n bytes, of cols int64 fields: each leaf's path repeats the long
// name, and no column chunk's path_in_schema holds it in the footer.
func longGroup(t *testing.T, n, cols int) []byte {
	t.Helper()
	var fields []arrow.Field
	for i := range cols {
		fields = append(fields, arrow.Field{Name: fmt.Sprint("f", i), Type: arrow.PrimitiveTypes.Int64})
	}
	sc := arrow.NewSchema([]arrow.Field{{Name: strings.Repeat("s", n), Type: arrow.StructOf(fields...)}}, nil)
	var buf bytes.Buffer
	w, err := pqarrow.NewFileWriter(sc, &buf, parquet.NewWriterProperties(), pqarrow.DefaultWriterProps())
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// Every file arrow-go (stage's shards and member files, pqarrow with
// many row groups and columns, nested, with statistics and the page
// index) and parquet-go (testdata, written by examples/indepwriter) write
// passes, and the check allocates nothing.
func TestValidFilesPass(t *testing.T) {
	files := map[string][]byte{}
	s := stagetest.Store(t)
	res := stagetest.Synth(t, s, 3000, 3, 7)
	for _, d := range res.Release.Shards {
		files["stage shard "+d.ID] = stagetest.ShardBytes(t, s, d)
	}
	for _, d := range res.SnapshotDoc.Members {
		files["stage member "+d.ID] = stagetest.ShardBytes(t, s, d)
	}
	rows := make([]stage.Row, 500)
	for i := range rows {
		rows[i] = stage.Row{SampleID: string(rune('a'+i%26)) + string(rune('a'+i/26)), SourceID: "web", SourceVersion: 1, Split: "train", Lang: "en", Text: "t", Tokens: 1}
	}
	files["stage 50 row groups"] = stagetest.Encode(t, rows, stage.ParquetOptions{RowGroupRows: 10})
	files["pqarrow 300 columns, nested, 43 row groups"] = wideNested(t, 300, 300)
	files["pqarrow 3000 columns, nested, 1 row group"] = wideNested(t, 3000, 7)
	files["pqarrow 3000 columns, nested, no rows"] = wideNested(t, 3000, 0)
	files["pqarrow 10 columns, nested, 2000 row groups"] = wideNested(t, 10, 14_000)
	files["pqarrow struct of 200 columns under a 1 KiB name, no rows"] = longGroup(t, 1024, 200)
	names, err := filepath.Glob("testdata/*.parquet")
	if err != nil || len(names) == 0 {
		t.Fatalf("testdata: %v %v", names, err)
	}
	for _, n := range names {
		if files[n], err = os.ReadFile(n); err != nil {
			t.Fatal(err)
		}
	}
	groups := 0
	for name, data := range files {
		pf, err := file.NewParquetReader(bytes.NewReader(data))
		if err != nil {
			t.Fatalf("%s: arrow-go: %v", name, err)
		}
		groups = max(groups, pf.NumRowGroups())
		pf.Close()
		if err := pqfooter.CheckBytes(data); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		if err := pqfooter.CheckFile(bytes.NewReader(data), int64(len(data))); err != nil {
			t.Errorf("%s: CheckFile: %v", name, err)
		}
		footer := footerOf(data)
		if n := testing.AllocsPerRun(10, func() { _ = pqfooter.Check(footer) }); n != 0 {
			t.Errorf("%s: Check allocated %v times", name, n)
		}
		c, err := pqfooter.Cost(footer)
		t.Logf("%s: %d-byte footer, Cost %d, %.1f%% of the budget (%v)", name, len(footer), c, 100*float64(c)/float64(pqfooter.Budget(len(footer))), err)
	}
	if groups < 2000 {
		t.Fatalf("most row groups in a file %d, want 2000 or more", groups)
	}
}

// enc writes Thrift compact protocol by hand.
type enc struct{ b []byte }

func (e *enc) field(delta, typ byte) *enc { e.b = append(e.b, delta<<4|typ); return e }
func (e *enc) varint(v uint64) *enc       { e.b = binary.AppendUvarint(e.b, v); return e }
func (e *enc) raw(b ...byte) *enc         { e.b = append(e.b, b...); return e }
func (e *enc) list(elem byte, n uint64) *enc {
	if n < 15 {
		return e.raw(byte(n)<<4 | elem)
	}
	return e.raw(0xf0 | elem).varint(n)
}
func (e *enc) stop() *enc { return e.raw(0) }

const (
	tI32    = 5
	tI64    = 6
	tBinary = 8
	tList   = 9
	tMap    = 11
	tStruct = 12
)

// confusion is a footer whose row_groups list declares one binary
// element of 25 bytes: arrow-go reads a RowGroup there whatever the type,
// and takes the length byte (0x19) for the header of RowGroup.columns, a
// list whose header, inside the binary, declares n elements.
func confusion(n uint64) []byte {
	e := new(enc).field(4, tList).list(tBinary, 1).varint(1<<4 | tList)
	payload := new(enc).list(tStruct, n).b
	payload = append(payload, make([]byte, 25-len(payload))...)
	return e.raw(payload...).stop().b
}

// A footer whose lists (at any depth), maps or binary values declare
// more than its bytes hold, whose list declares elements of another type
// than arrow-go reads there, that nests too deep, or that ends early is
// refused with ErrFooter; each case's count is the one arrow-go would
// have allocated for.
func TestBombsRefused(t *testing.T) {
	const n = 100_000_000
	// FileMetaData{version 1, row_groups [RowGroup{columns [ColumnChunk{
	// meta_data ColumnMetaData{path_in_schema <list>}}]}]}
	nested := func(pathList func(*enc)) []byte {
		e := new(enc)
		e.field(1, tI32).varint(2)
		e.field(3, tList).list(tStruct, 1) // field 4 row_groups
		e.field(1, tList).list(tStruct, 1) // RowGroup.columns
		e.field(3, tStruct)                // ColumnChunk.meta_data
		e.field(3, tList)                  // ColumnMetaData.path_in_schema
		pathList(e)
		return e.stop().stop().stop().stop().b
	}
	deep := new(enc).field(15, tStruct) // an unknown field 15 of nested structs
	for range pqfooter.MaxDepth + 1 {
		deep.field(1, tStruct)
	}
	for range pqfooter.MaxDepth + 3 {
		deep.stop()
	}
	for _, tc := range []struct {
		name   string
		footer []byte
	}{
		{"row_groups count", new(enc).field(1, tI32).varint(2).field(3, tList).list(tStruct, n).stop().stop().b},
		{"path_in_schema count", nested(func(e *enc) { e.list(tBinary, n).varint(1).raw('a') })},
		{"path_in_schema binary length", nested(func(e *enc) { e.list(tBinary, 1).varint(n) })},
		{"unknown field list count", new(enc).field(15, tList).list(tI64, n).b},
		{"unknown field map count", new(enc).field(15, tMap).varint(n).raw(tI64<<4 | tI64).b},
		{"unknown field binary length", new(enc).field(15, tBinary).varint(1 << 40).b},
		// arrow-go reads a RowGroup whatever type the list declares: as
		// binary, the walk would skip a RowGroup.columns header of n.
		{"row_groups of binary", confusion(n)},
		{"nested too deep", deep.b},
		{"truncated", nested(func(e *enc) { e.list(tBinary, 1) })[:12]},
		{"varint over 10 bytes", new(enc).field(15, tI64).raw(0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01).b},
		{"empty", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := pqfooter.Check(tc.footer); !errors.Is(err, pqfooter.ErrFooter) {
				t.Fatalf("Check = %v, want ErrFooter", err)
			}
		})
	}
	// The same shapes within their bytes pass.
	for name, footer := range map[string][]byte{
		"path_in_schema": nested(func(e *enc) { e.list(tBinary, 2).varint(1).raw('a').varint(2).raw('b', 'c') }),
		"unknown map":    new(enc).field(15, tMap).varint(1).raw(tI64<<4 | tBinary).varint(3).varint(0).stop().b,
		"depth 60":       append(new(enc).field(15, tStruct).b, bytes.Repeat([]byte{0x1c}, 58)...),
	} {
		if name == "depth 60" {
			footer = append(footer, bytes.Repeat([]byte{0}, 60)...)
		}
		if err := pqfooter.Check(footer); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// The row_groups-of-binary footer Check refuses would make arrow-go
// allocate by its hidden count: what the IDL-following walk guards.
// (10M elements: 80 MB of pointers.)
func TestTypeConfusionAllocates(t *testing.T) {
	footer := confusion(10_000_000)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err := metadata.NewFileMetaData(footer, nil)
	runtime.ReadMemStats(&after)
	if err == nil {
		t.Fatal("arrow-go decoded the crafted footer")
	}
	if got := after.TotalAlloc - before.TotalAlloc; got < 64<<20 {
		t.Fatalf("arrow-go allocated %d MiB for the crafted footer; the walk's IDL rule guards nothing", got>>20)
	}
}

// CheckFile and CheckBytes refuse a file too short, without magic, or
// whose footer length does not fit.
func TestFileFraming(t *testing.T) {
	ok := stagetest.Encode(t, []stage.Row{{SampleID: "a", SourceID: "web", SourceVersion: 1, Split: "train", Lang: "en", Text: "t", Tokens: 1}}, stage.ParquetOptions{})
	long := bytes.Clone(ok)
	binary.LittleEndian.PutUint32(long[len(long)-8:], uint32(len(ok)-11))
	nomagic := bytes.Clone(ok)
	copy(nomagic[len(nomagic)-4:], "PAR2")
	for name, data := range map[string][]byte{"short": []byte("PAR1PAR1"), "footer length": long, "magic": nomagic} {
		if err := pqfooter.CheckBytes(data); !errors.Is(err, pqfooter.ErrFooter) {
			t.Errorf("%s: CheckBytes = %v", name, err)
		}
		if err := pqfooter.CheckFile(bytes.NewReader(data), int64(len(data))); !errors.Is(err, pqfooter.ErrFooter) {
			t.Errorf("%s: CheckFile = %v", name, err)
		}
	}
}

// schemaElem writes a SchemaElement: its name, a physical type unless
// typ is negative, and num_children unless children is negative.
func (e *enc) schemaElem(name string, typ, children int64) *enc {
	id := byte(4)
	if typ >= 0 {
		e.field(1, tI32).varint(uint64(typ) << 1)
		id = 3
	}
	e.field(id, tBinary).varint(uint64(len(name))).raw([]byte(name)...)
	if children >= 0 {
		e.field(1, tI32).varint(uint64(children)<<1 ^ uint64(children>>63))
	}
	return e.stop()
}

// schemaFooter is a FileMetaData of version 2, the n schema elements
// elems writes, 0 rows and rowGroups empty row groups.
func schemaFooter(n, rowGroups uint64, elems func(*enc)) []byte {
	e := new(enc).field(1, tI32).varint(2 << 1)
	e.field(1, tList).list(tStruct, n)
	elems(e)
	e.field(1, tI64).varint(0)
	e.field(1, tList).list(tStruct, rowGroups)
	for range rowGroups {
		e.stop()
	}
	return e.stop().b
}

// wide is a schema of a root, a group named group, and leaves leaves of
// one-byte names under it; deep nests them under depth-1 groups.
func wide(group string, depth, leaves int) []byte {
	return schemaFooter(uint64(depth+leaves), 0, func(e *enc) {
		e.schemaElem("r", -1, 1)
		for d := 2; d < depth; d++ {
			e.schemaElem(group, -1, 1)
		}
		e.schemaElem(group, -1, int64(leaves))
		for range leaves {
			e.schemaElem("x", 2, -1)
		}
	})
}

// arrowGoAlloc is the bytes arrow-go allocates decoding footer and
// building its schema and pqarrow's manifest (a panic or an error ends
// it, as in the mapper).
func arrowGoAlloc(footer []byte) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	func() {
		defer func() { _ = recover() }()
		md, err := metadata.NewFileMetaData(footer, nil)
		if err == nil {
			_, _ = pqarrow.NewSchemaManifest(md.Schema, nil, &pqarrow.ArrowReadProperties{})
		}
	}()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// A footer whose schema list is not one tree, or whose tree would cost
// arrow-go allocations out of proportion to the footer's bytes, is
// refused with ErrFooter, though every list fits its bytes: an 18-byte
// footer whose root declares 2^26 children made arrow-go's schema
// builder make a slice of 2^26 children (1 GiB) before finding no second
// element, and a 22 KB footer of 2,000 leaves under a group of a 10,000
// byte name made it build 2,000 paths of 10 KB, 62 MiB. The same shapes
// within their elements and the budget pass, and cost arrow-go
// allocations bounded by their bytes.
func TestSchemaTreeAndCostRefused(t *testing.T) {
	long := strings.Repeat("g", 10_000)
	bomb := schemaFooter(1, 0, func(e *enc) { e.schemaElem("r", -1, 1<<26) })
	for _, tc := range []struct {
		name   string
		footer []byte
	}{
		{"root declares 2^26 children", bomb},
		{"group declares more children than follow", schemaFooter(4, 0, func(e *enc) {
			e.schemaElem("r", -1, 1).schemaElem("g", -1, 5).schemaElem("a", 2, -1).schemaElem("b", 2, -1)
		})},
		{"groups need more elements than the list holds", schemaFooter(4, 0, func(e *enc) {
			e.schemaElem("r", -1, 2).schemaElem("g", -1, 2).schemaElem("a", 2, -1).schemaElem("b", 2, -1)
		})},
		{"negative children", schemaFooter(2, 0, func(e *enc) { e.schemaElem("r", -1, -5).schemaElem("a", 2, -1) })},
		{"elements after the root's tree", schemaFooter(3, 0, func(e *enc) {
			e.schemaElem("r", -1, 1).schemaElem("a", 2, -1).schemaElem("b", 2, -1)
		})},
		{"root of no children before elements", schemaFooter(2, 0, func(e *enc) { e.schemaElem("r", -1, -1).schemaElem("a", 2, -1) })},
		{"nested past MaxSchemaDepth", wide("g", pqfooter.MaxSchemaDepth+1, 1)},
		{"leaves under a long name", wide(long, 2, 2000)},
		{"leaves under deep long names", wide(strings.Repeat("g", 200), pqfooter.MaxSchemaDepth, 3000)},
		{"row groups × leaves", schemaFooter(1001, 20_000, func(e *enc) {
			e.schemaElem("r", -1, 1000)
			for range 1000 {
				e.schemaElem("x", 2, -1)
			}
		})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := pqfooter.Check(tc.footer); !errors.Is(err, pqfooter.ErrFooter) {
				t.Fatalf("Check of %d bytes = %v, want ErrFooter", len(tc.footer), err)
			}
		})
	}
	if got := arrowGoAlloc(schemaFooter(1, 0, func(e *enc) { e.schemaElem("r", -1, 1<<23) })); got < 64<<20 {
		t.Fatalf("arrow-go allocated %d MiB for a root of 2^23 children; the tree check guards nothing", got>>20)
	}
	for _, tc := range []struct {
		name   string
		footer []byte
	}{
		{"no columns", schemaFooter(1, 0, func(e *enc) { e.schemaElem("r", -1, -1) })},
		{"tree", schemaFooter(6, 3, func(e *enc) {
			e.schemaElem("r", -1, 2).schemaElem("a", 2, -1).schemaElem("g", -1, 2).schemaElem("b", 2, -1).schemaElem("h", -1, 1).schemaElem("c", 2, -1)
		})},
		{"MaxSchemaDepth", wide("g", pqfooter.MaxSchemaDepth, 1)},
		{"leaves under a long name, within the budget", wide(long, 2, 100)},
		{"many flat leaves", wide("g", 2, 20_000)},
	} {
		if err := pqfooter.Check(tc.footer); err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		c, err := pqfooter.Cost(tc.footer)
		if err != nil || c > pqfooter.Budget(len(tc.footer)) {
			t.Errorf("%s: Cost %d, %v; budget %d", tc.name, c, err, pqfooter.Budget(len(tc.footer)))
		}
		got, limit := arrowGoAlloc(tc.footer), pqfooter.Budget(len(tc.footer))+512*uint64(len(tc.footer))
		t.Logf("%s: %d-byte footer, Cost %d, arrow-go allocated %d", tc.name, len(tc.footer), c, got)
		if got > limit {
			t.Errorf("%s: arrow-go allocated %d bytes for a %d-byte footer Check passed, over %d", tc.name, got, len(tc.footer), limit)
		}
	}
}
