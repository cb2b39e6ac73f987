package slurmtest

import (
	"os/exec"
	"syscall"
)

// supported reports whether this system can run the test cluster.
func supported() error { return nil }

// newProcessGroup makes cmd the leader of a new process group, so that
// killGroup reaches the daemon and whatever it forked.
func newProcessGroup(cmd *exec.Cmd) { cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} }

// killGroup sends sig to the process group led by pid.
func killGroup(pid int, sig syscall.Signal) { _ = syscall.Kill(-pid, sig) }
