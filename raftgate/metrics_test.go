package raftgate

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
)

// releaseSeries lists n's per-release series, gathered from its registry
// as /metrics serves them (prometheus/testutil would add a module), as
// "metric release[ code]" with the releases named by names, sorted.
func releaseSeries(t *testing.T, n *Node, names map[manifest.Digest]string) string {
	t.Helper()
	mfs, err := n.met.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	label := map[string]string{}
	for d, name := range names {
		label[d.String()] = name
	}
	var out []string
	for _, mf := range mfs {
		metric, ok := strings.CutPrefix(mf.GetName(), "shardproof_gate_")
		if !ok || metric != "barrier_wait_seconds" && metric != "run_failures_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			s := metric
			for _, lp := range m.GetLabel() {
				v := lp.GetValue()
				if lp.GetName() == "release" {
					v = label[v]
				}
				s += " " + v
			}
			out = append(out, s)
		}
	}
	slices.Sort(out)
	return strings.Join(out, ", ")
}

// pruneRun prunes (olderThan 0) until run is gone from the state: a run
// that ended in the same millisecond is not older than the prune.
func pruneRun(t *testing.T, cl *Client, n *Node, run string) {
	t.Helper()
	ctx := ctxT(t, 30*time.Second)
	for {
		if _, err := cl.Prune(ctx, 0); err != nil {
			t.Fatal(err)
		}
		gone := false
		n.FSM().Read(func(s *State) { gone = s.Runs[run] == nil })
		if gone {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// The per-release series (barrier_wait_seconds, run_failures_total) stay
// while the state holds a run on their release, and go, on every member
// that made them, once prune drops the release's last run: node1 led
// while r1's run failed at its deadline and r2's run opened its barrier,
// and keeps both series, also once it no longer leads, until the prune
// of r1's failed run deletes r1's (r2's run still runs), and the prune of
// r2's cancelled run r2's. Before, they stayed for the process's
// lifetime.
func TestReleaseSeriesGoWithTheirLastRun(t *testing.T) {
	ctx := ctxT(t, 2*time.Minute)
	c := MakeCluster(t, 2)
	n1, n2 := c.Nodes[0], c.Nodes[1]
	lead(t, n1, c.Nodes...)
	cl := c.Client()
	r1 := registerVerified(t, ctx, cl, "r1", 2, 0, 0)
	r2 := registerVerified(t, ctx, cl, "r2", 1, 0, 0)
	names := map[manifest.Digest]string{r1: "r1", r2: "r2"}
	if _, err := cl.Publish(ctx, "a1", r1, 0, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Publish(ctx, "a2", r2, 0, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.CreateRun(ctx, &CreateRun{Run: "late", Alias: "a1", WorldSize: 2, BarrierTimeoutMs: 1}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the sweep to fail the run late", func() bool {
		return releaseSeries(t, n1, names) == "run_failures_total BARRIER_TIMEOUT r1"
	})
	if _, err := cl.CreateRun(ctx, &CreateRun{Run: "ok", Alias: "a2", WorldSize: 1, BarrierTimeoutMs: 600_000}); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Attest(ctx, "ok", 0, r2, shardsOf("r2", 1)); err != nil {
		t.Fatal(err)
	}
	both := "barrier_wait_seconds r2, run_failures_total BARRIER_TIMEOUT r1"
	if got := releaseSeries(t, n1, names); got != both {
		t.Fatalf("node1's series with both runs in the state: %s, want %s", got, both)
	}

	lead(t, n2, c.Nodes...)
	waitApplied(t, c.Nodes)
	if got := releaseSeries(t, n1, names); got != both {
		t.Fatalf("node1's series once node2 leads, both runs in the state: %s, want %s", got, both)
	}
	pruneRun(t, cl, n1, "late")
	waitFor(t, "node1 to delete r1's series", func() bool {
		return releaseSeries(t, n1, names) == "barrier_wait_seconds r2"
	})

	if _, err := cl.CancelRun(ctx, "ok", "done"); err != nil {
		t.Fatal(err)
	}
	// Still there while the cancelled run is.
	waitApplied(t, c.Nodes)
	if got := releaseSeries(t, n1, names); got != "barrier_wait_seconds r2" {
		t.Fatalf("node1's series with r2's cancelled run in the state: %s", got)
	}
	pruneRun(t, cl, n1, "ok")
	waitFor(t, "node1 to delete r2's series", func() bool { return releaseSeries(t, n1, names) == "" })
	if got := releaseSeries(t, n2, names); got != "" {
		t.Fatalf("node2, which led while no run failed or opened, has series %s", got)
	}
}

// The deletion of per-release series costs a busy gate of many runs
// nothing per applied entry: forgetSeries, which the node loop calls every
// sweep, walks the runs (under the state's read lock, which applies wait
// for) only once a prune dropped some, and a walk makes no label string
// per run. Before, it walked them, a label string each, at every sweep
// whose applied index had moved: 100k runs held every apply up for each
// walk. The series of the release whose last run the prune dropped go,
// those of a release still run stay.
func TestForgetSeriesWalksRunsOnlyAfterADrop(t *testing.T) {
	n := &Node{fsm: NewFSM()}
	n.met = newMetrics(n)
	busy, old := dig("busy"), dig("old")
	names := map[manifest.Digest]string{busy: "busy", old: "old"}
	n.fsm.mu.Lock()
	for i := range 100_000 {
		id := fmt.Sprintf("run%06d", i)
		n.fsm.state.Runs[id] = &Run{ID: id, Root: busy, State: RunRunning, Created: 1}
	}
	n.fsm.state.Runs["old"] = &Run{ID: "old", Root: old, State: RunFailed, FailCode: string(errcode.BarrierTimeout), Created: 1, Ended: 2}
	n.fsm.mu.Unlock()
	n.met.observe(&CheckBarrier{Run: "old"}, &Result{Value: RunSummary{Root: old, State: RunFailed, FailCode: string(errcode.BarrierTimeout)}, Err: errcode.New(errcode.BarrierTimeout, "late")}, nil, time.Millisecond)
	n.met.observe(&CheckBarrier{Header: Header{Now: 5}}, &Result{Value: RunSummary{Root: busy, Barrier: BarrierOpen, BarrierOpened: 5, Created: 1}}, nil, time.Millisecond)
	n.forgetSeries() // observe gave both releases their first series
	both := "barrier_wait_seconds busy, run_failures_total BARRIER_TIMEOUT old"
	if got := releaseSeries(t, n, names); got != both {
		t.Fatalf("series with a run on each release: %s, want %s", got, both)
	}

	index := uint64(1)
	apply := func(c Command) *Result {
		t.Helper()
		c.header().Now = 1_000
		b, err := EncodeCommand(c)
		if err != nil {
			t.Fatal(err)
		}
		index++
		return n.fsm.Apply(&raft.Log{Type: raft.LogCommand, Index: index, Data: b}).(*Result)
	}
	entry := func() { apply(&CancelRun{Run: "none", Reason: "no such run"}) }
	perEntry := testing.AllocsPerRun(20, entry)
	withForget := testing.AllocsPerRun(20, func() { entry(); n.forgetSeries() })
	if withForget > perEntry+10 {
		t.Fatalf("an applied entry that dropped no run, then forgetSeries: %.0f allocations, the entry alone %.0f", withForget, perEntry)
	}
	if got := releaseSeries(t, n, names); got != both {
		t.Fatalf("series after entries that dropped no run: %s, want %s", got, both)
	}

	if res := apply(&Prune{}); res.Err != nil || len(res.Value.(PruneResult).Runs) != 1 {
		t.Fatalf("prune: %+v", res)
	}
	n.forgetSeries()
	if got := releaseSeries(t, n, names); got != "barrier_wait_seconds busy" {
		t.Fatalf("series once the prune dropped old's last run: %s", got)
	}
	var s *State
	n.fsm.Read(func(st *State) { s = st })
	dropped := n.fsm.runsDropped
	if walk := testing.AllocsPerRun(5, func() { dropped++; n.met.forget(s, dropped) }); walk > 10 {
		t.Fatalf("a walk of %d runs: %.0f allocations", len(s.Runs), walk)
	}
}
