package raftgate

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// A large answer (the whole state of a big gate, read by `gate backup`)
// that streams steadily for longer than the attempt bound is not a silent
// member: the bound is on waiting for an answer or for the next bytes of
// one, not on the transfer of the whole answer. Cutting it made a backup
// of a gate whose state takes longer than 20 s to send impossible (every
// member tried in turn, each sending the whole state again, then
// GATE_UNAVAILABLE "no gate answered").
func TestClientAttemptBoundsSilenceNotTransfer(t *testing.T) {
	// The answer streams a small part every 20 ms until three attempt
	// bounds passed on the server's clock: longer than the bound however
	// late each part is sent, with the bound, not 200 ms, between a part
	// and the next (parts 100 ms apart against a 300 ms bound failed
	// under load).
	const bound = time.Second
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		start := time.Now()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		fmt.Fprint(w, "[")
		for i := 0; i < 10 || time.Since(start) < 3*bound; i++ {
			if i > 0 {
				fmt.Fprint(w, ",")
			}
			fmt.Fprintf(w, "%q", strings.Repeat("x", 1000))
			w.(http.Flusher).Flush()
			time.Sleep(20 * time.Millisecond)
		}
		fmt.Fprint(w, "]")
	}))
	defer srv.Close()
	c := NewClient(srv.URL)
	defer c.Close()
	c.AttemptTimeout = bound
	c.RetryFor = -1
	b, err := c.StateBytes(ctxT(t, 30*time.Second))
	if err != nil {
		t.Fatalf("an answer streaming for %s with a %s attempt bound: %v (%d attempts)", 3*bound, bound, err, hits.Load())
	}
	if len(b) < 10000 {
		t.Fatalf("got %d bytes", len(b))
	}

	// A member that sends its headers, then stops, is still left.
	stall := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		fmt.Fprint(w, "[")
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
		case <-time.After(10 * time.Second):
		}
	}))
	defer stall.Close()
	s := NewClient(stall.URL)
	defer s.Close()
	s.AttemptTimeout = 300 * time.Millisecond
	s.RetryFor = -1
	start := time.Now()
	if _, err := s.StateBytes(ctxT(t, 30*time.Second)); err == nil {
		t.Fatal("a stalled answer was accepted")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("a stalled answer held the read for %s", d)
	}
}
