//go:build !unix

package trainer

import (
	"errors"
	"os"
)

// entryOpenFlags: the Lstat before the open is the only guard here.
const entryOpenFlags = 0

// canEvict: without flock an eviction cannot tell the entries a live
// worker uses, so a cache bound (and cache prune) is refused here.
const canEvict = false

func tryLockShared(*os.File) (bool, error) { return true, nil }

func tryLockExclusive(*os.File) (bool, error) {
	return false, errors.New("trainer: no file locks on this platform")
}
