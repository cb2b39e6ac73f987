package raftgate

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
)

// A null where a command holds a string, a number, a boolean or an object
// is BAD_DOCUMENT at the API and changes nothing. encoding/json leaves the
// zero value for it, so an attestation with "rank": null was applied as
// rank 0's and opened the run's barrier.
func TestCommandWithNullIsRefused(t *testing.T) {
	ctx := ctxT(t, time.Minute)
	n := StartTestNode(t, TestConfig(t.TempDir(), "n1"))
	waitLeader(t, n)
	cl := NewClient(n.URL())
	defer cl.Close()
	root := publishedRelease(t, ctx, cl, "r1", 2)
	if _, err := cl.CreateRun(ctx, &CreateRun{Run: "job", Alias: "main", WorldSize: 1}); err != nil {
		t.Fatal(err)
	}
	attest, err := EncodeCommand(&Attest{Run: "job", Rank: 0, Root: root, Shards: shardsOf("r1", 2)})
	if err != nil {
		t.Fatal(err)
	}
	waitRaised(t, n)
	before := stateBytes(t, n)
	for _, c := range []struct{ name, old, new string }{
		{"rank", `"rank":0`, `"rank":null`},
		{"run", `"run":"job"`, `"run":null`},
		{"now", `"now":0`, `"now":null`},
		{"root", `"root":"` + root.String() + `"`, `"root":null`},
		{"rank twice", `"rank":0`, `"rank":1,"rank":0`},
		{"rank in another case", `"rank":0`, `"Rank":0`},
	} {
		b := bytes.Replace(attest, []byte(c.old), []byte(c.new), 1)
		if bytes.Equal(b, attest) {
			t.Fatalf("%s: %s not in %s", c.name, c.old, attest)
		}
		if status, code := postCode(t, n, b); status != http.StatusBadRequest || code != errcode.BadDocument {
			t.Errorf("%s: attest %s: HTTP %d %s, want 400 BAD_DOCUMENT", c.name, b, status, code)
		}
	}
	if after := stateBytes(t, n); !bytes.Equal(after, before) {
		t.Fatalf("a refused attestation changed the state:\nbefore %s\nafter  %s", before, after)
	}
	if run, err := cl.Run(ctx, "job"); err != nil || run.Attested != 0 || run.Barrier != BarrierClosed {
		t.Fatalf("run after the refused attestations: %v, %+v", err, run)
	}
	// The control: the attestation itself is applied.
	if status, code := postCode(t, n, attest); status != http.StatusOK {
		t.Fatalf("attest %s: HTTP %d %s", attest, status, code)
	}
}

// lenientDecode decodes a command as encoding/json alone does (unknown
// fields refused): what every build applied an entry as, before and after
// the strict scan, for each entry the scan accepts.
func lenientDecode(b []byte) (Command, error) {
	var h struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(b, &h); err != nil {
		return nil, err
	}
	c := newCommand(h.Type)
	if c == nil {
		return nil, fmt.Errorf("unknown type %q", h.Type)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(c); err != nil {
		return nil, err
	}
	return c, nil
}

// loggableCommands returns commands of every type as a leader may log
// them: empty (nil lists, nil pointers, zero digests), and full, with the
// extremes of their numbers, nil lists inside lists, and strings that are
// not UTF-8 (a leader's json.Marshal writes U+FFFD for them).
func loggableCommands() []Command {
	var cs []Command
	for _, typ := range []string{CmdRegister, CmdRecheck, CmdPublish, CmdRollback, CmdAdvanceFence, CmdCreateRun, CmdAttest,
		CmdCheckBarrier, CmdReassign, CmdAdmitCheckpoint, CmdCancelRun, CmdJoin, CmdPrune, CmdSetClusterVersion} {
		cs = append(cs, newCommand(typ))
	}
	odd := "a\xff\xed\xa0\x80\u2028<&>\x00\"\\é"
	epoch := uint64(math.MaxUint64)
	h := Header{Now: math.MinInt64}
	return append(cs,
		&Register{Header: h, Root: dig("r"), Shards: []manifest.Digest{{}, dig("s")}, Report: &ReportSummary{Verdict: odd, TombstoneWatermark: math.MaxUint64, TombstoneHits: math.MinInt64}},
		&RecheckCmd{Header: h, Kind: odd, Value: math.MaxUint64, Hits: math.MaxInt64},
		&Publish{Header: h, Alias: odd, ExpectedGeneration: math.MaxUint64, Retain: math.MinInt},
		&AdvanceFence{Header: h, Kind: odd, Value: math.MaxUint64, SpareChecked: true},
		&CreateRun{Header: h, Run: odd, Alias: odd, WorldSize: math.MaxInt, Assignment: [][]int{nil, {}, {math.MinInt, 0}}, BarrierTimeoutMs: -1},
		&Attest{Header: h, Run: odd, Rank: -1, Shards: []manifest.Digest{}, Epoch: &epoch},
		&Reassign{Header: h, Run: odd, Assignment: [][]int{nil}, Reset: []int{}, ExpectedEpoch: new(uint64)},
		&CancelRun{Header: h, Run: odd, Reason: odd},
		&Join{Header: h, ID: odd, RaftAddr: odd, HTTPAddr: odd},
		&Prune{Header: Header{Now: math.MaxInt64}, OlderThanMs: math.MinInt64},
		// A higher one halts every member, by design; a raise to
		// versionClusterID or above names the identity a state without
		// one takes, as a leader's does.
		&SetClusterVersion{Version: CommandVersion, ClusterID: "0123456789abcdef0123456789abcdef"},
	)
}

// Every command a leader can log decodes strictly, and to what encoding/json
// alone decodes it to: a log written before the strict scan replays as it
// did, never halting a member at an entry an older build applied. An
// entry is EncodeCommand's bytes (json.Marshal), whose only nulls are nil
// lists; a command type with a pointer that is not omitted when nil would
// log a null the scan refuses, and fails here.
func TestLoggedCommandsDecodeAsBefore(t *testing.T) {
	for _, c := range loggableCommands() {
		b, err := EncodeCommand(c)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeCommand(b)
		if err != nil {
			t.Errorf("%s: DecodeCommand: %v", b, err)
			continue
		}
		want, err := lenientDecode(b)
		if err != nil {
			t.Fatalf("%s: encoding/json: %v", b, err)
		}
		g, _ := json.Marshal(got)
		w, _ := json.Marshal(want)
		if !bytes.Equal(g, w) {
			t.Errorf("%s decodes to\n%s, encoding/json to\n%s", b, g, w)
		}
	}
}

// A member replaying a log through the strict decoder and one replaying it
// as encoding/json reads it reach the same state and the same results,
// entry by entry, and neither halts: the log is the scripted one of
// FuzzApply's seeds, and the commands above.
func TestReplayStrictAsLenient(t *testing.T) {
	log := script(t, 11, 400)
	for _, c := range loggableCommands() {
		b, err := EncodeCommand(c)
		if err != nil {
			t.Fatal(err)
		}
		log = append(log, b)
	}
	strict, lenient := NewFSM(), NewFSM()
	lenient.decode = lenientDecode
	for i, e := range log {
		l := &raft.Log{Index: uint64(i + 1), Type: raft.LogCommand, Data: e}
		rs, _ := strict.Apply(l).(*Result)
		rl, _ := lenient.Apply(l).(*Result)
		if fmt.Sprint(rs) != fmt.Sprint(rl) {
			t.Fatalf("entry %d %s: strict %v, lenient %v", i+1, e, rs, rl)
		}
	}
	if _, h := strict.Halted(); h != nil {
		t.Fatalf("the strict member halted: %v", h)
	}
	s, _ := strict.Encode()
	l, _ := lenient.Encode()
	if !bytes.Equal(s, l) {
		t.Fatalf("states differ:\nstrict  %s\nlenient %s", s, l)
	}
	if !strings.Contains(string(s), `"attestations":[null`) {
		t.Fatalf("no run with a rank yet to attest (a null in a list of pointers) in %s", s)
	}
	// And a member restoring the state a snapshot holds agrees with both.
	r := NewFSM()
	if err := r.Restore(io.NopCloser(bytes.NewReader(s))); err != nil {
		t.Fatalf("restore of the replayed state: %v", err)
	}
	if got, _ := r.Encode(); !bytes.Equal(got, s) {
		t.Fatalf("restored state differs:\n%s\n%s", got, s)
	}
}

// A remove body is decoded strictly too: with "id" twice, encoding/json
// took the last and removed that member; "ID" and an unknown key were
// taken as well. Each is BAD_DOCUMENT and the configuration is unchanged.
func TestRemoveBodyIsStrict(t *testing.T) {
	ctx := ctxT(t, time.Minute)
	c := MakeCluster(t, 3)
	defer c.Shutdown()
	leader := c.Leader(10 * time.Second)
	servers := func() int {
		f := leader.Raft().GetConfiguration()
		if err := f.Error(); err != nil {
			t.Fatal(err)
		}
		return len(f.Configuration().Servers)
	}
	for _, body := range []string{`{"id":"node2","id":"node3"}`, `{"ID":"node3"}`, `{"id":"node3","force":true}`, `{"id":"node3"} {}`} {
		if status, code, b := rawRequest(t, ctx, http.MethodPost, leader.URL()+"/v1/remove", []byte(body)); status != http.StatusBadRequest || code != errcode.BadDocument {
			t.Errorf("remove %s: HTTP %d %s %s, want 400 BAD_DOCUMENT", body, status, code, b)
		}
	}
	if n := servers(); n != 3 {
		t.Fatalf("the refused removes left %d servers, want 3", n)
	}
}

// waitRaised waits until n's state holds its build's cluster version: a
// founder raises it (and records the cluster's identity) a leader-loop
// tick after it leads, which would land between a test's two reads of the
// state.
func waitRaised(t *testing.T, n *Node) {
	t.Helper()
	(&TestCluster{t: t, Nodes: []*Node{n}}).WaitClusterVersion(n.BuildVersion(), 10*time.Second)
}
