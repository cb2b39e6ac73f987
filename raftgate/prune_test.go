package raftgate

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
)

// prune drops ended runs, the closed permits nothing names and the shard
// lists of unreachable releases, and nothing that an alias, a live run or
// a later command can still need.
func TestPrune(t *testing.T) {
	h := newHarness(t)
	a := h.verified("a", 3, 0, 0)
	b := h.verified("b", 3, 0, 0)
	c := h.verified("c", 3, 0, 0)
	staged := dig("staged")
	h.ok(&Register{Root: staged, Shards: shardsOf("staged", 2)})
	bad := dig("bad")
	h.ok(&Register{Root: bad, Shards: shardsOf("bad", 2), Report: &ReportSummary{
		Digest: dig("report/bad"), Verdict: manifest.Invalid, DatasetSnapshot: dig("snap"),
	}})
	// Window of one generation: a and then b leave it and retire.
	h.ok(&Publish{Alias: "main", Root: a, Retain: 1})
	h.ok(&Publish{Alias: "main", Root: b, ExpectedGeneration: 1})
	h.ok(&Publish{Alias: "main", Root: c, ExpectedGeneration: 2})
	old := h.ok(&CreateRun{Run: "old", Alias: "main", WorldSize: 1}).(RunSummary)
	h.ok(&CancelRun{Run: "old", Reason: "done"})
	live := h.ok(&CreateRun{Run: "live", Alias: "main", WorldSize: 1}).(RunSummary)
	h.ok(&CreateRun{Run: "long", Alias: "main", WorldSize: 1}) // created early, ends late
	h.now += 10_000
	h.ok(&CancelRun{Run: "long"})
	late := h.verified("late", 2, 0, 0) // registered after the cutoff below
	h.ok(&Publish{Alias: "other", Root: late, Retain: 1})
	h.ok(&Publish{Alias: "other", Root: c, ExpectedGeneration: 1}) // late retires
	h.ok(&CreateRun{Run: "recent", Alias: "main", WorldSize: 1})
	h.ok(&CancelRun{Run: "recent"})
	h.now += 1_000

	before := h.state()
	if before.Releases[a.String()].State != ReleaseRetired || before.Releases[late.String()].State != ReleaseRetired {
		t.Fatalf("fixture: a is %s, late is %s", before.Releases[a.String()].State, before.Releases[late.String()].State)
	}
	h.reject(&Prune{OlderThanMs: -1}, errcode.BadInput)

	res := h.ok(&Prune{OlderThanMs: 5_000}).(PruneResult)
	if !slices.Equal(res.Runs, []string{"old"}) {
		t.Fatalf("pruned runs %v, want [old] (live is live, recent and long ended recently)", res.Runs)
	}
	if !slices.Equal(res.Permits, []string{old.Permit}) {
		t.Fatalf("pruned permits %v, want the old run's %s", res.Permits, old.Permit)
	}
	if want := []string{a.String(), b.String(), bad.String()}; !slices.Equal(res.Releases, sorted(want)) {
		t.Fatalf("pruned releases %v, want %v", res.Releases, sorted(want))
	}
	s := h.state()
	if s.Runs["old"] != nil || s.Runs["live"] == nil || s.Runs["recent"] == nil || s.Runs["long"] == nil || s.Permits[live.Permit] == nil {
		t.Fatalf("runs after prune: %v", slices.Sorted(maps.Keys(s.Runs)))
	}
	for _, r := range []manifest.Digest{a, b, bad} {
		if rel := s.Releases[r.String()]; rel == nil || !rel.Pruned || len(rel.Shards) != 0 {
			t.Fatalf("release %s after prune: %+v", r, rel)
		}
	}
	for _, r := range []manifest.Digest{c, staged, late} {
		if rel := s.Releases[r.String()]; rel.Pruned || len(rel.Shards) == 0 {
			t.Fatalf("release %s should keep its shards: %+v", r, rel)
		}
	}
	// Alias histories and their permits stay whole.
	for _, name := range []string{"main", "other"} {
		if !slices.Equal(before.Aliases[name].History, s.Aliases[name].History) {
			t.Fatalf("alias %s history changed", name)
		}
		for _, e := range s.Aliases[name].History {
			if s.Permits[e.Permit] == nil {
				t.Fatalf("alias %s generation %d lost permit %s", name, e.Generation, e.Permit)
			}
		}
	}

	// A pruned run leaves a tombstone: its ID answers RUN_PRUNED to every
	// command, and a createRun retried with the same parameters does not
	// resolve the alias again (it now names c, not what old pinned).
	if p := s.PrunedRuns["old"]; p == nil || p.Root != old.Root || p.Generation != old.Generation || p.State != RunCancelled || p.Pruned != h.now {
		t.Fatalf("tombstone of old: %+v (run pinned %s generation %d)", p, old.Root, old.Generation)
	}
	if len(s.PrunedRuns) != 1 {
		t.Fatalf("tombstones %v, want only old", slices.Sorted(maps.Keys(s.PrunedRuns)))
	}
	for _, c := range []Command{
		&CreateRun{Run: "old", Alias: "main", WorldSize: 1},
		&CreateRun{Run: "old", Alias: "other", WorldSize: 2},
		&Attest{Run: "old", Rank: 0, Root: old.Root},
		&Reassign{Run: "old", WorldSize: 1},
		&AdmitCheckpoint{Run: "old", Root: old.Root, Step: 1},
		&CancelRun{Run: "old"},
		&CheckBarrier{Run: "old"},
	} {
		h.reject(c, errcode.RunPruned)
	}
	h.reject(&Attest{Run: "never", Rank: 0, Root: old.Root}, errcode.UnknownRun)

	// Pruning again finds nothing more; a pruned release stays unusable
	// until registered again, which takes its shards back.
	again := h.ok(&Prune{OlderThanMs: 5_000}).(PruneResult)
	if len(again.Runs)+len(again.Permits)+len(again.Releases) != 0 {
		t.Fatalf("second prune: %+v", again)
	}
	h.reject(&Publish{Alias: "main", Root: a, ExpectedGeneration: 3}, errcode.NotVerified)
	h.reject(&Rollback{Alias: "main", Root: b, ExpectedGeneration: 3}, errcode.RollbackIneligible)
	h.ok(&Register{Root: a, Shards: shardsOf("a", 3)})
	if rel := h.state().Releases[a.String()]; rel.Pruned || !slices.Equal(rel.Shards, shardsOf("a", 3)) || rel.State != ReleaseRetired {
		t.Fatalf("re-registered pruned release: %+v", rel)
	}
	// Nothing younger than the cutoff goes: with the cutoff before every
	// creation, prune changes nothing.
	h2 := newHarness(t)
	r := h2.verified("r", 1, 0, 0)
	h2.ok(&Publish{Alias: "x", Root: r})
	h2.ok(&CreateRun{Run: "j", Alias: "x", WorldSize: 1})
	h2.ok(&CancelRun{Run: "j"})
	b1, _ := EncodeState(h2.state())
	if res := h2.ok(&Prune{OlderThanMs: 1}).(PruneResult); len(res.Runs)+len(res.Permits)+len(res.Releases) != 0 {
		t.Fatalf("prune of what is as old as now: %+v", res)
	}
	if b2, _ := EncodeState(h2.state()); string(b1) != string(b2) {
		t.Fatal("an empty prune changed the state")
	}
	// Until a run is pruned the state encodes without the tombstone
	// table, as gates before it did.
	if strings.Contains(string(b1), "prunedRuns") {
		t.Fatalf("state without pruned runs encodes the table: %s", b1)
	}
	h2.now += 10
	h2.ok(&Prune{OlderThanMs: 1})
	b3, _ := EncodeState(h2.state())
	back, err := DecodeState(b3)
	if err != nil || back.PrunedRuns["j"] == nil || back.PrunedRuns["j"].State != RunCancelled {
		t.Fatalf("state with a tombstone did not round-trip: %v, %+v", err, back)
	}
	// A state that names a run both live and pruned is refused.
	both, err := DecodeState(b1) // j still live
	if err != nil {
		t.Fatal(err)
	}
	both.PrunedRuns = back.PrunedRuns
	if err := both.Validate(); err == nil || !strings.Contains(err.Error(), "both live and pruned") {
		t.Fatalf("Validate of a run live and pruned: %v", err)
	}
}

func sorted(s []string) []string { return slices.Sorted(slices.Values(s)) }
