package publish

import (
	"context"
	"fmt"
	"strings"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/objstore"
	"github.com/shardproof/shardproof/raftgate"
)

// CheckFenceLogs refuses fence documents that are not the logs the gate's
// fences were advanced with: for each kind whose fence f records a log
// prefix digest (raftgate.Fences.TombstoneLog, BenchmarkLog), the document
// named (tomb, bench: the ones a report checked, or a publish or recheck
// is about to check) must have that prefix digest at the fence's value
// (manifest.FenceLog.PrefixDigest): an append-only log at seq n is a
// prefix of every later one, so a log that differs at or below the fence
// erased other samples than the fence stands for, and a release checked
// against it may hold one the fence's log erased. The error is
// FENCE_LOG_MISMATCH, for a document of another log and for none named
// while the fence records a log (a report from before the fence's log,
// or one that checked no document of that kind: verify it again against
// the current log). A document below the fence is FENCE_BEHIND. A fence
// without a log digest (advanced before command-schema version 4, or by
// a bare "gate fence KIND VALUE") checks nothing: say so in the docs, not
// here. Nothing is written.
func CheckFenceLogs(ctx context.Context, s objstore.Store, tomb, bench manifest.Digest, f raftgate.Fences) error {
	for _, k := range []struct {
		kind, schema, flag string
		doc                manifest.Digest
		fence              uint64
		log                manifest.Digest
	}{
		{raftgate.FenceTombstone, manifest.TombstonesSchema, "--tombstones", tomb, f.Tombstone, f.TombstoneLog},
		{raftgate.FenceBenchmark, manifest.BenchmarkSchema, "--benchmark", bench, f.Benchmark, f.BenchmarkLog},
	} {
		if k.log.IsZero() || k.fence == 0 {
			// At 0 every log has the same (empty) prefix.
			continue
		}
		if k.doc.IsZero() {
			return errcode.New(errcode.FenceLogMismatch, "no %s document is named, and the gate's %s fence %d was advanced with a log of prefix digest %s: verify against that log or one that extends it (%s)",
				k.schema, k.kind, k.fence, k.log, k.flag)
		}
		l, err := LoadFenceLog(ctx, s, k.doc, k.schema)
		if err != nil {
			return err
		}
		p, err := l.PrefixDigest(k.fence)
		if err != nil {
			return fmt.Errorf("%s %s against the gate's %s fence %d: %w", k.schema, k.doc, k.kind, k.fence, err)
		}
		if p != k.log {
			return errcode.New(errcode.FenceLogMismatch, "%s %s is not the log the gate's %s fence was advanced with: its prefix digest at seq %d is %s, the fence's %s, so an entry at or below %d differs (another log, or history rewritten); verify against the log the fence was advanced with, or one that extends it (%s)",
				k.schema, k.doc, k.kind, k.fence, p, k.log, k.fence, k.flag)
		}
	}
	return nil
}

// fenceLogNote says which fences record no log and so check none, for a
// log line; "" when both record one or are at 0.
func fenceLogNote(f raftgate.Fences) string {
	var none []string
	if f.Tombstone > 0 && f.TombstoneLog.IsZero() {
		none = append(none, raftgate.FenceTombstone)
	}
	if f.Benchmark > 0 && f.BenchmarkLog.IsZero() {
		none = append(none, raftgate.FenceBenchmark)
	}
	return strings.Join(none, ", ")
}

// CheckReportLogs is CheckFenceLogs for a VERIFIED report to register,
// checked at watermarks tw and bf against documents tomb and bench: a kind
// whose fence the report is below is left out, since the report cannot
// make the release satisfy that fence whatever log it checked (the gate
// keeps the release behind it, FENCE_BEHIND at publish).
func CheckReportLogs(ctx context.Context, s objstore.Store, tomb, bench manifest.Digest, tw, bf uint64, f raftgate.Fences) error {
	if tw < f.Tombstone {
		f.TombstoneLog = manifest.Digest{}
	}
	if bf < f.Benchmark {
		f.BenchmarkLog = manifest.Digest{}
	}
	return CheckFenceLogs(ctx, s, tomb, bench, f)
}

// CheckEvidenceLogs is CheckFenceLogs for the evidence a publish or a
// register stands on: report rep where it reaches a fence (its logs), and
// where it does not while the gate's release gr (nil: none) does, the
// evidence the gate holds for gr at or above that fence: its report
// (gr.Report) and its rechecks with no hits, one of which must have
// checked the fence's log (RecheckEvidence names it). The gate admits the
// release on the highest watermarks any report or recheck showed, and it
// keeps them after a fence advance names a log, so a watermark that
// reaches the fence on another log's report (one registered before the
// fence named its log) would otherwise admit a release no check against
// the fence's log stands behind. None found is FENCE_LOG_MISMATCH (verify
// against the fence's log); an earlier report the gate no longer names
// cannot be found, and is no evidence. A fence neither rep nor gr reaches
// is left to the gate (FENCE_BEHIND).
func CheckEvidenceLogs(ctx context.Context, s objstore.Store, rep *manifest.Report, gr *raftgate.Release, f raftgate.Fences) error {
	if err := CheckReportLogs(ctx, s, rep.Tombstones, rep.Benchmark, rep.TombstoneWatermark, rep.BenchmarkFence, f); err != nil {
		return err
	}
	if gr == nil {
		return nil
	}
	for _, k := range []struct {
		kind    string
		reached bool
		gate    uint64
		fence   uint64
		log     manifest.Digest
	}{
		{raftgate.FenceTombstone, rep.TombstoneWatermark >= f.Tombstone, gr.TombstoneWatermark, f.Tombstone, f.TombstoneLog},
		{raftgate.FenceBenchmark, rep.BenchmarkFence >= f.Benchmark, gr.BenchmarkFence, f.Benchmark, f.BenchmarkLog},
	} {
		if k.reached || k.log.IsZero() || k.fence == 0 || k.gate < k.fence {
			continue
		}
		// The gate's report first, then its rechecks, newest first.
		var evidence []manifest.Digest
		if !gr.Report.IsZero() {
			evidence = append(evidence, gr.Report)
		}
		for i := len(gr.Rechecks) - 1; i >= 0; i-- {
			rc := gr.Rechecks[i]
			if rc.Kind == k.kind && rc.Value >= k.fence && rc.Hits == 0 && !rc.Report.IsZero() {
				evidence = append(evidence, rc.Report)
			}
		}
		var last error
		found := false
		for _, d := range evidence {
			value, hits, doc, err := RecheckEvidence(ctx, s, gr.Root, k.kind, d)
			if err != nil {
				last = err
				continue
			}
			if value < k.fence || hits != 0 {
				continue
			}
			one := raftgate.Fences{}
			var tomb, bench manifest.Digest
			if k.kind == raftgate.FenceTombstone {
				one.Tombstone, one.TombstoneLog, tomb = k.fence, k.log, doc
			} else {
				one.Benchmark, one.BenchmarkLog, bench = k.fence, k.log, doc
			}
			if last = CheckFenceLogs(ctx, s, tomb, bench, one); last == nil {
				found = true
				break
			}
		}
		if found {
			continue
		}
		if last != nil {
			return fmt.Errorf("release %s reaches the %s fence %d by what the gate records only (its report and rechecks), none checked against the fence's log: %w", gr.Root, k.kind, k.fence, last)
		}
		return errcode.New(errcode.FenceLogMismatch, "release %s reaches the %s fence %d by what the gate records only (watermark %d), and neither its report %s nor any recheck checked the fence's log (prefix digest %s): verify against that log or one that extends it",
			gr.Root, k.kind, k.fence, k.gate, gr.Report, k.log)
	}
	return nil
}
