package raftgate

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
)

// askVersions has the leader poll its members and raise the cluster
// version if it can, as its loop does, until the answers of the members
// in want begin as want says (a leader elected a moment ago may not hold
// every join record yet). Every poll must leave the cluster at version
// cv. It returns the last answers.
func askVersions(t *testing.T, c *TestCluster, cv uint64, want map[string]string) []MemberVersion {
	t.Helper()
	var last []MemberVersion
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the members never answered %v; last answers %s", want, versionList(last))
		}
		l := c.Leader(10 * time.Second)
		if l.BuildVersion() < CommandVersion {
			// An older build never raises: the question is the
			// upgraded leader's. The transfer goes to an upgraded
			// node, not to whichever Raft picks (another older one,
			// over and over on a loaded machine).
			for _, n := range c.Nodes {
				if n != nil && n != l && n.BuildVersion() >= CommandVersion {
					l.Raft().LeadershipTransferToServer(raft.ServerID(n.ID()), raft.ServerAddress(n.RaftAddr()))
					break
				}
			}
			continue
		}
		got, members, err := l.raiseClusterVersion(ctxT(t, 10*time.Second))
		if errcode.Of(err) == errcode.NotLeader {
			continue
		}
		if err != nil || got != cv {
			t.Fatalf("the leader asked %s: version %d, %v; want %d", versionList(members), got, err, cv)
		}
		last = members
		done := true
		for id, w := range want {
			done = done && strings.HasPrefix(memberVersion(members, id), id+": "+w)
		}
		if done {
			return members
		}
	}
}

// memberVersion returns what members says of id.
func memberVersion(members []MemberVersion, id string) string {
	for _, m := range members {
		if m.ID == id {
			return m.String()
		}
	}
	return id + ": not asked"
}

// noHalts fails the test if a running node halted.
func noHalts(t *testing.T, c *TestCluster) {
	t.Helper()
	for _, n := range c.Nodes {
		if n != nil && n.Halted() != nil {
			t.Fatalf("%s halted: %v", n.ID(), n.Halted())
		}
	}
}

// leaderDigest returns the leader's state digest and index once every node
// applied the log.
func leaderDigest(t *testing.T, ctx context.Context, c *TestCluster) (uint64, manifest.Digest) {
	t.Helper()
	waitApplied(t, runningNodes(c))
	return leaderStatusDigest(t, ctx, c)
}

// leaderStatusDigest returns the state digest and index of the leader's
// status.
func leaderStatusDigest(t *testing.T, ctx context.Context, c *TestCluster) (uint64, manifest.Digest) {
	t.Helper()
	lc := NewClient(c.Leader(10 * time.Second).URL())
	defer lc.Close()
	st, err := lc.StatusDigest(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return st.StateIndex, *st.StateDigest
}

// node1OfBuild makes node1 of a test cluster a build of version v
// (OlderBuild) and leaves the others at this build's.
func node1OfBuild(v uint64) func(*Config) {
	return func(cfg *Config) {
		if cfg.ID == "node1" {
			OlderBuild(v)(cfg)
		}
	}
}

func runningNodes(c *TestCluster) []*Node {
	var out []*Node
	for _, n := range c.Nodes {
		if n != nil {
			out = append(out, n)
		}
	}
	return out
}

// A rolling upgrade: node1 and node3 run a build from before the version
// handshake. The cluster stays at version 0 however often the leader asks
// (they report none); fences still move, without spareChecked, so the old
// members, which cannot read it, never halt. The one advance that needs
// the field (it keeps open a permit whose release a recheck already
// cleared) is CLUSTER_VERSION and changes nothing. It stays at 0 once
// node3 is upgraded (node1 reports none), and while node1 is down (its
// version unknown, and every member that answers upgraded). Once node1
// restarts on its directory with the new build too, the leader raises the
// version to CommandVersion by itself, and the same advance keeps the
// permit open. The version survives a snapshot and a restart
// of every member.
func TestRollingUpgradeRaisesClusterVersion(t *testing.T) {
	ctx := ctxT(t, 2*time.Minute)
	c := MakeCluster(t, 3, func(cfg *Config) {
		if cfg.ID != "node2" {
			OlderBuild(0)(cfg)
		}
	})
	cl := c.Client()
	bv := fmt.Sprint(CommandVersion)
	askVersions(t, c, 0, map[string]string{"node1": "none (a build before", "node2": bv, "node3": "none (a build before"})

	r1 := registerVerified(t, ctx, cl, "r1", 2, 3, 0)
	// An advance that spares nothing goes without the field: node3
	// applies it.
	if fr, err := cl.AdvanceFence(ctx, FenceTombstone, 1); err != nil || len(fr.Spared) != 0 {
		t.Fatalf("an advance in the mixed cluster: %+v, %v", fr, err)
	}
	pub, err := cl.Publish(ctx, "main", r1, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Recheck(ctx, &RecheckCmd{Root: r1, Kind: FenceTombstone, Value: 5, Report: dig("recheck/r1")}); err != nil {
		t.Fatal(err)
	}
	if err := cl.Apply(ctx, &SetClusterVersion{Version: 1}, nil); errcode.Of(err) != errcode.BadInput {
		t.Fatalf("setClusterVersion from a client: %v, want BAD_INPUT", err)
	}

	index, before := leaderDigest(t, ctx, c)
	_, err = cl.AdvanceFence(ctx, FenceTombstone, 5)
	if errcode.Of(err) != errcode.ClusterVersion || errcode.ClusterVersion.Exit() != errcode.ExitError {
		t.Fatalf("an advance that needs spareChecked in the mixed cluster: %v, want CLUSTER_VERSION (exit 3)", err)
	}
	if msg := err.Error(); !strings.Contains(msg, pub.Permit) || !strings.Contains(msg, "node1: none") {
		t.Fatalf("the refusal names neither the permit it would keep nor the member: %s", msg)
	}
	if i, after := leaderDigest(t, ctx, c); i != index || after != before {
		t.Fatalf("the refused advance changed the state: index %d→%d, digest %s→%s", index, i, before, after)
	}
	noHalts(t, c)

	// node3 upgraded first: node1 still reports none.
	c.Configs[2].olderBuild = nil
	c.Restart(2)
	askVersions(t, c, 0, map[string]string{"node1": "none", "node3": bv})
	// node1 down: every member that answers runs the new build, but
	// node1's is unknown, and the version stays.
	c.Stop(0)
	members := askVersions(t, c, 0, map[string]string{"node1": "unknown", "node2": bv, "node3": bv})
	if m := memberVersion(members, "node1"); strings.Contains(m, "--bootstrap") {
		t.Fatalf("a member down is answered with a client's advice to found a gate: %s", m)
	}
	noHalts(t, c)
	// node1 upgraded: the leader raises the version without being asked.
	c.Configs[0].olderBuild = nil
	c.Restart(0)
	c.WaitClusterVersion(CommandVersion, 20*time.Second)
	noHalts(t, c)
	nc := NewClient(c.Nodes[0].URL())
	defer nc.Close()
	st, err := nc.Status(ctx)
	if err != nil || st.CommandVersion != CommandVersion || st.ClusterVersion != CommandVersion {
		t.Fatalf("the upgraded member's status: %+v, %v; want build and cluster %d", st, err, CommandVersion)
	}

	fr, err := cl.AdvanceFence(ctx, FenceTombstone, 5)
	if err != nil || !slices.Equal(fr.Spared, []string{pub.Permit}) {
		t.Fatalf("the advance at version %d: %+v, %v; want %s spared", CommandVersion, fr, err, pub.Permit)
	}
	waitApplied(t, c.Nodes)
	noHalts(t, c)

	// A snapshot on each member, then every member restarted: the
	// version is in the state each restores, before any entry.
	for _, n := range c.Nodes {
		if err := n.Raft().Snapshot().Error(); err != nil {
			t.Fatalf("snapshot of %s: %v", n.ID(), err)
		}
	}
	c.Shutdown()
	for i := range c.Nodes {
		if n := c.Restart(i); n.ClusterVersion() != CommandVersion {
			t.Fatalf("%s restarted on its snapshot: cluster version %d, want %d", n.ID(), n.ClusterVersion(), CommandVersion)
		}
	}
	c.Leader(10 * time.Second)
	waitApplied(t, c.Nodes)
	for _, n := range c.Nodes {
		var p *Permit
		n.FSM().Read(func(s *State) { p = s.Permits[pub.Permit] })
		if n.ClusterVersion() != CommandVersion || p.State != PermitOpen {
			t.Fatalf("%s after the restart: cluster version %d, permit %s; want %d, OPEN", n.ID(), n.ClusterVersion(), p.State, CommandVersion)
		}
	}
}

// A member whose build is below the committed cluster version does not
// run: restarted on its directory (a downgrade) it does not start, saying
// which version it needs, and a new member on that build is not let in
// (CLUSTER_VERSION, the configuration unchanged).
func TestBuildBelowClusterVersionRefuses(t *testing.T) {
	ctx := ctxT(t, time.Minute)
	c := MakeCluster(t, 1)
	if v := c.Nodes[0].ClusterVersion(); v != CommandVersion {
		t.Fatalf("a new cluster's version: %d, want %d", v, CommandVersion)
	}

	joiner := TestConfig(t.TempDir(), "old")
	joiner.Join, joiner.Bootstrap = c.Nodes[0].HTTPAddr(), false
	OlderBuild(0)(&joiner)
	jn := NewNode(joiner)
	err := jn.Start(ctx)
	jn.Shutdown()
	if errcode.Of(err) != errcode.ClusterVersion || !strings.Contains(err.Error(), "reports none") {
		t.Fatalf("a build before the handshake joining a cluster at version %d: %v, want CLUSTER_VERSION", CommandVersion, err)
	}
	if f := c.Nodes[0].Raft().GetConfiguration(); f.Error() != nil || len(f.Configuration().Servers) != 1 {
		t.Fatalf("the refused join changed the configuration: %+v", f.Configuration())
	}

	if err := c.Nodes[0].Raft().Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	c.Stop(0)
	down := c.Configs[0]
	OlderBuild(0)(&down)
	n := NewNode(down)
	err = n.Start(ctx)
	n.Shutdown()
	var h *HaltError
	var v *VersionError
	if !errors.As(err, &h) || !errors.As(err, &v) || errcode.Of(err) != errcode.GateHalted || v.Cluster != CommandVersion || v.Build != 0 ||
		!strings.Contains(err.Error(), "up to 0") || !strings.Contains(err.Error(), fmt.Sprintf("version %d or later", CommandVersion)) {
		t.Fatalf("a build of version 0 on a directory at version %d: %v, want GATE_HALTED naming both versions", CommandVersion, err)
	}
	// Upgraded again, it starts.
	if up := c.Restart(0); up.Halted() != nil || up.ClusterVersion() != CommandVersion {
		t.Fatalf("the member back on the new build: halted %v, version %d", up.Halted(), up.ClusterVersion())
	}
}

// A committed raise above the build's version (an entry, not a snapshot)
// halts the member at it, naming both versions, and applies nothing; a
// raise below the current version changes nothing.
func TestFSMHaltsAtRaiseAboveItsBuild(t *testing.T) {
	// At version 0 the state encodes as builds before the handshake
	// wrote it, so their members decode this build's snapshots.
	if b, _ := EncodeState(NewState()); bytes.Contains(b, []byte("clusterVersion")) {
		t.Fatalf("a state at version 0 names its version: %s", b)
	}
	f := NewFSM()
	entry := func(i uint64, c Command) *Result {
		b, err := EncodeCommand(c)
		if err != nil {
			t.Fatal(err)
		}
		return f.Apply(&raft.Log{Type: raft.LogCommand, Index: i, Data: b}).(*Result)
	}
	if r := entry(1, &SetClusterVersion{Version: 1}); r.Err != nil {
		t.Fatal(r.Err)
	}
	if r := entry(2, &SetClusterVersion{Version: 0}); r.Err != nil || r.Value.(ClusterVersionResult).ClusterVersion != 1 {
		t.Fatalf("a lower raise: %+v, want version 1 kept", r)
	}
	before, _ := f.Encode()
	r := entry(3, &SetClusterVersion{Version: CommandVersion + 1})
	var h *HaltError
	if !errors.As(r.Err, &h) || h.Index != 3 || errcode.Of(r.Err) != errcode.GateHalted ||
		!strings.Contains(h.Error(), "entry 3") || !strings.Contains(h.Error(), fmt.Sprintf("version %d or later", CommandVersion+1)) {
		t.Fatalf("a raise above the build: %v, want GATE_HALTED at entry 3 naming version %d", r.Err, CommandVersion+1)
	}
	if after, _ := f.Encode(); !bytes.Equal(before, after) {
		t.Fatal("the raise above the build changed the state")
	}
}

// The cluster version is in a backup: a cluster founded on it starts at
// it (it never goes down), and a build below it refuses the backup.
func TestBackupKeepsClusterVersion(t *testing.T) {
	ctx := ctxT(t, time.Minute)
	c := MakeCluster(t, 1)
	backup, err := c.Client().StateBytes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if s, err := DecodeState(backup); err != nil || s.ClusterVersion != CommandVersion {
		t.Fatalf("the backup: %v, version %v; want %d", err, s, CommandVersion)
	}
	cfg := TestConfig(t.TempDir(), "restored")
	cfg.Restore = backup
	if n := StartTestNode(t, cfg); n.ClusterVersion() != CommandVersion {
		t.Fatalf("restored: cluster version %d, want %d", n.ClusterVersion(), CommandVersion)
	}
	old := TestConfig(t.TempDir(), "old")
	old.Restore = backup
	OlderBuild(0)(&old)
	n := NewNode(old)
	err = n.Start(ctx)
	n.Shutdown()
	if errcode.Of(err) != errcode.ClusterVersion || !strings.Contains(err.Error(), fmt.Sprintf("version %d or later", CommandVersion)) {
		t.Fatalf("a build of version 0 restoring a backup at version %d: %v, want CLUSTER_VERSION", CommandVersion, err)
	}
}

// stallApply makes a node's FSM stop, before applying it, at the first
// committed entry stall matches, until the returned release is called
// (the test's cleanup calls it too): a member whose state lags behind
// its log, as one does after a restart (everything after its snapshot
// waits to be applied) or on a slow disk. reached is closed when it
// stops. Its leader loop is slowed to an hour, so the test alone decides
// what it proposes as leader.
func stallApply(t *testing.T, cfg *Config, stall func(Command) bool) (reached <-chan struct{}, release func()) {
	at, free := make(chan struct{}), make(chan struct{})
	var once, freeOnce sync.Once
	release = func() { freeOnce.Do(func() { close(free) }) }
	t.Cleanup(release)
	cfg.SweepInterval = time.Hour
	cfg.decode = func(b []byte) (Command, error) {
		c, err := DecodeCommand(b)
		if err == nil && stall(c) {
			once.Do(func() { close(at) })
			<-free
		}
		return c, err
	}
	return at, release
}

// lead moves the leadership to n (from whichever of nodes leads) and
// waits until its term's first entry is in its log, which a stalled FSM
// does not hold up; it returns n's last index then.
func lead(t *testing.T, n *Node, nodes ...*Node) uint64 {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s never led", n.ID())
		}
		if n.IsLeader() && n.Raft().Stats()["last_log_term"] == fmt.Sprint(n.Raft().CurrentTerm()) {
			return n.Raft().LastIndex()
		}
		for _, o := range nodes {
			if o != n && o.IsLeader() {
				o.Raft().LeadershipTransferToServer(raft.ServerID(n.ID()), raft.ServerAddress(n.RaftAddr()))
			}
		}
	}
}

// waitAppended waits until n's log grows past index.
func waitAppended(t *testing.T, n *Node, index uint64) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); n.Raft().LastIndex() <= index; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s appended nothing after entry %d", n.ID(), index)
		}
	}
}

// A leader elected while its state lags behind committed entries (here:
// a recheck a client was told is done) judges a fence advance on the
// state with those entries applied: at cluster version 0 the advance that
// would keep the rechecked permit open is CLUSTER_VERSION and changes
// nothing. Judged on the lagging state, it went without spareChecked
// and closed the permit, which the recheck had cleared.
func TestLaggingLeaderJudgesFenceOnAppliedState(t *testing.T) {
	ctx := ctxT(t, 2*time.Minute)
	var reached <-chan struct{}
	var release func()
	c := MakeCluster(t, 3, func(cfg *Config) {
		switch cfg.ID {
		case "node1":
			OlderBuild(0)(cfg)
		case "node2":
			reached, release = stallApply(t, cfg, func(c Command) bool { r, ok := c.(*RecheckCmd); return ok && r.Value == 5 })
		}
	})
	n2, n3 := c.Nodes[1], c.Nodes[2]
	lead(t, n3, c.Nodes...)
	cl := NewClient(n3.URL())
	defer cl.Close()
	r1 := registerVerified(t, ctx, cl, "r1", 2, 3, 0)
	pub, err := cl.Publish(ctx, "main", r1, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Recheck(ctx, &RecheckCmd{Root: r1, Kind: FenceTombstone, Value: 5, Report: dig("recheck/r1")}); err != nil {
		t.Fatal(err)
	}
	<-reached

	last := lead(t, n2, c.Nodes...)
	c2 := NewClient(n2.URL())
	defer c2.Close()
	type answer struct {
		fr  *FenceResult
		err error
	}
	done := make(chan answer, 1)
	go func() {
		fr, err := c2.AdvanceFence(ctx, FenceTombstone, 5)
		done <- answer{fr, err}
	}()
	// The advance (or what the leader does before it) is in the log:
	// the stalled state is free to catch up.
	waitAppended(t, n2, last)
	release()
	a := <-done
	if errcode.Of(a.err) != errcode.ClusterVersion {
		t.Fatalf("the advance on a leader whose state lagged behind the recheck: %+v, %v; want CLUSTER_VERSION", a.fr, a.err)
	}
	waitApplied(t, c.Nodes)
	noHalts(t, c)
	for _, n := range c.Nodes {
		var p Permit
		var f Fences
		n.FSM().Read(func(s *State) { p, f = *s.Permits[pub.Permit], s.Fences })
		if p.State != PermitOpen || f.Tombstone != 0 {
			t.Fatalf("%s after the refused advance: permit %s, tombstone fence %d; want OPEN, 0", n.ID(), p.State, f.Tombstone)
		}
	}
}

// A leader elected while its state lags behind a committed raise of the
// cluster version checks a joiner against the raised version: a build
// before the handshake is refused (CLUSTER_VERSION), the configuration
// unchanged. Checked against the lagging state, it was added, and halted
// at the raise.
func TestLaggingLeaderChecksJoinerAgainstCommittedVersion(t *testing.T) {
	ctx := ctxT(t, 2*time.Minute)
	dir := t.TempDir()
	n1 := StartTestNode(t, TestConfig(dir, "node1"))
	for deadline := time.Now().Add(20 * time.Second); n1.ClusterVersion() != CommandVersion; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("a single node never raised its version")
		}
	}
	cfg2 := TestConfig(dir, "node2")
	cfg2.Join, cfg2.Bootstrap = n1.HTTPAddr(), false
	reached, release := stallApply(t, &cfg2, func(c Command) bool { _, ok := c.(*SetClusterVersion); return ok })
	n2 := StartTestNode(t, cfg2)
	<-reached
	last := lead(t, n2, n1, n2)
	if v := n2.ClusterVersion(); v != 0 {
		t.Fatalf("the stalled leader's state holds version %d; the test wants it behind the raise", v)
	}

	cfg3 := TestConfig(dir, "old")
	cfg3.Join, cfg3.Bootstrap = n2.HTTPAddr(), false
	OlderBuild(0)(&cfg3)
	n3 := NewNode(cfg3)
	t.Cleanup(func() { n3.Shutdown() })
	done := make(chan error, 1)
	go func() { done <- n3.Start(ctx) }()
	waitAppended(t, n2, last)
	release()
	err := <-done
	if errcode.Of(err) != errcode.ClusterVersion {
		t.Fatalf("a build before the handshake joining a leader whose state lagged behind the raise: %v (halted: %v); want CLUSTER_VERSION", err, n3.Halted())
	}
	if h := n3.Halted(); h != nil {
		t.Fatalf("the refused joiner halted: %v", h)
	}
	if f := n2.Raft().GetConfiguration(); f.Error() != nil || len(f.Configuration().Servers) != 2 {
		t.Fatalf("the refused join changed the configuration: %+v", f.Configuration())
	}
}

// The leader takes a member's version only from the process the Raft
// configuration names. node1, on a build before the handshake, has a join
// record whose HTTP address another process answers as node1 on the new
// build (one left running at a member's old addresses when its join at
// new ones was not recorded): the version stays at 0, the leader saying
// why, and node1 never halts. Counted, it raised the version, and node1
// halted at the raise.
func TestVersionOnlyFromTheConfiguredMember(t *testing.T) {
	ctx := ctxT(t, time.Minute)
	c := MakeCluster(t, 3, node1OfBuild(0))
	stray := StartTestNode(t, TestConfig(t.TempDir(), "node1"))
	old := c.Nodes[0]
	for {
		l := c.Leader(10 * time.Second)
		if _, err := l.Apply(&Join{ID: "node1", RaftAddr: old.RaftAddr(), HTTPAddr: stray.HTTPAddr()}); err == nil {
			break
		} else if errcode.Of(err) != errcode.NotLeader {
			t.Fatal(err)
		}
	}
	bv := fmt.Sprint(CommandVersion)
	members := askVersions(t, c, 0, map[string]string{"node1": "unknown", "node2": bv, "node3": bv})
	if m := memberVersion(members, "node1"); !strings.Contains(m, "at raftAddr "+stray.RaftAddr()) || !strings.Contains(m, "node1 at "+old.RaftAddr()) {
		t.Fatalf("what the leader says of node1: %s; want both Raft addresses", m)
	}
	if v := old.ClusterVersion(); v != 0 || old.Halted() != nil {
		t.Fatalf("node1: cluster version %d, halted %v", v, old.Halted())
	}
	nc := NewClient(c.Nodes[1].URL())
	defer nc.Close()
	if st, err := nc.Status(ctx); err != nil || st.RaftAddr != c.Nodes[1].RaftAddr() {
		t.Fatalf("node2's status: %+v, %v; want raftAddr %s", st, err, c.Nodes[1].RaftAddr())
	}
	noHalts(t, c)
}

// A cluster's first node that loses the leadership to a member that
// joined before its loop recorded its addresses is recorded all the same
// (the leader records itself before it adds a voter), so the new leader
// asks it for its version and raises the cluster version. Unrecorded, it
// kept the version at 0 until it led again.
func TestFirstNodeRecordedBeforeAVoterJoins(t *testing.T) {
	dir := t.TempDir()
	cfg1 := TestConfig(dir, "node1")
	cfg1.SweepInterval = time.Hour // its loop neither records it nor raises
	n1 := StartTestNode(t, cfg1)
	for deadline := time.Now().Add(10 * time.Second); !n1.IsLeader(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("node1 never led")
		}
	}
	cfg2 := TestConfig(dir, "node2")
	cfg2.Join, cfg2.Bootstrap = n1.HTTPAddr(), false
	n2 := StartTestNode(t, cfg2)
	var rec *NodeInfo
	n1.FSM().Read(func(s *State) {
		if ni := s.Nodes["node1"]; ni != nil {
			rec = &NodeInfo{ID: ni.ID, RaftAddr: ni.RaftAddr, HTTPAddr: ni.HTTPAddr}
		}
	})
	if rec == nil || rec.HTTPAddr != n1.HTTPAddr() || rec.RaftAddr != n1.RaftAddr() {
		t.Fatalf("node1's record once node2 joined: %+v; want %s, %s", rec, n1.HTTPAddr(), n1.RaftAddr())
	}
	lead(t, n2, n1, n2)
	c := &TestCluster{t: t, Nodes: []*Node{n1, n2}}
	c.WaitClusterVersion(CommandVersion, 20*time.Second)
}
