package raftgate

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/shardproof/shardproof/evidence"
	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
)

// sendSigned sends a signed register or recheck through cl, again after
// INDETERMINATE (on a loaded machine a leader on FastTiming's lease may
// lose its leadership while committing it: the same command again is a
// retry), and returns the answer.
func sendSigned(t *testing.T, ctx context.Context, cl *Client, c Command) *RecheckResult {
	t.Helper()
	for attempt := 1; ; attempt++ {
		var r *RecheckResult
		var err error
		switch c := c.(type) {
		case *Register:
			r, err = cl.Register(ctx, c)
		case *RecheckCmd:
			r, err = cl.Recheck(ctx, c)
		}
		if err == nil {
			return r
		}
		if !IsIndeterminate(err) || attempt == 5 {
			t.Fatalf("%s (attempt %d): %v", commandType(c), attempt, err)
		}
	}
}

// recordedSigners returns, from n's state, the signers each release of
// labels records for its report and, under "label recheck N", for its
// rechecks.
func recordedSigners(n *Node, labels ...string) map[string][]string {
	out := map[string][]string{}
	n.FSM().Read(func(s *State) {
		for _, label := range labels {
			rel := s.Releases[dig(label).String()]
			if rel == nil {
				continue
			}
			if rel.VerifiedBy != nil {
				out[label] = slices.Clone(rel.VerifiedBy)
			}
			for i, rc := range rel.Rechecks {
				if rc.VerifiedBy != nil {
					out[fmt.Sprintf("%s recheck %d", label, i)] = slices.Clone(rc.VerifiedBy)
				}
			}
		}
	})
	return out
}

// everyMemberRecords fails the test unless every running member of c,
// once it applied the log, records exactly want for labels.
func everyMemberRecords(t *testing.T, c *TestCluster, want map[string][]string, labels ...string) {
	t.Helper()
	waitApplied(t, runningNodes(c))
	for _, n := range runningNodes(c) {
		got := recordedSigners(n, labels...)
		if len(got) != len(want) {
			t.Fatalf("%s records signers %v, want %v", n.ID(), got, want)
		}
		for k, w := range want {
			if !slices.Equal(got[k], w) {
				t.Fatalf("%s records signers %v, want %v", n.ID(), got, want)
			}
		}
	}
}

// TestSignersRecordedFromVersion7: a cluster of three whose members
// trust keys a and b, node1 on a build of version 6. While the cluster
// version is 6 the leader's answer names who signed a register, and no
// entry and no state does: node1 applies every entry and never halts.
// Once node1 runs this build the leader raises the version to 7, and
// from then on every member's state records the signers of each
// register and recheck (a retry of a report registered before fills in
// who signed it). They survive a change of leader, the new leader
// records those of its own commands, and a gate founded on a backup
// holds them all.
func TestSignersRecordedFromVersion7(t *testing.T) {
	ctx := ctxT(t, 2*time.Minute)
	a, b := newKey(t), newKey(t)
	aID, bID := evidence.KeyID(pubOf(a)), evidence.KeyID(pubOf(b))
	both := []string{aID, bID}
	slices.Sort(both)
	trusted := trustedKeys(t, a, b)
	c := MakeCluster(t, 3, func(cfg *Config) { cfg.VerifierKeys = trusted }, node1OfBuild(versionSigners-1))
	cl := c.Client()
	labels := []string{"one", "two", "three"}

	if v := c.Nodes[1].ClusterVersion(); v != versionSigners-1 {
		t.Fatalf("the mixed cluster's version: %d, want %d", v, versionSigners-1)
	}
	if r := sendSigned(t, ctx, cl, signedRegister("one", manifest.Verified, 1, a)); !slices.Equal(r.VerifiedBy, []string{aID}) || r.Release.VerifiedBy != nil {
		t.Fatalf("a signed register at version %d: answer names %v, release records %v; want [%s] and none", versionSigners-1, r.VerifiedBy, r.Release.VerifiedBy, aID)
	}
	everyMemberRecords(t, c, map[string][]string{}, labels...)
	for _, n := range runningNodes(c) {
		first, _ := n.store.FirstIndex()
		last, _ := n.store.LastIndex()
		for i := first; i <= last; i++ {
			var e raft.Log
			if err := n.store.GetLog(i, &e); err == nil && bytes.Contains(e.Data, []byte(`"verifiedBy"`)) {
				t.Fatalf("%s's entry %d names signers at cluster version %d: %.300s", n.ID(), i, versionSigners-1, e.Data)
			}
		}
	}
	noHalts(t, c)

	// node1 upgraded: the leader raises the version by itself.
	c.Configs[0].olderBuild = nil
	c.Restart(0)
	c.WaitClusterVersion(CommandVersion, 30*time.Second)
	sendSigned(t, ctx, cl, signedRecheck(&RecheckCmd{Root: dig("one"), Kind: FenceTombstone, Value: 3, Report: dig("re/one")}, b))
	sendSigned(t, ctx, cl, signedRegister("two", manifest.Verified, 1, b, a))
	// The report "one" was registered with, again, signed: the release
	// had no signers, and now records a's.
	if r := sendSigned(t, ctx, cl, signedRegister("one", manifest.Verified, 1, a)); !slices.Equal(r.Release.VerifiedBy, []string{aID}) {
		t.Fatalf("the signed retry of one's report: release records %v, want [%s]", r.Release.VerifiedBy, aID)
	}
	want := map[string][]string{"one": {aID}, "one recheck 0": {bID}, "two": both}
	everyMemberRecords(t, c, want, labels...)
	noHalts(t, c)

	// Another leader: every member kept them, and the new leader records
	// the signers it checks.
	old := c.Leader(10 * time.Second)
	for deadline := time.Now().Add(30 * time.Second); c.Leader(10*time.Second) == old; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s still leads", old.ID())
		}
		old.Raft().LeadershipTransfer()
	}
	nl := c.Leader(10 * time.Second)
	lc := NewClient(nl.URL())
	defer lc.Close()
	if rel, err := lc.Release(ctx, dig("two")); err != nil || !slices.Equal(rel.VerifiedBy, both) {
		t.Fatalf("release two read from the new leader %s: %v, %v; want %v", nl.ID(), rel.VerifiedBy, err, both)
	}
	sendSigned(t, ctx, lc, signedRegister("three", manifest.Verified, 1, b))
	want["three"] = []string{bID}
	everyMemberRecords(t, c, want, labels...)

	// A gate founded on a backup holds them.
	backup, err := cl.StateBytes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c.Shutdown()
	cfg := TestConfig(t.TempDir(), "new1")
	cfg.Restore = backup
	n := StartTestNode(t, cfg)
	waitLeader(t, n)
	got := recordedSigners(n, labels...)
	for k, w := range want {
		if !slices.Equal(got[k], w) || len(got) != len(want) {
			t.Fatalf("the gate restored from a backup records signers %v, want %v", got, want)
		}
	}
}

// TestClientCannotNameSigners: a register or recheck whose request names
// its signers (verifiedBy) is BAD_INPUT and changes nothing, at a
// follower and at the leader, validly signed or not, with the signers
// its signatures would give, another key's or an empty list (a field
// "signers" is no field of the command: BAD_DOCUMENT); so is one
// a caller of Node.Apply names them in, and one sent to a gate without
// verifier keys. The same register without the field records the
// signers the leader checked.
func TestClientCannotNameSigners(t *testing.T) {
	ctx := ctxT(t, time.Minute)
	a, intruder := newKey(t), newKey(t)
	aID, intruderID := evidence.KeyID(pubOf(a)), evidence.KeyID(pubOf(intruder))
	c := MakeCluster(t, 2, func(cfg *Config) { cfg.VerifierKeys = trustedKeys(t, a) })
	leader := c.Leader(10 * time.Second)
	follower := followerOf(c, leader)
	sendSigned(t, ctx, c.Client(), signedRegister("base", manifest.Verified, 1, a))
	_, before := leaderDigest(t, ctx, c)

	post := func(n *Node, body []byte) (int, errcode.Code) {
		t.Helper()
		resp, err := http.Post(n.URL()+"/v1/commands", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		var eb ErrorBody
		if err := json.Unmarshal(raw, &eb); err != nil && resp.StatusCode != http.StatusOK {
			t.Fatalf("answer %s: %v", raw, err)
		}
		return resp.StatusCode, eb.Error.Code
	}
	withField := func(c Command, field, list string) []byte {
		t.Helper()
		b := mustEncode(t, c)
		return append(b[:len(b)-1], []byte(`,"`+field+`":`+list+`}`)...)
	}
	withSigners := func(c Command, list string) []byte { return withField(c, "verifiedBy", list) }
	reg := signedRegister("forged", manifest.Verified, 1, a)
	rc := signedRecheck(&RecheckCmd{Root: dig("base"), Kind: FenceTombstone, Value: 9, Report: dig("re/base")}, a)
	for _, n := range []*Node{follower, leader} {
		for _, cmd := range []Command{reg, rc} {
			for _, list := range []string{`["` + aID + `"]`, `["` + intruderID + `"]`, `[]`} {
				if status, code := post(n, withSigners(cmd, list)); status != http.StatusBadRequest || code != errcode.BadInput {
					t.Fatalf("%s to %s naming signers %s: HTTP %d %s, want 400 BAD_INPUT", commandType(cmd), n.ID(), list, status, code)
				}
			}
			// A field of another name is no field of the command.
			if status, code := post(n, withField(cmd, "signers", `["`+aID+`"]`)); status != http.StatusBadRequest || code != errcode.BadDocument {
				t.Fatalf("%s to %s with a signers field: HTTP %d %s, want 400 BAD_DOCUMENT", commandType(cmd), n.ID(), status, code)
			}
		}
	}
	// Through the Go client and Node.Apply alike.
	forged := *reg
	forged.VerifiedBy = []string{intruderID}
	if _, err := c.Client().Register(ctx, &forged); errcode.Of(err) != errcode.BadInput {
		t.Fatalf("Client.Register naming signers: %v, want BAD_INPUT", err)
	}
	bare := *reg
	bare.Signatures, bare.VerifiedBy = nil, []string{aID}
	if _, err := leader.Apply(&bare); errcode.Of(err) != errcode.BadInput {
		t.Fatalf("Node.Apply naming signers: %v, want BAD_INPUT", err)
	}
	if _, after := leaderDigest(t, ctx, c); after != before {
		t.Fatalf("refused commands naming signers changed the state: %s → %s", before, after)
	}

	// The register as a client sends it: the leader's check names a.
	if r := sendSigned(t, ctx, c.Client(), signedRegister("forged", manifest.Verified, 1, a, intruder)); !slices.Equal(r.Release.VerifiedBy, []string{aID}) {
		t.Fatalf("the register without verifiedBy: release records %v, want [%s]", r.Release.VerifiedBy, aID)
	}

	// A gate without keys: refused too, and nothing recorded.
	plain := StartTestNode(t, TestConfig(t.TempDir(), "plain"))
	waitLeader(t, plain)
	unsigned := *reg
	unsigned.Signatures = nil
	if status, code := post(plain, withSigners(&unsigned, `["`+aID+`"]`)); status != http.StatusBadRequest || code != errcode.BadInput {
		t.Fatalf("a register naming signers at a gate without keys: HTTP %d %s, want 400 BAD_INPUT", status, code)
	}
	if st := stateBytes(t, plain); bytes.Contains(st, []byte("verifiedBy")) || bytes.Contains(st, []byte(dig("forged").String())) {
		t.Fatalf("the gate without keys recorded the refused register: %.300s", st)
	}
	if status, _ := post(plain, mustEncode(t, &unsigned)); status != http.StatusOK {
		t.Fatalf("the register without verifiedBy at a gate without keys: HTTP %d", status)
	}
	if st := stateBytes(t, plain); bytes.Contains(st, []byte("verifiedBy")) || !strings.Contains(string(st), dig("forged").String()) {
		t.Fatalf("a gate without keys records signers, or not the register: %.300s", st)
	}
}

func mustEncode(t *testing.T, c Command) []byte {
	t.Helper()
	b, err := EncodeCommand(c)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
