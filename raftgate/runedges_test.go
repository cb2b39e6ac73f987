package raftgate

import (
	"math"
	"testing"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
)

// Edges of the run commands a hostile or unlucky operator reaches: a
// shard repeated in an attestation is a shard outside the assignment
// (the run fails: `run attest` refuses it before it is sent); epochs at
// the uint64 limit are stale, and an expected epoch whose successor
// wraps to 0 is no retry of the reassignment that made epoch 0; a
// cancelled run admits no checkpoint and no reassignment.
func TestRunCommandEdges(t *testing.T) {
	h := newHarness(t)
	root := h.verified("rel", 4, 0, 0)
	shards := shardsOf("rel", 4)
	h.ok(&Publish{Alias: "main", Root: root})

	h.ok(&CreateRun{Run: "dup", Alias: "main", WorldSize: 2, Assignment: [][]int{{0, 1}, {2, 3}}})
	res := h.reject(&Attest{Run: "dup", Rank: 0, Root: root, Shards: []manifest.Digest{shards[0], shards[0]}}, errcode.ShardNotAssigned)
	if s := res.Value.(RunSummary); s.State != RunFailed {
		t.Fatalf("run after a repeated shard: %+v", s)
	}

	h.ok(&CreateRun{Run: "edge", Alias: "main", WorldSize: 2, Assignment: [][]int{{0, 1}, {2, 3}}})
	before := h.state()
	maxEpoch := uint64(math.MaxUint64)
	h.reject(&Attest{Run: "edge", Rank: 0, Root: root, Shards: shards[:2], Epoch: &maxEpoch}, errcode.StaleEpoch)
	h.reject(&Reassign{Run: "edge", WorldSize: 2, Assignment: [][]int{{0, 1}, {2, 3}}, ExpectedEpoch: &maxEpoch}, errcode.StaleEpoch)
	if after := h.state().Runs["edge"]; after.Epoch != 0 || after.Attested != 0 || after.Reassigned != before.Runs["edge"].Reassigned {
		t.Fatalf("refused commands at the uint64 limit changed the run: %+v", after)
	}

	h.ok(&Attest{Run: "edge", Rank: 0, Root: root, Shards: shards[:2]})
	h.ok(&Attest{Run: "edge", Rank: 1, Root: root, Shards: []manifest.Digest{shards[3], shards[2]}})
	h.ok(&AdmitCheckpoint{Run: "edge", Step: math.MaxInt64, Root: root})
	h.reject(&AdmitCheckpoint{Run: "edge", Step: 0, Root: root}, errcode.StepRegression)
	h.ok(&CancelRun{Run: "edge", Reason: "done"})
	h.reject(&AdmitCheckpoint{Run: "edge", Step: math.MaxInt64, Root: root}, errcode.RunFailed)
	zero := uint64(0)
	h.reject(&Reassign{Run: "edge", WorldSize: 1, ExpectedEpoch: &zero}, errcode.RunFailed)
	if r := h.state().Runs["edge"]; r.State != RunCancelled || r.Epoch != 0 || r.WorldSize != 2 {
		t.Fatalf("a cancelled run after a checkpoint and a reassign: %+v", r)
	}
}
