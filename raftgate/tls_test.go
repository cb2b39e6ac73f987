package raftgate

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/shardproof/shardproof/internal/errcode"
)

// TestTLSCluster runs three members on TLS: they join, probe and forward
// over HTTPS, a client that trusts the gate's CA writes through a
// follower, and a client that does not, or speaks plain HTTP, is refused.
func TestTLSCluster(t *testing.T) {
	pki := NewTestPKI(t, t.TempDir(), "gate")
	c := MakeCluster(t, 3, func(cfg *Config) { cfg.TLS = pki.TLS })
	leader := c.Leader(10 * time.Second)
	follower := followerOf(c, leader)
	if follower.URL()[:8] != "https://" {
		t.Fatalf("URL %s, want https", follower.URL())
	}
	ctx := ctxT(t, time.Minute)
	cl := NewClient(follower.URL())
	cl.UseTLS(&tls.Config{RootCAs: pki.TLS.CAs})
	t.Cleanup(cl.Close)
	root := registerVerified(t, ctx, cl, "r1", 2, 0, 0)
	if _, err := cl.Publish(ctx, "main", root, 0, 0); err != nil {
		t.Fatalf("publish through a follower over TLS: %v", err)
	}

	untrusting := NewClient(follower.URL())
	untrusting.RetryFor = -1
	t.Cleanup(untrusting.Close)
	if _, err := untrusting.Status(ctx); errcode.Of(err) != errcode.Usage {
		t.Fatalf("a client that does not trust the gate's CA: %v, want USAGE", err)
	}
	caClient := NewClient(follower.URL())
	caClient.UseCAFile(pki.CAFile)
	t.Cleanup(caClient.Close)
	if st, err := caClient.Status(ctx); err != nil || st.ID != follower.ID() {
		t.Fatalf("a client with the CA file: %+v %v", st, err)
	}
	resp, err := http.Get("http://" + follower.HTTPAddr() + "/v1/status")
	if err == nil {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Fatal("plain HTTP got an answer from a TLS gate")
		}
	}
}

// TestRaftConnectionsNeedAMemberCertificate: AppendEntries with a far
// higher term, sent over plain TCP or over TLS with a certificate another
// CA signed, never reaches Raft: the leader keeps its term.
func TestRaftConnectionsNeedAMemberCertificate(t *testing.T) {
	dir := t.TempDir()
	pki, stranger := NewTestPKI(t, dir, "gate"), NewTestPKI(t, dir, "stranger")
	c := MakeCluster(t, 1, func(cfg *Config) { cfg.TLS = pki.TLS })
	leader := c.Leader(10 * time.Second)
	term := leader.Raft().CurrentTerm()

	// The stranger trusts the gate's CA but presents its own certificate.
	strangerClient := stranger.TLS.client()
	strangerClient.RootCAs = pki.TLS.CAs
	for name, wrap := range map[string]func(raft.StreamLayer) raft.StreamLayer{
		"plain TCP": func(s raft.StreamLayer) raft.StreamLayer { return s },
		"another CA's cert": func(s raft.StreamLayer) raft.StreamLayer {
			return &tlsStream{StreamLayer: s, server: stranger.TLS.raftServer(), client: strangerClient}
		},
	} {
		s, err := listenTCPStream("127.0.0.1:0", nil)
		if err != nil {
			t.Fatal(err)
		}
		err = rogueAppendEntries(wrap(s), leader, term+100)
		if err == nil || leader.Raft().CurrentTerm() != term || !leader.IsLeader() {
			t.Fatalf("%s: rogue AppendEntries err = %v, term %d → %d; want an error and the term kept", name, err, term, leader.Raft().CurrentTerm())
		}
	}
}

func TestLoadTLSRefusals(t *testing.T) {
	dir := t.TempDir()
	pki := NewTestPKI(t, dir, "gate")
	junk := filepath.Join(dir, "junk")
	os.WriteFile(junk, []byte("not pem\n"), 0o600)
	for name, args := range map[string][3]string{
		"missing cert": {filepath.Join(dir, "nope"), pki.KeyFile, pki.CAFile},
		"key mismatch": {pki.CertFile, pki.CAFile, pki.CAFile},
		"junk CA":      {pki.CertFile, pki.KeyFile, junk},
		"missing CA":   {pki.CertFile, pki.KeyFile, filepath.Join(dir, "nope")},
	} {
		if _, err := LoadTLS(args[0], args[1], args[2]); errcode.Of(err) != errcode.Usage {
			t.Errorf("%s: %v, want USAGE", name, err)
		}
	}
}

// silentRaftPeer runs silent against a one-member cluster on TLS of pki,
// once without a token and once with one, with a handshake timeout of a
// second: silent gets the case's name, the member and a TCP connection to
// its Raft port, which it closes.
func silentRaftPeer(t *testing.T, pki *TestPKI, silent func(name string, leader *Node, conn net.Conn)) {
	t.Helper()
	// A second, not 300 ms: a test's own TLS handshake must complete
	// within it, and under load it may not have.
	old := handshakeNanos.Swap(int64(time.Second))
	t.Cleanup(func() { handshakeNanos.Store(old) })
	for name, tok := range map[string][]byte{"TLS": nil, "TLS and token": []byte("0123456789abcdef-gate-token")} {
		c := MakeCluster(t, 1, func(cfg *Config) { cfg.TLS, cfg.Token = pki.TLS, tok })
		leader := c.Leader(10 * time.Second)
		conn, err := net.Dial("tcp", leader.RaftAddr())
		if err != nil {
			t.Fatal(err)
		}
		silent(name, leader, conn)
		c.Shutdown()
	}
}

// A peer that opens a Raft connection to a TLS member and sends nothing is
// disconnected once the handshake timeout passes, with or without a token.
func TestSilentRaftPeerIsDisconnected(t *testing.T) {
	silentRaftPeer(t, NewTestPKI(t, t.TempDir(), "gate"), func(name string, _ *Node, conn net.Conn) {
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		start := time.Now()
		_, err := io.ReadAll(conn)
		conn.Close()
		if err != nil || time.Since(start) > 5*time.Second {
			t.Errorf("%s: a silent peer stayed connected %s (%v), want it closed after the handshake timeout", name, time.Since(start), err)
		}
	})
}

// A peer that completes the TLS handshake of a Raft connection and then
// sends nothing is disconnected once the handshake timeout passes too:
// the gate's handshake (identity, token) keeps its deadline though the TLS
// handshake under it, which ran on its first read, cleared its own.
func TestSilentRaftPeerAfterTLSIsDisconnected(t *testing.T) {
	pki := NewTestPKI(t, t.TempDir(), "gate")
	silentRaftPeer(t, pki, func(name string, leader *Node, raw net.Conn) {
		cfg := pki.TLS.client()
		cfg.ServerName, _, _ = net.SplitHostPort(leader.RaftAddr())
		conn := tls.Client(raw, cfg)
		conn.SetDeadline(time.Now().Add(10 * time.Second))
		if err := conn.Handshake(); err != nil {
			t.Fatalf("%s: TLS handshake: %v", name, err)
		}
		start := time.Now()
		_, err := io.ReadAll(conn)
		conn.Close()
		if ne := net.Error(nil); errors.As(err, &ne) && ne.Timeout() || time.Since(start) > 5*time.Second {
			t.Errorf("%s: a peer silent after TLS stayed connected %s (%v), want it closed after the handshake timeout", name, time.Since(start), err)
		}
	})
}

// A client that speaks plain HTTP to a gate serving HTTPS is told so,
// USAGE naming the https:// URL to give, not only "HTTP 400: not an
// answer of the gate's API", which read as if no gate listened there.
func TestPlainHTTPToATLSGateSaysHTTPS(t *testing.T) {
	pki := NewTestPKI(t, t.TempDir(), "gate")
	cfg := TestConfig(t.TempDir(), "g")
	cfg.TLS = pki.TLS
	n := StartTestNode(t, cfg)
	plain := NewClient("http://" + n.HTTPAddr())
	plain.RetryFor = -1
	t.Cleanup(plain.Close)
	_, err := plain.Status(ctxT(t, 30*time.Second))
	if errcode.Of(err) != errcode.Usage || !strings.Contains(err.Error(), "this gate serves HTTPS: give its URL as https://"+n.HTTPAddr()) {
		t.Fatalf("plain HTTP to a TLS gate: %v, want USAGE naming its https:// URL", err)
	}
}
