package raftgate

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
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

func TestLoadToken(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tok, err := LoadToken(write("ok", "  c2hhcmRwcm9vZi10ZXN0LXRva2Vu\n"))
	if err != nil || string(tok) != "c2hhcmRwcm9vZi10ZXN0LXRva2Vu" {
		t.Fatalf("LoadToken = %q, %v; want the file's content without white space", tok, err)
	}
	for name, content := range map[string]string{
		"short":   "tooshort\n",
		"space":   "a token with spaces in it\n",
		"control": "abcdefghijklmnop\x01qrstuvw",
		"large":   strings.Repeat("a", maxTokenFile+1),
	} {
		if _, err := LoadToken(write(name, content)); errcode.Of(err) != errcode.Usage {
			t.Errorf("%s: err = %v, want USAGE", name, err)
		}
	}
	if _, err := LoadToken(filepath.Join(dir, "missing")); errcode.Of(err) != errcode.Usage {
		t.Errorf("missing file: err = %v, want USAGE", err)
	}
}

// TestTokenGuardsTheAPI runs a 3-node cluster with a token: clients with
// it work through any member (followers forward with it), clients without
// it or with another are refused with UNAUTHENTICATED and change nothing,
// and the health probes stay open.
func TestTokenGuardsTheAPI(t *testing.T) {
	tok := []byte("0123456789abcdef-gate-token")
	c := MakeCluster(t, 3, func(cfg *Config) { cfg.Token = tok })
	leader := c.Leader(10 * time.Second)
	follower := followerOf(c, leader)
	ctx := ctxT(t, time.Minute)

	good := NewClient(follower.URL())
	good.Token = string(tok)
	t.Cleanup(good.Close)
	root := registerVerified(t, ctx, good, "r1", 2, 0, 0)
	if _, err := good.Publish(ctx, "main", root, 0, 0); err != nil {
		t.Fatalf("publish through a follower with the token: %v", err)
	}
	before := stateBytes(t, leader)

	for name, token := range map[string]string{"none": "", "another": "0123456789abcdef-other-token"} {
		cl := NewClient(follower.URL() + "," + leader.URL())
		cl.Token = token
		cl.RetryFor = -1
		t.Cleanup(cl.Close)
		_, err := cl.Publish(ctx, "main", root, 1, 0)
		if errcode.Of(err) != errcode.Unauthenticated {
			t.Errorf("%s token: publish err = %v, want UNAUTHENTICATED", name, err)
		}
		if _, err := cl.Alias(ctx, "main"); errcode.Of(err) != errcode.Unauthenticated {
			t.Errorf("%s token: read err = %v, want UNAUTHENTICATED", name, err)
		}
		if _, err := cl.Status(ctx); errcode.Of(err) != errcode.Unauthenticated {
			t.Errorf("%s token: status err = %v, want UNAUTHENTICATED", name, err)
		}
		if errcode.Of(err).Exit() != errcode.ExitUsage {
			t.Errorf("UNAUTHENTICATED exits %d, want usage", errcode.Of(err).Exit())
		}
	}
	if after := stateBytes(t, leader); !bytes.Equal(before, after) {
		t.Fatal("refused requests changed the state")
	}

	for path, want := range map[string]int{"/healthz": 200, "/readyz": 200, "/metrics": 401, "/v1/state": 401} {
		resp, err := http.Get(leader.URL() + path)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET %s without token: HTTP %d, want %d", path, resp.StatusCode, want)
		}
		if want == 401 && !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("GET %s: 401 without a Bearer challenge", path)
		}
	}
}

// TestJoinWithoutTheTokenIsRefused: a node started without the cluster's
// token (or with another) cannot join it, and the configuration is
// unchanged.
func TestJoinWithoutTheTokenIsRefused(t *testing.T) {
	tok := []byte("0123456789abcdef-gate-token")
	c := MakeCluster(t, 1, func(cfg *Config) { cfg.Token = tok })
	leader := c.Leader(10 * time.Second)
	for name, other := range map[string][]byte{"none": nil, "another": []byte("0123456789abcdef-other-token")} {
		cfg := TestConfig(t.TempDir(), "intruder-"+name)
		cfg.Bootstrap, cfg.Join, cfg.Token = false, leader.HTTPAddr(), other
		n := NewNode(cfg)
		err := n.Start(ctxT(t, 40*time.Second))
		n.Shutdown()
		if errcode.Of(err) != errcode.Unauthenticated {
			t.Errorf("%s token: join err = %v, want UNAUTHENTICATED", name, err)
		}
	}
	if v := leader.voters(); len(v) != 1 || v[0].ID != "node1" {
		t.Fatalf("voters after refused joins: %+v, want node1 alone", v)
	}
}

// TestRaftConnectionsNeedTheToken sends an AppendEntries with a far
// higher term to a member's Raft port from a transport without the
// token, which presents the cluster's identity (no secret: gate status
// shows it): with a token the member never reads it (its term and
// leadership are kept); without one the same request deposes the leader,
// which is what the handshake prevents.
func TestRaftConnectionsNeedTheToken(t *testing.T) {
	for _, withToken := range []bool{true, false} {
		var tok []byte
		if withToken {
			tok = []byte("0123456789abcdef-gate-token")
		}
		c := MakeCluster(t, 1, func(cfg *Config) { cfg.Token = tok })
		leader := c.Leader(10 * time.Second)
		term := leader.Raft().CurrentTerm()

		s, err := listenTCPStream("127.0.0.1:0", nil)
		if err != nil {
			t.Fatal(err)
		}
		err = rogueAppendEntries(identityStream(s, leader.ClusterID()), leader, term+100)
		got := leader.Raft().CurrentTerm()
		if withToken {
			if err == nil || got != term {
				t.Fatalf("with a token: rogue AppendEntries err = %v, term %d → %d; want an error and the term kept", err, term, got)
			}
			if !leader.IsLeader() {
				t.Fatal("with a token: the rogue request deposed the leader")
			}
		} else if err != nil || got <= term {
			t.Fatalf("without a token (control): err = %v, term %d → %d; want the rogue request to reach Raft", err, term, got)
		}
		c.Shutdown()
	}
}

// slowBody opens a raw connection to n and sends a POST /v1/commands
// that declares declared body bytes and sends sent of them, then waits:
// the node holds what it read until the connection closes.
func slowBody(t *testing.T, n *Node, declared, sent int) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", n.HTTPAddr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	head := fmt.Sprintf("POST /v1/commands HTTP/1.1\r\nHost: gate\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", declared)
	go c.Write(append([]byte(head), bytes.Repeat([]byte("a"), sent)...))
	return c
}

// postCode posts body to n's /v1/commands and returns the HTTP status and
// the error code.
func postCode(t *testing.T, n *Node, body []byte) (int, errcode.Code) {
	t.Helper()
	resp, err := http.Post(n.URL()+"/v1/commands", "application/json", bytes.NewReader(body))
	return answerCode(t, resp, err)
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// TestRequestMemoryBudget: request bodies in flight share one budget. A
// slow sender holding most of it makes a large body that does not fit
// answer GATE_UNAVAILABLE (which clients retry), small commands still
// pass, and the budget is whole again once the sender is gone.
func TestRequestMemoryBudget(t *testing.T) {
	cfg := TestConfig(t.TempDir(), "n1")
	cfg.RequestMemory = 1 << 20
	n := StartTestNode(t, cfg)
	waitLeader(t, n)
	ctx := ctxT(t, 30*time.Second)

	slow := slowBody(t, n, 700<<10, 600<<10)
	waitFor(t, "the slow body to be read", func() bool { return n.bodyBytes.Load() >= 600<<10 })
	large := append([]byte(`{"type":"register","x":"`), bytes.Repeat([]byte("a"), 400<<10)...)
	if st, code := postCode(t, n, large); st != http.StatusServiceUnavailable || code != errcode.GateUnavailable {
		t.Fatalf("a 400 KB body while another holds 700 KB of 1 MiB: HTTP %d %s, want 503 GATE_UNAVAILABLE", st, code)
	}
	cl := NewClient(n.URL())
	defer cl.Close()
	registerVerified(t, ctx, cl, "small", 2, 0, 0)

	slow.Close()
	waitFor(t, "the budget to come back", func() bool { return n.bodyBytes.Load() == 0 })
	waitFor(t, "a large body to be read", func() bool {
		// Now the body is read and decoded: a bad command, not a busy gate.
		st, code := postCode(t, n, large)
		return st != http.StatusServiceUnavailable && code == errcode.BadDocument
	})
}

// TestRequestMemoryBudgetCountsBytesReceived: a request that declares a
// large Content-Length and sends a few bytes holds about what it sent, not
// what it declared: connections sending headers only (eight of them held
// the default 256 MiB) must not refuse every write.
func TestRequestMemoryBudgetCountsBytesReceived(t *testing.T) {
	cfg := TestConfig(t.TempDir(), "n1")
	cfg.RequestMemory = 1 << 20
	n := StartTestNode(t, cfg)
	waitLeader(t, n)
	for range 3 {
		slowBody(t, n, 900<<10, 10)
	}
	// Give the node time to reach its handlers for the idle bodies.
	time.Sleep(300 * time.Millisecond)
	large := append([]byte(`{"type":"register","x":"`), bytes.Repeat([]byte("a"), 300<<10)...)
	if st, code := postCode(t, n, large); st == http.StatusServiceUnavailable || code != errcode.BadDocument {
		t.Fatalf("a 300 KB body while three requests declared 900 KB and sent 10 bytes each: HTTP %d %s, want BAD_DOCUMENT", st, code)
	}
}

// TestOversizedCommandRefusedUnread: a command whose Content-Length is
// over MaxCommandSize is refused with DOCUMENT_TOO_LARGE before any of its
// body is read. The node read 32 MiB of it first, from the request-memory
// budget, and then said the command was 33554433 bytes, whatever its size;
// a body of undeclared size over the cap no longer gets a size it does not
// have either.
func TestOversizedCommandRefusedUnread(t *testing.T) {
	n := StartTestNode(t, TestConfig(t.TempDir(), "n1"))
	waitLeader(t, n)
	c := slowBody(t, n, 40<<20, 0)
	c.SetReadDeadline(time.Now().Add(30 * time.Second)) // a regression fails, it does not hang
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer to a command declaring 40 MiB before its body: %v", err)
	}
	defer resp.Body.Close()
	var eb ErrorBody
	json.NewDecoder(resp.Body).Decode(&eb)
	if resp.StatusCode != http.StatusBadRequest || eb.Error.Code != errcode.DocumentTooLarge || !strings.Contains(eb.Error.Message, "41943040") {
		t.Fatalf("a command declaring 40 MiB: HTTP %d %+v, want 400 DOCUMENT_TOO_LARGE naming its size", resp.StatusCode, eb.Error)
	}

	// Chunked, so no size is declared: read up to the cap, then refused.
	req, _ := http.NewRequest(http.MethodPost, n.URL()+"/v1/commands", io.MultiReader(strings.NewReader(`{"type":"register","x":"`), io.LimitReader(zeros{}, MaxCommandSize)))
	req.ContentLength = -1
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	eb = ErrorBody{}
	json.NewDecoder(resp.Body).Decode(&eb)
	if resp.StatusCode != http.StatusBadRequest || eb.Error.Code != errcode.DocumentTooLarge || strings.Contains(eb.Error.Message, fmt.Sprint(MaxCommandSize+1)) {
		t.Fatalf("a chunked command over the cap: HTTP %d %+v, want 400 DOCUMENT_TOO_LARGE without a made-up size", resp.StatusCode, eb.Error)
	}
	if st, code := postCode(t, n, []byte(`{"type":"nope"}`)); st != http.StatusBadRequest || code != errcode.BadDocument {
		t.Fatalf("the node after two oversized commands: HTTP %d %s", st, code)
	}
}

// zeros reads as endless '0' bytes.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = '0'
	}
	return len(p), nil
}

// rogueAppendEntries sends leader, over stream s, an AppendEntries of a
// process that is no member, at term: one that reaches Raft deposes the
// leader.
func rogueAppendEntries(s raft.StreamLayer, leader *Node, term uint64) error {
	rogue := raft.NewNetworkTransport(s, 1, 2*time.Second, io.Discard)
	defer rogue.Close()
	var resp raft.AppendEntriesResponse
	return rogue.AppendEntries(raft.ServerID("node1"), raft.ServerAddress(leader.RaftAddr()), &raft.AppendEntriesRequest{
		RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("rogue"), Addr: []byte(rogue.LocalAddr())},
		Term:      term,
	}, &resp)
}

// identityStream is s presenting cluster identity id, without a token.
func identityStream(s raft.StreamLayer, id string) raft.StreamLayer {
	ids := newIdentity()
	ids.set(id, true)
	ids.markReady()
	return &authStream{StreamLayer: s, log: slog.New(slog.NewTextHandler(io.Discard, nil)), ids: ids}
}
