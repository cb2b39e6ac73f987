package raftgate

import (
	"fmt"
	"slices"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
)

// applier applies one command to s. Every check happens before the first
// mutation, except where a rejection is itself a state change (a failed
// run, an INVALID release).
type applier struct {
	s   *State
	now int64
}

// PublishResult is the result of publish and rollback: the alias value the
// command created. A retried command returns the same value.
type PublishResult struct {
	Alias      string          `json:"alias"`
	Generation uint64          `json:"generation"`
	Root       manifest.Digest `json:"root"`
	Kind       string          `json:"kind"`
	Permit     string          `json:"permit"`
}

// FenceResult is the result of advanceFence.
type FenceResult struct {
	Fences Fences `json:"fences"`
	// Closed lists the permits the advance closed, sorted.
	Closed []string `json:"closed"`
	// Spared lists, sorted, the open permits below the new value that the
	// advance kept open because their release was already checked at it
	// (AdvanceFence.SpareChecked), re-bound to its watermarks.
	Spared []string `json:"spared,omitempty"`
}

// RecheckResult is the result of recheck and of a register that renewed a
// release's permits.
type RecheckResult struct {
	Release Release `json:"release"`
	// Reopened lists the permits renewed, sorted.
	Reopened []string `json:"reopened"`
	// VerifiedBy, in the answer to a register of a report or a recheck
	// at a gate with verifier keys, are the IDs (evidence.KeyID) of the
	// trusted keys whose signatures of its evidence the leader checked,
	// sorted. Apply never sets it: the leader adds it to its answer and
	// logs it (Node.vouched), at every cluster version. The state records
	// them from cluster version versionSigners (Release.VerifiedBy,
	// Recheck.VerifiedBy, in Release above).
	VerifiedBy []string `json:"verifiedBy,omitempty"`
}

// RunSummary is a run without its per-rank tables.
type RunSummary struct {
	ID            string          `json:"id"`
	Alias         string          `json:"alias"`
	Root          manifest.Digest `json:"root"`
	Generation    uint64          `json:"generation"`
	Permit        string          `json:"permit"`
	WorldSize     int             `json:"worldSize"`
	Epoch         uint64          `json:"epoch"`
	Attested      int             `json:"attested"`
	Barrier       string          `json:"barrier"`
	State         string          `json:"state"`
	FailCode      string          `json:"failCode,omitempty"`
	FailReason    string          `json:"failReason,omitempty"`
	Created       int64           `json:"created"`
	Deadline      int64           `json:"deadline"`
	BarrierOpened int64           `json:"barrierOpened"`
	Step          int64           `json:"step"`
	Checkpoints   int64           `json:"checkpoints"`
}

// Summary returns r without its per-rank tables.
func (r *Run) Summary() RunSummary {
	return RunSummary{
		ID: r.ID, Alias: r.Alias, Root: r.Root, Generation: r.Generation, Permit: r.Permit,
		WorldSize: r.WorldSize, Epoch: r.Epoch, Attested: r.Attested, Barrier: r.Barrier,
		State: r.State, FailCode: r.FailCode, FailReason: r.FailReason, Created: r.Created, Deadline: r.Deadline,
		BarrierOpened: r.BarrierOpened, Step: r.Step, Checkpoints: r.Checkpoints,
	}
}

// copyRelease returns a copy safe to hand outside the lock.
func copyRelease(r *Release) Release {
	c := *r
	c.Shards = slices.Clone(r.Shards)
	c.VerifiedBy = slices.Clone(r.VerifiedBy)
	c.Rechecks = slices.Clone(r.Rechecks)
	for i := range c.Rechecks {
		c.Rechecks[i].VerifiedBy = slices.Clone(c.Rechecks[i].VerifiedBy)
	}
	return c
}

// signers checks the signers a register or recheck names (what names
// it): a list as checkSigners has it, from cluster version
// versionSigners only. A node names them only at that version, and only
// for a command that carries evidence.
func (a *applier) signers(ids []string, what string) error {
	if a.s.ClusterVersion < versionSigners {
		// A node proposes none below it (Node.Apply): a member of an
		// older build could not keep the field in its state.
		return errcode.New(errcode.ClusterVersion, "%s names the keys that signed its evidence, which needs the cluster version %d; it is %d", what, versionSigners, a.s.ClusterVersion)
	}
	if err := checkSigners(ids); err != nil {
		return errcode.New(errcode.BadInput, "%s: verifiedBy: %v", what, err)
	}
	return nil
}

// recorded returns ids as the state keeps them: nil for none.
func recorded(ids []string) []string {
	if len(ids) == 0 {
		return nil
	}
	return slices.Clone(ids)
}

// ---- releases ----

func (a *applier) register(c *Register) (any, error) {
	if len(c.Shards) == 0 {
		return nil, errcode.New(errcode.BadInput, "register %s: no shards", c.Root)
	}
	if len(c.VerifiedBy) > 0 {
		// Entries before versionSigners name no signers: checked
		// first, this changes nothing they replay to.
		if err := a.signers(c.VerifiedBy, "register of "+c.Root.String()); err != nil {
			return nil, err
		}
		if c.Report == nil {
			return nil, errcode.New(errcode.BadInput, "register of %s names signers and no report: only a report's evidence is signed", c.Root)
		}
	}
	if c.Report != nil {
		r := c.Report
		switch r.Verdict {
		case manifest.Verified:
			if r.TombstoneHits != 0 || r.BenchmarkHits != 0 {
				return nil, errcode.New(errcode.BadInput, "report %s: verdict VERIFIED with %d tombstone and %d benchmark hits", r.Digest, r.TombstoneHits, r.BenchmarkHits)
			}
		case manifest.Invalid:
		default:
			return nil, errcode.New(errcode.BadInput, "report %s: verdict %q", r.Digest, truncate(r.Verdict))
		}
		if r.TombstoneHits < 0 || r.BenchmarkHits < 0 {
			return nil, errcode.New(errcode.BadCount, "report %s: negative hit count", r.Digest)
		}
	}
	key := c.Root.String()
	rel := a.s.Releases[key]
	// From versionRefusedRegisterChangesNothing every refusal comes before
	// the first change. Below it, as entries already in logs were applied,
	// a new release is recorded and a pruned one takes its shards back
	// before the checks that may refuse the command.
	checkFirst := a.s.ClusterVersion >= versionRefusedRegisterChangesNothing
	switch {
	case rel == nil:
		rel = &Release{Root: c.Root, State: ReleaseStaged, Shards: slices.Clone(c.Shards), Registered: a.now}
		if checkFirst {
			if err := refuseRegister(rel, c); err != nil {
				return nil, err
			}
		}
		a.s.Releases[key] = rel
	case rel.Pruned:
		// The root names the manifest, and so its shards: take them back.
		if checkFirst {
			if err := refuseRegister(rel, c); err != nil {
				return nil, err
			}
		}
		rel.Shards, rel.Pruned = slices.Clone(c.Shards), false
	case !slices.Equal(rel.Shards, c.Shards):
		return nil, errcode.New(errcode.AlreadyExists, "release %s is registered with %d other shards", c.Root, len(rel.Shards))
	}
	if err := refuseRegister(rel, c); err != nil {
		return nil, err
	}
	r := c.Report
	if r == nil || r.Digest == rel.Report {
		if r != nil && len(rel.VerifiedBy) == 0 {
			// A retry of the report the release holds, signed where
			// the first was not (or was logged before the gate
			// recorded signers): the record gains who vouched for
			// that report. Never in place of signers it holds.
			rel.VerifiedBy = recorded(c.VerifiedBy)
		}
		return RecheckResult{Release: copyRelease(rel), Reopened: []string{}}, nil
	}
	// The signers are those of the report recorded now: a new report
	// signed by none leaves the release with none.
	rel.VerifiedBy = recorded(c.VerifiedBy)
	if r.Verdict == manifest.Invalid {
		a.invalidate(rel, fmt.Sprintf("report %s INVALID", r.Digest))
		rel.Report, rel.DatasetSnapshot = r.Digest, r.DatasetSnapshot
		rel.TombstoneWatermark, rel.BenchmarkFence = r.TombstoneWatermark, r.BenchmarkFence
		rel.TombstoneHits, rel.BenchmarkHits = r.TombstoneHits, r.BenchmarkHits
		return RecheckResult{Release: copyRelease(rel), Reopened: []string{}}, nil
	}
	if rel.State == ReleaseStaged {
		rel.State = ReleaseVerified
		rel.DatasetSnapshot = r.DatasetSnapshot
	}
	// A newer VERIFIED report can only raise the watermarks a release was
	// checked at; it renews permits a fence advance closed.
	rel.Report = r.Digest
	rel.TombstoneWatermark = max(rel.TombstoneWatermark, r.TombstoneWatermark)
	rel.BenchmarkFence = max(rel.BenchmarkFence, r.BenchmarkFence)
	return RecheckResult{Release: copyRelease(rel), Reopened: a.renew(rel)}, nil
}

// refuseRegister returns the error a register of c's report is refused
// with on rel, changing nothing: a retry whose summary contradicts the
// report recorded, a VERIFIED report of an INVALID release, or one of
// another snapshot than the release was verified against.
func refuseRegister(rel *Release, c *Register) error {
	r := c.Report
	if r == nil {
		return nil
	}
	if r.Digest == rel.Report {
		// A retry: the same report again. A report's digest covers its
		// verdict and snapshot, so a summary that contradicts the one
		// recorded is not a retry but a wrong one, and is refused. (A
		// VERIFIED report of a release found INVALID since is a retry:
		// a recheck with hits invalidates without a new report.)
		if r.Verdict == manifest.Invalid && rel.State != ReleaseInvalid || r.DatasetSnapshot != rel.DatasetSnapshot {
			return errcode.New(errcode.BadInput, "report %s is registered for release %s as %s against snapshot %s; this register says %s against %s",
				r.Digest, c.Root, rel.State, rel.DatasetSnapshot, r.Verdict, r.DatasetSnapshot)
		}
		return nil
	}
	if r.Verdict == manifest.Invalid {
		return nil
	}
	// A STAGED release takes the report's snapshot.
	switch {
	case rel.State == ReleaseInvalid:
		return errcode.New(errcode.NotVerified, "release %s was found INVALID by report %s", c.Root, rel.Report)
	case rel.State != ReleaseStaged && !rel.DatasetSnapshot.IsZero() && r.DatasetSnapshot != rel.DatasetSnapshot:
		return errcode.New(errcode.BadInput, "report %s checks snapshot %s, release was verified against %s", r.Digest, r.DatasetSnapshot, rel.DatasetSnapshot)
	}
	return nil
}

// invalidate marks rel INVALID and closes its open permits.
func (a *applier) invalidate(rel *Release, reason string) {
	rel.State = ReleaseInvalid
	for _, id := range sortedKeys(a.s.Permits) {
		p := a.s.Permits[id]
		if p.Root == rel.Root && p.State == PermitOpen {
			p.State, p.Changed, p.Reason = PermitClosed, a.now, reason
		}
	}
}

// renew reopens rel's closed permits when rel now satisfies both fences,
// re-bound to the watermarks rel was checked at. Superseded and released
// permits stay as they are.
func (a *applier) renew(rel *Release) []string {
	reopened := []string{}
	if rel.State == ReleaseInvalid || !rel.satisfies(a.s.Fences) {
		return reopened
	}
	for _, id := range sortedKeys(a.s.Permits) {
		p := a.s.Permits[id]
		if p.Root != rel.Root || p.State != PermitClosed {
			continue
		}
		if p.Kind == PermitRun {
			if run := a.s.Runs[p.Run]; run == nil || run.State == RunFailed || run.State == RunCancelled {
				continue
			}
		}
		p.State, p.Changed, p.Reason = PermitOpen, a.now, ""
		p.TombstoneWatermark, p.BenchmarkFence = rel.TombstoneWatermark, rel.BenchmarkFence
		reopened = append(reopened, id)
	}
	return reopened
}

func (a *applier) recheck(c *RecheckCmd) (any, error) {
	rel := a.s.Releases[c.Root.String()]
	if rel == nil {
		return nil, errcode.New(errcode.UnknownRelease, "no release %s", c.Root)
	}
	if c.Hits < 0 {
		return nil, errcode.New(errcode.BadCount, "recheck of %s: negative hits %d", c.Root, c.Hits)
	}
	if len(c.VerifiedBy) > 0 {
		if err := a.signers(c.VerifiedBy, "recheck of "+c.Root.String()); err != nil {
			return nil, err
		}
	}
	var current uint64
	var hitCode errcode.Code
	switch c.Kind {
	case FenceTombstone:
		current, hitCode = a.s.Fences.Tombstone, errcode.TombstoneHit
	case FenceBenchmark:
		current, hitCode = a.s.Fences.Benchmark, errcode.BenchmarkHit
	default:
		return nil, errcode.New(errcode.BadInput, "recheck: fence kind %q is not tombstone or benchmark", truncate(c.Kind))
	}
	if c.Value < current {
		return nil, errcode.New(errcode.FenceBehind, "recheck of %s at %s=%d, current fence %d", c.Root, c.Kind, c.Value, current)
	}
	if rel.State == ReleaseInvalid {
		return nil, errcode.New(errcode.NotVerified, "release %s is INVALID", c.Root)
	}
	if rel.State == ReleaseStaged {
		return nil, errcode.New(errcode.NotVerified, "release %s is STAGED; register a report first", c.Root)
	}
	rel.Rechecks = append(rel.Rechecks, Recheck{Kind: c.Kind, Value: c.Value, Report: c.Report, Hits: c.Hits, At: a.now, VerifiedBy: recorded(c.VerifiedBy)})
	if c.Hits > 0 {
		if c.Kind == FenceTombstone {
			rel.TombstoneHits = c.Hits
		} else {
			rel.BenchmarkHits = c.Hits
		}
		a.invalidate(rel, fmt.Sprintf("%s recheck at %d: %d hits", c.Kind, c.Value, c.Hits))
		return RecheckResult{Release: copyRelease(rel), Reopened: []string{}},
			errcode.New(hitCode, "release %s has %d %s hits at %d; it is INVALID and its permits stay closed", c.Root, c.Hits, c.Kind, c.Value)
	}
	if c.Kind == FenceTombstone {
		rel.TombstoneWatermark = max(rel.TombstoneWatermark, c.Value)
	} else {
		rel.BenchmarkFence = max(rel.BenchmarkFence, c.Value)
	}
	return RecheckResult{Release: copyRelease(rel), Reopened: a.renew(rel)}, nil
}

// ---- aliases ----

// issuePermit creates an open permit bound to rel's checked watermarks.
func (a *applier) issuePermit(kind, alias, run string, rel *Release, generation uint64) *Permit {
	a.s.NextPermit++
	p := &Permit{
		ID: fmt.Sprintf("p-%06d", a.s.NextPermit), Kind: kind, Alias: alias, Run: run, Root: rel.Root,
		TombstoneWatermark: rel.TombstoneWatermark, BenchmarkFence: rel.BenchmarkFence,
		Generation: generation, State: PermitOpen, Issued: a.now, Changed: a.now,
	}
	a.s.Permits[p.ID] = p
	return p
}

// retried returns the result of an earlier identical publish or rollback
// (same alias, expected generation, root and kind), so a client may retry
// a command whose outcome it did not learn. When the generation the command
// asked for is the alias's current one and holds another root, it returns
// PUBLISH_CONFLICT: the command lost a race for exactly that generation.
// Every other expected-generation mismatch is a GENERATION_CONFLICT,
// decided by the caller.
// StalePublish reports, from a read of alias al, whether a publish of root
// expecting generation expected is certain to be refused: al is already
// past that generation, and not because this very publish made the next
// one (a retry, which the gate answers with its original result). The
// error is the one the gate would answer. Generations only grow, so a
// client may fail fast on it, before work the refusal would waste.
func StalePublish(al *Alias, root manifest.Digest, expected uint64) error {
	if al == nil || uint64(len(al.History)) != al.Generation {
		return nil // not a whole alias as the gate keeps it: let the gate judge
	}
	_, err := retried(al, CmdPublish, root, expected)
	return err
}

func retried(al *Alias, kind string, root manifest.Digest, expected uint64) (any, error) {
	if expected >= al.Generation {
		return nil, nil
	}
	h := al.entry(expected + 1)
	if h.Root == root && h.Kind == kind {
		return PublishResult{Alias: al.Name, Generation: h.Generation, Root: h.Root, Kind: h.Kind, Permit: h.Permit}, nil
	}
	if h.Generation == al.Generation {
		return nil, errcode.New(errcode.PublishConflict, "alias %s generation %d was made by a %s of %s, not by this %s of %s", al.Name, h.Generation, h.Kind, h.Root, kind, root)
	}
	return nil, errcode.New(errcode.GenerationConflict, "alias %s is at generation %d, expected %d", al.Name, al.Generation, expected)
}

// advance moves al to a new generation pointing at rel.
func (a *applier) advance(al *Alias, kind string, rel *Release) PublishResult {
	if old := a.s.Permits[al.Permit]; old != nil && (old.State == PermitOpen || old.State == PermitClosed) {
		old.State, old.Changed, old.Reason = PermitSuperseded, a.now, fmt.Sprintf("generation %d", al.Generation+1)
	}
	al.Generation++
	p := a.issuePermit(kind, al.Name, "", rel, al.Generation)
	al.Root, al.Permit = rel.Root, p.ID
	al.History = append(al.History, HistoryEntry{Generation: al.Generation, Root: rel.Root, Kind: kind, Permit: p.ID, At: a.now})
	if rel.State != ReleaseInvalid {
		rel.State = ReleasePublished
	}
	// The generation that just left the rollback window may take the last
	// reference to its root with it.
	if out := len(al.History) - al.Retain - 1; out >= 0 {
		a.maybeRetire(al.History[out].Root)
	}
	return PublishResult{Alias: al.Name, Generation: al.Generation, Root: rel.Root, Kind: kind, Permit: p.ID}
}

// maybeRetire retires a PUBLISHED root no alias retains any more.
func (a *applier) maybeRetire(root manifest.Digest) {
	rel := a.s.Releases[root.String()]
	if rel == nil || rel.State != ReleasePublished {
		return
	}
	for _, name := range sortedKeys(a.s.Aliases) {
		if a.s.Aliases[name].inWindow(root) {
			return
		}
	}
	rel.State = ReleaseRetired
}

// CheckAliasName reports whether name may name an alias, with the error
// the gate would answer (BAD_INPUT): clients check it before work that
// only a valid alias makes useful, such as publish's verification.
func CheckAliasName(name string) error {
	if name == "" || len(name) > 253 {
		return errcode.New(errcode.BadInput, "alias name must be 1..253 bytes")
	}
	for _, c := range []byte(name) {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.' || c == '/') {
			return errcode.New(errcode.BadInput, "alias name %q: only [A-Za-z0-9._/-]", truncate(name))
		}
	}
	return nil
}

func (a *applier) publish(c *Publish) (any, error) {
	if err := CheckAliasName(c.Alias); err != nil {
		return nil, err
	}
	if c.Retain < 0 || c.Retain > MaxRetain {
		return nil, errcode.New(errcode.BadInput, "retain %d outside [1,%d]", c.Retain, MaxRetain)
	}
	al := a.s.Aliases[c.Alias]
	if al != nil {
		if r, err := retried(al, CmdPublish, c.Root, c.ExpectedGeneration); r != nil || err != nil {
			return r, err
		}
		if c.ExpectedGeneration != al.Generation {
			return nil, errcode.New(errcode.GenerationConflict, "alias %s is at generation %d, expected %d", c.Alias, al.Generation, c.ExpectedGeneration)
		}
	} else if c.ExpectedGeneration != 0 {
		return nil, errcode.New(errcode.UnknownAlias, "no alias %s (a new alias is published with expected generation 0)", c.Alias)
	}
	rel := a.s.Releases[c.Root.String()]
	if rel == nil {
		return nil, errcode.New(errcode.UnknownRelease, "no release %s", c.Root)
	}
	if rel.State != ReleaseVerified && rel.State != ReleasePublished {
		return nil, errcode.New(errcode.NotVerified, "release %s is %s", c.Root, rel.State)
	}
	if !rel.satisfies(a.s.Fences) {
		return nil, errcode.New(errcode.FenceBehind, "release %s checked at tombstone=%d benchmark=%d with %d+%d hits; fences are tombstone=%d benchmark=%d",
			c.Root, rel.TombstoneWatermark, rel.BenchmarkFence, rel.TombstoneHits, rel.BenchmarkHits, a.s.Fences.Tombstone, a.s.Fences.Benchmark)
	}
	if al == nil {
		retain := c.Retain
		if retain == 0 {
			retain = DefaultRetain
		}
		al = &Alias{Name: c.Alias, Retain: retain, History: []HistoryEntry{}}
		a.s.Aliases[c.Alias] = al
	}
	return a.advance(al, CmdPublish, rel), nil
}

func (a *applier) rollback(c *Rollback) (any, error) {
	al := a.s.Aliases[c.Alias]
	if al == nil {
		return nil, errcode.New(errcode.UnknownAlias, "no alias %s", truncateName(c.Alias))
	}
	if r, err := retried(al, CmdRollback, c.Root, c.ExpectedGeneration); r != nil || err != nil {
		return r, err
	}
	if c.ExpectedGeneration != al.Generation {
		return nil, errcode.New(errcode.GenerationConflict, "alias %s is at generation %d, expected %d", c.Alias, al.Generation, c.ExpectedGeneration)
	}
	if c.Root == al.Root {
		return nil, errcode.New(errcode.RollbackIneligible, "%s is already the root of alias %s", c.Root, c.Alias)
	}
	if !al.inWindow(c.Root) {
		return nil, errcode.New(errcode.RollbackIneligible, "%s is not among the last %d generations of alias %s", c.Root, al.Retain, c.Alias)
	}
	rel := a.s.Releases[c.Root.String()]
	if rel.State != ReleasePublished {
		return nil, errcode.New(errcode.RollbackIneligible, "release %s is %s", c.Root, rel.State)
	}
	if !rel.satisfies(a.s.Fences) {
		return nil, errcode.New(errcode.RollbackIneligible, "release %s checked at tombstone=%d benchmark=%d, fences are tombstone=%d benchmark=%d (%s)",
			c.Root, rel.TombstoneWatermark, rel.BenchmarkFence, a.s.Fences.Tombstone, a.s.Fences.Benchmark, errcode.FenceBehind)
	}
	return a.advance(al, CmdRollback, rel), nil
}

// ---- fences ----

func (a *applier) advanceFence(c *AdvanceFence) (any, error) {
	var cur *uint64
	var log *manifest.Digest
	switch c.Kind {
	case FenceTombstone:
		cur, log = &a.s.Fences.Tombstone, &a.s.Fences.TombstoneLog
	case FenceBenchmark:
		cur, log = &a.s.Fences.Benchmark, &a.s.Fences.BenchmarkLog
	default:
		return nil, errcode.New(errcode.BadInput, "fence kind %q is not tombstone or benchmark", truncate(c.Kind))
	}
	if !c.Log.IsZero() && a.s.ClusterVersion < versionFenceLog {
		// A node proposes none below it (Node.Apply): a member of an
		// older build could not keep the field in its state.
		return nil, errcode.New(errcode.ClusterVersion, "an advance of the %s fence with a log prefix digest needs the cluster version %d; it is %d", c.Kind, versionFenceLog, a.s.ClusterVersion)
	}
	if c.Value < *cur {
		return nil, errcode.New(errcode.FenceRegression, "%s fence is %d, cannot move to %d", c.Kind, *cur, c.Value)
	}
	closed, spared := []string{}, []string(nil)
	if c.Value == *cur {
		switch {
		case c.Log.IsZero() || c.Log == *log:
		case log.IsZero():
			// A fence advanced without a log (before version 4) takes
			// the first one named at its value: from then on, logs
			// are checked against it.
			*log = c.Log
		default:
			return nil, errcode.New(errcode.FenceLogMismatch, "the %s fence is at %d with log prefix %s; this advance names prefix %s at %d: another log, which differs from the fence's at or below %d",
				c.Kind, *cur, *log, c.Log, c.Value, c.Value)
		}
		return FenceResult{Fences: a.s.Fences, Closed: closed}, nil
	}
	if c.Log.IsZero() && !log.IsZero() && a.s.ClusterVersion >= versionFenceLogKept {
		// A fence that names its log moves only with a log that
		// extends it (the client checks that): a bare advance would
		// drop the log, and the next advance would record whatever
		// log it names, so any log would pass at the fence again.
		// Below versionFenceLogKept it drops the log, as builds of
		// version 4 applied it.
		return nil, errcode.New(errcode.FenceLogMismatch, "the %s fence is at %d with log prefix %s; an advance to %d must name the log it extends (gate fence advance --store URL --%s DIGEST, the stored log's digest)",
			c.Kind, *cur, *log, c.Value, fenceLogFlag(c.Kind))
	}
	// The log named at the new value, or none (a fence that had none,
	// or below versionFenceLogKept): the previous one describes the
	// log up to the previous value only. Entries from before version
	// 4 name none and find none.
	*cur, *log = c.Value, c.Log
	for _, id := range sortedKeys(a.s.Permits) {
		p := a.s.Permits[id]
		if p.State != PermitOpen {
			continue
		}
		bound := p.TombstoneWatermark
		if c.Kind == FenceBenchmark {
			bound = p.BenchmarkFence
		}
		if bound >= c.Value {
			continue
		}
		if c.SpareChecked {
			// A recheck already showed zero hits at this value (one
			// made before the advance, so that runs go on): closing
			// the permit would wait for a recheck the gate holds.
			if rel := spareable(a.s, p, a.s.Fences); rel != nil {
				p.TombstoneWatermark, p.BenchmarkFence = rel.TombstoneWatermark, rel.BenchmarkFence
				spared = append(spared, id)
				continue
			}
		}
		p.State, p.Changed, p.Reason = PermitClosed, a.now, fmt.Sprintf("%s>=%d", c.Kind, c.Value)
		closed = append(closed, id)
	}
	return FenceResult{Fences: a.s.Fences, Closed: closed, Spared: spared}, nil
}

// fenceLogFlag is the flag of gate fence advance that names a fence
// kind's log.
func fenceLogFlag(kind string) string {
	if kind == FenceBenchmark {
		return "benchmark"
	}
	return "tombstones"
}

// spareable returns the release of open permit p when a fence advance to
// f with SpareChecked keeps p open (its release is checked at or above f
// with no hits), else nil.
func spareable(s *State, p *Permit, f Fences) *Release {
	if rel := s.Releases[p.Root.String()]; rel != nil && rel.State != ReleaseInvalid && rel.satisfies(f) {
		return rel
	}
	return nil
}

// wouldSpare lists, sorted, the open permits an advance of the kind fence
// to value keeps open with SpareChecked and closes without it: the
// permits whose outcome depends on the field.
func wouldSpare(s *State, kind string, value uint64) []string {
	f := s.Fences
	var bound func(*Permit) uint64
	switch kind {
	case FenceTombstone:
		if value <= f.Tombstone {
			return nil
		}
		f.Tombstone, bound = value, func(p *Permit) uint64 { return p.TombstoneWatermark }
	case FenceBenchmark:
		if value <= f.Benchmark {
			return nil
		}
		f.Benchmark, bound = value, func(p *Permit) uint64 { return p.BenchmarkFence }
	default:
		return nil
	}
	var out []string
	for _, id := range sortedKeys(s.Permits) {
		if p := s.Permits[id]; p.State == PermitOpen && bound(p) < value && spareable(s, p, f) != nil {
			out = append(out, id)
		}
	}
	return out
}

// setClusterVersion raises the cluster version; it never lowers it. The
// FSM halted before this on a build below c.Version.
//
// A raise to versionClusterID or above gives a state without a cluster
// identity c.ClusterID, and is BAD_INPUT, changing nothing, without a
// valid one: every state at that version has one.
func (a *applier) setClusterVersion(c *SetClusterVersion) (any, error) {
	if c.ClusterID != "" {
		if err := checkClusterID(c.ClusterID); err != nil {
			return nil, errcode.New(errcode.BadInput, "%s: %v", CmdSetClusterVersion, err)
		}
	}
	if max(a.s.ClusterVersion, c.Version) >= versionClusterID && a.s.ClusterID == "" {
		if c.ClusterID == "" {
			return nil, errcode.New(errcode.BadInput, "%s to %d names no cluster ID, and the state has none", CmdSetClusterVersion, c.Version)
		}
		a.s.ClusterID = c.ClusterID
	}
	a.s.ClusterVersion = max(a.s.ClusterVersion, c.Version)
	return ClusterVersionResult{ClusterVersion: a.s.ClusterVersion}, nil
}

// ---- runs ----

func checkRunID(id string) error {
	if id == "" || len(id) > 253 {
		return errcode.New(errcode.BadInput, "run id must be 1..253 bytes")
	}
	for _, c := range []byte(id) {
		if c <= ' ' || c >= 0x7f || c == '/' {
			return errcode.New(errcode.BadInput, "run id %q: printable ASCII without '/' or spaces", truncate(id))
		}
	}
	return nil
}

// assign returns the explicit assignment after checking it is a partition
// of the release's shards, or the round-robin one.
func assign(worldSize int, explicit [][]int, shards int) ([][]int, error) {
	if worldSize < 1 || worldSize > MaxWorldSize {
		return nil, errcode.New(errcode.BadInput, "world size %d outside [1,%d]", worldSize, MaxWorldSize)
	}
	if explicit == nil {
		out := make([][]int, worldSize)
		for r := range out {
			out[r] = []int{}
		}
		for i := 0; i < shards; i++ {
			out[i%worldSize] = append(out[i%worldSize], i)
		}
		return out, nil
	}
	if len(explicit) != worldSize {
		return nil, errcode.New(errcode.BadInput, "assignment has %d ranks, world size is %d", len(explicit), worldSize)
	}
	if err := checkPartition(explicit, shards); err != nil {
		return nil, errcode.New(errcode.BadInput, "assignment: %v", err)
	}
	out := make([][]int, worldSize)
	for r, idx := range explicit {
		out[r] = slices.Clone(idx)
		if out[r] == nil {
			out[r] = []int{}
		}
	}
	return out, nil
}

func (a *applier) createRun(c *CreateRun) (any, error) {
	if err := checkRunID(c.Run); err != nil {
		return nil, err
	}
	if c.BarrierTimeoutMs < 0 {
		return nil, errcode.New(errcode.BadInput, "negative barrier timeout")
	}
	timeout := c.BarrierTimeoutMs
	if timeout == 0 {
		timeout = DefaultBarrierTimeoutMs
	}
	spec := specDigest(c.Alias, c.WorldSize, c.Assignment, timeout)
	if a.s.PrunedRuns[c.Run] != nil {
		// Making it anew would resolve the alias a second time for
		// what its caller may take as the same run.
		return nil, a.s.noRun(c.Run)
	}
	if run := a.s.Runs[c.Run]; run != nil {
		if run.Spec != spec {
			return nil, errcode.New(errcode.AlreadyExists, "run %s exists with other parameters", c.Run)
		}
		return run.Summary(), nil
	}
	// The one and only read of the alias for this run.
	al := a.s.Aliases[c.Alias]
	if al == nil {
		return nil, errcode.New(errcode.UnknownAlias, "no alias %s", truncateName(c.Alias))
	}
	rel := a.s.Releases[al.Root.String()]
	if p := a.s.Permits[al.Permit]; p.State != PermitOpen {
		return nil, errcode.New(errcode.PermitClosed, "alias %s generation %d: permit %s is %s (%s)", al.Name, al.Generation, p.ID, p.State, p.Reason)
	}
	assignment, err := assign(c.WorldSize, c.Assignment, len(rel.Shards))
	if err != nil {
		return nil, err
	}
	p := a.issuePermit(PermitRun, al.Name, c.Run, rel, al.Generation)
	run := &Run{
		ID: c.Run, Alias: al.Name, Root: al.Root, Generation: al.Generation, Permit: p.ID, Spec: spec,
		WorldSize: c.WorldSize, Assignment: assignment, Attestations: make([]*Attestation, c.WorldSize),
		Barrier: BarrierClosed, State: RunWaiting, Created: a.now, BarrierTimeoutMs: timeout,
		Deadline: a.now + timeout, Step: -1,
	}
	a.s.Runs[c.Run] = run
	return run.Summary(), nil
}

// reassignDigest identifies reassign parameters.
func reassignDigest(c *Reassign) manifest.Digest {
	b, _ := manifest.Encode(struct {
		WorldSize  int     `json:"worldSize"`
		Assignment [][]int `json:"assignment"`
		Reset      []int   `json:"reset"`
	}{c.WorldSize, c.Assignment, c.Reset})
	return manifest.Sum(b)
}

// specDigest identifies createRun parameters.
func specDigest(alias string, worldSize int, assignment [][]int, timeout int64) manifest.Digest {
	b, _ := manifest.Encode(struct {
		Alias      string  `json:"alias"`
		WorldSize  int     `json:"worldSize"`
		Assignment [][]int `json:"assignment"`
		Timeout    int64   `json:"barrierTimeoutMs"`
	}{alias, worldSize, assignment, timeout})
	return manifest.Sum(b)
}

// noRun is the error for a run ID that names no run: RUN_PRUNED when
// prune deleted it, UNKNOWN_RUN otherwise.
func (s *State) noRun(id string) error {
	if p := s.PrunedRuns[id]; p != nil {
		return errcode.New(errcode.RunPruned, "run %s ended %s and was pruned; a run ID is never reused", truncateName(id), p.State)
	}
	return errcode.New(errcode.UnknownRun, "no run %s", truncateName(id))
}

// liveRun returns the run, or RUN_FAILED if it failed or was cancelled.
func (a *applier) liveRun(id string) (*Run, error) {
	run := a.s.Runs[id]
	if run == nil {
		return nil, a.s.noRun(id)
	}
	if run.State == RunFailed || run.State == RunCancelled {
		return run, errcode.New(errcode.RunFailed, "run %s is %s (%s: %s)", id, run.State, run.FailCode, run.FailReason)
	}
	return run, nil
}

// fail fails run with code and returns the matching error.
func (a *applier) fail(run *Run, code errcode.Code, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	run.State, run.Barrier, run.FailCode, run.FailReason, run.Ended = RunFailed, BarrierClosed, string(code), msg, a.now
	if p := a.s.Permits[run.Permit]; p.State == PermitOpen || p.State == PermitClosed {
		p.State, p.Changed, p.Reason = PermitReleased, a.now, "run failed: "+string(code)
	}
	return errcode.New(code, "run %s failed: %s", run.ID, msg)
}

// timedOut fails run if its barrier deadline has passed.
func (a *applier) timedOut(run *Run) error {
	if run.Barrier == BarrierClosed && a.now > run.Deadline {
		// The text is part of the state: it stays as entries already in
		// logs and snapshots have it (Unix milliseconds), so a replica
		// that replays them and one that restores a snapshot agree.
		// `run show` prints the deadline as a time.
		return a.fail(run, errcode.BarrierTimeout, "barrier closed at %d with %d of %d ranks attested, deadline %d", a.now, run.Attested, run.WorldSize, run.Deadline)
	}
	return nil
}

func (a *applier) attest(c *Attest) (any, error) {
	run, err := a.liveRun(c.Run)
	if err != nil {
		if run != nil {
			return run.Summary(), err
		}
		return nil, err
	}
	// From versionEpochFirst the epoch is checked before the rank: an
	// attestation at another epoch is STALE_EPOCH, changing nothing, also
	// from a rank a scale-in removed since (in range at the epoch it
	// names). A passed deadline and another root still fail the run
	// whatever the epoch: a worker holding another root read something
	// other than the run, which no reassignment explains. Below it, as
	// entries already in logs were applied, the rank comes first.
	epochFirst := a.s.ClusterVersion >= versionEpochFirst
	if !epochFirst && (c.Rank < 0 || c.Rank >= run.WorldSize) {
		return nil, errcode.New(errcode.BadInput, "rank %d outside [0,%d)", c.Rank, run.WorldSize)
	}
	if err := a.timedOut(run); err != nil {
		return run.Summary(), err // timedOut already failed the run
	}
	if c.Root != run.Root {
		err := a.fail(run, errcode.RootMismatch, "rank %d attested root %s, run root (alias %s generation %d) is %s", c.Rank, c.Root, run.Alias, run.Generation, run.Root)
		return run.Summary(), err
	}
	if c.Epoch != nil && *c.Epoch != run.Epoch {
		return run.Summary(), staleAttestation(c, run)
	}
	if epochFirst && (c.Rank < 0 || c.Rank >= run.WorldSize) {
		return nil, errcode.New(errcode.BadInput, "rank %d outside [0,%d)", c.Rank, run.WorldSize)
	}
	rel := a.s.Releases[run.Root.String()]
	want := map[manifest.Digest]int{}
	for _, i := range run.Assignment[c.Rank] {
		want[rel.Shards[i]]++
	}
	got := map[manifest.Digest]int{}
	for _, d := range c.Shards {
		got[d]++
		if got[d] > want[d] {
			err := a.fail(run, errcode.ShardNotAssigned, "rank %d attested shard %s outside its assignment (epoch %d)", c.Rank, d, run.Epoch)
			return run.Summary(), err
		}
	}
	if len(c.Shards) != len(run.Assignment[c.Rank]) {
		return nil, errcode.New(errcode.BadInput, "rank %d attested %d of its %d assigned shards", c.Rank, len(c.Shards), len(run.Assignment[c.Rank]))
	}
	if run.Attestations[c.Rank] == nil {
		run.Attested++
	}
	run.Attestations[c.Rank] = &Attestation{Epoch: run.Epoch, Root: c.Root, Shards: slices.Clone(c.Shards), At: a.now}
	if run.Attested == run.WorldSize && run.Barrier == BarrierClosed {
		run.Barrier, run.State, run.BarrierOpened = BarrierOpen, RunRunning, a.now
	}
	return run.Summary(), nil
}

// staleAttestation is the STALE_EPOCH refusal of an attestation bound to
// an epoch other than run's.
func staleAttestation(c *Attest, run *Run) error {
	return errcode.New(errcode.StaleEpoch, "rank %d attested for epoch %d, the run is at epoch %d", c.Rank, *c.Epoch, run.Epoch)
}

func (a *applier) checkBarrier(c *CheckBarrier) (any, error) {
	run, err := a.liveRun(c.Run)
	if err != nil {
		if run != nil {
			return run.Summary(), err
		}
		return nil, err
	}
	if err := a.timedOut(run); err != nil {
		return run.Summary(), err // timedOut already failed the run
	}
	return run.Summary(), nil
}

func (a *applier) reassign(c *Reassign) (any, error) {
	run, err := a.liveRun(c.Run)
	if err != nil {
		if run != nil {
			return run.Summary(), err
		}
		return nil, err
	}
	if a.s.ClusterVersion >= versionReassignTimesOut {
		// A barrier deadline that passed fails the run, whoever comes
		// first: the leader's sweep, an attestation or this. Below the
		// version a reassignment gave the late run a new deadline, or
		// opened its barrier on a scale-in, as entries in logs did.
		if err := a.timedOut(run); err != nil {
			return run.Summary(), err // timedOut already failed the run
		}
	}
	spec := reassignDigest(c)
	if e := c.ExpectedEpoch; e != nil {
		switch {
		case run.Epoch == *e:
		case run.Epoch == *e+1 && run.Reassigned == spec:
			return run.Summary(), nil // the retry of the reassignment that made this epoch
		default:
			return run.Summary(), errcode.New(errcode.StaleEpoch, "reassign of run %s expected epoch %d, the run is at epoch %d", c.Run, *e, run.Epoch)
		}
	}
	// The run's own root, never the alias: scale-out and recovery keep
	// reading exactly what the run was pinned to.
	rel := a.s.Releases[run.Root.String()]
	assignment, err := assign(c.WorldSize, c.Assignment, len(rel.Shards))
	if err != nil {
		return nil, err
	}
	reset := make(map[int]bool, len(c.Reset))
	for _, r := range c.Reset {
		if r < 0 || r >= c.WorldSize {
			return nil, errcode.New(errcode.BadInput, "reset rank %d outside [0,%d)", r, c.WorldSize)
		}
		reset[r] = true
	}
	atts := make([]*Attestation, c.WorldSize)
	n := 0
	for r := range atts {
		if r < run.WorldSize && !reset[r] && slices.Equal(run.Assignment[r], assignment[r]) && run.Attestations[r] != nil {
			atts[r] = run.Attestations[r]
			n++
		}
	}
	run.Epoch++
	run.Reassigned = spec
	run.WorldSize, run.Assignment, run.Attestations, run.Attested = c.WorldSize, assignment, atts, n
	switch {
	case n < c.WorldSize:
		run.Barrier, run.State, run.Deadline = BarrierClosed, RunWaiting, a.now+run.BarrierTimeoutMs
	case run.Barrier == BarrierClosed:
		// Scale-in removed the only ranks still missing.
		run.Barrier, run.State, run.BarrierOpened = BarrierOpen, RunRunning, a.now
	}
	return run.Summary(), nil
}

func (a *applier) admitCheckpoint(c *AdmitCheckpoint) (any, error) {
	run, err := a.liveRun(c.Run)
	if err != nil {
		return nil, err
	}
	if c.Root != run.Root {
		return nil, errcode.New(errcode.RootMismatch, "checkpoint of run %s at step %d names root %s, run root is %s", c.Run, c.Step, c.Root, run.Root)
	}
	if p := a.s.Permits[run.Permit]; p.State != PermitOpen {
		return nil, errcode.New(errcode.PermitClosed, "run %s permit %s is %s (%s)", c.Run, p.ID, p.State, p.Reason)
	}
	if run.Barrier != BarrierOpen {
		return nil, errcode.New(errcode.BarrierClosed, "run %s: %d of %d ranks attested at epoch %d", c.Run, run.Attested, run.WorldSize, run.Epoch)
	}
	if c.Step < 0 || c.Step < run.Step {
		return nil, errcode.New(errcode.StepRegression, "run %s: step %d, last admitted step %d", c.Run, c.Step, run.Step)
	}
	if c.Step > run.Step {
		run.Step = c.Step
		run.Checkpoints++
	}
	return run.Summary(), nil
}

func (a *applier) cancelRun(c *CancelRun) (any, error) {
	run := a.s.Runs[c.Run]
	if run == nil {
		return nil, a.s.noRun(c.Run)
	}
	if run.State == RunFailed || run.State == RunCancelled {
		return run.Summary(), nil
	}
	run.State, run.Barrier, run.FailCode, run.FailReason, run.Ended = RunCancelled, BarrierClosed, string(errcode.Canceled), truncate(c.Reason), a.now
	if p := a.s.Permits[run.Permit]; p.State == PermitOpen || p.State == PermitClosed {
		p.State, p.Changed, p.Reason = PermitReleased, a.now, "run cancelled"
	}
	return run.Summary(), nil
}

// ---- retention ----

// PruneResult lists what a prune command removed, each list sorted.
type PruneResult struct {
	Runs    []string `json:"runs"`
	Permits []string `json:"permits"`
	// Releases are the roots whose shard lists were dropped.
	Releases []string `json:"releases"`
}

func (a *applier) prune(c *Prune) (any, error) {
	if c.OlderThanMs < 0 {
		return nil, errcode.New(errcode.BadInput, "prune: olderThanMs %d is negative", c.OlderThanMs)
	}
	cutoff := a.now - c.OlderThanMs
	res := PruneResult{Runs: []string{}, Permits: []string{}, Releases: []string{}}
	for _, id := range sortedKeys(a.s.Runs) {
		// Runs that ended before this field existed have Ended 0.
		if r := a.s.Runs[id]; (r.State == RunFailed || r.State == RunCancelled) && max(r.Ended, r.Created) < cutoff {
			delete(a.s.Runs, id)
			if a.s.PrunedRuns == nil {
				a.s.PrunedRuns = map[string]*PrunedRun{}
			}
			a.s.PrunedRuns[id] = &PrunedRun{Root: r.Root, Generation: r.Generation, State: r.State, Ended: max(r.Ended, r.Created), Pruned: a.now}
			res.Runs = append(res.Runs, id)
		}
	}
	// What stays reachable: every permit an alias's history or a
	// remaining run names, every root in a rollback window or pinned by a
	// remaining run.
	permits, roots := map[string]bool{}, map[string]bool{}
	for _, al := range a.s.Aliases {
		for _, h := range al.History {
			permits[h.Permit] = true
		}
		for _, h := range al.History[max(0, len(al.History)-al.Retain):] {
			roots[h.Root.String()] = true
		}
	}
	for _, r := range a.s.Runs {
		permits[r.Permit] = true
		roots[r.Root.String()] = true
	}
	for _, id := range sortedKeys(a.s.Permits) {
		if p := a.s.Permits[id]; p.State != PermitOpen && !permits[id] && p.Changed < cutoff {
			delete(a.s.Permits, id)
			res.Permits = append(res.Permits, id)
		}
	}
	for _, k := range sortedKeys(a.s.Releases) {
		rel := a.s.Releases[k]
		if rel.Pruned || roots[k] || rel.Registered >= cutoff || rel.State != ReleaseRetired && rel.State != ReleaseInvalid {
			continue
		}
		rel.Shards, rel.Pruned = []manifest.Digest{}, true
		res.Releases = append(res.Releases, k)
	}
	return res, nil
}

// ---- membership ----

func (a *applier) join(c *Join) (any, error) {
	if c.ID == "" || c.RaftAddr == "" || c.HTTPAddr == "" || len(c.ID)+len(c.RaftAddr)+len(c.HTTPAddr) > 1024 {
		return nil, errcode.New(errcode.BadInput, "join needs id, raftAddr and httpAddr")
	}
	n := &NodeInfo{ID: c.ID, RaftAddr: c.RaftAddr, HTTPAddr: c.HTTPAddr}
	a.s.Nodes[c.ID] = n
	return *n, nil
}
