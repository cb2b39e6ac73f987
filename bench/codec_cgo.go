//go:build cgozstd

package main

import (
	"github.com/DataDog/zstd"
	"github.com/apache/arrow-go/v18/parquet/compress"
)

// ddZstd is the reference C zstd (through DataDog/zstd) as an arrow-go
// codec, to measure what a cgo decoder buys over the pure-Go one. Only
// Decode is used by the loops; encoding delegates to the C library too.
type ddZstd struct{}

func (ddZstd) Encode(dst, src []byte) []byte {
	return ddZstd{}.EncodeLevel(dst, src, zstd.DefaultCompression)
}

func (ddZstd) EncodeLevel(dst, src []byte, level int) []byte {
	out, err := zstd.CompressLevel(dst[:0], src, level)
	if err != nil {
		panic(err) // compression of in-memory bytes fails only on allocation
	}
	return out
}

func (ddZstd) CompressBound(n int64) int64 { return int64(zstd.CompressBound(int(n))) }

func (ddZstd) Decode(dst, src []byte) []byte {
	out, err := ddZstd{}.DecodeWithError(dst, src)
	if err != nil {
		panic(err) // arrow-go recovers codec panics; DecodeWithError is preferred
	}
	return out
}

// DecodeWithError decompresses straight into dst, which arrow-go sizes to
// the page's uncompressed length, falling back to an allocating decode.
func (ddZstd) DecodeWithError(dst, src []byte) ([]byte, error) {
	if d := dst[:cap(dst)]; len(d) > 0 {
		if n, err := zstd.DecompressInto(d, src); err == nil {
			return d[:n], nil
		}
	}
	return zstd.Decompress(nil, src)
}

func init() {
	compress.RegisterCodec(compress.Codecs.Zstd, ddZstd{})
	zstdCodecName = "DataDog/zstd v1.5.7 (cgo, bundled C libzstd)"
}
