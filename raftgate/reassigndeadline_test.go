package raftgate

import (
	"testing"

	"github.com/shardproof/shardproof/internal/errcode"
)

// A reassign that lands after the barrier deadline of a run whose barrier
// is closed, before the leader's sweep fails it, fails the run with
// BARRIER_TIMEOUT from cluster version 6, as an attestation does: it
// neither gives the late run a new deadline nor, on a scale-in that
// removes the ranks still missing, opens its barrier (which let it admit
// checkpoints). Below the version it is applied as builds of version 5
// applied it, so their logs replay to the states they gave.
func TestReassignAfterDeadlineFailsRunFromVersion6(t *testing.T) {
	late := func(h *harness, id string) {
		h.t.Helper()
		h.ok(&CreateRun{Run: id, Alias: "main", WorldSize: 2, Assignment: [][]int{{0, 1}, {}}, BarrierTimeoutMs: 1000})
		h.ok(&Attest{Run: id, Rank: 0, Root: h.state().Runs[id].Root, Shards: shardsOf("rel", 2)})
		h.now += 1001
	}
	zero := uint64(0)
	scaleIn := func(id string) *Reassign {
		return &Reassign{Run: id, WorldSize: 1, Assignment: [][]int{{0, 1}}, ExpectedEpoch: &zero}
	}
	reset := func(id string) *Reassign {
		return &Reassign{Run: id, WorldSize: 2, Assignment: [][]int{{0, 1}, {}}, Reset: []int{0}, ExpectedEpoch: &zero}
	}

	h := newHarness(t)
	root := h.verified("rel", 2, 0, 0)
	h.ok(&Publish{Alias: "main", Root: root})
	h.ok(&SetClusterVersion{Version: versionReassignTimesOut - 1, ClusterID: newClusterID()})
	late(h, "old-in")
	if s := h.ok(scaleIn("old-in")).(RunSummary); s.State != RunRunning || s.Barrier != BarrierOpen {
		t.Fatalf("below version %d a late scale-in is applied as before: %+v", versionReassignTimesOut, s)
	}
	late(h, "old-reset")
	if s := h.ok(reset("old-reset")).(RunSummary); s.State != RunWaiting || s.Deadline != h.now+1000 {
		t.Fatalf("below version %d a late reassignment sets a new deadline as before: %+v", versionReassignTimesOut, s)
	}

	h.ok(&SetClusterVersion{Version: versionReassignTimesOut})
	for _, id := range []string{"in", "reset"} {
		late(h, id)
		c := scaleIn(id)
		if id == "reset" {
			c = reset(id)
		}
		res := h.reject(c, errcode.BarrierTimeout)
		if s := res.Value.(RunSummary); s.State != RunFailed || s.Barrier != BarrierClosed || s.FailCode != string(errcode.BarrierTimeout) || s.Epoch != 0 || s.WorldSize != 2 {
			t.Fatalf("a late reassign (%s) at version %d: %+v, want the run FAILED with BARRIER_TIMEOUT at epoch 0", id, versionReassignTimesOut, s)
		}
		st := h.state()
		if p := st.Permits[st.Runs[id].Permit]; p.State != PermitReleased {
			t.Fatalf("the permit of a run a late reassign failed is %s", p.State)
		}
		h.reject(c, errcode.RunFailed)
		h.reject(&AdmitCheckpoint{Run: id, Step: 1, Root: root}, errcode.RunFailed)
	}

	// At the deadline it is not late yet, and an open barrier has no
	// deadline: both reassign as before.
	h.ok(&CreateRun{Run: "edge", Alias: "main", WorldSize: 2, Assignment: [][]int{{0, 1}, {}}, BarrierTimeoutMs: 1000})
	h.ok(&Attest{Run: "edge", Rank: 0, Root: root, Shards: shardsOf("rel", 2)})
	h.now += 1000
	if s := h.ok(scaleIn("edge")).(RunSummary); s.State != RunRunning || s.Barrier != BarrierOpen {
		t.Fatalf("a scale-in at the deadline: %+v", s)
	}
	h.now += 5000
	one := uint64(1)
	if s := h.ok(&Reassign{Run: "edge", WorldSize: 2, Assignment: [][]int{{0, 1}, {}}, ExpectedEpoch: &one}).(RunSummary); s.State != RunWaiting || s.Epoch != 2 || s.Deadline != h.now+1000 {
		t.Fatalf("a scale-out of a running run long after its first deadline: %+v", s)
	}
}
