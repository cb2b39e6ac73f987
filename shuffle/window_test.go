package shuffle

import (
	"bytes"
	"encoding/binary"
	"io"
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

// maxReadLen records the largest read asked of it.
type maxReadLen struct {
	r   io.Reader
	max int
}

func (m *maxReadLen) Read(p []byte) (int, error) {
	m.max = max(m.max, len(p))
	return m.r.Read(p)
}

// TestPlainReadAheadBoundsReaderMemory: a reader of a plain file reads at
// most 16 KiB ahead of what arrow-go asks for. A reducer holds one open file per map task, so this
// read-ahead is paid hundreds of times: at 64 KiB it was the reduce
// phase's peak at 16M records (293 MB against 245 MB).
func TestPlainReadAheadBoundsReaderMemory(t *testing.T) {
	rows := makeRows(20000)
	var b Buffer
	for i := range rows {
		b.Append(&rows[i])
	}
	file, err := (&Encoder{Compression: None}).Encode(&b)
	if err != nil {
		t.Fatal(err)
	}
	src := &maxReadLen{r: bytes.NewReader(file)}
	rd, err := NewReaderCompression(src, None, int64(len(file)), "plain", testK, 0, 1<<testK)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	n := 0
	for {
		_, got, err := rd.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		n += len(got)
	}
	if n != len(rows) {
		t.Fatalf("read %d rows of %d", n, len(rows))
	}
	// A read-ahead refill asks for the whole buffer; a read at least as
	// large as the buffer (a record batch body, under 32 KiB here) goes
	// straight to the file. So the largest request stays under 32 KiB
	// with a 16 KiB read-ahead and was 64 KiB with the old one.
	if src.max >= 32<<10 {
		t.Fatalf("reader asked for %d bytes at once: read-ahead above 16 KiB", src.max)
	}
}
