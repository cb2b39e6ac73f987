//go:build unix

package file

import (
	"os"
	"syscall"
)

// canLock: temp files are locked while their Put runs.
const canLock = true

// lock takes an exclusive flock on f; with wait false it fails at once
// (EWOULDBLOCK) when another open file holds it.
func lock(f *os.File, wait bool) error {
	how := syscall.LOCK_EX
	if !wait {
		how |= syscall.LOCK_NB
	}
	for {
		err := syscall.Flock(int(f.Fd()), how)
		if err != syscall.EINTR {
			return err
		}
	}
}
