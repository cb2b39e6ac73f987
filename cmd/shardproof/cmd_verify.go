package main

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/shardproof/shardproof/coordinator"
	"github.com/shardproof/shardproof/evidence"
	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/objstore"
	"github.com/shardproof/shardproof/publish"
	"github.com/shardproof/shardproof/shuffle"
)

func init() {
	var (
		store, root, snapshot, tombstones, benchmark string
		resume, scratch                              string
		mapTasks, reducers, parallelism, fanIn       int
		asJSON, mapMembers, readAllMembers, takeOver bool
		engine                                       executorFlags
		shuffleComp                                  shuffle.Compression
		shuffleSum                                   shuffle.Checksum
	)
	cmd := &cobra.Command{
		Use:   "verify --store URL --root sha256:…",
		Short: "Verify a release against its dataset snapshot (sharded diff) and store the report",
		Long: `verify maps every shard of the release and every member file of the
snapshot to tuples, diffs them bucket by bucket, recomputes both tuple roots,
and stores a content-addressed report bound to the root digest.

A release's tombstoneWatermark and benchmarkFence claim that it holds no
sample deleted, and no benchmark item listed, up to those seqs: it is
checked against a tombstone log (--tombstones) and benchmark registry
(--benchmark) that reach its claims, or not at all (WATERMARK_UNCHECKED
before any byte is read; a claim of 0 needs no document).

--sign-key FILE (a private key from "shardproof keys generate") signs
what a gate register of the report sends (root, shards, report digest,
verdict, snapshot, watermarks, hits) and stores the signature beside it
(index/evidence/…): a gate started with --verifier-keys takes the report
from publish or gate register only with a signature by a key it trusts.
A FILE that does not load is USAGE before any work. With --executor
kubernetes --emit and no --submit, the task aggregate line it prints
carries --sign-key, and that aggregate signs the report it makes.

Exit status: 0 VERIFIED, 1 INVALID (a report is stored), an input
document that is not what it is given as (BAD_DOCUMENT, no report),
fence documents below the release's claims (WATERMARK_UNCHECKED, no
report) or a task whose output differs from its committed one
(NONDETERMINISM, no report), 2 usage, credentials the store refuses
(STORE_DENIED) or a bucket that does not exist (NO_SUCH_BUCKET), 3
operational error (JOB_IN_USE included).`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := engine.checkApplies(cmd); err != nil {
				return err
			}
			if err := checkMetricsFile(cmd); err != nil {
				return err
			}
			// A key that does not load fails now, not after the work.
			if _, err := signKey(cmd); err != nil {
				return err
			}
			if takeOver && resume == "" {
				return errcode.New(errcode.Usage, "verify: --take-over takes the job of the plan given with --resume from its holder; give --resume PLAN")
			}
			if resume != "" {
				if err := resumeTakesPlanFlags(cmd); err != nil {
					return err
				}
			}
			if engine.executor != "local" {
				return engine.run(cmd, resume)
			}
			if resume != "" {
				return resumeVerify(cmd, store, scratch, resume, parallelism, asJSON)
			}
			if !shuffleComp.Valid() {
				return errcode.New(errcode.Usage, "verify: --shuffle-compression %q: want zstd or none", shuffleComp)
			}
			if !shuffleSum.Valid() {
				return errcode.New(errcode.Usage, "verify: --shuffle-checksum %q: want sha256 or xxh64", shuffleSum)
			}
			opts := coordinator.Options{PlanOptions: coordinator.PlanOptions{
				MapTasks: mapTasks, Reducers: reducers, Parallelism: parallelism,
				Tool: "shardproof " + version, ShuffleCompression: shuffleComp, ShuffleChecksum: shuffleSum,
				MapMembers: mapMembers, ReadAllMembers: readAllMembers, ReduceFanIn: fanIn,
			}}
			for _, f := range []struct {
				flag, val string
				dst       *manifest.Digest
				required  bool
			}{
				{"--root", root, &opts.Root, true},
				{"--snapshot", snapshot, &opts.Snapshot, false},
				{"--tombstones", tombstones, &opts.Tombstones, false},
				{"--benchmark", benchmark, &opts.Benchmark, false},
			} {
				if f.val == "" {
					if f.required {
						return errcode.New(errcode.Usage, "verify: %s is required", f.flag)
					}
					continue
				}
				d, err := parseDigestValue(f.val)
				if err != nil {
					return errcode.Wrap(errcode.Usage, err, "verify: %s", f.flag)
				}
				*f.dst = d
			}
			if opts.Parallelism <= 0 {
				opts.Parallelism = runtime.NumCPU()
			}
			s, err := openJobStore(cmd, store, scratch)
			if err != nil {
				return err
			}
			prog := newVerifyProgress(cmd.ErrOrStderr())
			opts.Progress = prog.update
			out, err := coordinator.Verify(cmd.Context(), s, opts)
			prog.finish()
			if err != nil {
				resumeHint(cmd, store, scratch, err)
				return err
			}
			return finishVerify(cmd, s, out, asJSON)
		},
	}
	f := cmd.Flags()
	f.StringVar(&store, "store", os.Getenv("SHARDPROOF_STORE"), "object store URL or path (default $SHARDPROOF_STORE)")
	f.StringVar(&root, "root", "", "root digest of the release manifest to verify")
	f.StringVar(&snapshot, "snapshot", "", "snapshot manifest digest (default: the manifest's datasetSnapshot); a report against another snapshot is an audit only: publish --report and gate register refuse it")
	f.StringVar(&tombstones, "tombstones", "", "tombstone log digest to check against; its watermark must reach the release's tombstoneWatermark")
	f.StringVar(&benchmark, "benchmark", "", "benchmark registry digest to check against; its watermark must reach the release's benchmarkFence")
	f.IntVar(&mapTasks, "map-tasks", 0, "number of map tasks (default: derived from inputs and parallelism); at least as many as keep each task's commit record, a result per input, under the 64 MiB document cap (about 74,000 inputs a task), or USAGE naming that count")
	f.IntVar(&reducers, "reducers", 0, "number of reduce tasks (default: 2 × parallelism)")
	f.IntVar(&fanIn, "reduce-fan-in", 0, fmt.Sprintf("the most shuffle files a reduce task merges at once (one per map task); a reduce task with more merges them a group at a time first, into files of its own under jobs/<plan>/merge/, which bounds its open files and memory at the cost of one more write and read of its rows (default %d; at least 2)", coordinator.DefaultReduceFanIn))
	f.IntVar(&parallelism, "parallelism", 0, "tasks run at once by the local and process executors; the default map-task and reducer counts derive from it (default: number of CPUs)")
	f.BoolVar(&asJSON, "json", false, "print the report document instead of a summary")
	f.StringVar((*string)(&shuffleComp), "shuffle-compression", "", "shuffle files: zstd or none (default: none for the local executor, whose reducers would otherwise hold a zstd decoder per map task; zstd for the others)")
	f.StringVar((*string)(&shuffleSum), "shuffle-checksum", "", "what map tasks' commit records check shuffle files with: sha256 or xxh64 (default: xxh64 for the local executor, whose shuffle files only this process writes and reads back within seconds; the other executors always use sha256)")
	f.BoolVar(&mapMembers, "map-members", false, "map every snapshot member in map tasks and shuffle its tuples; by default, members whose declared bucket ranges allow it are read by the reducers directly")
	f.BoolVar(&readAllMembers, "read-all-members", false, "read every snapshot member, even those whose buckets all match the snapshot's leaf index (index/snapshots/<hex>/leaves.v1, written by stage and by a verify that read every member): a full audit of the snapshot's files too")
	f.Bool("keep-job", false, "keep the job's shuffle files and task commit records (jobs/<plan>/ in the store, or in --scratch) after the report is stored; by default they are deleted")
	f.StringVar(&scratch, "scratch", "", "store URL or path for the job's shuffle files and task commit records (jobs/<plan>/), created if missing; plans, reports and inputs stay in --store (default: --store). A local directory keeps an S3 release's shuffle off the network")
	f.String("metrics-file", "", "also write the verification's figures (verified shard ratio, failures by class, throughput, decompression ratio; labelled by root digest) to this file in Prometheus text format, for node_exporter's textfile collector; a verify that ends with an error and no verdict writes shardproof_verify_error{root,code} instead")
	f.StringVar(&resume, "resume", "", "finish an interrupted verification with any executor: the plan digest it logged (committed tasks are reused, and a map task whose committed shuffle file is damaged or gone, or whose commit record does not decode, runs again, at most 3 runs a task; the root, snapshot, fences and the plan's shape come from the plan, and giving --root, --reducers or another flag the plan records is USAGE; a finished one prints its stored report; one another process runs is JOB_IN_USE)")
	f.BoolVar(&takeOver, "take-over", false, fmt.Sprintf("with --resume: take the job from its holder at once, for a holder known to be dead whose machine is down (one on another machine is otherwise taken for gone only %s after its last renewal); the holder displaced is printed, and one running on this machine is still JOB_IN_USE", coordinator.HoldStaleAfter))
	addSignKeyFlag(f, "the report's evidence (what gate register sends: root, shards, digest, verdict, snapshot, watermarks, hits)")
	engine.addFlags(f)
	// A verification that ends with an error and no verdict still leaves
	// its --metrics-file saying so (a verdict's path wrote the report's
	// figures already, and returns the verdict's exit status). --emit
	// without --submit runs nothing and refuses --metrics-file: that
	// refusal, like any, leaves the file as it was.
	run := cmd.RunE
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		err := run(cmd, args)
		var verdict *exitError
		path, _ := cmd.Flags().GetString("metrics-file")
		emitOnly := engine.executor == "kubernetes" && !engine.submit
		if err == nil || path == "" || emitOnly || errors.As(err, &verdict) || errcode.Of(err) == errcode.Usage && checkMetricsFile(cmd) != nil {
			return err
		}
		if werr := writeVerifyErrorMetrics(path, root, err); werr != nil {
			slog.Error("metrics file not written", "path", path, "code", string(errcode.Of(werr)), "err", werr)
		}
		return err
	}
	rootCmd.AddCommand(cmd)
}

// countLines pairs each failure counter with its code, in report order.
func countLines(c *manifest.Counts) []struct {
	code errcode.Code
	n    int64
} {
	return []struct {
		code errcode.Code
		n    int64
	}{
		{errcode.DigestMismatch, c.DigestFailures},
		{errcode.SizeMismatch, c.SizeMismatches},
		{errcode.VersionMissing, c.VersionMissing},
		{errcode.LogicalMismatch, c.LogicalMismatches},
		{errcode.CountMismatch, c.CountMismatches},
		{errcode.DecodeError, c.DecodeErrors},
		{errcode.SchemaMismatch, c.SchemaMismatches},
		{errcode.TupleRootMismatch, c.TupleRootMismatches},
		{errcode.MissingMember, c.Missing},
		{errcode.ExtraMember, c.Extra},
		{errcode.DuplicateMember, c.Duplicate},
		{errcode.ContentSubstitution, c.ContentSubstitution},
		{errcode.SourceVersionChange, c.SourceVersionChange},
		{errcode.SourceIDChange, c.SourceIDChange},
		{errcode.SplitConflict, c.SplitConflict},
		{errcode.SchemaMix, c.SchemaMix},
		{errcode.TombstoneHit, c.TombstoneHits},
		{errcode.BenchmarkHit, c.BenchmarkHits},
	}
}

func printSummary(w io.Writer, out *coordinator.Outcome) {
	r := out.Report
	c := &r.Counts
	fmt.Fprintf(w, "verdict  %s\n", r.Verdict)
	fmt.Fprintf(w, "root     %s\n", r.Root)
	fmt.Fprintf(w, "snapshot %s\n", r.DatasetSnapshot)
	fmt.Fprintf(w, "shards   %d of %d verified\n", c.ShardsVerified, c.Shards)
	fmt.Fprintf(w, "records  %d in release, %d in snapshot\n", c.Records, c.SnapshotRecords)
	if e := &r.Execution; e.SnapshotMembersSkipped > 0 {
		fmt.Fprintf(w, "members  %d read, %d skipped: their buckets match the snapshot's leaf index\n", e.SnapshotMembersRead, e.SnapshotMembersSkipped)
	}
	for _, l := range countLines(c) {
		if l.n == 0 {
			continue
		}
		fmt.Fprintf(w, "  %-22s %d", l.code, l.n)
		if ex := r.Examples[string(l.code)]; len(ex) > 0 {
			fmt.Fprintf(w, "  e.g. %s", showID(ex[0]))
			if len(ex) > 1 {
				fmt.Fprintf(w, " (+%d more listed)", len(ex)-1)
			}
		}
		fmt.Fprintln(w)
	}
	printFailures(w, r, out.ReportDigest)
	e := &r.Execution
	fmt.Fprintf(w, "speed    %.0f records/s, %.1f MB/s stored, decompression ratio %.2f (%d map tasks, %d reducers, %.2fs)\n",
		e.RecordsPerSecond, e.StoredMBPerSec, r.Stats.DecompressionRatio, e.MapTasks, e.Reducers, e.Seconds)
	fmt.Fprintf(w, "report %s\n", out.ReportDigest)
}

// showID returns a sampleId for a line of text output: as it is when it
// is all printable characters and no space, quoted otherwise. A sampleId
// is any valid UTF-8, so one could otherwise add a line of its own to
// the output or send a terminal an escape sequence.
func showID(id string) string {
	if id != "" && !strings.ContainsFunc(id, func(r rune) bool { return !unicode.IsPrint(r) || unicode.IsSpace(r) }) {
		return id
	}
	return strconv.Quote(id)
}

// summaryFailures is the most failure lines the summaries of verify and
// publish print: the report lists up to manifest.MaxReportFailures, and a
// summary of 4,000 corrupted shards printed 8,000 lines, the counts and
// the verdict lost above them.
const summaryFailures = 20

// printFailures prints the first summaryFailures failures of r, one line
// each, then how many more r, stored with digest d, lists or counts.
func printFailures(w io.Writer, r *manifest.Report, d manifest.Digest) {
	shown := r.Failures[:min(len(r.Failures), summaryFailures)]
	for _, f := range shown {
		fmt.Fprintln(w, showFailure(f))
	}
	if more := int64(len(r.Failures)-len(shown)) + r.FailuresOmitted; more > 0 {
		fmt.Fprintf(w, "  … and %d more failures (report %s lists %d of %d)\n", more, d, len(r.Failures), int64(len(r.Failures))+r.FailuresOmitted)
	}
}

// showFailure returns a shard failure as one line of text output. A
// shard's path comes from the release's manifest and a detail can hold
// names from a file's own schema (a SCHEMA_MISMATCH lists the fields it
// found), so both are shown with every character that is not printable
// escaped as Go escapes it: such a name can neither add a line of its
// own nor send a terminal an escape sequence.
// A failure without a detail (a report may hold one) ends with its code.
func showFailure(f manifest.ShardFailure) string {
	line := fmt.Sprintf("  %s %s: %s", escapeUnprintable(f.Side), showID(f.Shard), escapeUnprintable(f.Code))
	if f.Detail != "" {
		line += ": " + showText(f.Detail)
	}
	return line
}

// showText returns text a stored document or the gate holds (a
// failure's detail, a run's fail reason) for the end of a line of text
// output: every character that is not printable escaped
// (escapeUnprintable), and quoted when it ends in a space, which the
// line would otherwise end in, as though cut short.
func showText(s string) string {
	if strings.HasSuffix(s, " ") {
		return strconv.Quote(s)
	}
	return escapeUnprintable(s)
}

// escapeUnprintable returns s with every rune that is not printable (a
// space is) written as a Go escape (\n, \x1b, \u2028, …), and every byte
// that is not valid UTF-8 as \xNN.
func escapeUnprintable(s string) string {
	if utf8.ValidString(s) && !strings.ContainsFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, "\\x%02x", s[i])
		case unicode.IsPrint(r):
			b.WriteString(s[i : i+n])
		default:
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
		}
		i += n
	}
	return b.String()
}

// verifyProgress shows mapped files on a terminal as a progress bar, and
// otherwise as at most one plain line per second on stderr (a log record
// with --log-format json), at --log-level info or below.
type verifyProgress struct {
	w       io.Writer
	bar     *progressbar.ProgressBar
	start   time.Time
	last    time.Time
	records int64
	stored  int64
	skipped int
}

func newVerifyProgress(w io.Writer) *verifyProgress {
	p := &verifyProgress{w: w, start: time.Now()}
	if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		p.bar = progressbar.NewOptions(-1,
			progressbar.OptionSetWriter(w),
			progressbar.OptionSetDescription("mapping"),
			progressbar.OptionShowCount(),
			progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionClearOnFinish(),
		)
	}
	return p
}

func (p *verifyProgress) update(pr coordinator.Progress) {
	p.records += pr.Result.Records
	p.stored += pr.Result.StoredBytes
	if pr.Result.Skipped {
		p.skipped++
	}
	secs := max(time.Since(p.start).Seconds(), 1e-3)
	// A skipped member is checked (its buckets match the snapshot's leaf
	// index) without being read: it counts as done, so the total stays
	// the number of files from the first line to the last.
	desc := fmt.Sprintf("checked %d/%d files, %.0f records/s, %.1f MB/s", pr.Done, pr.Total,
		float64(p.records)/secs, float64(p.stored)/1e6/secs)
	if p.skipped > 0 {
		desc += fmt.Sprintf(", %d snapshot members skipped (leaf index)", p.skipped)
	}
	if p.bar != nil {
		if p.bar.GetMax() != pr.Total {
			p.bar.ChangeMax(pr.Total)
		}
		p.bar.Describe(desc)
		p.bar.Set(pr.Done)
		return
	}
	if logSettings.level > slog.LevelInfo {
		// Off a terminal, progress is an info record in either format:
		// --log-level warn leaves it out of text logs as out of JSON.
		return
	}
	if time.Since(p.last) >= time.Second || pr.Done == pr.Total {
		p.last = time.Now()
		if logSettings.json {
			// A collector parsing JSON gets progress as log records.
			slog.Info("verify progress", "done", pr.Done, "total", pr.Total, "recordsPerSecond", math.Round(float64(p.records)/secs),
				"storedMBPerSecond", math.Round(float64(p.stored)/1e5/secs)/10, "snapshotMembersSkipped", p.skipped)
			return
		}
		fmt.Fprintf(p.w, "shardproof: verify: %s\n", desc)
	}
}

func (p *verifyProgress) finish() {
	if p.bar != nil {
		p.bar.Finish()
	}
}

// finishVerify removes the job's scratch, unless --keep-job, and prints
// the result. The report is stored by then, so a removal that fails is
// logged, with its code, and does not change the outcome.
//
// With --metrics-file it also writes the report's figures there; a file
// that cannot be written is logged and, for a VERIFIED release, exit
// status 3 (an INVALID one keeps its 1).
func finishVerify(cmd *cobra.Command, s objstore.Store, out *coordinator.Outcome, asJSON bool) error {
	if out.Reused {
		// Said on stderr: stdout is the report or its summary, as always.
		fmt.Fprintf(cmd.ErrOrStderr(), "shardproof: verify: plan %s had finished; its report %s is the one shown (nothing was run again; verify --root for a new verification)\n",
			out.Plan, out.ReportDigest)
	}
	if keep, _ := cmd.Flags().GetBool("keep-job"); !keep {
		removeJob(cmd.Context(), s, out.Plan)
	}
	key, err := signKey(cmd)
	if err != nil {
		return err
	}
	if key != nil {
		if err := publish.SignReport(cmd.Context(), s, key, out.Report, out.ReportDigest); err != nil {
			return fmt.Errorf("report %s is stored but not signed: %w", out.ReportDigest, err)
		}
		fmt.Fprintf(cmd.ErrOrStderr(), "shardproof: verify: report %s signed by %s\n", out.ReportDigest, evidence.KeyID(key.Public().(ed25519.PublicKey)))
	}
	var merr error
	if path, _ := cmd.Flags().GetString("metrics-file"); path != "" {
		if merr = writeVerifyMetrics(path, out); merr != nil {
			slog.Error("metrics file not written", "path", path, "code", string(errcode.Of(merr)), "err", merr)
		}
	}
	if err := printVerifyResult(cmd.OutOrStdout(), out, asJSON); err != nil {
		return err
	}
	return merr
}

// checkMetricsFile refuses, before any work, a --metrics-file whose
// directory does not exist.
func checkMetricsFile(cmd *cobra.Command) error {
	path, _ := cmd.Flags().GetString("metrics-file")
	if path == "" {
		return nil
	}
	if st, err := os.Stat(filepath.Dir(path)); err != nil || !st.IsDir() {
		return errcode.New(errcode.Usage, "%s: --metrics-file %s: its directory does not exist", cmd.CommandPath(), path)
	}
	return nil
}

// removeJob deletes plan's job scratch once its report is stored. The
// verdict stands either way, so a failure is logged with its code, not
// returned.
func removeJob(ctx context.Context, s objstore.Store, plan manifest.Digest) {
	err := coordinator.RemoveJob(ctx, s, plan)
	var inUse *coordinator.JobInUseError
	switch {
	case errors.As(err, &inUse):
		// Another process took the job (a resume that found its report,
		// or prune-jobs): it deletes the files.
		if inUse.Unreadable != nil {
			slog.Info("job scratch left to the process that holds it, whose hold record could not be read", "plan", plan.String(),
				"holderGeneration", inUse.Holder.Generation, "holderUnreadable", inUse.Unreadable)
			break
		}
		slog.Info("job scratch left to the process that holds it", "plan", plan.String(), "holderPid", inUse.Holder.Process.PID,
			"holderHost", inUse.Holder.Process.Host, "holderPurpose", inUse.Holder.Purpose)
	case err != nil:
		slog.Warn("job scratch not removed", "plan", plan.String(), "code", string(errcode.Of(err)), "err", err)
	}
}

// printVerifyResult prints the report (--json) or its summary, and turns an
// INVALID verdict into exit status 1.
func printVerifyResult(w io.Writer, out *coordinator.Outcome, asJSON bool) error {
	if asJSON {
		b, err := manifest.Encode(out.Report)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "%s\n", b)
	} else {
		printSummary(w, out)
	}
	if out.Report.Verdict != manifest.Verified {
		return &exitError{status: errcode.ExitInvalid}
	}
	return nil
}

// resumeHint tells the user, when a local verification stopped after its
// plan was stored, how to finish it without redoing its committed tasks
// and how its scratch goes away otherwise. The store and scratch are
// quoted for the shell where they need it (an S3 URL's ? and &), so the
// commands run as printed.
func resumeHint(cmd *cobra.Command, store, scratch string, err error) {
	var u *coordinator.UnfinishedError
	if !errors.As(err, &u) || errcode.Of(err) == errcode.NoSuchBucket {
		// A deleted bucket took the release, and the job's files with
		// it: there is nothing a resume could finish.
		return
	}
	resume, jobs := "", store
	if scratch != "" {
		resume, jobs = " --scratch "+shellWord(scratch), scratch
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "shardproof: verify: plan %s stopped; its committed tasks are kept: `shardproof verify --store %s%s --resume %s` finishes it, `shardproof store prune-jobs --store %s` deletes what is left once it is old\n",
		u.Plan, shellWord(store), resume, u.Plan, shellWord(jobs))
}

// planFlags are verify's flags whose values a plan records: a resume
// takes them from the plan, and one given with --resume would be
// silently ignored (a resume of a plan with 64 reducers does not run
// 128 because --reducers says so).
var planFlags = []string{"root", "snapshot", "tombstones", "benchmark", "map-tasks", "reducers", "reduce-fan-in",
	"shuffle-compression", "shuffle-checksum", "map-members", "read-all-members"}

// resumeTakesPlanFlags refuses, with USAGE, a --resume given any of
// planFlags.
func resumeTakesPlanFlags(cmd *cobra.Command) error {
	for _, name := range planFlags {
		if cmd.Flags().Changed(name) {
			return errcode.New(errcode.Usage, "verify: --resume takes the root, snapshot, fences and the plan's shape from the plan; do not give --%s", name)
		}
	}
	return nil
}

// resumeVerify finishes the verification planned as plan on the local
// executor: tasks whose commit records exist are not run again, so an
// interrupted nightly run of a large release picks up where it stopped.
// The job's files are in scratch when it is set.
func resumeVerify(cmd *cobra.Command, store, scratch, plan string, parallelism int, asJSON bool) error {
	pd, err := manifest.ParseDigest(plan)
	if err != nil {
		return errcode.Wrap(errcode.Usage, err, "verify: --resume")
	}
	s, err := openJobStore(cmd, store, scratch)
	if err != nil {
		return err
	}
	if err := takeOverJob(cmd, s, pd); err != nil {
		return err
	}
	prog := newVerifyProgress(cmd.ErrOrStderr())
	out, err := coordinator.Run(cmd.Context(), s, pd, parallelism, prog.update)
	prog.finish()
	if objstore.IsNotExist(err) && strings.Contains(err.Error(), "jobs/"+pd.Hex()+"/") {
		// A committed task's output is gone: the job's files were being
		// deleted, which happens only once its report is stored. A
		// resume cannot finish it, and need not.
		return errcode.Wrap(errcode.NotFound, err, "verify --resume %s: the plan's files are partly deleted, as by a verification killed while it removed them after storing its report; verify the root again for a report, and `shardproof store prune-jobs` removes what is left", pd)
	}
	if err != nil {
		resumeHint(cmd, store, scratch, err)
		return err
	}
	return finishVerify(cmd, s, out, asJSON)
}

// takeOverJob, with --take-over, takes plan pd's job from its holder at
// once (coordinator.TakeOver) and says on stderr which holder it
// displaced, before the resume takes the job in turn.
func takeOverJob(cmd *cobra.Command, s objstore.Store, pd manifest.Digest) error {
	if on, _ := cmd.Flags().GetBool("take-over"); !on {
		return nil
	}
	d, err := coordinator.TakeOver(cmd.Context(), s, pd)
	if err != nil {
		return err
	}
	w := cmd.ErrOrStderr()
	if d == nil {
		fmt.Fprintf(w, "shardproof: verify: plan %s: its job had no holder to take over\n", pd)
		return nil
	}
	h := &d.Holder
	who := fmt.Sprintf("%q (pid %d on host %s, %s since %s, hold last renewed %s", h.Command, h.Process.PID, h.Process.Host, h.Purpose, h.Started, d.Renewed.UTC().Format(time.RFC3339))
	if d.Unreadable != nil {
		who = fmt.Sprintf("whose hold record could not be read (generation %d: %v; hold last renewed %s", h.Generation, d.Unreadable, d.Renewed.UTC().Format(time.RFC3339))
	}
	switch {
	case d.Live:
		if d.Unreadable != nil {
			who = "a process " + who
		}
		fmt.Fprintf(w, "shardproof: verify: plan %s: took its job over from %s, %s before by the store's clock; if it still runs, it stops at its next renewal)\n", pd, who, d.Age.Round(time.Second))
	case d.Local:
		fmt.Fprintf(w, "shardproof: verify: plan %s: its job's holder %s; its process on this machine has ended) is gone: the resume takes the job from it\n", pd, who)
	default:
		fmt.Fprintf(w, "shardproof: verify: plan %s: its job's holder %s, %s before by the store's clock) is gone: the resume takes the job from it\n", pd, who, d.Age.Round(time.Second))
	}
	return nil
}
