package stage_test

import (
	"context"
	"testing"

	"github.com/shardproof/shardproof/stage"
	"github.com/shardproof/shardproof/stage/stagetest"
)

// BenchmarkSynth stages 20,000 synthetic records in 4 shards into a fresh
// file store per iteration (generation, sort, Parquet, hashing, fsync).
func BenchmarkSynth(b *testing.B) {
	var n int64
	for b.Loop() {
		s := stagetest.Store(b)
		res, err := stage.Synth(context.Background(), s, stage.SynthOptions{Samples: 20000, Shards: 4, Seed: 1})
		if err != nil {
			b.Fatal(err)
		}
		n += res.Release.Totals.Records
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "records/s")
}
