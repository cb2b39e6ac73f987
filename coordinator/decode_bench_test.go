package coordinator

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/mapper"
	"github.com/shardproof/shardproof/objstore"
)

// BenchmarkDecodeCommitRecord measures decodeStrict on a map commit
// record, which every reduce task reads once per map task (7,630 times
// at a billion records): a real record of commitFuzzSetup's run, its
// results and outputs repeated to 20 inputs and 64 reducers.
func BenchmarkDecodeCommitRecord(b *testing.B) {
	commitFuzzSetup(b)
	var mc MapCommit
	if err := decodeStrict(commitFuzzBody[0], &mc); err != nil {
		b.Fatal(err)
	}
	for len(mc.Results) < 20 {
		mc.Results = append(mc.Results, mc.Results...)
	}
	for len(mc.Outputs) < 64 {
		mc.Outputs = append(mc.Outputs, mc.Outputs...)
	}
	mc.Results, mc.Outputs = mc.Results[:20], mc.Outputs[:64]
	for _, c := range []struct {
		name string
		v    any
	}{{"real", nil}, {"20x64", &mc}} {
		doc := commitFuzzBody[0]
		if c.v != nil {
			var err error
			if doc, err = manifest.Encode(c.v); err != nil {
				b.Fatal(err)
			}
		}
		b.Run(fmt.Sprintf("%s/%dB", c.name, len(doc)), func(b *testing.B) {
			b.SetBytes(int64(len(doc)))
			b.ReportAllocs()
			for b.Loop() {
				var got MapCommit
				if err := decodeStrict(doc, &got); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkDecodeReduceCommit measures the decoding of a reduce commit
// record, which the aggregation reads once per reduce task: a real
// record of commitFuzzSetup's run, its inputs, one per map task, grown
// to 7,630 (SHARDPROOF_BENCH_MAPS), as at a billion records, in a plan
// of that many map tasks (syntheticReduceCommit). whole is decodeStrict
// and checkReduceCommit, as every reader but the aggregation decodes
// it; aggregate is what the aggregation decodes and checks
// (decodeReduceForAggregate).
func BenchmarkDecodeReduceCommit(b *testing.B) {
	maps := envInt(b, "SHARDPROOF_BENCH_MAPS", 7630)
	j, doc := syntheticReduceCommit(b, maps)
	for _, c := range []struct {
		name   string
		decode func() (int64, error)
	}{
		{"whole", func() (int64, error) {
			var rc ReduceCommit
			if err := decodeStrict(doc, &rc); err != nil {
				return 0, err
			}
			if err := j.checkReduceCommit(0, &rc); err != nil {
				return 0, err
			}
			var n int64
			for _, o := range rc.Inputs {
				n += o.Size
			}
			return n, nil
		}},
		{"aggregate", func() (int64, error) {
			_, n, err := j.decodeReduceForAggregate(0, doc)
			return n, err
		}},
	} {
		b.Run(fmt.Sprintf("%s/inputs=%d/%dB", c.name, maps, len(doc)), func(b *testing.B) {
			b.SetBytes(int64(len(doc)))
			b.ReportAllocs()
			for b.Loop() {
				if n, err := c.decode(); err != nil || n == 0 {
					b.Fatal(n, err)
				}
			}
		})
	}
}

// syntheticReduceCommit returns commitFuzzSetup's job with a plan of
// maps map tasks, no merge level, and reduce task 0's record for it:
// the real record's, its inputs one per map task, each map task's file
// for reduce task 0 (the real inputs' checksums, sizes and rows taken
// in turn).
func syntheticReduceCommit(t testing.TB, maps int) (*Job, []byte) {
	commitFuzzSetup(t)
	j0 := commitFuzzJob
	var rc ReduceCommit
	if err := decodeStrict(commitFuzzBody[len(j0.Plan.MapTasks)], &rc); err != nil {
		t.Fatal(err)
	}
	plan := *j0.Plan
	plan.MapTasks = make([][]Input, maps)
	plan.ReduceFanIn = 0
	j := *j0
	j.Plan = &plan
	real := rc.Inputs
	rc.Inputs, rc.Merged = nil, nil
	for i := range maps {
		o := real[i%len(real)]
		o.Key = j.mapOutputKey(i, 0)
		rc.Inputs = append(rc.Inputs, o)
	}
	doc, err := manifest.Encode(&rc)
	if err != nil {
		t.Fatal(err)
	}
	return &j, doc
}

// The aggregation decodes no input of a reduce commit record, one per map
// task: it checks each where it lies in the record and sums their sizes,
// so what it allocates reading a record does not grow with the map
// tasks. Decoding the record whole, it allocated 3 times per input (at
// 7,630 map tasks, 4.8 MB and 20–26 ms a record:
// BenchmarkDecodeReduceCommit).
func TestAggregateDecodesNoInputs(t *testing.T) {
	ctx := t.Context()
	allocs := map[int]float64{}
	for _, maps := range []int{40, 4000} {
		j, doc := syntheticReduceCommit(t, maps)
		var want ReduceCommit
		if err := decodeStrict(doc, &want); err != nil {
			t.Fatal(err)
		}
		var sum int64
		for _, o := range want.Inputs {
			sum += o.Size
		}
		j.Store = &memBodies{Store: j.Store, bodies: map[string][]byte{j.reduceCommitKey(0): doc}}
		rc, shuffled, err := j.committedReduce(ctx, 0)
		if err != nil || shuffled != sum || sum == 0 {
			t.Fatalf("%d map tasks: %v, shuffle bytes %d, want %d", maps, err, shuffled, sum)
		}
		if !bytes.Equal(must(manifest.Encode(rc.Result)), must(manifest.Encode(want.Result))) || len(rc.Members) != len(want.Members) {
			t.Fatalf("%d map tasks: %+v, want %+v", maps, rc, want)
		}
		allocs[maps] = testing.AllocsPerRun(3, func() {
			if _, _, err := j.committedReduce(ctx, 0); err != nil {
				t.Fatal(err)
			}
		})
	}
	if allocs[4000] > 1.25*allocs[40] {
		t.Fatalf("reading a reduce commit record allocates %.0f times with 4,000 map tasks, %.0f with 40", allocs[4000], allocs[40])
	}
}

// memBodies serves the latest version of each of its keys from memory and
// everything else from the store below.
type memBodies struct {
	objstore.Store
	bodies map[string][]byte
}

func (m *memBodies) Get(ctx context.Context, key string, v objstore.Version) (io.ReadCloser, error) {
	if b, ok := m.bodies[key]; ok && v == "" {
		return io.NopCloser(bytes.NewReader(b)), nil
	}
	return m.Store.Get(ctx, key, v)
}

// syntheticMapCommits returns commitFuzzSetup's job with a plan of maps
// map tasks of 20 inputs and reducers reducers, and a store serving, from
// memory, a map commit record for every task: commitFuzzSetup's first
// record's results, repeated, and one output per reducer. It returns the
// records' total size too. The first failing results of each task list a
// DIGEST_MISMATCH of their shard.
func syntheticMapCommits(t testing.TB, maps, reducers, failing int) (*Job, int64) {
	commitFuzzSetup(t)
	var real MapCommit
	if err := decodeStrict(commitFuzzBody[0], &real); err != nil {
		t.Fatal(err)
	}
	j0 := commitFuzzJob
	plan := *j0.Plan
	plan.MapTasks = make([][]Input, maps)
	plan.Reducers = make([]BucketRange, reducers)
	j := *j0
	j.Plan = &plan
	bodies := make(map[string][]byte, maps)
	var size int64
	for i := range maps {
		mc := MapCommit{Schema: MapCommitSchema, Plan: j.PlanDigest, Task: i}
		for k := range 20 {
			res := real.Results[k%len(real.Results)]
			res.Side, res.Index = mapper.SideRelease, 20*i+k
			if k < failing {
				res.ShardID = fmt.Sprintf("shard-%07d", res.Index)
				res.Failures = []manifest.ShardFailure{{Shard: res.ShardID, Side: "release", Code: string(errcode.DigestMismatch),
					Detail: fmt.Sprintf("manifest.digest=%s, stored=%s", manifest.Digest{1}, manifest.Digest{byte(k)})}}
			}
			mc.Results = append(mc.Results, res)
			plan.MapTasks[i] = append(plan.MapTasks[i], Input{Side: 0, Index: res.Index})
		}
		for r := range reducers {
			o := real.Outputs[r%len(real.Outputs)]
			o.Key, o.Size, o.Rows = j.mapOutputKey(i, r), 1<<20+int64(r), 4096+int64(i)
			mc.Outputs = append(mc.Outputs, o)
		}
		body, err := manifest.Encode(&mc)
		if err != nil {
			t.Fatal(err)
		}
		bodies[j.mapCommitKey(i)] = body
		size += int64(len(body))
	}
	j.Store = &memBodies{Store: j0.Store, bodies: bodies}
	return &j, size
}

// BenchmarkReduceMapCommits measures the CPU and memory a reduce task
// spends on the map tasks' commit records it reads before its shuffle
// files, without the store's round trips (BenchmarkReduceCommitReads
// has them): at a billion records 7,630 records (SHARDPROOF_BENCH_MAPS),
// each of 20 results and one output per reducer, 64 or 256
// (syntheticMapCommits). ns/op, cpu-ms/op (the process's CPU time, all
// cores) and B/op are one reduce task's; recordMB is the bytes of the
// records it reads.
func BenchmarkReduceMapCommits(b *testing.B) {
	maps := envInt(b, "SHARDPROOF_BENCH_MAPS", 7630)
	for _, reducers := range []int{64, 256} {
		b.Run(fmt.Sprintf("maps=%d/reducers=%d", maps, reducers), func(b *testing.B) {
			j, size := syntheticMapCommits(b, maps, reducers, 0)
			ctx := context.Background()
			b.ReportAllocs()
			cpu0 := cpuTime()
			for b.Loop() {
				in, err := j.reduceInputs(ctx, reducers/2)
				if err != nil {
					b.Fatal(err)
				}
				if in[maps-1].Key != j.mapOutputKey(maps-1, reducers/2) {
					b.Fatalf("input %d is %s", maps-1, in[maps-1].Key)
				}
			}
			b.ReportMetric(float64(cpuTime()-cpu0)/1e6/float64(b.N), "cpu-ms/op")
			b.ReportMetric(float64(size)/1e6, "recordMB")
		})
	}
}

// BenchmarkAggregateMapCommits measures the CPU and memory the
// aggregation spends on the map tasks' commit records, as
// BenchmarkReduceMapCommits does a reduce task's: every record (7,630 at
// a billion records, SHARDPROOF_BENCH_MAPS), of 20 results and one output
// per reducer, 64 or 256; failing=20, every result a failure (152,600
// failures, of which the report lists 10,000). peakheap-MB is the most
// heap the aggregation held above what was there before (the records in
// memory), sampled every millisecond through one more aggregation run at
// GOGC=5 after the timed ones, so that garbage adds little.
func BenchmarkAggregateMapCommits(b *testing.B) {
	maps := envInt(b, "SHARDPROOF_BENCH_MAPS", 7630)
	for _, c := range []struct{ reducers, failing int }{{64, 0}, {256, 0}, {64, 20}} {
		b.Run(fmt.Sprintf("maps=%d/reducers=%d/failing=%d", maps, c.reducers, c.failing), func(b *testing.B) {
			j, size := syntheticMapCommits(b, maps, c.reducers, c.failing)
			ctx := context.Background()
			run := func() {
				var exec manifest.Execution
				a := &aggregation{rep: &manifest.Report{}, exec: &exec, failedShard: make([]bool, 20*maps)}
				if err := j.addMapCommits(ctx, a); err != nil {
					b.Fatal(err)
				}
				a.failures.cut()
				if want := int64(maps) * int64(c.failing); a.rep.Counts.DigestFailures != want || int64(len(a.failures.kept))+a.failures.omitted != want || a.rep.Stats.StoredBytes == 0 {
					b.Fatalf("%d digest failures, %d listed and %d omitted, stored bytes %d; want %d", a.rep.Counts.DigestFailures, len(a.failures.kept), a.failures.omitted, a.rep.Stats.StoredBytes, want)
				}
			}
			b.ReportAllocs()
			cpu0 := cpuTime()
			for b.Loop() {
				run()
			}
			b.ReportMetric(float64(cpuTime()-cpu0)/1e6/float64(b.N), "cpu-ms/op")
			b.ReportMetric(float64(size)/1e6, "recordMB")
			b.StopTimer()
			b.ReportMetric(float64(peakHeap(run))/1e6, "peakheap-MB")
		})
	}
}

// peakHeap returns the most heap, in bytes, f's run held above what was
// in use when it started, sampled every millisecond, at GOGC=5.
func peakHeap(f func()) uint64 {
	defer debug.SetGCPercent(debug.SetGCPercent(5))
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	read := func() uint64 { metrics.Read(sample); return sample[0].Value.Uint64() }
	runtime.GC()
	base := read()
	peak := base
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		for {
			peak = max(peak, read())
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	f()
	close(done)
	<-stopped
	return max(peak, read()) - base
}

// A reduce task decodes its own output of each map commit record and
// none of the others': what it allocates reading the records does not
// grow with the reducers. Decoding each record whole, 32 times the
// reducers made it allocate 11 times as often (at a billion records,
// 7,630 map tasks and 256 reducers, 3.7 GB and 7 CPU seconds a reduce
// task: BenchmarkReduceMapCommits).
func TestReduceDecodesItsOutputAlone(t *testing.T) {
	const maps = 40
	ctx := t.Context()
	allocs := map[int]float64{}
	for _, reducers := range []int{8, 256} {
		j, _ := syntheticMapCommits(t, maps, reducers, 0)
		r := reducers - 1
		in, err := j.reduceInputs(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		for i := range in {
			if want := j.mapOutputKey(i, r); in[i].Key != want || in[i].Rows != 4096+int64(i) {
				t.Fatalf("%d reducers: input %d is %+v, want %s", reducers, i, in[i], want)
			}
		}
		allocs[reducers] = testing.AllocsPerRun(3, func() {
			if _, err := j.reduceInputs(ctx, r); err != nil {
				t.Fatal(err)
			}
		})
	}
	if allocs[256] > 1.25*allocs[8] {
		t.Fatalf("reading %d map commit records allocates %.0f times with 256 reducers, %.0f with 8", maps, allocs[256], allocs[8])
	}
}

// The aggregation decodes the results of each map commit record and
// none of its outputs: what it allocates reading the records does not
// grow with the reducers. Decoding each record whole, 32 times the
// reducers made it allocate 3.5 times as often (at a billion records,
// 7,630 map tasks and 256 reducers, 3.8 GB and 7.7 CPU seconds:
// BenchmarkAggregateMapCommits).
func TestAggregateDecodesNoOutputs(t *testing.T) {
	const maps = 40
	ctx := t.Context()
	allocs := map[int]float64{}
	for _, reducers := range []int{8, 256} {
		j, _ := syntheticMapCommits(t, maps, reducers, 2)
		var exec manifest.Execution
		a := &aggregation{rep: &manifest.Report{}, exec: &exec, failedShard: make([]bool, 20*maps)}
		if err := j.addMapCommits(ctx, a); err != nil {
			t.Fatal(err)
		}
		if c := a.rep.Counts.DigestFailures; c != 2*maps || len(a.failures.kept) != 2*maps || a.rep.Stats.StoredBytes == 0 {
			t.Fatalf("%d reducers: %d digest failures, %d listed, stored bytes %d; want %d", reducers, c, len(a.failures.kept), a.rep.Stats.StoredBytes, 2*maps)
		}
		allocs[reducers] = testing.AllocsPerRun(3, func() {
			a := &aggregation{rep: &manifest.Report{}, exec: &exec, failedShard: make([]bool, 20*maps)}
			if err := j.addMapCommits(ctx, a); err != nil {
				t.Fatal(err)
			}
		})
	}
	if allocs[256] > 1.25*allocs[8] {
		t.Fatalf("aggregating %d map commit records allocates %.0f times with 256 reducers, %.0f with 8", maps, allocs[256], allocs[8])
	}
}

// The report's shuffleBytes, summed over the shuffle files the reduce
// tasks read, is the size of every shuffle file the map tasks
// committed.
func TestShuffleBytesAreTheMapOutputs(t *testing.T) {
	s, res := synth(t)
	ctx := t.Context()
	out, err := Verify(ctx, s, Options{PlanOptions: PlanOptions{Root: res.Root, Tool: "test", MapTasks: 3, Reducers: 4}})
	if err != nil {
		t.Fatal(err)
	}
	j, err := Open(ctx, s, out.Plan)
	if err != nil {
		t.Fatal(err)
	}
	var want int64
	for i := range j.Plan.MapTasks {
		var mc MapCommit
		if found, err := readRecord(ctx, s, j.mapCommitKey(i), &mc); err != nil || !found {
			t.Fatalf("map task %d: %v, found %v", i, err, found)
		}
		for _, o := range mc.Outputs {
			want += o.Size
		}
	}
	if got := out.Report.Execution.ShuffleBytes; got != want || want == 0 {
		t.Fatalf("shuffleBytes %d, the map tasks' outputs %d", got, want)
	}
}
