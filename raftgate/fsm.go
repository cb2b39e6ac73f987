package raftgate

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/hashicorp/raft"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
)

// Result is what Apply returns for one command: a view of the state it
// changed and, for a rejection, a coded error. Some rejections change state
// on purpose (an attestation of a foreign root fails the run), so Value is
// set even when Err is.
type Result struct {
	Value any
	Err   error
}

// FSM is the gate's replicated state machine.
//
// Apply MUST be deterministic: it reads nothing but the state and the
// command (no clock, no store, no randomness) and iterates maps in sorted
// order, so every replica applying the same log holds the same state and
// produces byte-identical snapshots.
type FSM struct {
	mu    sync.RWMutex
	state *State
	// index is the Raft log index of the last command applied, 0 before
	// the first and after a restore (a snapshot's index is not passed to
	// the FSM): replicas with the same non-zero index hold the same state.
	index uint64
	// runsDropped counts the applies and restores that dropped runs from
	// the state (this member's, not replicated): metrics.forget walks the
	// runs only once it moved.
	runsDropped uint64
	// changed is closed and replaced after every apply and restore, so
	// waiters (run wait) learn about changes without polling.
	changed chan struct{}
	// decode decodes a log entry: DecodeCommand (tests stand in a newer
	// build's decoder for some members).
	decode func([]byte) (Command, error)
	// halted is set at the first committed entry this build cannot
	// decode, and haltCh closed then; from there on nothing is applied
	// and no snapshot is taken (see HaltError).
	halted *HaltError
	haltCh chan struct{}
	// version is the highest command-schema version this build applies:
	// CommandVersion (tests lower it to stand in an older build).
	version uint64
	// onClusterID, if set, is called, under the lock, with the state's
	// cluster identity after an apply of a raise and after a restore
	// that leave the state one (the node keeps it in its data
	// directory and checks Raft connections against it).
	onClusterID func(string)
}

// HaltError is why an FSM stopped applying its log: the committed entry at
// Index does not decode with this build, most likely a command with a field
// or a type that a newer build added, written by a leader running it.
// Applying nothing of it while going on with the entries after it, as this
// FSM did, left the member's state apart from the others' for good, and
// it answered from that state once it led. It stops instead, at the state
// before the entry, and its node leaves the cluster (see Node.Halted):
// upgraded, the member replays the entry and goes on.
//
// Snapshot is set when what does not decode is a snapshot (the leader's,
// sent to a member too far behind for its log, or the member's own newest
// one at start): Index is then 0, and the state is the one before.
type HaltError struct {
	Index    uint64
	Snapshot bool
	Err      error
}

func (e *HaltError) Error() string {
	if v := (*VersionError)(nil); errors.As(e.Err, &v) {
		at := fmt.Sprintf("at entry %d, which raised the cluster's command-schema version to %d", e.Index, v.Cluster)
		if e.Snapshot {
			at = fmt.Sprintf("at a snapshot of the gate's state of command-schema version %d", v.Cluster)
		}
		return fmt.Sprintf("%s: this gate member stopped %s: its build applies versions up to %d, and a cluster never goes back to a lower version; upgrade this member to a build of version %d or later (gate status prints a build's version) and restart it on the same data directory",
			errcode.GateHalted, at, v.Build, v.Cluster)
	}
	if e.Snapshot {
		return fmt.Sprintf("%s: this gate member stopped: a snapshot of the gate's state does not decode with this build (%v); it serves no client: upgrade it to the other members' build and restart it on its data directory",
			errcode.GateHalted, e.Err)
	}
	return fmt.Sprintf("%s: this gate member stopped applying the log at entry %d, a committed command this build cannot decode (%v); it serves no client: upgrade it to the other members' build and restart it on its data directory, where it applies entry %d and catches up",
		errcode.GateHalted, e.Index, e.Err, e.Index)
}

// ErrorCode implements errcode.Coder.
func (e *HaltError) ErrorCode() errcode.Code { return errcode.GateHalted }

func (e *HaltError) Unwrap() error { return e.Err }

var _ raft.FSM = (*FSM)(nil)

// NewFSM returns an FSM holding an empty state.
func NewFSM() *FSM {
	return &FSM{state: NewState(), changed: make(chan struct{}), decode: DecodeCommand, haltCh: make(chan struct{}), version: CommandVersion}
}

// Halted returns a channel closed when the FSM halts, and the reason
// (nil while it applies).
func (f *FSM) Halted() (<-chan struct{}, *HaltError) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.haltCh, f.halted
}

// Apply implements raft.FSM. It returns a *Result for command entries.
func (f *FSM) Apply(l *raft.Log) any {
	if l.Type != raft.LogCommand {
		return nil
	}
	return f.applyBytes(l.Data, l.Index)
}

// ApplyBytes decodes and applies one encoded command.
func (f *FSM) ApplyBytes(data []byte) *Result { return f.applyBytes(data, 0) }

func (f *FSM) applyBytes(data []byte, index uint64) *Result {
	c, err := f.decode(data)
	if _, raise := c.(*SetClusterVersion); err == nil && !raise {
		if v := commandVersion(c); v > f.version {
			// What a build of that version meets: a field it does not
			// know. (A raise above it halts in apply, saying so.)
			err = errcode.New(errcode.BadDocument, "%s command of command-schema version %d; this build applies versions up to %d", commandType(c), v, f.version)
		}
	}
	if err != nil {
		if index == 0 {
			return &Result{Err: err}
		}
		// Every entry was encoded by a leader from a command it decoded,
		// so an entry this build cannot decode is another build's.
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.halted == nil {
			f.halted = &HaltError{Index: index, Err: err}
			close(f.haltCh)
		}
		return &Result{Err: f.halted}
	}
	return f.apply(c, index)
}

// ApplyCommand applies one decoded command.
func (f *FSM) ApplyCommand(c Command) *Result { return f.apply(c, 0) }

// apply applies c, the command at log index (0: not from the log).
func (f *FSM) apply(c Command, index uint64) *Result {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.halted != nil && index > 0 {
		// The entries after one it could not apply: applying them
		// would build a state no other member holds.
		return &Result{Err: f.halted}
	}
	if v, ok := c.(*SetClusterVersion); ok && v.Version > f.version {
		// The entries after it may hold what this build cannot apply.
		verr := &VersionError{Cluster: v.Version, Build: f.version}
		if index == 0 {
			return &Result{Err: verr}
		}
		f.halted = &HaltError{Index: index, Err: verr}
		close(f.haltCh)
		return &Result{Err: f.halted}
	}
	defer f.notify()
	if index > 0 {
		f.index = index
	}
	a := applier{s: f.state, now: c.header().Now}
	var v any
	var err error
	switch c := c.(type) {
	case *Register:
		v, err = a.register(c)
	case *RecheckCmd:
		v, err = a.recheck(c)
	case *Publish:
		v, err = a.publish(c)
	case *Rollback:
		v, err = a.rollback(c)
	case *AdvanceFence:
		v, err = a.advanceFence(c)
	case *CreateRun:
		v, err = a.createRun(c)
	case *Attest:
		v, err = a.attest(c)
	case *CheckBarrier:
		v, err = a.checkBarrier(c)
	case *Reassign:
		v, err = a.reassign(c)
	case *AdmitCheckpoint:
		v, err = a.admitCheckpoint(c)
	case *CancelRun:
		v, err = a.cancelRun(c)
	case *Join:
		v, err = a.join(c)
	case *Prune:
		v, err = a.prune(c)
	case *SetClusterVersion:
		v, err = a.setClusterVersion(c)
		if f.onClusterID != nil && f.state.ClusterID != "" {
			f.onClusterID(f.state.ClusterID)
		}
	default:
		err = errcode.New(errcode.BadDocument, "unknown command %T", c)
	}
	if p, ok := v.(PruneResult); ok && len(p.Runs) > 0 {
		f.runsDropped++
	}
	return &Result{Value: v, Err: err}
}

// notify wakes everyone waiting for a change. Callers hold f.mu.
func (f *FSM) notify() {
	close(f.changed)
	f.changed = make(chan struct{})
}

// Read calls fn with the current state under a read lock. fn MUST NOT keep
// references into the state after it returns, nor modify it.
func (f *FSM) Read(fn func(*State)) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	fn(f.state)
}

// readAt is Read that also passes the log index of the last command the
// state reflects (as Digest reports it), taken under the same lock.
func (f *FSM) readAt(fn func(s *State, index uint64)) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	fn(f.state, f.index)
}

// Changed returns a channel closed at the next change of state.
func (f *FSM) Changed() <-chan struct{} {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.changed
}

// Digest returns the sha256 of the state's snapshot bytes and the log
// index of the last command it reflects (0 if unknown: nothing applied
// since start-up or a restore). Replicas that report the same non-zero
// index must report the same digest; `gate status --digest` shows both so
// an operator can compare members.
func (f *FSM) Digest() (index uint64, d manifest.Digest, err error) {
	s, index := f.capture()
	b, err := EncodeState(s)
	if err != nil {
		return 0, manifest.Digest{}, err
	}
	return index, manifest.Sum(b), nil
}

// capture returns a copy of the current state (cloneState), taken under
// the lock, and the index of the last command it reflects. Encoding the
// state under the lock held up every Apply while it ran: at 30 releases
// of 30,000 shards retained, a 139 MB state, seconds.
func (f *FSM) capture() (*State, uint64) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return cloneState(f.state), f.index
}

// Snapshot implements raft.FSM. Raft calls it between Applies and then
// Persist concurrently with later ones: it copies the state
// (cloneState), which Persist encodes. Encoding here held up the Applies
// behind it for as long as the encoding took (seconds for a state of
// 30 releases of 30,000 shards: BenchmarkReleaseScale).
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	if _, h := f.Halted(); h != nil {
		// Raft would label it with the index of the last entry it
		// handed over, which this state does not reflect.
		return nil, h
	}
	s, _ := f.capture()
	return &snapshot{s: s}, nil
}

// Encode returns the snapshot bytes of the current state.
func (f *FSM) Encode() ([]byte, error) {
	s, _ := f.capture()
	return EncodeState(s)
}

// EncodeState returns the snapshot bytes of s: JSON with sorted map keys.
func EncodeState(s *State) ([]byte, error) {
	b, err := json.Marshal(s)
	if err != nil {
		return nil, errcode.Wrap(errcode.Internal, err, "encode gate state")
	}
	return b, nil
}

// MaxStateSize bounds a gate state's encoding: what Restore reads, and a
// backup.
const MaxStateSize = 1 << 30

// Restore implements raft.FSM: it strictly decodes and validates a snapshot
// and replaces the state with it.
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, MaxStateSize+1))
	if err != nil {
		return errcode.Wrap(errcode.IO, err, "read gate snapshot")
	}
	s, err := DecodeState(b)
	if err == nil && s.ClusterVersion > f.version {
		err = &VersionError{Cluster: s.ClusterVersion, Build: f.version}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err != nil {
		// Raft kept the snapshot and would ask for it again and again,
		// or go on from an older one: the member would serve a state
		// that is not the cluster's. A snapshot, like an entry, was
		// written by a build that decoded it.
		if f.halted == nil {
			f.halted = &HaltError{Snapshot: true, Err: err}
			close(f.haltCh)
		}
		return err
	}
	if f.halted != nil {
		return f.halted
	}
	f.state, f.index = s, 0
	f.runsDropped++
	f.notify()
	if f.onClusterID != nil && s.ClusterID != "" {
		f.onClusterID(s.ClusterID)
	}
	return nil
}

// DecodeState strictly decodes and validates snapshot bytes.
func DecodeState(b []byte) (*State, error) {
	if len(b) > MaxStateSize {
		return nil, errcode.New(errcode.DocumentTooLarge, "gate snapshot exceeds %d bytes", MaxStateSize)
	}
	// Decoded into a state with no tables, not NewState's empty ones: a
	// gate always writes every table, so one missing is no gate state
	// ("{}" or "null" founded an empty gate on restore).
	s := &State{}
	if err := manifest.DecodeJSON(b, s, MaxStateSize); err != nil {
		if errcode.Of(err) == errcode.Internal {
			return nil, err
		}
		return nil, errcode.Wrap(errcode.BadDocument, err, "decode gate snapshot")
	}
	if err := s.Validate(); err != nil {
		return nil, errcode.Wrap(errcode.BadDocument, err, "gate snapshot")
	}
	return s, nil
}

// DecodeBackup decodes a gate backup (the bytes of GET /v1/state) as
// DecodeState decodes a snapshot: strictly, by the manifests' rules
// (manifest.DecodeJSON), so a duplicate key, which encoding/json resolves
// to the last one (a backup whose fences read "tombstone":7,"tombstone":0
// founded a gate at fence 0, and one with a second, empty "aliases" a gate
// whose aliases started again at generation 1), a key that matches a
// field only case-insensitively, or a null where a gate writes a value
// ("fences":null founded a gate at fences 0) is BAD_DOCUMENT.
func DecodeBackup(b []byte) (*State, error) { return DecodeState(b) }

// snapshot is a copy of the state Snapshot took, no Apply changes.
type snapshot struct{ s *State }

func (s *snapshot) Persist(sink raft.SnapshotSink) error {
	b, err := EncodeState(s.s)
	if err != nil {
		sink.Cancel()
		return err
	}
	if _, err := sink.Write(b); err != nil {
		sink.Cancel()
		return fmt.Errorf("write gate snapshot: %w", err)
	}
	return sink.Close()
}

func (s *snapshot) Release() {}
