package main

import (
	"context"
	"runtime"
	"sync"
	"time"

	"github.com/shardproof/shardproof/coordinator"
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/objstore"
)

// Phase names in childResult.Stages.
const (
	phasePlan      = "plan"
	phaseMap       = "map"
	phaseReduce    = "reduce"
	phaseAggregate = "aggregate"
)

// phases runs the verification of d through the coordinator API one phase
// at a time, with the local executor's parallelism, and times each phase
// (wall and CPU seconds).
// The coordinator exposes no finer timings than its phases; the stages
// inside a map task are estimated by the ladder loops.
func phases(ctx context.Context, d *Dataset) (wall, cpu map[string]float64, _ *manifest.Report, _ error) {
	st, err := objstore.Open(ctx, d.StoreDir)
	if err != nil {
		return nil, nil, nil, err
	}
	p := runtime.NumCPU()
	wall, cpu = map[string]float64{}, map[string]float64{}
	t, c := time.Now(), cpuSeconds()
	lap := func(name string) {
		wall[name], cpu[name] = time.Since(t).Seconds(), cpuSeconds()-c
		t, c = time.Now(), cpuSeconds()
	}
	start := t
	_, pd, err := coordinator.NewPlan(ctx, st, coordinator.PlanOptions{Root: d.Root, Parallelism: p, Tool: "spbench phases"})
	if err != nil {
		return nil, nil, nil, err
	}
	j, err := coordinator.Open(ctx, st, pd)
	if err != nil {
		return nil, nil, nil, err
	}
	lap(phasePlan)
	if err := pool(ctx, j.Tasks(coordinator.KindMap), p, func(ctx context.Context, i int) error {
		_, err := j.Map(ctx, i, nil)
		return err
	}); err != nil {
		return nil, nil, nil, err
	}
	lap(phaseMap)
	if err := pool(ctx, j.Tasks(coordinator.KindReduce), p, func(ctx context.Context, i int) error {
		_, err := j.Reduce(ctx, i)
		return err
	}); err != nil {
		return nil, nil, nil, err
	}
	lap(phaseReduce)
	rep, _, err := j.Aggregate(ctx, manifest.Execution{Executor: "spbench-phases", Seconds: time.Since(start).Seconds(), Started: start.UTC().Format(time.RFC3339)})
	if err != nil {
		return nil, nil, nil, err
	}
	lap(phaseAggregate)
	return wall, cpu, rep, nil
}

// pool runs f(0..n-1) on p goroutines and returns the first error.
func pool(ctx context.Context, n, p int, f func(context.Context, int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu       sync.Mutex
		next     int
		wg       sync.WaitGroup
		firstErr error
	)
	for range min(n, p) {
		wg.Go(func() {
			for {
				mu.Lock()
				i := next
				next++
				mu.Unlock()
				if i >= n || ctx.Err() != nil {
					return
				}
				if err := f(ctx, i); err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					cancel()
					return
				}
			}
		})
	}
	wg.Wait()
	return firstErr
}
