// Package procid names a process so that another process can later tell
// whether it still runs: its host, its PID and, on Linux, the machine's
// boot, the PID namespace and the process's start time, which together
// tell a live process from a dead one whose PID was reused. A process on
// another machine (or where /proc is missing, or is not of this
// process's PID namespace) cannot be checked; callers then fall back on
// something it renews, such as a heartbeat.
package procid

import "os"

// ID identifies one process. The zero value names no process.
type ID struct {
	// Host is os.Hostname(), for people: two machines may share it.
	Host string `json:"host"`
	PID  int    `json:"pid"`
	// Machine is the boot ID and PID namespace of the process (Linux):
	// a process with the same Machine is one whose PID this process can
	// look up. Empty where that is unknown.
	Machine string `json:"machine,omitempty"`
	// Start is the process's start time in clock ticks since boot
	// (/proc/PID/stat), so a PID reused by another process is told
	// apart. Zero where unknown.
	Start uint64 `json:"start,omitempty"`
}

// procRoot is where the proc file system is mounted.
const procRoot = "/proc"

// Self returns this process's ID.
func Self() ID {
	host, _ := os.Hostname()
	id := ID{Host: host, PID: os.Getpid()}
	id.Machine = machine()
	if id.Machine != "" {
		if start, _, ok := statAt(procRoot, id.PID); ok {
			id.Start = start
		}
	}
	return id
}

// Alive reports whether the process id names still runs. known is false
// when this process cannot tell: id is of another machine or PID
// namespace, the platform has no /proc, /proc is not of this process's
// PID namespace (its /proc/self is another PID), or /proc hides the
// process from this user.
func (id ID) Alive() (alive, known bool) { return id.aliveAt(procRoot, machine()) }

// aliveAt is Alive as seen through the proc file system at root, by a
// process whose machine (see machineAt) is here.
func (id ID) aliveAt(root, here string) (alive, known bool) {
	if id.Machine == "" || id.PID <= 0 || here == "" || id.Machine != here {
		return false, false
	}
	start, state, ok := statAt(root, id.PID)
	if !ok {
		// No such process, or one /proc will not show this user
		// (hidepid=1 or 2, common on shared login nodes): only the
		// kernel can tell them apart. A hidden one may be the holder
		// as much as a reuse of its PID: unknown.
		if exists(id.PID) {
			return false, false
		}
		return false, true
	}
	// A zombie has exited: only its parent has not collected it yet.
	if state == 'Z' || state == 'X' {
		return false, true
	}
	return id.Start == 0 || start == id.Start, true
}
