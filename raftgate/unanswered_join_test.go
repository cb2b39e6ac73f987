package raftgate

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shardproof/shardproof/internal/errcode"
)

// A member whose join was never answered (refused here: it lacks the
// gate's token) keeps its learner marker and no gate state. Restarted,
// it rejoins only with --join, as README says: without it, it is told
// to give --join, not --bootstrap (it was "holds no gate state: give
// --bootstrap to found a new single-node cluster"), and --bootstrap,
// with or without --restore, is refused, where it founded a second
// cluster under the member's ID. Each refusal leaves the marker, and a
// restart with --join and the token then joins. DIR exists before the
// start (a mounted volume): one the start made, refused before it asked
// to join, is removed (TestFailedStartRemovesTheDataDirItMade), and one
// it made and asked to join with is kept
// (TestUnansweredJoinKeepsTheDataDirItMade).
func TestUnansweredJoinerRejoinsOnlyWithJoin(t *testing.T) {
	tok := []byte("0123456789abcdef-gate-token")
	c := MakeCluster(t, 1, func(cfg *Config) { cfg.Token = tok })
	leader := c.Leader(10 * time.Second)
	cfg := TestConfig(t.TempDir(), "joiner")
	cfg.Bootstrap, cfg.Join = false, leader.HTTPAddr()
	if err := os.Mkdir(cfg.DataDir, 0o755); err != nil {
		t.Fatal(err)
	}
	n := NewNode(cfg)
	err := n.Start(ctxT(t, 40*time.Second))
	n.Shutdown()
	if errcode.Of(err) != errcode.Unauthenticated {
		t.Fatalf("join without the token: %v, want UNAUTHENTICATED", err)
	}
	marker := filepath.Join(cfg.DataDir, learnerFile)
	if _, err := os.Stat(marker); err != nil {
		t.Fatalf("learner marker after the refused join: %v", err)
	}
	cl := NewClient(leader.URL())
	cl.Token = string(tok)
	t.Cleanup(cl.Close)
	backup, err := cl.StateBytes(ctxT(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for name, set := range map[string]func(*Config){
		"neither flag": func(c *Config) {},
		"--bootstrap":  func(c *Config) { c.Bootstrap = true },
		"--restore":    func(c *Config) { c.Bootstrap, c.Restore = true, backup },
	} {
		again := cfg
		again.Join, again.Token = "", tok
		set(&again)
		n := NewNode(again)
		err := n.Start(ctxT(t, 20*time.Second))
		n.Shutdown()
		if errcode.Of(err) != errcode.Usage || !strings.Contains(err.Error(), "a member whose join was not answered") || !strings.Contains(err.Error(), "restart it with --join") {
			t.Errorf("%s: %v, want USAGE saying to restart with --join", name, err)
		}
		if _, err := os.Stat(marker); err != nil {
			t.Fatalf("%s: learner marker: %v", name, err)
		}
	}
	cfg.Token = tok
	n = NewNode(cfg)
	if err := n.Start(ctxT(t, 40*time.Second)); err != nil {
		t.Fatalf("restart with --join and the token: %v", err)
	}
	t.Cleanup(func() { n.Shutdown() })
	WaitPromoted(t, n, 10*time.Second)
}

// A start that made its DIR and asked a member to add it, and failed
// before the answer came (here its context ended while the proxy held
// the leader's answer back), keeps DIR and its learner marker: the
// leader did add it, as a nonvoter, and without the marker a restart
// with --bootstrap would found a second cluster under a member's ID
// (TestUnansweredJoinerRejoinsOnlyWithJoin). A restart with --join joins.
func TestUnansweredJoinKeepsTheDataDirItMade(t *testing.T) {
	c := MakeCluster(t, 1)
	leader := c.Leader(10 * time.Second)
	ctx, cancel := context.WithCancel(ctxT(t, 40*time.Second))
	defer cancel()
	target, _ := url.Parse(leader.URL())
	rp := httputil.NewSingleHostReverseProxy(target)
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/join" {
			rp.ServeHTTP(w, r)
			return
		}
		// The leader answers; the joiner never hears it.
		rp.ServeHTTP(httptest.NewRecorder(), r)
		cancel()
		<-r.Context().Done()
	}))
	defer proxy.Close()
	cfg := TestConfig(t.TempDir(), "joiner")
	cfg.Bootstrap, cfg.Join = false, proxy.Listener.Addr().String()
	n := NewNode(cfg)
	err := n.Start(ctx)
	n.Shutdown()
	if err == nil {
		t.Fatal("a start whose join was not answered succeeded")
	}
	f := leader.Raft().GetConfiguration()
	if err := f.Error(); err != nil {
		t.Fatal(err)
	}
	added := false
	for _, s := range f.Configuration().Servers {
		added = added || s.ID == "joiner"
	}
	if !added {
		t.Fatalf("the leader did not add the joiner: %+v", f.Configuration().Servers)
	}
	if _, serr := os.Stat(filepath.Join(cfg.DataDir, learnerFile)); serr != nil {
		t.Fatalf("the start that failed (%v) after asking to join left no learner marker in the DIR it made: %v", err, serr)
	}

	cfg.Join = leader.HTTPAddr()
	StartTestNode(t, cfg)
}
