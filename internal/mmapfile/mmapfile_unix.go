//go:build linux || darwin || freebsd || netbsd || openbsd

package mmapfile

import (
	"fmt"
	"math"
	"os"
	"syscall"
	"unsafe"
)

func unsafePointer(b []byte) unsafe.Pointer { return unsafe.Pointer(unsafe.SliceData(b)) }

func mapFile(f *os.File, size int64) (*Mapping, error) {
	if size < 0 || size > math.MaxInt {
		return nil, fmt.Errorf("mmapfile: size %d out of range", size)
	}
	// MAP_POPULATE (Linux) faults every page in during the call, which
	// is cheaper than taking one fault per page while hashing.
	d, err := syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED|populate)
	if err != nil {
		return nil, &os.PathError{Op: "mmap", Path: f.Name(), Err: err}
	}
	return &Mapping{data: d}, nil
}

func unmap(d []byte) error { return syscall.Munmap(d) }

func alloc(n int) ([]byte, error) {
	d, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return nil, fmt.Errorf("mmapfile: allocate %d bytes: %w", n, err)
	}
	return d, nil
}

func free(d []byte) error { return syscall.Munmap(d) }
