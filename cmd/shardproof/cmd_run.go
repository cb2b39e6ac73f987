package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/raftgate"
)

// run: training runs pinned to one root, their attestations and barrier.
var runCmd = &cobra.Command{
	Use:   "run",
	Short: "Create training runs, attest ranks, wait at the barrier, admit checkpoints",
	Long: `Training runs in the gate. A run resolves its alias exactly once, at
create; every rank then attests (run ID, rank, root, shard digests) and
waits at the barrier, which opens when every rank of the current
assignment attested the run's root. A foreign root or a shard outside the
rank's assignment fails the run before step 0. Reassign (scale-out,
recovery) changes the assignment only and never re-reads the alias.`,
}

func printRun(cmd *cobra.Command, s *raftgate.RunSummary) error {
	return printResult(cmd, s, func(w io.Writer) {
		fmt.Fprintf(w, "run %s: %s, barrier %s, %d/%d ranks attested (epoch %d)\n", s.ID, s.State, s.Barrier, s.Attested, s.WorldSize, s.Epoch)
		fmt.Fprintf(w, "root %s (alias %s generation %d, permit %s)\n", s.Root, s.Alias, s.Generation, s.Permit)
		if s.FailCode != "" {
			reason := s.FailReason
			if reason == "" {
				reason = "no reason given"
			}
			fmt.Fprintf(w, "%s: %s\n", s.FailCode, showText(reason))
		}
		if s.Barrier == raftgate.BarrierClosed && s.Deadline > 0 {
			fmt.Fprintf(w, "barrier deadline %s\n", time.UnixMilli(s.Deadline).UTC().Format("2006-01-02T15:04:05.000Z"))
		}
		if s.Step >= 0 {
			fmt.Fprintf(w, "last checkpoint step %d (%d admitted)\n", s.Step, s.Checkpoints)
		}
	})
}

// readAssignment reads a JSON array of arrays of shard indices (rank →
// indices) from path, or returns nil for round-robin when path is empty.
func readAssignment(path string, worldSize int) ([][]int, error) {
	if path == "" {
		return nil, nil
	}
	fh, err := openArgFile("assignment file", path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	b, err := io.ReadAll(fh)
	if err != nil {
		return nil, errcode.Wrap(errcode.IO, err, "read assignment file %s", path)
	}
	var a [][]int
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&a); err != nil {
		return nil, errcode.Wrap(errcode.BadInput, err, "assignment file %s: want [[shard indices of rank 0], …]", path)
	}
	// Only white space may follow (More would miss a stray ']').
	if rest := b[dec.InputOffset():]; len(bytes.TrimSpace(rest)) > 0 {
		return nil, errcode.New(errcode.BadInput, "assignment file %s: data after the assignment", path)
	}
	// An empty or null one would read as "no assignment" and give the
	// round-robin one: the file names every rank's shards or it is wrong.
	if len(a) != worldSize {
		return nil, errcode.New(errcode.BadInput, "assignment file %s: %d ranks, --world-size is %d", path, len(a), worldSize)
	}
	return a, nil
}

var runCreateFlags struct {
	alias, assignment string
	worldSize         int
	barrierTimeout    time.Duration
}

var runCreateCmd = &cobra.Command{
	Use:   "create RUN --alias ALIAS --world-size N [--assignment FILE]",
	Short: "Create a run pinned to the alias's current root (resolved once)",
	Long: `Create a run pinned to the alias's current root. The alias is read exactly
once, here. Without --assignment shard i goes to rank i % N; an assignment
file is a JSON array, one array of shard indices (manifest order) per rank,
naming every shard exactly once. Creating the same run again with the same
parameters returns it unchanged.`,
	Args: exactArgs(1),
	RunE: func(cmd *cobra.Command, args []string) error {
		f := runCreateFlags
		if err := raftgate.CheckPathName("run", args[0]); err != nil {
			return errcode.New(errcode.Usage, "%s: run name %q cannot be addressed", cmd.CommandPath(), args[0])
		}
		if f.alias == "" {
			return errcode.New(errcode.Usage, "%s: --alias is required", cmd.CommandPath())
		}
		if f.worldSize < 1 || f.worldSize > raftgate.MaxWorldSize {
			return errcode.New(errcode.Usage, "%s: --world-size %d outside [1,%d]", cmd.CommandPath(), f.worldSize, raftgate.MaxWorldSize)
		}
		if f.barrierTimeout < 0 {
			return errcode.New(errcode.Usage, "%s: --barrier-timeout %s: must not be negative", cmd.CommandPath(), f.barrierTimeout)
		}
		if f.barrierTimeout < time.Millisecond {
			// The command carries whole milliseconds, and the gate
			// takes 0 for its default: 0 or 500us made a run whose
			// barrier waited ten minutes.
			return errcode.New(errcode.Usage, "%s: --barrier-timeout %s: at least 1ms (the gate would take it for its default, %s)", cmd.CommandPath(), f.barrierTimeout, time.Duration(raftgate.DefaultBarrierTimeoutMs)*time.Millisecond)
		}
		if f.barrierTimeout.Milliseconds() > raftgate.MaxBarrierTimeoutMs {
			return errcode.New(errcode.Usage, "%s: --barrier-timeout %s: at most %s (ten years)", cmd.CommandPath(), f.barrierTimeout, time.Duration(raftgate.MaxBarrierTimeoutMs)*time.Millisecond)
		}
		a, err := readAssignment(f.assignment, f.worldSize)
		if err != nil {
			return err
		}
		c := gateClient()
		defer c.Close()
		s, err := c.CreateRun(cmd.Context(), &raftgate.CreateRun{
			Run: args[0], Alias: f.alias, WorldSize: f.worldSize, Assignment: a,
			BarrierTimeoutMs: f.barrierTimeout.Milliseconds(),
		})
		if err != nil {
			return err
		}
		return printRun(cmd, s)
	},
}

var runAttestFlags struct {
	rank               int
	root, shards, file string
	epoch              uint64
}

// readDigests parses a comma-separated list or a file of digests, one per
// line.
func readDigests(list, file string) ([]manifest.Digest, error) {
	var words []string
	for _, w := range strings.Split(list, ",") {
		if w = strings.TrimSpace(w); w != "" {
			words = append(words, w)
		}
	}
	if file != "" {
		fh, err := openArgFile("shards file", file)
		if err != nil {
			return nil, err
		}
		defer fh.Close()
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			if w := strings.TrimSpace(sc.Text()); w != "" {
				words = append(words, w)
			}
		}
		if err := sc.Err(); err != nil {
			return nil, errcode.Wrap(errcode.IO, err, "shards file")
		}
	}
	out := make([]manifest.Digest, 0, len(words))
	for _, w := range words {
		d, err := parseDigestValue(w)
		if err != nil {
			return nil, errcode.Wrap(errcode.Usage, err, "shard digest")
		}
		out = append(out, d)
	}
	return out, nil
}

var runAttestCmd = &cobra.Command{
	Use:   "attest RUN --rank R --root DIGEST [--shards D1,D2,… | --shards-file FILE] [--epoch E]",
	Short: "Attest that rank R verified its assigned shards of ROOT",
	Long: `Attest that rank R verified its assigned shards of ROOT (none for a rank
whose assignment is empty, when the world is larger than the release).

The attestation is bound to an assignment epoch: --epoch, or the run's
current epoch, read first. When that is the run's current epoch the
shards are checked, before anything is sent, against rank R's assignment
at it: a list that differs (a typo, a duplicate, or a list computed
before a reassignment) is refused with BAD_INPUT and the run is
untouched. With --epoch of an epoch the run has left the gate answers
STALE_EPOCH, changing nothing, so a script that remembers the epoch of
its list can resend the same command safely (a gate cluster below
command-schema version 2 answers a rank that a scale-in removed
BAD_INPUT "rank outside" instead). A ROOT that is not the run's root
fails the run (ROOT_MISMATCH): the rank read another release.

Exit status: 0 attested, 1 bad input (nothing sent), 2 usage, 3 error,
4 refused (the run failed, or STALE_EPOCH), 5 indeterminate.`,
	Args: exactArgs(1),
	RunE: func(cmd *cobra.Command, args []string) error {
		f := runAttestFlags
		root, err := parseDigestArg(cmd, "--root", f.root)
		if err != nil {
			return err
		}
		if cmd.Flags().Changed("shards") && cmd.Flags().Changed("shards-file") {
			// Joined, the two lists would repeat the shards both name.
			return errcode.New(errcode.Usage, "%s: give --shards or --shards-file, not both", cmd.CommandPath())
		}
		shards, err := readDigests(f.shards, f.file)
		if err != nil {
			return err
		}
		ctx := cmd.Context()
		c := gateClient()
		defer c.Close()
		// The list is checked against the rank's assignment at the
		// run's current epoch, which is the one sent without --epoch; a
		// list bound to an epoch the run has left goes to the gate,
		// which answers STALE_EPOCH and changes nothing, while one bound
		// to the current epoch that is not the assignment would fail
		// the run there (SHARD_NOT_ASSIGNED).
		run, err := c.Run(ctx, args[0])
		if err != nil {
			return err
		}
		epoch := run.Epoch
		if cmd.Flags().Changed("epoch") {
			epoch = f.epoch
		}
		if epoch == run.Epoch {
			if err := checkAssigned(ctx, c, run, f.rank, root, shards); err != nil {
				return err
			}
		}
		s, err := c.AttestEpoch(ctx, args[0], f.rank, epoch, root, shards)
		if err != nil {
			return err
		}
		return printRun(cmd, s)
	},
}

// checkAssigned refuses, before anything reaches the gate, shards that are
// not exactly rank's assignment in run at its current epoch: the gate
// fails the whole run on a shard outside the assignment. A root other than
// the run's is left to the gate, which fails the run: that is what an
// attestation of another release must do.
func checkAssigned(ctx context.Context, c *raftgate.Client, run *raftgate.Run, rank int, root manifest.Digest, shards []manifest.Digest) error {
	if rank < 0 || rank >= run.WorldSize || rank >= len(run.Assignment) {
		return errcode.New(errcode.Usage, "--rank %d: run %s has ranks 0..%d", rank, run.ID, run.WorldSize-1)
	}
	if root != run.Root {
		return nil
	}
	rel, err := c.Release(ctx, run.Root)
	if err != nil {
		return err
	}
	want := map[manifest.Digest]int{}
	for _, i := range run.Assignment[rank] {
		if i < 0 || i >= len(rel.Shards) {
			return errcode.New(errcode.Internal, "run %s assigns shard %d of a release with %d", run.ID, i, len(rel.Shards))
		}
		want[rel.Shards[i]]++
	}
	for _, d := range shards {
		want[d]--
	}
	var extra, missing int
	for _, n := range want {
		if n < 0 {
			extra -= n
		} else {
			missing += n
		}
	}
	if extra > 0 || missing > 0 {
		return errcode.New(errcode.BadInput, "rank %d of run %s is assigned %d shards at epoch %d; the %d given include %d not assigned (or repeated) and miss %d; nothing was sent (a list from before a reassignment is stale: 'run show %s')",
			rank, run.ID, len(run.Assignment[rank]), run.Epoch, len(shards), extra, missing, run.ID)
	}
	return nil
}

var runWaitFlags struct{ timeout time.Duration }

var runWaitCmd = &cobra.Command{
	Use:   "wait RUN [--timeout D]",
	Short: "Wait until the run's barrier opens (exit 0) or the run fails (exit 4)",
	Long: `Wait until the run's barrier opens (exit 0), the run fails (exit 4 with
its code: ROOT_MISMATCH, SHARD_NOT_ASSIGNED, BARRIER_TIMEOUT, RUN_FAILED)
or --timeout passes with the barrier still closed (exit 4, BARRIER_CLOSED;
the run itself keeps waiting until its own deadline). If no gate answered
at all before --timeout, it is GATE_UNAVAILABLE (exit 3), which says
nothing of the barrier.`,
	Args: exactArgs(1),
	RunE: func(cmd *cobra.Command, args []string) error {
		if runWaitFlags.timeout <= 0 {
			return errcode.New(errcode.Usage, "%s: --timeout %s: must be positive", cmd.CommandPath(), runWaitFlags.timeout)
		}
		ctx, cancel := context.WithTimeout(cmd.Context(), runWaitFlags.timeout)
		defer cancel()
		c := gateClient()
		defer c.Close()
		s, err := c.WaitRun(ctx, args[0])
		if err != nil {
			if s != nil && gateClientFlags.asJSON {
				printRun(cmd, s)
			}
			return err
		}
		return printRun(cmd, s)
	},
}

var runReassignFlags struct {
	worldSize         int
	assignment, reset string
	expectEpoch       int64
}

var runReassignCmd = &cobra.Command{
	Use:   "reassign RUN --world-size N [--assignment FILE] [--reset R1,R2]",
	Short: "Change a run's world size and assignment (never re-reads the alias)",
	Long: `Change a run's world size and assignment for scale-out or recovery. The
run keeps its root; ranks whose assignment changed, new ranks and the ranks
named by --reset (replaced workers) must attest again before the barrier
reopens. A worker started for a new rank before the reassignment waits
up to its --rank-wait (10m by default) for it, verifying nothing
meanwhile, and fails with USAGE if it does not come. A run whose barrier
is still closed past its deadline is failed (BARRIER_TIMEOUT, exit 4), as
the gate's sweep would a moment later, not given a new deadline or an
open barrier (from the cluster's command-schema version 6).

The change is a compare-and-set on the run's epoch: --expect-epoch N (by
default the epoch the run is at when the command reads it). Another
reassignment in between is STALE_EPOCH. After exit status 5 (outcome
unknown), send the same command with the --expect-epoch it names: if the
first attempt was applied, the run comes back unchanged instead of starting
another epoch and making the reset ranks attest again.`,
	Args: exactArgs(1),
	RunE: func(cmd *cobra.Command, args []string) error {
		f := runReassignFlags
		if cmd.Flags().Changed("expect-epoch") && f.expectEpoch < 0 {
			// -1 stands for "not given": a negative value typed (a
			// script's $((E-1)) at epoch 0) reassigned from whatever
			// epoch the run was at, without the compare-and-set.
			return errcode.New(errcode.Usage, "%s: --expect-epoch %d: must not be negative", cmd.CommandPath(), f.expectEpoch)
		}
		if f.worldSize < 1 || f.worldSize > raftgate.MaxWorldSize {
			return errcode.New(errcode.Usage, "%s: --world-size %d outside [1,%d]", cmd.CommandPath(), f.worldSize, raftgate.MaxWorldSize)
		}
		a, err := readAssignment(f.assignment, f.worldSize)
		if err != nil {
			return err
		}
		var reset []int
		for _, w := range strings.Split(f.reset, ",") {
			if w = strings.TrimSpace(w); w == "" {
				continue
			}
			r, err := strconv.Atoi(w)
			if err != nil {
				return errcode.Wrap(errcode.Usage, err, "%s: --reset", cmd.CommandPath())
			}
			if r < 0 || r >= f.worldSize {
				return errcode.New(errcode.Usage, "%s: --reset %d: ranks are 0..%d", cmd.CommandPath(), r, f.worldSize-1)
			}
			reset = append(reset, r)
		}
		c := gateClient()
		defer c.Close()
		epoch := f.expectEpoch
		if epoch < 0 {
			run, err := c.Run(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			epoch = int64(run.Epoch)
		}
		e := uint64(epoch)
		s, err := c.Reassign(cmd.Context(), &raftgate.Reassign{Run: args[0], WorldSize: f.worldSize, Assignment: a, Reset: reset, ExpectedEpoch: &e})
		if raftgate.IsIndeterminate(err) {
			return errcode.Wrap(errcode.Indeterminate, err, "reassign of run %s from epoch %d: send it again with --expect-epoch %d", args[0], e, e)
		}
		if err != nil {
			return err
		}
		return printRun(cmd, s)
	},
}

var runCheckpointFlags struct {
	step int64
	root string
}

var runCheckpointCmd = &cobra.Command{
	Use:   "checkpoint RUN --step S --root DIGEST",
	Short: "Admit a checkpoint: only the run's root, only while its permit is open",
	Long: `Admit a checkpoint of run RUN at step S: only for the run's own root,
only while the barrier is open and the run's permit is open (a fence
advance closes it until a recheck shows zero hits), and never at a step
lower than one already admitted.

Exit status: 0 admitted, 2 usage, 3 gate unreachable, 4 refused
(PERMIT_CLOSED, ROOT_MISMATCH, BARRIER_CLOSED, STEP_REGRESSION,
RUN_FAILED, UNKNOWN_RUN, RUN_PRUNED), 5 indeterminate: sending the same
command again is safe.`,
	Args: exactArgs(1),
	RunE: func(cmd *cobra.Command, args []string) error {
		root, err := parseDigestArg(cmd, "--root", runCheckpointFlags.root)
		if err != nil {
			return err
		}
		if !cmd.Flags().Changed("step") || runCheckpointFlags.step < 0 {
			return errcode.New(errcode.Usage, "%s: --step S (0 or more) is required", cmd.CommandPath())
		}
		c := gateClient()
		defer c.Close()
		s, err := c.AdmitCheckpoint(cmd.Context(), args[0], runCheckpointFlags.step, root)
		if err != nil {
			return err
		}
		return printRun(cmd, s)
	},
}

var runCancelFlags struct{ reason string }

var runCancelCmd = &cobra.Command{
	Use:   "cancel RUN [--reason TEXT]",
	Short: "Cancel a run and release its permit",
	Long: `Cancel run RUN: it ends in state CANCELLED, its permit is released, and
no worker of it can attest or admit a checkpoint any more. A run that has
ended already (failed or cancelled) is answered unchanged.

Exit status: 0 cancelled, 2 usage, 3 gate unreachable, 4 refused
(UNKNOWN_RUN, RUN_PRUNED), 5 indeterminate: sending the same command
again is safe.`,
	Args: exactArgs(1),
	RunE: func(cmd *cobra.Command, args []string) error {
		c := gateClient()
		defer c.Close()
		s, err := c.CancelRun(cmd.Context(), args[0], runCancelFlags.reason)
		if err != nil {
			return err
		}
		return printRun(cmd, s)
	},
}

var runShowCmd = &cobra.Command{
	Use:   "show RUN",
	Short: "Show a run with its assignment and attestations",
	Long: `Show run RUN: its root and generation, state, barrier, epoch, each
rank's assigned shards and attestation, and its last admitted checkpoint
step.

Exit status: 0 shown, 2 usage, 3 gate unreachable, 4 UNKNOWN_RUN or
RUN_PRUNED.`,
	Args: exactArgs(1),
	RunE: func(cmd *cobra.Command, args []string) error {
		c := gateClient()
		defer c.Close()
		r, err := c.Run(cmd.Context(), args[0])
		if err != nil {
			return err
		}
		s := r.Summary()
		if gateClientFlags.asJSON {
			return printResult(cmd, r, nil)
		}
		printRun(cmd, &s)
		w := cmd.OutOrStdout()
		for rank, a := range r.Assignment {
			state := "waiting"
			if at := r.Attestations[rank]; at != nil {
				state = "attested " + time.UnixMilli(at.At).UTC().Format(time.RFC3339)
			}
			fmt.Fprintf(w, "rank %d: shards %v, %s\n", rank, a, state)
		}
		return nil
	},
}

func init() {
	f := runCreateCmd.Flags()
	f.StringVar(&runCreateFlags.alias, "alias", "", "alias to resolve (once)")
	f.IntVar(&runCreateFlags.worldSize, "world-size", 1, "number of ranks")
	f.StringVar(&runCreateFlags.assignment, "assignment", "", "JSON file: rank → shard indices (default round-robin)")
	f.DurationVar(&runCreateFlags.barrierTimeout, "barrier-timeout", 10*time.Minute, "fail the run if the barrier is not open by then (1ms to 87600h, ten years)")

	f = runAttestCmd.Flags()
	f.IntVar(&runAttestFlags.rank, "rank", 0, "this worker's rank")
	f.StringVar(&runAttestFlags.root, "root", "", "root digest the worker verified against")
	f.StringVar(&runAttestFlags.shards, "shards", "", "comma-separated digests of the verified shards")
	f.StringVar(&runAttestFlags.file, "shards-file", "", "file with one shard digest per line")
	f.Uint64Var(&runAttestFlags.epoch, "epoch", 0, "the assignment epoch the shard list belongs to (default: the run's current one, and the list is checked against it first)")

	runWaitCmd.Flags().DurationVar(&runWaitFlags.timeout, "timeout", 10*time.Minute, "give up waiting after this long")

	f = runReassignCmd.Flags()
	f.IntVar(&runReassignFlags.worldSize, "world-size", 1, "new number of ranks")
	f.StringVar(&runReassignFlags.assignment, "assignment", "", "JSON file: rank → shard indices (default round-robin)")
	f.StringVar(&runReassignFlags.reset, "reset", "", "comma-separated ranks that must attest again")
	unsetIntVar(f, &runReassignFlags.expectEpoch, "expect-epoch", "the run's epoch this reassignment starts from (default: the current one)")

	runCheckpointCmd.Flags().Int64Var(&runCheckpointFlags.step, "step", 0, "training step of the checkpoint")
	runCheckpointCmd.Flags().StringVar(&runCheckpointFlags.root, "root", "", "root digest the checkpoint was trained on")
	runCancelCmd.Flags().StringVar(&runCancelFlags.reason, "reason", "", "why the run is cancelled")

	addGateClientFlags(runCmd.PersistentFlags())
	runCmd.AddCommand(runCreateCmd, runAttestCmd, runWaitCmd, runReassignCmd, runCheckpointCmd, runCancelCmd, runShowCmd)
	rootCmd.AddCommand(runCmd)
}
