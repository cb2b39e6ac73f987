package raftgate

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/shardproof/shardproof/internal/errcode"
)

// TLSConfig puts a gate node on TLS: its HTTP API is served over HTTPS
// with Cert, and Raft connections between members are mutual TLS, each
// end presenting Cert and verifying the other's against CAs. Members also
// verify each other's HTTPS (forwarded writes, joins, join probes)
// against CAs. A member's certificate must name the host or IP of its
// advertised HTTP address and the IP of its Raft address (Raft addresses
// are resolved to IPs at start, so a DNS name alone does not verify). Clients reach the gate at https://
// URLs and verify it against the same CA (Client.UseTLS).
type TLSConfig struct {
	Cert tls.Certificate
	CAs  *x509.CertPool
}

// LoadTLS reads a PEM certificate (chain) and key, and a PEM file of CA
// certificates. Files that are missing or do not parse are USAGE.
func LoadTLS(certFile, keyFile, caFile string) (*TLSConfig, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, errcode.Wrap(errcode.Usage, err, "gate TLS certificate %s and key %s", certFile, keyFile)
	}
	pool, err := LoadCAs(caFile)
	if err != nil {
		return nil, err
	}
	return &TLSConfig{Cert: cert, CAs: pool}, nil
}

// LoadCAs reads a PEM file of CA certificates.
func LoadCAs(caFile string) (*x509.CertPool, error) {
	b, err := os.ReadFile(caFile)
	if err != nil {
		return nil, errcode.Wrap(errcode.Usage, err, "gate CA file")
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, errcode.New(errcode.Usage, "gate CA file %s holds no PEM certificate", caFile)
	}
	return pool, nil
}

// server is the HTTPS configuration of the API: clients present no
// certificate (the token, if any, authenticates them).
func (t *TLSConfig) server() *tls.Config {
	return &tls.Config{Certificates: []tls.Certificate{t.Cert}, MinVersion: tls.VersionTLS12}
}

// raftServer accepts Raft connections from members only: their
// certificate must chain to CAs.
func (t *TLSConfig) raftServer() *tls.Config {
	return &tls.Config{Certificates: []tls.Certificate{t.Cert}, ClientCAs: t.CAs, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12}
}

// client dials other members (HTTPS and Raft), presenting Cert.
func (t *TLSConfig) client() *tls.Config {
	return &tls.Config{Certificates: []tls.Certificate{t.Cert}, RootCAs: t.CAs, MinVersion: tls.VersionTLS12}
}

// tlsStream is a raft.StreamLayer of mutual TLS over another one.
type tlsStream struct {
	raft.StreamLayer
	server, client *tls.Config
}

// Accept returns at once; the TLS handshake runs on the connection's
// first Read or Write, on raft's goroutine for it.
func (s *tlsStream) Accept() (net.Conn, error) {
	c, err := s.StreamLayer.Accept()
	if err != nil {
		return nil, err
	}
	return &acceptedTLS{Conn: tls.Server(c, s.server)}, nil
}

// acceptedTLS runs the server side of the handshake on first use, within
// handshakeTimeout: a peer that connects and sends nothing would otherwise
// hold raft's goroutine and the descriptor for good.
type acceptedTLS struct {
	*tls.Conn
	once sync.Once
	err  error
}

func (c *acceptedTLS) handshake() error {
	c.once.Do(func() {
		c.Conn.SetDeadline(time.Now().Add(handshakeTimeout()))
		if c.err = c.Conn.Handshake(); c.err != nil {
			c.Conn.Close()
			return
		}
		c.Conn.SetDeadline(time.Time{})
	})
	return c.err
}

func (c *acceptedTLS) Read(p []byte) (int, error) {
	if err := c.handshake(); err != nil {
		return 0, err
	}
	return c.Conn.Read(p)
}

func (c *acceptedTLS) Write(p []byte) (int, error) {
	if err := c.handshake(); err != nil {
		return 0, err
	}
	return c.Conn.Write(p)
}

// Dial completes the handshake, verifying the member's certificate for
// the host of address, before returning.
func (s *tlsStream) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	c, err := s.StreamLayer.Dial(address, timeout)
	if err != nil {
		return nil, err
	}
	cfg := s.client.Clone()
	if host, _, err := net.SplitHostPort(string(address)); err == nil {
		cfg.ServerName = host
	}
	tc := tls.Client(c, cfg)
	if timeout <= 0 || timeout > handshakeTimeout() {
		timeout = handshakeTimeout()
	}
	tc.SetDeadline(time.Now().Add(timeout))
	if err := tc.Handshake(); err != nil {
		c.Close()
		return nil, errcode.Wrap(errcode.Unauthenticated, err, "TLS handshake with member %s", address)
	}
	tc.SetDeadline(time.Time{})
	return tc, nil
}

// checkNames refuses (USAGE) a member certificate that does not name the
// addresses other members verify it against: the IP of the Raft address
// (raftAddr is resolved, as the transport advertises it) and the host of
// the advertised HTTP address. Such a member served HTTPS and passed a
// join, but no member could open a Raft connection to it. Unspecified
// hosts (a bind to every interface) are not checked.
func (t *TLSConfig) checkNames(raftAddr, httpAddr string) error {
	leaf := t.Cert.Leaf
	if leaf == nil && len(t.Cert.Certificate) > 0 {
		var err error
		if leaf, err = x509.ParseCertificate(t.Cert.Certificate[0]); err != nil {
			return errcode.Wrap(errcode.Usage, err, "gate TLS certificate")
		}
	}
	if leaf == nil {
		return errcode.New(errcode.Usage, "gate TLS certificate: none given")
	}
	if a, err := net.ResolveTCPAddr("tcp", raftAddr); err == nil && a.IP != nil && !a.IP.IsUnspecified() {
		if err := leaf.VerifyHostname(a.IP.String()); err != nil {
			return errcode.Wrap(errcode.Usage, err, "gate TLS certificate: members reach this one's Raft address %s at the IP %s, which the certificate must name (an IP SAN)", raftAddr, a.IP)
		}
	}
	if host, _, err := net.SplitHostPort(httpAddr); err == nil && host != "" {
		if ip := net.ParseIP(host); ip == nil || !ip.IsUnspecified() {
			if err := leaf.VerifyHostname(host); err != nil {
				return errcode.Wrap(errcode.Usage, err, "gate TLS certificate: members reach this one's API at %s, whose host the certificate must name", httpAddr)
			}
		}
	}
	return nil
}
