package shuffle

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// TestFrameWindowBoundsReaderMemory pins the zstd frame parameters that keep
// a reducer's memory independent of file size: no single-segment flag (which
// would make the decoder hold the whole decompressed file) and a window of at
// most 64 KiB. A regression here made verify's peak RSS grow with the
// release (870 MB at 2M samples, 2.9 GB at 8M).
func TestFrameWindowBoundsReaderMemory(t *testing.T) {
	rows := makeRows(20000) // several MB of IPC, far above the window
	Sort(rows)
	var buf bytes.Buffer
	if err := Write(&buf, rows); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	if len(b) < 6 || binary.LittleEndian.Uint32(b) != 0xFD2FB528 {
		t.Fatalf("not a zstd frame: % x", b[:min(len(b), 8)])
	}
	fhd := b[4]
	if fhd&(1<<5) != 0 {
		t.Fatalf("frame header descriptor %#x has Single_Segment_flag set: the reader would hold the whole file", fhd)
	}
	wd := b[5]
	base := uint64(1) << (10 + wd>>3)
	window := base + base/8*uint64(wd&7)
	if window > 64<<10 {
		t.Fatalf("frame window %d bytes, want at most 64 KiB", window)
	}
}
