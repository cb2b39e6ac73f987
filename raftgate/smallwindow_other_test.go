//go:build !unix

package raftgate

import (
	"net"
	"testing"
)

// dialSmallWindow needs SO_RCVBUF through syscall.SetsockoptInt, whose
// socket type differs here; the tests that use it run on unix.
func dialSmallWindow(t *testing.T, addr string) net.Conn {
	t.Helper()
	t.Skip("dialSmallWindow is unix-only")
	return nil
}
