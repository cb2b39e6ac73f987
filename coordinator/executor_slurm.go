package coordinator

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/shardproof/shardproof/internal/errcode"
)

// Slurm is the Engine that submits the map tasks as one Slurm job array
// and the reduce tasks as a second array that depends on the first with
// afterok (and --kill-on-invalid-dep=yes, so a failed map phase cancels
// the reducers instead of leaving them pending forever). Slurm schedules
// and places the tasks; each array task runs a script that runs
// `shardproof task <kind> --plan <plan URL>` (index from
// SLURM_ARRAY_TASK_ID) and retries operational failures in a bounded loop.
// Run waits with squeue until both arrays have left the queue, then checks
// every array task's state with scontrol.
//
// The sbatch, squeue, scontrol and scancel commands must be on PATH and
// reach the cluster (SLURM_CONF or the default config); the binary, the
// store and Dir must be reachable from the compute nodes.
type Slurm struct {
	// Binary is the shardproof executable the tasks run (default: this
	// process's own).
	Binary string
	// Dir holds the task script and the array tasks' logs; it must be on
	// a file system the compute nodes share (default: a new temporary
	// directory, which suits a single-node cluster; it is kept, since it
	// holds the logs).
	Dir string
	// Attempts bounds the runs of one task inside its array task
	// (default 3).
	Attempts int
	// Partition, if set, is passed to sbatch --partition.
	Partition string
	// Args are extra sbatch arguments (account, time limit, …).
	Args []string
	// Env, if non-nil, is the environment of the Slurm commands.
	Env []string
	// Poll is the squeue polling interval (default 1s).
	Poll time.Duration
}

// Name implements Engine.
func (s *Slurm) Name() string { return "slurm" }

// Run implements Engine.
func (s *Slurm) Run(ctx context.Context, ref PlanRef, maps, reduces int) error {
	bin := s.Binary
	if bin == "" {
		var err error
		if bin, err = os.Executable(); err != nil {
			return errcode.Wrap(errcode.Internal, err, "slurm executor: locate the shardproof binary")
		}
	}
	// Array tasks start in --chdir and slurmd opens their logs from its
	// own directory: a relative binary or directory names another file
	// there (exit 127, or a launch failure with no log at all).
	if !filepath.IsAbs(bin) && strings.ContainsRune(bin, filepath.Separator) {
		abs, err := filepath.Abs(bin)
		if err != nil {
			return errcode.Wrap(errcode.Usage, err, "slurm executor: task binary %s", bin)
		}
		bin = abs
	}
	if err := s.checkArraySize(ctx, maps, reduces); err != nil {
		return err
	}
	dir := s.Dir
	if dir != "" && !filepath.IsAbs(dir) {
		abs, err := filepath.Abs(dir)
		if err != nil {
			return errcode.Wrap(errcode.Usage, err, "slurm executor: work directory %s", dir)
		}
		dir = abs
	}
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "shardproof-slurm-"); err != nil {
			return errcode.Wrap(errcode.IO, err, "slurm executor: work directory")
		}
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return errcode.Wrap(errcode.IO, err, "slurm executor: work directory")
	}
	name := "shardproof-" + ref.Plan.Hex()[:12]
	script := filepath.Join(dir, name+".sh")
	attempts := s.Attempts
	if attempts <= 0 {
		attempts = 3
	}
	if err := os.WriteFile(script, []byte(slurmScript(bin, ref, attempts)), 0o755); err != nil {
		return errcode.Wrap(errcode.IO, err, "slurm executor: write task script")
	}
	mapID, err := s.submit(ctx, dir, name, KindMap, maps, "", script)
	if err != nil {
		return err
	}
	redID, err := s.submit(ctx, dir, name, KindReduce, reduces, mapID, script)
	if err != nil {
		s.cancel(mapID)
		return err
	}
	log := slog.With("plan", ref.Plan.String(), "mapJob", mapID, "reduceJob", redID)
	log.Info("slurm arrays submitted", "mapTasks", maps, "reducers", reduces, "dir", dir)
	// Each array is checked as soon as it leaves the queue: the
	// controller forgets a finished job after MinJobAge (300 s by
	// default), which a long reduce phase outlasts.
	for _, j := range []struct {
		kind Kind
		id   string
	}{{KindMap, mapID}, {KindReduce, redID}} {
		if err := s.wait(ctx, j.id); err != nil {
			s.cancel(mapID, redID)
			return err
		}
		if err := s.check(ctx, dir, name, j.kind, j.id); err != nil {
			// A failed map task leaves the reducers to
			// --kill-on-invalid-dep: wait a little for Slurm to end
			// them, so none is left pending; cancel them if it does
			// not, or if the check could not tell.
			var te *TaskError
			if errors.As(err, &te) && j.kind == KindMap {
				wctx, stop := context.WithTimeout(ctx, 30*time.Second)
				werr := s.wait(wctx, redID)
				stop()
				if werr == nil {
					return err
				}
			}
			s.cancel(redID)
			return err
		}
	}
	log.Info("slurm arrays completed")
	return nil
}

// maxArrayIndex bounds the array task indices check takes for one task:
// Slurm's own limit is far below it, NO_VAL far above.
const maxArrayIndex = 1 << 26

// checkArraySize refuses, before anything is submitted, arrays larger than
// the cluster's MaxArraySize (1001 unless slurm.conf says otherwise):
// sbatch would refuse the first with "Invalid job array specification".
// A controller that does not answer is not refused here: sbatch decides.
func (s *Slurm) checkArraySize(ctx context.Context, maps, reduces int) error {
	out, err := s.command(ctx, "scontrol", "show", "config")
	if err != nil {
		slog.Warn("slurm executor: scontrol show config failed; array sizes unchecked", "code", errcode.Of(err))
		return nil
	}
	limit := 0
	for _, line := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(line, "="); ok && strings.TrimSpace(k) == "MaxArraySize" {
			limit, _ = strconv.Atoi(strings.TrimSpace(v))
		}
	}
	if limit <= 0 {
		return nil
	}
	for _, a := range []struct {
		kind Kind
		flag string
		n    int
	}{{KindMap, "--map-tasks", maps}, {KindReduce, "--reducers", reduces}} {
		if a.n > limit {
			return errcode.New(errcode.Usage, "slurm executor: the plan has %d %s tasks, more than the cluster's MaxArraySize %d allows in one job array; verify again with %s %d or fewer",
				a.n, a.kind, limit, a.flag, limit)
		}
	}
	return nil
}

// slurmScript is the array task's script. Exit statuses follow the task
// contract: 1 (invalid input), 2 (usage) and 4 (refused) fail the same way
// on every run, so only other failures are retried.
func slurmScript(bin string, ref PlanRef, attempts int) string {
	return fmt.Sprintf(`#!/bin/sh
# shardproof verify: one Slurm array task (index from SLURM_ARRAY_TASK_ID,
# given as --index: an index variable of another engine the submitting
# environment exported, as when verify runs in a Kubernetes Indexed Job,
# is not the task's). $1 is the task kind. Operational failures are
# retried up to %[3]d runs.
kind=$1
attempt=1
while :; do
	%[1]s task "$kind" %[2]s --index "$SLURM_ARRAY_TASK_ID"
	rc=$?
	case $rc in
	0 | 1 | 2 | 4) exit $rc ;;
	esac
	if [ "$attempt" -ge %[3]d ]; then
		exit $rc
	fi
	echo "shardproof-slurm: $kind task $SLURM_ARRAY_TASK_ID exited $rc, retrying" >&2
	attempt=$((attempt + 1))
	sleep "$attempt"
done
`, shQuote(bin), shJoin(ref.TaskArgs()), attempts)
}

// shJoin quotes each of args for a POSIX shell and joins them with spaces.
func shJoin(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = shQuote(a)
	}
	return strings.Join(q, " ")
}

// shQuote quotes s for a POSIX shell.
func shQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func (s *Slurm) logPath(dir, name string, kind Kind, index string) string {
	return filepath.Join(dir, fmt.Sprintf("%s-%s-%s.log", name, kind, index))
}

// submit submits an array of n tasks of kind and returns its job id.
func (s *Slurm) submit(ctx context.Context, dir, name string, kind Kind, n int, after, script string) (string, error) {
	args := []string{"--parsable", "--job-name=" + name + "-" + string(kind),
		fmt.Sprintf("--array=0-%d", n-1),
		"--output=" + s.logPath(dir, name, kind, "%a"),
		"--chdir=" + dir}
	if after != "" {
		args = append(args, "--dependency=afterok:"+after, "--kill-on-invalid-dep=yes")
	}
	if s.Partition != "" {
		args = append(args, "--partition="+s.Partition)
	}
	args = append(args, s.Args...)
	args = append(args, script, string(kind))
	out, err := s.command(ctx, "sbatch", args...)
	if err != nil {
		return "", err
	}
	id, _, _ := strings.Cut(strings.TrimSpace(out), ";")
	if _, err := strconv.ParseUint(id, 10, 64); err != nil {
		return "", errcode.New(errcode.IO, "sbatch printed %q, not a job id", out)
	}
	return id, nil
}

// wait polls squeue until neither job has a task in the queue.
func (s *Slurm) wait(ctx context.Context, ids ...string) error {
	poll := s.Poll
	if poll <= 0 {
		poll = time.Second
	}
	failures := 0
	for {
		out, err := s.command(ctx, "squeue", "-h", "-j", strings.Join(ids, ","), "-o", "%i %T")
		switch {
		case err == nil && strings.TrimSpace(out) == "":
			return nil
		case err != nil && strings.Contains(err.Error(), "Invalid job id"):
			// Both jobs were purged from the controller: they are done.
			return nil
		case err != nil:
			if ctx.Err() != nil {
				return errcode.Wrap(errcode.Canceled, ctx.Err(), "slurm executor: waiting for jobs %v", ids)
			}
			// A busy controller may refuse a poll; only a streak fails.
			if failures++; failures >= 10 {
				return err
			}
		default:
			failures = 0
		}
		select {
		case <-ctx.Done():
			return errcode.Wrap(errcode.Canceled, ctx.Err(), "slurm executor: waiting for jobs %v", ids)
		case <-time.After(poll):
		}
	}
}

// check reads every array task of job id with scontrol and returns a
// TaskError for the first one that did not complete.
//
// A job the controller no longer knows (purged after MinJobAge) is not a
// failure: check logs it and returns nil, and the task commit records,
// which the caller aggregates from, decide (a task that did not commit is
// TASK_NOT_READY there).
func (s *Slurm) check(ctx context.Context, dir, name string, kind Kind, id string) error {
	out, err := s.command(ctx, "scontrol", "show", "job", "-o", id)
	if err != nil && strings.Contains(err.Error(), "Invalid job id") {
		slog.Warn("slurm executor: the controller no longer knows the job (purged after MinJobAge); its tasks' commit records decide",
			"job", id, "kind", string(kind), "logs", dir)
		return nil
	}
	if err != nil {
		return err
	}
	seen := 0
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := scontrolFields(line)
		if f["ArrayJobId"] != id {
			continue
		}
		seen++
		if f["JobState"] == "COMPLETED" {
			continue
		}
		index := f["ArrayTaskId"]
		idx, err := strconv.Atoi(index)
		if err != nil || idx < 0 || idx > maxArrayIndex {
			// Tasks still pending when the array ended (cancelled,
			// or never scheduled) share one record whose
			// ArrayTaskId is a range such as "4-11" or NO_VAL.
			return &TaskError{Kind: kind, Index: -1, Status: -1, Code: errcode.IO,
				Log: fmt.Sprintf("Slurm job %s: array tasks that never ran (ArrayTaskId %s) ended %s (reason %s)", id, index, f["JobState"], f["Reason"])}
		}
		status := -1
		if rc, _, ok := strings.Cut(f["ExitCode"], ":"); ok {
			if n, err := strconv.Atoi(rc); err == nil && n != 0 {
				status = n
			}
		}
		tail, _ := readTail(s.logPath(dir, name, kind, index), 4096)
		terr := newTaskError(kind, idx, status, tail)
		terr.Log = fmt.Sprintf("Slurm job %s_%s %s (reason %s, exit code %s): %s",
			id, index, f["JobState"], f["Reason"], f["ExitCode"], strings.TrimSpace(terr.Log))
		return terr
	}
	if seen == 0 {
		return errcode.New(errcode.IO, "slurm executor: scontrol shows no array tasks of job %s", id)
	}
	return nil
}

// scontrolFields splits one line of `scontrol show job -o` into its
// Key=Value fields (values of the fields used here have no spaces).
func scontrolFields(line string) map[string]string {
	m := map[string]string{}
	for _, kv := range strings.Fields(line) {
		if k, v, ok := strings.Cut(kv, "="); ok {
			if _, dup := m[k]; !dup {
				m[k] = v
			}
		}
	}
	return m
}

func readTail(path string, n int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Size() > n {
		if _, err := f.Seek(fi.Size()-n, 0); err != nil {
			return nil, err
		}
	}
	b := make([]byte, n)
	k, err := f.Read(b)
	if err != nil && k == 0 {
		return nil, err
	}
	return b[:k], nil
}

// cancel cancels jobs, best effort: it runs during error handling, when
// ctx may already be done.
func (s *Slurm) cancel(ids ...string) {
	ctx, stop := context.WithTimeout(context.Background(), 10*time.Second)
	defer stop()
	if _, err := s.command(ctx, "scancel", ids...); err != nil {
		slog.Warn("slurm executor: scancel failed", "jobs", ids, "code", errcode.Of(err))
	}
}

// command runs a Slurm command and returns its standard output.
func (s *Slurm) command(ctx context.Context, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = s.Env
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) || errors.Is(err, exec.ErrNotFound) {
			return "", errcode.Wrap(errcode.IO, err, "%s", commandFailed(name, args, stderr.String()))
		}
		return "", errcode.Wrap(errcode.IO, err, "%s", name)
	}
	return string(out), nil
}

// commandFailed says which command failed and, when it wrote any, its
// standard error, trimmed: a command failing silently gives no ": " with
// nothing after it.
func commandFailed(name string, args []string, stderr string) string {
	msg := strings.TrimSpace(name + " " + strings.Join(args, " "))
	if stderr = strings.TrimSpace(stderr); stderr != "" {
		msg += ": " + stderr
	}
	return msg
}
