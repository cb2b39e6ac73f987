package manifest

import (
	"math"

	"github.com/shardproof/shardproof/internal/errcode"
)

// RecheckReportSchema identifies recheck reports computed from a
// snapshot's member files.
const RecheckReportSchema = "training.shard.recheck.v1"

// RecheckReport is what `shardproof recheck --members` stores: the fence
// hits of a release counted in the member files of the snapshot that a
// VERIFIED verification report (Basis) proved the release to hold exactly,
// tuple for tuple. It re-proves nothing about the release's own bytes;
// the gate records its digest like a verification report's.
type RecheckReport struct {
	Schema          string `json:"schema"`
	Root            Digest `json:"root"`
	DatasetSnapshot Digest `json:"datasetSnapshot"`
	// Basis is the VERIFIED verification report of Root against
	// DatasetSnapshot.
	Basis Digest `json:"basis"`
	// Tombstones and Benchmark are the fence documents checked (at least
	// one), with their watermarks and the release's hits in each.
	Tombstones         Digest `json:"tombstones,omitzero"`
	TombstoneWatermark uint64 `json:"tombstoneWatermark"`
	TombstoneHits      int64  `json:"tombstoneHits"`
	Benchmark          Digest `json:"benchmark,omitzero"`
	BenchmarkFence     uint64 `json:"benchmarkFence"`
	BenchmarkHits      int64  `json:"benchmarkHits"`
	// Members and Records are the member files and tuples read.
	Members int64 `json:"members"`
	Records int64 `json:"records"`
	// Examples maps TOMBSTONE_HIT and BENCHMARK_HIT to up to MaxExamples
	// sampleIds, sorted. Never sample text.
	Examples map[string][]string `json:"examples"`
	Tool     string              `json:"tool"`
	Seconds  float64             `json:"seconds"`
	Started  string              `json:"started,omitempty"`
}

// Validate checks the report's internal consistency.
func (r *RecheckReport) Validate() error {
	if err := checkSchema(r.Schema, RecheckReportSchema); err != nil {
		return err
	}
	for _, d := range []struct {
		d    Digest
		path string
	}{{r.Root, "root"}, {r.DatasetSnapshot, "datasetSnapshot"}, {r.Basis, "basis"}} {
		if err := required(d.d, d.path); err != nil {
			return err
		}
	}
	if r.Tombstones.IsZero() && r.Benchmark.IsZero() {
		return errcode.New(errcode.BadDocument, "a recheck report checks tombstones, a benchmark registry or both")
	}
	for _, n := range []struct {
		v    int64
		path string
	}{{r.Members, "members"}, {r.Records, "records"}, {r.TombstoneHits, "tombstoneHits"}, {r.BenchmarkHits, "benchmarkHits"}} {
		if err := nonNegative(n.v, n.path); err != nil {
			return err
		}
	}
	hits := map[string]int64{string(errcode.TombstoneHit): r.TombstoneHits, string(errcode.BenchmarkHit): r.BenchmarkHits}
	for _, f := range []struct {
		doc       Digest
		watermark uint64
		hits      int64
		name      string
	}{{r.Tombstones, r.TombstoneWatermark, r.TombstoneHits, "tombstones"}, {r.Benchmark, r.BenchmarkFence, r.BenchmarkHits, "benchmark"}} {
		if f.doc.IsZero() && (f.watermark != 0 || f.hits != 0) {
			return errcode.New(errcode.BadDocument, "%s: a watermark or hits without the document", f.name)
		}
		if f.hits > r.Records {
			return errcode.New(errcode.BadCount, "%s: %d hits among %d records", f.name, f.hits, r.Records)
		}
	}
	for class, ids := range r.Examples {
		n, ok := hits[class]
		if !ok {
			return errcode.New(errcode.BadDocument, "examples: %q is not TOMBSTONE_HIT or BENCHMARK_HIT", truncate(class))
		}
		if len(ids) > MaxExamples || int64(len(ids)) > n {
			return errcode.New(errcode.BadCount, "examples.%s lists %d sampleIds for %d hits (at most %d)", class, len(ids), n, MaxExamples)
		}
		for i := 1; i < len(ids); i++ {
			if ids[i-1] >= ids[i] {
				return errcode.New(errcode.BadDocument, "examples.%s: sampleIds not sorted and unique at [%d]", class, i)
			}
		}
	}
	if r.Seconds < 0 || math.IsNaN(r.Seconds) || math.IsInf(r.Seconds, 0) {
		return errcode.New(errcode.BadCount, "seconds=%v", r.Seconds)
	}
	return nil
}

// DecodeRecheckReport strictly decodes and validates a recheck report.
func DecodeRecheckReport(b []byte) (*RecheckReport, error) {
	var r RecheckReport
	if err := decodeStrict(b, RecheckReportSchema, &r); err != nil {
		return nil, err
	}
	return &r, nil
}
