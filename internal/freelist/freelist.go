// Package freelist keeps a bounded number of large buffers for reuse.
//
// sync.Pool empties itself at every garbage collection, which is the
// wrong policy for the few multi-megabyte buffers verify's workers cycle
// through (a shard's bytes, a map task's partitions): each collection
// threw them away and the next file allocated and zeroed them again. A
// List keeps at most its capacity, so what it retains is bounded by the
// number of workers, not by the release.
package freelist

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

// Put keeps v if the list has room and drops it otherwise.
func (l *List[T]) Put(v T) {
	select {
	case l.c <- v:
	default:
	}
}
