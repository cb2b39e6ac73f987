package pqfooter_test

import (
	"runtime"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/parquet/metadata"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/shardproof/shardproof/internal/pqfooter"
	"github.com/shardproof/shardproof/stage"
	"github.com/shardproof/shardproof/stage/stagetest"
)

// FuzzCheck: Check never panics, allocates nothing for a footer it
// passes, and a footer it passes costs arrow-go's decoder and schema
// builders allocations in proportion to its bytes, never to a count it
// declares (a list's, or a schema group's num_children).
func FuzzCheck(f *testing.F) {
	data := stagetest.Encode(f, []stage.Row{
		{SampleID: "a", SourceID: "web", SourceVersion: 1, Split: "train", Lang: "en", Text: "one", Tokens: 1},
		{SampleID: "b", SourceID: "web", SourceVersion: 1, Split: "train", Lang: "en", Text: "two", Tokens: 2},
	}, stage.ParquetOptions{})
	f.Add(footerOf(data))
	f.Add(footerOf(stagetest.InflateFooterList(f, data, 4, 1<<24)))
	f.Add(confusion(1 << 24))
	f.Add(new(enc).field(15, tMap).varint(1).raw(tI64<<4 | tBinary).varint(3).varint(0).stop().b)
	f.Add(schemaFooter(1, 0, func(e *enc) { e.schemaElem("r", -1, 1<<26) }))
	f.Add(schemaFooter(6, 2, func(e *enc) {
		e.schemaElem("r", -1, 2).schemaElem("a", 2, -1).schemaElem("g", -1, 2).schemaElem("b", 2, -1).schemaElem("h", -1, 1).schemaElem("c", 2, -1)
	}))
	f.Add(wide(strings.Repeat("g", 300), 4, 40))
	f.Fuzz(func(t *testing.T, footer []byte) {
		if pqfooter.Check(footer) != nil {
			return
		}
		if n := testing.AllocsPerRun(1, func() { _ = pqfooter.Check(footer) }); n != 0 {
			t.Fatalf("Check passed a %d-byte footer allocating %v times", len(footer), n)
		}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		func() {
			defer func() { _ = recover() }()
			if md, err := metadata.NewFileMetaData(footer, nil); err == nil {
				_, _ = pqarrow.NewSchemaManifest(md.Schema, nil, &pqarrow.ArrowReadProperties{})
			}
		}()
		runtime.ReadMemStats(&after)
		if got, limit := after.TotalAlloc-before.TotalAlloc, uint64(1<<20+1024*len(footer)); got > limit {
			t.Fatalf("arrow-go allocated %d bytes decoding a %d-byte footer Check passed", got, len(footer))
		}
	})
}
