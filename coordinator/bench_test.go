package coordinator

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/objstore"
	"github.com/shardproof/shardproof/objstore/faults"
	"github.com/shardproof/shardproof/objstore/file"
	"github.com/shardproof/shardproof/stage"
)

// benchRelease synthesizes the release once per store directory and
// remembers its root there: re-running Synth writes nothing but still
// regenerates and encodes every shard, which at millions of samples costs
// minutes.
func benchRelease(ctx context.Context, s *file.Store, dir string, samples, shards int) (manifest.Digest, error) {
	memo := filepath.Join(dir, fmt.Sprintf("bench-root-%d-%d-ser%s", samples, shards, stage.SerializerVersion))
	if b, err := os.ReadFile(memo); err == nil {
		return manifest.ParseDigest(strings.TrimSpace(string(b)))
	}
	res, err := stage.Synth(ctx, s, stage.SynthOptions{Samples: samples, Shards: shards, Seed: 1})
	if err != nil {
		return manifest.Digest{}, err
	}
	return res.Root, os.WriteFile(memo, []byte(res.Root.String()+"\n"), 0o644)
}

func envInt(b *testing.B, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		b.Fatalf("%s=%q: want a non-negative integer", name, v)
	}
	return n
}

// BenchmarkVerify measures `shardproof verify` end to end with the local
// executor on a synthetic release in a file store: every shard and member
// file read, hashed and decoded, the shuffle written and read back, the
// diff and the report. Sizes come from the environment:
//
//	SHARDPROOF_BENCH_SAMPLES   records (default 20000)
//	SHARDPROOF_BENCH_SHARDS    shards (default max(8, samples/250000))
//	SHARDPROOF_BENCH_STORE     store directory; reusing one skips staging
//	                           (synth is idempotent), e.g. for 8M samples
//	SHARDPROOF_BENCH_MAP_TASKS, SHARDPROOF_BENCH_REDUCERS, SHARDPROOF_BENCH_PARALLELISM
//	                           plan shape (default: verify's defaults)
//	SHARDPROOF_BENCH_GET_LATENCY_MS
//	                           delay every read of a shard or member file
//	                           by this much and read it as an S3 body, not
//	                           a mapped file (faults.Latency): a remote
//	                           store's round trip
//	SHARDPROOF_BENCH_MAP_MEMBERS=1
//	                           map and shuffle the snapshot members (verify
//	                           --map-members) instead of letting reducers
//	                           read them
//
// Example: SHARDPROOF_BENCH_SAMPLES=2000000 go test -run '^$' -bench Verify -benchtime 1x ./coordinator
func BenchmarkVerify(b *testing.B) {
	samples := envInt(b, "SHARDPROOF_BENCH_SAMPLES", 20000)
	shards := envInt(b, "SHARDPROOF_BENCH_SHARDS", max(8, samples/250000))
	dir := os.Getenv("SHARDPROOF_BENCH_STORE")
	if dir == "" {
		dir = b.TempDir()
	}
	s, err := file.Open(dir)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	root, err := benchRelease(ctx, s, dir, samples, shards)
	if err != nil {
		b.Fatal(err)
	}
	o := Options{PlanOptions: PlanOptions{
		Root:        root,
		MapTasks:    envInt(b, "SHARDPROOF_BENCH_MAP_TASKS", 0),
		Reducers:    envInt(b, "SHARDPROOF_BENCH_REDUCERS", 0),
		Parallelism: envInt(b, "SHARDPROOF_BENCH_PARALLELISM", 0),
		MapMembers:  envInt(b, "SHARDPROOF_BENCH_MAP_MEMBERS", 0) == 1,
		Tool:        "shardproof bench",
	}}
	var store objstore.Store = s
	if ms := envInt(b, "SHARDPROOF_BENCH_GET_LATENCY_MS", 0); ms > 0 {
		store = &faults.Latency{Store: s, Delay: time.Duration(ms) * time.Millisecond,
			Match: func(k string) bool { return strings.HasPrefix(k, "blobs/") }}
	}
	b.ResetTimer()
	var last *manifest.Report
	for b.Loop() {
		out, err := Verify(ctx, store, o)
		if err != nil {
			b.Fatal(err)
		}
		if out.Report.Verdict != manifest.Verified {
			b.Fatalf("verdict %s", out.Report.Verdict)
		}
		last = out.Report
	}
	secs := b.Elapsed().Seconds()
	b.ReportMetric(float64(last.Counts.Records)*float64(b.N)/secs, "records/s")
	b.ReportMetric(float64(last.Stats.StoredBytes)*float64(b.N)/1e6/secs, "storedMB/s")
	b.ReportMetric(float64(last.Stats.LogicalBytes)*float64(b.N)/1e6/secs, "logicalMB/s")
	b.ReportMetric(float64(last.Execution.ShuffleBytes)/1e6, "shuffleMB")
	b.ReportMetric(float64(last.Execution.MapTasks), "maps")
	b.ReportMetric(float64(last.Execution.Reducers), "reducers")
}

// BenchmarkReduceCommitReads measures one reduce task of a plan of many
// map tasks over a store whose reads of the job's files take a round
// trip (faults.Latency, SHARDPROOF_BENCH_JOBS_LATENCY_MS, default 2 ms,
// as S3 in the same region): a reduce task reads every map task's commit
// record and then opens its shuffle file of each, and the aggregation
// reads every commit record again, so at the 7,630 map tasks of a
// billion records these reads are most of a reduce task's time unless
// they overlap. ns/op is one reduce task; ms/map is per map task.
func BenchmarkReduceCommitReads(b *testing.B) {
	delay := time.Duration(envInt(b, "SHARDPROOF_BENCH_JOBS_LATENCY_MS", 2)) * time.Millisecond
	for _, m := range []int{32, 256} {
		b.Run(fmt.Sprintf("maps=%d", m), func(b *testing.B) {
			dir := b.TempDir()
			fs, err := file.Open(dir)
			if err != nil {
				b.Fatal(err)
			}
			defer fs.Close()
			ctx := context.Background()
			root, err := benchRelease(ctx, fs, dir, 2*m, m)
			if err != nil {
				b.Fatal(err)
			}
			s := &faults.Latency{Store: fs, Delay: delay, Match: func(k string) bool { return strings.HasPrefix(k, JobsPrefix) }}
			_, pd, err := NewPlan(ctx, s, PlanOptions{Root: root, MapTasks: m, Reducers: 2, MapMembers: true})
			if err != nil {
				b.Fatal(err)
			}
			j, err := Open(ctx, s, pd)
			if err != nil {
				b.Fatal(err)
			}
			if err := runAll(ctx, m, 4, func(ctx context.Context, i int) error { _, err := j.Map(ctx, i, nil); return err }); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for b.Loop() {
				b.StopTimer()
				if err := fs.DeletePrefix(ctx, jobPrefix(pd)+"reduce/"); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				if _, err := j.Reduce(ctx, 0); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N)/float64(m), "ms/map")
		})
	}
}
