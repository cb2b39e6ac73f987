//go:build !linux

package coordinator

import "os/exec"

// startChild starts a task's process. Only Linux can have it die with
// this one (Pdeathsig): elsewhere a verify killed outright leaves its
// running tasks to finish on their own.
func startChild(cmd *exec.Cmd) error { return cmd.Start() }
