package raftgate

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/shardproof/shardproof/evidence"
	"github.com/shardproof/shardproof/manifest"
)

// Release states. See doc.go for the transitions.
const (
	ReleaseStaged    = "STAGED"
	ReleaseVerified  = "VERIFIED"
	ReleaseInvalid   = "INVALID"
	ReleasePublished = "PUBLISHED"
	ReleaseRetired   = "RETIRED"
)

// Permit kinds and states.
const (
	PermitPublish  = "publish"
	PermitRollback = "rollback"
	PermitRun      = "run"

	PermitOpen       = "OPEN"
	PermitClosed     = "CLOSED"
	PermitSuperseded = "SUPERSEDED"
	PermitReleased   = "RELEASED"
)

// Run states and barrier states.
const (
	RunWaiting   = "WAITING"
	RunRunning   = "RUNNING"
	RunFailed    = "FAILED"
	RunCancelled = "CANCELLED"

	BarrierClosed = "CLOSED"
	BarrierOpen   = "OPEN"
)

// Fence kinds.
const (
	FenceTombstone = "tombstone"
	FenceBenchmark = "benchmark"
)

// Limits that keep a hostile command from exhausting memory inside Apply.
const (
	// MaxWorldSize bounds a run's number of ranks.
	MaxWorldSize = 1 << 16
	// MaxRetain bounds an alias's rollback window.
	MaxRetain = 1024
	// DefaultRetain is the rollback window of an alias created without one.
	DefaultRetain = 8
	// DefaultBarrierTimeoutMs is a run's barrier deadline when createRun
	// gives none: ten minutes.
	DefaultBarrierTimeoutMs = 10 * 60 * 1000
	// MaxBarrierTimeoutMs bounds a run's barrier timeout: ten years.
	// Apply adds it to the leader's clock (createRun, reassign), and a
	// timeout near the int64 limit made a deadline that wrapped negative,
	// so the run's first attestation or the sweep failed it with
	// BARRIER_TIMEOUT at once. A node refuses a createRun above it before
	// proposing it (checkProposal): entries already in logs replay as
	// they applied.
	MaxBarrierTimeoutMs = 10 * 365 * 24 * 60 * 60 * 1000
)

// State is the whole replicated state of the gate. Its JSON encoding is the
// snapshot format (maps marshal with sorted keys, slices keep their order),
// so the same command log always yields byte-identical snapshots.
type State struct {
	Releases map[string]*Release `json:"releases"`
	Aliases  map[string]*Alias   `json:"aliases"`
	Fences   Fences              `json:"fences"`
	Permits  map[string]*Permit  `json:"permits"`
	Runs     map[string]*Run     `json:"runs"`
	// PrunedRuns are what prune leaves of the runs it deletes, so a run
	// ID is never reused: a createRun retried after its run was pruned
	// must not resolve the alias a second time. Omitted while empty, so
	// a gate that never pruned a run encodes its state as before.
	PrunedRuns map[string]*PrunedRun `json:"prunedRuns,omitempty"`
	// Nodes maps a Raft server ID to its addresses, recorded by join
	// commands, so a follower can forward writes to the leader's HTTP API.
	Nodes map[string]*NodeInfo `json:"nodes"`
	// NextPermit numbers permits; IDs are deterministic ("p-000001").
	NextPermit uint64 `json:"nextPermit"`
	// ClusterVersion is the command-schema version (see CommandVersion)
	// every member's build applies, as a leader last raised it with
	// SetClusterVersion; it never goes down. Nothing of a higher version
	// is proposed. It is the version of the snapshot's format too, and is
	// omitted at 0: a state at the baseline encodes as the builds before
	// the version handshake wrote it, and they decode it.
	ClusterVersion uint64 `json:"clusterVersion,omitempty"`
	// ClusterID is the cluster's identity (see identity.go), which Raft
	// connections between members carry: 32 lowercase hex digits, set
	// with the cluster version versionClusterID (by the raise to it, or
	// by a restore) and never changed. Omitted while unset, so a state
	// below that version encodes as the builds before it wrote it.
	ClusterID string `json:"clusterID,omitempty"`
}

// Fences are the two monotonic watermarks, each with the prefix digest
// (manifest.FenceLog.PrefixDigest) at its value of the log it was
// advanced with. The gate never reads a log: a client that checks a report
// against the fences computes the prefix digest of the log the report
// names at the fence and refuses one that differs (FENCE_LOG_MISMATCH).
// A log digest is zero for a fence advanced without one (before
// command-schema version 4, or by a bare "gate fence KIND VALUE"): then
// no log can be checked against that fence. Both are omitted while zero,
// so a state without them encodes as before.
type Fences struct {
	Tombstone uint64 `json:"tombstone"`
	Benchmark uint64 `json:"benchmark"`
	// TombstoneLog is the tombstone log's prefix digest at Tombstone.
	TombstoneLog manifest.Digest `json:"tombstoneLog,omitzero"`
	// BenchmarkLog is the benchmark registry's prefix digest at Benchmark.
	BenchmarkLog manifest.Digest `json:"benchmarkLog,omitzero"`
}

// Release is what the gate knows of one root manifest. The gate never reads
// the store: everything here came in a register or recheck command.
type Release struct {
	Root  manifest.Digest `json:"root"`
	State string          `json:"state"`
	// Shards are the release's shard digests in manifest order; a run's
	// assignment names indices into this list.
	Shards []manifest.Digest `json:"shards"`
	// Report is the digest of the latest report that set the fields below.
	Report manifest.Digest `json:"report,omitzero"`
	// VerifiedBy are the IDs (evidence.KeyID) of the trusted keys whose
	// signatures of Report's evidence the leader checked when it logged
	// the register, sorted; none for a report registered unsigned, at a
	// gate without verifier keys, or below cluster version
	// versionSigners. A register of the same report again (a retry)
	// records its signers when the release records none. Omitted while
	// empty.
	VerifiedBy         []string        `json:"verifiedBy,omitempty"`
	DatasetSnapshot    manifest.Digest `json:"datasetSnapshot,omitzero"`
	TombstoneWatermark uint64          `json:"tombstoneWatermark"`
	BenchmarkFence     uint64          `json:"benchmarkFence"`
	TombstoneHits      int64           `json:"tombstoneHits"`
	BenchmarkHits      int64           `json:"benchmarkHits"`
	Rechecks           []Recheck       `json:"rechecks,omitempty"`
	Registered         int64           `json:"registered"`
	// Pruned says a prune command dropped Shards: the release is RETIRED
	// or INVALID, and nothing can publish, roll back to or run it again.
	Pruned bool `json:"pruned,omitempty"`
}

// Recheck records one fence recheck of a release.
type Recheck struct {
	Kind   string          `json:"kind"`
	Value  uint64          `json:"value"`
	Report manifest.Digest `json:"report,omitzero"`
	Hits   int64           `json:"hits"`
	At     int64           `json:"at"`
	// VerifiedBy are the trusted keys that signed the recheck's
	// evidence, as Release.VerifiedBy; omitted while empty.
	VerifiedBy []string `json:"verifiedBy,omitempty"`
}

// satisfies reports whether the release was checked at or above both
// fences and found no hits.
func (r *Release) satisfies(f Fences) bool {
	return r.TombstoneWatermark >= f.Tombstone && r.BenchmarkFence >= f.Benchmark &&
		r.TombstoneHits == 0 && r.BenchmarkHits == 0
}

// Alias is a name whose value is (Generation, Root).
type Alias struct {
	Name       string          `json:"name"`
	Generation uint64          `json:"generation"`
	Root       manifest.Digest `json:"root"`
	// Permit is the ID of the permit issued with the current generation.
	Permit string `json:"permit"`
	// Retain is the rollback window N: the roots of generations
	// (Generation-N, Generation] are retained and eligible for rollback.
	Retain  int            `json:"retain"`
	History []HistoryEntry `json:"history"`
}

// HistoryEntry is one generation of an alias.
type HistoryEntry struct {
	Generation uint64          `json:"generation"`
	Root       manifest.Digest `json:"root"`
	Kind       string          `json:"kind"`
	Permit     string          `json:"permit"`
	At         int64           `json:"at"`
}

// entry returns the history entry of generation g, or nil.
func (a *Alias) entry(g uint64) *HistoryEntry {
	// History holds generations 1..Generation in order.
	if g == 0 || g > uint64(len(a.History)) {
		return nil
	}
	return &a.History[g-1]
}

// inWindow reports whether root is the root of one of the alias's last
// Retain generations.
func (a *Alias) inWindow(root manifest.Digest) bool {
	lo := max(0, len(a.History)-a.Retain)
	for _, h := range a.History[lo:] {
		if h.Root == root {
			return true
		}
	}
	return false
}

// Permit is a grant bound to (Root, TombstoneWatermark, BenchmarkFence,
// Generation). A fence advance past either bound closes it.
type Permit struct {
	ID                 string          `json:"id"`
	Kind               string          `json:"kind"`
	Alias              string          `json:"alias"`
	Run                string          `json:"run,omitempty"`
	Root               manifest.Digest `json:"root"`
	TombstoneWatermark uint64          `json:"tombstoneWatermark"`
	BenchmarkFence     uint64          `json:"benchmarkFence"`
	Generation         uint64          `json:"generation"`
	State              string          `json:"state"`
	Issued             int64           `json:"issued"`
	Changed            int64           `json:"changed"`
	// Reason says why the permit is no longer open, e.g. "tombstone>=45000".
	Reason string `json:"reason,omitempty"`
}

// Run is a training run pinned to one root.
type Run struct {
	ID         string          `json:"id"`
	Alias      string          `json:"alias"`
	Root       manifest.Digest `json:"root"`
	Generation uint64          `json:"generation"`
	Permit     string          `json:"permit"`
	// Spec is the digest of the createRun parameters, so a retried
	// createRun is recognised and a different one is refused.
	Spec      manifest.Digest `json:"spec"`
	WorldSize int             `json:"worldSize"`
	// Assignment[rank] lists indices into the release's Shards. Every
	// shard is assigned to exactly one rank.
	Assignment [][]int `json:"assignment"`
	// Epoch counts reassignments; Reassigned is the digest of the
	// parameters of the one that made it (zero before the first), so a
	// retried reassignment is recognised.
	Epoch      uint64          `json:"epoch"`
	Reassigned manifest.Digest `json:"reassigned,omitzero"`
	// Attestations[rank] is nil until the rank attests under the current
	// assignment.
	Attestations     []*Attestation `json:"attestations"`
	Attested         int            `json:"attested"`
	Barrier          string         `json:"barrier"`
	State            string         `json:"state"`
	FailCode         string         `json:"failCode,omitempty"`
	FailReason       string         `json:"failReason,omitempty"`
	Created          int64          `json:"created"`
	BarrierTimeoutMs int64          `json:"barrierTimeoutMs"`
	Deadline         int64          `json:"deadline"`
	BarrierOpened    int64          `json:"barrierOpened"`
	// Step is the last admitted checkpoint step, -1 before the first.
	Step        int64 `json:"step"`
	Checkpoints int64 `json:"checkpoints"`
	// Ended is when the run FAILED or was CANCELLED (0 while it lives).
	Ended int64 `json:"ended,omitempty"`
}

// PrunedRun is the tombstone of a run that prune deleted: about 150
// bytes where the run held its assignment and attestations.
type PrunedRun struct {
	Root       manifest.Digest `json:"root"`
	Generation uint64          `json:"generation"`
	// State is FAILED or CANCELLED, as the run ended.
	State  string `json:"state"`
	Ended  int64  `json:"ended"`
	Pruned int64  `json:"pruned"`
}

// Attestation is one rank's claim that it verified its assigned shards of
// Root.
type Attestation struct {
	Epoch  uint64            `json:"epoch"`
	Root   manifest.Digest   `json:"root"`
	Shards []manifest.Digest `json:"shards"`
	At     int64             `json:"at"`
}

// NodeInfo are the addresses of one gate node.
type NodeInfo struct {
	ID       string `json:"id"`
	RaftAddr string `json:"raftAddr"`
	HTTPAddr string `json:"httpAddr"`
}

// NewState returns an empty state.
func NewState() *State {
	return &State{
		Releases: map[string]*Release{},
		Aliases:  map[string]*Alias{},
		Permits:  map[string]*Permit{},
		Runs:     map[string]*Run{},
		Nodes:    map[string]*NodeInfo{},
		// PrunedRuns stays nil until the first prune: it is omitted
		// from the encoding while empty, and lookups in a nil map work.
	}
}

// sortedKeys returns m's keys in ascending order: every loop over a map in
// Apply goes through it, so Apply is deterministic.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// Validate checks the state's invariants: every reference resolves, every
// count agrees with what it counts. Restore refuses a state that fails it,
// and the fuzz target asserts it after every command.
func (s *State) Validate() error {
	for _, t := range []struct {
		name    string
		missing bool
	}{{"releases", s.Releases == nil}, {"aliases", s.Aliases == nil}, {"permits", s.Permits == nil}, {"runs", s.Runs == nil}, {"nodes", s.Nodes == nil}} {
		if t.missing {
			return fmt.Errorf("missing table %q", t.name)
		}
	}
	if (!s.Fences.TombstoneLog.IsZero() || !s.Fences.BenchmarkLog.IsZero()) && s.ClusterVersion < versionFenceLog {
		// Only a command of that version records one; a build below it
		// must halt at the state's version, not meet the field.
		return fmt.Errorf("fences: a log prefix digest at cluster version %d, below %d", s.ClusterVersion, versionFenceLog)
	}
	if s.ClusterID != "" {
		if err := checkClusterID(s.ClusterID); err != nil {
			return err
		}
		if s.ClusterVersion < versionClusterID {
			// Builds below the version would halt at the field.
			return fmt.Errorf("cluster ID at cluster version %d, below %d", s.ClusterVersion, versionClusterID)
		}
	}
	for k, r := range s.Releases {
		if r == nil || r.Root.String() != k {
			return fmt.Errorf("release %s: key/root mismatch", k)
		}
		switch r.State {
		case ReleaseStaged, ReleaseVerified, ReleaseInvalid, ReleasePublished, ReleaseRetired:
		default:
			return fmt.Errorf("release %s: bad state %q", k, r.State)
		}
		if err := checkRecordedSigners(r, s.ClusterVersion); err != nil {
			return fmt.Errorf("release %s: %v", k, err)
		}
		if r.Pruned && (len(r.Shards) != 0 || r.State != ReleaseRetired && r.State != ReleaseInvalid) {
			return fmt.Errorf("release %s: pruned with %d shards in state %s", k, len(r.Shards), r.State)
		}
	}
	for k, a := range s.Aliases {
		if a == nil || a.Name != k {
			return fmt.Errorf("alias %s: key/name mismatch", k)
		}
		if a.Retain < 1 || a.Retain > MaxRetain {
			return fmt.Errorf("alias %s: retain %d out of range", k, a.Retain)
		}
		if uint64(len(a.History)) != a.Generation || a.Generation == 0 {
			return fmt.Errorf("alias %s: %d history entries for generation %d", k, len(a.History), a.Generation)
		}
		for i, h := range a.History {
			if h.Generation != uint64(i+1) {
				return fmt.Errorf("alias %s: history[%d] has generation %d", k, i, h.Generation)
			}
			if s.Releases[h.Root.String()] == nil {
				return fmt.Errorf("alias %s: generation %d names unknown root %s", k, h.Generation, h.Root)
			}
			if s.Permits[h.Permit] == nil {
				return fmt.Errorf("alias %s: generation %d names unknown permit %s", k, h.Generation, h.Permit)
			}
		}
		for _, h := range a.History[max(0, len(a.History)-a.Retain):] {
			if s.Releases[h.Root.String()].Pruned {
				return fmt.Errorf("alias %s: generation %d in the rollback window names pruned root %s", k, h.Generation, h.Root)
			}
		}
		if a.Root != a.History[len(a.History)-1].Root || a.Permit != a.History[len(a.History)-1].Permit {
			return fmt.Errorf("alias %s: current value differs from last history entry", k)
		}
		if st := s.Releases[a.Root.String()].State; st != ReleasePublished && st != ReleaseInvalid {
			return fmt.Errorf("alias %s: current root is %s", k, st)
		}
	}
	for k, p := range s.Permits {
		if p == nil || p.ID != k {
			return fmt.Errorf("permit %s: key/id mismatch", k)
		}
		// Permits are numbered from NextPermit: one numbered above it
		// would be overwritten by a later permit.
		if n, err := strconv.ParseUint(strings.TrimPrefix(k, "p-"), 10, 64); !strings.HasPrefix(k, "p-") || err != nil || n == 0 || n > s.NextPermit {
			return fmt.Errorf("permit %s: not p-N with 0 < N <= nextPermit %d", k, s.NextPermit)
		}
		if s.Releases[p.Root.String()] == nil {
			return fmt.Errorf("permit %s: unknown root %s", k, p.Root)
		}
		switch p.State {
		case PermitOpen, PermitClosed, PermitSuperseded, PermitReleased:
		default:
			return fmt.Errorf("permit %s: bad state %q", k, p.State)
		}
		if p.State == PermitOpen && (p.TombstoneWatermark < s.Fences.Tombstone || p.BenchmarkFence < s.Fences.Benchmark) {
			return fmt.Errorf("permit %s: open below the fences", k)
		}
	}
	for k, r := range s.Runs {
		if r == nil || r.ID != k {
			return fmt.Errorf("run %s: key/id mismatch", k)
		}
		rel := s.Releases[r.Root.String()]
		if rel == nil || rel.Pruned {
			return fmt.Errorf("run %s: unknown or pruned root", k)
		}
		if s.Permits[r.Permit] == nil {
			return fmt.Errorf("run %s: unknown permit", k)
		}
		if r.WorldSize < 1 || r.WorldSize > MaxWorldSize || len(r.Assignment) != r.WorldSize || len(r.Attestations) != r.WorldSize {
			return fmt.Errorf("run %s: world size %d, %d assignments, %d attestations", k, r.WorldSize, len(r.Assignment), len(r.Attestations))
		}
		if err := checkPartition(r.Assignment, len(rel.Shards)); err != nil {
			return fmt.Errorf("run %s: %v", k, err)
		}
		n := 0
		for _, a := range r.Attestations {
			if a != nil {
				n++
			}
		}
		if n != r.Attested {
			return fmt.Errorf("run %s: attested=%d, %d attestations present", k, r.Attested, n)
		}
		if r.Barrier == BarrierOpen && n != r.WorldSize {
			return fmt.Errorf("run %s: barrier open with %d of %d attestations", k, n, r.WorldSize)
		}
	}
	for k, ni := range s.Nodes {
		// Whatever reads the join records takes each for one: a null
		// one panicked GET /v1/status and, on a leader, the version
		// poll, which took the process down.
		if ni == nil {
			return fmt.Errorf("node %q: null entry", truncate(k))
		}
	}
	for k, p := range s.PrunedRuns {
		if p == nil || checkRunID(k) != nil {
			return fmt.Errorf("pruned run %q: bad entry", k)
		}
		if s.Runs[k] != nil {
			return fmt.Errorf("run %s: both live and pruned", k)
		}
		if p.State != RunFailed && p.State != RunCancelled {
			return fmt.Errorf("pruned run %s: bad state %q", k, p.State)
		}
	}
	return nil
}

// checkRecordedSigners checks the signers r and its rechecks record:
// only a state of versionSigners or above holds them (a build below it
// must halt at the state's version, not meet the field), only beside a
// report, and each list as checkSigners has it.
func checkRecordedSigners(r *Release, clusterVersion uint64) error {
	check := func(ids []string) error {
		if len(ids) > 0 && clusterVersion < versionSigners {
			return fmt.Errorf("at cluster version %d, below %d", clusterVersion, versionSigners)
		}
		return checkSigners(ids)
	}
	if len(r.VerifiedBy) > 0 && r.Report.IsZero() {
		return fmt.Errorf("verifiedBy without a report")
	}
	if err := check(r.VerifiedBy); err != nil {
		return fmt.Errorf("verifiedBy: %v", err)
	}
	for i, rc := range r.Rechecks {
		if err := check(rc.VerifiedBy); err != nil {
			return fmt.Errorf("rechecks[%d].verifiedBy: %v", i, err)
		}
	}
	return nil
}

// checkSigners checks a list of signers as the gate records it: at most
// evidence.MaxSignatures key IDs of evidence.KeyID's form, in strictly
// ascending order (sorted, each once), as evidence.Trusted.Signers gives
// them.
func checkSigners(ids []string) error {
	if len(ids) > evidence.MaxSignatures {
		return fmt.Errorf("%d key IDs, at most %d", len(ids), evidence.MaxSignatures)
	}
	for i, id := range ids {
		if !evidence.IsKeyID(id) {
			return fmt.Errorf("entry %d is not a key ID (ed25519:sha256: and 16 lowercase hex digits)", i)
		}
		if i > 0 && ids[i-1] >= id {
			return fmt.Errorf("entry %d is not above entry %d: key IDs are listed sorted, each once", i, i-1)
		}
	}
	return nil
}

// checkPartition checks that assignment names every shard index in
// [0, shards) exactly once.
func checkPartition(assignment [][]int, shards int) error {
	seen := make([]bool, shards)
	n := 0
	for rank, idx := range assignment {
		for _, i := range idx {
			if i < 0 || i >= shards {
				return fmt.Errorf("rank %d: shard index %d outside [0,%d)", rank, i, shards)
			}
			if seen[i] {
				return fmt.Errorf("rank %d: shard index %d assigned twice", rank, i)
			}
			seen[i] = true
			n++
		}
	}
	if n != shards {
		return fmt.Errorf("%d of %d shards assigned", n, shards)
	}
	return nil
}
