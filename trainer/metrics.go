package trainer

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metrics are a worker's Prometheus metrics, each labelled by the release
// (root digest) the run is pinned to. Each Metrics has its own registry,
// so several workers in one process (tests) do not collide.
type Metrics struct {
	reg *prometheus.Registry

	// VerifiedShardRatio is the fraction of the rank's assigned shards
	// verified so far (1 once every one is).
	VerifiedShardRatio *prometheus.GaugeVec
	// CacheCorruptions counts cache entries whose bytes did not match
	// their digest and were fetched again.
	CacheCorruptions *prometheus.CounterVec
	// CacheHits counts shards served from an intact cache entry.
	CacheHits *prometheus.CounterVec
	// CacheKept counts shards a rank verifying again within its run (a
	// reassignment) kept without hashing: their entries were unchanged
	// since it verified them.
	CacheKept *prometheus.CounterVec
	// CacheEvictions counts entries a bounded cache (Cache.SetMaxBytes)
	// removed to make room for the rank's shards, and CacheEvictedBytes
	// their bytes.
	CacheEvictions    *prometheus.CounterVec
	CacheEvictedBytes *prometheus.CounterVec
	// ShardFailures counts shards that failed verification, by code.
	ShardFailures *prometheus.CounterVec
	// BarrierWait is how long the rank waited at the barrier, in seconds.
	BarrierWait *prometheus.GaugeVec
	// RootMismatches counts runs this worker saw fail because some rank
	// attested a root other than the run's.
	RootMismatches *prometheus.CounterVec
	// ReadBytes counts bytes read from the object store.
	ReadBytes *prometheus.CounterVec
	// ReadThroughput is the store read rate of the last verification,
	// in bytes per second.
	ReadThroughput *prometheus.GaugeVec
	// Ready is 1 while /readyz is green.
	Ready *prometheus.GaugeVec
}

// NewMetrics returns a worker's metrics in a fresh registry.
func NewMetrics() *Metrics {
	rel := []string{"release"}
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		VerifiedShardRatio: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "shardproof_worker_verified_shard_ratio",
			Help: "Fraction of this rank's assigned shards verified into the cache.",
		}, rel),
		CacheCorruptions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shardproof_worker_cache_corruptions_total",
			Help: "Cache entries whose bytes did not match their digest and were refetched.",
		}, rel),
		CacheHits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shardproof_worker_cache_hits_total",
			Help: "Shards served from an intact cache entry.",
		}, rel),
		CacheKept: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shardproof_worker_cache_kept_total",
			Help: "Shards kept without hashing again when the rank re-verified within its run (a reassignment): entries unchanged since verified.",
		}, rel),
		CacheEvictions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shardproof_worker_cache_evictions_total",
			Help: "Cache entries evicted (least recently used first, none a live worker holds) to keep the cache within --cache-max-bytes.",
		}, rel),
		CacheEvictedBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shardproof_worker_cache_evicted_bytes_total",
			Help: "Bytes of the cache entries evicted to keep the cache within --cache-max-bytes.",
		}, rel),
		ShardFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shardproof_worker_shard_failures_total",
			Help: "Assigned shards that failed verification, by error code.",
		}, []string{"release", "code"}),
		BarrierWait: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "shardproof_worker_barrier_wait_seconds",
			Help: "Seconds this rank waited at the run's barrier after attesting.",
		}, rel),
		RootMismatches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shardproof_worker_root_mismatches_total",
			Help: "Run failures caused by a rank attesting a root other than the run's.",
		}, rel),
		ReadBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shardproof_worker_read_bytes_total",
			Help: "Bytes read from the object store into the cache.",
		}, rel),
		ReadThroughput: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "shardproof_worker_read_bytes_per_second",
			Help: "Object store read throughput of the last verification pass.",
		}, rel),
		Ready: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "shardproof_worker_ready",
			Help: "1 while the worker's /readyz is green.",
		}, rel),
	}
	m.reg.MustRegister(m.VerifiedShardRatio, m.CacheCorruptions, m.CacheHits, m.CacheKept, m.CacheEvictions, m.CacheEvictedBytes, m.ShardFailures,
		m.BarrierWait, m.RootMismatches, m.ReadBytes, m.ReadThroughput, m.Ready,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Registry returns the registry holding the metrics, for tests and for
// embedding a worker in a process that serves its own /metrics.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the metrics in the Prometheus exposition format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}
