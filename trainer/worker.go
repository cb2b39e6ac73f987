package trainer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/objstore"
	"github.com/shardproof/shardproof/raftgate"
)

// Gate is what a worker needs from the gate. *raftgate.Client implements
// it; tests wrap a real client to break one method.
//
// A worker reads the run (whose Root was fixed when the run was created)
// and the release registered under that root. It has no way to read an
// alias, by construction: scale-out and recovery after the alias moved
// still read the run's root.
type Gate interface {
	Run(ctx context.Context, id string) (*raftgate.Run, error)
	Release(ctx context.Context, root manifest.Digest) (*raftgate.Release, error)
	// Permit reads one permit: the run's, on every poll (reading every
	// permit made each poll cost as much as the gate's whole permit
	// table, times the ranks).
	Permit(ctx context.Context, id string) (*raftgate.Permit, error)
	AttestEpoch(ctx context.Context, run string, rank int, epoch uint64, root manifest.Digest, shards []manifest.Digest) (*raftgate.RunSummary, error)
	WaitRun(ctx context.Context, id string) (*raftgate.RunSummary, error)
}

// ShardVerifier checks the decoded content of a shard whose bytes are
// already in the cache at path and match desc's digest and size: schema,
// logical digest, record and token counts, member set. It returns an error
// with a stable code (SCHEMA_MISMATCH, LOGICAL_MISMATCH, …) when they
// differ, and MUST NOT panic on hostile bytes.
type ShardVerifier func(ctx context.Context, path string, rel *manifest.Release, desc manifest.Shard) error

// Config configures a Worker.
type Config struct {
	Gate  Gate
	Store objstore.Store
	Cache *Cache
	Run   string
	Rank  int
	// Verify checks decoded content after the bytes are in the cache. Nil
	// checks bytes only (digest and size of the exact version).
	Verify ShardVerifier
	// Parallelism is how many shards are fetched and verified at once;
	// zero means 4.
	Parallelism int
	// PollInterval is how often a ready sidecar re-reads its run to notice
	// a reassignment, a closed permit or a failure; zero means 2 s. Any
	// other value outside MinPollInterval to MaxPollInterval fails Run
	// with USAGE before it does anything.
	PollInterval time.Duration
	// ReadyFile, if set, is written with the worker's Status as JSON
	// (including the cache path of every assigned shard) whenever the
	// worker becomes ready, and removed when it stops being ready: an init
	// container's way to hand the trainer its file list. Run removes one
	// it finds at start (an earlier worker's), and a sidecar removes its
	// own when it stops.
	ReadyFile string
	// DeadlineGrace is how long past the run's barrier deadline a rank
	// waiting at the barrier keeps asking a gate that does not answer,
	// before it fails with GATE_UNAVAILABLE: the gate fails such a run
	// (BARRIER_TIMEOUT), but only a gate that answers can say so. Zero
	// means a minute, which also covers clock skew with the leader.
	DeadlineGrace time.Duration
	// RankWait is how long a rank at or above the run's world size waits
	// for a reassignment that includes it: an orchestrator that scales
	// out may start the new ranks' pods before it sends the reassignment.
	// It fails with USAGE after that (a mistyped rank, a run that never
	// grew). Zero means 10 minutes; negative means not at all.
	RankWait time.Duration
	Metrics  *Metrics
	Logger   *slog.Logger
}

// Worker states, as /readyz and /status report them.
const (
	StateStarting  = "STARTING"
	StateVerifying = "VERIFYING"
	StateWaiting   = "WAITING" // attested, barrier closed
	StateReady     = "READY"   // barrier open, permit open
	StateBlocked   = "BLOCKED" // barrier open but the run's permit is closed
	StateFailed    = "FAILED"
	StateDone      = "DONE" // the rank left the run (scale-in)
)

// Status is a worker's view of itself, served at /status.
type Status struct {
	State      string            `json:"state"`
	Run        string            `json:"run"`
	Rank       int               `json:"rank"`
	Root       manifest.Digest   `json:"root,omitzero"`
	Generation uint64            `json:"generation"`
	Epoch      uint64            `json:"epoch"`
	Shards     []manifest.Digest `json:"shards"`
	// Files are this rank's shards in assignment order with their cache
	// paths: what the trainer reads.
	Files    []File `json:"files"`
	Verified int    `json:"verified"`
	Code     string `json:"code,omitempty"`
	Reason   string `json:"reason,omitempty"`
	// Cache is the cache directory; shard i of Shards is at
	// Cache/sha256/<hex of Shards[i]>.
	Cache string `json:"cache"`
}

// File is one assigned shard in the cache.
type File struct {
	ID     string          `json:"id"`
	Digest manifest.Digest `json:"digest"`
	Path   string          `json:"path"`
}

// Worker is the trainer's sidecar: it verifies its rank's shards of the
// run's root into the cache, attests, waits at the barrier, and is Ready
// only while the run's barrier is open and its permit is open.
type Worker struct {
	cfg Config
	log *slog.Logger

	mu     sync.Mutex
	status Status
	// readyErr is the last failure to write or remove the ready file,
	// nil once a later one succeeds.
	readyErr error

	// entries are this rank's verified cache entries as they were when
	// verified, and rel the release they belong to: a ready sidecar
	// stats them every poll (recheckEntries). Only the Run goroutine
	// uses them.
	entries []entry
	rel     *manifest.Release
	root    manifest.Digest
	// joined is set once the worker has found its rank inside the run's
	// world size: outside it afterwards means a scale-in, not a rank
	// waiting for its scale-out. rankWaitSince is when it first found
	// itself outside before that.
	joined        bool
	rankWaitSince time.Time
	// attested is the shard list of this worker's last attestation,
	// assigned the rank's shard indices it verified them as (assignment
	// order), and confirmed the last epoch at which the run was seen to
	// hold both for this rank. Another process attesting the same rank
	// (a replacement pod started while this one still ran) after a
	// reassignment that gave the rank other shards, or the same ones in
	// another order, leaves the rank attested with a list this worker
	// never verified, or Files in another order than the run's: a
	// barrier open at another epoch is taken only once the run shows
	// this worker's assignment and list.
	attested  []manifest.Digest
	assigned  []int
	confirmed uint64
}

// entry is one verified cache entry and the file it was then.
type entry struct {
	desc manifest.Shard
	info fs.FileInfo
}

// unchanged reports whether info, a fresh Lstat of e's path, is still the
// file e verified: the same file, size, modification time and mode.
func (e entry) unchanged(info fs.FileInfo) bool {
	return os.SameFile(info, e.info) && info.Size() == e.info.Size() && info.ModTime().Equal(e.info.ModTime()) && info.Mode() == e.info.Mode()
}

// The bounds of Config.PollInterval (and of worker --poll): below, a
// worker re-reads its run in a busy loop; above, it notices a
// reassignment or a closed permit hours late, and the barrier's slices
// (five polls) wrap negative far above.
const (
	MinPollInterval = 10 * time.Millisecond
	MaxPollInterval = time.Hour
)

// NewWorker returns a worker; Run starts it.
func NewWorker(cfg Config) *Worker {
	if cfg.Parallelism <= 0 {
		cfg.Parallelism = 4
	}
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 2 * time.Second
	}
	if cfg.RankWait == 0 {
		cfg.RankWait = DefaultRankWait
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	w := &Worker{cfg: cfg, log: cfg.Logger.With("run", cfg.Run, "rank", cfg.Rank)}
	w.status = Status{State: StateStarting, Run: cfg.Run, Rank: cfg.Rank, Shards: []manifest.Digest{}, Files: []File{}, Cache: cfg.Cache.Dir()}
	return w
}

// Status returns a copy of the worker's current status.
func (w *Worker) Status() Status {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.status
	s.Shards = slices.Clone(s.Shards)
	s.Files = slices.Clone(s.Files)
	return s
}

// Ready reports whether the trainer may read the cache and step.
func (w *Worker) Ready() bool { return w.Status().State == StateReady }

// Metrics returns the worker's metrics.
func (w *Worker) Metrics() *Metrics { return w.cfg.Metrics }

func (w *Worker) set(f func(*Status)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	was := w.status.State == StateReady
	f(&w.status)
	ready := w.status.State == StateReady
	if root := w.status.Root; !root.IsZero() {
		v := 0.0
		if ready {
			v = 1
		}
		w.cfg.Metrics.Ready.WithLabelValues(root.String()).Set(v)
	}
	// The ready file changes under the lock, so it never lags the state.
	if w.cfg.ReadyFile != "" && ready != was {
		w.readyErr = w.writeReadyFile(ready)
		if err := w.readyErr; err != nil {
			w.log.Error("ready file", "path", w.cfg.ReadyFile, "code", errcode.Of(err), "err", err)
		}
	}
}

// removeReadyFile removes Config.ReadyFile, if set and present.
func (w *Worker) removeReadyFile() error {
	if w.cfg.ReadyFile == "" {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.writeReadyFile(false)
}

// writeReadyFile writes the status to Config.ReadyFile (temp file, fsync,
// rename) when ready, and removes it otherwise.
func (w *Worker) writeReadyFile(ready bool) error {
	path := w.cfg.ReadyFile
	if !ready {
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return errcode.Wrap(errcode.IO, err, "remove ready file")
		}
		return nil
	}
	b, err := json.MarshalIndent(w.status, "", "  ")
	if err != nil {
		return errcode.Wrap(errcode.Internal, err, "encode status")
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".*")
	if err != nil {
		return errcode.Wrap(errcode.IO, err, "ready file")
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		return errcode.Wrap(errcode.IO, err, "ready file")
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return errcode.Wrap(errcode.IO, err, "ready file")
	}
	if err := tmp.Close(); err != nil {
		return errcode.Wrap(errcode.IO, err, "ready file")
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return errcode.Wrap(errcode.IO, err, "ready file")
	}
	return nil
}

// Run verifies, attests and waits at the barrier. With once it returns nil
// as soon as the barrier is open (an init container). Otherwise it keeps
// watching the run until ctx ends: a reassignment that resets this rank is
// verified and attested again, a closed permit makes the worker not ready
// until it is renewed. It returns an error with a stable code when the run
// fails or this rank cannot verify its shards; nil when ctx ends or the
// rank leaves the run.
func (w *Worker) Run(ctx context.Context, once bool) error {
	if p := w.cfg.PollInterval; p < MinPollInterval || p > MaxPollInterval {
		// Before anything, even an earlier worker's ready file: a
		// configuration mistake changes nothing.
		return w.fail(errcode.New(errcode.Usage, "poll interval %s: must be from %s to %s", p, MinPollInterval, MaxPollInterval))
	}
	// The ready file exists only while this worker is ready. One found at
	// start was left by an earlier worker (a crash, a node's previous
	// job): it names a root and files nobody verified for this run, and
	// a trainer waiting for the file would take it for this worker's.
	err := w.removeReadyFile()
	if err == nil {
		err = w.run(ctx, once)
	}
	if !once {
		// A sidecar that stops watches nothing any more: its file must
		// not go on saying ready (a failure already removed it).
		if rerr := w.removeReadyFile(); rerr != nil {
			w.log.Error("ready file", "path", w.cfg.ReadyFile, "code", errcode.Of(rerr), "err", rerr)
		}
	}
	if err != nil && ctx.Err() == nil {
		return w.fail(err)
	}
	if once {
		return err
	}
	return nil
}

// fail records err as the worker's failure (status, log) and returns it.
func (w *Worker) fail(err error) error {
	code := errcode.Of(err)
	w.set(func(s *Status) { s.State, s.Code, s.Reason = StateFailed, string(code), err.Error() })
	w.log.Error("worker failed", "code", code, "err", err)
	return err
}

func (w *Worker) run(ctx context.Context, once bool) error {
	attest := true
	t := time.NewTicker(w.cfg.PollInterval)
	defer t.Stop()
	for {
		if attest {
			run, err := w.prepare(ctx)
			if err == errLeft {
				return w.left(once)
			}
			if err != nil {
				return err
			}
			next, err := w.wait(ctx, run)
			if err != nil {
				return err
			}
			if next == reattest {
				continue
			}
			if next == left {
				return w.left(once)
			}
			attest = false
			if once {
				// An init container that lets the trainer start must mean
				// the run may step and checkpoint: not with a closed permit.
				if st := w.Status(); st.State == StateBlocked {
					return errcode.New(errcode.PermitClosed, "run %s: barrier open but %s", w.cfg.Run, st.Reason)
				}
				// Nor without the ready file it hands the trainer.
				w.mu.Lock()
				err := w.readyErr
				w.mu.Unlock()
				return err
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if err := w.recheckEntries(ctx); err != nil {
			return err
		}
		next, err := w.watch(ctx)
		if err != nil {
			return err
		}
		switch next {
		case reattest:
			attest = true
		case left:
			return w.left(once)
		}
	}
}

// errLeft is prepare's answer when the rank was removed from the run
// (scale-in) while it verified again.
var errLeft = errors.New("rank left the run")

// DefaultRankWait is Config.RankWait's default.
const DefaultRankWait = 10 * time.Minute

// waitForRank waits, reading the run every PollInterval, until the run's
// world size includes this rank (a scale-out whose reassignment comes
// after its new ranks start), the run fails or is cancelled, or RankWait
// has passed since the worker first found itself outside the run.
func (w *Worker) waitForRank(ctx context.Context, run *raftgate.Run) error {
	if w.rankWaitSince.IsZero() {
		w.rankWaitSince = time.Now()
	}
	deadline := w.rankWaitSince.Add(w.cfg.RankWait)
	if w.cfg.RankWait < 0 {
		return errcode.New(errcode.Usage, "rank %d outside run %s's world size %d (not waiting for a reassignment that includes it: --rank-wait 0)",
			w.cfg.Rank, w.cfg.Run, run.WorldSize)
	}
	if !time.Now().Before(deadline) {
		return w.rankOutside(run.WorldSize)
	}
	w.log.Info("rank outside the run's world size; waiting for a reassignment that includes it",
		"worldSize", run.WorldSize, "epoch", run.Epoch, "wait", time.Until(deadline).Round(time.Second))
	w.set(func(s *Status) {
		s.State, s.Epoch, s.Code = StateStarting, run.Epoch, ""
		s.Reason = fmt.Sprintf("waiting for a reassignment that includes rank %d (world size %d)", w.cfg.Rank, run.WorldSize)
	})
	t := time.NewTicker(w.cfg.PollInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return errcode.Wrap(errcode.Canceled, ctx.Err(), "waiting for a reassignment that includes rank %d", w.cfg.Rank)
		case <-t.C:
		}
		cur, err := w.getRun(ctx)
		if err != nil {
			if ctx.Err() != nil || !transient(err) {
				return err
			}
			// No gate answered (down, or electing for longer than the
			// client retries): no news of the run. Ask again at the
			// next poll, until the wait is over.
			if !time.Now().Before(deadline) {
				return errcode.Wrap(errcode.Of(err), err, "rank %d waited %s for a reassignment that includes it, and no gate answered at its end",
					w.cfg.Rank, w.cfg.RankWait)
			}
			w.log.Warn("gate read failed while waiting for a reassignment", "code", errcode.Of(err))
			continue
		}
		if err := runErr(cur); err != nil {
			return err
		}
		if w.cfg.Rank < cur.WorldSize {
			w.set(func(s *Status) { s.State, s.Reason = StateVerifying, "" })
			return nil
		}
		if !time.Now().Before(deadline) {
			return w.rankOutside(cur.WorldSize)
		}
	}
}

// rankOutside is USAGE for a rank whose wait for a reassignment that
// includes it is over.
func (w *Worker) rankOutside(world int) error {
	return errcode.New(errcode.Usage, "rank %d outside run %s's world size %d (waited %s for a reassignment that includes it: --rank-wait)",
		w.cfg.Rank, w.cfg.Run, world, time.Since(w.rankWaitSince).Round(time.Second))
}

// next is what a worker does after waiting at or watching its run.
type next int

const (
	stay     next = iota // nothing changed for this rank
	reattest             // this rank's attestation was dropped: verify and attest again
	left                 // the rank is no longer part of the run (scale-in)
)

// left ends a worker whose rank was removed from the run: fine for a
// sidecar, an error for an init container, whose trainer must not start.
func (w *Worker) left(once bool) error {
	if once {
		return errcode.New(errcode.Usage, "rank %d was removed from run %s before its barrier opened", w.cfg.Rank, w.cfg.Run)
	}
	return nil
}

// runErr turns a failed or cancelled run into an error with its code.
func runErr(run *raftgate.Run) error {
	switch run.State {
	case raftgate.RunFailed:
		code := errcode.Code(run.FailCode)
		if !errcode.Known(code) {
			code = errcode.RunFailed
		}
		return errcode.New(code, "run %s failed: %s", run.ID, run.FailReason)
	case raftgate.RunCancelled:
		return raftgate.CancelledError(run.ID, run.FailReason)
	}
	return nil
}

// prepare pins the run's root, verifies this rank's shards into the cache
// and attests. It returns the run as read before attesting.
func (w *Worker) prepare(ctx context.Context) (*raftgate.Run, error) {
	w.set(func(s *Status) { s.State, s.Code, s.Reason = StateVerifying, "", "" })
	for {
		run, err := w.getRun(ctx)
		if err != nil {
			return nil, err
		}
		if err := runErr(run); err != nil {
			w.countRootMismatch(run)
			return nil, err
		}
		if w.cfg.Rank < 0 {
			return nil, errcode.New(errcode.Usage, "rank %d: ranks start at 0", w.cfg.Rank)
		}
		if w.cfg.Rank >= run.WorldSize {
			if w.joined {
				// Scaled in while it verified again.
				w.set(func(s *Status) { s.State, s.Epoch = StateDone, run.Epoch })
				return nil, errLeft
			}
			if err := w.waitForRank(ctx, run); err != nil {
				return nil, err
			}
			continue
		}
		w.joined = true
		rel, shards, err := w.pin(ctx, run)
		if err != nil {
			return nil, err
		}
		if err := w.verifyAll(ctx, run, rel, shards); err != nil {
			return nil, err
		}
		// A reassignment while we verified changes what we must attest:
		// verify the new assignment instead. A gate that does not answer
		// this read says nothing of the run: the attestation goes out
		// anyway, bound to the epoch verified (the gate answers
		// STALE_EPOCH, changing nothing, if it moved on), and is sent
		// again until the barrier deadline like any attestation the
		// gate did not answer, rather than failing the rank and
		// throwing its verification away.
		cur, err := w.getRun(ctx)
		if err != nil && (!transient(err) || ctx.Err() != nil) {
			return nil, err
		}
		if err != nil {
			w.log.Warn("gate read failed after verifying; attesting at the epoch verified", "code", errcode.Of(err), "epoch", run.Epoch)
		} else if cur.Epoch != run.Epoch {
			w.log.Info("run reassigned while verifying; verifying again", "epoch", cur.Epoch)
			continue
		}
		digests := make([]manifest.Digest, len(shards))
		for i, d := range shards {
			digests[i] = d.Digest
		}
		sum, err := w.attest(ctx, run, digests)
		if errcode.Of(err) == errcode.StaleEpoch {
			w.log.Info("run reassigned before the attestation landed; verifying again", "epoch", run.Epoch)
			continue
		}
		if errcode.Of(err) == errcode.BadInput {
			// A gate cluster below command-schema version 2 checks
			// the rank against the run's world size before the
			// epoch: an attestation of an epoch a scale-in replaced
			// (sent without the read above, which no gate answered,
			// or landing after it) is refused BAD_INPUT, not
			// STALE_EPOCH as from version 2. The run read again says
			// whether the rank is outside the run only at that old
			// epoch.
			if cur, rerr := w.getRun(ctx); rerr == nil && cur.Epoch != run.Epoch {
				w.log.Info("run reassigned before the attestation landed; verifying again", "epoch", cur.Epoch)
				continue
			}
		}
		if err != nil {
			if errcode.Of(err) == errcode.RunFailed {
				// The run failed before this attestation: report why.
				if cur, rerr := w.getRun(ctx); rerr == nil && runErr(cur) != nil {
					w.countRootMismatch(cur)
					return nil, runErr(cur)
				}
			}
			if errcode.Of(err) == errcode.RootMismatch {
				w.cfg.Metrics.RootMismatches.WithLabelValues(run.Root.String()).Inc()
			}
			return nil, fmt.Errorf("attest: %w", err)
		}
		w.attested, w.assigned, w.confirmed = digests, slices.Clone(run.Assignment[w.cfg.Rank]), sum.Epoch
		w.log.Info("attested", "root", run.Root.String(), "epoch", sum.Epoch, "shards", len(digests), "attested", sum.Attested, "world", sum.WorldSize)
		w.set(func(s *Status) { s.State, s.Epoch = StateWaiting, sum.Epoch })
		return run, nil
	}
}

// attest sends this rank's attestation bound to run's epoch. An answer
// lost with the leader (INDETERMINATE), a gate unreachable for longer
// than the client retries (GATE_UNAVAILABLE) or every member named
// halted until it is upgraded (GATE_HALTED) is sent again until the
// run's barrier deadline, or for a minute into a run whose barrier is
// open (a worker restarted into a running run: its deadline passed long
// ago, and an open barrier has none): the same attestation at the same
// epoch is idempotent, and giving up would throw away a verification the
// next start must redo, or leave an init container failed while the gate
// elects a leader.
func (w *Worker) attest(ctx context.Context, run *raftgate.Run, digests []manifest.Digest) (*raftgate.RunSummary, error) {
	deadline := time.Now().Add(time.Minute)
	if run.Barrier != raftgate.BarrierOpen && run.Deadline > 0 {
		deadline = time.UnixMilli(run.Deadline)
	}
	backoff := 200 * time.Millisecond
	for {
		sum, err := w.cfg.Gate.AttestEpoch(ctx, w.cfg.Run, w.cfg.Rank, run.Epoch, run.Root, digests)
		code := errcode.Of(err)
		if err == nil || code != errcode.Indeterminate && code != errcode.GateUnavailable && code != errcode.GateHalted || ctx.Err() != nil || time.Now().After(deadline) {
			return sum, err
		}
		w.log.Warn("attestation outcome unknown; sending it again", "code", code, "epoch", run.Epoch)
		select {
		case <-ctx.Done():
			return sum, err
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// pin reads the run's root manifest by digest and checks it against the
// release the gate registered under that root. It returns this rank's
// shard descriptors in assignment order.
func (w *Worker) pin(ctx context.Context, run *raftgate.Run) (*manifest.Release, []manifest.Shard, error) {
	root := run.Root
	w.set(func(s *Status) { s.Root, s.Generation, s.Epoch = root, run.Generation, run.Epoch })
	// Create every series of this release at zero, so a dashboard sees
	// "no corruption yet" rather than no data.
	label := root.String()
	m := w.cfg.Metrics
	for _, c := range []interface {
		WithLabelValues(...string) prometheus.Counter
	}{m.CacheCorruptions, m.CacheHits, m.CacheKept, m.CacheEvictions, m.CacheEvictedBytes, m.RootMismatches, m.ReadBytes} {
		c.WithLabelValues(label)
	}
	m.BarrierWait.WithLabelValues(label)
	m.VerifiedShardRatio.WithLabelValues(label)
	greg, err := w.cfg.Gate.Release(ctx, root)
	if err != nil {
		return nil, nil, err
	}
	b, _, err := objstore.ReadBlob(ctx, w.cfg.Store, root, manifest.MaxDocumentSize)
	if err != nil {
		return nil, nil, fmt.Errorf("root manifest %s: %w", root, err)
	}
	rel, err := manifest.DecodeRelease(b)
	if err != nil {
		return nil, nil, fmt.Errorf("root manifest %s: %w", root, err)
	}
	if len(rel.Shards) != len(greg.Shards) {
		return nil, nil, errcode.New(errcode.RootMismatch, "root manifest %s lists %d shards, the gate registered %d", root, len(rel.Shards), len(greg.Shards))
	}
	for i, s := range rel.Shards {
		if s.Digest != greg.Shards[i] {
			return nil, nil, errcode.New(errcode.RootMismatch, "root manifest %s shard %d (%s) is %s, the gate registered %s", root, i, s.ID, s.Digest, greg.Shards[i])
		}
	}
	idx := run.Assignment[w.cfg.Rank]
	shards := make([]manifest.Shard, len(idx))
	digests := make([]manifest.Digest, len(idx))
	for i, k := range idx {
		if k < 0 || k >= len(rel.Shards) {
			return nil, nil, errcode.New(errcode.BadInput, "run %s assigns shard index %d of %d", run.ID, k, len(rel.Shards))
		}
		shards[i], digests[i] = rel.Shards[k], rel.Shards[k].Digest
	}
	files := make([]File, len(shards))
	for i, d := range shards {
		files[i] = File{ID: d.ID, Digest: d.Digest, Path: w.cfg.Cache.Path(d.Digest)}
	}
	w.set(func(s *Status) { s.Shards, s.Files, s.Verified = digests, files, 0 })
	w.log.Info("pinned run root", "root", root.String(), "generation", run.Generation, "epoch", run.Epoch, "shards", len(shards))
	return rel, shards, nil
}

// maxListedShardFailures is the most failures a ShardsFailedError's
// message names.
const maxListedShardFailures = 20

// ShardsFailedError lists every assigned shard that failed verification.
// Its code is the first failure's.
type ShardsFailedError struct {
	Root     manifest.Digest
	Failures []error
}

func (e *ShardsFailedError) Error() string {
	// The first maxListedShardFailures, as verify's summary lists the
	// first 20: a rank of thousands of shards makes no line of megabytes
	// (the metrics count them all).
	var msgs []string
	for _, f := range e.Failures[:min(len(e.Failures), maxListedShardFailures)] {
		msgs = append(msgs, f.Error())
	}
	if n := len(e.Failures) - len(msgs); n > 0 {
		msgs = append(msgs, fmt.Sprintf("and %d more", n))
	}
	// "; ", not errors.Join's newlines: the error line escapes them.
	return fmt.Sprintf("%d assigned shard(s) of %s failed verification: %s", len(e.Failures), e.Root, strings.Join(msgs, "; "))
}

// ErrorCode implements errcode.Coder.
func (e *ShardsFailedError) ErrorCode() errcode.Code { return errcode.Of(e.Failures[0]) }

// Unwrap returns the individual failures.
func (e *ShardsFailedError) Unwrap() []error { return e.Failures }

// verifyAll fills the cache with every shard and verifies it, collecting
// every failure rather than stopping at the first.
func (w *Worker) verifyAll(ctx context.Context, run *raftgate.Run, rel *manifest.Release, shards []manifest.Shard) error {
	label := run.Root.String()
	m := w.cfg.Metrics
	m.VerifiedShardRatio.WithLabelValues(label).Set(0)
	// Before any fetch: a bound too small for the rank's shards alone
	// changes nothing, and room is made before the first byte is written.
	adm, err := w.cfg.Cache.Admit(ctx, shards)
	w.countEvicted(label, adm.Eviction.Removed, adm.Eviction.InUse)
	if err != nil {
		w.log.Error("cache cannot hold the rank's shards", "code", errcode.Of(err), "maxBytes", w.cfg.Cache.MaxBytes())
		return err
	}
	if adm.Unlocked > 0 {
		w.log.Warn("more shards than the process may hold locked at once: a bounded worker sharing the cache may evict the rest (raise ulimit -n)", "unlocked", adm.Unlocked, "shards", len(shards))
	}
	if len(shards) == 0 {
		m.VerifiedShardRatio.WithLabelValues(label).Set(1)
		// The entries of an assignment before are no longer this
		// rank's: recheckEntries must not fetch them again.
		w.rel, w.root, w.entries = rel, run.Root, nil
		return nil
	}
	start := time.Now()
	var (
		mu       sync.Mutex
		failures = make([]error, len(shards))
		verified int
		fetched  int64
	)
	// A rank verifying again within one run (a reassignment, or a
	// reattestation after its attestation was dropped) keeps the entries
	// it verified for this root whose files are unchanged since, on the
	// test recheckEntries applies every poll, instead of hashing and
	// decoding them again: a scale-out must not cost every rank a re-read
	// of its whole cache.
	kept := w.keptEntries(run.Root)
	for _, desc := range shards {
		if _, ok := kept[desc.Digest]; ok {
			verified++
			m.CacheKept.WithLabelValues(label).Inc()
		}
	}
	if verified > 0 {
		m.VerifiedShardRatio.WithLabelValues(label).Set(float64(verified) / float64(len(shards)))
		w.set(func(s *Status) { s.Verified = verified })
	}
	sem := make(chan struct{}, w.cfg.Parallelism)
	var wg sync.WaitGroup
	infos := make([]fs.FileInfo, len(shards))
	for i, desc := range shards {
		if _, ok := kept[desc.Digest]; ok {
			continue
		}
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			n, info, err := w.verifyOne(ctx, rel, desc, label)
			mu.Lock()
			defer mu.Unlock()
			fetched += n
			infos[i] = info
			if err != nil {
				failures[i] = err
				m.ShardFailures.WithLabelValues(label, string(errcode.Of(err))).Inc()
				return
			}
			verified++
			m.VerifiedShardRatio.WithLabelValues(label).Set(float64(verified) / float64(len(shards)))
			w.set(func(s *Status) { s.Verified = verified })
		})
	}
	wg.Wait()
	if secs := time.Since(start).Seconds(); fetched > 0 && secs > 0 {
		m.ReadThroughput.WithLabelValues(label).Set(float64(fetched) / secs)
	}
	if err := ctx.Err(); err != nil {
		return errcode.Wrap(errcode.Canceled, err, "verify")
	}
	failed := slices.DeleteFunc(failures, func(e error) bool { return e == nil })
	if len(failed) > 0 {
		return &ShardsFailedError{Root: run.Root, Failures: failed}
	}
	// Each entry is the file verified, whatever the path holds now: a
	// stat taken here, after every shard, took a file damaged since its
	// own verification (while the others were fetched) for the verified
	// one, and neither the attestation nor recheckEntries looked at it
	// again.
	entries := make([]entry, 0, len(shards))
	for i, desc := range shards {
		if e, ok := kept[desc.Digest]; ok {
			entries = append(entries, entry{desc: desc, info: e.info})
			continue
		}
		entries = append(entries, entry{desc: desc, info: infos[i]})
	}
	w.rel, w.root, w.entries = rel, run.Root, entries
	// What is attested is what the cache holds now: every entry changed
	// since it was verified is verified again first.
	if err := w.reverifyChanged(ctx, false); err != nil {
		return err
	}
	w.log.Info("verified assigned shards", "root", label, "shards", len(shards), "kept", len(kept), "readBytes", fetched, "seconds", time.Since(start).Seconds())
	return nil
}

// keptEntries returns, by digest, the entries this worker verified for
// root whose cache files are unchanged since; none for another root.
func (w *Worker) keptEntries(root manifest.Digest) map[manifest.Digest]entry {
	if w.rel == nil || w.root != root {
		return nil
	}
	kept := make(map[manifest.Digest]entry, len(w.entries))
	for _, e := range w.entries {
		if info, err := os.Lstat(w.cfg.Cache.Path(e.desc.Digest)); err == nil && e.unchanged(info) {
			kept[e.desc.Digest] = e
		}
	}
	return kept
}

// maxEntryChanges is how many times verifyOne verifies an entry again
// that changed while its content was verified, before it fails.
const maxEntryChanges = 3

// verifyOne fills the cache with one shard and verifies its content, and
// returns the file verified. A fetch that fails its size check is retried
// once: a torn download is transient, a wrong digest at an immutable
// version is not. An entry that is no longer the file Fill verified once
// its content is verified, or failed to be (the content verifier read
// another file: its failure says nothing of the shard), is verified
// again, up to maxEntryChanges times, then fails with IO.
func (w *Worker) verifyOne(ctx context.Context, rel *manifest.Release, desc manifest.Shard, label string) (int64, fs.FileInfo, error) {
	var total int64
	path := w.cfg.Cache.Path(desc.Digest)
	for changes := 0; ; changes++ {
		n, info, verr := w.verifyOnce(ctx, rel, desc, label)
		total += n
		if info == nil {
			return total, nil, verr
		}
		now, err := os.Lstat(path)
		if err == nil && (entry{info: info}).unchanged(now) {
			if verr != nil {
				w.log.Error("shard content failed", "shard", desc.ID, "digest", desc.Digest.String(), "code", errcode.Of(verr))
				return total, nil, fmt.Errorf("%s: %w", desc.ID, verr)
			}
			return total, info, nil
		}
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return total, nil, errcode.Wrap(errcode.IO, err, "cache entry of %s", desc.ID)
		}
		if ctx.Err() != nil {
			return total, nil, errcode.Wrap(errcode.Canceled, ctx.Err(), "verify %s", desc.ID)
		}
		if changes+1 == maxEntryChanges {
			return total, nil, errcode.New(errcode.IO, "%s: cache entry %s changed while it was verified, %d times: another process writes the cache", desc.ID, path, maxEntryChanges)
		}
		w.log.Warn("cache entry changed while it was verified; verifying it again", "shard", desc.ID, "digest", desc.Digest.String())
	}
}

// verifyOnce is one round of verifyOne: the file Fill verified (nil when
// Fill failed) and the content verifier's error.
func (w *Worker) verifyOnce(ctx context.Context, rel *manifest.Release, desc manifest.Shard, label string) (int64, fs.FileInfo, error) {
	m := w.cfg.Metrics
	var (
		total int64
		info  fs.FileInfo
	)
	for attempt := 0; ; attempt++ {
		res, err := w.cfg.Cache.Fill(ctx, w.cfg.Store, desc)
		total += res.Fetched
		m.ReadBytes.WithLabelValues(label).Add(float64(res.Fetched))
		if res.Corrupt {
			m.CacheCorruptions.WithLabelValues(label).Inc()
			w.log.Warn("corrupt cache entry refetched", "shard", desc.ID, "digest", desc.Digest.String(), "code", res.Code, "detail", res.Reason)
		}
		if res.Hit {
			m.CacheHits.WithLabelValues(label).Inc()
		}
		w.countEvicted(label, res.Evicted, nil)
		if err != nil {
			if attempt == 0 && errcode.Of(err) == errcode.SizeMismatch && ctx.Err() == nil {
				w.log.Warn("short read, fetching again", "shard", desc.ID, "digest", desc.Digest.String(), "code", errcode.SizeMismatch)
				continue
			}
			w.log.Error("shard failed", "shard", desc.ID, "digest", desc.Digest.String(), "version", desc.ObjectVersion, "code", errcode.Of(err))
			return total, nil, err
		}
		info = res.Info
		break
	}
	if w.cfg.Verify != nil {
		return total, info, w.cfg.Verify(ctx, w.cfg.Cache.Path(desc.Digest), rel, desc)
	}
	return total, info, nil
}

// countEvicted counts and logs the entries a bounded cache evicted to
// make room for this rank's shards, and those it skipped as in use.
func (w *Worker) countEvicted(label string, removed, inUse []CacheEntry) {
	if len(removed) == 0 && len(inUse) == 0 {
		return
	}
	m := w.cfg.Metrics
	bytes := sizeOf(removed)
	m.CacheEvictions.WithLabelValues(label).Add(float64(len(removed)))
	m.CacheEvictedBytes.WithLabelValues(label).Add(float64(bytes))
	for _, e := range removed {
		w.log.Debug("cache entry evicted", "digest", e.Digest.String(), "bytes", e.Size, "used", e.Used.UTC())
	}
	w.log.Info("cache entries evicted", "entries", len(removed), "bytes", bytes, "inUse", len(inUse), "maxBytes", w.cfg.Cache.MaxBytes())
}

// wait waits at the barrier and records how long it took. It waits in
// slices and re-reads the run between them, so a reassignment that drops
// this rank's attestation while it waits (a scale-out during startup) is
// answered by attesting again, not by waiting for the deadline.
func (w *Worker) wait(ctx context.Context, run *raftgate.Run) (next, error) {
	start := time.Now()
	label := run.Root.String()
	slice := max(5*w.cfg.PollInterval, 2*time.Second)
	deadline := run.Deadline // the leader's clock, in ms
	grace := w.cfg.DeadlineGrace
	if grace <= 0 {
		grace = time.Minute
	}
	for {
		wctx, cancel := context.WithTimeout(ctx, slice)
		sum, err := w.cfg.Gate.WaitRun(wctx, w.cfg.Run)
		sliceOver := wctx.Err() != nil
		cancel()
		w.cfg.Metrics.BarrierWait.WithLabelValues(label).Set(time.Since(start).Seconds())
		if err == nil && sum.Epoch == w.confirmed {
			w.log.Info("barrier open", "root", label, "epoch", sum.Epoch, "waited", time.Since(start).Seconds())
			err := w.barrierOpen(ctx, sum.Epoch, sum.Permit)
			if err == nil || !transient(err) || ctx.Err() != nil {
				return stay, err
			}
			// Not ready until the permit is known: ask again.
			w.log.Warn("gate read failed with the barrier open", "code", errcode.Of(err))
			w.pause(ctx)
			continue
		}
		if ctx.Err() != nil {
			return stay, errcode.Wrap(errcode.BarrierClosed, ctx.Err(), "run %s: stopped waiting at the barrier after %s", w.cfg.Run, time.Since(start).Round(time.Millisecond))
		}
		// A slice that ended without an answer, or a gate that stayed
		// down or electing for longer than the client retries (which
		// may be shorter than a slice: --poll 5s makes 25 s slices), is
		// no news either: the run's deadline decides.
		if code := errcode.Of(err); err != nil && code != errcode.BarrierClosed && code != errcode.GateUnavailable && code != errcode.GateHalted && !(sliceOver && code == errcode.Canceled) {
			if code == errcode.RootMismatch {
				w.cfg.Metrics.RootMismatches.WithLabelValues(label).Inc()
			}
			return stay, err
		}
		// The slice ended without news, or the barrier opened at an
		// epoch since the one this rank's attestation was last seen at.
		// The run's own deadline decides when waiting is over;
		// meanwhile check this rank still belongs, and that the run
		// still holds this worker's attestation.
		cur, err := w.getRun(ctx)
		switch {
		case err != nil:
			w.log.Warn("gate read failed while waiting", "code", errcode.Of(err))
			if past := time.Since(time.UnixMilli(deadline)); deadline > 0 && past > grace {
				return stay, errcode.Wrap(errcode.GateUnavailable, err, "run %s: its barrier deadline passed %s ago and no gate has answered since (the gate fails such a run with BARRIER_TIMEOUT)",
					w.cfg.Run, past.Round(time.Second))
			}
			if !sliceOver {
				// The gate gave up at once (a client that does not
				// retry, every member refusing connections): wait a
				// poll before asking again instead of spinning.
				w.pause(ctx)
			}
		case runErr(cur) != nil:
			w.countRootMismatch(cur)
			return stay, runErr(cur)
		case w.cfg.Rank >= cur.WorldSize:
			w.set(func(s *Status) { s.State, s.Epoch = StateDone, cur.Epoch })
			return left, nil
		case !w.attestedHere(cur):
			w.log.Info("reassigned while waiting; attesting again", "epoch", cur.Epoch)
			return reattest, nil
		default:
			w.confirmed, deadline = cur.Epoch, cur.Deadline
		}
	}
}

// attestedHere reports whether run assigns this worker's rank the shard
// indices it verified, in the same order (the order of Status.Files),
// and holds an attestation of the shards this worker attested (in any
// order). One of another list was sent by another process for the same
// rank after a reassignment changed its shards; one of the same list
// after a reassignment that reordered them.
func (w *Worker) attestedHere(run *raftgate.Run) bool {
	a := run.Attestations[w.cfg.Rank]
	if a == nil || len(a.Shards) != len(w.attested) || !slices.Equal(run.Assignment[w.cfg.Rank], w.assigned) {
		return false
	}
	n := make(map[manifest.Digest]int, len(w.attested))
	for _, d := range w.attested {
		n[d]++
	}
	for _, d := range a.Shards {
		if n[d]--; n[d] < 0 {
			return false
		}
	}
	return true
}

// pause waits one poll interval, or until ctx ends.
func (w *Worker) pause(ctx context.Context) {
	t := time.NewTimer(w.cfg.PollInterval)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// countRootMismatch counts a run that failed because of a root mismatch.
func (w *Worker) countRootMismatch(run *raftgate.Run) {
	if run.FailCode == string(errcode.RootMismatch) {
		w.cfg.Metrics.RootMismatches.WithLabelValues(run.Root.String()).Inc()
	}
}

// transient reports whether err says nothing of the run: no gate
// answered (down, electing, unreachable), every member the worker names
// halted until it is upgraded (GATE_HALTED: it used to answer NOT_LEADER,
// which the client retried into GATE_UNAVAILABLE), or the request was
// cut short.
func transient(err error) bool {
	switch errcode.Of(err) {
	case errcode.GateUnavailable, errcode.GateHalted, errcode.NotLeader, errcode.Canceled:
		return true
	}
	return false
}

// barrierOpen sets the worker READY at epoch, or BLOCKED while the run's
// permit is not open (a fence advanced past it) until a recheck renews
// it. The permit is read first and the state set once: READY is never
// claimed (the ready file written, /readyz green) for a run whose permit
// is closed. On an error the state is left as it was.
func (w *Worker) barrierOpen(ctx context.Context, epoch uint64, id string) error {
	p, err := w.cfg.Gate.Permit(ctx, id)
	if errcode.Of(err) == errcode.UnknownPermit {
		return errcode.Wrap(errcode.Internal, err, "run permit %s not found", id)
	}
	if err != nil {
		return err
	}
	if p.State == raftgate.PermitOpen {
		w.set(func(s *Status) { s.State, s.Epoch, s.Code, s.Reason = StateReady, epoch, "", "" })
		return nil
	}
	w.log.Warn("run permit not open", "permit", id, "state", p.State, "reason", p.Reason, "code", errcode.PermitClosed)
	w.set(func(s *Status) {
		s.State, s.Epoch, s.Code, s.Reason = StateBlocked, epoch, string(errcode.PermitClosed), fmt.Sprintf("permit %s is %s (%s)", id, p.State, p.Reason)
	})
	return nil
}

// watch re-reads the run once and follows it: a failed run is an error,
// a dropped attestation means attest again, a closed barrier (another rank
// was reset) means wait again, and the permit decides READY or BLOCKED.
func (w *Worker) watch(ctx context.Context) (next, error) {
	run, err := w.getRun(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return stay, nil
		}
		if code := errcode.Of(err); code == errcode.RunPruned || code == errcode.UnknownRun {
			// Not an unreachable gate: one answered that the run is
			// gone (cancelled or failed, then pruned between two polls)
			// or never was. Staying ready would let the trainer step on
			// a run whose permit is released, for good.
			return stay, err
		}
		// A gate that is briefly unreachable does not change what this
		// rank verified; keep the last state and ask again next tick.
		w.log.Warn("gate read failed", "code", errcode.Of(err))
		return stay, nil
	}
	if err := runErr(run); err != nil {
		w.countRootMismatch(run)
		return stay, err
	}
	if w.cfg.Rank >= run.WorldSize {
		w.log.Info("rank left the run", "world", run.WorldSize, "epoch", run.Epoch)
		w.set(func(s *Status) { s.State, s.Epoch = StateDone, run.Epoch })
		return left, nil
	}
	if !w.attestedHere(run) {
		w.log.Info("rank must attest again", "epoch", run.Epoch)
		return reattest, nil
	}
	w.confirmed = run.Epoch
	if run.Barrier != raftgate.BarrierOpen {
		w.set(func(s *Status) { s.State, s.Epoch = StateWaiting, run.Epoch })
		return w.wait(ctx, run)
	}
	if err := w.barrierOpen(ctx, run.Epoch, run.Permit); err != nil {
		if ctx.Err() != nil {
			return stay, nil
		}
		if !transient(err) {
			return stay, err
		}
		// As for the run itself: a gate briefly unreachable changes
		// nothing; keep the last state and ask again next tick.
		w.log.Warn("gate read failed", "code", errcode.Of(err))
	}
	return stay, nil
}

// recheckEntries stats every verified cache entry and verifies again, with
// the worker not ready meanwhile, each one that is no longer the file it
// verified: deleted, replaced, truncated or written to (another size, file
// or modification time). Cache.Fill re-hashes it and fetches it again when
// its bytes are wrong, which counts as a cache corruption; an entry merely
// replaced by the same bytes (another worker sharing the cache filled it
// again) is kept. It costs a stat per entry per poll, so a sidecar that
// stays ready for a week notices a damaged entry within one poll rather
// than never; a change that keeps size and time (a write that resets
// mtime) is not seen, and an entry's bytes are not re-hashed while they
// look unchanged.
func (w *Worker) recheckEntries(ctx context.Context) error { return w.reverifyChanged(ctx, true) }

// reverifyChanged verifies again every entry that is no longer the file
// it verified. While ready (a sidecar's poll) the worker is VERIFYING
// meanwhile and a cancelled ctx is no failure; before attesting it is
// VERIFYING already, and a cancelled ctx is CANCELED.
func (w *Worker) reverifyChanged(ctx context.Context, ready bool) error {
	for i := range w.entries {
		e := &w.entries[i]
		info, err := os.Lstat(w.cfg.Cache.Path(e.desc.Digest))
		if err == nil && e.unchanged(info) {
			continue
		}
		what := "changed"
		if errors.Is(err, fs.ErrNotExist) {
			what = "missing"
		} else if err != nil {
			return errcode.Wrap(errcode.IO, err, "cache entry of %s", e.desc.ID)
		}
		var prev Status
		if ready {
			w.set(func(s *Status) {
				prev = *s
				s.State, s.Code, s.Reason = StateVerifying, "", fmt.Sprintf("cache entry of %s %s while ready; verifying it again", e.desc.ID, what)
			})
			w.log.Warn("cache entry "+what+" while ready; verifying it again", "shard", e.desc.ID, "digest", e.desc.Digest.String())
		} else {
			w.log.Warn("cache entry "+what+" since it was verified; verifying it again", "shard", e.desc.ID, "digest", e.desc.Digest.String())
		}
		_, info, err = w.verifyOne(ctx, w.rel, e.desc, w.root.String())
		if err != nil {
			if ctx.Err() != nil {
				if ready {
					return nil
				}
				return errcode.Wrap(errcode.Canceled, ctx.Err(), "verify")
			}
			if !ready {
				w.cfg.Metrics.ShardFailures.WithLabelValues(w.root.String(), string(errcode.Of(err))).Inc()
				return &ShardsFailedError{Root: w.root, Failures: []error{err}}
			}
			return err
		}
		e.info = info
		if ready {
			w.set(func(s *Status) {
				if s.State == StateVerifying {
					s.State, s.Code, s.Reason = prev.State, prev.Code, prev.Reason
				}
			})
		}
	}
	return nil
}

// getRun reads the worker's run from the gate. The worker indexes its
// lists by rank, so a run whose assignment or attestations do not have
// one entry per rank of its world size (not a gate's answer, or a broken
// gate's) is BAD_DOCUMENT here rather than an index out of range later.
func (w *Worker) getRun(ctx context.Context) (*raftgate.Run, error) {
	run, err := w.cfg.Gate.Run(ctx, w.cfg.Run)
	if err != nil {
		return nil, err
	}
	if run.WorldSize < 0 || len(run.Assignment) != run.WorldSize || len(run.Attestations) != run.WorldSize {
		return nil, errcode.New(errcode.BadDocument, "gate answer for run %s: world size %d with %d assignments and %d attestations",
			w.cfg.Run, run.WorldSize, len(run.Assignment), len(run.Attestations))
	}
	return run, nil
}
