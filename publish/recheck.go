package publish

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/objstore"
	"github.com/shardproof/shardproof/raftgate"
)

// RecheckOptions configure Recheck.
type RecheckOptions struct {
	Root manifest.Digest
	// Tombstones and Benchmark name the new fence documents; at least one
	// is required. Each one checked becomes one recheck command at its
	// watermark.
	Tombstones, Benchmark manifest.Digest
	Verify                VerifyFunc
	Logger                *slog.Logger
	// Members counts the hits in the member files of the snapshot that
	// the gate's VERIFIED report binds the root to, instead of verifying
	// the release again (Verify is not called): a fraction of the bytes,
	// no content to hash, and no re-proof of the release's own bytes.
	Members bool
	// Parallelism bounds the member files read at once (Members; default
	// runtime.NumCPU()); Tool names the program in the recheck report.
	Parallelism int
	Tool        string
	// SignKey, when set, signs each recheck recorded (and the
	// verification report a full recheck makes); the signatures stored
	// beside them are sent either way (see AttachRecheckSignatures).
	SignKey ed25519.PrivateKey
}

// RecheckOutcome is what Recheck did.
type RecheckOutcome struct {
	// Report is the verification report of a full recheck; Members the
	// recheck report of a --members one. ReportDigest names the one made.
	Report       *manifest.Report
	Members      *manifest.RecheckReport
	ReportDigest manifest.Digest
	// Hits per fence kind ("tombstone", "benchmark").
	Hits map[string]int64
	// Reopened lists the permits the gate renewed, sorted.
	Reopened []string
	Release  raftgate.Release
	// VerifiedBy names the trusted verifier keys whose signatures of the
	// rechecks the gate checked as it recorded them
	// (raftgate.RecheckResult.VerifiedBy), sorted, each once: empty when
	// the gate trusts none or recorded none.
	VerifiedBy []string
}

// Recheck computes the hits of new tombstone or benchmark documents
// against a published root and records them with the gate. With zero hits
// the gate renews the root's permits a fence advance closed (a run's
// permit only while the run lives); with any hit the gate marks the
// release INVALID, its permits stay closed, and Recheck fails with
// TOMBSTONE_HIT or BENCHMARK_HIT. Zero hits that leave the release below
// a current fence (the other kind's) renew nothing: FENCE_BEHIND.
//
// The hits come from a full verification of the root against the new
// documents, so a recheck also re-proves the bytes: a release that no
// longer verifies for another reason fails with that reason's code and
// nothing is renewed. With o.Members they come from the snapshot's member
// files instead (see RecheckOptions.Members), recorded in a recheck
// report (manifest.RecheckReport).
func Recheck(ctx context.Context, s objstore.Store, g Gate, o RecheckOptions) (*RecheckOutcome, error) {
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	log = log.With("root", o.Root.String())
	if o.Root.IsZero() || (o.Tombstones.IsZero() && o.Benchmark.IsZero()) {
		return nil, errcode.New(errcode.Usage, "recheck needs a root and --tombstones and/or --benchmark")
	}
	if o.Verify == nil && !o.Members {
		return nil, errcode.New(errcode.Internal, "recheck: no verifier")
	}
	// Fail fast on a root the gate does not know, or holds INVALID:
	// no recheck renews its permits, so verifying it again is wasted.
	gr, err := g.Release(ctx, o.Root)
	if err != nil {
		return nil, err
	}
	if gr.State == raftgate.ReleaseInvalid {
		return nil, errcode.New(errcode.NotVerified, "release %s is INVALID (report %s); no recheck renews its permits", o.Root, gr.Report)
	}
	if err := checkRecheckDocs(ctx, s, g, o); err != nil {
		return nil, err
	}
	if o.Members {
		doc, d, err := recheckMembers(ctx, s, gr, o)
		if err != nil {
			return nil, err
		}
		out := &RecheckOutcome{Members: doc, ReportDigest: d, Hits: map[string]int64{}, Reopened: []string{}}
		if err := record(ctx, log, s, g, o, out, d, doc.TombstoneWatermark, doc.TombstoneHits, doc.BenchmarkFence, doc.BenchmarkHits); err != nil {
			return out, err
		}
		return out, stillBehind(ctx, g, o, out)
	}
	rep, d, err := o.Verify(ctx, o.Root, o.Tombstones, o.Benchmark)
	if err != nil {
		return nil, err
	}
	if rep.Root != o.Root {
		return nil, errcode.New(errcode.BadDocument, "report %s verifies %s, not %s", d, rep.Root, o.Root)
	}
	out := &RecheckOutcome{Report: rep, ReportDigest: d, Hits: map[string]int64{}, Reopened: []string{}}
	if o.SignKey != nil {
		// So that the report may be registered later (gate register).
		if err := SignReport(ctx, s, o.SignKey, rep, d); err != nil {
			return out, err
		}
	}
	// Only fence hits are a recheck's business; any other failure means
	// the release itself no longer verifies.
	other := rep.Counts
	other.TombstoneHits, other.BenchmarkHits = 0, 0
	if code := FailureCode(&other); code != "" {
		return out, errcode.New(code, "release %s no longer verifies (report %s); permits are not renewed", o.Root, d)
	}
	if err := record(ctx, log, s, g, o, out, d, rep.TombstoneWatermark, rep.Counts.TombstoneHits, rep.BenchmarkFence, rep.Counts.BenchmarkHits); err != nil {
		return out, err
	}
	return out, stillBehind(ctx, g, o, out)
}

// checkRecheckDocs refuses, before any verification work, a fence
// document below the gate's current fence of its kind (FENCE_BEHIND): its
// zero hits could renew nothing, so the verification (or the member
// reads) it would take were wasted; and one that is not the log the
// fence was advanced with (FENCE_LOG_MISMATCH, see CheckFenceLogs): its
// zero hits would renew permits the fence's log closed.
func checkRecheckDocs(ctx context.Context, s objstore.Store, g Gate, o RecheckOptions) error {
	f, err := g.Fences(ctx)
	if err != nil {
		return err
	}
	for _, d := range []struct {
		digest manifest.Digest
		schema string
		fence  uint64
		flag   string
	}{
		{o.Tombstones, manifest.TombstonesSchema, f.Tombstone, "--tombstones"},
		{o.Benchmark, manifest.BenchmarkSchema, f.Benchmark, "--benchmark"},
	} {
		if d.digest.IsZero() {
			continue
		}
		l, err := LoadFenceLog(ctx, s, d.digest, d.schema)
		if err != nil {
			return err
		}
		if w := l.Watermark(); w < d.fence {
			return errcode.New(errcode.FenceBehind, "%s document %s has watermark %d; the gate's fence is %d, so a recheck against it renews nothing (pass the current %s log with %s)",
				d.schema, d.digest, w, d.fence, d.schema, d.flag)
		}
	}
	// Only the kinds rechecked: each must be the fence's log.
	if o.Tombstones.IsZero() {
		f.TombstoneLog = manifest.Digest{}
	}
	if o.Benchmark.IsZero() {
		f.BenchmarkLog = manifest.Digest{}
	}
	return CheckFenceLogs(ctx, s, o.Tombstones, o.Benchmark, *f)
}

// stillBehind returns FENCE_BEHIND when the release, as the gate records
// it after the rechecks, is checked below a current fence: a recheck of
// one kind renews nothing while the other fence is past the release, and
// its permits stay closed until that kind is rechecked too. Nil when the
// release satisfies both fences (its permits are open).
func stillBehind(ctx context.Context, g Gate, o RecheckOptions, out *RecheckOutcome) error {
	f, err := g.Fences(ctx)
	if err != nil {
		return err
	}
	r := &out.Release
	var behind []string
	if r.TombstoneWatermark < f.Tombstone {
		behind = append(behind, fmt.Sprintf("tombstone %d below the fence %d (--tombstones)", r.TombstoneWatermark, f.Tombstone))
	}
	if r.BenchmarkFence < f.Benchmark {
		behind = append(behind, fmt.Sprintf("benchmark %d below the fence %d (--benchmark)", r.BenchmarkFence, f.Benchmark))
	}
	if len(behind) == 0 {
		return nil
	}
	return errcode.New(errcode.FenceBehind, "release %s is recorded with no hits, but checked at %s: its permits stay closed until it is rechecked against that document too",
		o.Root, strings.Join(behind, " and "))
}

// record sends one recheck command per fence document checked, with the
// report d and its hits, and fills out's hits, release and reopened
// permits.
func record(ctx context.Context, log *slog.Logger, s objstore.Store, g Gate, o RecheckOptions, out *RecheckOutcome, d manifest.Digest, tw uint64, th int64, bf uint64, bh int64) error {
	for _, k := range []struct {
		kind  string
		doc   manifest.Digest
		value uint64
		hits  int64
	}{
		{raftgate.FenceTombstone, o.Tombstones, tw, th},
		{raftgate.FenceBenchmark, o.Benchmark, bf, bh},
	} {
		if k.doc.IsZero() {
			continue
		}
		out.Hits[k.kind] = k.hits
		rc := &raftgate.RecheckCmd{Root: o.Root, Kind: k.kind, Value: k.value, Report: d, Hits: k.hits}
		if err := AttachRecheckSignatures(ctx, s, o.SignKey, rc, log); err != nil {
			return fmt.Errorf("recheck %s at %d: %w; nothing recorded", k.kind, k.value, err)
		}
		res, err := g.Recheck(ctx, rc)
		if res != nil {
			// A recheck with hits is recorded too, and refused.
			out.Release = res.Release
			for _, id := range res.VerifiedBy {
				if !slices.Contains(out.VerifiedBy, id) {
					out.VerifiedBy = append(out.VerifiedBy, id)
				}
			}
			slices.Sort(out.VerifiedBy)
		}
		if err != nil {
			log.Warn("recheck refused", "kind", k.kind, "value", k.value, "hits", k.hits, "report", d.String(), "code", errcode.Of(err))
			return fmt.Errorf("recheck %s at %d: %w", k.kind, k.value, err)
		}
		out.Reopened = append(out.Reopened, res.Reopened...)
		log.Info("rechecked", "kind", k.kind, "value", k.value, "hits", k.hits, "report", d.String(), "reopened", len(res.Reopened))
	}
	return nil
}

// PermitLister lists the gate's permits and reads its releases, aliases
// and fences; *raftgate.Client implements it.
type PermitLister interface {
	Permits(ctx context.Context) ([]*raftgate.Permit, error)
	Release(ctx context.Context, root manifest.Digest) (*raftgate.Release, error)
	Alias(ctx context.Context, name string) (*raftgate.Alias, error)
	Fences(ctx context.Context) (*raftgate.Fences, error)
}

// ClosedRoots returns, sorted and without repeats, the roots a fence
// advance took out of use that a recheck can bring back: the roots of
// every permit it closed (runs, the aliases' current generations), and
// the roots inside an alias's rollback window that the fences have
// passed, which rollback refuses (ROLLBACK_INELIGIBLE) until a recheck
// clears them. Their permits are superseded, not closed, so a recheck of
// the closed roots alone left an alias nothing to roll back to after an
// advance. Roots the gate holds INVALID are left out: their permits stay
// closed whatever a recheck finds, so rechecking them would only verify
// again, each time, to be refused.
func ClosedRoots(ctx context.Context, g PermitLister) ([]manifest.Digest, error) {
	cr, _, err := ClosedRootsBehind(ctx, g)
	if err != nil {
		return nil, err
	}
	out := make([]manifest.Digest, len(cr))
	for i, r := range cr {
		out[i] = r.Root
	}
	return out, nil
}

// ClosedRoot is a root ClosedRoots names, with the fences its release is
// checked below (raftgate.FenceTombstone, then raftgate.FenceBenchmark):
// the documents a recheck of it needs. Behind is empty for a root whose
// closed permit no fence holds closed (a failed or cancelled run's, which
// no recheck renews).
type ClosedRoot struct {
	Root   manifest.Digest
	Behind []string
}

// ClosedRootsBehind is ClosedRoots with the fences each root is behind,
// and the gate's fences it compared them with.
func ClosedRootsBehind(ctx context.Context, g PermitLister) ([]ClosedRoot, *raftgate.Fences, error) {
	ps, err := g.Permits(ctx)
	if err != nil {
		return nil, nil, err
	}
	f, err := g.Fences(ctx)
	if err != nil {
		return nil, nil, err
	}
	behind := func(rel *raftgate.Release) []string {
		var out []string
		if rel.TombstoneWatermark < f.Tombstone {
			out = append(out, raftgate.FenceTombstone)
		}
		if rel.BenchmarkFence < f.Benchmark {
			out = append(out, raftgate.FenceBenchmark)
		}
		return out
	}
	seen := map[manifest.Digest]bool{}
	var out []ClosedRoot
	aliases := map[string]bool{}
	for _, p := range ps {
		if p.Kind == raftgate.PermitPublish || p.Kind == raftgate.PermitRollback {
			aliases[p.Alias] = true
		}
		if p.State != raftgate.PermitClosed || seen[p.Root] {
			continue
		}
		seen[p.Root] = true
		rel, err := g.Release(ctx, p.Root)
		if err != nil {
			return nil, nil, err
		}
		if rel.State != raftgate.ReleaseInvalid {
			out = append(out, ClosedRoot{Root: p.Root, Behind: behind(rel)})
		}
	}
	// Every alias has a publish permit in its history, which prune
	// keeps: the permits name them all.
	for _, name := range slices.Sorted(maps.Keys(aliases)) {
		al, err := g.Alias(ctx, name)
		if err != nil {
			return nil, nil, err
		}
		h := al.History
		for _, e := range h[len(h)-min(max(al.Retain, 0), len(h)):] {
			if seen[e.Root] {
				continue
			}
			seen[e.Root] = true
			rel, err := g.Release(ctx, e.Root)
			if err != nil {
				return nil, nil, err
			}
			if b := behind(rel); rel.State == raftgate.ReleasePublished && len(b) > 0 {
				out = append(out, ClosedRoot{Root: e.Root, Behind: b})
			}
		}
	}
	slices.SortFunc(out, func(a, b ClosedRoot) int { return bytes.Compare(a.Root[:], b.Root[:]) })
	return out, f, nil
}

// RecheckEvidence reads report d from s, a recheck report
// (training.shard.recheck.v1) or a verification report
// (training.shard.verification.v1), and returns the watermark and hits it
// records for fence kind against root: what a recheck command may claim.
// The report must name root and have checked a document of that kind; a
// verification report must show no failure but fence hits, since a
// release that no longer verifies is not renewed by a recheck. It must
// also have checked root against the snapshot root's manifest binds
// (BAD_INPUT otherwise, as gate register and publish --report refuse
// it): a recheck report counts its hits in that snapshot's member files,
// so another snapshot's are another dataset's hits, and a verification
// report without failures against another snapshot (verify --snapshot)
// shows the release holds that snapshot's tuples, not its own.
func RecheckEvidence(ctx context.Context, s objstore.Store, root manifest.Digest, kind string, d manifest.Digest) (value uint64, hits int64, checked manifest.Digest, err error) {
	b, _, err := objstore.ReadBlob(ctx, s, d, manifest.MaxDocumentSize)
	if err != nil {
		return 0, 0, checked, errcode.Wrap(errcode.Of(err), err, "report %s", d)
	}
	schema, doc, err := manifest.DecodeAny(b)
	if err != nil {
		return 0, 0, checked, errcode.Wrap(errcode.Of(err), err, "report %s", d)
	}
	var (
		reportRoot, snapshot, fenceDoc manifest.Digest
		th, bh                         int64
		tw, bf                         uint64
	)
	switch r := doc.(type) {
	case *manifest.RecheckReport:
		reportRoot, snapshot, tw, th, bf, bh = r.Root, r.DatasetSnapshot, r.TombstoneWatermark, r.TombstoneHits, r.BenchmarkFence, r.BenchmarkHits
		fenceDoc = r.Tombstones
		if kind == raftgate.FenceBenchmark {
			fenceDoc = r.Benchmark
		}
	case *manifest.Report:
		reportRoot, snapshot, tw, th, bf, bh = r.Root, r.DatasetSnapshot, r.TombstoneWatermark, r.Counts.TombstoneHits, r.BenchmarkFence, r.Counts.BenchmarkHits
		fenceDoc = r.Tombstones
		if kind == raftgate.FenceBenchmark {
			fenceDoc = r.Benchmark
		}
		other := r.Counts
		other.TombstoneHits, other.BenchmarkHits = 0, 0
		if code := FailureCode(&other); code != "" {
			return 0, 0, checked, errcode.New(code, "report %s: release %s no longer verifies (%s); it is no recheck evidence", d, r.Root, code)
		}
	default:
		return 0, 0, checked, errcode.New(errcode.BadDocument, "report %s is a %s document, not a recheck or verification report", d, schema)
	}
	if reportRoot != root {
		return 0, 0, checked, errcode.New(errcode.BadDocument, "report %s checks root %s, not %s", d, reportRoot, root)
	}
	rel, err := loadRelease(ctx, s, root)
	if err != nil {
		return 0, 0, checked, err
	}
	if snapshot != rel.DatasetSnapshot {
		return 0, 0, checked, errcode.New(errcode.BadInput, "report %s checks root %s against snapshot %s, but the root manifest binds snapshot %s: its hits are not the release's (recheck without verify --snapshot)",
			d, root, snapshot, rel.DatasetSnapshot)
	}
	switch kind {
	case raftgate.FenceTombstone:
		value, hits = tw, th
	case raftgate.FenceBenchmark:
		value, hits = bf, bh
	default:
		return 0, 0, checked, errcode.New(errcode.Usage, "fence kind %q is not tombstone or benchmark", kind)
	}
	if fenceDoc.IsZero() {
		return 0, 0, checked, errcode.New(errcode.BadInput, "report %s checked no %s document", d, kind)
	}
	return value, hits, fenceDoc, nil
}
