package mapper

import (
	"bytes"
	"io"
	"testing"
)

// TestReadBuffers: readAll reads everything into a buffer growBuf sizes
// (a power of two of at least 1 MiB, contents kept across growth, past a
// hint that was too small), and putBuf keeps it for the next takeBuf,
// emptied, until the list is full.
func TestReadBuffers(t *testing.T) {
	for {
		if _, ok := bufs.Get(); !ok {
			break
		}
	}
	src := bytes.Repeat([]byte("0123456789abcdef"), 300_000) // 4.8 MB
	b, err := readAll(bytes.NewReader(src), nil, 100)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b, src) {
		t.Fatalf("read %d bytes, want the %d written", len(b), len(src))
	}
	if cap(b) != 8<<20 {
		t.Fatalf("buffer capacity %d, want 8 MiB", cap(b))
	}
	small, err := readAll(io.LimitReader(bytes.NewReader(src), 10), takeBuf(), 11)
	if err != nil || string(small) != "0123456789" || cap(small) != 1<<20 {
		t.Fatalf("small read: %q, cap %d, %v", small, cap(small), err)
	}

	first := &b[:1][0]
	p := &b
	putBuf(p)
	if *p != nil {
		t.Fatal("putBuf left the holder set")
	}
	got := takeBuf()
	if len(got) != 0 || cap(got) != 8<<20 || &got[:1][0] != first {
		t.Fatalf("takeBuf after putBuf: len %d cap %d, not the buffer put", len(got), cap(got))
	}
	putBuf(&got)
	// Fill the list; a buffer beyond it is freed, not kept.
	for bufs.Put(nil) {
	}
	putBuf(&small)
	for {
		v, ok := bufs.Get()
		if !ok {
			break
		}
		if cap(v) == 1<<20 {
			t.Fatal("a buffer put into a full list was kept")
		}
	}
}
