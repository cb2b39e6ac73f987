package coordinator

import (
	"os/exec"
	"runtime"
	"sync"
	"syscall"
)

// startChild starts a task's process so that it dies with this one: the
// kernel sends it SIGKILL when the thread that started it exits
// (Pdeathsig), and a verify killed outright (kill -9, the OOM killer)
// no longer leaves its tasks running on into a job that a resume then
// takes over. Go ends a thread only when a goroutine locked to it
// returns, so every child is started by one goroutine that locks its
// thread and never returns: the thread lives as long as the process.
func startChild(cmd *exec.Cmd) error {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	done := make(chan error, 1)
	childStarter() <- startRequest{cmd: cmd, done: done}
	return <-done
}

type startRequest struct {
	cmd  *exec.Cmd
	done chan<- error
}

// childStarter returns the channel of the goroutine that starts children.
var childStarter = sync.OnceValue(func() chan<- startRequest {
	reqs := make(chan startRequest)
	go func() {
		runtime.LockOSThread() // never unlocked: see startChild
		for r := range reqs {
			r.done <- r.cmd.Start()
		}
	}()
	return reqs
})
