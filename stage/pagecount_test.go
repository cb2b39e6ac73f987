package stage_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/stage"
	"github.com/shardproof/shardproof/stage/stagetest"
)

// tfield is a field of a Thrift compact struct: v is an int64 (byte,
// i16, i32, i64), a bool, []byte (binary, or a double's 8 bytes), a
// []tfield (struct) or a tlist.
type tfield struct {
	id  int16
	typ byte
	v   any
}

type tlist struct {
	elem  byte
	items []any
}

type tdec struct {
	t *testing.T
	b []byte
	p int
}

func (d *tdec) uvarint() uint64 {
	v, k := binary.Uvarint(d.b[d.p:])
	if k <= 0 {
		d.t.Fatalf("thrift: bad varint at %d", d.p)
	}
	d.p += k
	return v
}

func (d *tdec) zigzag() int64 { u := d.uvarint(); return int64(u>>1) ^ -int64(u&1) }

func (d *tdec) value(typ byte) any {
	switch typ {
	case 1, 2:
		return typ == 1
	case 3:
		d.p++
		return int64(int8(d.b[d.p-1]))
	case 4, 5, 6:
		return d.zigzag()
	case 7:
		d.p += 8
		return append([]byte(nil), d.b[d.p-8:d.p]...)
	case 8:
		n := int(d.uvarint())
		d.p += n
		return append([]byte(nil), d.b[d.p-n:d.p]...)
	case 9, 10:
		h := d.b[d.p]
		d.p++
		n := int(h >> 4)
		if n == 15 {
			n = int(d.uvarint())
		}
		l := tlist{elem: h & 0x0f}
		for range n {
			if l.elem == 1 || l.elem == 2 {
				l.items = append(l.items, d.b[d.p] == 1)
				d.p++
				continue
			}
			l.items = append(l.items, d.value(l.elem))
		}
		return l
	case 12:
		return d.strct()
	}
	d.t.Fatalf("thrift: type %d at %d", typ, d.p)
	return nil
}

func (d *tdec) strct() []tfield {
	var fs []tfield
	var last int16
	for {
		h := d.b[d.p]
		d.p++
		if h == 0 {
			return fs
		}
		id := last + int16(h>>4)
		if h>>4 == 0 {
			id = int16(d.zigzag())
		}
		last = id
		fs = append(fs, tfield{id, h & 0x0f, d.value(h & 0x0f)})
	}
}

func tzigzag(b []byte, v int64) []byte { return binary.AppendUvarint(b, uint64(v<<1)^uint64(v>>63)) }

func tvalue(b []byte, typ byte, v any) []byte {
	switch typ {
	case 1, 2:
		return b // in the field header
	case 3:
		return append(b, byte(v.(int64)))
	case 4, 5, 6:
		return tzigzag(b, v.(int64))
	case 7:
		return append(b, v.([]byte)...)
	case 8:
		return append(binary.AppendUvarint(b, uint64(len(v.([]byte)))), v.([]byte)...)
	case 9, 10:
		l := v.(tlist)
		if len(l.items) < 15 {
			b = append(b, byte(len(l.items))<<4|l.elem)
		} else {
			b = binary.AppendUvarint(append(b, 0xf0|l.elem), uint64(len(l.items)))
		}
		for _, it := range l.items {
			if l.elem == 1 || l.elem == 2 {
				if it.(bool) {
					b = append(b, 1)
				} else {
					b = append(b, 2)
				}
				continue
			}
			b = tvalue(b, l.elem, it)
		}
		return b
	case 12:
		return tstruct(b, v.([]tfield))
	}
	panic(fmt.Sprint("thrift type ", typ))
}

func tstruct(b []byte, fs []tfield) []byte {
	var last int16
	for _, f := range fs {
		typ := f.typ
		if typ == 1 || typ == 2 {
			typ = 2
			if f.v.(bool) {
				typ = 1
			}
		}
		if d := f.id - last; d > 0 && d <= 15 {
			b = append(b, byte(d)<<4|typ)
		} else {
			b = tzigzag(append(b, typ), int64(f.id))
		}
		last = f.id
		b = tvalue(b, f.typ, f.v)
	}
	return append(b, 0)
}

// tget returns the field of fs with the given id path.
func tget(t *testing.T, fs []tfield, ids ...int16) *tfield {
	t.Helper()
	for k, id := range ids {
		var f *tfield
		for i := range fs {
			if fs[i].id == id {
				f = &fs[i]
			}
		}
		if f == nil {
			t.Fatalf("thrift: no field %v", ids[:k+1])
		}
		if k == len(ids)-1 {
			return f
		}
		fs = f.v.([]tfield)
	}
	return nil
}

// tdrop removes the field of fs with the given id.
func tdrop(fs []tfield, id int16) []tfield {
	var out []tfield
	for _, f := range fs {
		if f.id != id {
			out = append(out, f)
		}
	}
	return out
}

// hostileRows is the rows of a hostileFile.
const hostileRows = 64

// hostileFile is an uncompressed input file of hostileRows rows (of
// required columns) that a test rewrites: its footer, and the first pages of
// its column chunks, header and body, each keeping its length.
type hostileFile struct {
	t      *testing.T
	data   []byte
	footer []tfield
}

func newHostileFile(t *testing.T, props ...parquet.WriterProperty) *hostileFile {
	t.Helper()
	rows := make([]stage.Row, hostileRows)
	for i := range rows {
		rows[i] = stage.Row{SampleID: fmt.Sprint("s", i), SourceID: "web", SourceVersion: 1, Split: []string{"train", "val", "test", "dev"}[i%4], Lang: "en", Text: strings.Repeat(fmt.Sprint(i, " "), 4), Tokens: int64(i)}
	}
	rec := stage.BuildRows(rows)
	defer rec.Release()
	wprops := parquet.NewWriterProperties(append([]parquet.WriterProperty{parquet.WithCompression(compress.Codecs.Uncompressed)}, props...)...)
	h := &hostileFile{t: t, data: encodeParquet(t, rec, wprops, pqarrow.DefaultWriterProps())}
	n := int(binary.LittleEndian.Uint32(h.data[len(h.data)-8:]))
	d := &tdec{t: t, b: h.data[len(h.data)-8-n : len(h.data)-8]}
	h.footer = d.strct()
	return h
}

// chunk is the ColumnMetaData of column c of the (only) row group.
func (h *hostileFile) chunk(c int) []tfield {
	cols := tget(h.t, h.footer, 4).v.(tlist).items[0].([]tfield)
	return tget(h.t, tget(h.t, cols, 1).v.(tlist).items[c].([]tfield), 3).v.([]tfield)
}

// column is the index of the named column.
func (h *hostileFile) column(name string) int {
	cols := tget(h.t, h.footer, 4).v.(tlist).items[0].([]tfield)
	for c := range tget(h.t, cols, 1).v.(tlist).items {
		if p := tget(h.t, h.chunk(c), 3).v.(tlist).items; string(p[0].([]byte)) == name {
			return c
		}
	}
	h.t.Fatalf("no column %s", name)
	return 0
}

// page rewrites the page at off: edit changes its header and returns its
// new body, cut at the page's end if cut. The page keeps its place and length: a shorter body is padded
// with zeros, a shorter header with a field no reader knows, and a longer
// header takes the end of the body.
func (h *hostileFile) page(off int64, cut bool, edit func(hdr []tfield, body []byte) ([]tfield, []byte)) {
	t := h.t
	t.Helper()
	d := &tdec{t: t, b: h.data, p: int(off)}
	hdr := d.strct()
	total := d.p - int(off) + int(tget(t, hdr, 3).v.(int64))
	body := h.data[d.p : int(off)+total]
	hdr, nb := edit(hdr, append([]byte(nil), body...))
	var enc []byte
	for size, pad := len(body), -1; ; {
		tget(t, hdr, 2).v, tget(t, hdr, 3).v = int64(size), int64(size)
		fs := hdr
		if pad >= 0 {
			fs = append(append([]tfield(nil), hdr...), tfield{1000, 8, make([]byte, pad)})
		}
		enc = tstruct(nil, fs)
		switch {
		case len(enc)+size > total && pad < 0:
			size = total - len(enc)
			continue
		case len(enc)+size < total && pad < total:
			pad++
			continue
		case len(enc)+size != total:
			t.Fatalf("page at %d: header of %d bytes and body of %d, want %d", off, len(enc), size, total)
		}
		if len(nb) > size && cut {
			nb = nb[:size]
		}
		if len(nb) > size {
			t.Fatalf("page at %d: body of %d bytes, room for %d", off, len(nb), size)
		}
		nb = append(nb[:len(nb):len(nb)], make([]byte, size-len(nb))...)
		break
	}
	copy(h.data[off:], enc)
	copy(h.data[int(off)+len(enc):], nb)
}

// dataPage rewrites the first data page of column c.
func (h *hostileFile) dataPage(c int, edit func(hdr []tfield, body []byte) ([]tfield, []byte)) {
	h.page(tget(h.t, h.chunk(c), 9).v.(int64), false, edit)
}

// dictPage rewrites the dictionary page of column c, whose values may
// lose their end to its header.
func (h *hostileFile) dictPage(c int, edit func(hdr []tfield, body []byte) ([]tfield, []byte)) {
	h.page(tget(h.t, h.chunk(c), 11).v.(int64), true, edit)
}

// setRows makes the footer declare n rows, in the file, its row group
// and each column chunk.
func (h *hostileFile) setRows(n int64) {
	tget(h.t, h.footer, 3).v = n
	rg := tget(h.t, h.footer, 4).v.(tlist).items[0].([]tfield)
	tget(h.t, rg, 3).v = n
	for c := range tget(h.t, rg, 1).v.(tlist).items {
		tget(h.t, h.chunk(c), 5).v = n
	}
}

// bytes is the file with its footer re-encoded.
func (h *hostileFile) bytes() []byte {
	data := h.data[:len(h.data)-8-int(binary.LittleEndian.Uint32(h.data[len(h.data)-8:]))]
	footer := tstruct(nil, h.footer)
	out := append(append([]byte(nil), data...), footer...)
	out = binary.LittleEndian.AppendUint32(out, uint32(len(footer)))
	return append(out, "PAR1"...)
}

// deltaHeader is a DELTA_BINARY_PACKED stream's header.
func deltaHeader(block, minis, total uint64) []byte {
	b := binary.AppendUvarint(nil, block)
	b = binary.AppendUvarint(b, minis)
	b = binary.AppendUvarint(b, total)
	return append(b, 0) // first value 0
}

// A file whose pages declare more values than their bytes, or their row
// group, can hold is BAD_INPUT, and stage does not allocate by the
// declared counts first: arrow-go's decoders allocated 24 bytes a
// dictionary value up to the largest index a page used, 4 bytes a value
// of a DELTA_LENGTH_BYTE_ARRAY page, whatever its bytes held, and a
// miniblock of the values a delta header declared, so that a 4 KB file
// made stage allocate hundreds of MiB (gigabytes with larger counts, or
// crash). Nothing is stored.
func TestStageInputDeclaredCountsBeyondItsBytes(t *testing.T) {
	E := parquet.Encodings
	const huge = 1 << 25
	deltaLang := []parquet.WriterProperty{parquet.WithDictionaryDefault(false), parquet.WithEncodingFor("lang", E.DeltaLengthByteArray)}
	for _, tc := range []struct {
		name  string
		props []parquet.WriterProperty
		edit  func(h *hostileFile)
	}{
		// A dictionary of 2^25 values in a page of 16, and a data page
		// whose indices are 2^24-1.
		{"dictionary", []parquet.WriterProperty{parquet.WithDictionaryFor("split", true)}, func(h *hostileFile) {
			c := h.column("split")
			h.dictPage(c, func(hdr []tfield, body []byte) ([]tfield, []byte) {
				tget(h.t, hdr, 7, 1).v = int64(huge)
				return hdr, body
			})
			h.dataPage(c, func(hdr []tfield, body []byte) ([]tfield, []byte) {
				// Width 24, a run of hostileRows of index 2^24-1.
				return hdr, append(binary.AppendUvarint([]byte{24}, hostileRows<<1), 0xff, 0xff, 0xff)
			})
		}},
		// A DELTA_LENGTH_BYTE_ARRAY page declaring 2^25 values, its row
		// group's 16 rows.
		{"delta length, page v1", deltaLang, func(h *hostileFile) {
			h.dataPage(h.column("lang"), func(hdr []tfield, body []byte) ([]tfield, []byte) {
				dp := tget(h.t, hdr, 5)
				dp.v = tdrop(dp.v.([]tfield), 5)
				tget(h.t, hdr, 5, 1).v = int64(huge)
				return hdr, deltaHeader(128, 4, huge)
			})
		}},
		{"delta length, page v2", append([]parquet.WriterProperty{parquet.WithDataPageVersion(parquet.DataPageV2)}, deltaLang...), func(h *hostileFile) {
			h.dataPage(h.column("lang"), func(hdr []tfield, body []byte) ([]tfield, []byte) {
				dp := tget(h.t, hdr, 8)
				dp.v = tdrop(dp.v.([]tfield), 8)
				tget(h.t, hdr, 8, 1).v = int64(huge)
				tget(h.t, hdr, 8, 3).v = int64(huge)
				return hdr, deltaHeader(128, 4, huge)
			})
		}},
		// The footer says 2^25 rows, and the page as many values, which
		// its few bytes of zero-width blocks cannot hold (split, which
		// the sort's pass reads, before the other columns end).
		{"delta length, rows in the footer", []parquet.WriterProperty{parquet.WithDictionaryDefault(false), parquet.WithEncodingFor("split", E.DeltaLengthByteArray)}, func(h *hostileFile) {
			h.setRows(huge)
			h.dataPage(h.column("split"), func(hdr []tfield, body []byte) ([]tfield, []byte) {
				dp := tget(h.t, hdr, 5)
				dp.v = tdrop(dp.v.([]tfield), 5)
				tget(h.t, hdr, 5, 1).v = int64(huge)
				return hdr, append(deltaHeader(128, 4, huge), make([]byte, 10)...)
			})
		}},
		// A DELTA_BINARY_PACKED header whose one miniblock holds 2^25
		// values, in a page of 16.
		{"delta binary packed miniblock", []parquet.WriterProperty{parquet.WithDictionaryDefault(false), parquet.WithEncodingFor("tokens", E.DeltaBinaryPacked)}, func(h *hostileFile) {
			h.dataPage(h.column("tokens"), func(hdr []tfield, body []byte) ([]tfield, []byte) {
				return hdr, append(deltaHeader(1<<25, 1, hostileRows), 0, 0)
			})
		}},
		// DELTA_BYTE_ARRAY: sound prefix lengths, then suffix lengths
		// in a miniblock of 2^25 values.
		{"delta byte array suffixes", []parquet.WriterProperty{parquet.WithDictionaryDefault(false), parquet.WithEncodingFor("lang", E.DeltaByteArray)}, func(h *hostileFile) {
			h.dataPage(h.column("lang"), func(hdr []tfield, body []byte) ([]tfield, []byte) {
				prefix := append(deltaHeader(128, 4, hostileRows), 0, 0, 0, 0, 0) // a block of zero-width miniblocks
				return hdr, append(append(prefix, deltaHeader(1<<25, 1, hostileRows)...), 0, 0)
			})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHostileFile(t, tc.props...)
			tc.edit(h)
			data := h.bytes()
			if len(data) > 8<<10 {
				t.Fatalf("crafted file is %d bytes, want a small one", len(data))
			}
			path := filepath.Join(t.TempDir(), "hostile.parquet")
			if err := os.WriteFile(path, data, 0o644); err != nil {
				t.Fatal(err)
			}
			s := stagetest.Store(t)
			got, err := stageAllocated(t, s, path)
			if got > 64<<20 {
				t.Errorf("staging a %d-byte file allocated %d MiB (err %v)", len(data), got>>20, err)
			}
			if errcode.Of(err) != errcode.BadInput || !strings.Contains(fmt.Sprint(err), "hostile.parquet") {
				t.Fatalf("err = %v (code %s), want BAD_INPUT naming the file", err, errcode.Of(err))
			}
			if n := countObjects(t, s); n != 0 {
				t.Fatalf("bad input wrote %d objects", n)
			}
		})
	}
}

// The crafted files are sound but for the counts: unedited, they stage.
func TestHostileFileUneditedStages(t *testing.T) {
	E := parquet.Encodings
	for _, props := range [][]parquet.WriterProperty{
		{parquet.WithDictionaryFor("split", true)},
		{parquet.WithDictionaryDefault(false), parquet.WithEncodingFor("lang", E.DeltaLengthByteArray), parquet.WithEncodingFor("tokens", E.DeltaBinaryPacked)},
		{parquet.WithDataPageVersion(parquet.DataPageV2), parquet.WithDictionaryDefault(false), parquet.WithEncodingFor("lang", E.DeltaByteArray)},
	} {
		h := newHostileFile(t, props...)
		// Re-encoding the footer and the pages as they are changes
		// nothing a reader sees.
		for _, c := range []int{h.column("lang"), h.column("tokens")} {
			h.dataPage(c, func(hdr []tfield, body []byte) ([]tfield, []byte) { return hdr, body })
		}
		path := filepath.Join(t.TempDir(), "sound.parquet")
		if err := os.WriteFile(path, h.bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := file.OpenParquetFile(path, false); err != nil {
			t.Fatal(err)
		}
		if _, err := stage.Stage(context.Background(), stagetest.Store(t), stage.StageOptions{Inputs: []string{path}, Shards: 1, TempDir: t.TempDir()}); err != nil {
			t.Fatal(err)
		}
	}
}
