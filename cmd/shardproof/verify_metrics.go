package main

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shardproof/shardproof/coordinator"
	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
)

// writeVerifyMetrics writes the verification's figures to path in
// Prometheus' text format, for node_exporter's textfile collector (a
// nightly verify is a batch job, with no process left to scrape): the
// verified shard ratio, every failure class DESIGN.md's observability
// names (missing, extra and duplicate members, digest failures, …),
// throughput and decompression ratio, each labelled by the release's root
// digest, never by anything of the samples. The file is written to a temp
// name and renamed, so the collector never reads half of it.
func writeVerifyMetrics(path string, out *coordinator.Outcome) error {
	r := out.Report
	root := r.Root.String()
	reg := prometheus.NewRegistry()
	gauge := func(name, help string, v float64) {
		g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "shardproof_verify_" + name, Help: help}, []string{"root"})
		reg.MustRegister(g)
		g.WithLabelValues(root).Set(v)
	}
	ratio := 0.0
	if r.Counts.Shards > 0 {
		ratio = float64(r.Counts.ShardsVerified) / float64(r.Counts.Shards)
	} else if !r.Counts.Failed() {
		ratio = 1
	}
	verified := 0.0
	if !r.Counts.Failed() && r.Verdict == manifest.Verified {
		verified = 1
	}
	gauge("verified", "1 if the last verification of the root was VERIFIED, 0 if INVALID.", verified)
	gauge("verified_shard_ratio", "Shards whose bytes and content verified, over the release's shards.", ratio)
	gauge("records", "Release records read.", float64(r.Counts.Records))
	gauge("snapshot_records", "Records of the dataset snapshot.", float64(r.Counts.SnapshotRecords))
	gauge("decompression_ratio", "Logical bytes over stored bytes.", r.Stats.DecompressionRatio)
	gauge("read_bytes_per_second", "Stored bytes read per second of the verification.", r.Execution.StoredMBPerSec*1e6)
	gauge("records_per_second", "Release records verified per second.", r.Execution.RecordsPerSecond)
	gauge("duration_seconds", "Wall time of the verification.", r.Execution.Seconds)
	gauge("last_run_timestamp_seconds", "When this file was written (Unix time).", float64(time.Now().Unix()))
	failures := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "shardproof_verify_failures",
		Help: "Failures of the last verification of the root by class (the report's counts; every one must be zero).",
	}, []string{"root", "class"})
	reg.MustRegister(failures)
	c := &r.Counts
	for _, f := range []struct {
		class string
		v     int64
	}{
		{"digest_mismatch", c.DigestFailures}, {"size_mismatch", c.SizeMismatches}, {"version_missing", c.VersionMissing},
		{"logical_mismatch", c.LogicalMismatches}, {"count_mismatch", c.CountMismatches}, {"decode_error", c.DecodeErrors},
		{"schema_mismatch", c.SchemaMismatches}, {"tuple_root_mismatch", c.TupleRootMismatches},
		{"missing_member", c.Missing}, {"extra_member", c.Extra}, {"duplicate_member", c.Duplicate},
		{"content_substitution", c.ContentSubstitution}, {"source_version_change", c.SourceVersionChange},
		{"source_id_change", c.SourceIDChange}, {"split_conflict", c.SplitConflict}, {"schema_mix", c.SchemaMix},
		{"tombstone_hit", c.TombstoneHits}, {"benchmark_hit", c.BenchmarkHits},
	} {
		failures.WithLabelValues(root, f.class).Set(float64(f.v))
	}
	if err := prometheus.WriteToTextfile(path, reg); err != nil {
		return errcode.Wrap(errcode.IO, err, "verify: --metrics-file")
	}
	return nil
}

// writeVerifyErrorMetrics replaces the file at path, after a verification
// that ended with an error and no verdict (a store or gate unreachable, a
// bad document, a job another process holds), with that: an error gauge
// labelled by the root given (empty when it is not known, as for --resume)
// and the failure's code, and the run's timestamp. The figures of an
// earlier run, a VERIFIED one above all, must not stand for a night whose
// run failed: a dashboard alerting on shardproof_verify_verified would
// otherwise see 1 from yesterday.
func writeVerifyErrorMetrics(path, root string, failure error) error {
	if d, err := manifest.ParseDigest(root); err == nil {
		root = d.String()
	} else {
		root = "" // a root that does not parse is no label value
	}
	reg := prometheus.NewRegistry()
	e := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "shardproof_verify_error",
		Help: "1: the last verification ended with an error and no verdict (no report), labelled by its code; the figures of a verdict are absent.",
	}, []string{"root", "code"})
	reg.MustRegister(e)
	e.WithLabelValues(root, string(errcode.Of(failure))).Set(1)
	ts := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "shardproof_verify_last_run_timestamp_seconds", Help: "When this file was written (Unix time)."}, []string{"root"})
	reg.MustRegister(ts)
	ts.WithLabelValues(root).Set(float64(time.Now().Unix()))
	if err := prometheus.WriteToTextfile(path, reg); err != nil {
		return errcode.Wrap(errcode.IO, err, "verify: --metrics-file")
	}
	return nil
}
