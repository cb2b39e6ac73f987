package raftgate

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/shardproof/shardproof/internal/errcode"
)

// A learner removed (POST /v1/remove) while the leader's promotion of it
// waits for its status stays removed: the promotion checks, under the
// lock the removal takes too, that the configuration still has it as a
// nonvoter before it makes it a voter. Here node2's API holds the
// promotion's GET /v1/status until node2 has been removed. Before, the
// promotion made it a voter after its removal: a member the operator
// removed was back, as a voter the quorum counted.
func TestLearnerRemovedDuringItsPromotionStaysRemoved(t *testing.T) {
	ctx := ctxT(t, time.Minute)
	dir := t.TempDir()
	first := StartTestNode(t, TestConfig(dir, "node1"))
	waitLeader(t, first)
	// No raise to poll node2 meanwhile: the request its API holds is
	// the promotion's.
	waitFor(t, "node1 to raise the cluster version to its build's", func() bool { return first.ClusterVersion() == first.BuildVersion() })
	_, line, held, asked := holdPromotionAsk(ctx, t, first, dir, "node2")
	defer held.letAllGo()
	cl := NewClient(first.URL())
	defer cl.Close()
	if err := cl.RemoveMember(ctx, "node2"); err != nil {
		t.Fatalf("remove node2: %v", err)
	}
	if got := voterList(first); got != "node1 Voter" {
		t.Fatalf("the configuration once node2 was removed: %s", got)
	}
	line.on.Store(false)
	for len(line.held) > 0 {
		held.add(<-line.held)
	}
	held.letAllGo()
	// The promotion got node2's answer and is done.
	<-asked.gone
	waitFor(t, "the leader's promotion to end", func() bool { return !first.promoting.Load() && first.asking.inFlight() == 0 })
	if got := voterList(first); got != "node1 Voter" {
		t.Fatalf("the configuration once the promotion held during node2's removal ended: %s, want node2 removed", got)
	}
}

// holdPromotionAsk starts a member id (its data under dir) that joins
// leader, waits for it to find its nonvoter entry and catch up, then lets
// the leader look for learners to promote and holds the first request
// the joiner's API gets, which must be the promotion's GET /v1/status.
// The leader makes no promotion before that (leader.promoting); the
// caller lets the held requests go (held.letAllGo).
func holdPromotionAsk(ctx context.Context, t *testing.T, leader *Node, dir, id string) (joiner *Node, line *holdLine, held *heldLines, asked heldLine) {
	t.Helper()
	leader.promoting.Store(true) // no promotion until the joiner is held
	line = &holdLine{held: make(chan heldLine, 16)}
	cfg := TestConfig(dir, id)
	cfg.Join, cfg.Bootstrap = leader.HTTPAddr(), false
	cfg.wrapHTTP = line.wrap
	joiner = NewNode(cfg)
	t.Cleanup(func() { joiner.Shutdown() })
	if err := joiner.Start(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, id+" to find its nonvoter entry and catch up", func() bool {
		l := joiner.learner.status()
		return l != nil && l.NonvoterAt > 0 && joiner.Raft().LastIndex() >= leader.Raft().CommitIndex()
	})
	held = new(heldLines)
	line.on.Store(true)
	leader.promoting.Store(false)
	select {
	case asked = <-line.held:
	case <-ctx.Done():
		t.Fatalf("the leader never asked %s for its status", id)
	}
	held.add(asked)
	if !strings.HasPrefix(asked.first, "GET /v1/status ") {
		t.Fatalf("the request %s's API holds: %q, want the promotion's GET /v1/status", id, asked.first)
	}
	return joiner, line, held, asked
}

// voterList is n's configuration, "ID Suffrage" for each server.
func voterList(n *Node) string {
	var out []string
	for _, v := range n.voters() {
		out = append(out, v.ID+" "+v.Suffrage)
	}
	return strings.Join(out, ", ")
}

// A learner whose HTTP API accepts connections and never answers holds no
// other learner's promotion: the leader asks each learner on its own,
// with a timeout of its own. Here node2, a learner, is black-holed; node3
// joins after it and is promoted, and node2 stays a nonvoter. Before, the
// leader asked the learners one after the other under one timeout, which
// node2's ask spent whole at every look: node3, asked after it, never was.
func TestBlackHoledLearnerHoldsNoOtherPromotion(t *testing.T) {
	dir := t.TempDir()
	first := StartTestNode(t, TestConfig(dir, "node1"))
	waitLeader(t, first)
	waitFor(t, "node1 to raise the cluster version to its build's", func() bool { return first.ClusterVersion() == first.BuildVersion() })
	first.promoting.Store(true) // node2 stays a learner until black-holed
	hole := newBlackHole(t)
	cfg2 := TestConfig(dir, "node2")
	cfg2.Join, cfg2.Bootstrap = first.HTTPAddr(), false
	cfg2.wrapHTTP = hole.wrap
	second := NewNode(cfg2)
	t.Cleanup(func() { second.Shutdown() })
	if err := second.Start(ctxT(t, time.Minute)); err != nil {
		t.Fatal(err)
	}
	hole.on.Store(true)
	first.promoting.Store(false)
	select {
	case r := <-hole.held:
		if !strings.HasPrefix(r.first, "GET /v1/status ") {
			t.Fatalf("the request node2 swallowed: %q, want the leader's GET /v1/status", r.first)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the leader never asked node2 for its status")
	}
	cfg3 := TestConfig(dir, "node3")
	cfg3.Join, cfg3.Bootstrap = first.HTTPAddr(), false
	third := NewNode(cfg3)
	t.Cleanup(func() { third.Shutdown() })
	if err := third.Start(ctxT(t, time.Minute)); err != nil {
		t.Fatal(err)
	}
	WaitPromoted(t, third, 30*time.Second)
	if got := voterList(first); got != "node1 Voter, node2 Nonvoter, node3 Voter" {
		t.Fatalf("the leader's configuration once node3 voted: %s", got)
	}
	if second.learner.status() == nil {
		t.Fatal("node2, black-holed, votes")
	}
}

// A learner removed and joined again under its ID, at its addresses, while
// the leader's promotion of it waits for its status is not promoted by
// that answer: the answer is of the member before its removal (in a real
// rejoin, the old process, whose log is gone with its directory), and the
// promotion checks under vers.raise that no change of that ID was made
// since it asked, and that the term is the same (a leader of another term
// may have made one). Here node2's API holds the promotion's GET
// /v1/status while node2 is removed (POST /v1/remove) and joins again
// (POST /v1/join with its ID and addresses). Before, the promotion found
// node2 a nonvoter at its address, as before, and made it a voter on the
// old answer: a member that just joined, and has not caught up, counted in
// the quorum.
func TestLearnerRejoinedDuringItsPromotionIsNotPromotedByTheOldAnswer(t *testing.T) {
	ctx := ctxT(t, time.Minute)
	dir := t.TempDir()
	first := StartTestNode(t, TestConfig(dir, "node1"))
	waitLeader(t, first)
	waitFor(t, "node1 to raise the cluster version to its build's", func() bool { return first.ClusterVersion() == first.BuildVersion() })
	second, line, held, asked := holdPromotionAsk(ctx, t, first, dir, "node2")
	defer held.letAllGo()
	// No other look meanwhile: the promotion under test is the held one.
	waitFor(t, "the leader's look to have started the held promotion", func() bool { return first.promoting.CompareAndSwap(false, true) })
	line.on.Store(false)
	for len(line.held) > 0 {
		held.add(<-line.held)
	}
	cl := NewClient(first.URL())
	defer cl.Close()
	if err := cl.RemoveMember(ctx, "node2"); err != nil {
		t.Fatalf("remove node2: %v", err)
	}
	var ans joinAnswer
	if err := cl.do(ctx, "POST", "/v1/join", &Join{ID: "node2", RaftAddr: second.RaftAddr(), HTTPAddr: second.HTTPAddr()}, &ans); err != nil {
		t.Fatalf("node2's join again: %v", err)
	}
	if got := voterList(first); got != "node1 Voter, node2 Nonvoter" {
		t.Fatalf("the configuration once node2 was removed and joined again: %s", got)
	}
	held.letAllGo()
	<-asked.gone
	waitFor(t, "the held promotion to end", func() bool { return first.asking.inFlight() == 0 })
	if got := voterList(first); got != "node1 Voter, node2 Nonvoter" {
		t.Fatalf("the configuration once the promotion asked before node2's removal ended: %s, want node2 a nonvoter still", got)
	}
	// A promotion that asks after the join still promotes it.
	first.promoting.Store(false)
	WaitPromoted(t, second, 30*time.Second)
	if got := voterList(first); got != "node1 Voter, node2 Voter" {
		t.Fatalf("the configuration once node2 voted: %s", got)
	}
}

// A learner whose ask failed is asked again at a later look, and
// promoted: its promotion leaves the set of those in flight however it
// ends. Here node2's API swallows the leader's first GET /v1/status, and
// the connection is then closed under it: the ask fails, and node2 is
// promoted by a later one.
func TestLearnerAskedAgainAfterAFailedAsk(t *testing.T) {
	first, second, hole, asked := holdLearnerAsk(t, nil)
	hole.on.Store(false)
	hole.mu.Lock()
	for _, c := range hole.open {
		c.Close()
	}
	hole.mu.Unlock()
	<-asked.gone
	WaitPromoted(t, second, 30*time.Second)
	if got := voterList(first); got != "node1 Voter, node2 Voter" {
		t.Fatalf("the configuration once node2 voted: %s", got)
	}
}

// The leader's Shutdown ends the asks of its promotions in flight (their
// contexts end with its stop), not their 5 s timeouts, and waits for
// them: none is in flight once it returns. Here node2's API swallows the
// leader's GET /v1/status; the leader shuts down while it is held.
func TestLeaderShutdownEndsLearnerAsks(t *testing.T) {
	logs := &syncBuf{}
	first, _, _, asked := holdLearnerAsk(t, func(cfg *Config) {
		cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
	})
	if err := first.Shutdown(); err != nil {
		t.Fatal(err)
	}
	if n := first.asking.inFlight(); n != 0 {
		t.Fatalf("%d promotions in flight once the leader shut down", n)
	}
	<-asked.gone
	var ended string
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, "learner not promoted yet") && strings.Contains(line, "id=node2") {
			ended = line
		}
	}
	if !strings.Contains(ended, context.Canceled.Error()) || strings.Contains(ended, context.DeadlineExceeded.Error()) {
		t.Fatalf("the held ask of node2 ended with %q; want it canceled by the stop", ended)
	}
}

// holdLearnerAsk starts node1 (with option, if any, on its config) and
// node2, which joins it as a learner whose HTTP API, once node2 caught
// up, swallows what it gets (a blackHole, left on): it returns once the
// leader's promotion asked node2 for its status, the request held.
func holdLearnerAsk(t *testing.T, option func(*Config)) (first, second *Node, hole *blackHole, asked heldRequest) {
	t.Helper()
	ctx := ctxT(t, time.Minute)
	dir := t.TempDir()
	cfg1 := TestConfig(dir, "node1")
	if option != nil {
		option(&cfg1)
	}
	first = StartTestNode(t, cfg1)
	waitLeader(t, first)
	waitFor(t, "node1 to raise the cluster version to its build's", func() bool { return first.ClusterVersion() == first.BuildVersion() })
	first.promoting.Store(true) // node2 stays a learner until black-holed
	hole = newBlackHole(t)
	cfg2 := TestConfig(dir, "node2")
	cfg2.Join, cfg2.Bootstrap = first.HTTPAddr(), false
	cfg2.wrapHTTP = hole.wrap
	second = NewNode(cfg2)
	t.Cleanup(func() { second.Shutdown() })
	if err := second.Start(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "node2 to find its nonvoter entry and catch up", func() bool {
		l := second.learner.status()
		return l != nil && l.NonvoterAt > 0 && second.Raft().LastIndex() >= first.Raft().CommitIndex()
	})
	hole.on.Store(true)
	first.promoting.Store(false)
	select {
	case asked = <-hole.held:
	case <-ctx.Done():
		t.Fatal("the leader never asked node2 for its status")
	}
	if !strings.HasPrefix(asked.first, "GET /v1/status ") {
		t.Fatalf("the request node2 swallowed: %q, want the leader's GET /v1/status", asked.first)
	}
	return first, second, hole, asked
}

// A leader that loses its leadership while a promotion holds vers.raise
// (its AddVoter appended, not committed) ends the promotion and frees the
// lock: Raft fails the change (ErrLeadershipLost; ErrNotLeader if it
// stepped down first), and no configuration change or raise of the
// member waits for good. Here node1 leads node2 and asks node3, a
// learner, for its status; node2 and node3's Raft stop while the answer
// is held, so the change cannot commit, and node1, out of touch with a
// quorum, steps down.
func TestLeadershipLostDuringPromotionFreesTheLock(t *testing.T) {
	ctx := ctxT(t, time.Minute)
	c := MakeCluster(t, 2)
	l, f := c.Nodes[0], c.Nodes[1]
	lead(t, l, c.Nodes...)
	f.promoting.Store(true)
	third, line, held, _ := holdPromotionAsk(ctx, t, l, t.TempDir(), "node3")
	defer held.letAllGo()
	waitFor(t, "the leader's look to have started the held promotion", func() bool { return l.promoting.CompareAndSwap(false, true) })
	if err := third.shutdownRaft(); err != nil {
		t.Fatal(err)
	}
	f.Shutdown()
	line.on.Store(false)
	held.letAllGo()
	waitFor(t, "the promotion to end", func() bool { return l.asking.inFlight() == 0 })
	if l.IsLeader() {
		t.Fatalf("node1 leads still, with %s (commit index %d, last index %d)", voterList(l), l.Raft().CommitIndex(), l.Raft().LastIndex())
	}
	if !l.vers.raise.TryLock() {
		t.Fatal("vers.raise still held once the promotion ended")
	}
	l.vers.raise.Unlock()
	t.Logf("node1's configuration once its promotion ended: %s", voterList(l))
}

// TestLastVoterIsNotRemovedBesideLearners: a gate of one voter and a
// learner not yet promoted refuses to remove the voter, BAD_INPUT, and
// changes nothing. Before, only a gate's only member was refused by the
// gate; Raft refused the voter's removal ("need at least one voter") and
// the gate answered INDETERMINATE, telling the operator the removal
// might have happened.
func TestLastVoterIsNotRemovedBesideLearners(t *testing.T) {
	ctx := ctxT(t, time.Minute)
	dir := t.TempDir()
	first := StartTestNode(t, TestConfig(dir, "node1"))
	waitLeader(t, first)
	first.promoting.Store(true) // node2 stays a learner
	cfg := TestConfig(dir, "node2")
	cfg.Join, cfg.Bootstrap = first.HTTPAddr(), false
	second := NewNode(cfg)
	t.Cleanup(func() { second.Shutdown() })
	if err := second.Start(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "node2 to be a nonvoter", func() bool { return voterList(first) == "node1 Voter, node2 Nonvoter" })
	cl := NewClient(first.URL())
	defer cl.Close()
	err := cl.RemoveMember(ctx, "node1")
	if errcode.Of(err) != errcode.BadInput || !strings.Contains(err.Error(), "only voter") {
		t.Fatalf("remove the only voter beside a learner: %v, want BAD_INPUT naming it the only voter", err)
	}
	if got := voterList(first); got != "node1 Voter, node2 Nonvoter" || !first.IsLeader() {
		t.Fatalf("after the refused remove: %s (leader %v), want it unchanged", got, first.IsLeader())
	}
	// The learner may go.
	if err := cl.RemoveMember(ctx, "node2"); err != nil {
		t.Fatalf("remove the learner: %v", err)
	}
	if got := voterList(first); got != "node1 Voter" {
		t.Fatalf("after the learner's remove: %s", got)
	}
}
