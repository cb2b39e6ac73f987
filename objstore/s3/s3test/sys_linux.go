package s3test

import (
	"os"
	"os/exec"
	"syscall"
)

// supported reports whether this system can run the test gateway.
func supported() error { return nil }

// lockFile takes an exclusive lock on f, released when f is closed.
func lockFile(f *os.File) error { return syscall.Flock(int(f.Fd()), syscall.LOCK_EX) }

// dieWithParent makes cmd's process get SIGKILL when the thread that
// started it exits. Pdeathsig fires when the starting thread exits, so
// start it from a thread that never does.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// processGone reports whether no process has this pid.
func processGone(pid int) bool { return syscall.Kill(pid, 0) == syscall.ESRCH }
