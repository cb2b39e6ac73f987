//go:build unix

package raftgate

import (
	"errors"
	"net"
	"syscall"
	"testing"
)

// dialSmallWindow connects to addr with a receive buffer of a few KiB, so
// what the server sends and the client does not read stays in the
// server's buffers, not in this end's.
func dialSmallWindow(t *testing.T, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
		return errors.Join(err, serr)
	}}
	conn, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}
