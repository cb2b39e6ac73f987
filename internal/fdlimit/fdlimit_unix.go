//go:build linux || darwin

package fdlimit

import "syscall"

func open() (uint64, bool) {
	var r syscall.Rlimit
	// Limits this large are "unlimited" (RLIM_INFINITY), for any purpose.
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil || r.Cur >= 1<<40 {
		return 0, false
	}
	return r.Cur, true
}
