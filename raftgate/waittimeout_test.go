package raftgate

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"testing"
	"time"
)

// A long-poll's timeout (milliseconds) above what a time.Duration holds
// is the 5-minute cap, as any timeout above the cap is: the multiplication
// into nanoseconds wrapped, and ?timeout=9223372036855 (or the int64
// limit) made a negative or tiny wait that answered at once.
func TestLongPollTimeoutBeyondDurationIsTheCap(t *testing.T) {
	ctx := ctxT(t, time.Minute)
	n, cl := soloGate(t, "n1")
	runOfOneRank(t, ctx, cl, 120_000)
	hc := &http.Client{Transport: &http.Transport{}}
	defer hc.CloseIdleConnections()
	for _, ms := range []int64{math.MaxInt64/1_000_000 + 1, math.MaxInt64, 9_223_372_036_855_000} {
		hold := time.Second
		rctx, cancel := context.WithTimeout(ctx, hold)
		req, err := http.NewRequestWithContext(rctx, http.MethodGet, fmt.Sprintf("%s/v1/runs/r/wait?timeout=%d", n.URL(), ms), nil)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		resp, err := hc.Do(req)
		cancel()
		if err == nil {
			resp.Body.Close()
			t.Fatalf("wait?timeout=%d answered HTTP %d after %s, before the %s the test waited: the timeout wrapped", ms, resp.StatusCode, time.Since(start).Round(time.Millisecond), hold)
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("wait?timeout=%d: %v", ms, err)
		}
	}
}
