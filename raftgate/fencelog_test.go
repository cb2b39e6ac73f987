package raftgate

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/shardproof/shardproof/internal/errcode"
)

// An advance records the prefix digest of its log beside the fence: a
// second advance to the same value with another log is
// FENCE_LOG_MISMATCH and changes nothing, the same log or none changes
// nothing, a fence that has none takes the first one named at its value,
// and an advance to a higher value without one leaves the fence without
// one (the old digest describes the log up to the old value only). Below
// cluster version 4 an advance with a log is CLUSTER_VERSION; a state
// without logs encodes as before, and one with a log below version 4 is
// not a valid state.
func TestAdvanceFenceLog(t *testing.T) {
	h := newHarness(t)
	h.ok(&AdvanceFence{Kind: FenceTombstone, Value: 3})
	plain, err := EncodeState(h.state())
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(plain, []byte("Log")) {
		t.Fatalf("a state without fence logs encodes them: %s", plain)
	}
	l7, other7, l9 := dig("log at 7"), dig("another log at 7"), dig("log at 9")
	h.reject(&AdvanceFence{Kind: FenceTombstone, Value: 7, Log: l7}, errcode.ClusterVersion)
	if f := h.state().Fences; f != (Fences{Tombstone: 3}) {
		t.Fatalf("fences after the refused advance: %+v", f)
	}
	h.ok(&SetClusterVersion{Version: versionFenceLog, ClusterID: newClusterID()})

	fences := func(want Fences) {
		t.Helper()
		if f := h.state().Fences; f != want {
			t.Fatalf("fences %+v, want %+v", f, want)
		}
	}
	h.ok(&AdvanceFence{Kind: FenceTombstone, Value: 7, Log: l7})
	fences(Fences{Tombstone: 7, TombstoneLog: l7})
	h.ok(&AdvanceFence{Kind: FenceTombstone, Value: 7, Log: l7})
	h.ok(&AdvanceFence{Kind: FenceTombstone, Value: 7})
	h.reject(&AdvanceFence{Kind: FenceTombstone, Value: 7, Log: other7}, errcode.FenceLogMismatch)
	h.reject(&AdvanceFence{Kind: FenceTombstone, Value: 6, Log: other7}, errcode.FenceRegression)
	fences(Fences{Tombstone: 7, TombstoneLog: l7})

	h.ok(&AdvanceFence{Kind: FenceBenchmark, Value: 2, Log: dig("registry at 2")})
	fences(Fences{Tombstone: 7, TombstoneLog: l7, Benchmark: 2, BenchmarkLog: dig("registry at 2")})

	// From cluster version 5, a fence that names its log moves only
	// with a log: a bare advance would drop it, and the next advance
	// would record any log.
	h.ok(&SetClusterVersion{Version: versionFenceLogKept})
	h.reject(&AdvanceFence{Kind: FenceTombstone, Value: 9}, errcode.FenceLogMismatch)
	h.reject(&AdvanceFence{Kind: FenceBenchmark, Value: 3, SpareChecked: true}, errcode.FenceLogMismatch)
	fences(Fences{Tombstone: 7, TombstoneLog: l7, Benchmark: 2, BenchmarkLog: dig("registry at 2")})
	h.ok(&AdvanceFence{Kind: FenceTombstone, Value: 9, Log: l9})
	h.reject(&AdvanceFence{Kind: FenceTombstone, Value: 9, Log: l7}, errcode.FenceLogMismatch)
	fences(Fences{Tombstone: 9, TombstoneLog: l9, Benchmark: 2, BenchmarkLog: dig("registry at 2")})

	st := h.state()
	b, err := EncodeState(st)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, []byte(`"tombstoneLog":"`+l9.String()+`"`)) {
		t.Fatalf("state encoding without the tombstone log: %s", b)
	}
	st.ClusterVersion = versionFenceLog - 1
	if err := st.Validate(); err == nil {
		t.Fatal("a state with a fence log at cluster version 3 is valid")
	}
}

// At cluster version 4 an advance to a higher value that names no log
// moves a fence that names its log and drops the log, as builds of
// version 4 applied it: a member of this build replaying their log, or
// following one of them as leader during a rolling upgrade, reaches the
// state they reached (refusing it, it kept the fence and its log where
// they had moved it, and its permits open where theirs closed). From
// version 5 the same advance is FENCE_LOG_MISMATCH and changes nothing.
func TestBareAdvanceOfALoggedFenceByClusterVersion(t *testing.T) {
	h := newHarness(t)
	h.ok(&SetClusterVersion{Version: versionFenceLog, ClusterID: newClusterID()})
	l7, l11 := dig("log at 7"), dig("log at 11")
	h.ok(&AdvanceFence{Kind: FenceTombstone, Value: 7, Log: l7})
	h.ok(&AdvanceFence{Kind: FenceTombstone, Value: 9})
	if f := h.state().Fences; f != (Fences{Tombstone: 9}) {
		t.Fatalf("fences after a bare advance at cluster version 4: %+v, want the fence at 9 without a log", f)
	}
	h.ok(&SetClusterVersion{Version: versionFenceLogKept})
	h.ok(&AdvanceFence{Kind: FenceTombstone, Value: 11, Log: l11})
	h.reject(&AdvanceFence{Kind: FenceTombstone, Value: 12}, errcode.FenceLogMismatch)
	if f := h.state().Fences; f != (Fences{Tombstone: 11, TombstoneLog: l11}) {
		t.Fatalf("fences after a bare advance at cluster version 5: %+v", f)
	}
}

// The command field is version 4: a build of version 3 halts at an
// advance that carries it, and applies one without it.
func TestAdvanceFenceLogVersion(t *testing.T) {
	if v := commandVersion(&AdvanceFence{Kind: FenceTombstone, Value: 1, SpareChecked: true, Log: dig("l")}); v != versionFenceLog {
		t.Fatalf("an advance with a log is version %d, want %d", v, versionFenceLog)
	}
	f := NewFSM()
	f.version = versionFenceLog - 1
	b, err := EncodeCommand(&AdvanceFence{Kind: FenceTombstone, Value: 1, Log: dig("l")})
	if err != nil {
		t.Fatal(err)
	}
	if r := f.ApplyBytes(b); errcode.Of(r.Err) != errcode.BadDocument {
		t.Fatalf("a build of version 3 applying an advance with a log: %v, want BAD_DOCUMENT", r.Err)
	}
	if b, err = EncodeCommand(&AdvanceFence{Kind: FenceTombstone, Value: 1}); err != nil {
		t.Fatal(err)
	}
	if r := f.ApplyBytes(b); r.Err != nil {
		t.Fatal(r.Err)
	}
}

// A rolling upgrade: node1 runs a build of version 3. An advance with its
// log's prefix digest is CLUSTER_VERSION and changes nothing on any
// member; one without it (gate fence KIND VALUE) still moves the fence.
// Once node1 runs the new build the leader raises the version to 4 and
// the same advance records the digest on every member alike.
func TestFenceLogNeedsVersion4(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := MakeCluster(t, 3, node1OfBuild(versionFenceLog-1))
	cl := c.Client()
	before := memberDigests(t, c)
	if _, err := cl.AdvanceFenceLog(ctx, FenceTombstone, 7, dig("log at 7")); errcode.Of(err) != errcode.ClusterVersion {
		t.Fatalf("an advance with a log at version %d: %v, want CLUSTER_VERSION", c.Nodes[1].ClusterVersion(), err)
	}
	if after := memberDigests(t, c); after != before {
		t.Fatal("the refused advance changed the state")
	}
	if _, err := cl.AdvanceFence(ctx, FenceTombstone, 7); err != nil {
		t.Fatal(err)
	}
	c.Configs[0].olderBuild = nil
	c.Restart(0)
	c.WaitClusterVersion(CommandVersion, 30*time.Second)
	noHalts(t, c)
	r, err := cl.AdvanceFenceLog(ctx, FenceTombstone, 7, dig("log at 7"))
	if err != nil {
		t.Fatal(err)
	}
	if r.Fences.Tombstone != 7 || r.Fences.TombstoneLog != dig("log at 7") {
		t.Fatalf("fences after the advance at version 4: %+v", r.Fences)
	}
	memberDigests(t, c)
	for _, n := range runningNodes(c) {
		f := fencesOf(n)
		if f.TombstoneLog != dig("log at 7") {
			t.Fatalf("%s: fences %+v", n.ID(), f)
		}
	}
	if _, err := cl.AdvanceFenceLog(ctx, FenceTombstone, 7, dig("another log at 7")); errcode.Of(err) != errcode.FenceLogMismatch {
		t.Fatalf("another log at 7: %v, want FENCE_LOG_MISMATCH", err)
	}
	noHalts(t, c)
}
