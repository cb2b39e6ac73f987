package raftgate

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"testing"
	"time"

	"github.com/shardproof/shardproof/internal/errcode"
)

// testCA issues member certificates for the names given.
type testCA struct {
	t    *testing.T
	key  *ecdsa.PrivateKey
	cert *x509.Certificate
	pool *x509.CertPool
}

func newTestCA(t *testing.T) *testCA {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "names CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testCA{t: t, key: key, cert: cert, pool: pool}
}

func (ca *testCA) member(ips []net.IP, dns ...string) *TLSConfig {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: "member"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: ips, DNSNames: dns, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		ca.t.Fatal(err)
	}
	leaf, _ := x509.ParseCertificate(der)
	return &TLSConfig{Cert: tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, CAs: ca.pool}
}

// freePort returns a port nothing listens on now.
func freePort(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return port
}

// TestJoinProbeNeedsTheRaftHandshake: a joiner whose advertised Raft
// address is another process's port (a typo, a stale forward) answers
// the leader's HTTPS probe and accepts TCP there, yet no member can talk
// Raft to it. It must be refused before it becomes a voter: added, it
// cost the single node its quorum for good.
func TestJoinProbeNeedsTheRaftHandshake(t *testing.T) {
	ca := newTestCA(t)
	member := func() *TLSConfig { return ca.member([]net.IP{net.ParseIP("127.0.0.1")}, "localhost") }
	c := MakeCluster(t, 1, func(cfg *Config) { cfg.TLS = member() })
	leader := c.Leader(10 * time.Second)
	other, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	go func() {
		for {
			conn, err := other.Accept()
			if err != nil {
				return
			}
			conn.Close()
		}
	}()
	cfg := TestConfig(t.TempDir(), "misadvertised")
	cfg.Bootstrap, cfg.Join, cfg.TLS = false, leader.HTTPAddr(), member()
	cfg.RaftAdvertise = other.Addr().String()
	n := NewNode(cfg)
	err = n.Start(ctxT(t, 40*time.Second))
	n.Shutdown()
	if errcode.Of(err) != errcode.BadInput {
		t.Errorf("join of a member Raft cannot talk to: %v, want BAD_INPUT", err)
	}
	if v := leader.voters(); len(v) != 1 {
		t.Fatalf("voters after the refused join: %d, want the leader alone", len(v))
	}
	if _, err := leader.Apply(&AdvanceFence{Kind: FenceTombstone, Value: 1}); err != nil {
		t.Fatalf("the gate cannot commit after the refused join: %v", err)
	}
}

// TestCertificateMustNameTheAddresses: a member certificate that names
// its HTTP host but not the IP its Raft address resolves to (a DNS-only
// certificate, with --raft-advertise a host name) is refused at start
// (USAGE): the member would serve HTTPS and pass a join, but no member
// could open a Raft connection to it. So is one that does not name the
// advertised HTTP host.
func TestCertificateMustNameTheAddresses(t *testing.T) {
	ca := newTestCA(t)
	for name, tc := range map[string]struct {
		tls                     *TLSConfig
		raftAdvertise, httpAdvr string
		ok                      bool
	}{
		"dns only, raft by name": {ca.member(nil, "localhost"), "localhost:" + freePort(t), "localhost:" + freePort(t), false},
		"ip only, http by name":  {ca.member([]net.IP{net.ParseIP("127.0.0.1")}), "", "localhost:" + freePort(t), false},
		"both":                   {ca.member([]net.IP{net.ParseIP("127.0.0.1")}, "localhost"), "localhost:" + freePort(t), "localhost:" + freePort(t), true},
	} {
		cfg := TestConfig(t.TempDir(), "n1")
		cfg.TLS, cfg.RaftAdvertise, cfg.HTTPAdvertise = tc.tls, tc.raftAdvertise, tc.httpAdvr
		n := NewNode(cfg)
		err := n.Start(ctxT(t, 10*time.Second))
		n.Shutdown()
		if tc.ok && err != nil || !tc.ok && errcode.Of(err) != errcode.Usage {
			t.Errorf("%s: start: %v, want ok=%v (else USAGE)", name, err, tc.ok)
		}
	}
}
