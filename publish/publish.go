package publish

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"log/slog"
	"time"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/objstore"
	"github.com/shardproof/shardproof/raftgate"
)

// Gate is what publishing needs from the gate. *raftgate.Client
// implements it; tests wrap a real client to break one method.
type Gate interface {
	Fences(ctx context.Context) (*raftgate.Fences, error)
	Alias(ctx context.Context, name string) (*raftgate.Alias, error)
	Release(ctx context.Context, root manifest.Digest) (*raftgate.Release, error)
	Register(ctx context.Context, cmd *raftgate.Register) (*raftgate.RecheckResult, error)
	Recheck(ctx context.Context, cmd *raftgate.RecheckCmd) (*raftgate.RecheckResult, error)
	Publish(ctx context.Context, alias string, root manifest.Digest, expected uint64, retain int) (*raftgate.PublishResult, error)
}

// VerifyFunc verifies root against its dataset snapshot and the given
// fence documents (zero: none), stores the report content-addressed and
// returns it with its digest. An INVALID release is a report with that
// verdict, not an error. The CLI passes the coordinator's local executor.
type VerifyFunc func(ctx context.Context, root, tombstones, benchmark manifest.Digest) (*manifest.Report, manifest.Digest, error)

// Options configure Publish.
type Options struct {
	Alias string
	Root  manifest.Digest
	// ExpectGeneration is the alias generation the caller saw; publish
	// moves the alias only from exactly that generation. Without it
	// (HasExpect false) the current generation is read first, and a root
	// the alias already points at is reported as published, not
	// published again.
	ExpectGeneration uint64
	HasExpect        bool
	// Tombstones and Benchmark name the fence documents to verify
	// against; their watermarks must reach the gate's current fences.
	Tombstones, Benchmark manifest.Digest
	// Report, when set, names a stored report of Root (from an earlier
	// `shardproof verify`) to register instead of verifying again.
	Report manifest.Digest
	// Retain is the rollback window of a new alias (0: the gate default).
	Retain int
	Verify VerifyFunc
	// SignKey, when set, signs the evidence of the report registered
	// (see AttachRegisterSignatures); the signatures stored beside the
	// report (verify --sign-key) are sent either way.
	SignKey ed25519.PrivateKey
	// Attempts bounds how often a publish whose outcome is unknown
	// (INDETERMINATE) is sent again; zero means 5.
	Attempts int
	Logger   *slog.Logger
}

// Outcome is what Publish did.
type Outcome struct {
	Report       *manifest.Report
	ReportDigest manifest.Digest
	// Reused is true when verify did not run: the report was named by
	// Options.Report, or the gate already held a VERIFIED report of the
	// same root at or above the current fences.
	Reused bool
	// Already is true when the alias already pointed at the root and no
	// new generation was made.
	Already bool
	Result  raftgate.PublishResult
	// VerifiedBy names the trusted verifier keys whose signatures of the
	// report's evidence the gate checked when it registered the report
	// (raftgate.RecheckResult.VerifiedBy): empty when the gate trusts
	// none (started without --verifier-keys), and when nothing was
	// registered.
	VerifiedBy []string
}

// Publish verifies opts.Root (or reuses a stored report of it), registers
// it with the gate and moves the alias to it with a compare-and-swap on
// the generation. A candidate about to be verified is registered STAGED
// first, so one whose verification cannot finish (store unreachable,
// canceled) stays STAGED.
//
// A release that fails verification is registered INVALID and the alias
// does not move; the error carries the first failure's code
// (MISSING_MEMBER, DIGEST_MISMATCH, …). A publish whose outcome is unknown
// is sent again with the same expected generation: the gate answers a
// retry of the same (alias, generation, root) with the original result,
// and a retry that lost the generation to another root with
// PUBLISH_CONFLICT.
func Publish(ctx context.Context, s objstore.Store, g Gate, o Options) (*Outcome, error) {
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	log = log.With("alias", o.Alias, "root", o.Root.String())
	if o.Alias == "" || o.Root.IsZero() {
		return nil, errcode.New(errcode.Usage, "publish needs an alias and a root digest")
	}
	// Before a verification that may take hours: the gate would refuse
	// the name only once it is done.
	if err := raftgate.CheckAliasName(o.Alias); err != nil {
		return nil, errcode.Wrap(errcode.Usage, err, "publish")
	}
	if err := raftgate.CheckPathName("alias", o.Alias); err != nil {
		return nil, errcode.Wrap(errcode.Usage, err, "publish")
	}
	if o.Retain < 0 || o.Retain > raftgate.MaxRetain {
		return nil, errcode.New(errcode.Usage, "publish: retain %d outside [1,%d] (0: the gate's default)", o.Retain, raftgate.MaxRetain)
	}
	if o.Verify == nil {
		return nil, errcode.New(errcode.Internal, "publish: no verifier")
	}
	rel, err := loadRelease(ctx, s, o.Root)
	if err != nil {
		return nil, err
	}
	shards := make([]manifest.Digest, len(rel.Shards))
	for i, sh := range rel.Shards {
		shards[i] = sh.Digest
	}
	// Linearizable: a follower's own view may lag behind a fence
	// advance, and a verification against old fences would be refused
	// once done (FENCE_BEHIND), hours later at scale.
	fences, err := g.Fences(ctx)
	if err != nil {
		return nil, err
	}

	al, err := g.Alias(ctx, o.Alias)
	unknown := errcode.Of(err) == errcode.UnknownAlias
	if err != nil && !unknown {
		return nil, err
	}
	expected := o.ExpectGeneration
	switch {
	case o.HasExpect:
		// A compare-and-set that already lost (the alias moved past the
		// expected generation, to another root) would be refused after
		// the verification, which at scale takes hours.
		if !unknown {
			if err := raftgate.StalePublish(al, o.Root, expected); err != nil {
				return nil, err
			}
		} else if expected != 0 {
			// Only generation 0 creates an alias: the gate would
			// refuse this one after the verification.
			return nil, errcode.New(errcode.UnknownAlias, "alias %s does not exist, so it is not at generation %d (generation 0 creates it)", o.Alias, expected)
		}
	case unknown:
		expected = 0
	case al.Root == o.Root:
		// A rerun after an unknown outcome: the alias already points
		// here. Publishing again would only add a generation. But the
		// answer "published" must still be true of the root: the gate
		// may have found it INVALID since (a recheck with hits), or a
		// fence advance may have closed its permits.
		if al.Generation == 0 || uint64(len(al.History)) != al.Generation {
			// The kind of its last generation is read from the history.
			return nil, errcode.New(errcode.BadDocument, "gate answer for alias %s: generation %d with %d history entries", o.Alias, al.Generation, len(al.History))
		}
		gr, err := g.Release(ctx, o.Root)
		if err != nil {
			return nil, err
		}
		if gr.State == raftgate.ReleaseInvalid {
			return nil, invalidError(ctx, s, gr)
		}
		if gr.TombstoneWatermark < fences.Tombstone || gr.BenchmarkFence < fences.Benchmark {
			return nil, errcode.New(errcode.PermitClosed, "alias %s already points at %s (generation %d), but the fences (tombstone %d, benchmark %d) have passed the watermarks it was checked at (%d, %d): its permits are closed until 'shardproof recheck --alias %s' finds zero hits",
				o.Alias, o.Root, al.Generation, fences.Tombstone, fences.Benchmark, gr.TombstoneWatermark, gr.BenchmarkFence, o.Alias)
		}
		log.Info("alias already points at root", "generation", al.Generation)
		return &Outcome{Already: true, Result: raftgate.PublishResult{
			Alias: al.Name, Generation: al.Generation, Root: al.Root, Kind: al.History[len(al.History)-1].Kind, Permit: al.Permit,
		}}, nil
	default:
		expected = al.Generation
	}

	attempts := o.Attempts
	if attempts <= 0 {
		attempts = 5
	}
	out := &Outcome{}
	if out.Report, out.ReportDigest, err = reusable(ctx, s, g, o, *fences, rel); err != nil {
		return nil, err
	}
	out.Reused = out.Report != nil
	if !out.Reused {
		// The gate holds nothing reusable: what verify checks against
		// must reach the current fences and the release's claims, or
		// the work is wasted.
		if err := checkFenceDocs(ctx, s, rel, o.Tombstones, o.Benchmark, *fences); err != nil {
			return nil, err
		}
		// Stage the candidate first, so the gate shows it (STAGED) even
		// when verification cannot finish.
		if err := resend(ctx, log, "register", attempts, func() error {
			_, err := g.Register(ctx, &raftgate.Register{Root: o.Root, Shards: shards})
			return err
		}); err != nil {
			return nil, fmt.Errorf("register: %w", err)
		}
		log.Info("verifying", "tombstones", docName(o.Tombstones), "benchmark", docName(o.Benchmark))
		if out.Report, out.ReportDigest, err = o.Verify(ctx, o.Root, o.Tombstones, o.Benchmark); err != nil {
			return out, err
		}
	}
	rep := out.Report
	if rep.Root != o.Root {
		return nil, errcode.New(errcode.BadDocument, "report %s verifies %s, not %s", out.ReportDigest, rep.Root, o.Root)
	}
	if rep.Verdict == manifest.Verified {
		// The fences may have moved during the verification: the logs
		// the report checked must still be the fences' logs.
		if fences, err = g.Fences(ctx); err != nil {
			return out, err
		}
		gr, err := g.Release(ctx, o.Root)
		if err != nil && errcode.Of(err) != errcode.UnknownRelease {
			return out, err
		}
		if err != nil {
			gr = nil
		}
		if err := CheckEvidenceLogs(ctx, s, rep, gr, *fences); err != nil {
			return out, fmt.Errorf("report %s: %w; nothing registered", out.ReportDigest, err)
		}
		if note := fenceLogNote(*fences); note != "" {
			log.Warn("the gate's fences record no log (advanced without one): the logs checked cannot be matched against them", "fences", note)
		}
	}
	if rep.Verdict != manifest.Verified && copyFailure(&rep.Counts) {
		// The copy may be what is bad, not a release the gate holds
		// proven. Unjudged is not registered: a gate that does not
		// answer the read may hold the release VERIFIED, and as
		// gate register does, the verdict waits for an answer.
		gr, err := g.Release(ctx, o.Root)
		if err != nil && errcode.Of(err) != errcode.UnknownRelease {
			return out, fmt.Errorf("read the gate's release %s to judge report %s of a copy that fails its digests, sizes or versions; nothing registered: %w", o.Root, out.ReportDigest, err)
		}
		if err == nil {
			if err := DamagedCopy(gr, rep, out.ReportDigest); err != nil {
				log.Warn("this store's copy of a VERIFIED release is damaged; nothing registered", "report", out.ReportDigest.String(), "code", errcode.Of(err), "state", gr.State)
				return out, err
			}
		}
	}
	regCmd := &raftgate.Register{Root: o.Root, Shards: shards, Report: Summary(rep, out.ReportDigest)}
	if err := AttachRegisterSignatures(ctx, s, o.SignKey, regCmd, log); err != nil {
		return out, fmt.Errorf("%w; nothing registered", err)
	}
	var reg *raftgate.RecheckResult
	err = resend(ctx, log, "register", attempts, func() (err error) {
		// Registering the same report twice changes nothing.
		reg, err = g.Register(ctx, regCmd)
		return err
	})
	if err != nil {
		if c := errcode.Of(err); c == errcode.EvidenceUnsigned || c == errcode.EvidenceSignatureInvalid {
			log.Warn("the gate requires a trusted verifier's signature of the report; nothing registered", "report", out.ReportDigest.String(), "signatures", len(regCmd.Signatures), "code", c)
		}
		return out, fmt.Errorf("register: %w", err)
	}
	out.VerifiedBy = reg.VerifiedBy
	if rep.Verdict != manifest.Verified {
		code := FailureCode(&rep.Counts)
		if code == "" {
			code = errcode.NotVerified
		}
		log.Warn("candidate INVALID; alias not moved", "report", out.ReportDigest.String(), "code", code, "state", reg.Release.State)
		return out, errcode.New(code, "release %s is INVALID (report %s); it stays %s and alias %s does not move",
			o.Root, out.ReportDigest, reg.Release.State, o.Alias)
	}

	var res *raftgate.PublishResult
	err = resend(ctx, log, "publish", attempts, func() (err error) {
		// The gate recognises the same command by (alias, expected
		// generation, root) and returns the first result.
		res, err = g.Publish(ctx, o.Alias, o.Root, expected, o.Retain)
		return err
	})
	if err != nil {
		return out, fmt.Errorf("publish %s at generation %d: %w", o.Alias, expected, err)
	}
	out.Result = *res
	log.Info("published", "generation", res.Generation, "permit", res.Permit, "report", out.ReportDigest.String(), "reused", out.Reused)
	return out, nil
}

// resend calls f until it returns anything but INDETERMINATE, at most
// attempts times: f MUST send a command that is safe to apply twice.
func resend(ctx context.Context, log *slog.Logger, what string, attempts int, f func() error) error {
	backoff := 100 * time.Millisecond
	for i := 1; ; i++ {
		err := f()
		if err == nil || !raftgate.IsIndeterminate(err) || i >= attempts || ctx.Err() != nil {
			return err
		}
		log.Warn(what+" outcome unknown; sending it again", "code", errcode.Indeterminate, "attempt", i)
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// Summary is what the gate needs from report rep with digest d.
func Summary(rep *manifest.Report, d manifest.Digest) *raftgate.ReportSummary {
	return &raftgate.ReportSummary{
		Digest: d, Verdict: rep.Verdict, DatasetSnapshot: rep.DatasetSnapshot,
		TombstoneWatermark: rep.TombstoneWatermark, BenchmarkFence: rep.BenchmarkFence,
		TombstoneHits: rep.Counts.TombstoneHits, BenchmarkHits: rep.Counts.BenchmarkHits,
	}
}

// reusable returns a stored report that answers the question, so verify
// need not run again: the one named by o.Report (an error if it is about
// another root, snapshot or fence documents, or VERIFIED without reaching
// the watermarks release claims), else the report the gate registered
// for o.Root when it is VERIFIED, at or above the current fences with no
// hits, checked against the fence documents named (if any) and at or
// above the release's claims. Otherwise it returns nil. A release the
// gate already holds as INVALID is an error: it cannot be published.
func reusable(ctx context.Context, s objstore.Store, g Gate, o Options, f raftgate.Fences, release *manifest.Release) (*manifest.Report, manifest.Digest, error) {
	snapshot := release.DatasetSnapshot
	var none manifest.Digest
	rel, err := g.Release(ctx, o.Root)
	known := err == nil
	if err != nil && errcode.Of(err) != errcode.UnknownRelease {
		return nil, none, err
	}
	if known && rel.State == raftgate.ReleaseInvalid {
		return nil, none, invalidError(ctx, s, rel)
	}
	if !o.Report.IsZero() {
		rep, err := loadReport(ctx, s, o.Report)
		if err != nil {
			return nil, none, err
		}
		if why := mismatch(rep, o, snapshot); why != "" {
			return nil, none, errcode.New(errcode.BadInput, "report %s cannot stand for this publish: %s", o.Report, why)
		}
		if rep.Verdict == manifest.Verified {
			// A report from before verify checked the claims, or
			// written by hand: VERIFIED below them proves too little.
			if err := release.CheckWatermarks(rep.TombstoneWatermark, rep.BenchmarkFence); err != nil {
				return nil, none, fmt.Errorf("report %s cannot stand for this publish: %w", o.Report, err)
			}
			var gr *raftgate.Release
			if known {
				gr = rel
			}
			if err := CheckEvidenceLogs(ctx, s, rep, gr, f); err != nil {
				return nil, none, fmt.Errorf("report %s cannot stand for this publish: %w", o.Report, err)
			}
			if known {
				if err := OlderReport(rel, Summary(rep, o.Report)); err != nil {
					return nil, none, fmt.Errorf("publish --report: %w (without --report, publish reuses what the gate holds when it reaches the fences)", err)
				}
			}
		}
		return rep, o.Report, nil
	}
	if !known || rel.Report.IsZero() || rel.TombstoneWatermark < f.Tombstone || rel.BenchmarkFence < f.Benchmark ||
		rel.TombstoneHits != 0 || rel.BenchmarkHits != 0 {
		return nil, none, nil
	}
	rep, err := loadReport(ctx, s, rel.Report)
	if objstore.IsNotExist(err) {
		return nil, none, nil
	}
	if err != nil {
		return nil, none, err
	}
	if rep.Verdict != manifest.Verified || mismatch(rep, o, snapshot) != "" ||
		release.CheckWatermarks(rep.TombstoneWatermark, rep.BenchmarkFence) != nil {
		return nil, none, nil
	}
	if err := CheckEvidenceLogs(ctx, s, rep, rel, f); err != nil {
		// Checked against another log than the fences': verify again
		// against the documents named (checkFenceDocs holds them to
		// the fences' logs).
		return nil, none, nil
	}
	return rep, rel.Report, nil
}

// OlderReport returns BAD_INPUT when sum, a VERIFIED report of gr's root
// other than the one the gate names, is checked at no watermark above
// the ones the gate records for the release and below one of them: the
// gate keeps the highest watermarks any report or recheck showed but
// names the last report registered, so registering it would bring nothing
// but leave the gate naming a report that does not back them. A report
// newer on one kind and older on the other raises one watermark and is
// not refused; nor is anything when the release is INVALID.
func OlderReport(gr *raftgate.Release, sum *raftgate.ReportSummary) error {
	if sum.Verdict != manifest.Verified || gr.Report.IsZero() || gr.Report == sum.Digest || gr.State == raftgate.ReleaseInvalid ||
		sum.TombstoneWatermark > gr.TombstoneWatermark || sum.BenchmarkFence > gr.BenchmarkFence ||
		sum.TombstoneWatermark == gr.TombstoneWatermark && sum.BenchmarkFence == gr.BenchmarkFence {
		return nil
	}
	return errcode.New(errcode.BadInput, "report %s was checked at tombstone %d, benchmark %d, below the %d, %d the gate records for release %s (report %s and rechecks): it would bring nothing but name a report that does not back them",
		sum.Digest, sum.TombstoneWatermark, sum.BenchmarkFence, gr.TombstoneWatermark, gr.BenchmarkFence, gr.Root, gr.Report)
}

// DamagedCopy returns the error that refuses to register rep, an INVALID
// report with digest d, when it counts failures of the stored bytes
// themselves (digest, size, missing version) and the gate holds its root
// as gr, VERIFIED, PUBLISHED or RETIRED: those bytes were proven once, so
// what is bad is the copy that was read (a damaged store, another store
// given by mistake), not the release, and registering the verdict would
// close every permit of every alias and run on the root for good. The
// error carries the failure's code (DIGEST_MISMATCH, …) and names any
// fence hits the report counts: they reach the gate the way fence hits
// always do, a fence advance closing the permits and a recheck from a
// sound copy recording them. Otherwise it returns nil: a report of
// content failures, or of a root never proven, is registered as it is.
func DamagedCopy(gr *raftgate.Release, rep *manifest.Report, d manifest.Digest) error {
	if rep.Verdict == manifest.Verified || !copyFailure(&rep.Counts) ||
		gr.State != raftgate.ReleaseVerified && gr.State != raftgate.ReleasePublished && gr.State != raftgate.ReleaseRetired {
		return nil
	}
	hits := ""
	if n := rep.Counts.TombstoneHits + rep.Counts.BenchmarkHits; rep.Counts.TombstoneHits > 0 || rep.Counts.BenchmarkHits > 0 {
		hits = fmt.Sprintf(" The report also counts %d tombstone and %d benchmark hits (%d in all): advance the fence and recheck from a sound copy.",
			rep.Counts.TombstoneHits, rep.Counts.BenchmarkHits, n)
	}
	return errcode.New(FailureCode(&rep.Counts), "this store's copy of release %s does not match its manifest (report %s: %d digest failures, %d size mismatches, %d versions missing); the gate holds the release %s from report %s, proven on other bytes, and nothing was registered: repair or replace the copy.%s",
		rep.Root, d, rep.Counts.DigestFailures, rep.Counts.SizeMismatches, rep.Counts.VersionMissing, gr.State, gr.Report, hits)
}

// copyFailure reports whether c counts failures of the stored bytes
// themselves (digest, size, missing version): the verdict then describes
// the copy that was read as much as the release.
func copyFailure(c *manifest.Counts) bool {
	return c.DigestFailures != 0 || c.SizeMismatches != 0 || c.VersionMissing != 0
}

// invalidError is the error for a release the gate holds INVALID, with the
// code a publish that found it so gave: the first failure of its report,
// or the fence it was rechecked with hits against, so a rerun exits as
// the first run did. NOT_VERIFIED only when neither is known.
func invalidError(ctx context.Context, s objstore.Store, rel *raftgate.Release) error {
	var code errcode.Code
	switch {
	case rel.TombstoneHits > 0:
		code = errcode.TombstoneHit
	case rel.BenchmarkHits > 0:
		code = errcode.BenchmarkHit
	case !rel.Report.IsZero():
		if rep, err := loadReport(ctx, s, rel.Report); err == nil && rep.Verdict == manifest.Invalid {
			code = FailureCode(&rep.Counts)
		}
	}
	if code == "" {
		code = errcode.NotVerified
	}
	return errcode.New(code, "release %s was found INVALID (report %s, %d tombstone and %d benchmark hits); it cannot be published",
		rel.Root, rel.Report, rel.TombstoneHits, rel.BenchmarkHits)
}

// mismatch says why rep is not a report of o.Root against its snapshot and
// the fence documents o names, or "".
func mismatch(rep *manifest.Report, o Options, snapshot manifest.Digest) string {
	switch {
	case rep.Root != o.Root:
		return fmt.Sprintf("it verifies root %s", rep.Root)
	case rep.DatasetSnapshot != snapshot:
		return fmt.Sprintf("it checks snapshot %s, the manifest names %s", rep.DatasetSnapshot, snapshot)
	case !o.Tombstones.IsZero() && rep.Tombstones != o.Tombstones:
		return fmt.Sprintf("it checks tombstone log %s, not %s", docName(rep.Tombstones), o.Tombstones)
	case !o.Benchmark.IsZero() && rep.Benchmark != o.Benchmark:
		return fmt.Sprintf("it checks benchmark registry %s, not %s", docName(rep.Benchmark), o.Benchmark)
	}
	return ""
}

func loadReport(ctx context.Context, s objstore.Store, d manifest.Digest) (*manifest.Report, error) {
	b, _, err := objstore.ReadBlob(ctx, s, d, manifest.MaxDocumentSize)
	if err != nil {
		return nil, fmt.Errorf("report %s: %w", d, err)
	}
	rep, err := manifest.DecodeReport(b)
	if err != nil {
		return nil, fmt.Errorf("report %s: %w", d, err)
	}
	return rep, nil
}

// checkFenceDocs refuses, before any verification work, fence documents
// whose watermarks are below the gate's fences (FENCE_BEHIND: the gate
// would refuse the resulting report), below the watermarks rel claims
// (WATERMARK_UNCHECKED: verify would refuse to start), or that are not
// the logs the fences were advanced with (FENCE_LOG_MISMATCH, see
// CheckFenceLogs).
func checkFenceDocs(ctx context.Context, s objstore.Store, rel *manifest.Release, tomb, bench manifest.Digest, f raftgate.Fences) error {
	var ws [2]uint64
	for i, d := range []struct {
		digest manifest.Digest
		schema string
		fence  uint64
		flag   string
	}{
		{tomb, manifest.TombstonesSchema, f.Tombstone, "--tombstones"},
		{bench, manifest.BenchmarkSchema, f.Benchmark, "--benchmark"},
	} {
		var w uint64
		if !d.digest.IsZero() {
			l, err := LoadFenceLog(ctx, s, d.digest, d.schema)
			if err != nil {
				return err
			}
			w = l.Watermark()
		}
		ws[i] = w
		switch {
		case w >= d.fence:
		case d.digest.IsZero():
			return errcode.New(errcode.FenceBehind, "no %s given, and the gate's fence is %d: pass the %s document at watermark %d or later",
				d.flag, d.fence, d.schema, d.fence)
		default:
			return errcode.New(errcode.FenceBehind, "%s document %s has watermark %d; the gate's fence is %d (pass the current %s log with %s)",
				d.schema, d.digest, w, d.fence, d.schema, d.flag)
		}
	}
	if err := rel.CheckWatermarks(ws[0], ws[1]); err != nil {
		return fmt.Errorf("publish: %w: pass a tombstone log and benchmark registry that reach them (--tombstones, --benchmark)", err)
	}
	return CheckFenceLogs(ctx, s, tomb, bench, f)
}

// LoadFenceLog reads and strictly decodes a tombstone log or benchmark
// registry by digest.
func LoadFenceLog(ctx context.Context, s objstore.Store, d manifest.Digest, schema string) (*manifest.FenceLog, error) {
	b, _, err := objstore.ReadBlob(ctx, s, d, manifest.MaxDocumentSize)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", schema, d, err)
	}
	l, err := manifest.DecodeFenceLog(b, schema)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", schema, d, err)
	}
	return l, nil
}

func loadRelease(ctx context.Context, s objstore.Store, root manifest.Digest) (*manifest.Release, error) {
	b, _, err := objstore.ReadBlob(ctx, s, root, manifest.MaxDocumentSize)
	if err != nil {
		return nil, fmt.Errorf("root manifest %s: %w", root, err)
	}
	rel, err := manifest.DecodeRelease(b)
	if err != nil {
		return nil, fmt.Errorf("root manifest %s: %w", root, err)
	}
	return rel, nil
}

// FailureCode returns the code of the first non-zero failure counter, in
// report order, or "" if there is none.
func FailureCode(c *manifest.Counts) errcode.Code {
	for _, f := range []struct {
		n    int64
		code errcode.Code
	}{
		{c.DigestFailures, errcode.DigestMismatch},
		{c.SizeMismatches, errcode.SizeMismatch},
		{c.VersionMissing, errcode.VersionMissing},
		{c.LogicalMismatches, errcode.LogicalMismatch},
		{c.CountMismatches, errcode.CountMismatch},
		{c.DecodeErrors, errcode.DecodeError},
		{c.SchemaMismatches, errcode.SchemaMismatch},
		{c.TupleRootMismatches, errcode.TupleRootMismatch},
		{c.Missing, errcode.MissingMember},
		{c.Extra, errcode.ExtraMember},
		{c.Duplicate, errcode.DuplicateMember},
		{c.ContentSubstitution, errcode.ContentSubstitution},
		{c.SourceVersionChange, errcode.SourceVersionChange},
		{c.SourceIDChange, errcode.SourceIDChange},
		{c.SplitConflict, errcode.SplitConflict},
		{c.SchemaMix, errcode.SchemaMix},
		{c.TombstoneHits, errcode.TombstoneHit},
		{c.BenchmarkHits, errcode.BenchmarkHit},
	} {
		if f.n != 0 {
			return f.code
		}
	}
	return ""
}

// docName is a fence document digest for logs, or "none".
func docName(d manifest.Digest) string {
	if d.IsZero() {
		return "none"
	}
	return d.String()
}
