package raftgate

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/shardproof/shardproof/internal/errcode"
)

// forwardedCount reads n's shardproof_gate_forwarded_total from its
// registry, as /metrics serves it.
func forwardedCount(t *testing.T, n *Node) float64 {
	t.Helper()
	mfs, err := n.met.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "shardproof_gate_forwarded_total" {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatal("no shardproof_gate_forwarded_total")
	return 0
}

// TestFollowerRefusesWhatTheLeaderWould: a follower of a three-node
// cluster refuses a command over the leader's caps itself, with the
// leader's code, and forwards none of it: a body over MaxCommandSize
// (declared, before a byte of it is read, or chunked, at the cap), a run
// whose barrier timeout is over MaxBarrierTimeoutMs, an alias that
// cannot be addressed. The follower forwarded the last two and passed
// the leader's refusal on, a round trip for an answer it could give.
// A command within the caps is still forwarded and applied.
func TestFollowerRefusesWhatTheLeaderWould(t *testing.T) {
	c := MakeCluster(t, 3)
	leader := c.Leader(10 * time.Second)
	f := followerOf(c, leader)
	ctx := ctxT(t, time.Minute)
	base := f.URL()

	before := forwardedCount(t, f)
	conn := slowBody(t, f, 40<<20, 0)
	conn.SetReadDeadline(time.Now().Add(30 * time.Second)) // a regression fails, it does not hang
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer from the follower to a command declaring 40 MiB before its body: %v", err)
	}
	var eb ErrorBody
	json.NewDecoder(resp.Body).Decode(&eb)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || eb.Error.Code != errcode.DocumentTooLarge {
		t.Fatalf("a command declaring 40 MiB at a follower: HTTP %d %+v, want 400 DOCUMENT_TOO_LARGE", resp.StatusCode, eb.Error)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/commands", io.MultiReader(strings.NewReader(`{"type":"register","x":"`), io.LimitReader(zeros{}, MaxCommandSize)))
	req.ContentLength = -1
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	eb = ErrorBody{}
	json.NewDecoder(resp.Body).Decode(&eb)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || eb.Error.Code != errcode.DocumentTooLarge {
		t.Fatalf("a chunked command over the cap at a follower: HTTP %d %+v, want 400 DOCUMENT_TOO_LARGE", resp.StatusCode, eb.Error)
	}

	for _, tc := range []struct {
		what string
		cmd  Command
	}{
		{"a run whose barrier timeout is over the cap", &CreateRun{Run: "r1", Alias: "a", WorldSize: 1, BarrierTimeoutMs: MaxBarrierTimeoutMs + 1}},
		{"a publish to the alias ..", &Publish{Alias: ".."}},
	} {
		b, err := EncodeCommand(tc.cmd)
		if err != nil {
			t.Fatal(err)
		}
		// The leader's own answer is the one to match.
		ls, lcode, _ := rawRequest(t, ctx, http.MethodPost, leader.URL()+"/v1/commands", b)
		if ls != http.StatusBadRequest || lcode != errcode.BadInput {
			t.Fatalf("%s at the leader: HTTP %d %s, want 400 BAD_INPUT", tc.what, ls, lcode)
		}
		fs, fcode, _ := rawRequest(t, ctx, http.MethodPost, base+"/v1/commands", b)
		if fs != ls || fcode != lcode {
			t.Fatalf("%s at a follower: HTTP %d %s, want the leader's HTTP %d %s", tc.what, fs, fcode, ls, lcode)
		}
	}
	if got := forwardedCount(t, f); got != before {
		t.Fatalf("the follower forwarded %v requests the leader's caps refuse, want none", got-before)
	}

	// Within the caps: forwarded once, and applied. FastTiming's 100 ms
	// lease moves the leadership now and then on a loaded machine, so the
	// follower is the one of the moment, and a try across a change of
	// leader, or one the follower answered NOT_LEADER, is made again.
	for try := 1; ; try++ {
		// A fence above any an earlier try may have set.
		b, err := EncodeCommand(&AdvanceFence{Kind: FenceTombstone, Value: uint64(2 + try)})
		if err != nil {
			t.Fatal(err)
		}
		l := c.Leader(10 * time.Second)
		f := followerOf(c, l)
		before := forwardedCount(t, f)
		st, code, body := rawRequest(t, ctx, http.MethodPost, f.URL()+"/v1/commands", b)
		moved := c.Leader(10*time.Second) != l
		// NOT_LEADER: the follower knew no leader for a moment (an
		// election the cluster's view of its leader missed); nothing
		// was appended, and a client tries again.
		if (moved || code == errcode.NotLeader) && try < 5 {
			// Tried again once the follower knows a leader: retried at
			// once, all five tries fell inside one election (CI, 1.2 s).
			waitFor(t, "the follower to know a leader", func() bool {
				h := f.leaderHTTP()
				return h != "" && h != f.HTTPAddr()
			})
			continue
		}
		if st != http.StatusOK {
			t.Fatalf("a fence advance at a follower: HTTP %d %s %s", st, code, body)
		}
		if got := forwardedCount(t, f); got != before+1 {
			t.Fatalf("a command within the caps at a follower: forwarded %v times, want once", got-before)
		}
		break
	}
	var held bool
	// The leader now, which a loaded machine may have moved since.
	if err := c.Leader(10 * time.Second).ReadConsistent(func(s *State) { _, held = s.Runs["r1"] }); err != nil {
		t.Fatal(err)
	}
	if held {
		t.Fatal("the leader holds run r1, refused")
	}
}
