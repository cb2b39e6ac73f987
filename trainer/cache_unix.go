//go:build unix

package trainer

import (
	"errors"
	"os"
	"syscall"
)

// entryOpenFlags make opening a cache entry fail on a symlink rather than
// follow it out of the cache, and return at once on a FIFO.
const entryOpenFlags = syscall.O_NOFOLLOW | syscall.O_NONBLOCK

// canEvict: entries are held with flock, so eviction can tell the ones a
// live worker uses.
const canEvict = true

// tryLock applies how|LOCK_NB to f (again when a signal interrupts it):
// false when another open file holds a lock that excludes it. Never a
// wait: a process that holds a lock for good (stopped, or hostile) must
// not leave a worker deaf to its context and to SIGTERM.
func tryLock(f *os.File, how int) (bool, error) {
	for {
		err := syscall.Flock(int(f.Fd()), how|syscall.LOCK_NB)
		switch {
		case err == nil:
			return true, nil
		case errors.Is(err, syscall.EWOULDBLOCK):
			return false, nil
		case err != syscall.EINTR:
			return false, err
		}
	}
}

// tryLockShared takes a shared lock on f: false while an eviction holds
// it exclusively (it is removing the entry).
func tryLockShared(f *os.File) (bool, error) { return tryLock(f, syscall.LOCK_SH) }

// tryLockExclusive takes an exclusive lock on f: false while any other
// open file holds a lock on it (a live worker's shared lock on its
// entry).
func tryLockExclusive(f *os.File) (bool, error) { return tryLock(f, syscall.LOCK_EX) }
