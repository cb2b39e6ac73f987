package raftgate

import (
	"crypto/tls"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
)

// recordRequests reads n's count of record requests that ended with code,
// gathered from its registry (/metrics needs the token and TLS of a gate
// that has them).
func recordRequests(t *testing.T, n *Node, code string) float64 {
	t.Helper()
	return codeCount(t, n, "shardproof_gate_record_requests_total", code)
}

// neverCampaigns makes a test node a voter that never stands for
// election (its follower timeout is an hour): it leads only if asked to.
func neverCampaigns(cfg *Config) {
	cfg.Timing.Heartbeat, cfg.Timing.Election = time.Hour, time.Hour
}

// deafStream is a Raft stream layer that hangs up on every connection
// it accepts: its member reaches the others, and none reaches it.
type deafStream struct{ raft.StreamLayer }

func (d deafStream) Accept() (net.Conn, error) {
	for {
		c, err := d.StreamLayer.Accept()
		if err != nil {
			return nil, err
		}
		c.Close()
	}
}

// staleRecord has the leader apply a join record for n at a wrong HTTP
// address, as a record left from before a restart with another
// --http-advertise is.
func staleRecord(t *testing.T, c *TestCluster, n *Node) {
	t.Helper()
	for {
		l := c.Leader(10 * time.Second)
		_, err := l.Apply(&Join{ID: n.ID(), RaftAddr: n.RaftAddr(), HTTPAddr: "127.0.0.1:1"})
		if err == nil {
			return
		}
		if errcode.Of(err) != errcode.NotLeader {
			t.Fatal(err)
		}
	}
}

// recordOf returns what n's state records for id.
func recordOf(n *Node, id string) NodeInfo {
	var ni NodeInfo
	n.FSM().Read(func(s *State) {
		if r := s.Nodes[id]; r != nil {
			ni = *r
		}
	})
	return ni
}

// A follower whose join record is stale asks the leader to record its
// addresses, and is recorded without ever leading: node3 never stands for
// election and never leads (a Raft observer on it says so), yet every
// member's state holds its addresses again, and once node1, a build from
// before the version handshake, is upgraded, the leader raises the
// cluster version. Before, the leader asked the stale address for node3's
// version, and the version stayed at 0 until node3 led.
func TestFollowerWithStaleRecordIsRecorded(t *testing.T) {
	c := MakeCluster(t, 3, func(cfg *Config) {
		switch cfg.ID {
		case "node1":
			OlderBuild(0)(cfg)
		case "node3":
			neverCampaigns(cfg)
		}
	})
	n2, n3 := c.Nodes[1], c.Nodes[2]
	led := raft.NewObserver(make(chan raft.Observation, 16), false, func(o *raft.Observation) bool {
		s, ok := o.Data.(raft.RaftState)
		return ok && s == raft.Leader
	})
	n3.Raft().RegisterObserver(led)
	defer n3.Raft().DeregisterObserver(led)
	// An upgraded leader: the older build has no /v1/record.
	lead(t, n2, c.Nodes...)
	want := NodeInfo{ID: "node3", RaftAddr: n3.RaftAddr(), HTTPAddr: n3.HTTPAddr()}
	// Its record may have been asked for already, while it joined.
	before := recordRequests(t, n3, "OK")

	staleRecord(t, c, n3)
	waitFor(t, "node3 to be recorded at its request", func() bool {
		if recordRequests(t, n3, "OK") <= before {
			return false
		}
		for _, n := range runningNodes(c) {
			if recordOf(n, "node3") != want {
				return false
			}
		}
		return true
	})

	c.Configs[0].olderBuild = nil
	c.Restart(0)
	c.WaitClusterVersion(CommandVersion, 30*time.Second)
	noHalts(t, c)
	if l := c.Leader(10 * time.Second); l == n3 || led.GetNumObserved()+led.GetNumDropped() != 0 {
		t.Fatalf("node3 led (leader now %s, %d observations as leader); the test wants it recorded as a follower", l.ID(), led.GetNumObserved()+led.GetNumDropped())
	}
}

// A member removed with gate remove while it was down, restarted with
// another HTTP address (its record stale) on a directory whose Raft
// configuration still lists it, and that never learns of its removal,
// asks to be recorded and is refused
// (BAD_INPUT) again and again: it stays out of the configuration and the
// leader's state is unchanged. A record request that added a voter (as
// POST /v1/join does) would have brought it back.
func TestRemovedMemberIsNotRecorded(t *testing.T) {
	ctx := ctxT(t, 2*time.Minute)
	c := MakeCluster(t, 3)
	waitApplied(t, c.Nodes)
	// A restart applies what its snapshot holds until a leader says what
	// is committed: the snapshot gives node3 the members' records, and
	// so whom to ask.
	if err := c.Nodes[2].Raft().Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	oldHTTP := c.Nodes[2].HTTPAddr()
	c.Stop(2)
	cl := NewClient(c.Nodes[0].URL() + "," + c.Nodes[1].URL())
	defer cl.Close()
	if err := cl.RemoveMember(ctx, "node3"); err != nil {
		t.Fatal(err)
	}
	index, before := leaderStatusDigest(t, ctx, c)

	c.Configs[2].HTTPAddr = "127.0.0.1:0"
	// The leader's replication to a removed member ends with a last
	// try, which a member back in time takes: node3 hangs up on every
	// Raft connection, so it never learns of its removal.
	c.Configs[2].WrapStream = func(s raft.StreamLayer) raft.StreamLayer { return deafStream{s} }
	n3 := c.Restart(2)
	if n3.HTTPAddr() == oldHTTP {
		t.Fatalf("node3 restarted at its old HTTP address %s", oldHTTP)
	}
	listed := func() {
		t.Helper()
		for _, v := range n3.voters() {
			if v.ID == "node3" {
				return
			}
		}
		t.Fatalf("node3's own configuration %+v does not list it; the test wants a member that never learnt of its removal", n3.voters())
	}
	listed()
	waitFor(t, "node3's record request to be refused twice", func() bool { return recordRequests(t, n3, string(errcode.BadInput)) >= 2 })
	listed()

	err := cl.do(ctx, http.MethodPost, "/v1/record", &Join{ID: "node3", RaftAddr: n3.RaftAddr(), HTTPAddr: n3.HTTPAddr()}, nil)
	if errcode.Of(err) != errcode.BadInput || !strings.Contains(err.Error(), "not a member at raftAddr "+n3.RaftAddr()) || !strings.Contains(err.Error(), "--join") {
		t.Fatalf("the removed member's record request: %v, want BAD_INPUT saying it is not a member", err)
	}
	l := c.Leader(10 * time.Second)
	var ids []string
	for _, v := range l.voters() {
		ids = append(ids, v.ID)
	}
	if got := strings.Join(ids, ","); got != "node1,node2" {
		t.Fatalf("the leader's configuration after node3's record requests: %s, want node1,node2", got)
	}
	if r := recordOf(l, "node3"); r.HTTPAddr != oldHTTP || recordRequests(t, n3, "OK") != 0 {
		t.Fatalf("the removed member's record: %+v, %v recorded; want its old HTTP address %s", r, recordRequests(t, n3, "OK"), oldHTTP)
	}
	if i, after := leaderStatusDigest(t, ctx, c); i != index || after != before {
		t.Fatalf("the refused record requests changed the state: index %d→%d, digest %s→%s", index, i, before, after)
	}
}

// POST /v1/record records only a server of the leader's Raft
// configuration, at the Raft address the configuration names, answering
// at both addresses as that member: a process that is not a member, a
// member's ID at another Raft address, an HTTP address where another
// gate answers, and another process of the member's ID are BAD_INPUT,
// and a body that is not a join BAD_DOCUMENT, each changing nothing.
// Sent to a follower, each is forwarded to the leader.
func TestRecordRefusesWhatIsNotTheMember(t *testing.T) {
	ctx := ctxT(t, time.Minute)
	c := MakeCluster(t, 2)
	stray := StartTestNode(t, TestConfig(t.TempDir(), "stray"))
	twin := StartTestNode(t, TestConfig(t.TempDir(), "node2"))
	n2 := c.Nodes[1]
	index, before := leaderDigest(t, ctx, c)
	for _, tc := range []struct {
		j    *Join
		want string
	}{
		{&Join{ID: "stray", RaftAddr: stray.RaftAddr(), HTTPAddr: stray.HTTPAddr()}, "record of stray: not a member at raftAddr " + stray.RaftAddr()},
		{&Join{ID: "node2", RaftAddr: stray.RaftAddr(), HTTPAddr: n2.HTTPAddr()}, "node2 at " + n2.RaftAddr()},
		{&Join{ID: "node2", RaftAddr: n2.RaftAddr(), HTTPAddr: stray.HTTPAddr()}, "the gate at httpAddr " + stray.HTTPAddr() + " is stray"},
		{&Join{ID: "node2", RaftAddr: n2.RaftAddr(), HTTPAddr: twin.HTTPAddr()}, "is node2 at raftAddr " + twin.RaftAddr()},
	} {
		for _, n := range c.Nodes {
			nc := NewClient(n.URL())
			err := nc.do(ctx, http.MethodPost, "/v1/record", tc.j, nil)
			nc.Close()
			if errcode.Of(err) != errcode.BadInput || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("record of %+v via %s: %v, want BAD_INPUT saying %q", tc.j, n.ID(), err, tc.want)
			}
		}
	}
	status, code, b := rawRequest(t, ctx, http.MethodPost, c.Nodes[0].URL()+"/v1/record", []byte(`{"type":"prune","olderThanMs":1}`))
	if status != http.StatusBadRequest || code != errcode.BadDocument {
		t.Fatalf("a record body that is not a join: HTTP %d %s %s, want 400 BAD_DOCUMENT", status, code, b)
	}
	if i, after := leaderDigest(t, ctx, c); i != index || after != before {
		t.Fatalf("the refused record requests changed the state: index %d→%d, digest %s→%s", index, i, before, after)
	}
	if v := c.Leader(10 * time.Second).voters(); len(v) != 2 {
		t.Fatalf("the refused record requests changed the configuration: %+v", v)
	}
}

// A leader on a build before POST /v1/record answers it 404: the follower
// whose record is stale counts it (UNSUPPORTED), asks again later, and
// changes nothing else; its record stays stale.
func TestRecordRequestToAnOlderLeader(t *testing.T) {
	c := MakeCluster(t, 2, func(cfg *Config) {
		switch cfg.ID {
		case "node1":
			OlderBuild(0)(cfg)
		case "node2":
			neverCampaigns(cfg)
		}
	})
	n1, n2 := c.Nodes[0], c.Nodes[1]
	if l := c.Leader(10 * time.Second); l != n1 {
		t.Fatalf("%s leads; the test wants the older build", l.ID())
	}
	staleRecord(t, c, n2)
	waitFor(t, "node2 to meet the older leader's 404 twice", func() bool { return recordRequests(t, n2, "UNSUPPORTED") >= 2 })
	waitApplied(t, c.Nodes)
	for _, n := range c.Nodes {
		if r := recordOf(n, "node2"); r.HTTPAddr != "127.0.0.1:1" {
			t.Fatalf("node2's record on %s: %+v; want the stale one kept", n.ID(), r)
		}
	}
	if !n1.IsLeader() || recordRequests(t, n2, "OK") != 0 {
		t.Fatalf("node1 leads: %v; node2's records: %v", n1.IsLeader(), recordRequests(t, n2, "OK"))
	}
	noHalts(t, c)
}

// The record path end to end on a gate with TLS and a token: node3, a
// follower that never leads, whose record is stale, asks the leader over
// HTTPS with the token and is recorded on every member; one without the
// token is UNAUTHENTICATED and changes nothing; and one sent to a
// follower is forwarded to the leader, TLS and token and all, and
// answered with the record.
func TestRecordOverTLSWithAToken(t *testing.T) {
	ctx := ctxT(t, time.Minute)
	pki := NewTestPKI(t, t.TempDir(), "gate")
	tok := []byte("c2hhcmRwcm9vZi1yZWNvcmQtdG9rZW4")
	c := MakeCluster(t, 3, func(cfg *Config) {
		cfg.TLS, cfg.Token = pki.TLS, tok
		if cfg.ID == "node3" {
			neverCampaigns(cfg)
		}
	})
	n3 := c.Nodes[2]
	if n3.URL()[:8] != "https://" {
		t.Fatalf("node3's URL %s, want https", n3.URL())
	}
	want := NodeInfo{ID: "node3", RaftAddr: n3.RaftAddr(), HTTPAddr: n3.HTTPAddr()}
	recorded := func() bool {
		for _, n := range runningNodes(c) {
			if recordOf(n, "node3") != want {
				return false
			}
		}
		return true
	}
	before := recordRequests(t, n3, "OK")
	staleRecord(t, c, n3)
	waitFor(t, "node3 to be recorded at its request over TLS with the token", func() bool {
		return recordRequests(t, n3, "OK") > before && recorded()
	})
	for _, code := range []string{string(errcode.Unauthenticated), string(errcode.Usage), string(errcode.GateUnavailable), string(errcode.BadInput)} {
		if v := recordRequests(t, n3, code); v != 0 {
			t.Fatalf("node3's record requests ended %s %v times", code, v)
		}
	}

	client := func(url, token string) *Client {
		cl := NewClient(url)
		cl.UseTLS(&tls.Config{RootCAs: pki.TLS.CAs})
		cl.Token, cl.RetryFor = token, -1
		t.Cleanup(cl.Close)
		return cl
	}
	digest := func() (uint64, manifest.Digest) {
		t.Helper()
		waitApplied(t, c.Nodes)
		st, err := client(c.Leader(10*time.Second).URL(), string(tok)).StatusDigest(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return st.StateIndex, *st.StateDigest
	}
	// Refused before it is read: a join that would move node3's record.
	index, was := digest()
	err := client(n3.URL(), "").do(ctx, http.MethodPost, "/v1/record", &Join{ID: want.ID, RaftAddr: want.RaftAddr, HTTPAddr: "127.0.0.1:1"}, nil)
	if errcode.Of(err) != errcode.Unauthenticated {
		t.Fatalf("a record request without the token: %v, want UNAUTHENTICATED", err)
	}
	if i, now := digest(); i != index || now != was {
		t.Fatalf("the refused record request changed the state: index %d→%d, digest %s→%s", index, i, was, now)
	}
	staleRecord(t, c, n3)
	join := &Join{ID: want.ID, RaftAddr: want.RaftAddr, HTTPAddr: want.HTTPAddr}
	var got NodeInfo
	if err := client(n3.URL(), string(tok)).do(ctx, http.MethodPost, "/v1/record", join, &got); err != nil || got != want {
		t.Fatalf("a record request forwarded by node3 over TLS with the token: %+v, %v; want %+v", got, err, want)
	}
	waitApplied(t, c.Nodes)
	if !recorded() {
		t.Fatalf("node3's record after the forwarded request: %+v on the leader", recordOf(c.Leader(10*time.Second), "node3"))
	}
	noHalts(t, c)
}
