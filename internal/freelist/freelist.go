// Package freelist keeps a bounded number of large buffers for reuse:
// List for whole buffers a caller cycles through, Allocator for arrow-go
// readers.
//
// sync.Pool empties itself at every garbage collection, which is the
// wrong policy for the few multi-megabyte buffers verify's workers cycle
// through (a shard's bytes, a map task's partitions): each collection
// threw them away and the next file allocated and zeroed them again. A
// List keeps at most its capacity, so what it retains is bounded by the
// number of workers, not by the release.
package freelist

import (
	"fmt"
	"sync"

	"github.com/apache/arrow-go/v18/arrow/memory"
)

// List holds up to n values of T. It is safe for concurrent use.
type List[T any] struct{ c chan T }

// New returns a List that keeps at most n values.
func New[T any](n int) *List[T] { return &List[T]{c: make(chan T, n)} }

// Get returns a kept value, or false if there is none.
func (l *List[T]) Get() (T, bool) {
	select {
	case v := <-l.c:
		return v, true
	default:
		var zero T
		return zero, false
	}
}

// Put keeps v if the list has room and drops it otherwise; it reports
// whether v was kept, so that a caller whose values must be freed
// explicitly can free a dropped one.
func (l *List[T]) Put(v T) bool {
	select {
	case l.c <- v:
		return true
	default:
		return false
	}
}

// Allocator is an arrow-go memory.Allocator that keeps released buffers
// and hands them out again. arrow-go readers allocate and release the
// same few buffers over and over (a Parquet page reader per column chunk,
// an IPC reader per record batch); with the Go allocator each one was a
// fresh, zeroed allocation for the garbage collector to trace and free.
// Buffers are zeroed when handed out again, as fresh memory would be, and
// 64-byte aligned. It is safe for concurrent use.
type Allocator struct {
	mu   sync.Mutex
	free [][]byte
	keep int
	max  int
}

// NewAllocator returns an Allocator that keeps up to keep released
// buffers and refuses (panics on) any allocation above max bytes (0: no
// limit), so a corrupt length cannot exhaust memory: arrow-go's readers
// run under recover in shardproof.
func NewAllocator(keep, max int) *Allocator { return &Allocator{keep: keep, max: max} }

// Allocate returns a zeroed buffer of size bytes.
func (a *Allocator) Allocate(size int) []byte {
	if size < 0 || (a.max > 0 && size > a.max) {
		panic(fmt.Sprintf("allocation of %d bytes refused (cap %d)", size, a.max))
	}
	a.mu.Lock()
	best := -1
	for i, b := range a.free {
		if cap(b) >= size && (best < 0 || cap(b) < cap(a.free[best])) {
			best = i
		}
	}
	if best >= 0 {
		b := a.free[best]
		a.free[best] = a.free[len(a.free)-1]
		a.free = a.free[:len(a.free)-1]
		a.mu.Unlock()
		b = b[:size]
		clear(b)
		return b
	}
	a.mu.Unlock()
	// Round buffers up, so requests of slightly different sizes share
	// them, and a buffer grown a little (arrow-go's page reader resizes
	// its decompression buffer to every page) stays where it is:
	// Reallocate within the capacity neither allocates nor copies.
	c := max(size, 4096)
	c += c / 4
	return memory.NewGoAllocator().Allocate(c)[:size]
}

// Reallocate grows or shrinks b to size bytes, keeping its contents.
func (a *Allocator) Reallocate(size int, b []byte) []byte {
	if size >= 0 && cap(b) >= size {
		old := len(b)
		b = b[:size]
		if size > old {
			clear(b[old:])
		}
		return b
	}
	nb := a.Allocate(size)
	copy(nb, b)
	a.Free(b)
	return nb
}

// Free keeps b for reuse if there is room.
func (a *Allocator) Free(b []byte) {
	if cap(b) == 0 {
		return
	}
	a.mu.Lock()
	if len(a.free) < a.keep {
		a.free = append(a.free, b[:0])
	}
	a.mu.Unlock()
}
