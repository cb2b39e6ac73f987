// Package mmapfile maps a read-only file into memory, so that a caller
// that reads parts of a file (a reducer reading a snapshot member's
// buckets) touches only the pages it reads, and allocates anonymous
// buffers outside the Go heap (Alloc), for the mapper's copies of the
// files it reads whole.
//
// A mapped file that another process truncates turns reads past its new
// end into SIGBUS. Callers that read a mapping must do so with
// runtime/debug.SetPanicOnFault(true) and treat a recovered fault whose
// address Contains reports as an I/O error (see Fault).
package mmapfile

import (
	"errors"
	"os"
)

// ErrUnsupported is returned by Map where the platform has no mmap.
var ErrUnsupported = errors.New("mmapfile: not supported on this platform")

// Mapping is a read-only view of a file's bytes.
type Mapping struct {
	data []byte
}

// Bytes returns the mapped bytes. They are valid until Close.
func (m *Mapping) Bytes() []byte { return m.data }

// Contains reports whether addr lies inside the mapping.
func (m *Mapping) Contains(addr uintptr) bool {
	if m == nil || len(m.data) == 0 {
		return false
	}
	start := uintptrOf(m.data)
	return addr >= start && addr-start < uintptr(cap(m.data))
}

// Fault reports whether p, a value recovered from a panic, is a memory
// fault at an address inside m: the mapped file shrank under the reader.
func (m *Mapping) Fault(p any) bool {
	e, ok := p.(interface{ Addr() uintptr })
	return ok && m.Contains(e.Addr())
}

// Map maps the first size bytes of f read-only. size must be the file's
// size, as read from f itself (fstat), not from metadata that may be
// stale. A size of 0 gives an empty mapping.
func Map(f *os.File, size int64) (*Mapping, error) {
	if size == 0 {
		return &Mapping{}, nil
	}
	return mapFile(f, size)
}

// Close unmaps the file. The bytes must no longer be used.
func (m *Mapping) Close() error {
	if m == nil || len(m.data) == 0 {
		return nil
	}
	d := m.data
	m.data = nil
	return unmap(d)
}

func uintptrOf(b []byte) uintptr { return uintptr(unsafePointer(b)) }

// Alloc returns a zeroed []byte of length and capacity n in anonymous
// memory outside the Go heap (from make where the platform has no mmap).
// A buffer the size of a file is better kept there: in the heap it raises
// the garbage collector's target by as much, and so the peak RSS by about
// twice its size. It must be given back with Free, once, and not used
// after that.
func Alloc(n int) ([]byte, error) {
	if n <= 0 {
		return nil, nil
	}
	return alloc(n)
}

// Free unmaps a buffer Alloc returned (any slice of it, its capacity
// reaching the end). Free(nil) does nothing.
func Free(b []byte) error {
	if cap(b) == 0 {
		return nil
	}
	return free(b[:cap(b)])
}
