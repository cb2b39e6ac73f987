package raftgate

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// metricValue reads one unlabelled metric from n's /metrics.
func metricValue(t *testing.T, n *Node, name string) string {
	t.Helper()
	resp, err := http.Get(n.URL() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			return v
		}
	}
	return ""
}

// A client that asks for a large answer and stops reading it held the
// handler's goroutine, the encoded answer and the connection for as long
// as it stayed connected. Each write has a deadline now: once the client
// took nothing for WriteTimeout the response is cut (counted in
// shardproof_gate_responses_cut_total), the connection closed, and the
// client reads a broken answer, not a short one; the node serves others
// as before.
func TestResponseToStalledReaderIsCut(t *testing.T) {
	ctx := ctxT(t, time.Minute)
	cfg := TestConfig(t.TempDir(), "n1")
	// The reads of the whole state that the test makes as a client that
	// reads are cut too if it takes nothing for this long: 200 ms left
	// that to a loaded machine's scheduler.
	cfg.WriteTimeout = 2 * time.Second
	n := StartTestNode(t, cfg)
	cl := NewClient(n.URL())
	defer cl.Close()
	// About 9 MB of state, more than a loopback socket buffers.
	registerVerified(t, ctx, cl, "big", 120_000, 0, 0)
	full, err := cl.State(ctx)
	if err != nil {
		t.Fatal(err)
	}

	conn := dialSmallWindow(t, n.HTTPAddr())
	if _, err := io.WriteString(conn, "GET /v1/state HTTP/1.1\r\nHost: gate\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the stalled response to be cut", func() bool { return metricValue(t, n, "shardproof_gate_responses_cut_total") == "1" })
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("the cut response's head: %v", err)
	}
	got, err := io.ReadAll(resp.Body)
	if err == nil {
		t.Fatalf("read %d bytes of a cut response and no error: a short answer reads as whole", len(got))
	}
	var s State
	if json.Unmarshal(got, &s) == nil {
		t.Fatal("the cut answer parses")
	}

	// The node answers a client that reads.
	again, err := cl.State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(again.Releases) != len(full.Releases) || len(again.Releases[dig("big").String()].Shards) != 120_000 {
		t.Fatalf("state after the cut: %d releases", len(again.Releases))
	}
}

// The write deadline does not cut a long-poll, which writes nothing while
// it waits: one that waits ten times WriteTimeout gets its answer.
func TestLongPollOutlastsWriteTimeout(t *testing.T) {
	ctx := ctxT(t, time.Minute)
	cfg := TestConfig(t.TempDir(), "n1")
	cfg.WriteTimeout = 100 * time.Millisecond
	n := StartTestNode(t, cfg)
	cl := NewClient(n.URL())
	defer cl.Close()
	runOfOneRank(t, ctx, cl, 120_000)
	status, code, b := rawRequest(t, ctx, http.MethodGet, n.URL()+"/v1/runs/r/wait?timeout=1000", nil)
	if status != http.StatusOK {
		t.Fatalf("long-poll: HTTP %d %s %s", status, code, b)
	}
	var sum RunSummary
	if err := json.Unmarshal(b, &sum); err != nil || sum.ID != "r" {
		t.Fatalf("long-poll answer: %+v %v", sum, err)
	}
	if v := metricValue(t, n, "shardproof_gate_responses_cut_total"); v != "0" {
		t.Fatalf("responses cut: %s", v)
	}
}
