package mapper_test

import (
	"context"
	"testing"

	"github.com/shardproof/shardproof/mapper"
	"github.com/shardproof/shardproof/stage/stagetest"
)

// BenchmarkMapShard maps one synthetic shard of 20,000 records (~20 MB of
// text, ~6 MB stored) from a file store with each decoder, tuples
// included. records/s and MB/s (stored bytes) are per mapper goroutine.
func BenchmarkMapShard(b *testing.B) {
	s := stagetest.Store(b)
	res := stagetest.Synth(b, s, 20000, 1, 1)
	d := res.Release.Shards[0]
	for _, dec := range []mapper.Decoder{mapper.DecoderColumnReader, mapper.DecoderPQArrow} {
		b.Run(dec.String(), func(b *testing.B) {
			o := mapper.Options{Store: s, Schema: res.Schema, SchemaDigest: res.RecordSchema, Decoder: dec}
			var r mapper.Result
			var tuples int64
			b.ReportAllocs()
			cpu0 := cpuTime()
			for b.Loop() {
				var err error
				r, err = mapper.MapShard(context.Background(), o, mapper.Input{Desc: d}, func(*mapper.Tuple) error { tuples++; return nil })
				if err != nil || len(r.Failures) != 0 {
					b.Fatal(err, r.Failures)
				}
			}
			// The machine may be shared: CPU time per op is the figure to
			// compare decoders by; the rates below are wall-clock.
			b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
			secs := b.Elapsed().Seconds()
			b.ReportMetric(float64(tuples)/secs, "records/s")
			b.ReportMetric(float64(r.StoredBytes)*float64(b.N)/1e6/secs, "MB/s")
			b.ReportMetric(float64(r.LogicalBytes)*float64(b.N)/1e6/secs, "logicalMB/s")
		})
	}
}
