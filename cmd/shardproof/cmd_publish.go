package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"runtime"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/shardproof/shardproof/coordinator"
	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/objstore"
	"github.com/shardproof/shardproof/publish"
	"github.com/shardproof/shardproof/raftgate"
)

// defaultGateURL is --gate's default: $SHARDPROOF_GATE or the embedded
// single node on loopback.
func defaultGateURL() string {
	if u := os.Getenv("SHARDPROOF_GATE"); u != "" {
		return u
	}
	return raftgate.DefaultGateURL
}

// localVerifier runs verify in-process (the coordinator's local executor)
// for publish and recheck, showing progress on stderr as verify does, and
// deletes the job's scratch once the report is stored, as verify does.
func localVerifier(s objstore.Store, parallelism int, stderr io.Writer) publish.VerifyFunc {
	if parallelism <= 0 {
		parallelism = runtime.NumCPU()
	}
	return func(ctx context.Context, root, tombstones, benchmark manifest.Digest) (*manifest.Report, manifest.Digest, error) {
		prog := newVerifyProgress(stderr)
		out, err := coordinator.Verify(ctx, s, coordinator.Options{PlanOptions: coordinator.PlanOptions{
			Root: root, Tombstones: tombstones, Benchmark: benchmark,
			Parallelism: parallelism, Tool: "shardproof " + version,
		}, Progress: prog.update})
		prog.finish()
		if err != nil {
			return nil, manifest.Digest{}, err
		}
		removeJob(ctx, s, out.Plan)
		return out.Report, out.ReportDigest, nil
	}
}

// parseOptionalDigest parses flag value v, which may be empty.
func parseOptionalDigest(cmd *cobra.Command, flag, v string) (manifest.Digest, error) {
	if v == "" {
		return manifest.Digest{}, nil
	}
	d, err := parseDigestValue(v)
	if err != nil {
		return d, errcode.Wrap(errcode.Usage, err, "%s: %s", cmd.CommandPath(), flag)
	}
	return d, nil
}

func init() {
	var (
		store, gateURL, alias, root, tombstones, benchmark, report string
		scratch                                                    string
		expect                                                     uint64
		retain, parallelism                                        int
		asJSON, quiet                                              bool
	)
	cmd := &cobra.Command{
		Use:   "publish --store URL --gate URL --alias NAME --root sha256:… [--expect-generation G]",
		Short: "Verify a release (or reuse its stored report), register it and move an alias to it atomically",
		Long: `publish is the atomic cutover. It verifies the root against its dataset
snapshot and the fence documents (--tombstones, --benchmark), or reuses a
stored report: the one --report names (from 'shardproof verify'), or the
one the gate already holds for the same root at or above the current
fences; registers the release with the gate; and moves the alias to it
with one compare-and-swap on the alias generation.

A candidate that fails verification is registered INVALID and the alias does
not move (exit 1, with the first failure's code). One exception: when the
gate already holds a VERIFIED report of the root and this store's bytes
fail their digests or sizes, the copy is what is bad, not the release:
publish exits with that code and registers nothing, so a damaged or
mistaken --store cannot close the permits of the root's aliases and runs
(nor can a gate that does not answer the read of the root: publish then
exits with the gate's error and registers nothing).
An alias already pointing at the root is reported as published only while
the root still is: a root since found INVALID, or whose permits a fence
advance closed, exits with that code. --expect-generation G
publishes only if the alias is still at generation G (exit 4,
GENERATION_CONFLICT or PUBLISH_CONFLICT otherwise). A publish whose outcome
was lost (exit 5, INDETERMINATE) is safe to run again with the same flags:
the gate returns the first result, and without --expect-generation an alias
already pointing at the root is reported, not published again.

Fence documents must reach the gate's fences (else FENCE_BEHIND, exit 4)
and the tombstoneWatermark and benchmarkFence the release claims (else
WATERMARK_UNCHECKED, exit 1), as verify requires; both are checked before
anything is registered. Each must also be the log the gate's fence of its
kind was advanced with ('gate fence advance' records its prefix digest)
or one that extends it: a log whose entries up to the fence differ
(another log, or history rewritten), or none named while the fence
records a log, is FENCE_LOG_MISMATCH (exit 4) and nothing is registered;
the logs a --report or the gate's report checked are held to the same
rule (the gate's is then not reused), and so are the verified report's
against the fences read again before it is registered; where such a
report does not reach a fence that the gate's watermarks for the release
do, the gate's report or one of its rechecks at or above the fence must
have checked the fence's log. A fence advanced
without a log ("gate fence KIND VALUE", or before command-schema version
4) checks no log. A --report VERIFIED below the claims is refused,
and so is one checked below the watermarks the gate already records for
the release (BAD_INPUT, as gate register refuses it: publish without
--report reuses what the gate holds).

A gate started with --verifier-keys registers a report only with a
signature by a verifier key it trusts (EVIDENCE_UNSIGNED, exit 4,
otherwise; the release stays STAGED): publish sends those stored beside
the report (verify --sign-key), and --sign-key signs it here. It names
the trusted keys that signed the report it registered ("verified by",
and "verifiedBy" with --json).

Exit status: 0 published, 1 INVALID (or WATERMARK_UNCHECKED), 2 usage,
or credentials or a bucket the store refuses (STORE_DENIED,
NO_SUCH_BUCKET), 3 store or gate unreachable, 4 refused by the gate, 5
outcome unknown.`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if alias == "" || root == "" {
				return errcode.New(errcode.Usage, "%s: --alias and --root are required", cmd.CommandPath())
			}
			o := publish.Options{Alias: alias, Retain: retain, ExpectGeneration: expect, HasExpect: cmd.Flags().Changed("expect-generation")}
			var err error
			if o.Root, err = parseOptionalDigest(cmd, "--root", root); err != nil {
				return err
			}
			if o.Tombstones, err = parseOptionalDigest(cmd, "--tombstones", tombstones); err != nil {
				return err
			}
			if o.Benchmark, err = parseOptionalDigest(cmd, "--benchmark", benchmark); err != nil {
				return err
			}
			if o.Report, err = parseOptionalDigest(cmd, "--report", report); err != nil {
				return err
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
			o.Verify = localVerifier(s, parallelism, progressOut(cmd, quiet))
			o.Logger = cmdLogger(cmd.ErrOrStderr(), quiet)
			// The verifier logs through the default logger; -q quiets it too.
			slog.SetDefault(o.Logger)
			out, err := publish.Publish(cmd.Context(), s, g, o)
			if out != nil {
				printPublishOutcome(cmd.OutOrStdout(), out, asJSON, err == nil)
			}
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&store, "store", os.Getenv("SHARDPROOF_STORE"), "object store URL or path (default $SHARDPROOF_STORE)")
	f.StringVar(&scratch, "scratch", "", "store URL or path for the verification's shuffle files and task commit records (as verify --scratch; default: --store)")
	f.StringVar(&gateURL, "gate", defaultGateURL(), "gate URL(s), comma-separated (env SHARDPROOF_GATE)")
	addGateTokenFlag(f)
	f.StringVar(&alias, "alias", "", "alias to move, e.g. pretrain-main")
	f.StringVar(&root, "root", "", "root digest of the release manifest to publish")
	f.Uint64Var(&expect, "expect-generation", 0, "publish only if the alias is at this generation (0: a new alias)")
	f.StringVar(&tombstones, "tombstones", "", "tombstone log digest to verify against")
	f.StringVar(&benchmark, "benchmark", "", "benchmark registry digest to verify against")
	f.StringVar(&report, "report", "", "stored report of this root (from 'shardproof verify') to use instead of verifying again")
	f.IntVar(&retain, "retain", 0, fmt.Sprintf("rollback window of a new alias: the roots of its last N generations, the current one included, are kept (default: the gate's, %d)", raftgate.DefaultRetain))
	f.IntVar(&parallelism, "parallelism", 0, "verify tasks run at once (default: number of CPUs)")
	f.BoolVar(&asJSON, "json", false, "print the outcome as JSON")
	f.BoolVarP(&quiet, "quiet", "q", false, "log warnings only")
	addSignKeyFlag(f, "the report's evidence it registers")
	rootCmd.AddCommand(cmd)
}

func printPublishOutcome(w io.Writer, out *publish.Outcome, asJSON, ok bool) {
	if asJSON {
		type report struct {
			Digest manifest.Digest `json:"digest"`
			Reused bool            `json:"reused"`
			*manifest.Report
		}
		v := struct {
			Published  bool                    `json:"published"`
			Already    bool                    `json:"already"`
			Result     *raftgate.PublishResult `json:"result,omitempty"`
			Report     *report                 `json:"report,omitempty"`
			VerifiedBy []string                `json:"verifiedBy,omitempty"`
		}{Published: ok, Already: out.Already, VerifiedBy: out.VerifiedBy}
		if ok {
			v.Result = &out.Result
		}
		if out.Report != nil {
			v.Report = &report{out.ReportDigest, out.Reused, out.Report}
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.Encode(v)
		return
	}
	if r := out.Report; r != nil {
		how := "verified now"
		if out.Reused {
			how = "stored report reused"
		}
		fmt.Fprintf(w, "verdict   %s (%s)\nreport    %s\n", r.Verdict, how, out.ReportDigest)
		if len(out.VerifiedBy) > 0 {
			fmt.Fprintf(w, "verified by %s\n", strings.Join(out.VerifiedBy, ", "))
		}
		if code := publish.FailureCode(&r.Counts); code != "" {
			for _, code := range slices.Sorted(maps.Keys(r.Examples)) {
				if ex := r.Examples[code]; len(ex) > 0 {
					fmt.Fprintf(w, "  %s e.g. %s\n", code, showID(ex[0]))
				}
			}
			printFailures(w, r, out.ReportDigest)
		}
	}
	if !ok {
		return
	}
	res := out.Result
	if out.Already {
		fmt.Fprintf(w, "alias     %s already at generation %d -> %s (nothing to do)\n", res.Alias, res.Generation, res.Root)
		return
	}
	fmt.Fprintf(w, "published %s generation %d -> %s (permit %s)\n", res.Alias, res.Generation, res.Root, res.Permit)
}

// progressOut is where verify progress goes: stderr, or nowhere with -q.
func progressOut(cmd *cobra.Command, quiet bool) io.Writer {
	if quiet {
		return io.Discard
	}
	return cmd.ErrOrStderr()
}
