package stage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"

	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/schema"
)

// An input's pages declare how many values they hold, and arrow-go's
// decoders allocate by those counts before reading the values: a
// dictionary index past the values decoded so far decodes the dictionary
// up to it (24 bytes a value, for as many as the dictionary page
// declares), a DELTA_LENGTH_BYTE_ARRAY or DELTA_BYTE_ARRAY page decodes
// every length of the page at once (4 bytes a value, as many as its
// header declares, up to the page's count), and a DELTA_BINARY_PACKED
// stream allocates a miniblock of the values its header declares (8
// bytes each, up to 2^32). A 4 KB file declaring such counts made stage
// allocate gigabytes. checkedPages refuses a page whose declared counts
// its own bytes, or its row group, cannot hold, before the column reader
// decodes it.

// Delta streams' headers: no writer uses blocks past 2,048 values or
// miniblocks past 256 (arrow, parquet-mr and arrow-rs write 128 and 32,
// DuckDB 2,048 and 256). These bounds are many times theirs, and bound
// what a stream's header makes the decoder allocate (a miniblock of
// values, a width byte a miniblock) and the values a byte of a stream
// can hold (under maxDeltaMiniValues: a block of zero-width miniblocks
// still takes a byte for its minimum delta and one for each width).
const (
	maxDeltaBlockValues = 1 << 16
	maxDeltaMiniValues  = 2048
)

// checkedPages is the page reader stage reads an input's column chunk
// through: each page the column reader gets has passed checkPage.
type checkedPages struct {
	file.PageReader
	descr *schema.Column
	// rows is the row group's rows, seen the values of its data pages
	// read so far: a flat column has a value (or a null) a row.
	rows, seen int64
	err        error
}

func (p *checkedPages) Next() bool {
	if p.err != nil || !p.PageReader.Next() {
		return false
	}
	if err := p.check(p.PageReader.Page()); err != nil {
		p.err = err
		return false
	}
	return true
}

func (p *checkedPages) Err() error {
	if p.err != nil {
		return p.err
	}
	return p.PageReader.Err()
}

func (p *checkedPages) GetDictionaryPage() (*file.DictionaryPage, error) {
	d, err := p.PageReader.GetDictionaryPage()
	if err != nil || d == nil {
		return d, err
	}
	if err := p.check(d); err != nil {
		p.err = err
		return nil, err
	}
	return d, nil
}

// plainBits is the fewest bits a PLAIN value of the column's type takes.
func plainBits(d *schema.Column) int64 {
	switch d.PhysicalType() {
	case parquet.Types.Boolean:
		return 1
	case parquet.Types.Int32, parquet.Types.Float, parquet.Types.ByteArray:
		return 32
	case parquet.Types.Int64, parquet.Types.Double:
		return 64
	case parquet.Types.Int96:
		return 96
	case parquet.Types.FixedLenByteArray:
		return 8 * int64(d.TypeLength())
	}
	return 0
}

// check refuses a page whose declared counts its bytes or its row group
// cannot hold.
func (p *checkedPages) check(pg file.Page) error {
	n := int64(pg.NumValues())
	if n < 0 {
		return fmt.Errorf("page declares %d values", n)
	}
	switch pg := pg.(type) {
	case *file.DictionaryPage:
		// Dictionary pages are PLAIN (or PLAIN_DICTIONARY, the same).
		if b := plainBits(p.descr); b > 0 && n > int64(len(pg.Data()))*8/b {
			return fmt.Errorf("dictionary page declares %d values in %d bytes", n, len(pg.Data()))
		}
		return nil
	case *file.DataPageV1:
		if err := p.count(n); err != nil {
			return err
		}
		off, err := p.levelsV1(pg, n)
		if err != nil {
			return err
		}
		return checkValues(parquet.Encoding(pg.Encoding()), pg.Data()[off:], n)
	case *file.DataPageV2:
		if err := p.count(n); err != nil {
			return err
		}
		off := int64(pg.DefinitionLevelByteLen()) + int64(pg.RepetitionLevelByteLen())
		if off < 0 || off > int64(len(pg.Data())) {
			return fmt.Errorf("page's levels take %d of its %d bytes", off, len(pg.Data()))
		}
		return checkValues(parquet.Encoding(pg.Encoding()), pg.Data()[off:], n)
	}
	return nil
}

// count adds a data page's values to the row group's: a flat column holds
// one a row, so a page declaring more than the rows left is not the row
// group's.
func (p *checkedPages) count(n int64) error {
	if p.descr.MaxRepetitionLevel() > 0 {
		return nil
	}
	if n > p.rows-p.seen {
		return fmt.Errorf("page declares %d values, %d rows of the row group's %d are left", n, p.rows-p.seen, p.rows)
	}
	p.seen += n
	return nil
}

// levelsV1 is the length of a v1 data page's levels, which come before
// its values.
func (p *checkedPages) levelsV1(pg *file.DataPageV1, n int64) (int, error) {
	data, off := pg.Data(), 0
	for _, lv := range []struct {
		max int16
		enc parquet.Encoding
	}{{p.descr.MaxRepetitionLevel(), pg.RepetitionLevelEncoding()}, {p.descr.MaxDefinitionLevel(), pg.DefinitionLevelEncoding()}} {
		if lv.max == 0 {
			continue
		}
		switch lv.enc {
		case parquet.Encodings.RLE:
			if len(data)-off < 4 {
				return 0, errors.New("page ends in its levels")
			}
			l := int64(binary.LittleEndian.Uint32(data[off:]))
			if l > int64(len(data)-off-4) {
				return 0, fmt.Errorf("page's levels declare %d bytes, %d are left", l, len(data)-off-4)
			}
			off += 4 + int(l)
		case parquet.Encodings.BitPacked:
			l := (n*int64(bits.Len16(uint16(lv.max))) + 7) / 8
			if l > int64(len(data)-off) {
				return 0, fmt.Errorf("page's levels take %d bytes, %d are left", l, len(data)-off)
			}
			off += int(l)
		default:
			// The column reader refuses it.
			return len(data), nil
		}
	}
	return off, nil
}

// checkValues checks the headers of a data page's delta streams against
// their bytes; other encodings allocate nothing by a declared count.
func checkValues(enc parquet.Encoding, data []byte, n int64) error {
	switch enc {
	case parquet.Encodings.DeltaBinaryPacked, parquet.Encodings.DeltaLengthByteArray:
		_, err := deltaStreamEnd(data, n)
		return err
	case parquet.Encodings.DeltaByteArray:
		// The prefix lengths, then the suffixes as DELTA_LENGTH_BYTE_ARRAY.
		end, err := deltaStreamEnd(data, n)
		if err != nil {
			return fmt.Errorf("prefix lengths: %w", err)
		}
		if _, err := deltaStreamEnd(data[end:], n); err != nil {
			return fmt.Errorf("suffix lengths: %w", err)
		}
	}
	return nil
}

// deltaStreamEnd checks the header of the DELTA_BINARY_PACKED stream at
// the start of data, of at most n values, and that data holds the blocks
// its values take; it returns where the stream ends, as arrow-go's
// decoder reads it (the miniblocks of the last block past its last value
// are not read).
func deltaStreamEnd(data []byte, n int64) (int, error) {
	pos := 0
	varint := func() (uint64, error) {
		v, k := binary.Uvarint(data[pos:])
		if k <= 0 {
			return 0, errors.New("delta stream ends in a header")
		}
		pos += k
		return v, nil
	}
	block, err := varint()
	if err != nil {
		return 0, err
	}
	minis, err := varint()
	if err != nil {
		return 0, err
	}
	total, err := varint()
	if err != nil {
		return 0, err
	}
	if _, err := varint(); err != nil { // the first value
		return 0, err
	}
	if block == 0 || block%128 != 0 || block > maxDeltaBlockValues || minis == 0 || block%minis != 0 || (block/minis)%32 != 0 || block/minis > maxDeltaMiniValues {
		return 0, fmt.Errorf("delta stream of blocks of %d values in %d miniblocks (at most %d values a block, %d a miniblock)", block, minis, maxDeltaBlockValues, maxDeltaMiniValues)
	}
	if total > uint64(n) {
		return 0, fmt.Errorf("delta stream declares %d values, its page %d", total, n)
	}
	per := block / minis
	for left := int64(total) - 1; left > 0; {
		if _, err := varint(); err != nil { // the block's minimum delta
			return 0, fmt.Errorf("delta stream declares %d values, its bytes hold %d", total, int64(total)-left)
		}
		if uint64(len(data)-pos) < minis {
			return 0, fmt.Errorf("delta stream declares %d values, its bytes hold %d", total, int64(total)-left)
		}
		widths := data[pos : pos+int(minis)]
		pos += int(minis)
		for _, w := range widths {
			if left <= 0 {
				break
			}
			if w > 64 {
				return 0, fmt.Errorf("delta miniblock of %d-bit values", w)
			}
			if l := per * uint64(w) / 8; uint64(len(data)-pos) < l {
				return 0, fmt.Errorf("delta stream declares %d values, its bytes hold %d", total, int64(total)-left)
			} else {
				pos += int(l)
			}
			left -= int64(per)
		}
	}
	return pos, nil
}
