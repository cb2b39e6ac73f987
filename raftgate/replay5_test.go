package raftgate

import (
	"testing"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
)

// version5Log is a log a cluster at command-schema version 5 wrote:
// entries stamped by the leader's clock (Now), with reassigns that land
// after a closed barrier's deadline before the sweep failed the run (a
// scale-in that opens the barrier, then admits a checkpoint; a reset
// that gives a new deadline), one exactly at the deadline, and an
// attestation and a sweep after a deadline.
func version5Log(t *testing.T) [][]byte {
	t.Helper()
	var log [][]byte
	now := int64(1_700_000_000_000)
	add := func(c Command) {
		c.header().Now = now
		b, err := EncodeCommand(c)
		if err != nil {
			t.Fatal(err)
		}
		log = append(log, b)
	}
	zero, one := uint64(0), uint64(1)
	root := dig("rel")
	add(&SetClusterVersion{Version: 5, ClusterID: "0123456789abcdef0123456789abcdef"})
	add(&Register{Root: root, Shards: shardsOf("rel", 2), Report: &ReportSummary{
		Digest: dig("report/rel"), Verdict: manifest.Verified, DatasetSnapshot: dig("snap"),
	}})
	add(&Publish{Alias: "main", Root: root})
	for _, id := range []string{"in", "reset", "edge", "swept"} {
		add(&CreateRun{Run: id, Alias: "main", WorldSize: 2, Assignment: [][]int{{0, 1}, {}}, BarrierTimeoutMs: 1000})
		add(&Attest{Run: id, Rank: 0, Root: root, Shards: shardsOf("rel", 2), Epoch: &zero})
	}
	now += 1000 // at the deadline: not late
	add(&Reassign{Run: "edge", WorldSize: 1, Assignment: [][]int{{0, 1}}, ExpectedEpoch: &zero})
	now++ // past it
	add(&Reassign{Run: "in", WorldSize: 1, Assignment: [][]int{{0, 1}}, ExpectedEpoch: &zero})
	add(&AdmitCheckpoint{Run: "in", Step: 7, Root: root})
	add(&Reassign{Run: "reset", WorldSize: 2, Assignment: [][]int{{0, 1}, {}}, Reset: []int{0}, ExpectedEpoch: &zero})
	add(&Reassign{Run: "reset", WorldSize: 2, Assignment: [][]int{{0, 1}, {}}, Reset: []int{0}, ExpectedEpoch: &zero}) // its retry
	add(&Attest{Run: "reset", Rank: 0, Root: root, Shards: shardsOf("rel", 2), Epoch: &one})
	add(&CheckBarrier{Run: "swept"})
	add(&Reassign{Run: "swept", WorldSize: 1, Assignment: [][]int{{0, 1}}, ExpectedEpoch: &zero})
	return log
}

// version5LogDigest is the state digest a build of command-schema version
// 5 (af7ec80, the commit before version 6) reaches by applying
// version5Log: computed there by this test's replay.
const version5LogDigest = "sha256:f09c9a41f0f930235b1dff029eb2ff502944c91f881f8aff269f3b873e1b0ce0"

// A log written at cluster version 5 replays on this build to the state,
// byte for byte, that builds of version 5 reached: late reassigns are
// applied as they applied them (version 6 changes only what Apply does at
// cluster version 6). Raised to 6, the same late scale-in fails the run.
func TestVersion5LogReplaysAsVersion5Builds(t *testing.T) {
	f := NewFSM()
	for i, b := range version5Log(t) {
		if res := f.ApplyBytes(b); res.Err != nil {
			switch errcode.Of(res.Err) {
			case errcode.RunFailed, errcode.BarrierTimeout:
			default:
				t.Fatalf("entry %d: %v", i, res.Err)
			}
		}
	}
	_, d, err := f.Digest()
	if err != nil {
		t.Fatal(err)
	}
	if d.String() != version5LogDigest {
		t.Fatalf("the version-5 log replays to %s, builds of version 5 reached %s", d, version5LogDigest)
	}
	var runs map[string]RunSummary
	f.Read(func(s *State) {
		runs = map[string]RunSummary{}
		for id, r := range s.Runs {
			runs[id] = r.Summary()
		}
	})
	for id, want := range map[string]struct {
		state string
		epoch uint64
		step  int64
	}{"in": {RunRunning, 1, 7}, "edge": {RunRunning, 1, -1}, "reset": {RunWaiting, 1, -1}, "swept": {RunFailed, 0, -1}} {
		if r := runs[id]; r.State != want.state || r.Epoch != want.epoch || r.Step != want.step {
			t.Fatalf("run %s after the version-5 log: %s at epoch %d, step %d; want %s at %d, step %d", id, r.State, r.Epoch, r.Step, want.state, want.epoch, want.step)
		}
	}

	// Raised to 6: a reassign past the deadline of "reset", whose
	// barrier the late reset closed again, fails it.
	now := runs["reset"].Deadline + 1
	apply := func(c Command) *Result {
		c.header().Now = now
		b, err := EncodeCommand(c)
		if err != nil {
			t.Fatal(err)
		}
		return f.ApplyBytes(b)
	}
	if res := apply(&SetClusterVersion{Version: versionReassignTimesOut}); res.Err != nil {
		t.Fatal(res.Err)
	}
	one := uint64(1)
	res := apply(&Reassign{Run: "reset", WorldSize: 1, Assignment: [][]int{{0, 1}}, ExpectedEpoch: &one})
	if s, _ := res.Value.(RunSummary); errcode.Of(res.Err) != errcode.BarrierTimeout || s.State != RunFailed || s.Epoch != 1 {
		t.Fatalf("a late scale-in at version %d: %+v, %v; want the run FAILED with BARRIER_TIMEOUT at epoch 1", versionReassignTimesOut, s, res.Err)
	}
}
