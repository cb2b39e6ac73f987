package raftgate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
)

// TestBackupRestore takes a backup of a gate with an alias, a run and a
// fence, founds a new cluster on it, and checks that the new cluster holds
// the same state (members aside), takes writes that depend on it, keeps it
// across a restart, and hands it to a member that joins.
func TestBackupRestore(t *testing.T) {
	ctx := ctxT(t, time.Minute)
	old := MakeCluster(t, 3)
	cl := old.Client()
	publishedRelease(t, ctx, cl, "r1", 2)
	if _, err := cl.CreateRun(ctx, &CreateRun{Run: "job", Alias: "main", WorldSize: 1, BarrierTimeoutMs: 600_000}); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.AdvanceFence(ctx, FenceTombstone, 7); err != nil {
		t.Fatal(err)
	}
	backup, err := cl.StateBytes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want, err := DecodeState(backup)
	if err != nil {
		t.Fatalf("the backup does not decode: %v", err)
	}
	if len(want.Nodes) == 0 {
		t.Fatal("the backup records no member: the test would not see them dropped")
	}
	want.Nodes = map[string]*NodeInfo{}
	oldID := want.ClusterID
	if oldID == "" {
		t.Fatal("the backup holds no cluster ID: the test would not see it replaced")
	}
	want.ClusterID = ""
	wantBytes, _ := EncodeState(want)
	old.Shutdown()

	cfg := TestConfig(t.TempDir(), "new1")
	cfg.Restore = backup
	n := StartTestNode(t, cfg)
	waitLeader(t, n)
	got := stateBytes(t, n)
	var gotState State
	json.Unmarshal(got, &gotState)
	if len(gotState.Nodes) > 1 || (len(gotState.Nodes) == 1 && gotState.Nodes["new1"] == nil) {
		t.Fatalf("restored state keeps the old members: %v", gotState.Nodes)
	}
	gotState.Nodes = map[string]*NodeInfo{}
	// A new cluster, with an identity of its own.
	if gotState.ClusterID == "" || gotState.ClusterID == oldID || n.ClusterID() != gotState.ClusterID {
		t.Fatalf("restored cluster ID %q (node says %q), the backup's %q: want a new one", gotState.ClusterID, n.ClusterID(), oldID)
	}
	gotState.ClusterID = ""
	if b, _ := EncodeState(&gotState); !bytes.Equal(b, wantBytes) {
		t.Fatalf("restored state differs from the backup:\nwant %s\ngot  %s", wantBytes, b)
	}

	// Writes that depend on the restored state: the alias is at
	// generation 1 and the fence at 7.
	nc := NewClient(n.URL())
	defer nc.Close()
	r2 := registerVerified(t, ctx, nc, "r2", 2, 7, 0)
	if _, err := nc.Publish(ctx, "main", r2, 0, 0); !errors.Is(err, ErrPublishConflict) {
		t.Fatalf("publish at generation 0 on the restored gate: %v, want PUBLISH_CONFLICT (generation 1 is r1's)", err)
	}
	if _, err := nc.Publish(ctx, "main", r2, 1, 0); err != nil {
		t.Fatalf("publish at generation 1 on the restored gate: %v", err)
	}
	if _, err := nc.AdvanceFence(ctx, FenceTombstone, 3); errcode.Of(err) != errcode.FenceRegression {
		t.Fatalf("fence below the restored one: %v, want FENCE_REGRESSION", err)
	}

	// A restart keeps it (Restore is for the first start: a second one
	// on the same directory is refused), and a joiner receives it.
	after := commandState(t, n)
	n.Shutdown()
	if err := NewNode(cfg).Start(ctx); errcode.Of(err) != errcode.Usage {
		t.Fatalf("restore into a directory with state: %v, want USAGE", err)
	}
	cfg.Restore, cfg.Bootstrap = nil, false
	n = StartTestNode(t, cfg)
	waitLeader(t, n)
	if got := commandState(t, n); !bytes.Equal(got, after) {
		t.Fatalf("state changed across a restart of the restored node:\nbefore %s\nafter  %s", after, got)
	}
	jc := TestConfig(t.TempDir(), "new2")
	jc.Bootstrap, jc.Join = false, n.HTTPAddr()
	j := StartTestNode(t, jc)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		a, b := stateBytes(t, n), stateBytes(t, j)
		if bytes.Equal(a, b) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the joiner did not receive the restored state:\n%s\n%s", a, b)
		}
	}
}

// A backup that does not decode, or a restore without --bootstrap, is
// refused before the directory is created. So is a document that decodes
// but holds no gate state ("{}", "null": a wrong file, or what a server
// that is no gate answered to gate backup), which founded an empty gate
// that answered every alias UNKNOWN_ALIAS.
func TestRestoreRefusals(t *testing.T) {
	for name, tc := range map[string]struct {
		mod  func(*Config)
		want errcode.Code
		msg  string
	}{
		"garbage":      {func(c *Config) { c.Restore = []byte(`{"releases":`) }, errcode.BadDocument, ""},
		"unknown":      {func(c *Config) { c.Restore = []byte(`{"nope":1}`) }, errcode.BadDocument, ""},
		"empty object": {func(c *Config) { c.Restore = []byte(`{}`) }, errcode.BadDocument, ""},
		"null":         {func(c *Config) { c.Restore = []byte(`null`) }, errcode.BadDocument, ""},
		"no tables":    {func(c *Config) { c.Restore = []byte(`{"fences":{"tombstone":7,"benchmark":0},"nextPermit":0}`) }, errcode.BadDocument, ""},
		"null table": {func(c *Config) {
			c.Restore = bytes.Replace(emptyState(t), []byte(`"runs":{}`), []byte(`"runs":null`), 1)
		}, errcode.BadDocument, ""},
		"no bootstrap": {func(c *Config) { c.Restore, c.Bootstrap = emptyState(t), false }, errcode.Usage, ""},
		// json keeps the last of duplicate keys: the fence went back to 0.
		"duplicate key": {func(c *Config) {
			c.Restore = bytes.Replace(fencedState(t), []byte(`"benchmark":0}`), []byte(`"benchmark":0,"tombstone":0}`), 1)
		}, errcode.BadDocument, `$.fences.tombstone: duplicate key`},
		"duplicate table": {func(c *Config) {
			c.Restore = bytes.Replace(fencedState(t), []byte(`"runs":{}`), []byte(`"runs":{},"aliases":{}`), 1)
		}, errcode.BadDocument, `$.aliases: duplicate key`},
		"key in another case": {func(c *Config) {
			c.Restore = bytes.Replace(fencedState(t), []byte(`"fences"`), []byte(`"Fences"`), 1)
		}, errcode.BadDocument, `$.Fences: unknown field, must be spelled "fences"`},
		// json leaves the zero value for null: the fences went back to 0.
		"null fences": {func(c *Config) {
			c.Restore = bytes.Replace(fencedState(t), []byte(`{"tombstone":7,"benchmark":0}`), []byte(`null`), 1)
		}, errcode.BadDocument, `$.fences: want an object, found null`},
		"null fence": {func(c *Config) {
			c.Restore = bytes.Replace(fencedState(t), []byte(`"tombstone":7`), []byte(`"tombstone":null`), 1)
		}, errcode.BadDocument, `$.fences.tombstone: want a number, found null`},
		// The cluster identity a gate of version 3 or above holds: a
		// null one or one twice read as none, or as the last one.
		"null cluster ID": {func(c *Config) {
			c.Restore = bytes.Replace(identifiedState(t), []byte(`"clusterID":"`+testClusterID+`"`), []byte(`"clusterID":null`), 1)
		}, errcode.BadDocument, `$.clusterID: want a string, found null`},
		"cluster ID twice": {func(c *Config) {
			c.Restore = bytes.Replace(identifiedState(t), []byte(`"clusterID":"`+testClusterID+`"`), []byte(`"clusterID":"`+testClusterID+`","clusterID":""`), 1)
		}, errcode.BadDocument, `$.clusterID: duplicate key`},
		"cluster ID in another case": {func(c *Config) {
			c.Restore = bytes.Replace(identifiedState(t), []byte(`"clusterID"`), []byte(`"ClusterID"`), 1)
		}, errcode.BadDocument, `$.ClusterID: unknown field, must be spelled "clusterID"`},
		"cluster ID not hex": {func(c *Config) {
			c.Restore = bytes.Replace(identifiedState(t), []byte(testClusterID), []byte(strings.ToUpper(testClusterID)), 1)
		}, errcode.BadDocument, "lowercase hex"},
		"cluster ID below version 3": {func(c *Config) {
			c.Restore = bytes.Replace(identifiedState(t), []byte(fmt.Sprintf(`"clusterVersion":%d`, CommandVersion)), []byte(`"clusterVersion":2`), 1)
		}, errcode.BadDocument, "cluster ID at cluster version 2"},
		"trailing bracket": {func(c *Config) { c.Restore = append(fencedState(t), ']') }, errcode.BadDocument, ""},
		"trailing brace":   {func(c *Config) { c.Restore = append(fencedState(t), '}') }, errcode.BadDocument, ""},
	} {
		cfg := TestConfig(t.TempDir(), "n1")
		tc.mod(&cfg)
		err := NewNode(cfg).Start(ctxT(t, 10*time.Second))
		if c := errcode.Of(err); c != tc.want || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s: %v, want %s saying %q", name, err, tc.want, tc.msg)
		}
		if _, err := os.Stat(filepath.Join(cfg.DataDir)); !os.IsNotExist(err) {
			t.Errorf("%s: the refused restore created %s", name, cfg.DataDir)
		}
	}
	// The controls: an empty gate's own state restores, and so does the
	// one the edits above start from, a newline after it too.
	if _, err := DecodeBackup(emptyState(t)); err != nil {
		t.Fatalf("an empty gate's state: %v", err)
	}
	if s, err := DecodeBackup(append(fencedState(t), '\n')); err != nil || s.Fences.Tombstone != 7 || len(s.Aliases) != 1 {
		t.Fatalf("the state the edits start from: %v %+v", err, s)
	}
	if s, err := DecodeBackup(identifiedState(t)); err != nil || s.ClusterID != testClusterID {
		t.Fatalf("the state with a cluster ID the edits start from: %v %+v", err, s)
	}
	// A snapshot of a build before the identity (no clusterID, at
	// versions 0 to 4) restores into a member, without one.
	for _, v := range []uint64{0, 2, versionFenceLog} {
		s, _ := DecodeBackup(fencedState(t))
		s.ClusterVersion = v
		b, _ := EncodeState(s)
		f := NewFSM()
		if err := f.Restore(io.NopCloser(bytes.NewReader(b))); err != nil {
			t.Fatalf("a snapshot at version %d without a cluster ID: %v", v, err)
		}
		f.Read(func(s *State) {
			if s.ClusterID != "" || s.ClusterVersion != v {
				t.Fatalf("restored %q at version %d, want none at %d", s.ClusterID, s.ClusterVersion, v)
			}
		})
	}
}

// testClusterID is the identity of identifiedState.
const testClusterID = "0123456789abcdef0123456789abcdef"

// identifiedState is fencedState at CommandVersion, with the cluster
// identity testClusterID.
func identifiedState(t *testing.T) []byte {
	t.Helper()
	s, err := DecodeBackup(fencedState(t))
	if err != nil {
		t.Fatal(err)
	}
	f := NewFSM()
	f.state = s
	if r := f.ApplyCommand(&SetClusterVersion{Version: CommandVersion, ClusterID: testClusterID}); r.Err != nil {
		t.Fatal(r.Err)
	}
	b, err := f.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, []byte(`"clusterID":"`+testClusterID+`"`)) {
		t.Fatalf("no cluster ID in %s", b)
	}
	return b
}

// fencedState is the state of a gate with a tombstone fence at 7 and an
// alias at generation 1.
func fencedState(t *testing.T) []byte {
	t.Helper()
	f := NewFSM()
	root, report := dig("r1"), dig("report/r1")
	for _, c := range []Command{
		&Register{Root: root, Shards: shardsOf("r1", 1), Report: &ReportSummary{Digest: report, Verdict: manifest.Verified, DatasetSnapshot: dig("snap"), TombstoneWatermark: 7}},
		&AdvanceFence{Kind: FenceTombstone, Value: 7},
		&Publish{Alias: "main", Root: root},
	} {
		if r := f.ApplyCommand(c); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	b, err := f.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// emptyState is the state of a gate that holds nothing yet.
func emptyState(t *testing.T) []byte {
	t.Helper()
	b, err := EncodeState(NewState())
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func waitLeader(t *testing.T, n *Node) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !n.IsLeader(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no leader")
		}
	}
}

// TestRestoreAfterAFailedStart: a restore whose first start fails after
// the store is opened (its Raft port in use) leaves an empty raft.db; the
// retry must restore, not refuse the directory as one holding state (the
// operator then dropped --restore and founded an empty gate).
func TestRestoreAfterAFailedStart(t *testing.T) {
	s := NewState()
	s.Fences.Tombstone = 7
	backup, err := EncodeState(s)
	if err != nil {
		t.Fatal(err)
	}
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	cfg := TestConfig(t.TempDir(), "new1")
	cfg.Restore, cfg.RaftAddr = backup, busy.Addr().String()
	if err := NewNode(cfg).Start(ctxT(t, 10*time.Second)); err == nil {
		t.Fatal("a start on a Raft port in use succeeded")
	}
	cfg.RaftAddr = "127.0.0.1:0"
	n := StartTestNode(t, cfg)
	waitLeader(t, n)
	got := fencesOf(n).Tombstone
	if got != 7 {
		t.Fatalf("restored tombstone fence %d, want 7", got)
	}
}

// commandState reads n's state linearizably (so a leader that restarted
// has applied its log first) without the member records, which a restart
// on new ports rewrites.
func commandState(t *testing.T, n *Node) []byte {
	t.Helper()
	var b []byte
	var err error
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		rerr := n.ReadConsistent(func(s *State) {
			c := *s
			c.Nodes = map[string]*NodeInfo{}
			b, err = EncodeState(&c)
		})
		if rerr == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("read %s: %v", n.ID(), rerr)
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestRestoreBesideItsRunningCluster: a backup restored at the Raft
// address of a member of its cluster while the others still run (a
// member's disk lost, and --restore used where --join belongs) is
// refused, before anything is created: the old cluster's leader made the
// restored node its follower within a heartbeat, with the old log and
// configuration, while gate serve said it had founded a new cluster.
// Once the old members are stopped, the same restore founds the cluster.
func TestRestoreBesideItsRunningCluster(t *testing.T) {
	ctx := ctxT(t, time.Minute)
	old := MakeCluster(t, 3)
	cl := old.Client()
	publishedRelease(t, ctx, cl, "r1", 2)
	backup, err := cl.StateBytes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	lost := 0
	if old.Nodes[lost].IsLeader() {
		lost = 1
	}
	lostID := old.Nodes[lost].ID()
	cfg := old.Configs[lost]
	old.Stop(lost)
	cfg.DataDir = filepath.Join(t.TempDir(), "new")
	cfg.Restore, cfg.Bootstrap, cfg.Join = backup, true, ""
	n := NewNode(cfg)
	err = n.Start(ctx)
	n.Shutdown()
	if errcode.Of(err) != errcode.Usage || !strings.Contains(err.Error(), "as "+lostID) || !strings.Contains(err.Error(), "--join") {
		t.Fatalf("restore at the Raft address of %s beside its running cluster: %v, want USAGE naming it and --join", lostID, err)
	}
	if _, err := os.Stat(cfg.DataDir); !os.IsNotExist(err) {
		t.Fatalf("the refused restore created %s", cfg.DataDir)
	}
	leader := old.Leader(10 * time.Second)
	if st, err := NewClient(leader.URL()).Status(ctx); err != nil || len(st.Voters) != 3 {
		t.Fatalf("the old cluster after the refused restore: %+v %v", st, err)
	}

	old.Shutdown()
	n = StartTestNode(t, cfg)
	waitLeader(t, n)
	nc := NewClient(n.URL())
	defer nc.Close()
	st, err := nc.Status(ctx)
	if err != nil || len(st.Voters) != 1 || st.Voters[0].ID != lostID {
		t.Fatalf("the restored node's configuration: %+v %v, want %s alone", st, err, lostID)
	}
	r2 := registerVerified(t, ctx, nc, "r2", 2, 0, 0)
	if _, err := nc.Publish(ctx, "main", r2, 1, 0); err != nil {
		t.Fatalf("publish at generation 1 on the restored gate: %v", err)
	}
}

// A backup names the log index of the last command its state reflects,
// read on the leader under the lock its copy of the state is taken
// under, and a follower passes it on: at that index the leader's digest
// (gate status --digest) is the sha256 of the backup's bytes. Before, the index was
// not sent, and a backup could not be placed against a member's digest.
func TestStateBackupNamesItsIndex(t *testing.T) {
	ctx := ctxT(t, time.Minute)
	c := MakeCluster(t, 3)
	if _, err := c.Client().AdvanceFence(ctx, FenceTombstone, 3); err != nil {
		t.Fatal(err)
	}
	leader := c.Leader(10 * time.Second)
	follower := followerOf(c, leader)
	for _, n := range []*Node{leader, follower} {
		cl := NewClient(n.URL())
		for attempt := 1; ; attempt++ {
			b, index, known, err := cl.StateBackup(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if !known || index == 0 {
				t.Fatalf("backup through %s: index %d, known %v; want the leader's non-zero index", n.ID(), index, known)
			}
			at, d, err := leader.FSM().Digest()
			if err != nil {
				t.Fatal(err)
			}
			if at == index {
				if d != manifest.Sum(b) {
					t.Fatalf("backup through %s at index %d has sha256 %s; the leader's digest there is %s", n.ID(), index, manifest.Sum(b), d)
				}
				break
			}
			// The leader applied a command of its own in between.
			if attempt == 5 {
				t.Fatalf("backup through %s at index %d, the leader at %d, five times", n.ID(), index, at)
			}
		}
		cl.Close()
	}
}

// A backup (GET /v1/state) is a copy of the state taken under the
// FSM's lock and encoded once it is released, as Snapshot, Encode and
// Digest encode theirs: it encoded the state under the lock, holding up
// every Apply for as long (seconds at 30 releases of 30,000 shards:
// BenchmarkReleaseScale). Its bytes are still the state's at the index
// it names.
func TestStateBackupEncodesOutsideTheLock(t *testing.T) {
	ctx := ctxT(t, time.Minute)
	var fsm atomic.Pointer[FSM]
	var encoded, underLock atomic.Int32
	c := MakeCluster(t, 1, func(cfg *Config) {
		cfg.encodeAnswer = func(v any) ([]byte, error) {
			if f := fsm.Load(); f != nil {
				if _, ok := v.(*State); ok {
					encoded.Add(1)
					if !f.mu.TryLock() {
						underLock.Add(1)
					} else {
						f.mu.Unlock()
					}
				}
			}
			return json.Marshal(v)
		}
	})
	n := c.Nodes[0]
	fsm.Store(n.FSM())
	cl := NewClient(n.URL())
	defer cl.Close()
	registerVerified(t, ctx, cl, "r1", 3, 0, 0)
	// An Apply of the node's own (a version check) may hold the lock a
	// moment: one of three backups encoded without it is enough, where
	// every one was encoded under it.
	for attempt := 1; ; attempt++ {
		free := encoded.Load() - underLock.Load()
		b, index, _, err := cl.StateBackup(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if at, d, err := n.FSM().Digest(); err != nil || at == index && d != manifest.Sum(b) {
			t.Fatalf("backup at index %d has sha256 %s; the node's digest at %d is %s (%v)", index, manifest.Sum(b), at, d, err)
		}
		if encoded.Load()-underLock.Load() > free {
			break
		}
		if attempt == 3 {
			t.Fatalf("%d backups encoded the state, %d of them under the FSM's lock", encoded.Load(), underLock.Load())
		}
	}
}

// A restore founds its cluster at the restoring build's version, with a
// new cluster identity, whatever the backup's version: a backup of
// builds of version 2 (no identity) starts at CommandVersion, not at 3
// with a raise to CommandVersion after the first commands (which changed
// the restored state under its first readers), and one at
// versionFenceLog keeps its fences' logs. The leader loop is stopped
// (SweepInterval of an hour), so what the test reads is the restore's,
// not a raise's.
func TestRestoreStartsAtTheBuildVersion(t *testing.T) {
	fenced := func(version uint64, id string, log manifest.Digest) []byte {
		s := NewState()
		s.ClusterVersion, s.ClusterID = version, id
		s.Fences = Fences{Tombstone: 7, TombstoneLog: log}
		b, err := EncodeState(s)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := DecodeBackup(b); err != nil {
			t.Fatalf("the backup at version %d: %v", version, err)
		}
		return b
	}
	for _, tc := range []struct {
		name   string
		backup []byte
		log    manifest.Digest
	}{
		{"version 2, no identity", fenced(2, "", manifest.Digest{}), manifest.Digest{}},
		{"version 3", fenced(versionClusterID, newClusterID(), manifest.Digest{}), manifest.Digest{}},
		{"version 4 with a fence log", fenced(versionFenceLog, newClusterID(), dig("log at 7")), dig("log at 7")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			old, _ := DecodeBackup(tc.backup)
			cfg := TestConfig(t.TempDir(), "n1")
			cfg.Restore, cfg.SweepInterval = tc.backup, time.Hour
			n := StartTestNode(t, cfg)
			waitLeader(t, n)
			var s *State
			n.FSM().Read(func(st *State) { c := *st; s = &c })
			if s.ClusterVersion != CommandVersion || n.ClusterVersion() != CommandVersion {
				t.Fatalf("restored cluster at version %d (node says %d), want the build's %d", s.ClusterVersion, n.ClusterVersion(), CommandVersion)
			}
			if checkClusterID(s.ClusterID) != nil || s.ClusterID == old.ClusterID || n.ClusterID() != s.ClusterID {
				t.Fatalf("restored cluster ID %q (node says %q), the backup's %q: want a new one", s.ClusterID, n.ClusterID(), old.ClusterID)
			}
			if s.Fences != (Fences{Tombstone: 7, TombstoneLog: tc.log}) {
				t.Fatalf("restored fences %+v, want the backup's %+v", s.Fences, old.Fences)
			}
		})
	}
}
