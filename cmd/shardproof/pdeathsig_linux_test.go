package main

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// procStat returns the state and parent of process pid (/proc/PID/stat),
// ok false when there is no such process.
func procStat(pid int) (state byte, ppid int, ok bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, false
	}
	// Fields 3 (state) and 4 (ppid) follow the command name, which ends
	// at the last ')'.
	i := bytes.LastIndexByte(b, ')')
	f := strings.Fields(string(b[i+1:]))
	if i < 0 || len(f) < 2 {
		return 0, 0, false
	}
	ppid, err = strconv.Atoi(f[1])
	return f[0][0], ppid, err == nil
}

// procArgs returns the command line of process pid.
func procArgs(pid int) []string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")
}

// stopChild stops (SIGSTOP) a task process that parent started, as soon
// as one runs, so that it cannot finish on its own, and returns its PID;
// 0 once parent has exited without one being caught.
func stopChild(t *testing.T, parent int, exited <-chan error) int {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(time.Millisecond) {
		select {
		case err := <-exited:
			t.Logf("the verify exited (%v) before one of its tasks was caught", err)
			return 0
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("no task process of the verify ran in 2 minutes")
		}
		entries, err := os.ReadDir("/proc")
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			pid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			if _, ppid, ok := procStat(pid); !ok || ppid != parent {
				continue
			}
			// Not before it runs the task: a child stopped between fork
			// and exec has set no Pdeathsig yet, and holds the verify's
			// stdout open.
			if a := procArgs(pid); len(a) < 2 || a[1] != "task" {
				continue
			}
			syscall.Kill(pid, syscall.SIGSTOP)
			for {
				state, ppid, ok := procStat(pid)
				if !ok || ppid != parent || state == 'Z' || state == 'X' {
					break // it ended first
				}
				if state == 'T' {
					return pid
				}
				time.Sleep(time.Millisecond)
			}
		}
	}
}

// TestVerifyCLIKilledTasksDie: a verify with the process executor killed
// with SIGKILL takes its task processes with it (Pdeathsig), even one
// that is stopped and could not end on its own. They used to run on,
// orphaned, into a job that a resume would take over, writing its files
// beside the resume's tasks.
func TestVerifyCLIKilledTasksDie(t *testing.T) {
	// While it runs, this process adopts its children's orphans: a task
	// left by the killed verify then still has a parent in this session,
	// outside its process group, and the kernel does not send it SIGHUP
	// and SIGCONT as a stopped member of an orphaned group, which would
	// end it whether or not Pdeathsig works.
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Fatalf("prctl(PR_SET_CHILD_SUBREAPER): %v", err)
	}
	defer unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
	r := newRelease(t)
	for attempt := 1; ; attempt++ {
		_, cmd, _ := planResume(t, r, fmt.Sprint("tasks die with their verify ", attempt), "--executor", "process")
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		task := stopChild(t, cmd.Process.Pid, exited)
		if task == 0 {
			if attempt == 5 {
				t.Fatal("five verifies finished before one of their tasks could be stopped")
			}
			continue
		}
		syscall.Kill(cmd.Process.Pid, syscall.SIGKILL)
		if status := exitStatusOf(<-exited); status != -1 {
			t.Fatalf("the verify exited %d, not killed", status)
		}
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
			// Its new parent is this process: once it has ended, it
			// waits as a zombie to be reaped.
			state, _, ok := procStat(task)
			if !ok || state == 'Z' || state == 'X' {
				syscall.Wait4(task, nil, 0, nil)
				return
			}
			if time.Now().After(deadline) {
				syscall.Kill(task, syscall.SIGKILL)
				syscall.Wait4(task, nil, 0, nil)
				t.Fatalf("task process %d of the killed verify still there a minute later (state %c)", task, state)
			}
		}
	}
}
