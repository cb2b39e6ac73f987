package raftgate

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestCluster is a gate cluster on loopback with real TCP transports and
// raft-boltdb on disk, for tests in this and other packages.
type TestCluster struct {
	t       testing.TB
	Nodes   []*Node // nil while a node is stopped
	Configs []Config
}

// TestConfig returns the configuration of test node id under dir: ports
// chosen by the kernel, fast timeouts, quiet logs.
func TestConfig(dir, id string) Config {
	return Config{
		ID: id, DataDir: filepath.Join(dir, id), Bootstrap: true,
		RaftAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0",
		Timing: FastTiming, ApplyTimeout: 5 * time.Second,
		Logger:          slog.New(slog.NewTextHandler(io.Discard, nil)),
		RaftLog:         io.Discard,
		SweepInterval:   50 * time.Millisecond,
		versionInterval: 100 * time.Millisecond,
	}
}

// OlderBuild returns an option that makes a test node a build of
// command-schema version v instead of CommandVersion (0: a build before the
// version handshake): it reports v, proposes and applies nothing newer,
// and halts at a committed raise above v. At 0, like the builds before
// POST /v1/record, it neither asks for its join record nor serves the
// path (404); from 1 on it does both, as the builds of version 1 that
// came before version 2 do. Restarting the node without it upgrades it.
func OlderBuild(v uint64) func(*Config) {
	return func(cfg *Config) { cfg.olderBuild = &v }
}

// StartTestNode starts one node with cfg and registers its shutdown with
// t.Cleanup. It fails the test if the node does not start. A node that
// joins is a learner until the leader promotes it: StartTestNode returns
// once it votes (WaitPromoted).
func StartTestNode(t testing.TB, cfg Config) *Node {
	t.Helper()
	n := NewNode(cfg)
	if err := n.Start(context.Background()); err != nil {
		t.Fatalf("start %s: %v", cfg.ID, err)
	}
	t.Cleanup(func() { n.Shutdown() })
	if cfg.Join != "" {
		WaitPromoted(t, n, 10*time.Second)
	}
	return n
}

// WaitPromoted waits up to timeout for n to be a learner no more (see
// Status.Learner); it fails the test on timeout.
func WaitPromoted(t testing.TB, n *Node, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for n.learner.status() != nil {
		if time.Now().After(deadline) {
			t.Fatalf("%s still a learner after %s: %+v", n.ID(), timeout, n.learner.status())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// MakeCluster starts size nodes: the first bootstraps, the others join it.
// It returns once every node has joined, a leader is elected and every
// node applied the cluster version the leader raises to (the lowest
// build's), so that no raise lands in the middle of a test. Each option
// may adjust a node's TestConfig before it starts.
func MakeCluster(t testing.TB, size int, options ...func(*Config)) *TestCluster {
	t.Helper()
	dir := t.TempDir()
	c := &TestCluster{t: t}
	for i := 0; i < size; i++ {
		cfg := TestConfig(dir, fmt.Sprintf("node%d", i+1))
		for _, o := range options {
			o(&cfg)
		}
		if i > 0 {
			cfg.Join, cfg.Bootstrap = c.Nodes[0].HTTPAddr(), false
		}
		n := StartTestNode(t, cfg)
		// Pin the ports the kernel chose, so a restart reuses them (the
		// Raft configuration in the log names these addresses). A
		// restart of the first node does not bootstrap again.
		cfg.RaftAddr, cfg.HTTPAddr, cfg.Bootstrap = n.RaftAddr(), n.HTTPAddr(), false
		c.Nodes = append(c.Nodes, n)
		c.Configs = append(c.Configs, cfg)
		if i == 0 {
			c.Leader(10 * time.Second)
		}
	}
	c.WaitVoters(10 * time.Second)
	want := CommandVersion
	for _, n := range c.Nodes {
		want = min(want, n.BuildVersion())
	}
	c.WaitClusterVersion(want, 10*time.Second)
	return c
}

// WaitClusterVersion waits up to timeout for every running node to hold
// cluster version v; it fails the test on timeout.
func (c *TestCluster) WaitClusterVersion(v uint64, timeout time.Duration) {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		done := true
		for _, n := range c.Nodes {
			done = done && (n == nil || n.ClusterVersion() == v)
		}
		if done {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.t.Fatalf("cluster version %d not reached within %s", v, timeout)
}

// WaitVoters waits up to timeout for the leader to hold every running
// node as a voter, and every running node to vote (joiners are learners
// until the leader promotes them); it fails the test on timeout.
func (c *TestCluster) WaitVoters(timeout time.Duration) {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		done := false
		for _, l := range c.Nodes {
			if l == nil || !l.IsLeader() {
				continue
			}
			voters := map[string]bool{}
			for _, v := range l.voters() {
				voters[v.ID] = v.Suffrage == "Voter"
			}
			done = true
			for _, n := range c.Nodes {
				done = done && (n == nil || voters[n.ID()] && n.learner.status() == nil)
			}
		}
		if done {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.t.Fatalf("not every node a voter within %s", timeout)
}

// Leader waits up to timeout for a running node to be leader and returns
// it; it fails the test on timeout.
func (c *TestCluster) Leader(timeout time.Duration) *Node {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		for _, n := range c.Nodes {
			if n != nil && n.IsLeader() {
				return n
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.t.Fatalf("no leader within %s", timeout)
	return nil
}

// Stop shuts node i down, keeping its data directory.
func (c *TestCluster) Stop(i int) {
	c.t.Helper()
	if n := c.Nodes[i]; n != nil {
		n.Shutdown()
		c.Nodes[i] = nil
	}
}

// Restart starts node i again from its data directory on its old ports.
func (c *TestCluster) Restart(i int) *Node {
	c.t.Helper()
	c.Stop(i)
	n := StartTestNode(c.t, c.Configs[i])
	c.Nodes[i] = n
	return n
}

// URLs returns the base URLs of every node, comma-separated (running or
// not), as a Client accepts them.
func (c *TestCluster) URLs() string {
	var u []string
	for _, cfg := range c.Configs {
		scheme := "http://"
		if cfg.TLS != nil {
			scheme = "https://"
		}
		u = append(u, scheme+cfg.HTTPAddr)
	}
	return strings.Join(u, ",")
}

// Client returns a client that knows every node.
func (c *TestCluster) Client() *Client {
	cl := NewClient(c.URLs())
	c.t.Cleanup(cl.Close)
	return cl
}

// Shutdown stops every node.
func (c *TestCluster) Shutdown() {
	for i := range c.Nodes {
		c.Stop(i)
	}
}

// TestPKI is a CA and a member certificate it signed for 127.0.0.1 and
// localhost, as PEM files and as a TLSConfig.
type TestPKI struct {
	CAFile, CertFile, KeyFile string
	TLS                       *TLSConfig
}

// NewTestPKI writes a new TestPKI named name into dir.
func NewTestPKI(t testing.TB, dir, name string) *TestPKI {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name + " CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: name + " member"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalECPrivateKey(key)
	p := &TestPKI{CAFile: filepath.Join(dir, name+"-ca.pem"), CertFile: filepath.Join(dir, name+".pem"), KeyFile: filepath.Join(dir, name+"-key.pem")}
	for f, b := range map[string][]byte{
		p.CAFile:   pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		p.CertFile: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		p.KeyFile:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
	} {
		if err := os.WriteFile(f, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if p.TLS, err = LoadTLS(p.CertFile, p.KeyFile, p.CAFile); err != nil {
		t.Fatal(err)
	}
	return p
}
