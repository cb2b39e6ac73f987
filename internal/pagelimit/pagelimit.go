// Package pagelimit bounds the page sizes a Parquet page header may
// declare, before arrow-go's page reader allocates them. The reader
// allocates a page's declared compressed size, and its uncompressed size,
// before it reads or decompresses the page, checking both only against
// the limits of its parquet.ReaderProperties: a 9 KB shard whose page
// header declared 48 MiB made verify's mapper allocate 61 MiB before the
// read failed, and a 1 KB input declaring 200 MiB did stage.
//
// A page's compressed bytes lie in its column chunk, and decompress to at
// most its codec's expansion of them (Expansion), so Chunk bounds a
// chunk's pages by its own bytes: a header declaring more is refused
// before the allocation, and one declaring less than that is given no
// more than a page of real bytes of its size could make the reader
// allocate. Zstd's expansion leaves a chunk of 1 KiB pages of up to 64
// MiB; a chunk of 148 bytes, 9.25 MiB. The mapper sets each chunk's
// limits before making its column reader, and the file's largest
// chunk's where pqarrow makes the readers itself; stage sets the file's
// (File).
package pagelimit

import (
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/metadata"
)

// expansion is the most a codec's output grows its input, rounded up:
// snappy's copy of 64 bytes takes 3 (21.3), deflate's 258 take about 2
// bits (1,032), an LZ4 length byte adds 255, a zstd block of 128 KiB
// takes at least 3 bytes (43,691). Brotli's has no useful bound.
var expansion = map[compress.Compression]int64{
	compress.Codecs.Uncompressed: 1,
	compress.Codecs.Snappy:       32,
	compress.Codecs.Gzip:         2048,
	compress.Codecs.Lz4:          512,
	compress.Codecs.Lz4Raw:       512,
	compress.Codecs.Zstd:         1 << 16,
}

// Expansion returns the most codec's output grows its input; ok is false
// for a codec of no useful bound (brotli, or one this package does not
// know).
func Expansion(codec compress.Compression) (ratio int64, ok bool) {
	ratio, ok = expansion[codec]
	return ratio, ok
}

// Chunk returns the largest compressed and uncompressed page a column
// chunk of n bytes written with codec can hold, each at least 1 and at
// most limit: n, and n times the codec's expansion (limit for a codec of
// no bound). A negative n holds no page.
func Chunk(codec compress.Compression, n, limit int64) (compressed, uncompressed int64) {
	n = max(0, n)
	compressed = max(1, min(limit, n))
	ratio, ok := expansion[codec]
	if !ok || n > limit/ratio {
		return compressed, limit
	}
	return compressed, max(1, n*ratio)
}

// File returns the largest of Chunk's bounds over md's column chunks,
// each taken as at most size bytes (the bytes the chunks may lie in):
// the limits for readers of any of its chunks. A chunk whose metadata
// cannot be read gives limit.
func File(md *metadata.FileMetaData, size, limit int64) (compressed, uncompressed int64) {
	compressed, uncompressed = 1, 1
	for g := range md.NumRowGroups() {
		rg := md.RowGroup(g)
		for c := range rg.NumColumns() {
			cc, err := rg.ColumnChunk(c)
			if err != nil {
				return limit, limit
			}
			cb, ub := Chunk(cc.Compression(), min(cc.TotalCompressedSize(), size), limit)
			compressed, uncompressed = max(compressed, cb), max(uncompressed, ub)
		}
	}
	return compressed, uncompressed
}
