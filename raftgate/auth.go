package raftgate

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/shardproof/shardproof/internal/errcode"
)

// A gate token is a shared secret every member and client of one gate
// holds (Config.Token, Client.Token). With a token set:
//
//   - every HTTP request but GET /healthz and /readyz must carry it as
//     "Authorization: Bearer TOKEN", or is refused with UNAUTHENTICATED
//     (401) and changes nothing; members send it when they forward a
//     request, join, or probe a joiner;
//   - every Raft connection between members starts with a mutual
//     challenge-response (HMAC-SHA256 keyed by the token over both sides'
//     random nonces), so a process without the token can neither append
//     entries, vote, nor install a snapshot, and a member never talks Raft
//     to a process that does not hold it.
//
// The token authenticates; it does not encrypt. Run the gate on a network
// whose traffic you trust, or behind TLS.

// MinTokenLen is the shortest token accepted: 16 bytes (128 bits if random).
const MinTokenLen = 16

// maxTokenFile bounds what LoadToken reads.
const maxTokenFile = 4 << 10

// LoadToken reads a token file: its content with surrounding white space
// removed, at least MinTokenLen printable ASCII bytes with no spaces (it
// travels in an HTTP header). A file that is missing or holds no such
// token is USAGE.
func LoadToken(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, errcode.Wrap(errcode.Usage, err, "gate token file")
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxTokenFile+1))
	if err != nil {
		return nil, errcode.Wrap(errcode.Usage, err, "read gate token file %s", path)
	}
	if len(b) > maxTokenFile {
		return nil, errcode.New(errcode.Usage, "gate token file %s is larger than %d bytes", path, maxTokenFile)
	}
	tok := bytes.TrimSpace(b)
	if len(tok) < MinTokenLen {
		return nil, errcode.New(errcode.Usage, "gate token file %s holds %d bytes; a token is at least %d (e.g. `head -c 32 /dev/urandom | base64 > FILE`)", path, len(tok), MinTokenLen)
	}
	for _, c := range tok {
		if c <= ' ' || c >= 0x7f {
			return nil, errcode.New(errcode.Usage, "gate token file %s: a token is printable ASCII without spaces (e.g. base64)", path)
		}
	}
	return tok, nil
}

// bearer is the Authorization header value that carries tok.
func bearer(tok []byte) string { return "Bearer " + string(tok) }

// tokenMatches compares a request's Authorization header with tok in time
// independent of where they differ (both are hashed first, so of their
// lengths too).
func tokenMatches(header string, tok []byte) bool {
	got, ok := strings.CutPrefix(header, "Bearer ")
	if !ok {
		return false
	}
	a, b := sha256.Sum256([]byte(got)), sha256.Sum256(tok)
	return subtle.ConstantTimeCompare(a[:], b[:]) == 1
}

// requireToken wraps the API so that every request but the liveness and
// readiness probes (which kubelets and load balancers send without
// credentials, and which reveal nothing) carries the token.
func requireToken(tok []byte, log *slog.Logger, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && (r.URL.Path == "/healthz" || r.URL.Path == "/readyz") {
			h.ServeHTTP(w, r)
			return
		}
		if !tokenMatches(r.Header.Get("Authorization"), tok) {
			why := "carries no gate token"
			if r.Header.Get("Authorization") != "" {
				why = "carries another gate token"
			}
			log.Warn("request refused", "code", errcode.Unauthenticated, "method", r.Method, "path", truncate(r.URL.Path), "remote", r.RemoteAddr, "why", why)
			w.Header().Set("WWW-Authenticate", `Bearer realm="shardproof-gate"`)
			writeError(w, errcode.New(errcode.Unauthenticated, "the request %s: this gate requires its token (--gate-token-file or $SHARDPROOF_GATE_TOKEN_FILE)", why), nil)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// The Raft handshake, when a token is set. The dialer sends raftMagic and
// a random nonce; the acceptor answers with its own nonce and its MAC over
// both; the dialer checks it and answers with its MAC. Each side's MAC is
// keyed by the token and bound to its role, so neither can be replayed or
// reflected.
const (
	raftMagic = "SPRAFT1\n"
	nonceLen  = 32
)

// handshakeNanos bounds a Raft connection's token or TLS handshake (see
// handshakeTimeout; tests shorten it).
var handshakeNanos atomic.Int64

func init() { handshakeNanos.Store(int64(10 * time.Second)) }

// handshakeTimeout is how long a Raft connection's handshake may take.
func handshakeTimeout() time.Duration { return time.Duration(handshakeNanos.Load()) }

func handshakeMAC(tok []byte, role string, cn, sn []byte) []byte {
	m := hmac.New(sha256.New, tok)
	m.Write([]byte(raftMagic))
	m.Write([]byte(role))
	m.Write(cn)
	m.Write(sn)
	return m.Sum(nil)
}

// errHandshake is what a connection that failed the handshake returns.
var errHandshake = errors.New("raft connection failed the gate token handshake")

// authStream is a raft.StreamLayer whose connections must pass the token
// handshake before Raft reads or writes a byte.
type authStream struct {
	raft.StreamLayer
	tok []byte
	log *slog.Logger
}

func newAuthStream(s raft.StreamLayer, tok []byte, log *slog.Logger) raft.StreamLayer {
	return &authStream{StreamLayer: s, tok: tok, log: log}
}

// Accept returns at once: the acceptor's side of the handshake runs on
// the connection's first Read or Write, on raft's goroutine for that
// connection, so a peer that stalls the handshake stalls no one else.
func (s *authStream) Accept() (net.Conn, error) {
	c, err := s.StreamLayer.Accept()
	if err != nil {
		return nil, err
	}
	return &acceptedConn{Conn: c, s: s}, nil
}

// Dial runs the dialer's side of the handshake before returning.
func (s *authStream) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	c, err := s.StreamLayer.Dial(address, timeout)
	if err != nil {
		return nil, err
	}
	if timeout <= 0 || timeout > handshakeTimeout() {
		timeout = handshakeTimeout()
	}
	c.SetDeadline(time.Now().Add(timeout))
	if err := s.dialHandshake(c); err != nil {
		c.Close()
		s.log.Warn("raft connection refused", "code", errcode.Unauthenticated, "peer", string(address), "err", err)
		return nil, fmt.Errorf("%w to %s: %v", errHandshake, address, err)
	}
	c.SetDeadline(time.Time{})
	return c, nil
}

func (s *authStream) dialHandshake(c net.Conn) error {
	cn := make([]byte, nonceLen)
	rand.Read(cn)
	if _, err := c.Write(append([]byte(raftMagic), cn...)); err != nil {
		return err
	}
	buf := make([]byte, nonceLen+sha256.Size)
	if _, err := io.ReadFull(c, buf); err != nil {
		return fmt.Errorf("no handshake answer (does the member hold this gate's token?): %w", err)
	}
	sn, mac := buf[:nonceLen], buf[nonceLen:]
	if !hmac.Equal(mac, handshakeMAC(s.tok, "acceptor", cn, sn)) {
		return errors.New("the member answered with another token")
	}
	_, err := c.Write(handshakeMAC(s.tok, "dialer", cn, sn))
	return err
}

// acceptedConn is an accepted connection whose handshake runs once, on
// first use; until it succeeds no byte reaches Raft.
type acceptedConn struct {
	net.Conn
	s    *authStream
	once sync.Once
	err  error
}

func (c *acceptedConn) handshake() error {
	c.once.Do(func() {
		c.Conn.SetDeadline(time.Now().Add(handshakeTimeout()))
		c.err = c.acceptHandshake()
		if c.err != nil {
			c.s.log.Warn("raft connection refused", "code", errcode.Unauthenticated, "remote", c.Conn.RemoteAddr().String(), "err", c.err)
			c.err = fmt.Errorf("%w from %s: %v", errHandshake, c.Conn.RemoteAddr(), c.err)
			c.Conn.Close()
			return
		}
		c.Conn.SetDeadline(time.Time{})
	})
	return c.err
}

func (c *acceptedConn) acceptHandshake() error {
	hello := make([]byte, len(raftMagic)+nonceLen)
	if _, err := io.ReadFull(c.Conn, hello); err != nil {
		return fmt.Errorf("no handshake: %w", err)
	}
	if string(hello[:len(raftMagic)]) != raftMagic {
		return errors.New("the peer sent no handshake (a member started without the gate token?)")
	}
	cn := hello[len(raftMagic):]
	sn := make([]byte, nonceLen)
	rand.Read(sn)
	if _, err := c.Conn.Write(append(sn, handshakeMAC(c.s.tok, "acceptor", cn, sn)...)); err != nil {
		return err
	}
	mac := make([]byte, sha256.Size)
	if _, err := io.ReadFull(c.Conn, mac); err != nil {
		return fmt.Errorf("no handshake answer: %w", err)
	}
	if !hmac.Equal(mac, handshakeMAC(c.s.tok, "dialer", cn, sn)) {
		return errors.New("the peer holds another token")
	}
	return nil
}

func (c *acceptedConn) Read(p []byte) (int, error) {
	if err := c.handshake(); err != nil {
		return 0, err
	}
	return c.Conn.Read(p)
}

func (c *acceptedConn) Write(p []byte) (int, error) {
	if err := c.handshake(); err != nil {
		return 0, err
	}
	return c.Conn.Write(p)
}
