package raftgate

import (
	"math"
	"testing"
	"time"

	"github.com/shardproof/shardproof/internal/errcode"
)

// A createRun whose barrier timeout is above MaxBarrierTimeoutMs is
// refused BAD_INPUT before it is proposed, changing nothing: Apply adds
// the timeout to the leader's clock, and one near the int64 limit made a
// deadline that wrapped negative, so the run failed BARRIER_TIMEOUT at
// its first attestation. A timeout at the cap makes a run that waits.
func TestBarrierTimeoutAboveTheCapIsRefused(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	_, g := soloGate(t, "g")
	root := publishedRelease(t, ctx, g, "rel", 2)
	before, err := g.StatusDigest(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, ms := range []int64{math.MaxInt64, MaxBarrierTimeoutMs + 1} {
		if _, err := g.CreateRun(ctx, &CreateRun{Run: "forever", Alias: "main", WorldSize: 2, BarrierTimeoutMs: ms}); errcode.Of(err) != errcode.BadInput {
			t.Fatalf("create run with a barrier timeout of %d ms: %v, want BAD_INPUT", ms, err)
		}
	}
	after, err := g.StatusDigest(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if after.StateIndex != before.StateIndex || *after.StateDigest != *before.StateDigest {
		t.Fatalf("refused createRuns changed the state: index %d → %d", before.StateIndex, after.StateIndex)
	}
	if _, err := g.Run(ctx, "forever"); errcode.Of(err) != errcode.UnknownRun {
		t.Fatalf("run of the refused createRuns: %v, want UNKNOWN_RUN", err)
	}

	s, err := g.CreateRun(ctx, &CreateRun{Run: "decade", Alias: "main", WorldSize: 2, BarrierTimeoutMs: MaxBarrierTimeoutMs})
	if err != nil || s.Deadline != s.Created+MaxBarrierTimeoutMs {
		t.Fatalf("create run at the cap: %+v %v", s, err)
	}
	if s, err := g.Attest(ctx, "decade", 0, root, shardsOf("rel", 2)[:1]); err != nil || s.State != RunWaiting {
		t.Fatalf("attest a run at the cap: %+v %v", s, err)
	}
}

// A follower refuses a createRun above the cap itself, as its leader
// refuses its own clients' (the follower forwarded it, and passed the
// leader's refusal on, before TestFollowerRefusesWhatTheLeaderWould):
// nothing is appended on any member.
func TestBarrierTimeoutAboveTheCapIsRefusedThroughAFollower(t *testing.T) {
	ctx := ctxT(t, time.Minute)
	c := MakeCluster(t, 2)
	cl := c.Client()
	publishedRelease(t, ctx, cl, "rel", 2)
	leader := c.Leader(10 * time.Second)
	follower := followerOf(c, leader)
	waitApplied(t, c.Nodes)
	index, before := leaderDigest(t, ctx, c)
	fc := NewClient(follower.URL())
	defer fc.Close()
	if _, err := fc.CreateRun(ctx, &CreateRun{Run: "forever", Alias: "main", WorldSize: 2, BarrierTimeoutMs: math.MaxInt64}); errcode.Of(err) != errcode.BadInput {
		t.Fatalf("create run above the cap through a follower: %v, want BAD_INPUT", err)
	}
	if i, after := leaderDigest(t, ctx, c); i != index || after != before {
		t.Fatalf("the refused createRun changed the state: index %d → %d", index, i)
	}
}
