package raftgate

import (
	"fmt"
	"io"
	"runtime"
	"testing"
	"time"

	"github.com/shardproof/shardproof/manifest"
)

// BenchmarkReleaseScale measures what releases of many shards cost the
// gate, whose state keeps each release's shard list and each run's
// attested shards: a night's release of SHARDPROOF_BENCH_RELEASE_SHARDS
// shards (default 30,000, a billion samples), published, and a run of 64
// ranks that every rank attests and that is then cancelled, retained for
// SHARDPROOF_BENCH_NIGHTS nights (default 30, what `gate serve
// --auto-prune 720h` keeps). It reports the register command's bytes and
// Apply time (applyRegister-ms, through the encoded form as Raft applies
// it), the Apply time of all 64 attestations (applyAttest64-ms), and of
// the retained state: its snapshot's bytes (stateMB), the time to encode
// it: Snapshot's time (snapshot-ms), which Raft runs between Applies and
// so holds them up, and what it allocates, the copy Persist encodes
// (snapshotAllocMB), and Persist's time (persist-ms), which runs beside
// them;
// the time to decode and validate it (restore-ms), and the heap the
// state holds (heapMB).
//
//	go test ./raftgate -run '^$' -bench ReleaseScale -benchtime 1x
func BenchmarkReleaseScale(b *testing.B) {
	nights := benchEnv(b, "SHARDPROOF_BENCH_NIGHTS", 30)
	shards := benchEnv(b, "SHARDPROOF_BENCH_RELEASE_SHARDS", 30_000)
	const ranks = 64
	var regBytes int
	var regApply, attApply, snap, persist, restore time.Duration
	var stateBytes int
	var heap, copied uint64
	for range b.N {
		b.StopTimer()
		runtime.GC()
		heap0 := heapInUse()
		f := NewFSM()
		now := int64(1_000_000)
		apply := func(c Command) (time.Duration, int) {
			c.header().Now = now
			enc, err := EncodeCommand(c)
			if err != nil {
				b.Fatal(err)
			}
			t0 := time.Now()
			res := f.ApplyBytes(enc)
			d := time.Since(t0)
			if res.Err != nil {
				b.Fatalf("%s: %v", commandType(c), res.Err)
			}
			return d, len(enc)
		}
		for i := range nights {
			label := fmt.Sprintf("night-%d", i)
			list := shardsOf(label, shards)
			d, n := apply(&Register{Root: dig(label), Shards: list, Report: &ReportSummary{
				Digest: dig("report/" + label), Verdict: manifest.Verified, DatasetSnapshot: dig("snap"),
			}})
			regApply, regBytes = regApply+d, n
			apply(&Publish{Alias: "main", Root: dig(label), ExpectedGeneration: uint64(i)})
			run := fmt.Sprintf("run-%d", i)
			apply(&CreateRun{Run: run, Alias: "main", WorldSize: ranks})
			for r := range ranks {
				var mine []manifest.Digest
				for k := r; k < shards; k += ranks {
					mine = append(mine, list[k])
				}
				d, _ := apply(&Attest{Run: run, Rank: r, Root: dig(label), Shards: mine})
				attApply += d
			}
			apply(&CancelRun{Run: run})
			now += 24 * 3600 * 1000
		}
		runtime.GC()
		heap += heapInUse() - heap0
		b.StartTimer()
		alloc0 := totalAlloc()
		t0 := time.Now()
		s, err := f.Snapshot()
		if err != nil {
			b.Fatal(err)
		}
		snap += time.Since(t0)
		copied += totalAlloc() - alloc0
		sink := &memSink{}
		t0 = time.Now()
		if err := s.Persist(sink); err != nil {
			b.Fatal(err)
		}
		persist += time.Since(t0)
		stateBytes = sink.Len()
		t0 = time.Now()
		g := NewFSM()
		if err := g.Restore(io.NopCloser(&sink.Buffer)); err != nil {
			b.Fatal(err)
		}
		restore += time.Since(t0)
	}
	ms := func(d time.Duration, n int) float64 { return float64(d.Microseconds()) / 1000 / float64(n) }
	b.ReportMetric(float64(regBytes)/1e6, "registerMB")
	b.ReportMetric(ms(regApply, b.N*nights), "applyRegister-ms")
	b.ReportMetric(ms(attApply, b.N*nights), "applyAttest64-ms")
	b.ReportMetric(float64(stateBytes)/1e6, "stateMB")
	b.ReportMetric(ms(snap, b.N), "snapshot-ms")
	b.ReportMetric(float64(copied)/1e6/float64(b.N), "snapshotAllocMB")
	b.ReportMetric(ms(persist, b.N), "persist-ms")
	b.ReportMetric(ms(restore, b.N), "restore-ms")
	b.ReportMetric(float64(heap)/1e6/float64(b.N), "heapMB")
}

func totalAlloc() uint64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.TotalAlloc
}

func heapInUse() uint64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
