//go:build unix

package scratchdir

import (
	"os"
	"syscall"
)

// lock takes an exclusive flock on f; with wait false it fails at once
// when another process holds it.
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
