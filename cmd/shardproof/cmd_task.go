package main

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/shardproof/shardproof/coordinator"
	"github.com/shardproof/shardproof/evidence"
	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/objstore"
	"github.com/shardproof/shardproof/publish"
)

func init() {
	var (
		store, plan, scratch string
		index                int64
		wait                 time.Duration
		keepJob              bool
	)
	cmd := &cobra.Command{
		Use:   "task map|reduce|aggregate --plan <store URL>#sha256:… [--index N]",
		Short: "Run one task of a planned verification (what a Slurm array task or Kubernetes pod runs)",
		Long: `task runs one task of the verification job a plan names, and commits its
outputs to the store with conditional creates. It is what every executor
runs: the process executor's children, Slurm array tasks and Kubernetes
Indexed Job pods.

The plan URL is "<store URL>#sha256:<plan digest>"; alternatively give
--store URL and --plan sha256:<plan digest>. The index comes from --index,
else from JOB_COMPLETION_INDEX (Kubernetes Indexed Job), SLURM_ARRAY_TASK_ID
(Slurm job array) or AWS_BATCH_JOB_ARRAY_INDEX; two of them set to
different values are USAGE (the task cannot tell which engine started
it), so the Slurm executor's array tasks pass theirs as --index.

aggregate has one task (index 0, the default); it stores the report,
records it as the plan's (index/plans/<plan>/report.v1, or
report.v1.<n> when those there are not valid), prints its
digest and then deletes the job's shuffle files and task commit records
(--keep-job keeps them). An aggregate of a plan whose report is recorded
prints that report.

aggregate --sign-key FILE (a private key from "shardproof keys generate")
signs the report's evidence and stores the signature beside it, as verify
--sign-key does, so a report made on a cluster engine is signed the same
way; an aggregate of a plan whose report is recorded signs that report as
the store holds it. A FILE that does not load is USAGE before any work;
map and reduce take no key (USAGE when given one; $SHARDPROOF_SIGN_KEY,
which tasks may inherit, is ignored there).

An aggregate holds the job while it aggregates, as verify does: an
aggregate of a plan that another live process holds (a second aggregate
at once, an engine's retry beside one still running, or a verify that
runs the job) is JOB_IN_USE, exit 3, and writes nothing; run again once
that one ended, it prints the report it recorded. One killed on another
machine before it recorded the report holds the job until its hold
record, renewed every minute, is 5 minutes old by the store's clock: a
retry is JOB_IN_USE for up to 5 minutes after the kill, and a retry
after that takes the job over and aggregates. Let the engine retry for
longer than that, or take the job at once with verify --resume PLAN
--take-over.

A task whose commit record exists succeeds at once. A rerun that finds an
output already present checks it is byte-identical (else NONDETERMINISM).
A reduce task starts only when every map task has committed, an aggregate
only when every task has: otherwise TASK_NOT_READY, or, with --wait, after
waiting up to that long for the commits to appear.

Exit status: 0 committed (aggregate: the report is VERIFIED), 1 invalid
input (bad plan or document, NONDETERMINISM: retrying cannot help;
aggregate: the report is stored and INVALID), 2 usage, credentials the
store refuses (STORE_DENIED) or a bucket that does not exist
(NO_SUCH_BUCKET): retrying cannot help either, 3 operational error
(store unreachable, inputs not ready: retrying may help).`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			kind, err := coordinator.ParseKind(args[0])
			if err != nil {
				return err
			}
			var key ed25519.PrivateKey
			if kind == coordinator.KindAggregate {
				// A key that does not load fails now, not after the work.
				if key, err = signKey(cmd); err != nil {
					return err
				}
			} else if cmd.Flags().Changed("sign-key") {
				return errcode.New(errcode.Usage, "%s: --sign-key signs the report: give it to task aggregate", cmd.CommandPath())
			}
			if plan == "" {
				return errcode.New(errcode.Usage, "task: --plan is required")
			}
			// A plan URL names its store; --store only has to agree with
			// it when given on the command line: $SHARDPROOF_STORE, which
			// tasks inherit from the verify that started them (and Slurm
			// passes on), may name another store.
			given := store
			if !cmd.Flags().Changed("store") && strings.Contains(plan, "#") {
				given = ""
			}
			ref, err := coordinator.ParsePlanRef(plan, given)
			if err != nil {
				return err
			}
			idx := int(index)
			if cmd.Flags().Changed("index") && idx < 0 {
				return errcode.New(errcode.Usage, "%s: --index %d: must not be negative", cmd.CommandPath(), idx)
			}
			if kind == coordinator.KindAggregate && idx < 0 {
				idx = 0
			}
			if idx, err = coordinator.TaskIndex(idx, os.Getenv); err != nil {
				return err
			}
			s, err := openJobStore(cmd, ref.Store, scratch)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			j, err := coordinator.Open(ctx, s, ref.Plan)
			if err != nil {
				return err
			}
			if idx >= j.Tasks(kind) {
				return errcode.New(errcode.Usage, "task: %s index %d out of range [0, %d)", kind, idx, j.Tasks(kind))
			}
			var out *coordinator.Outcome
			if kind == coordinator.KindAggregate {
				// The aggregate's commit record is the plan's report
				// record: an aggregate run again (a retried pod, a second
				// command) prints the report the first one stored.
				if out, err = j.Finished(ctx); err != nil {
					return err
				}
			}
			if wait > 0 && out == nil {
				if err := j.WaitReady(ctx, kind, time.Second, wait); err != nil {
					return err
				}
			}
			if kind != coordinator.KindAggregate {
				start := time.Now()
				if err := j.RunTask(ctx, kind, idx, manifest.Execution{}); err != nil {
					return err
				}
				slog.Info("task committed", "kind", string(kind), "index", idx, "plan", ref.Plan.String(),
					"seconds", time.Since(start).Seconds())
				return nil
			}
			if out == nil {
				out, err = j.AggregateTask(ctx, manifest.Execution{Executor: "task"})
			}
			if errcode.Of(err) == errcode.TaskNotReady && wait == 0 && jobGone(ctx, s, ref.Plan) {
				// No commit record at all, and no report recorded.
				return errcode.Wrap(errcode.NotFound, err, "aggregate of plan %s: the job has no task commit records: no task has committed yet (run the map and reduce tasks first), or its files were deleted", ref.Plan)
			}
			if err != nil {
				return err
			}
			rep, d := out.Report, out.ReportDigest
			if !keepJob {
				removeJob(ctx, s, ref.Plan)
			}
			if key != nil {
				if err := publish.SignReport(ctx, s, key, rep, d); err != nil {
					return fmt.Errorf("report %s is stored but not signed: %w", d, err)
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "shardproof: task: report %s signed by %s\n", d, evidence.KeyID(key.Public().(ed25519.PublicKey)))
			}
			fmt.Fprintf(cmd.OutOrStdout(), "verdict %s\nreport %s\n", rep.Verdict, d)
			if rep.Verdict != manifest.Verified {
				return &exitError{status: errcode.ExitInvalid}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&plan, "plan", "", `plan URL "<store URL>#sha256:…", or "sha256:…" with --store`)
	f.StringVar(&store, "store", os.Getenv("SHARDPROOF_STORE"), "object store URL or path (when --plan is a bare digest) (default $SHARDPROOF_STORE)")
	f.StringVar(&scratch, "scratch", "", "store URL or path holding the job's files (jobs/<plan>/) when verify was given --scratch")
	unsetIntVar(f, &index, "index", "task index (default: from JOB_COMPLETION_INDEX, SLURM_ARRAY_TASK_ID or AWS_BATCH_JOB_ARRAY_INDEX)")
	f.BoolVar(&keepJob, "keep-job", false, "aggregate: keep the job's shuffle files and task commit records once the report is stored")
	f.DurationVar(&wait, "wait", 0, "wait up to this long for the earlier phase's commit records (reduce, aggregate)")
	addSignKeyFlag(f, "the report's evidence (aggregate)")
	rootCmd.AddCommand(cmd)
}

// jobGone reports whether the job of plan pd has no task file left
// (its files were removed once its report was stored). Its hold records
// and their clock probe do not count: a removal that cut a renewal at
// its end keeps them, released.
func jobGone(ctx context.Context, s objstore.Store, pd manifest.Digest) bool {
	for _, kind := range []coordinator.Kind{coordinator.KindMap, coordinator.KindReduce} {
		page, err := s.List(ctx, "jobs/"+pd.Hex()+"/"+string(kind)+"/", "", 1)
		if err != nil || len(page.Objects) != 0 {
			return false
		}
	}
	return true
}
