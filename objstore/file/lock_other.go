//go:build !unix

package file

import (
	"errors"
	"os"
)

// canLock: no file locks here, so temp files are unlocked and a crashed
// Put's is removed only once older than TempMaxAge.
const canLock = false

func lock(*os.File, bool) error { return errors.New("file store: no file locks on this platform") }
