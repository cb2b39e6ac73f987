//go:build !unix

package scratchdir

import (
	"errors"
	"os"
)

// lock is not available here: New makes unlocked directories, and Sweep
// removes only the unlocked ones older than orphanAge.
func lock(f *os.File, wait bool) error {
	if wait {
		return nil
	}
	return errors.New("scratchdir: no file locks on this platform")
}
