//go:build !linux

package slurmtest

import (
	"errors"
	"os/exec"
	"runtime"
	"syscall"
)

// supported reports whether this system can run the test cluster:
// Debian's Slurm and munge packages, so Linux only. Tests that need it
// skip here, or fail under CI=true.
func supported() error {
	return errors.New("the test cluster runs on Linux only, not " + runtime.GOOS)
}

func newProcessGroup(*exec.Cmd) {}

func killGroup(int, syscall.Signal) {}
