package raftgate

import (
	"bytes"
	"context"
	"slices"
	"testing"
	"time"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
)

// memberDigests waits until every running member applied the log and
// returns the state digest they all hold, failing the test if two differ.
func memberDigests(t *testing.T, c *TestCluster) manifest.Digest {
	t.Helper()
	nodes := runningNodes(c)
	waitApplied(t, nodes)
	var first manifest.Digest
	for i, n := range nodes {
		_, d, err := n.FSM().Digest()
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = d
		} else if d != first {
			t.Fatalf("state digests differ: %s has %s, %s has %s", nodes[0].ID(), first, n.ID(), d)
		}
	}
	return first
}

// upgradeTo2 restarts member i, a build of version 1, on the newest build
// and waits until the cluster version is CommandVersion on every member.
func upgradeTo2(t *testing.T, c *TestCluster, i int) {
	t.Helper()
	if v := c.Nodes[1].ClusterVersion(); v != 1 {
		t.Fatalf("cluster version %d before the upgrade; the test wants 1", v)
	}
	c.Configs[i].olderBuild = nil
	c.Restart(i)
	c.WaitClusterVersion(CommandVersion, 30*time.Second)
	noHalts(t, c)
}

// pruneRelease prunes until root is pruned (prune drops a release
// registered before its cutoff, a millisecond of the leader's clock).
func pruneRelease(t *testing.T, ctx context.Context, cl *Client, root manifest.Digest) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("release %s never pruned", root)
		}
		res, err := cl.Prune(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		if slices.Contains(res.Releases, root.String()) {
			return
		}
	}
}

// releaseOn returns root's release in n's state.
func releaseOn(n *Node, root manifest.Digest) Release {
	var rel Release
	n.FSM().Read(func(s *State) { rel = copyRelease(s.Releases[root.String()]) })
	return rel
}

// A register the gate refuses changes nothing from cluster version 2 on.
// At version 1 (node1 a build of version 1) a VERIFIED report of a
// pruned INVALID release is NOT_VERIFIED and still gives the release its
// shard list back, on every member alike, as builds of version 1 do.
// Once node1 is upgraded and the version rose to 2, the same refusal,
// and a retry of the INVALID report that names another snapshot
// (BAD_INPUT), leave the pruned release, and the state digest, as they
// were.
func TestRefusedRegisterKeepsPrunedReleaseFromVersion2(t *testing.T) {
	ctx := ctxT(t, 2*time.Minute)
	c := MakeCluster(t, 3, node1OfBuild(1))
	cl := c.Client()
	root, shards := dig("bad"), shardsOf("bad", 3)
	invalid := &ReportSummary{Digest: dig("report/bad"), Verdict: manifest.Invalid, DatasetSnapshot: dig("snap"), TombstoneHits: 1}
	if _, err := cl.Register(ctx, &Register{Root: root, Shards: shards, Report: invalid}); err != nil {
		t.Fatal(err)
	}
	verified := func(label string) *Register {
		return &Register{Root: root, Shards: shards, Report: &ReportSummary{Digest: dig(label), Verdict: manifest.Verified, DatasetSnapshot: dig("snap")}}
	}

	pruneRelease(t, ctx, cl, root)
	memberDigests(t, c)
	if _, err := cl.Register(ctx, verified("report/v1")); errcode.Of(err) != errcode.NotVerified {
		t.Fatalf("a VERIFIED report of an INVALID release at version 1: %v, want NOT_VERIFIED", err)
	}
	memberDigests(t, c)
	for _, n := range c.Nodes {
		if rel := releaseOn(n, root); rel.Pruned || !slices.Equal(rel.Shards, shards) {
			t.Fatalf("%s after the refused register at version 1: pruned %v, %d shards; want the shards back, as builds of version 1 apply it", n.ID(), rel.Pruned, len(rel.Shards))
		}
	}

	pruneRelease(t, ctx, cl, root)
	upgradeTo2(t, c, 0)
	before := memberDigests(t, c)
	if _, err := cl.Register(ctx, verified("report/v2")); errcode.Of(err) != errcode.NotVerified {
		t.Fatalf("a VERIFIED report of an INVALID release at version 2: %v, want NOT_VERIFIED", err)
	}
	other := *invalid
	other.DatasetSnapshot = dig("other snap")
	if _, err := cl.Register(ctx, &Register{Root: root, Shards: shards, Report: &other}); errcode.Of(err) != errcode.BadInput {
		t.Fatalf("the INVALID report again with another snapshot at version 2: %v, want BAD_INPUT", err)
	}
	if after := memberDigests(t, c); after != before {
		t.Fatalf("the refused registers at version 2 changed the state: digest %s → %s", before, after)
	}
	for _, n := range c.Nodes {
		if rel := releaseOn(n, root); !rel.Pruned || len(rel.Shards) != 0 {
			t.Fatalf("%s after the refused registers at version 2: pruned %v, %d shards; want it pruned", n.ID(), rel.Pruned, len(rel.Shards))
		}
	}
	// A register that takes effect still takes the shards back.
	if _, err := cl.Register(ctx, &Register{Root: root, Shards: shards}); err != nil {
		t.Fatal(err)
	}
	memberDigests(t, c)
	if rel := releaseOn(c.Nodes[0], root); rel.Pruned || !slices.Equal(rel.Shards, shards) {
		t.Fatalf("re-registered at version 2: pruned %v, %d shards; want the shards back", rel.Pruned, len(rel.Shards))
	}
}

// From cluster version 2 an attestation at an epoch a scale-in replaced
// is STALE_EPOCH, also from the rank the scale-in removed, and changes
// nothing. At version 1 (node1 a build of version 1) that rank is
// answered BAD_INPUT "rank outside", on every member alike, as builds of
// version 1 answer it.
func TestScaledInRankAttestingAtOldEpochIsStaleFromVersion2(t *testing.T) {
	ctx := ctxT(t, 2*time.Minute)
	c := MakeCluster(t, 3, node1OfBuild(1))
	cl := c.Client()
	root := publishedRelease(t, ctx, cl, "r1", 4)
	rank1 := []manifest.Digest{shardsOf("r1", 4)[1], shardsOf("r1", 4)[3]}
	// scaleIn creates run id over two ranks and scales it in to one:
	// rank 1 verified its shards at epoch 0.
	scaleIn := func(id string) {
		t.Helper()
		if _, err := cl.CreateRun(ctx, &CreateRun{Run: id, Alias: "main", WorldSize: 2, BarrierTimeoutMs: time.Hour.Milliseconds()}); err != nil {
			t.Fatal(err)
		}
		if _, err := cl.Reassign(ctx, &Reassign{Run: id, WorldSize: 1, ExpectedEpoch: new(uint64(0))}); err != nil {
			t.Fatal(err)
		}
	}

	scaleIn("job1")
	if _, err := cl.AttestEpoch(ctx, "job1", 1, 0, root, rank1); errcode.Of(err) != errcode.BadInput {
		t.Fatalf("rank 1 attesting at epoch 0 after a scale-in, at version 1: %v, want BAD_INPUT as builds of version 1 answer", err)
	}
	memberDigests(t, c)

	upgradeTo2(t, c, 0)
	scaleIn("job2")
	before := memberDigests(t, c)
	sum, err := cl.AttestEpoch(ctx, "job2", 1, 0, root, rank1)
	if errcode.Of(err) != errcode.StaleEpoch {
		t.Fatalf("rank 1 attesting at epoch 0 after a scale-in, at version 2: %+v, %v; want STALE_EPOCH", sum, err)
	}
	if after := memberDigests(t, c); after != before {
		t.Fatalf("the stale attestation changed the state: digest %s → %s", before, after)
	}
}

// What version 2 changes, command by command on one FSM: at cluster
// version 1 each refusal below changes the state as builds of version 1
// apply it, at version 2 none changes a byte but the two that fail a run
// (below). Registers: another snapshot
// than a pruned RETIRED release's (BAD_INPUT), its own report again with
// another snapshot (BAD_INPUT), a VERIFIED report of a pruned INVALID
// release (NOT_VERIFIED), and a new root whose report digest, zero, is
// taken for a retry that contradicts it (BAD_INPUT). Attestations at the
// epoch before a scale-in to one rank: from the rank it removed
// (BAD_INPUT at 1, STALE_EPOCH at 2); of another root, and after the
// barrier deadline, which fail the run at both versions, whatever the
// epoch.
func TestVersion2RefusalsChangeNothing(t *testing.T) {
	type refusal struct {
		name   string
		c      Command
		v1, v2 errcode.Code
		// v1Change tells the change at version 1 (nil: none, as an
		// earlier refusal made it or the refusal changes nothing).
		v1Change func(*State) bool
	}
	for _, v := range []uint64{1, 2} {
		h := newHarness(t)
		h.ok(&SetClusterVersion{Version: v})
		a := h.verified("a", 3, 0, 0)
		b := h.verified("b", 3, 0, 0)
		bad, badShards := dig("bad"), shardsOf("bad", 2)
		h.ok(&Register{Root: bad, Shards: badShards, Report: &ReportSummary{Digest: dig("report/bad"), Verdict: manifest.Invalid, DatasetSnapshot: dig("snap")}})
		h.ok(&Publish{Alias: "main", Root: a, Retain: 1})
		h.ok(&Publish{Alias: "main", Root: b, ExpectedGeneration: 1}) // a retires
		// Each run scaled in from two ranks to one; late's barrier
		// deadline passes below.
		for _, run := range []string{"outside", "foreign", "late"} {
			timeout := int64(60_000)
			if run == "late" {
				timeout = 5_000
			}
			h.ok(&CreateRun{Run: run, Alias: "main", WorldSize: 2, BarrierTimeoutMs: timeout})
			h.ok(&Reassign{Run: run, WorldSize: 1})
		}
		h.now += 10_000
		if res := h.ok(&Prune{OlderThanMs: 5_000}).(PruneResult); !slices.Equal(res.Releases, sortedStrings(a.String(), bad.String())) {
			t.Fatalf("fixture: pruned %v, want a and bad", res.Releases)
		}

		verifiedReport := func(label, snap string) *ReportSummary {
			return &ReportSummary{Digest: dig(label), Verdict: manifest.Verified, DatasetSnapshot: dig(snap)}
		}
		unpruned := func(root manifest.Digest) func(*State) bool {
			return func(s *State) bool { return !s.Releases[root.String()].Pruned }
		}
		failed := func(run string) func(*State) bool {
			return func(s *State) bool { return s.Runs[run].State == RunFailed }
		}
		bs := shardsOf("b", 3)
		for _, r := range []refusal{
			{"another snapshot", &Register{Root: a, Shards: shardsOf("a", 3), Report: verifiedReport("report/a2", "other snap")}, errcode.BadInput, errcode.BadInput, unpruned(a)},
			{"its report, another snapshot", &Register{Root: a, Shards: shardsOf("a", 3), Report: verifiedReport("report/a", "other snap")}, errcode.BadInput, errcode.BadInput, nil},
			{"VERIFIED of INVALID", &Register{Root: bad, Shards: badShards, Report: verifiedReport("report/bad2", "snap")}, errcode.NotVerified, errcode.NotVerified, unpruned(bad)},
			{"new root, zero report digest", &Register{Root: dig("new"), Shards: shardsOf("new", 1), Report: &ReportSummary{Verdict: manifest.Verified, DatasetSnapshot: dig("snap")}}, errcode.BadInput, errcode.BadInput,
				func(s *State) bool { return s.Releases[dig("new").String()] != nil }},
			{"rank outside", &Attest{Run: "outside", Rank: 1, Root: b, Shards: []manifest.Digest{bs[1]}, Epoch: new(uint64(0))}, errcode.BadInput, errcode.StaleEpoch, nil},
			{"another root", &Attest{Run: "foreign", Rank: 0, Root: a, Shards: []manifest.Digest{bs[0], bs[2]}, Epoch: new(uint64(0))}, errcode.RootMismatch, errcode.RootMismatch, failed("foreign")},
			{"deadline passed", &Attest{Run: "late", Rank: 0, Root: b, Shards: []manifest.Digest{bs[0], bs[2]}, Epoch: new(uint64(0))}, errcode.BarrierTimeout, errcode.BarrierTimeout, failed("late")},
		} {
			before, _ := h.f.Encode()
			want := r.v1
			if v >= 2 {
				want = r.v2
			}
			h.reject(r.c, want)
			after, _ := h.f.Encode()
			// Another root, or a passed deadline, fails the run at both
			// versions, whatever the epoch.
			both := r.name == "another root" || r.name == "deadline passed"
			changes := r.v1Change != nil && (v < 2 || both)
			switch {
			case !changes && !bytes.Equal(before, after):
				t.Errorf("version %d, %s: the refusal changed the state", v, r.name)
			case changes && !r.v1Change(h.state()):
				t.Errorf("version %d, %s: the refusal did not change the state as builds of version 1 apply it", v, r.name)
			}
		}
	}
}

func sortedStrings(s ...string) []string { slices.Sort(s); return s }
