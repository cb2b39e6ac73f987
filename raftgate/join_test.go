package raftgate

import (
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync/atomic"
	"testing"
)

// A join whose outcome is unknown to the joiner (INDETERMINATE: the
// leader lost its leadership while committing it, as one on FastTiming's
// 100 ms lease did on a loaded machine when the new voter answered late,
// or the answer was lost) is asked again, and the node starts as a voter.
// Its start failed with INDETERMINATE, though asking again is safe. Here
// the first join's connection breaks after the request is sent, before
// (not applied) or after (applied) the leader handled it.
func TestJoinAskedAgainWhenIndeterminate(t *testing.T) {
	for _, applied := range []bool{false, true} {
		name := map[bool]string{false: "not applied", true: "applied"}[applied]
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			first := StartTestNode(t, TestConfig(dir, "node1"))
			waitLeader(t, first)
			var joins atomic.Int32
			via := breakFirst(t, first.HTTPAddr(), "/v1/join", applied, &joins)
			cfg := TestConfig(dir, "node2")
			cfg.Join, cfg.Bootstrap = via, false
			second := StartTestNode(t, cfg)
			if n := joins.Load(); n != 2 {
				t.Fatalf("%d joins asked, want the broken one and one more", n)
			}
			f := first.Raft().GetConfiguration()
			if err := f.Error(); err != nil {
				t.Fatal(err)
			}
			var voters []string
			for _, s := range f.Configuration().Servers {
				voters = append(voters, string(s.ID)+"@"+string(s.Address))
			}
			if len(voters) != 2 || voters[1] != "node2@"+second.RaftAddr() {
				t.Fatalf("voters %v, want node1 and node2@%s", voters, second.RaftAddr())
			}
		})
	}
}

// breakFirst returns the address of a proxy to target that breaks the
// connection of the first POST to path without answering: after passing
// it on and reading the answer when applied is set, before otherwise.
// posts counts the POSTs to path it saw.
func breakFirst(t *testing.T, target, path string, applied bool, posts *atomic.Int32) string {
	t.Helper()
	proxy := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: target})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != path || posts.Add(1) > 1 {
			proxy.ServeHTTP(w, r)
			return
		}
		if applied {
			rec := &lostAnswer{h: http.Header{}}
			proxy.ServeHTTP(rec, r)
			if rec.status != http.StatusOK {
				t.Errorf("the first POST %s, passed on: status %d", path, rec.status)
			}
		}
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			conn.Close()
		}
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// lostAnswer is a ResponseWriter that keeps only the status.
type lostAnswer struct {
	h      http.Header
	status int
}

func (a *lostAnswer) Header() http.Header { return a.h }
func (a *lostAnswer) Write(b []byte) (int, error) {
	if a.status == 0 {
		a.status = http.StatusOK
	}
	return len(b), nil
}
func (a *lostAnswer) WriteHeader(status int) { a.status = status }
