package raftgate

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardproof/shardproof/manifest"
)

// Benchmarks run against real nodes over loopback HTTP and TCP Raft, with
// raft-boltdb fsyncing to disk. Each reports ops/s and p50/p99 latency:
//
//	go test ./raftgate -run '^$' -bench . -benchtime 2s

// latencies collects per-operation durations from many goroutines.
type latencies struct {
	mu sync.Mutex
	d  []time.Duration
}

func (l *latencies) add(d time.Duration) {
	l.mu.Lock()
	l.d = append(l.d, d)
	l.mu.Unlock()
}

// report attaches ops/s, p50 and p99 (milliseconds) to b.
func (l *latencies) report(b *testing.B, elapsed time.Duration) {
	if len(l.d) == 0 {
		return
	}
	slices.Sort(l.d)
	q := func(p float64) float64 {
		return float64(l.d[min(len(l.d)-1, int(p*float64(len(l.d))))].Microseconds()) / 1000
	}
	b.ReportMetric(float64(len(l.d))/elapsed.Seconds(), "ops/s")
	b.ReportMetric(q(0.50), "p50-ms")
	b.ReportMetric(q(0.99), "p99-ms")
}

// benchGate returns a client for a fresh single node or 3-node cluster.
func benchGate(b *testing.B, nodes int) *Client {
	b.Helper()
	// Raft's default timeouts: the fast test ones depose leaders when the
	// benchmark saturates the machine.
	defaults := func(c *Config) { c.Timing = Timing{} }
	if nodes == 1 {
		cfg := TestConfig(b.TempDir(), "bench")
		defaults(&cfg)
		n := StartTestNode(b, cfg)
		c := NewClient(n.URL())
		b.Cleanup(c.Close)
		// Wait for the election.
		if _, err := c.State(context.Background()); err != nil {
			b.Fatal(err)
		}
		return c
	}
	c := MakeCluster(b, nodes, defaults)
	// Talk to the leader directly: forwarding is measured by the tests.
	cl := NewClient(c.Leader(5 * time.Second).URL())
	b.Cleanup(cl.Close)
	return cl
}

func benchRegister(b *testing.B, c *Client, label string, shards int) manifest.Digest {
	b.Helper()
	root := dig(label)
	_, err := retryIndeterminate(func() (*RecheckResult, error) {
		return c.Register(context.Background(), &Register{Root: root, Shards: shardsOf(label, shards), Report: &ReportSummary{
			Digest: dig("report/" + label), Verdict: manifest.Verified, DatasetSnapshot: dig("snap"),
		}})
	})
	if err != nil {
		b.Fatal(err)
	}
	return root
}

// retryIndeterminate repeats a command while its outcome is unknown, as a
// real client does (every gate command is safe to repeat). On a loaded
// machine the fast test timeouts can depose a leader mid-benchmark.
func retryIndeterminate[T any](f func() (T, error)) (T, error) {
	for {
		v, err := f()
		if !IsIndeterminate(err) {
			return v, err
		}
	}
}

// BenchmarkPublish measures publish CAS: sequential on one alias (each
// publish must see the previous generation), and parallel over 16 aliases.
func BenchmarkPublish(b *testing.B) {
	for _, nodes := range []int{1, 3} {
		b.Run(fmt.Sprintf("nodes=%d/sequential", nodes), func(b *testing.B) {
			c := benchGate(b, nodes)
			root := benchRegister(b, c, "rel", 4)
			var lat latencies
			ctx := context.Background()
			b.ResetTimer()
			start := time.Now()
			for i := 0; i < b.N; i++ {
				t0 := time.Now()
				if _, err := retryIndeterminate(func() (*PublishResult, error) { return c.Publish(ctx, "main", root, uint64(i), 0) }); err != nil {
					b.Fatal(err)
				}
				lat.add(time.Since(t0))
			}
			lat.report(b, time.Since(start))
		})
		b.Run(fmt.Sprintf("nodes=%d/parallel-aliases", nodes), func(b *testing.B) {
			c := benchGate(b, nodes)
			root := benchRegister(b, c, "rel", 4)
			var lat latencies
			var next atomic.Int64
			b.SetParallelism(8)
			b.ResetTimer()
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				alias := fmt.Sprintf("alias-%d", next.Add(1))
				var gen uint64
				for pb.Next() {
					t0 := time.Now()
					if _, err := retryIndeterminate(func() (*PublishResult, error) { return c.Publish(context.Background(), alias, root, gen, 0) }); err != nil {
						b.Error(err)
						return
					}
					gen++
					lat.add(time.Since(t0))
				}
			})
			lat.report(b, time.Since(start))
		})
	}
}

// BenchmarkAttest measures attestations of distinct ranks of 4,096-rank
// runs, from 16 concurrent workers.
func BenchmarkAttest(b *testing.B) {
	const ranks = 4096
	for _, nodes := range []int{1, 3} {
		b.Run(fmt.Sprintf("nodes=%d", nodes), func(b *testing.B) {
			c := benchGate(b, nodes)
			ctx := context.Background()
			root := benchRegister(b, c, "rel", ranks)
			shards := shardsOf("rel", ranks)
			if _, err := retryIndeterminate(func() (*PublishResult, error) { return c.Publish(ctx, "main", root, 0, 0) }); err != nil {
				b.Fatal(err)
			}
			for r := 0; r*ranks < b.N; r++ {
				cr := &CreateRun{Run: fmt.Sprintf("run-%d", r), Alias: "main", WorldSize: ranks, BarrierTimeoutMs: 3_600_000}
				if _, err := retryIndeterminate(func() (*RunSummary, error) { return c.CreateRun(ctx, cr) }); err != nil {
					b.Fatal(err)
				}
			}
			var lat latencies
			var next atomic.Int64
			b.SetParallelism(8)
			b.ResetTimer()
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					i := int(next.Add(1) - 1)
					rank := i % ranks
					t0 := time.Now()
					if _, err := retryIndeterminate(func() (*RunSummary, error) {
						return c.Attest(ctx, fmt.Sprintf("run-%d", i/ranks), rank, root, shards[rank:rank+1])
					}); err != nil {
						b.Error(err)
						return
					}
					lat.add(time.Since(t0))
				}
			})
			lat.report(b, time.Since(start))
		})
	}
}

// BenchmarkBarrier4096 measures, for a 4,096-rank run whose other ranks
// have attested, the time from sending the last attestation to (a) its
// answer, in which the barrier is already open, and (b) a worker blocked
// in WaitRun returning.
func BenchmarkBarrier4096(b *testing.B) {
	const ranks = 4096
	c := benchGate(b, 1)
	ctx := context.Background()
	root := benchRegister(b, c, "rel", ranks)
	shards := shardsOf("rel", ranks)
	if _, err := retryIndeterminate(func() (*PublishResult, error) { return c.Publish(ctx, "main", root, 0, 0) }); err != nil {
		b.Fatal(err)
	}
	var toAnswer, toWaiter time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		run := fmt.Sprintf("run-%d", i)
		if _, err := c.CreateRun(ctx, &CreateRun{Run: run, Alias: "main", WorldSize: ranks, BarrierTimeoutMs: 3_600_000}); err != nil {
			b.Fatal(err)
		}
		var wg sync.WaitGroup
		work := make(chan int)
		for range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for rank := range work {
					if _, err := retryIndeterminate(func() (*RunSummary, error) { return c.Attest(ctx, run, rank, root, shards[rank:rank+1]) }); err != nil {
						b.Error(err)
					}
				}
			}()
		}
		for rank := 0; rank < ranks-1; rank++ {
			work <- rank
		}
		close(work)
		wg.Wait()
		waited := make(chan time.Time, 1)
		go func() {
			if s, err := c.WaitRun(ctx, run); err != nil || s.Barrier != BarrierOpen {
				b.Errorf("wait: %+v %v", s, err)
			}
			waited <- time.Now()
		}()
		time.Sleep(50 * time.Millisecond) // let the waiter block
		b.StartTimer()
		t0 := time.Now()
		s, err := c.Attest(ctx, run, ranks-1, root, shards[ranks-1:])
		if err != nil || s.Barrier != BarrierOpen {
			b.Fatalf("last attestation: %+v %v", s, err)
		}
		toAnswer += time.Since(t0)
		toWaiter += (<-waited).Sub(t0)
	}
	b.ReportMetric(float64(toAnswer.Microseconds())/1000/float64(b.N), "ms-to-open")
	b.ReportMetric(float64(toWaiter.Microseconds())/1000/float64(b.N), "ms-to-waiter")
}

// BenchmarkPruneYear measures what prune saves a gate that published one
// release a night for a year (SHARDPROOF_BENCH_NIGHTS, default 365) of
// SHARDPROOF_BENCH_RELEASE_SHARDS shards each (default 2,000), with the
// default rollback window, one cancelled run per night: the snapshot
// size before and after one prune, and the time of that prune.
//
//	go test ./raftgate -run '^$' -bench PruneYear -benchtime 1x
func BenchmarkPruneYear(b *testing.B) {
	nights := benchEnv(b, "SHARDPROOF_BENCH_NIGHTS", 365)
	shards := benchEnv(b, "SHARDPROOF_BENCH_RELEASE_SHARDS", 2000)
	var before, after int
	for range b.N {
		b.StopTimer()
		h := newHarness(b)
		for i := range nights {
			label := fmt.Sprintf("night-%d", i)
			root := h.verified(label, shards, 0, 0)
			h.ok(&Publish{Alias: "main", Root: root, ExpectedGeneration: uint64(i)})
			run := fmt.Sprintf("run-%d", i)
			h.ok(&CreateRun{Run: run, Alias: "main", WorldSize: 8})
			h.ok(&CancelRun{Run: run})
			h.now += 24 * 3600 * 1000
		}
		enc, _ := EncodeState(h.state())
		before = len(enc)
		b.StartTimer()
		res := h.ok(&Prune{OlderThanMs: 30 * 24 * 3600 * 1000}).(PruneResult)
		b.StopTimer()
		enc, _ = EncodeState(h.state())
		after = len(enc)
		if len(res.Releases) == 0 || len(res.Runs) == 0 {
			b.Fatalf("nothing pruned: %+v", res)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(before)/1e6, "stateMB-before")
	b.ReportMetric(float64(after)/1e6, "stateMB-after")
}

func benchEnv(b *testing.B, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		b.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}
