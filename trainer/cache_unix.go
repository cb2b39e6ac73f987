//go:build unix

package trainer

import "syscall"

// entryOpenFlags make opening a cache entry fail on a symlink rather than
// follow it out of the cache, and return at once on a FIFO.
const entryOpenFlags = syscall.O_NOFOLLOW | syscall.O_NONBLOCK
