package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/publish"
	"github.com/shardproof/shardproof/raftgate"
)

func init() {
	var (
		store, gateURL, alias, tombstones, benchmark string
		scratch                                      string
		roots                                        []string
		parallelism                                  int
		asJSON, quiet, closed, members               bool
	)
	cmd := &cobra.Command{
		Use:   "recheck --store URL --gate URL (--root sha256:… … | --alias NAME | --closed) (--tombstones D | --benchmark D)",
		Short: "Check published roots against new fence documents and renew their permits on zero hits",
		Long: `After 'shardproof gate fence' advanced the tombstone watermark or the
benchmark fence, every permit bound below it is closed: runs on those roots
can no longer admit checkpoints and aliases cannot be rolled back to them.
recheck verifies each root against the new tombstone log or benchmark
registry and records the hits with the gate. With zero hits the gate renews
the root's permits (a run's permit only while the run lives); with any hit
the release becomes INVALID and its permits stay closed, and runs on it
must be cancelled and recreated on a clean release.

--root may be repeated; --alias rechecks the alias's current root; --closed
rechecks every root a fence advance took out of use: those with a closed
permit (runs, the aliases' current generations) and those in an alias's
rollback window that the fences passed, which 'gate rollback' refuses
until they are rechecked.
A full recheck is a verification: a release that claims a tombstoneWatermark
and a benchmarkFence needs documents reaching both (WATERMARK_UNCHECKED
otherwise), as verify does; each document given is recorded. Each must be
the log the gate's fence of its kind was advanced with, or extend it
(FENCE_LOG_MISMATCH, exit 4, before any work: its zero hits would renew
permits the fence's log closed), when the gate records one.

--members counts the hits in the member files of the snapshot that the
gate's VERIFIED report binds each root to, instead of verifying the release
again: the report proved the release holds exactly the snapshot's tuples,
so their hits are the same, and the member files are the tuple columns
only (about a seventh of the bytes of a release of ~1 KB records, with no
content to decompress and hash). It re-proves nothing about the release's
own bytes, and a member that no longer reads as the snapshot says fails the
recheck. It stores a recheck report (training.shard.recheck.v1) where a full
recheck stores a verification report.

A root whose release stays checked below the other fence after the
recheck (a recheck of tombstones while the benchmark fence has passed it)
keeps its permits closed: that is FENCE_BEHIND, naming the document
still to recheck it with, not "renewed".

A gate started with --verifier-keys records a recheck only with a
signature by a verifier key it trusts (EVIDENCE_UNSIGNED, exit 4,
otherwise; the report is stored, and gate recheck --sign-key can record
it later): --sign-key signs each recheck and stores the signatures.
A root's line names the trusted keys that signed its rechecks
("verified by", and "verifiedBy" with --json).

Exit status: 0 every root renewed (its release satisfies both fences),
1 a root has hits or no longer verifies (TOMBSTONE_HIT, BENCHMARK_HIT, …)
or its claims need other documents (WATERMARK_UNCHECKED), 2 usage, or
credentials or a bucket the store refuses (STORE_DENIED, NO_SUCH_BUCKET),
3 store or gate unreachable, 4 refused by the gate, a document that is
not the fence's log (FENCE_LOG_MISMATCH), or still behind the other fence
(FENCE_BEHIND).`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			o := publish.RecheckOptions{}
			var err error
			if o.Tombstones, err = parseOptionalDigest(cmd, "--tombstones", tombstones); err != nil {
				return err
			}
			if o.Benchmark, err = parseOptionalDigest(cmd, "--benchmark", benchmark); err != nil {
				return err
			}
			if o.Tombstones.IsZero() && o.Benchmark.IsZero() {
				return errcode.New(errcode.Usage, "%s: --tombstones and/or --benchmark is required", cmd.CommandPath())
			}
			if len(roots) == 0 && alias == "" && !closed {
				return errcode.New(errcode.Usage, "%s: --root, --alias or --closed is required", cmd.CommandPath())
			}
			var ds []manifest.Digest
			for _, r := range roots {
				d, err := parseOptionalDigest(cmd, "--root", r)
				if err != nil {
					return err
				}
				ds = append(ds, d)
			}
			if o.SignKey, err = signKey(cmd); err != nil {
				return err
			}
			s, err := openJobStore(cmd, store, scratch)
			if err != nil {
				return err
			}
			g := newGateClient(gateURL)
			defer g.Close()
			if alias != "" {
				al, err := g.Alias(cmd.Context(), alias)
				if err != nil {
					return err
				}
				ds = append(ds, al.Root)
			}
			if closed {
				cr, err := publish.ClosedRoots(cmd.Context(), g)
				if err != nil {
					return err
				}
				ds = append(ds, cr...)
			}
			seen := map[manifest.Digest]bool{}
			ds = slices.DeleteFunc(ds, func(d manifest.Digest) bool {
				dup := seen[d]
				seen[d] = true
				return dup
			})
			o.Verify = localVerifier(s, parallelism, progressOut(cmd, quiet))
			o.Members, o.Parallelism, o.Tool = members, parallelism, "shardproof "+version
			o.Logger = cmdLogger(cmd.ErrOrStderr(), quiet)
			// The verifier logs through the default logger; -q quiets it too.
			slog.SetDefault(o.Logger)
			w := cmd.OutOrStdout()
			var first error
			outs := []recheckJSON{} // --json prints [], not null, for no root
			for _, d := range ds {
				o.Root = d
				out, err := publish.Recheck(cmd.Context(), s, g, o)
				if asJSON {
					outs = append(outs, newRecheckJSON(d, out, err))
				} else {
					printRecheckOutcome(w, d, out, err)
				}
				if err != nil && first == nil {
					first = err
				}
			}
			if asJSON {
				enc := json.NewEncoder(w)
				enc.SetIndent("", "  ")
				enc.Encode(outs)
			}
			return first
		},
	}
	f := cmd.Flags()
	f.StringVar(&store, "store", os.Getenv("SHARDPROOF_STORE"), "object store URL or path (default $SHARDPROOF_STORE)")
	f.StringVar(&scratch, "scratch", "", "store URL or path for the verification's shuffle files and task commit records (as verify --scratch; default: --store)")
	f.StringVar(&gateURL, "gate", defaultGateURL(), "gate URL(s), comma-separated (env SHARDPROOF_GATE)")
	addGateTokenFlag(f)
	f.StringArrayVar(&roots, "root", nil, "root digest to recheck (repeatable)")
	f.StringVar(&alias, "alias", "", "recheck this alias's current root")
	f.BoolVar(&closed, "closed", false, "recheck every root that has a permit closed by a fence advance, and every root of a rollback window the fences passed")
	f.StringVar(&tombstones, "tombstones", "", "new tombstone log digest")
	f.StringVar(&benchmark, "benchmark", "", "new benchmark registry digest")
	f.IntVar(&parallelism, "parallelism", 0, "verify tasks (with --members: member files) run at once (default: number of CPUs)")
	f.BoolVar(&members, "members", false, "count hits in the snapshot's member files, which the gate's VERIFIED report binds the root to, instead of verifying the release again")
	f.BoolVar(&asJSON, "json", false, "print the outcomes as JSON")
	f.BoolVarP(&quiet, "quiet", "q", false, "log warnings only")
	addSignKeyFlag(f, "each recheck it records (and a full recheck's verification report)")
	rootCmd.AddCommand(cmd)
}

// recheckJSON is one root's outcome in recheck --json: every root asked
// for has one, in order, renewed or with the code and message of what
// stopped it (those of the text form's "not rechecked" included); hits
// and reopened are always there, empty for a root not rechecked, and the
// report digest, report and release once a recheck ran.
type recheckJSON struct {
	Root         manifest.Digest         `json:"root"`
	Renewed      bool                    `json:"renewed"`
	Code         errcode.Code            `json:"code,omitempty"`
	Message      string                  `json:"message,omitempty"`
	ReportDigest manifest.Digest         `json:"reportDigest,omitzero"`
	Hits         map[string]int64        `json:"hits"`
	Reopened     []string                `json:"reopened"`
	Report       *manifest.Report        `json:"report,omitempty"`
	Members      *manifest.RecheckReport `json:"members,omitempty"`
	Release      *raftgate.Release       `json:"release,omitempty"`
	VerifiedBy   []string                `json:"verifiedBy,omitempty"`
}

func newRecheckJSON(root manifest.Digest, out *publish.RecheckOutcome, err error) recheckJSON {
	j := recheckJSON{Root: root, Renewed: err == nil, Hits: map[string]int64{}, Reopened: []string{}}
	if err != nil {
		j.Code, j.Message = codedMessage(err)
	}
	if out == nil {
		return j
	}
	j.ReportDigest, j.Report, j.Members = out.ReportDigest, out.Report, out.Members
	if out.Hits != nil {
		j.Hits = out.Hits
	}
	if out.Reopened != nil {
		j.Reopened = out.Reopened
	}
	if !out.Release.Root.IsZero() {
		// Set once the gate recorded a recheck.
		j.Release = &out.Release
	}
	j.VerifiedBy = out.VerifiedBy
	return j
}

func printRecheckOutcome(w io.Writer, root manifest.Digest, out *publish.RecheckOutcome, err error) {
	if out == nil {
		fmt.Fprintf(w, "%s  not rechecked: %s\n", root, errcode.Of(err))
		return
	}
	verdict := "renewed"
	if err != nil {
		verdict = string(errcode.Of(err))
	}
	var hits []string
	for _, k := range slices.Sorted(maps.Keys(out.Hits)) {
		hits = append(hits, fmt.Sprintf("%s=%d", k, out.Hits[k]))
	}
	reopened := "none"
	if len(out.Reopened) > 0 {
		reopened = strings.Join(out.Reopened, ",")
	}
	verified := ""
	if len(out.VerifiedBy) > 0 {
		verified = "  verified by " + strings.Join(out.VerifiedBy, ", ")
	}
	fmt.Fprintf(w, "%s  %s  hits %s  report %s  reopened %s%s\n", root, verdict, strings.Join(hits, " "), out.ReportDigest, reopened, verified)
}

// `gate fence advance` lives here, next to recheck, because the two are
// one workflow: advance the fence to a new document's watermark (closing
// every permit below it), then recheck the roots that should stay usable.
// It is added under the gate's `fence` command, registered by
// cmd_gate.go, whose init runs first (files initialize in name order).
func init() {
	var fence *cobra.Command
	for _, c := range rootCmd.Commands() {
		if c.Name() == "gate" {
			for _, sub := range c.Commands() {
				if sub.Name() == "fence" {
					fence = sub
				}
			}
		}
	}
	if fence == nil {
		panic("cmd_recheck.go: no gate fence command registered")
	}
	var store, tombstones, benchmark string
	cmd := &cobra.Command{
		Use:   "advance --store URL (--tombstones D | --benchmark D)",
		Short: "Advance a fence to the watermark of a tombstone log or benchmark registry",
		Long: `advance reads the tombstone log (--tombstones) or benchmark registry
(--benchmark) by digest, strictly decoded, and advances the gate's fence to
its watermark (the highest seq), recording the log's prefix digest at
that seq (FORMATS.md) beside the fence: publish, gate register and
recheck then refuse a log whose entries up to the fence differ
(FENCE_LOG_MISMATCH). The log must extend the one the fence was advanced
with: its prefix digest at the current fence must be the gate's
(FENCE_LOG_MISMATCH otherwise, nothing changed). At the fence's current
value it records the log when the fence has none (one advanced before
command-schema version 4, or by "gate fence KIND VALUE"). Recording a log
takes the gate cluster's command-schema version 4: during a rolling
upgrade from an earlier build the advance is CLUSTER_VERSION and changes
nothing ("gate fence KIND VALUE" still advances, without a log). Every
open permit bound below it is closed:
runs on those roots can no longer admit checkpoints, and rollbacks to them
are refused, until 'shardproof recheck' finds zero hits at that watermark.
Whenever roots are left to recheck (closed permits', or those of an
alias's rollback window the fence passed, even if no permit closed), it
prints how many and the 'recheck --closed' that brings them back, with
the documents of the fences they are behind (the other kind's too, for
roots an earlier advance of it left behind) and the --store and --gate
flags given here, so it runs as printed; a
failure to list them is a warning on stderr, not the advance's error.
A root already rechecked at or above it, before the advance, keeps its
permits open (recheck first, then advance, and its runs go on). Keeping
them open takes the gate cluster's command-schema version 1: during a
rolling upgrade from a build before it, such an advance is refused
(CLUSTER_VERSION) and changes nothing; finish the upgrade ("gate
status" shows the version rise) and send it again.

Exit status: 0 advanced (or already there), 1 the document is not a
tombstone log or benchmark registry (BAD_DOCUMENT), 2 usage, or
credentials or a bucket the store refuses (STORE_DENIED, NO_SUCH_BUCKET),
3 store or gate unreachable, or CLUSTER_VERSION, 4 refused
(FENCE_REGRESSION: the fence is already higher; FENCE_LOG_MISMATCH: the
log does not extend the fence's).`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if (tombstones == "") == (benchmark == "") {
				return errcode.New(errcode.Usage, "%s: give exactly one of --tombstones and --benchmark", cmd.CommandPath())
			}
			kind, schema, flag, val := raftgate.FenceTombstone, manifest.TombstonesSchema, "--tombstones", tombstones
			if benchmark != "" {
				kind, schema, flag, val = raftgate.FenceBenchmark, manifest.BenchmarkSchema, "--benchmark", benchmark
			}
			d, err := parseOptionalDigest(cmd, flag, val)
			if err != nil {
				return err
			}
			s, err := openStore(cmd, store)
			if err != nil {
				return err
			}
			l, err := publish.LoadFenceLog(cmd.Context(), s, d, schema)
			if err != nil {
				return err
			}
			g := gateClient()
			defer g.Close()
			prefix, err := fenceLogPrefix(cmd.Context(), g, kind, l)
			if err != nil {
				return fmt.Errorf("%s %s: %w", schema, d, err)
			}
			r, err := g.AdvanceFenceLog(cmd.Context(), kind, l.Watermark(), prefix)
			if err != nil {
				return err
			}
			return printResult(cmd, r, func(w io.Writer) {
				fmt.Fprintf(w, "%s fence %d (from %s, %d entries, prefix digest %s); ", kind, l.Watermark(), d, len(l.Entries), prefix)
				printPermitsMoved(w, r)
				printRecheckHint(cmd, g, kind, l.Watermark(), d.String())
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&store, "store", os.Getenv("SHARDPROOF_STORE"), "object store URL or path holding the fence document (default $SHARDPROOF_STORE)")
	f.StringVar(&tombstones, "tombstones", "", "tombstone log digest")
	f.StringVar(&benchmark, "benchmark", "", "benchmark registry digest")
	fence.AddCommand(cmd)
}

// fenceLogPrefix returns the prefix digest of l at its watermark, which
// the advance records beside the fence (zero for an empty log: at 0
// there is nothing to tell logs apart by), after checking that l extends
// the log the gate's fence of kind was advanced with: its prefix digest
// at the current fence must be the one the gate records
// (FENCE_LOG_MISMATCH otherwise: the log rewrites entries the fence
// already stands for). A fence with no log recorded, or at 0, checks
// nothing; a log below the fence is left to the gate (FENCE_REGRESSION).
// The check reads the fences before the advance: an advance by another
// client in between is not seen.
func fenceLogPrefix(ctx context.Context, g *raftgate.Client, kind string, l *manifest.FenceLog) (manifest.Digest, error) {
	var none manifest.Digest
	f, err := g.Fences(ctx)
	if err != nil {
		return none, err
	}
	cur, curLog := f.Tombstone, f.TombstoneLog
	if kind == raftgate.FenceBenchmark {
		cur, curLog = f.Benchmark, f.BenchmarkLog
	}
	if !curLog.IsZero() && cur > 0 && l.Watermark() >= cur {
		p, err := l.PrefixDigest(cur)
		if err != nil {
			return none, err
		}
		if p != curLog {
			return none, errcode.New(errcode.FenceLogMismatch, "its prefix digest at the gate's %s fence %d is %s, and the fence was advanced with a log of prefix digest %s: an entry at or below %d differs, so it does not extend that log (append-only); nothing changed",
				kind, cur, p, curLog, cur)
		}
	}
	if l.Watermark() == 0 {
		return none, nil
	}
	return l.PrefixDigest(l.Watermark())
}

// printRecheckHint ends a fence advance's answer with the recheck that
// brings back what the fences now leave out of use, whenever
// publish.ClosedRootsBehind names a root behind a fence: the closed
// permits' roots, and the roots of aliases' rollback windows the fences
// passed. The latter lose no permit, so an advance that closes nothing
// (the current roots were rechecked before it) can still leave every
// earlier generation ROLLBACK_INELIGIBLE. The recheck names the fence
// documents of the fences those roots are behind, which need not be the
// one just advanced (a root rechecked for tombstones and left behind an
// earlier benchmark advance): kind's as doc (the document's digest, or
// "" for a placeholder), the other's as a placeholder at its fence. The
// advance has happened by now: a failure to list the roots is a warning
// on stderr, never the command's error. The recheck repeats the store
// and gate flags the advance was given on its command line, so it can be
// run as printed; those it took from the environment it takes again.
func printRecheckHint(cmd *cobra.Command, g publish.PermitLister, kind string, value uint64, doc string) {
	w := cmd.OutOrStdout()
	conn := givenConnectionFlags(cmd)
	docFlag := func(k string, at uint64) string {
		flag, what := "--tombstones", "a tombstone log"
		if k == raftgate.FenceBenchmark {
			flag, what = "--benchmark", "a benchmark registry"
		}
		if k == kind && doc != "" {
			return flag + " " + doc
		}
		return fmt.Sprintf("%s DIGEST (%s whose watermark is at least %d)", flag, what, at)
	}
	cr, f, err := publish.ClosedRootsBehind(cmd.Context(), g)
	if err != nil {
		fmt.Fprintf(cmd.ErrOrStderr(), "warning: the fence advanced, but the roots it left to recheck could not be listed (%s: %v); recheck them with: shardproof recheck --closed %s%s\n",
			errcode.Of(err), err, docFlag(kind, value), conn)
		return
	}
	roots, behind := 0, map[string]bool{}
	for _, r := range cr {
		if len(r.Behind) > 0 {
			roots++
		}
		for _, k := range r.Behind {
			behind[k] = true
		}
	}
	if roots == 0 {
		return
	}
	var flags []string
	if behind[raftgate.FenceTombstone] {
		flags = append(flags, docFlag(raftgate.FenceTombstone, f.Tombstone))
	}
	if behind[raftgate.FenceBenchmark] {
		flags = append(flags, docFlag(raftgate.FenceBenchmark, f.Benchmark))
	}
	fmt.Fprintf(w, "%d roots to recheck (closed permits, rollback windows behind the fences); recheck with: shardproof recheck --closed %s%s\n", roots, strings.Join(flags, " "), conn)
}

// hintFlags are the flags of a fence advance that a recheck needs as
// well: where the fence documents and releases are, and which gate.
var hintFlags = []string{"store", "gate", "gate-token-file", "gate-ca"}

// givenConnectionFlags is " --name value" for each of hintFlags set on
// cmd's command line, the value quoted for a POSIX shell when it holds
// anything but plain path and URL characters (an S3 URL's ? and &).
func givenConnectionFlags(cmd *cobra.Command) string {
	var b strings.Builder
	for _, name := range hintFlags {
		f := cmd.Flags().Lookup(name)
		if f == nil || !f.Changed {
			continue
		}
		fmt.Fprintf(&b, " --%s %s", name, shellWord(f.Value.String()))
	}
	return b.String()
}

// shellWord is s as one word of a POSIX shell command line: s itself when
// it holds only characters no shell treats specially, else single-quoted.
func shellWord(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_@%+=:,./-") == "" {
		return s
	}
	return shellQuote(s)
}
