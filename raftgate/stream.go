package raftgate

import (
	"errors"
	"net"
	"time"

	"github.com/hashicorp/raft"
)

// tcpStream is the Raft stream layer over TCP: what raft.NewTCPTransport
// builds internally, here so that Config.WrapStream can decorate it.
type tcpStream struct {
	ln        net.Listener
	advertise net.Addr
}

// listenTCPStream binds addr; advertise, if not nil, is the address other
// members dial instead of the bound one. Like hashicorp/raft's own TCP
// transport it refuses to advertise an unspecified address (0.0.0.0).
func listenTCPStream(addr string, advertise net.Addr) (*tcpStream, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	s := &tcpStream{ln: ln, advertise: advertise}
	a, ok := s.Addr().(*net.TCPAddr)
	if !ok || a.IP == nil || a.IP.IsUnspecified() {
		ln.Close()
		return nil, errors.New("local bind address is not advertisable: set the Raft advertise address")
	}
	return s, nil
}

func (s *tcpStream) Accept() (net.Conn, error) { return s.ln.Accept() }
func (s *tcpStream) Close() error              { return s.ln.Close() }

func (s *tcpStream) Addr() net.Addr {
	if s.advertise != nil {
		return s.advertise
	}
	return s.ln.Addr()
}

func (s *tcpStream) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	return net.DialTimeout("tcp", string(address), timeout)
}
