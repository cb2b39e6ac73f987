package raftgate

import (
	"bytes"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/shardproof/shardproof/internal/errcode"
)

// refusedConns is n's count of Raft connections refused with code, as
// its registry holds it (/metrics needs the token where there is one).
func refusedConns(t *testing.T, n *Node, code errcode.Code) int {
	t.Helper()
	return int(codeCount(t, n, "shardproof_gate_raft_connections_refused_total", string(code)))
}

// fileClusterID is the identity n's data directory holds.
func fileClusterID(t *testing.T, cfg Config) string {
	t.Helper()
	id, err := readClusterIDFile(cfg.DataDir)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// sameClusterID checks that every running member of c knows id, in
// memory, in its state and in its data directory.
func sameClusterID(t *testing.T, c *TestCluster, id string) {
	t.Helper()
	for i, n := range c.Nodes {
		if n == nil {
			continue
		}
		var state string
		n.FSM().Read(func(s *State) { state = s.ClusterID })
		if got, file := n.ClusterID(), fileClusterID(t, c.Configs[i]); got != id || state != id || file != id {
			t.Fatalf("%s: cluster ID %q, state %q, file %q; want %q", n.ID(), got, state, file, id)
		}
	}
}

// TestRestoredClusterRefusesTheOldOne founds a new cluster on a backup
// at the Raft address of a member of the old cluster, every member of
// which is down (so the restore's check of running members passes), and
// then brings two old members back on their directories: a majority of
// their old configuration, which names the restored node's address. They
// elect a leader, which sends the restored node its entries at a higher
// term: hashicorp/raft follows whoever does, and the restored node gave
// up its leadership, its new state and its configuration for the old
// cluster's. Now the old members' connections carry another cluster's
// identity (a cluster at version 3) or none (builds of version 2), and
// the restored node refuses them: it keeps its leadership, its term, its
// state and its configuration, counts every refusal, and logs them once.
func TestRestoredClusterRefusesTheOldOne(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []func(*Config)
		code errcode.Code
	}{
		{"old cluster at version 3", nil, errcode.ClusterIDMismatch},
		{"old cluster of version 2 builds", []func(*Config){OlderBuild(2)}, errcode.ClusterIDMismatch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := ctxT(t, 2*time.Minute)
			old := MakeCluster(t, 3, tc.opts...)
			cl := old.Client()
			publishedRelease(t, ctx, cl, "r1", 2)
			backup, err := cl.StateBytes(ctx)
			if err != nil {
				t.Fatal(err)
			}
			oldID := old.Nodes[0].ClusterID()
			old.Shutdown()

			cfg := old.Configs[0]
			cfg.DataDir = filepath.Join(t.TempDir(), "restored")
			cfg.Restore, cfg.Bootstrap, cfg.Join, cfg.olderBuild = backup, true, "", nil
			logs := &syncBuf{}
			cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
			n := StartTestNode(t, cfg)
			waitLeader(t, n)
			id := n.ClusterID()
			if id == "" || id == oldID {
				t.Fatalf("restored cluster ID %q, the old cluster's %q: want a new one", id, oldID)
			}
			nc := NewClient(n.URL())
			defer nc.Close()
			r2 := registerVerified(t, ctx, nc, "r2", 2, 0, 0)
			if _, err := nc.Publish(ctx, "main", r2, 1, 0); err != nil {
				t.Fatal(err)
			}
			before, term := commandState(t, n), n.Raft().CurrentTerm()

			old.Restart(1)
			old.Restart(2)
			var oldLeader *Node
			for deadline := time.Now().Add(20 * time.Second); oldLeader == nil; time.Sleep(20 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("the old members elected no leader")
				}
				for _, o := range old.Nodes[1:] {
					if o.IsLeader() {
						oldLeader = o
					}
				}
			}
			// The old leader sends the restored node's address its
			// heartbeats and entries: wait for several refusals (or the
			// restored node taken over).
			waitFor(t, "the old leader's connections refused", func() bool {
				return refusedConns(t, n, tc.code) >= 5 || !n.IsLeader() || n.Raft().CurrentTerm() != term
			})

			if !n.IsLeader() || n.Raft().CurrentTerm() != term {
				t.Fatalf("the restored node: leader %v, term %d→%d; want its leadership and term kept", n.IsLeader(), term, n.Raft().CurrentTerm())
			}
			if after := commandState(t, n); !bytes.Equal(after, before) {
				t.Fatalf("the restored state changed:\nbefore %s\nafter  %s", before, after)
			}
			if v := n.voters(); len(v) != 1 || v[0].ID != cfg.ID || v[0].RaftAddr != n.RaftAddr() {
				t.Fatalf("the restored node's configuration: %+v, want itself alone", v)
			}
			if n.ClusterID() != id || fileClusterID(t, cfg) != id {
				t.Fatalf("the restored node's cluster ID %q (file %q), want %q", n.ClusterID(), fileClusterID(t, cfg), id)
			}
			if got := strings.Count(logs.String(), "raft connection refused"); got != 1 || !strings.Contains(logs.String(), "code="+string(tc.code)) {
				t.Fatalf("refusals logged %d times (want once, with %s):\n%s", got, tc.code, logs)
			}
			if tc.opts == nil && refusedConns(t, oldLeader, errcode.ClusterIDMismatch) == 0 {
				t.Fatal("the old leader counted no refused connection: it should refuse the restored node's identity too")
			}
		})
	}
}

// A member's identity follows it: every member of a cluster holds the
// founder's, in its state and data directory; a member restarted knows
// it from its directory when Start returns, a joiner when its join
// returns, and a member recovered alone (--recover) keeps it, since it
// is the same cluster. A connection that presents another identity, or
// none, is refused, and the leader keeps its term.
func TestClusterIDFollowsMembers(t *testing.T) {
	ctx := ctxT(t, 2*time.Minute)
	c := MakeCluster(t, 3, func(cfg *Config) { cfg.SnapshotThreshold = 4 })
	id := c.Nodes[0].ClusterID()
	if checkClusterID(id) != nil {
		t.Fatalf("the founder's cluster ID %q", id)
	}
	sameClusterID(t, c, id)
	cl := c.Client()
	for i := range 6 {
		registerVerified(t, ctx, cl, "r"+strconv.Itoa(i), 1, 0, 0)
	}
	waitApplied(t, c.Nodes)
	for _, n := range c.Nodes {
		if err := n.Raft().Snapshot().Error(); err != nil {
			t.Fatalf("snapshot of %s: %v", n.ID(), err)
		}
	}
	st, err := NewClient(c.Nodes[1].URL()).Status(ctx)
	if err != nil || st.ClusterID != id {
		t.Fatalf("status: cluster ID %q, %v; want %q", st.ClusterID, err, id)
	}

	// A restarted member knows it before it hears from the leader.
	if n := c.Restart(1); n.ClusterID() != id {
		t.Fatalf("restarted member's cluster ID %q, want %q", n.ClusterID(), id)
	}
	// A joiner learns it when it joins.
	jc := TestConfig(t.TempDir(), "node4")
	jc.Bootstrap, jc.Join = false, c.Nodes[0].HTTPAddr()
	j := StartTestNode(t, jc)
	if j.ClusterID() != id || fileClusterID(t, jc) != id {
		t.Fatalf("joiner's cluster ID %q (file %q), want %q", j.ClusterID(), fileClusterID(t, jc), id)
	}
	registerVerified(t, ctx, cl, "after-join", 1, 0, 0)
	c.Nodes, c.Configs = append(c.Nodes, j), append(c.Configs, jc)
	memberDigests(t, c)
	sameClusterID(t, c, id)

	// Another cluster's identity, or none, is refused.
	leader := c.Leader(10 * time.Second)
	term := leader.Raft().CurrentTerm()
	for name, wrap := range map[string]func(raft.StreamLayer) raft.StreamLayer{
		"another": func(s raft.StreamLayer) raft.StreamLayer { return identityStream(s, newClusterID()) },
		"none":    func(s raft.StreamLayer) raft.StreamLayer { return s },
		"zero":    func(s raft.StreamLayer) raft.StreamLayer { return identityStream(s, strings.Repeat("0", 32)) },
		"token v1": func(s raft.StreamLayer) raft.StreamLayer {
			return newAuthStream(s, []byte("0123456789abcdef-gate-token"), slog.Default())
		},
	} {
		s, err := listenTCPStream("127.0.0.1:0", nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := rogueAppendEntries(wrap(s), leader, term+100); err == nil {
			t.Errorf("%s identity: the rogue AppendEntries was answered", name)
		}
		s.Close()
	}
	if got := leader.Raft().CurrentTerm(); got != term || !leader.IsLeader() {
		t.Fatalf("after the rogue requests: term %d→%d, leader %v", term, got, leader.IsLeader())
	}
	if refusedConns(t, leader, errcode.ClusterIDMismatch) < 3 {
		t.Fatalf("refusals counted: %d, want 3 or more", refusedConns(t, leader, errcode.ClusterIDMismatch))
	}

	// --recover keeps it.
	want := stateBytes(t, leader)
	var survivor int
	for i, n := range c.Nodes {
		if n == leader {
			survivor = i
		}
	}
	c.Shutdown()
	cfg := c.Configs[survivor]
	cfg.Recover = true
	n := StartTestNode(t, cfg)
	waitLeader(t, n)
	if n.ClusterID() != id || !bytes.Equal(stateBytes(t, n), want) {
		t.Fatalf("recovered member: cluster ID %q, want %q (state kept: %v)", n.ClusterID(), id, bytes.Equal(stateBytes(t, n), want))
	}
	registerVerified(t, ctx, NewClient(n.URL()), "after-recover", 1, 0, 0)
}

// A damaged identity file is refused with its code, naming the way out,
// and no panic; a file left in a directory without state (a joiner's
// whose join failed) is dropped, not taken for the cluster's.
func TestClusterIDFileRefusals(t *testing.T) {
	c := MakeCluster(t, 1)
	cfg := c.Configs[0]
	c.Stop(0)
	p := filepath.Join(cfg.DataDir, clusterIDFile)
	for _, bad := range []string{"", "xyz", strings.Repeat("0", 32), strings.Repeat("A", 32), strings.Repeat("a", 4096)} {
		if err := os.WriteFile(p, []byte(bad), 0o644); err != nil {
			t.Fatal(err)
		}
		n := NewNode(cfg)
		err := n.Start(ctxT(t, 10*time.Second))
		n.Shutdown()
		if errcode.Of(err) != errcode.BadDocument || !strings.Contains(err.Error(), "delete it") {
			t.Errorf("identity file %.20q: %v, want BAD_DOCUMENT naming the way out", bad, err)
		}
	}
	os.Remove(p)
	n := c.Restart(0)
	waitLeader(t, n)
	// Relearnt from the state it replays.
	waitFor(t, "the cluster ID relearnt", func() bool { return n.ClusterID() != "" && fileClusterID(t, cfg) == n.ClusterID() })

	jc := TestConfig(t.TempDir(), "node2")
	jc.Bootstrap, jc.Join = false, n.HTTPAddr()
	os.MkdirAll(jc.DataDir, 0o755)
	stale := newClusterID()
	if err := writeClusterIDFile(jc.DataDir, stale); err != nil {
		t.Fatal(err)
	}
	j := StartTestNode(t, jc)
	if j.ClusterID() != n.ClusterID() {
		t.Fatalf("joiner over a stale identity file: %q, want the cluster's %q", j.ClusterID(), n.ClusterID())
	}
}

// Handshake bytes from no member are refused, whatever they hold, and
// change nothing: a short hello, an unknown mode, an unknown magic.
func TestIdentityHandshakeGarbage(t *testing.T) {
	c := MakeCluster(t, 1)
	leader := c.Leader(10 * time.Second)
	term := leader.Raft().CurrentTerm()
	for _, hello := range []string{"S", "SPRAFT2\n", "SPRAFT2\nx" + strings.Repeat("\x01", 16), "SPRAFT9\n", "SPRAFT2\nt" + strings.Repeat("\x01", 48)} {
		conn, err := net.Dial("tcp", leader.RaftAddr())
		if err != nil {
			t.Fatal(err)
		}
		conn.Write([]byte(hello))
		conn.(*net.TCPConn).CloseWrite()
		conn.SetReadDeadline(time.Now().Add(15 * time.Second))
		b, _ := io.ReadAll(conn)
		conn.Close()
		if len(b) > 0 {
			t.Errorf("hello %q answered %q", hello, b)
		}
	}
	if got := leader.Raft().CurrentTerm(); got != term || !leader.IsLeader() {
		t.Fatalf("term %d→%d, leader %v", term, got, leader.IsLeader())
	}
}

// A mixed cluster (node1, its founder, a build of version 2, which
// neither sends nor reads the identity handshake) stays at version 2 and
// replicates, with and without a token, with node1 or another member
// leading: members dial node1 as version 2 builds do, and accept what it
// sends. No member has an identity, and a connection without one is
// accepted. Once node1 is upgraded the leader raises the version to 3,
// which draws the identity every member then holds, and a connection
// without it is refused.
func TestClusterIDTurnsOnWithVersion3(t *testing.T) {
	for _, withToken := range []bool{false, true} {
		t.Run("token="+strconv.FormatBool(withToken), func(t *testing.T) {
			ctx := ctxT(t, 2*time.Minute)
			var tok []byte
			if withToken {
				tok = []byte("0123456789abcdef-gate-token")
			}
			c := MakeCluster(t, 3, func(cfg *Config) {
				cfg.Token = tok
				if cfg.ID == "node1" {
					OlderBuild(2)(cfg)
				}
			})
			cl := c.Client()
			cl.Token = string(tok)
			if v := c.Nodes[0].ClusterVersion(); v != 2 {
				t.Fatalf("mixed cluster at version %d, want 2", v)
			}
			registerVerified(t, ctx, cl, "r1", 2, 0, 0)
			memberDigests(t, c)
			for _, n := range c.Nodes {
				if n.ClusterID() != "" {
					t.Fatalf("%s has cluster ID %q at version 2", n.ID(), n.ClusterID())
				}
			}
			// The leader is node1 or another: each sends entries to the
			// others as they can read them.
			for deadline := time.Now().Add(20 * time.Second); c.Nodes[0].IsLeader(); {
				if time.Now().After(deadline) {
					t.Fatal("node1 kept the leadership")
				}
				if err := c.Nodes[0].Raft().LeadershipTransfer().Error(); err != nil {
					t.Logf("leadership transfer: %v", err)
				}
				time.Sleep(100 * time.Millisecond)
			}
			registerVerified(t, ctx, cl, "r2", 2, 0, 0)
			memberDigests(t, c)
			if !withToken {
				// Raw Raft traffic is accepted below version 3.
				leader := c.Leader(10 * time.Second)
				term := leader.Raft().CurrentTerm()
				s, err := listenTCPStream("127.0.0.1:0", nil)
				if err != nil {
					t.Fatal(err)
				}
				if err := rogueAppendEntries(s, leader, term+100); err != nil || leader.Raft().CurrentTerm() <= term {
					t.Fatalf("raw AppendEntries at version 2: %v, term %d→%d; want it to reach Raft", err, term, leader.Raft().CurrentTerm())
				}
				s.Close()
			}

			c.Configs[0].olderBuild = nil
			c.Restart(0)
			c.WaitClusterVersion(CommandVersion, 30*time.Second)
			noHalts(t, c)
			id := c.Nodes[0].ClusterID()
			if checkClusterID(id) != nil {
				t.Fatalf("cluster ID after the raise: %q", id)
			}
			sameClusterID(t, c, id)
			registerVerified(t, ctx, cl, "r3", 2, 0, 0)
			memberDigests(t, c)
			// Every member restarted: connections carry the identity
			// from the first.
			c.Shutdown()
			for i := range c.Nodes {
				c.Restart(i)
			}
			registerVerified(t, ctx, cl, "r4", 2, 0, 0)
			memberDigests(t, c)
			sameClusterID(t, c, id)

			leader := c.Leader(10 * time.Second)
			term := leader.Raft().CurrentTerm()
			s, err := listenTCPStream("127.0.0.1:0", nil)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if err := rogueAppendEntries(s, leader, term+100); err == nil || leader.Raft().CurrentTerm() != term {
				t.Fatalf("raw AppendEntries at version 3: %v, term %d→%d; want it refused", err, term, leader.Raft().CurrentTerm())
			}
			code := errcode.ClusterIDMismatch
			if withToken {
				code = errcode.Unauthenticated
			}
			if refusedConns(t, leader, code) == 0 {
				t.Fatalf("no %s refusal counted", code)
			}
		})
	}
}

// A raise to versionClusterID or above gives a state without an identity
// the one it names, and only a valid one: none, one that is not 32
// lowercase hex digits or all zeros is BAD_INPUT and changes nothing. A
// raise from 2 straight to 4 (a cluster of version 2 builds upgraded at
// once) takes it as a raise to 3 does, and a later raise keeps the
// identity the state has. The command's clusterID decodes strictly: null,
// or a key twice, is BAD_DOCUMENT.
func TestSetClusterVersionGivesTheIdentity(t *testing.T) {
	h := newHarness(t)
	h.ok(&SetClusterVersion{Version: 2})
	before, _ := EncodeState(h.state())
	for name, id := range map[string]string{
		"none":      "",
		"uppercase": strings.Repeat("AB", 16),
		"zeros":     strings.Repeat("0", 32),
		"short":     "0123",
	} {
		h.reject(&SetClusterVersion{Version: CommandVersion, ClusterID: id}, errcode.BadInput)
		if after, _ := EncodeState(h.state()); !bytes.Equal(after, before) {
			t.Fatalf("%s: the refused raise changed the state:\n%s\n%s", name, before, after)
		}
	}
	id := newClusterID()
	h.ok(&SetClusterVersion{Version: versionFenceLog, ClusterID: id})
	if s := h.state(); s.ClusterVersion != versionFenceLog || s.ClusterID != id {
		t.Fatalf("after the raise from 2 to %d: version %d, cluster ID %q; want %q", versionFenceLog, s.ClusterVersion, s.ClusterID, id)
	}
	h.ok(&SetClusterVersion{Version: versionFenceLog, ClusterID: newClusterID()})
	h.ok(&SetClusterVersion{Version: versionFenceLog})
	if got := h.state().ClusterID; got != id {
		t.Fatalf("a later raise replaced the cluster ID %q by %q", id, got)
	}

	raise, err := EncodeCommand(&SetClusterVersion{Version: CommandVersion, ClusterID: id})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := DecodeCommand(raise); err != nil {
		t.Fatalf("the raise a leader encodes: %v", err)
	}
	field := `"clusterID":"` + id + `"`
	for name, repl := range map[string]string{
		"null":            `"clusterID":null`,
		"twice":           `"clusterID":"` + newClusterID() + `",` + field,
		"another case":    `"ClusterID":"` + id + `"`,
		"not a string":    `"clusterID":7`,
		"an object":       `"clusterID":{}`,
		"a list":          `"clusterID":["` + id + `"]`,
		"not UTF-8 bytes": `"clusterID":"` + "\xff" + `"`,
	} {
		b := bytes.Replace(raise, []byte(field), []byte(repl), 1)
		if bytes.Equal(b, raise) {
			t.Fatalf("%s: %s not in %s", name, field, raise)
		}
		if _, err := DecodeCommand(b); errcode.Of(err) != errcode.BadDocument {
			t.Errorf("%s: %s: %v, want BAD_DOCUMENT", name, b, err)
		}
	}
}

// A Raft connection closed before its first byte is no refused
// handshake: nothing is logged or counted. The leader's probe of a joiner
// closes such a connection whenever it dials raw Raft (a cluster below
// version 3 without a token, or a founder before its raise), and each
// join logged "raft connection refused" UNAUTHENTICATED on the joiner and
// counted it, in a cluster with no token. The control: one byte of raw
// Raft, in a cluster at version 3, is refused and counted.
func TestConnectionClosedAtOnceIsNoRefusal(t *testing.T) {
	logs := &syncBuf{}
	c := MakeCluster(t, 1, func(cfg *Config) { cfg.Logger = slog.New(slog.NewTextHandler(logs, nil)) })
	n := c.Leader(10 * time.Second)
	waitFor(t, "the cluster ID", func() bool { return n.ClusterID() != "" })
	// send sends b, half-closes and waits for the member to close its
	// side: by then it judged the connection.
	send := func(b []byte) {
		conn, err := net.Dial("tcp", n.RaftAddr())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		conn.Write(b)
		conn.(*net.TCPConn).CloseWrite()
		conn.SetReadDeadline(time.Now().Add(15 * time.Second))
		if _, err := io.ReadAll(conn); err != nil {
			t.Fatalf("the member kept a connection that sent %q: %v", b, err)
		}
	}
	for range 3 {
		send(nil)
	}
	for _, code := range []errcode.Code{errcode.Unauthenticated, errcode.ClusterIDMismatch} {
		if got := refusedConns(t, n, code); got != 0 {
			t.Fatalf("connections closed before a byte counted %d %s refusals", got, code)
		}
	}
	if strings.Contains(logs.String(), "raft connection refused") {
		t.Fatalf("a connection closed before a byte logged as refused:\n%s", logs)
	}
	send([]byte{0})
	if refusedConns(t, n, errcode.ClusterIDMismatch) != 1 || !strings.Contains(logs.String(), "raft connection refused") {
		t.Fatalf("raw Raft at version %d: %d refusals counted; log:\n%s", n.ClusterVersion(), refusedConns(t, n, errcode.ClusterIDMismatch), logs)
	}
}

// A founder's identity before the raise that records it is not checked:
// when another member, leading, raised the version and drew the identity
// the cluster took, the founder, running since it founded the cluster and
// not at the raise yet, accepts that member's connection (and answers no
// identity), instead of refusing it as another cluster's, which would cut
// it off from its cluster, and the raise, until it restarted.
func TestFounderBeforeTheRaiseAcceptsTheClusterID(t *testing.T) {
	founder := newIdentity()
	founder.set(newClusterID(), false)
	founder.markReady()
	ls, err := listenTCPStream("127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ls.Close()
	acc := &authStream{StreamLayer: ls, log: slog.New(slog.NewTextHandler(io.Discard, nil)), ids: founder}
	got := make(chan error, 1)
	go func() {
		c, err := acc.Accept()
		if err != nil {
			got <- err
			return
		}
		defer c.Close()
		b := make([]byte, 1)
		_, err = io.ReadFull(c, b)
		got <- err
	}()
	ds, err := listenTCPStream("127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ds.Close()
	c, err := identityStream(ds, newClusterID()).Dial(raft.ServerAddress(acc.Addr().String()), 10*time.Second)
	if err != nil {
		t.Fatalf("the leader's connection to the founder: %v", err)
	}
	defer c.Close()
	c.Write([]byte{0})
	if err := <-got; err != nil {
		t.Fatalf("the founder's side: %v", err)
	}
}
