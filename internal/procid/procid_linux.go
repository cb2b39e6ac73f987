package procid

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

var machineOnce = sync.OnceValue(func() string {
	m, err := machineAt(procRoot)
	if err != nil {
		slog.Warn("processes on this machine are not looked up; a holder of a job that is gone is found gone only once it stops renewing", "err", err)
	}
	return m
})

func machine() string { return machineOnce() }

// machineAt returns the boot ID and PID namespace of this process as the
// proc file system at root shows them, or "" when it shows none. It is
// also "", with an error saying why, when that proc file system is not of
// this process's PID namespace: /proc/self is not os.Getpid() (a
// container with a PID namespace of its own and the host's /proc mounted),
// and /proc/PID would be another process than PID.
func machineAt(root string) (string, error) {
	self, err := os.Readlink(root + "/self")
	if err != nil {
		return "", nil
	}
	if pid := strconv.Itoa(os.Getpid()); self != pid {
		return "", fmt.Errorf("%s/self is process %s, but this process is %s: %s is of another PID namespace", root, self, pid, root)
	}
	boot, err := os.ReadFile(root + "/sys/kernel/random/boot_id")
	if err != nil {
		return "", nil
	}
	ns, err := os.Readlink(root + "/self/ns/pid")
	if err != nil {
		return "", nil
	}
	return strings.TrimSpace(string(boot)) + "/" + ns, nil
}

// statAt returns the start time (field 22) and state (field 3) of process
// pid from root/PID/stat; ok is false when there is no such process.
func statAt(root string, pid int) (start uint64, state byte, ok bool) {
	b, err := os.ReadFile(root + "/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, false
	}
	// The command name (field 2) is in parentheses and may hold spaces
	// and parentheses itself: the fields that follow start after the
	// last ')'.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state), so field 22 is f[19].
	if len(f) < 20 || len(f[0]) != 1 {
		return 0, 0, false
	}
	start, err = strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return 0, 0, false
	}
	return start, f[0][0], true
}

// exists reports whether a process pid runs in this PID namespace, seen
// or not in /proc: kill with signal 0 checks without sending one, and
// answers EPERM for another user's process. A pid no pid_t holds (from a
// damaged record) would be cut to one that means a process group.
func exists(pid int) bool {
	if pid <= 0 || pid > math.MaxInt32 {
		return false
	}
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
