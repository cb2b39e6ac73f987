package raftgate

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
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

// The Raft handshakes. Each runs before Raft reads or writes a byte of
// the connection.
//
// The token handshake (raftMagic), the one of builds of version 2 and
// of a cluster below versionClusterID with a token: the dialer sends
// raftMagic and a random nonce; the acceptor answers with its own nonce
// and its MAC over both; the dialer checks it and answers with its MAC.
// Each side's MAC is keyed by the token and bound to its role, so neither
// can be replayed or reflected.
//
// The identity handshake (raftMagicID), from cluster version
// versionClusterID on, with or without a token: the dialer sends
// raftMagicID, a mode byte ('t' with a token, 'n' without), its cluster
// identity and, with a token, its nonce; the acceptor answers with its
// own identity (zeros while it knows none, or only a founder's not yet
// recorded) and, with a token, its nonce and MAC; with a token the dialer answers with its MAC. The MACs cover
// both identities, so a man in the middle cannot change either. Each
// side refuses the connection when the other's identity is known and is
// not its own (CLUSTER_ID_MISMATCH).
//
// Raw hashicorp/raft traffic starts with an RPC type, a byte from 0 to 4,
// never 'S': an acceptor tells it from a handshake by its first byte.
const (
	raftMagic   = "SPRAFT1\n"
	raftMagicID = "SPRAFT2\n"
	nonceLen    = 32
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

// identityMAC is the MAC of the identity handshake: over both nonces and
// both identities (the dialer's, did, and the acceptor's answer, aid).
func identityMAC(tok []byte, role string, did, aid, cn, sn []byte) []byte {
	m := hmac.New(sha256.New, tok)
	m.Write([]byte(raftMagicID))
	m.Write([]byte(role))
	m.Write(did)
	m.Write(aid)
	m.Write(cn)
	m.Write(sn)
	return m.Sum(nil)
}

// errNothingSent is an accepted connection closed before its first byte:
// no handshake was refused, so none is logged or counted. The leader's
// probe of a joiner (probeMember) does so whenever it dials raw Raft, in
// a cluster below versionClusterID without a token.
var errNothingSent = errors.New("the peer closed the connection before it sent a byte")

// errHandshake is what a connection that failed the handshake returns.
var errHandshake = errors.New("raft connection failed the gate handshake")

// refusal is a handshake's failure with its code: UNAUTHENTICATED (the
// token) or CLUSTER_ID_MISMATCH (the identity).
type refusal struct {
	code errcode.Code
	// key names the refusal among those logged (see identity.first).
	key string
	msg string
}

func (r *refusal) Error() string { return r.msg }

func refuse(code errcode.Code, key, format string, args ...any) error {
	return &refusal{code: code, key: key, msg: fmt.Sprintf(format, args...)}
}

// authStream is a raft.StreamLayer whose connections run the handshakes
// above before Raft reads or writes a byte.
type authStream struct {
	raft.StreamLayer
	// tok is the gate token, nil without one.
	tok []byte
	log *slog.Logger
	// ids is the member's cluster identity; nil for a build of version
	// 2 (tests, see Config.olderBuild), which runs the token handshake
	// alone and is installed only with a token.
	ids *identity
	// refused counts a refused connection by its code (nil: not).
	refused func(errcode.Code)
}

func newAuthStream(s raft.StreamLayer, tok []byte, log *slog.Logger) raft.StreamLayer {
	return &authStream{StreamLayer: s, tok: tok, log: log}
}

// say logs a refused connection, once per peer and reason, and counts it.
func (s *authStream) say(err error, peerKey, peerAttr, peer string) {
	code, key := errcode.Unauthenticated, ""
	if r := (*refusal)(nil); errors.As(err, &r) {
		code, key = r.code, r.key
	}
	if s.refused != nil {
		s.refused(code)
	}
	if s.ids != nil && !s.ids.first(peerKey+"|"+string(code)+"|"+key) {
		return
	}
	s.log.Warn("raft connection refused", "code", code, peerAttr, peer, "err", err)
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
	id, checked := "", false
	if s.ids != nil {
		id, checked = s.ids.current()
	}
	if !checked && s.tok == nil {
		// A cluster below versionClusterID without a token: raw Raft,
		// as builds of version 2 dial.
		return c, nil
	}
	if timeout <= 0 || timeout > handshakeTimeout() {
		timeout = handshakeTimeout()
	}
	c.SetDeadline(time.Now().Add(timeout))
	if checked {
		err = s.dialIdentity(c, id, string(address))
	} else {
		err = s.dialHandshake(c)
	}
	if err != nil {
		c.Close()
		s.say(err, string(address), "peer", string(address))
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
		return refuse(errcode.Unauthenticated, "token", "the member answered with another token")
	}
	_, err := c.Write(handshakeMAC(s.tok, "dialer", cn, sn))
	return err
}

// idBytes is the wire form of a cluster identity: zeros for none.
func idBytes(id string) []byte {
	b, err := hex.DecodeString(id)
	if err != nil || len(b) != clusterIDLen {
		return make([]byte, clusterIDLen)
	}
	return b
}

// idString is idBytes' inverse: "" for zeros.
func idString(b []byte) string {
	if bytes.Equal(b, make([]byte, clusterIDLen)) {
		return ""
	}
	return hex.EncodeToString(b)
}

func (s *authStream) dialIdentity(c net.Conn, id, address string) error {
	did := idBytes(id)
	hello := append([]byte(raftMagicID), 'n')
	var cn []byte
	if s.tok != nil {
		hello[len(raftMagicID)] = 't'
		cn = make([]byte, nonceLen)
		rand.Read(cn)
	}
	hello = append(append(hello, did...), cn...)
	if _, err := c.Write(hello); err != nil {
		return err
	}
	n := clusterIDLen
	if s.tok != nil {
		n += nonceLen + sha256.Size
	}
	buf := make([]byte, n)
	if _, err := io.ReadFull(c, buf); err != nil {
		return fmt.Errorf("no handshake answer (is the member's token setting this gate's? a member of this cluster's version runs a build of version %d or later): %w", versionClusterID, err)
	}
	aid := buf[:clusterIDLen]
	if s.tok != nil {
		sn, mac := buf[clusterIDLen:clusterIDLen+nonceLen], buf[clusterIDLen+nonceLen:]
		if !hmac.Equal(mac, identityMAC(s.tok, "acceptor", did, aid, cn, sn)) {
			return refuse(errcode.Unauthenticated, "token", "the member answered with another token")
		}
		// Sent whatever the identities: the acceptor, which checks the
		// token first, says why it refuses too.
		if _, err := c.Write(identityMAC(s.tok, "dialer", did, aid, cn, sn)); err != nil {
			return err
		}
	}
	if theirs := idString(aid); theirs != "" && theirs != id {
		return refuse(errcode.ClusterIDMismatch, theirs, "the member at %s belongs to gate cluster %s, this member to %s: it is no member of this cluster (a member of the cluster a backup was taken from, or of one founded by mistake?)", address, theirs, id)
	}
	return nil
}

// acceptedConn is an accepted connection whose handshake runs once, on
// first use; until it succeeds no byte reaches Raft.
type acceptedConn struct {
	net.Conn
	s    *authStream
	once sync.Once
	err  error
	// pre is what the handshake read of raw Raft traffic (its first
	// byte), which Read returns first.
	pre []byte
}

func (c *acceptedConn) handshake() error {
	c.once.Do(func() {
		// The TLS handshake under this one first: it sets a deadline of
		// its own and clears it when done, which would clear this one's
		// if it ran on this handshake's first read, and leave a peer
		// that completes it and sends nothing holding raft's goroutine
		// for the connection, and the descriptor, for good.
		if h, ok := c.Conn.(interface{ handshake() error }); ok {
			if err := h.handshake(); errors.Is(err, io.EOF) {
				c.err = errNothingSent
			} else if err != nil {
				c.err = fmt.Errorf("no handshake: %w", err)
			}
		}
		if c.err == nil {
			c.Conn.SetDeadline(time.Now().Add(handshakeTimeout()))
			if c.s.ids == nil {
				c.err = c.acceptHandshake(nil)
			} else {
				c.err = c.acceptAny()
			}
		}
		if c.err != nil {
			remote := c.Conn.RemoteAddr().String()
			host, _, _ := net.SplitHostPort(remote)
			if !errors.Is(c.err, errNothingSent) {
				c.s.say(c.err, host, "remote", remote)
			}
			c.err = fmt.Errorf("%w from %s: %v", errHandshake, c.Conn.RemoteAddr(), c.err)
			c.Conn.Close()
			return
		}
		c.Conn.SetDeadline(time.Time{})
	})
	return c.err
}

// acceptHandshake runs the acceptor's side of the token handshake; magic
// is what of raftMagic was read already.
func (c *acceptedConn) acceptHandshake(magic []byte) error {
	hello := make([]byte, len(raftMagic)+nonceLen)
	copy(hello, magic)
	if _, err := io.ReadFull(c.Conn, hello[len(magic):]); err != nil {
		return fmt.Errorf("no handshake: %w", err)
	}
	if string(hello[:len(raftMagic)]) != raftMagic {
		return refuse(errcode.Unauthenticated, "none", "the peer sent no handshake (a member started without the gate token?)")
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
		return refuse(errcode.Unauthenticated, "token", "the peer holds another token")
	}
	return nil
}

// acceptAny runs the acceptor's side of whichever handshake the peer
// starts, or none, as the member's identity allows.
func (c *acceptedConn) acceptAny() error {
	select {
	case <-c.s.ids.ready:
	case <-time.After(handshakeTimeout()):
		return errors.New("the member did not finish starting")
	}
	id, checked := c.s.ids.current()
	if !checked {
		// A founder's identity before the raise that records it: the
		// raise may record another (drawn by another member, leading),
		// which this member learns from the leader's connections, so
		// it neither refuses nor answers with its own.
		id = ""
	}
	first := make([]byte, 1)
	if _, err := io.ReadFull(c.Conn, first); err != nil {
		if errors.Is(err, io.EOF) {
			return errNothingSent
		}
		return fmt.Errorf("no handshake: %w", err)
	}
	if first[0] != raftMagic[0] {
		switch {
		case c.s.tok != nil:
			return refuse(errcode.Unauthenticated, "none", "the peer sent no handshake (a member started without the gate token?)")
		case checked:
			return refuse(errcode.ClusterIDMismatch, "none", "the peer presented no cluster identity, and this member's cluster (%s) is at version %d or above, where every member does: a member of another cluster below that version (the one a backup was taken from?), or a build before it", id, versionClusterID)
		}
		c.pre = first
		return nil
	}
	magic := make([]byte, len(raftMagic))
	magic[0] = first[0]
	if _, err := io.ReadFull(c.Conn, magic[1:]); err != nil {
		return fmt.Errorf("no handshake: %w", err)
	}
	switch string(magic) {
	case raftMagic:
		switch {
		case c.s.tok == nil:
			return refuse(errcode.Unauthenticated, "token", "the peer runs the gate token handshake, and this member has no token")
		case checked:
			return refuse(errcode.ClusterIDMismatch, "none", "the peer presented no cluster identity, and this member's cluster (%s) is at version %d or above, where every member does: a member of another cluster below that version (the one a backup was taken from?), or a build before it", id, versionClusterID)
		}
		return c.acceptHandshake(magic)
	case raftMagicID:
		return c.acceptIdentity(id)
	}
	return refuse(errcode.Unauthenticated, "unknown", "the peer sent no handshake this build knows")
}

func (c *acceptedConn) acceptIdentity(id string) error {
	n := 1 + clusterIDLen
	if c.s.tok != nil {
		n += nonceLen
	}
	hello := make([]byte, n)
	if _, err := io.ReadFull(c.Conn, hello); err != nil {
		return fmt.Errorf("no handshake: %w", err)
	}
	switch mode := hello[0]; {
	case mode == 't' && c.s.tok == nil:
		return refuse(errcode.Unauthenticated, "token", "the peer holds a gate token, and this member has none")
	case mode == 'n' && c.s.tok != nil:
		return refuse(errcode.Unauthenticated, "none", "the peer holds no gate token (a member started without it?)")
	case mode != 't' && mode != 'n':
		return refuse(errcode.Unauthenticated, "unknown", "the peer sent no handshake this build knows")
	}
	did, aid := hello[1:1+clusterIDLen], idBytes(id)
	theirs := idString(did)
	mismatch := func() error {
		return refuse(errcode.ClusterIDMismatch, theirs, "the peer belongs to gate cluster %s, this member to %s: it is no member of this cluster (a member of the cluster a backup was taken from, or of one founded by mistake?)", theirs, id)
	}
	if c.s.tok == nil {
		// The answer goes first, so the dialer can say why it is
		// refused: an identity is no secret.
		if _, err := c.Conn.Write(aid); err != nil {
			return err
		}
		if id != "" && theirs != id {
			return mismatch()
		}
		return nil
	}
	cn := hello[1+clusterIDLen:]
	sn := make([]byte, nonceLen)
	rand.Read(sn)
	if _, err := c.Conn.Write(append(append(aid, sn...), identityMAC(c.s.tok, "acceptor", did, aid, cn, sn)...)); err != nil {
		return err
	}
	mac := make([]byte, sha256.Size)
	if _, err := io.ReadFull(c.Conn, mac); err != nil {
		return fmt.Errorf("no handshake answer: %w", err)
	}
	if !hmac.Equal(mac, identityMAC(c.s.tok, "dialer", did, aid, cn, sn)) {
		return refuse(errcode.Unauthenticated, "token", "the peer holds another token")
	}
	if id != "" && theirs != id {
		return mismatch()
	}
	return nil
}

func (c *acceptedConn) Read(p []byte) (int, error) {
	if err := c.handshake(); err != nil {
		return 0, err
	}
	if len(c.pre) > 0 && len(p) > 0 {
		n := copy(p, c.pre)
		c.pre = c.pre[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

func (c *acceptedConn) Write(p []byte) (int, error) {
	if err := c.handshake(); err != nil {
		return 0, err
	}
	return c.Conn.Write(p)
}
