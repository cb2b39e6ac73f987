package coordinator

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"time"

	"github.com/shardproof/shardproof/internal/errcode"
)

// Process is the Engine that runs each task as a child process, with
// exactly the command line a Slurm array task or a Kubernetes pod runs.
// It retries a task whose exit status is Retryable, up to Attempts times.
// On Linux the children die with this process (see startChild).
type Process struct {
	// Binary is the shardproof executable (default: this process's own).
	Binary string
	// Parallelism bounds the children running at once (default 1).
	Parallelism int
	// Attempts bounds the runs of one task (default 3).
	Attempts int
	// Env, if non-nil, is the children's environment (default: this
	// process's).
	Env []string
}

// Name implements Engine.
func (p *Process) Name() string { return "process" }

// Run implements Engine: every map task, then every reduce task.
func (p *Process) Run(ctx context.Context, ref PlanRef, maps, reduces int) error {
	bin := p.Binary
	if bin == "" {
		var err error
		if bin, err = os.Executable(); err != nil {
			return errcode.Wrap(errcode.Internal, err, "process executor: locate the shardproof binary")
		}
	}
	par := max(1, p.Parallelism)
	for _, phase := range []struct {
		kind Kind
		n    int
	}{{KindMap, maps}, {KindReduce, reduces}} {
		if err := runAll(ctx, phase.n, par, func(ctx context.Context, i int) error {
			return p.runTask(ctx, bin, ref, phase.kind, i)
		}); err != nil {
			return err
		}
	}
	return nil
}

// runTask runs one task until it succeeds, fails for good, or exhausts its
// attempts.
func (p *Process) runTask(ctx context.Context, bin string, ref PlanRef, kind Kind, i int) error {
	attempts := p.Attempts
	if attempts <= 0 {
		attempts = 3
	}
	for attempt := 1; ; attempt++ {
		status, log, err := p.runOnce(ctx, bin, ref, kind, i)
		if err != nil {
			return err
		}
		if status == 0 {
			return nil
		}
		terr := newTaskError(kind, i, status, log)
		if !Retryable(status) || attempt >= attempts {
			return terr
		}
		slog.Warn("task failed; retrying", "kind", string(kind), "index", i, "plan", ref.Plan.String(),
			"status", status, "code", terr.Code, "attempt", attempt)
		select {
		case <-ctx.Done():
			return errcode.Wrap(errcode.Canceled, ctx.Err(), "%s task %d", kind, i)
		case <-time.After(time.Duration(attempt) * 200 * time.Millisecond):
		}
	}
}

// runOnce runs the child once and returns its exit status (-1 if a signal
// ended it) and the tail of its standard error. err is set only when the
// child could not be started or ctx was canceled.
func (p *Process) runOnce(ctx context.Context, bin string, ref PlanRef, kind Kind, i int) (int, []byte, error) {
	args := append([]string{"task", string(kind)}, ref.TaskArgs()...)
	cmd := exec.CommandContext(ctx, bin, append(args, "--index", strconv.Itoa(i))...)
	cmd.Env = p.Env
	stderr := &tailBuffer{max: 4096}
	cmd.Stderr = stderr
	err := startChild(cmd)
	if err == nil {
		err = cmd.Wait()
	}
	if ctx.Err() != nil {
		return 0, nil, errcode.Wrap(errcode.Canceled, ctx.Err(), "%s task %d", kind, i)
	}
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, stderr.b, nil
	case errors.As(err, &ee):
		return ee.ExitCode(), stderr.b, nil
	}
	return 0, nil, errcode.Wrap(errcode.IO, err, "%s task %d: start %s", kind, i, bin)
}
