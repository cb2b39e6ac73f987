// Package testnet holds network fixtures for tests: servers that fail in
// the ways real ones do.
package testnet

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// Silent is a TCP listener on loopback that accepts connections and never
// answers: a server frozen by SIGSTOP, a paused VM, a black-holed path.
type Silent struct {
	// Addr is its host:port.
	Addr string
	open atomic.Int64
}

// NewSilent starts a Silent listener, closed with every connection it
// accepted when the test ends. With read, it reads and discards what each
// peer sends (a server that takes requests and answers none); without,
// it reads nothing, so a peer's writes stall once the buffers fill.
func NewSilent(t testing.TB, read bool) *Silent {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &Silent{Addr: ln.Addr().String()}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			s.open.Add(1)
			if !read {
				continue
			}
			go func() {
				io.Copy(io.Discard, c)
				s.open.Add(-1)
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return s
}

// Open is the number of accepted connections the peer has not closed; it
// counts closes only of a listener that reads.
func (s *Silent) Open() int64 { return s.open.Load() }
