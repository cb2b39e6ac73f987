// Package fdlimit reports how many files this process may hold open at
// once.
package fdlimit

// Open returns the process's limit on open file descriptors (the soft
// RLIMIT_NOFILE, which the Go runtime raises to the hard limit at
// start-up), and false where there is none to read or it is unlimited.
func Open() (uint64, bool) { return open() }
