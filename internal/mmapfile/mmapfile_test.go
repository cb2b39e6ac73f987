package mmapfile

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime/debug"
	"testing"
)

func writeFile(t *testing.T, b []byte) *os.File {
	t.Helper()
	name := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(name, b, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// TestMapReadsTheFile: a mapping holds the file's bytes, Contains covers
// exactly them, and an empty file maps to no bytes.
func TestMapReadsTheFile(t *testing.T) {
	want := bytes.Repeat([]byte("shardproof"), 1000)
	f := writeFile(t, want)
	m, err := Map(f, int64(len(want)))
	if err != nil {
		t.Fatal(err)
	}
	got := m.Bytes()
	if !bytes.Equal(got, want) {
		t.Fatalf("mapped %d bytes differ from the file's %d", len(got), len(want))
	}
	start := uintptrOf(got)
	if !m.Contains(start) || !m.Contains(start+uintptr(len(got))-1) || m.Contains(start-1) {
		t.Fatal("Contains does not cover exactly the mapping")
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if m.Contains(start) || m.Bytes() != nil {
		t.Fatal("a closed mapping still reports its bytes")
	}
	e, err := Map(writeFile(t, nil), 0)
	if err != nil || len(e.Bytes()) != 0 || e.Close() != nil {
		t.Fatalf("empty file: %d bytes, err %v", len(e.Bytes()), err)
	}
}

// TestShrunkFileFaults: reading a page the file no longer has is a
// recoverable panic under SetPanicOnFault, which Fault recognizes, while
// a panic of any other kind is not mistaken for one.
func TestShrunkFileFaults(t *testing.T) {
	f := writeFile(t, bytes.Repeat([]byte{7}, 3*os.Getpagesize()))
	m, err := Map(f, int64(3*os.Getpagesize()))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := os.Truncate(f.Name(), 0); err != nil {
		t.Fatal(err)
	}
	read := func() (p any) {
		defer func() { p = recover() }()
		defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
		var sum byte
		for _, b := range m.Bytes() {
			sum += b
		}
		return sum
	}
	p := read()
	if !m.Fault(p) {
		t.Fatalf("reading a truncated mapping gave %v, not a fault inside it", p)
	}
	if m.Fault("some other panic") || m.Fault(nil) {
		t.Fatal("Fault accepts a panic that is not a memory fault")
	}
}

// TestAlloc: Alloc gives n zeroed, writable bytes that Free gives back;
// Alloc(0) and Free(nil) are no-ops.
func TestAlloc(t *testing.T) {
	if b, err := Alloc(0); b != nil || err != nil {
		t.Fatalf("Alloc(0) = %d bytes, %v", len(b), err)
	}
	if err := Free(nil); err != nil {
		t.Fatal(err)
	}
	n := 3*os.Getpagesize() + 5
	b, err := Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != n || cap(b) != n {
		t.Fatalf("Alloc(%d): len %d cap %d", n, len(b), cap(b))
	}
	for i, c := range b {
		if c != 0 {
			t.Fatalf("byte %d of a fresh buffer is %d", i, c)
		}
		b[i] = byte(i)
	}
	if b[n-1] != byte(n-1) {
		t.Fatal("last byte not written")
	}
	if err := Free(b[:1]); err != nil { // any slice of it frees it whole
		t.Fatal(err)
	}
}
