package raftgate

import (
	"context"
	"testing"

	"github.com/shardproof/shardproof/manifest"
)

// soloGate starts a gate of one node, id, in a directory of its own, and
// a client of it that is closed when the test ends.
func soloGate(t *testing.T, id string) (*Node, *Client) {
	t.Helper()
	n := StartTestNode(t, TestConfig(t.TempDir(), id))
	cl := NewClient(n.URL())
	t.Cleanup(cl.Close)
	return n, cl
}

// followerOf is the first of c's nodes that is not leader.
func followerOf(c *TestCluster, leader *Node) *Node {
	for _, n := range c.Nodes {
		if n != leader {
			return n
		}
	}
	return nil
}

// publishedRelease registers a VERIFIED release of label with shards
// shards through cl (registerVerified) and publishes it as alias main,
// generation 0; it returns the release's root.
func publishedRelease(t *testing.T, ctx context.Context, cl *Client, label string, shards int) manifest.Digest {
	t.Helper()
	root := registerVerified(t, ctx, cl, label, shards, 0, 0)
	if _, err := cl.Publish(ctx, "main", root, 0, 0); err != nil {
		t.Fatal(err)
	}
	return root
}

// runOfOneRank creates run r of one rank, with the barrier timeout given,
// on a release rel of two shards published as main (publishedRelease);
// it returns the release's root.
func runOfOneRank(t *testing.T, ctx context.Context, cl *Client, barrierTimeoutMs int64) manifest.Digest {
	t.Helper()
	root := publishedRelease(t, ctx, cl, "rel", 2)
	if _, err := cl.CreateRun(ctx, &CreateRun{Run: "r", Alias: "main", WorldSize: 1, BarrierTimeoutMs: barrierTimeoutMs}); err != nil {
		t.Fatal(err)
	}
	return root
}

// codeCount is n's counter name for the code label code, gathered from
// its registry (/metrics needs the token and TLS of a gate that has
// them); 0 when it counted none.
func codeCount(t *testing.T, n *Node, name, code string) float64 {
	t.Helper()
	mfs, err := n.met.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "code" && lp.GetValue() == code {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// fencesOf is the fences n's local state holds.
func fencesOf(n *Node) Fences {
	var f Fences
	n.FSM().Read(func(s *State) { f = s.Fences })
	return f
}
