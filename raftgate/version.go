package raftgate

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/shardproof/shardproof/internal/errcode"
)

// CommandVersion is the highest command-schema version this build
// applies: the commands, command fields and state fields it knows.
//
// Version 0 is the baseline: the schema of the builds before the version
// handshake, which report no version. Version 1 adds the state's
// clusterVersion, the setClusterVersion command and advanceFence's
// spareChecked (builds before the handshake may or may not decode it:
// those older than the field halt at it). Version 2 adds no command and
// no field: it changes what Apply does with two commands, which every
// member must do alike, so it applies only once the state's cluster
// version is 2, and a mixed cluster below it applies every entry as
// builds of version 1 do. A register the gate refuses changes nothing
// (versionRefusedRegisterChangesNothing), and an attestation bound to an
// epoch other than the run's is STALE_EPOCH whatever its rank
// (versionEpochFirst). Version 3 adds the state's clusterID and
// setClusterVersion's clusterID (versionClusterID, see identity.go): the
// first raise to 3 or above (a cluster of builds of version 2 upgraded
// at once to this build is raised from 2 to 7 in one step) gives a cluster founded
// before it its identity, and from 3 on Raft connections between members
// carry it and a member refuses another cluster's. Below 3 members dial
// as builds of version 2 do, which cannot read the identity handshake.
// Version 4 adds advanceFence's log and the state's
// fences.tombstoneLog and benchmarkLog (versionFenceLog): the prefix
// digest of the log a fence was advanced with. A node proposes an advance
// with a log only at cluster version 4 (CLUSTER_VERSION below it, and
// Apply refuses one too); entries without it apply as before, and a fence
// advanced by one has no log, so nothing can be checked against it.
// Version 5 adds no command and no field: from cluster version 5 an
// advance to a higher value that names no log is FENCE_LOG_MISMATCH for
// a fence that names its log (versionFenceLogKept), where builds of
// version 4 apply it and drop the log; below 5 every member applies it
// as they do, so a log those builds wrote replays as it applied.
// Version 6 adds no command and no field: from cluster version 6 a
// reassign of a run whose barrier is closed and whose deadline has passed
// fails the run with BARRIER_TIMEOUT, as an attestation does
// (versionReassignTimesOut), where below it the reassignment went through
// and set a new deadline, or opened the barrier when a scale-in removed
// the ranks still missing, for a run the leader's sweep was about to fail.
// Version 7 adds register's and recheck's verifiedBy and the state's
// releases' and rechecks' verifiedBy (versionSigners): the IDs of the
// trusted keys whose signatures of the evidence the leader checked. A
// node logs them only at cluster version 7; below it a signed command is
// logged without them, as builds of version 6 log it, and the state
// records no signer (the answer and the leader's log line still name
// them).
//
// The cluster version (State.ClusterVersion) is the version every member
// applies. A leader raises it when every server of its Raft configuration
// reports a build of at least the new version in /v1/status, and proposes
// nothing of a version above it: a cluster upgraded one member at a time
// stays at the old version, with every member applying every entry, until
// the last member is upgraded.
const CommandVersion uint64 = 7

// versionSpareChecked is the version of AdvanceFence.SpareChecked.
const versionSpareChecked = 1

// versionRefusedRegisterChangesNothing is the cluster version from which
// a register is checked whole before it changes anything. Below it a
// register of a pruned release gave it its shard list back, and one of
// a new root recorded it STAGED, before the checks that refuse it
// (BAD_INPUT for a retry that contradicts the report recorded or for
// another snapshot, NOT_VERIFIED for a VERIFIED report of an INVALID
// release).
const versionRefusedRegisterChangesNothing = 2

// versionEpochFirst is the cluster version from which an attestation is
// checked against the run's epoch before its rank. Below it a rank a
// scale-in removed got BAD_INPUT "rank outside" for an attestation at the
// epoch it verified. A passed deadline and another root fail the run
// before the epoch is looked at, at every version.
const versionEpochFirst = 2

// versionFenceLog is the version of AdvanceFence.Log and of the state's
// Fences.TombstoneLog and BenchmarkLog: the prefix digest of the log a
// fence was advanced with.
const versionFenceLog = 4

// versionFenceLogKept is the cluster version from which a fence that
// names its log is not advanced by a command that names none. Below it
// such an advance moves the fence and drops its log, as builds of
// version 4 applied it: a member of this build replaying their entries,
// or following a leader of theirs in a rolling upgrade, must reach the
// state they reached.
const versionFenceLogKept = 5

// versionReassignTimesOut is the cluster version from which a reassign
// of a run whose barrier is closed past its deadline fails the run
// (BARRIER_TIMEOUT) before anything else is checked, as an attestation
// does. Below it the reassignment was applied: it set a new deadline, or
// opened the barrier when it removed the ranks still missing, so whether
// a late run failed depended on whether the leader's sweep (every 250 ms)
// or the reassignment came first.
const versionReassignTimesOut = 6

// versionSigners is the version of Register.VerifiedBy and
// RecheckCmd.VerifiedBy, and of the state's Release.VerifiedBy and
// Recheck.VerifiedBy: the trusted keys that signed a command's evidence,
// recorded in the replicated state.
const versionSigners = 7

// commandVersion returns the command-schema version of c: that of its
// type, or of the newest field it carries.
func commandVersion(c Command) uint64 {
	switch c := c.(type) {
	case *SetClusterVersion:
		return 1
	case *Register:
		if len(c.VerifiedBy) > 0 {
			return versionSigners
		}
	case *RecheckCmd:
		if len(c.VerifiedBy) > 0 {
			return versionSigners
		}
	case *AdvanceFence:
		if !c.Log.IsZero() {
			return versionFenceLog
		}
		if c.SpareChecked {
			return versionSpareChecked
		}
	}
	return 0
}

// VersionError is a cluster version above the one this build applies:
// Cluster is the cluster's (or a snapshot's, or a backup's), Build this
// build's CommandVersion.
type VersionError struct {
	Cluster, Build uint64
}

func (e *VersionError) Error() string {
	return fmt.Sprintf("%s: the gate cluster's command-schema version is %d, above %d, the highest this build applies",
		errcode.ClusterVersion, e.Cluster, e.Build)
}

// ErrorCode implements errcode.Coder.
func (e *VersionError) ErrorCode() errcode.Code { return errcode.ClusterVersion }

// ClusterVersionResult is the result of setClusterVersion.
type ClusterVersionResult struct {
	ClusterVersion uint64 `json:"clusterVersion"`
}

// MemberVersion is what a leader learnt of one server of its Raft
// configuration when it last asked for the members' versions.
type MemberVersion struct {
	ID string `json:"id"`
	// CommandVersion is the version the member's /v1/status reports (0:
	// none, a build before the handshake); nil when it is unknown.
	CommandVersion *uint64 `json:"commandVersion,omitempty"`
	// Error says why the version is unknown.
	Error string `json:"error,omitempty"`
}

func (m MemberVersion) String() string {
	switch {
	case m.CommandVersion == nil:
		return fmt.Sprintf("%s: unknown (%s)", m.ID, m.Error)
	case *m.CommandVersion == 0:
		return m.ID + ": none (a build before the version handshake)"
	}
	return fmt.Sprintf("%s: %d", m.ID, *m.CommandVersion)
}

// versionPollTimeout bounds one poll of the members' versions (see
// Config.versionPollTimeout).
const versionPollTimeout = 3 * time.Second

// versions is a leader's view of its members' versions.
type versions struct {
	// raise serializes a raise's commit with adding a voter: a joiner is
	// checked against the version once any raise committed, and a raise
	// commits only while the configuration it polled is the latest, so
	// it polled every voter added before it. It serializes this leader's
	// configuration changes too (a join's nonvoter, a promotion, a
	// removal): a promotion checks under it that its learner is still a
	// nonvoter, so a learner removed while it was asked stays removed.
	// None holds it across a member's answer: a poll waits for none, and
	// a join's probe of the joiner and a promotion's ask of the learner
	// are done before it.
	raise sync.Mutex
	// polling is set while the leader loop's raise (raiseInBackground)
	// is in flight.
	polling atomic.Bool
	// changes counts the configuration changes this node asked Raft for
	// (a voter added, a server removed), whatever their outcome: a raise
	// compares it, with the term, across its poll, since a server removed
	// and added back at the same addresses leaves the server list as it
	// was.
	changes atomic.Uint64
	mu      sync.Mutex
	// changedIDs counts the same changes per server ID (under mu, made
	// under raise too): a promotion compares its learner's, with the
	// term, across its ask, since a learner removed and joined again at
	// the same addresses is a nonvoter there as before (see promote).
	changedIDs map[raft.ServerID]uint64
	// last is the latest poll's answer, for /v1/status and errors.
	last []MemberVersion
	// said is the last poll's answer as logged, so a lasting mixed
	// cluster logs once, not at every poll.
	said string
	// saidRecord is the last refusal of this member's record request as
	// logged (see sayRecord).
	saidRecord string
}

// BuildVersion is the highest command-schema version this node's build
// applies (CommandVersion).
func (n *Node) BuildVersion() uint64 { return n.fsm.version }

// ClusterVersion is the cluster version in this node's state.
func (n *Node) ClusterVersion() uint64 {
	var v uint64
	n.fsm.Read(func(s *State) { v = s.ClusterVersion })
	return v
}

// pollVersions asks every server of the Raft configuration for its
// build's version: this node itself, the others at the HTTP address of
// their join record (/v1/status, which must answer with their ID and,
// from a build that reports a version, the configuration's Raft address
// for them). It
// returns the answers in configuration order, the servers it asked (the
// configuration), and the lowest version, with ok false when some
// version is unknown (a member down, unreachable, or without a join
// record yet).
func (n *Node) pollVersions(ctx context.Context) (out []MemberVersion, servers []raft.Server, lowest uint64, ok bool) {
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, nil, 0, false
	}
	servers = f.Configuration().Servers
	http := map[string]string{}
	n.fsm.Read(func(s *State) {
		for id, ni := range s.Nodes {
			http[id] = ni.HTTPAddr
		}
	})
	ctx, cancel := context.WithTimeout(ctx, n.cfg.versionPollTimeout)
	defer cancel()
	out = make([]MemberVersion, len(servers))
	var wg sync.WaitGroup
	for i, sv := range servers {
		id := string(sv.ID)
		out[i].ID = id
		if id == n.cfg.ID {
			v := n.BuildVersion()
			out[i].CommandVersion = &v
			continue
		}
		addr, raftAddr := http[id], string(sv.Address)
		if addr == "" {
			out[i].Error = "no join record with its HTTP address yet"
			continue
		}
		wg.Add(1)
		go func(m *MemberVersion) {
			defer wg.Done()
			c := n.memberClient(addr)
			defer c.Close()
			c.RetryFor = -1
			st, err := c.Status(ctx)
			switch {
			case err != nil:
				m.Error = fmt.Sprintf("its status at %s: %v", addr, err)
			case st.ID != m.ID:
				m.Error = fmt.Sprintf("the gate at %s is %s", addr, truncate(st.ID))
			case st.CommandVersion > 0 && st.RaftAddr != raftAddr:
				// Another process of that ID: one left running at a
				// member's old addresses, whose join record did not
				// follow it (or a gate of another cluster).
				m.Error = fmt.Sprintf("the gate at %s is %s at raftAddr %s, and the Raft configuration has %s at %s", addr, m.ID, truncate(st.RaftAddr), m.ID, raftAddr)
			default:
				v := st.CommandVersion
				m.CommandVersion = &v
			}
		}(&out[i])
	}
	wg.Wait()
	ok = len(out) > 0
	lowest = n.BuildVersion()
	for _, m := range out {
		if m.CommandVersion == nil {
			ok = false
			continue
		}
		lowest = min(lowest, *m.CommandVersion)
	}
	return out, servers, lowest, ok
}

// raiseClusterVersion raises the cluster version, as leader, to the lowest
// version the servers of its Raft configuration report, when every one
// answered and that is above the current version. It returns the cluster
// version after it and the members' answers. A member that does not
// answer keeps the version where it is: it may run an older build, and
// would halt at the raise.
//
// The poll takes no lock: a member that does not answer (black-holed, its
// SYNs dropped) holds it up to versionPollTimeout, and a join waited for
// it that long. The raise commits under vers.raise, and only if the Raft
// configuration is still the one polled (the same servers at the same
// addresses): a voter added meanwhile (under
// the same lock, so committed before the check) was not asked, and the
// raise waits for the next poll. A member's join record that changes
// during a poll needs no lock either: an answer counts only from the
// member's ID at the configuration's Raft address, whichever of its HTTP
// addresses gave it.
func (n *Node) raiseClusterVersion(ctx context.Context) (uint64, []MemberVersion, error) {
	cv := n.ClusterVersion()
	if cv >= n.BuildVersion() {
		return cv, nil, nil
	}
	if !n.IsLeader() {
		return cv, nil, ErrNotLeader
	}
	term, changes := n.raft.CurrentTerm(), n.vers.changes.Load()
	members, polled, lowest, ok := n.pollVersions(ctx)
	n.vers.mu.Lock()
	n.vers.last = members
	n.vers.mu.Unlock()
	n.vers.raise.Lock()
	defer n.vers.raise.Unlock()
	// Another raise may have committed while this one polled.
	cv = n.ClusterVersion()
	if !ok || lowest <= cv {
		n.sayVersions(cv, members)
		return cv, members, nil
	}
	// The servers, not the configuration's index: GetConfiguration
	// reports index 0 whatever the configuration (hashicorp/raft 1.7),
	// and a voter added while it polled was let in by no raise. A server
	// removed and added back at the same addresses leaves the servers as
	// they were, so no change asked of this leader either, and the same
	// term: a leader of another term may have changed it.
	if f := n.raft.GetConfiguration(); f.Error() != nil || !slices.Equal(f.Configuration().Servers, polled) ||
		n.raft.CurrentTerm() != term || n.vers.changes.Load() != changes {
		// A server came or went while it polled: ask again next time.
		return cv, members, nil
	}
	raise := &SetClusterVersion{Version: lowest}
	if lowest >= versionClusterID {
		raise.ClusterID = n.proposedClusterID()
	}
	res, err := n.Apply(raise)
	if err != nil {
		return cv, members, err
	}
	cv = res.Value.(ClusterVersionResult).ClusterVersion
	n.log.Info("gate cluster version raised: every member runs a build that applies it", "clusterVersion", cv, "members", versionList(members))
	return cv, members, nil
}

// raiseInBackground starts, from the leader loop, a raise of the cluster
// version (raiseClusterVersion) unless one is in flight, and returns at
// once: the loop sweeps barrier deadlines, prunes and records while a
// member that does not answer holds the poll. Shutdown ends the poll.
func (n *Node) raiseInBackground() {
	if !n.vers.polling.CompareAndSwap(false, true) {
		return
	}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		defer n.vers.polling.Store(false)
		ctx, cancel := n.untilStop(context.WithCancel(context.Background()))
		defer cancel()
		if _, _, err := n.raiseClusterVersion(ctx); err != nil {
			n.log.Warn("raise the cluster version", "code", errcode.Of(err), "err", err)
		}
	}()
}

// sayVersions logs, once per change, why the cluster version stays
// below this build's.
func (n *Node) sayVersions(cv uint64, members []MemberVersion) {
	list := versionList(members)
	n.vers.mu.Lock()
	defer n.vers.mu.Unlock()
	if list == n.vers.said {
		return
	}
	n.vers.said = list
	n.log.Info("gate cluster version stays until every member reports a build of a higher one", "clusterVersion", cv, "buildVersion", n.BuildVersion(), "members", list)
}

// versionList joins the members' answers.
func versionList(members []MemberVersion) string {
	var s []string
	for _, m := range members {
		s = append(s, m.String())
	}
	return strings.Join(s, ", ")
}

// lagging returns the members' answers whose version is below want or
// unknown, from the latest poll.
func (n *Node) lagging(want uint64) []string {
	n.vers.mu.Lock()
	defer n.vers.mu.Unlock()
	var out []string
	for _, m := range n.vers.last {
		if m.CommandVersion == nil || *m.CommandVersion < want {
			out = append(out, m.String())
		}
	}
	return out
}

// needVersion returns nil once the cluster version is at least want,
// raising it first if every member can take it; otherwise the
// CLUSTER_VERSION refusal of what, which needs want.
func (n *Node) needVersion(want uint64, what string) error {
	if n.ClusterVersion() >= want {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), n.cfg.versionPollTimeout+n.cfg.ApplyTimeout)
	defer cancel()
	cv, _, err := n.raiseClusterVersion(ctx)
	if err != nil {
		return err
	}
	if cv >= want {
		return nil
	}
	why := "this member's build applies up to " + fmt.Sprint(n.BuildVersion())
	if n.BuildVersion() >= want {
		why = "members: " + strings.Join(n.lagging(want), "; ")
	}
	return errcode.New(errcode.ClusterVersion, "%s needs the gate cluster's command-schema version %d, and it is %d until every member runs a build of version %d or later (%s); upgrade those members one at a time (the leader raises the version once they all report it; gate status shows it) and send this again; nothing changed",
		what, want, cv, want, why)
}

// stampFence sets f.SpareChecked when the cluster version has it, as
// every advance had before the version handshake. Below it, f goes
// without the field, which every build decodes, unless that would close
// a permit the field keeps open: that advance is CLUSTER_VERSION and
// changes nothing, so no run stops for a recheck the gate already holds.
// The permits are judged on the leader's state before the proposal, once
// it holds every entry committed before the leader's term (a recheck a
// client was told is done); a recheck committed between the two leaves
// the permit to the rule without the field, as builds before the
// handshake apply it.
func (n *Node) stampFence(f *AdvanceFence) error {
	f.SpareChecked = false
	if n.ClusterVersion() < versionSpareChecked {
		if err := n.caughtUp(); err != nil {
			return err
		}
	}
	var spare []string
	n.fsm.Read(func(s *State) {
		if s.ClusterVersion < versionSpareChecked {
			spare = wouldSpare(s, f.Kind, f.Value)
		}
	})
	if len(spare) == 0 && n.ClusterVersion() < versionSpareChecked {
		return nil
	}
	if err := n.needVersion(versionSpareChecked, fmt.Sprintf("advancing the %s fence to %d keeps open permits %s (their releases are checked at or above the new fences with no hits), which",
		truncate(f.Kind), f.Value, strings.Join(spare, ", "))); err != nil {
		return err
	}
	f.SpareChecked = true
	return nil
}

// checkJoinerVersion refuses a joiner whose build is below the cluster
// version: it would halt at the first entry or snapshot of that version.
// The version is the one committed before the leader's term too, which a
// leader elected a moment ago may not have applied yet.
func (n *Node) checkJoinerVersion(j *Join, st *Status) error {
	if err := n.caughtUp(); err != nil {
		return err
	}
	if cv := n.ClusterVersion(); st.CommandVersion < cv {
		return errcode.New(errcode.ClusterVersion, "join of %s: its build applies command-schema versions up to %d (%s), and the cluster's version is %d, which never goes down; start it with a build of version %d or later",
			truncate(j.ID), st.CommandVersion, noneIfZero(st.CommandVersion), cv, cv)
	}
	return nil
}

func noneIfZero(v uint64) string {
	if v == 0 {
		return "it reports none: a build before the version handshake"
	}
	return "as its status reports"
}

// changed counts a configuration change of id this leader asks Raft for,
// whatever its outcome (see changes, changedIDs). Called with raise held.
func (v *versions) changed(id raft.ServerID) {
	v.changes.Add(1)
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.changedIDs == nil {
		v.changedIDs = map[raft.ServerID]uint64{}
	}
	v.changedIDs[id]++
}

// changesOf is how many configuration changes of id this node asked for.
func (v *versions) changesOf(id raft.ServerID) uint64 {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.changedIDs[id]
}
