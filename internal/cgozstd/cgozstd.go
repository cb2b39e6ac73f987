//go:build cgozstd

// Package cgozstd registers the reference C zstd library (through cgo and
// github.com/DataDog/zstd) as arrow-go's Parquet zstd codec. It is only
// compiled with the cgozstd build tag (make build-cgozstd): the default
// build is pure Go. Importing it for its side effect replaces the pure-Go
// decoder for every Parquet page the process reads.
package cgozstd

import (
	"github.com/DataDog/zstd"
	"github.com/apache/arrow-go/v18/parquet/compress"
)

// Name describes the codec in use, for logs and reports.
const Name = "DataDog/zstd (cgo, bundled C libzstd)"

type codec struct{}

func (codec) Encode(dst, src []byte) []byte {
	return codec{}.EncodeLevel(dst, src, zstd.DefaultCompression)
}

func (codec) EncodeLevel(dst, src []byte, level int) []byte {
	out, err := zstd.CompressLevel(dst[:0], src, level)
	if err != nil {
		panic(err) // compressing in-memory bytes fails only on allocation
	}
	return out
}

func (codec) CompressBound(n int64) int64 { return int64(zstd.CompressBound(int(n))) }

func (codec) Decode(dst, src []byte) []byte {
	out, err := codec{}.DecodeWithError(dst, src)
	if err != nil {
		panic(err) // arrow-go recovers codec panics; DecodeWithError is preferred
	}
	return out
}

// DecodeWithError decompresses straight into dst, which arrow-go sizes to
// the page's uncompressed length, falling back to an allocating decode.
func (codec) DecodeWithError(dst, src []byte) ([]byte, error) {
	if d := dst[:cap(dst)]; len(d) > 0 {
		if n, err := zstd.DecompressInto(d, src); err == nil {
			return d[:n], nil
		}
	}
	return zstd.Decompress(nil, src)
}

func init() { compress.RegisterCodec(compress.Codecs.Zstd, codec{}) }
