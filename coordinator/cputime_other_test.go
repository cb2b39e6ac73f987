//go:build !unix

package coordinator

// cpuTime returns 0: this system has no getrusage, and the benchmark's
// cpu-ns/op metric reads 0.
func cpuTime() int64 { return 0 }
