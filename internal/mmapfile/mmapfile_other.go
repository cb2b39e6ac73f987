//go:build !(linux || darwin || freebsd || netbsd || openbsd)

package mmapfile

import (
	"os"
	"unsafe"
)

func unsafePointer(b []byte) unsafe.Pointer { return unsafe.Pointer(unsafe.SliceData(b)) }

func mapFile(*os.File, int64) (*Mapping, error) { return nil, ErrUnsupported }

func unmap([]byte) error { return nil }

func alloc(n int) ([]byte, error) { return make([]byte, n), nil }

func free([]byte) error { return nil }
