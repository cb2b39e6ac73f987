package main

import (
	"runtime"
	"sync/atomic"

	"github.com/apache/arrow-go/v18/parquet/compress"
	"golang.org/x/sys/unix"
)

// zstdCodecName names the zstd implementation arrow-go decodes pages
// with in this binary; codec_cgo.go replaces it under the cgozstd tag.
var zstdCodecName = "klauspost/compress (pure Go, arrow-go default)"

// threadCPU returns the calling OS thread's CPU time in nanoseconds. The
// loops lock each worker goroutine to its thread (lockThread), so a
// difference of two readings is the CPU the code between them used, even
// on a machine so loaded that wall-clock intervals mostly measure waiting.
func threadCPU() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0
	}
	return ts.Nano()
}

// lockThread pins the calling goroutine to its OS thread for threadCPU;
// the caller defers runtime.UnlockOSThread.
func lockThread() { runtime.LockOSThread() }

// timedCodec decorates arrow-go's registered zstd codec and sums the CPU
// time spent in Decode over every worker thread, so the decompression
// share of a loop is measured, not inferred.
type timedCodec struct {
	compress.Codec
	nanos *atomic.Int64
}

func (c timedCodec) Decode(dst, src []byte) []byte {
	t := threadCPU()
	out := c.Codec.Decode(dst, src)
	c.nanos.Add(threadCPU() - t)
	return out
}

// DecodeWithError keeps the wrapped codec's error reporting, so a corrupt
// page is an error and not a panic.
func (c timedCodec) DecodeWithError(dst, src []byte) ([]byte, error) {
	t := threadCPU()
	out, err := compress.Decode(c.Codec, dst, src)
	c.nanos.Add(threadCPU() - t)
	return out, err
}

// zstdDecodeNanos is the time timedCodec has measured.
var zstdDecodeNanos atomic.Int64

// timeZstd registers the timing decorator around the current zstd codec.
// Call it once, before any Parquet file is opened.
func timeZstd() error {
	c, err := compress.GetCodec(compress.Codecs.Zstd)
	if err != nil {
		return err
	}
	compress.RegisterCodec(compress.Codecs.Zstd, timedCodec{Codec: c, nanos: &zstdDecodeNanos})
	return nil
}
