//go:build !linux

package s3test

import (
	"errors"
	"os"
	"os/exec"
	"runtime"
)

// supported reports whether this system can run the test gateway: the
// helper relies on Linux (the gateway must die with the test binary,
// Pdeathsig). Tests that need it skip here, or fail under CI=true.
func supported() error {
	return errors.New("the test gateway runs on Linux only, not " + runtime.GOOS)
}

func lockFile(*os.File) error { return supported() }

func dieWithParent(*exec.Cmd) {}

func processGone(int) bool { return false }
