package raftgate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/shardproof/shardproof/internal/errcode"
)

// A member that joins on an empty directory, under a new ID or under the
// ID of a member whose directory was lost, is a learner until the leader
// promotes it (etcd's learners, with hashicorp/raft's nonvoters).
//
// Raft's safety rests on a voter never forgetting its term, its vote and
// the entries it acknowledged. A member that lost its directory and came
// back under its old ID as a voter had forgotten all three: with term 0,
// no vote and an empty configuration, hashicorp/raft granted its vote to
// any candidate, in a term in which it had voted for another already (two
// leaders of one term) and to a candidate whose log lacked entries
// committed with its old acknowledgements (acknowledged writes lost). So:
//
//   - the joiner writes a learner marker (learnerFile) before its Raft
//     starts; while the marker is there it grants no vote and no pre-vote
//     and asks for none (voteGate), whatever its configuration says;
//   - the leader makes the joiner a nonvoter (demoting the old voter of
//     that ID first, which never shrinks what the cluster tolerates: the
//     dead voter counted in no quorum that could form without it) and
//     answers the join with the index of that configuration entry;
//   - the joiner notes, from the configuration entries its log holds up to
//     its commit index and its newest snapshot's configuration
//     (watchLearner; learnerAnswered for an entry committed before the
//     answer came, or compacted into a snapshot by then, whose
//     configuration stands for it), the first one at or after that index
//     that makes it a nonvoter, and reports it in /v1/status;
//   - the leader (any leader: promoteLoop runs on every member)
//     promotes a nonvoter to voter once its log holds every entry the
//     leader had committed when it asked, and it reported that nonvoter entry
//     (one that caught up without reporting one is made a nonvoter again,
//     to find one); it asks each learner on its own, with a timeout of its
//     own, so a learner that never answers holds no other's promotion,
//     and makes the change only if, under the lock its other
//     configuration changes and a removal take (vers.raise), the
//     configuration still lists the learner as a nonvoter, and neither
//     the term nor this leader's changes of its ID (a removal, a join
//     again) moved since it asked: a learner removed while it was asked
//     stays removed, and one that joined again meanwhile is promoted on
//     an answer of its own, not on its old incarnation's;
//   - the joiner drops its marker, and votes, at the first committed
//     configuration after that entry that makes it a voter, in its log or
//     in its newest snapshot (a promotion the leader compacted away before
//     the joiner got it arrives in a snapshot only).
//
// Committed entries are never undone, so neither the old configuration,
// nor a demotion a later leader cut from the log, is taken for the
// promotion.

// learnerFile is the learner marker in a data directory.
const learnerFile = "learner"

// learnerMark is the marker's content.
type learnerMark struct {
	// Since is the log index of the configuration entry that made this
	// member a nonvoter in answer to its join (0: no answer yet).
	Since uint64 `json:"since"`
	// NonvoterAt is the index of the first committed configuration at or
	// after Since that lists this member as a nonvoter (0: none yet).
	NonvoterAt uint64 `json:"nonvoterAt,omitempty"`
}

// LearnerStatus is a learner's progress, in its /v1/status.
type LearnerStatus struct {
	// Since is the index of the configuration entry the leader made this
	// member a nonvoter with (0: its join was not answered yet).
	Since uint64 `json:"since"`
	// NonvoterAt is the index of the committed configuration, at or
	// after Since, in which this member found itself a nonvoter: the
	// leader promotes it only once it is set.
	NonvoterAt uint64 `json:"nonvoterAt,omitempty"`
}

// learner is a node's learner state.
type learner struct {
	// on is set while the marker is there: no votes.
	on   atomic.Bool
	mu   sync.Mutex
	mark learnerMark
	path string
	// passes counts watchLearner's passes over the log (tests wait for
	// them).
	passes atomic.Uint64
	// scan is held by a pass over the log (scanLearner), which goes on
	// from scanned (the last log index read) and snapConf (the newest
	// snapshot configuration's index read), and by the read of the
	// entry the join's answer names (learnerAnswered).
	scan              sync.Mutex
	scanned, snapConf uint64
}

// load reads the marker in dir, if any.
func (l *learner) load(dir string) error {
	l.path = filepath.Join(dir, learnerFile)
	b, err := os.ReadFile(l.path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return errcode.Wrap(errcode.IO, err, "read the learner marker")
	}
	var m learnerMark
	if err := json.Unmarshal(b, &m); err != nil {
		return errcode.Wrap(errcode.BadDocument, err, "learner marker %s", l.path)
	}
	l.mark = m
	l.on.Store(true)
	return nil
}

// begin makes the node a learner: the marker is on disk before Raft
// starts, so a crash at any point leaves a node that does not vote.
func (l *learner) begin() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.mark = learnerMark{}
	if err := l.save(); err != nil {
		return err
	}
	l.on.Store(true)
	return nil
}

// save writes the marker durably (temp file, fsync, rename, fsync of the
// directory). Called with mu held.
func (l *learner) save() error {
	b, _ := json.Marshal(l.mark)
	tmp := l.path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err == nil {
		_, err = f.Write(append(b, '\n'))
		if err == nil {
			err = f.Sync()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err == nil {
		err = os.Rename(tmp, l.path)
	}
	if err == nil {
		err = syncDir(filepath.Dir(l.path))
	}
	if err != nil {
		return errcode.Wrap(errcode.IO, err, "write the learner marker")
	}
	return nil
}

// end drops the marker: the node votes from now on.
func (l *learner) end() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.endLocked()
}

func (l *learner) endLocked() error {
	if l.path == "" {
		return nil
	}
	if err := os.Remove(l.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return errcode.Wrap(errcode.IO, err, "remove the learner marker")
	}
	if err := syncDir(filepath.Dir(l.path)); err != nil {
		return errcode.Wrap(errcode.IO, err, "remove the learner marker")
	}
	l.on.Store(false)
	return nil
}

// answered records the index of the configuration entry the leader's
// answer to the join named, and with it a configuration c committed at
// index at (at or after since) that the node read already (else nil): if
// c lists id as a nonvoter, at is its nonvoter index (see committed).
func (l *learner) answered(id raft.ServerID, since, at uint64, c *raft.Configuration) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.on.Load() || l.mark.Since >= since {
		return nil
	}
	l.mark = learnerMark{Since: since}
	if c != nil && at >= since {
		for _, sv := range c.Servers {
			if sv.ID == id && sv.Suffrage == raft.Nonvoter {
				l.mark.NonvoterAt = at
			}
		}
	}
	return l.save()
}

// learnerAnswered takes the answer to this node's join, which names its
// nonvoter entry at index since (learner.answered). The leader's
// replication can beat its answer: an entry this node committed already
// is taken with the answer, at once. watchLearner had read it, and
// passed it for good, since it could not tell it from an older
// configuration listing this ID before the answer came; and a leader that
// saw the answer in /v1/status without the entry took the node for one
// that caught up from a snapshot, and made it a nonvoter a second time,
// which delayed its promotion by a promotion tick or more.
//
// It reads under the scan lock, so no pass of watchLearner reads and
// passes the entry between this read and the answer's record. An entry
// committed and compacted into a snapshot already (this node's own, or
// the leader's it installed) is in no log of this node: the newest
// snapshot's configuration, committed at or after since, stands for it,
// as watchLearner takes it for an entry compacted after the answer.
// Before, the node found no nonvoter entry and waited for the leader to
// make it a nonvoter again, at a periodic look of the leader only.
func (n *Node) learnerAnswered(since uint64) error {
	ls := &n.learner
	ls.scan.Lock()
	defer ls.scan.Unlock()
	var c *raft.Configuration
	at := since
	if since <= n.raft.CommitIndex() {
		var l raft.Log
		if err := n.store.GetLog(since, &l); err == nil {
			if l.Type == raft.LogConfiguration {
				cfg := raft.DecodeConfiguration(l.Data)
				c = &cfg
			}
		} else if metas, err := n.snaps.List(); err == nil && len(metas) > 0 && metas[0].ConfigurationIndex >= since {
			cfg := metas[0].Configuration
			c, at = &cfg, metas[0].ConfigurationIndex
		}
	}
	return ls.answered(raft.ServerID(n.cfg.ID), since, at, c)
}

// status is the learner's progress, nil once it votes.
func (l *learner) status() *LearnerStatus {
	if !l.on.Load() {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.on.Load() {
		return nil
	}
	return &LearnerStatus{Since: l.mark.Since, NonvoterAt: l.mark.NonvoterAt}
}

// committed takes the configuration committed at index. It returns
// whether the node was promoted by it.
func (l *learner) committed(id raft.ServerID, index uint64, c raft.Configuration) (promoted bool, err error) {
	if !l.on.Load() {
		return false, nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.on.Load() || l.mark.Since == 0 || index < l.mark.Since {
		return false, nil
	}
	var suffrage raft.ServerSuffrage = -1
	for _, sv := range c.Servers {
		if sv.ID == id {
			suffrage = sv.Suffrage
		}
	}
	switch {
	case suffrage == raft.Nonvoter && l.mark.NonvoterAt == 0:
		l.mark.NonvoterAt = index
		return false, l.save()
	case suffrage == raft.Voter && l.mark.NonvoterAt > 0 && index > l.mark.NonvoterAt:
		return true, l.endLocked()
	}
	return false, nil
}

// syncDir fsyncs a directory, so a rename or removal in it is durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, errors.ErrUnsupported) {
		return err
	}
	return nil
}

// watchLearner, while the node is a learner, reads the configuration
// entries its log holds up to its commit index (committed, so never
// undone), in order, and then the configuration of its newest snapshot
// (committed as well), for the learner's progress (learner.committed). It
// reads the log, not the FSM's progress, so a member whose state lags
// behind its log (a slow disk, a restart replaying its log) is promoted
// and votes as one whose log caught up would.
func (n *Node) watchLearner() {
	t := time.NewTicker(n.cfg.learnerScanInterval)
	defer t.Stop()
	for n.learner.on.Load() {
		select {
		case <-n.stop:
			return
		case <-t.C:
		}
		n.scanLearner(n.raft.CommitIndex())
		n.learner.passes.Add(1)
	}
}

// scanLearner is one pass over the log (scanLearnerLog) up to commit, a
// commit index this node reached. /v1/status runs one too, up to the
// commit index it reports, so a leader never sees a learner that
// committed its nonvoter entry but has not read it yet, which it would
// take for one that got the entry in a snapshot, and make a nonvoter
// again (see promote).
func (n *Node) scanLearner(commit uint64) {
	l := &n.learner
	if !l.on.Load() {
		return
	}
	l.scan.Lock()
	defer l.scan.Unlock()
	l.scanned, l.snapConf = n.scanLearnerLog(l.scanned, l.snapConf, commit)
}

// scanLearnerLog reads the committed entries after scanned up to commit,
// then the newest snapshot's configuration if it is newer than
// snapConf's; it returns both advanced past what it read.
func (n *Node) scanLearnerLog(scanned, snapConf, commit uint64) (uint64, uint64) {
	first, err := n.store.FirstIndex()
	if err != nil {
		return scanned, snapConf
	}
	for i := max(scanned+1, first); i <= commit && n.learner.on.Load(); i++ {
		var l raft.Log
		if err := n.store.GetLog(i, &l); err != nil {
			// Compacted meanwhile: the entries before the snapshot
			// are gone, and what they said is in no log of this
			// node (the leader makes it a nonvoter again).
			break
		}
		scanned = i
		if l.Type != raft.LogConfiguration {
			continue
		}
		promoted, err := n.learner.committed(raft.ServerID(n.cfg.ID), i, raft.DecodeConfiguration(l.Data))
		if err != nil {
			// The marker stays as it was: the node keeps refusing
			// votes, and reads the entry again.
			n.log.Error("learner marker", "code", errcode.Of(err), "err", err)
			scanned = i - 1
			break
		}
		if promoted {
			n.log.Info("promoted to voter: this member votes from now on", "index", i)
		}
	}
	// The configuration of its newest snapshot, committed too: the
	// entries a snapshot the leader sent replaced (or that this
	// node compacted) are in no log of this node, and a promotion
	// among them would otherwise never be found: the node would
	// stay a voter that grants no vote, which no leader promotes
	// again.
	if !n.learner.on.Load() {
		return scanned, snapConf
	}
	metas, err := n.snaps.List()
	if err != nil || len(metas) == 0 || metas[0].ConfigurationIndex <= snapConf {
		return scanned, snapConf
	}
	m := metas[0]
	promoted, err := n.learner.committed(raft.ServerID(n.cfg.ID), m.ConfigurationIndex, m.Configuration)
	if err != nil {
		n.log.Error("learner marker", "code", errcode.Of(err), "err", err)
		return scanned, snapConf
	}
	snapConf = m.ConfigurationIndex
	if promoted {
		n.log.Info("promoted to voter (in a snapshot): this member votes from now on", "index", m.ConfigurationIndex)
	}
	return scanned, snapConf
}

// learnerScanInterval is how often a learner reads its log's new
// committed entries.
const learnerScanInterval = 50 * time.Millisecond

// voteGate is the Raft transport as the node's Raft sees it: while the
// node is a learner it answers every RequestVote and RequestPreVote
// refused, and sends none (so it neither grants a vote nor campaigns);
// everything else passes, heartbeats under n.beats. It wraps the network
// transport, whose stream layer runs the token and identity handshakes
// (auth.go): it sees only the RPCs of connections they let through.
type voteGate struct {
	*raft.NetworkTransport
	n    *Node
	once sync.Once
	out  chan raft.RPC
}

// errLearner is what a learner's vote requests fail with.
var errLearner = errors.New("this member is a learner and asks for no votes until the leader promotes it")

// Consumer passes the transport's RPCs on, answering vote requests itself
// while the node is a learner.
func (g *voteGate) Consumer() <-chan raft.RPC {
	g.once.Do(func() {
		g.out = make(chan raft.RPC)
		in := g.NetworkTransport.Consumer()
		go func() {
			for {
				var rpc raft.RPC
				select {
				case rpc = <-in:
				case <-g.n.stop:
					return
				}
				if g.n.learner.on.Load() && g.refuse(rpc) {
					continue
				}
				select {
				case g.out <- rpc:
				case <-g.n.stop:
					return
				}
			}
		}()
	})
	return g.out
}

// refuse answers rpc refused if it asks for a vote.
func (g *voteGate) refuse(rpc raft.RPC) bool {
	h := raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte(g.n.cfg.ID), Addr: g.EncodePeer(raft.ServerID(g.n.cfg.ID), g.LocalAddr())}
	switch rpc.Command.(type) {
	case *raft.RequestVoteRequest:
		rpc.Respond(&raft.RequestVoteResponse{RPCHeader: h, Granted: false}, nil)
	case *raft.RequestPreVoteRequest:
		rpc.Respond(&raft.RequestPreVoteResponse{RPCHeader: h, Granted: false}, nil)
	default:
		return false
	}
	return true
}

// SetHeartbeatHandler passes Raft's heartbeat handler to the transport,
// which calls it on its connection goroutines: each call holds n.beats,
// so Shutdown closes the store only once the calls in flight are done,
// and the calls after are refused (see Shutdown).
func (g *voteGate) SetHeartbeatHandler(cb func(raft.RPC)) {
	if cb == nil {
		g.NetworkTransport.SetHeartbeatHandler(nil)
		return
	}
	g.NetworkTransport.SetHeartbeatHandler(func(rpc raft.RPC) {
		g.n.beats.RLock()
		defer g.n.beats.RUnlock()
		if g.n.beatsOff {
			rpc.Respond(nil, raft.ErrTransportShutdown)
			return
		}
		cb(rpc)
	})
}

// RequestVote asks for a vote, unless the node is a learner.
func (g *voteGate) RequestVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestVoteRequest, resp *raft.RequestVoteResponse) error {
	if g.n.learner.on.Load() {
		return errLearner
	}
	return g.NetworkTransport.RequestVote(id, target, args, resp)
}

// RequestPreVote asks for a pre-vote, unless the node is a learner.
func (g *voteGate) RequestPreVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestPreVoteRequest, resp *raft.RequestPreVoteResponse) error {
	if g.n.learner.on.Load() {
		return errLearner
	}
	return g.NetworkTransport.RequestPreVote(id, target, args, resp)
}

// nonvoterIndexHeader carries, on the answer to a POST /v1/join, the log
// index of the configuration entry that made the joiner a nonvoter (see
// LearnerStatus.Since). A leader of a build before learners sends none: it
// added the joiner as a voter. A follower passes the leader's on; one of
// a build before learners does not, so the answer's result carries the
// index too (joinResult), in the body every follower passes on as it is.
const nonvoterIndexHeader = "X-Shardproof-Nonvoter-Index"

// joinResult is the result of a POST /v1/join: the member's record, and
// the index of the configuration entry that made it a nonvoter (absent
// from a leader of a build before learners).
type joinResult struct {
	NodeInfo
	NonvoterIndex uint64 `json:"nonvoterIndex,omitempty"`
}

// joinAnswer is a joiner's view of the answer to its POST /v1/join.
type joinAnswer struct {
	joinResult
	nonvoter uint64
}

func (a *joinAnswer) readHeader(h http.Header) {
	a.nonvoter, _ = strconv.ParseUint(h.Get(nonvoterIndexHeader), 10, 64)
	a.nonvoter = max(a.nonvoter, a.NonvoterIndex)
}

// addLearner makes the joiner j, whose /v1/status answered st, a
// nonvoter, unless its build is below the cluster version
// (checkJoinerVersion): a voter of that ID (a member whose directory was
// lost) is demoted first. It returns the index of the nonvoter entry. It
// holds vers.raise from the check to the configuration's commit, as a
// raise of the cluster version expects (see raiseClusterVersion).
func (n *Node) addLearner(j *Join, st *Status) (uint64, error) {
	if j.ID == n.cfg.ID {
		return 0, errcode.New(errcode.BadInput, "join of %s: that is the leader's own ID; a member joins under an ID of its own", truncate(j.ID))
	}
	n.vers.raise.Lock()
	defer n.vers.raise.Unlock()
	if err := n.checkJoinerVersion(j, st); err != nil {
		return 0, err
	}
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return 0, errcode.Wrap(errcode.Internal, err, "read the configuration")
	}
	n.vers.changed(raft.ServerID(j.ID))
	for _, sv := range f.Configuration().Servers {
		if string(sv.ID) == j.ID && sv.Suffrage == raft.Voter {
			// Its votes and acknowledgements are lost with its
			// directory: it counts in no quorum until promoted again.
			if err := n.raft.DemoteVoter(sv.ID, 0, n.cfg.ApplyTimeout).Error(); err != nil {
				return 0, configChangeError(err, "demote voter %s", j.ID)
			}
			n.log.Info("voter demoted to nonvoter: it rejoins on an empty directory", "id", j.ID)
		}
	}
	af := n.raft.AddNonvoter(raft.ServerID(j.ID), raft.ServerAddress(j.RaftAddr), 0, n.cfg.ApplyTimeout)
	if err := af.Error(); err != nil {
		return 0, configChangeError(err, "add nonvoter %s", j.ID)
	}
	return af.Index(), nil
}

// configChangeError is the coded error of a failed configuration change,
// classified as a command's (notAppended).
func configChangeError(err error, format string, args ...any) error {
	if notAppended(err) {
		return errcode.Wrap(errcode.NotLeader, err, format, args...)
	}
	return errcode.Wrap(errcode.Indeterminate, err, format, args...)
}

// StoreConfiguration takes nothing from a configuration entry: it makes
// the FSM a raft ConfigurationStore, so the index its snapshots are taken
// at counts configuration entries too. A promotion is often the log's last
// entry, and raft takes no snapshot before the FSM's index passed the
// latest configuration's ("cannot take snapshot now").
func (f *FSM) StoreConfiguration(uint64, raft.Configuration) {}

// promoteLoop runs promoteInBackground every promoteInterval (a second,
// or versionInterval if shorter) while the node leads, beside the leader
// loop (whose interval tests stretch): until then a cluster that gained a
// member tolerates no more failures than before. After this leader added
// a learner (joined), it runs it every promoteWatchInterval for
// promoteWatchFor: a learner is promoted once it caught up, not at the
// next tick after that, a second later, and one more for each learner
// that joined at once (the first one's promotion is an entry the second
// has not yet when asked). The checks are promote's either way; only the
// ticks make a learner that caught up without its nonvoter entry a
// nonvoter again (readd), the watch's looks, 100 ms apart, would catch
// learners that have the entry but have not read it yet.
func (n *Node) promoteLoop() {
	t := time.NewTicker(n.cfg.promoteInterval)
	defer t.Stop()
	// fast ticks while a watch runs, until watchUntil.
	fast := time.NewTicker(promoteWatchInterval)
	fast.Stop()
	defer fast.Stop()
	var watchUntil time.Time
	for {
		readd := true
		select {
		case <-n.stop:
			return
		case <-t.C:
		case <-n.joined:
			watchUntil = time.Now().Add(promoteWatchFor)
			fast.Reset(promoteWatchInterval)
			readd = false
		case <-fast.C:
			if time.Now().After(watchUntil) {
				fast.Stop()
				continue
			}
			readd = false
		}
		if n.IsLeader() {
			n.promoteInBackground(readd)
		}
	}
}

// promoteWatchInterval and promoteWatchFor: how often, and how long,
// promoteLoop looks for learners to promote after a join.
const (
	promoteWatchInterval = 100 * time.Millisecond
	promoteWatchFor      = 10 * time.Second
)

// learnerAdded wakes promoteLoop after this leader added a learner.
func (n *Node) learnerAdded() {
	select {
	case n.joined <- struct{}{}:
	default:
	}
}

// promoteInBackground runs promoteLearners unless a run is in flight
// (tests hold promotions by setting n.promoting), and returns at once:
// the learners are asked in the background.
func (n *Node) promoteInBackground(readd bool) {
	if !n.promoting.CompareAndSwap(false, true) {
		return
	}
	defer n.promoting.Store(false)
	n.promoteLearners(readd)
}

// promoteLearners, on the leader, starts a promotion (promote) of each
// nonvoter of the configuration that has none in flight: its /v1/status,
// at the HTTP address of its join record, is to answer with its ID and
// Raft address, a last log index at least the leader's commit index
// before it asked, and (from a build with learners) the nonvoter entry it
// found in its log. One that caught up without finding one (it got the
// entry in a snapshot) is made a nonvoter again, so its log commits one.
//
// Each learner is asked on its own, with a timeout of its own
// (joinProbeTimeout): a learner whose API accepts connections and never
// answers holds its own promotion only. Before, the learners were asked
// one after the other under one timeout, which such a learner spent
// whole at every look, and no learner after it was ever promoted.
func (n *Node) promoteLearners(readd bool) {
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return
	}
	var learners []raft.Server
	for _, sv := range f.Configuration().Servers {
		if sv.Suffrage == raft.Nonvoter {
			learners = append(learners, sv)
		}
	}
	if len(learners) == 0 {
		return
	}
	httpOf := map[string]string{}
	n.fsm.Read(func(s *State) {
		for id, ni := range s.Nodes {
			httpOf[id] = ni.HTTPAddr
		}
	})
	for _, sv := range learners {
		addr := httpOf[string(sv.ID)]
		if addr == "" || !n.asking.start(sv.ID) {
			continue
		}
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			defer n.asking.done(sv.ID)
			ctx, cancel := n.untilStop(context.WithTimeout(context.Background(), joinProbeTimeout))
			defer cancel()
			if err := n.promote(ctx, sv, addr, readd); err != nil {
				n.log.Warn("learner not promoted yet", "id", sv.ID, "code", errcode.Of(err), "err", err)
			}
		}()
	}
}

// learnersAsked is the set of learners whose promotion is in flight.
type learnersAsked struct {
	mu  sync.Mutex
	ids map[raft.ServerID]bool
}

// start marks id's promotion in flight, unless it was: it returns whether
// the caller is to run it.
func (a *learnersAsked) start(id raft.ServerID) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.ids[id] {
		return false
	}
	if a.ids == nil {
		a.ids = map[raft.ServerID]bool{}
	}
	a.ids[id] = true
	return true
}

func (a *learnersAsked) done(id raft.ServerID) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.ids, id)
}

// inFlight is how many promotions are in flight.
func (a *learnersAsked) inFlight() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.ids)
}

// promote promotes the nonvoter sv if it caught up (see promoteLearners);
// with readd, it makes one that caught up without its nonvoter entry a
// nonvoter again. It returns nil when it is not its time yet.
func (n *Node) promote(ctx context.Context, sv raft.Server, httpAddr string, readd bool) error {
	// Before the ask: a change of sv made after it (see stillNonvoter)
	// may be one its answer predates.
	term, changes := n.raft.CurrentTerm(), n.vers.changesOf(sv.ID)
	commit := n.raft.CommitIndex()
	c := n.memberClient(httpAddr)
	defer c.Close()
	c.RetryFor = -1
	st, err := c.Status(ctx)
	switch {
	case err != nil:
		return fmt.Errorf("its status at %s: %w", httpAddr, err)
	case st.ID != string(sv.ID) || st.RaftAddr != "" && st.RaftAddr != string(sv.Address):
		return errcode.New(errcode.BadInput, "the gate at %s is %s at raftAddr %s, and the configuration has %s at %s", httpAddr, truncate(st.ID), truncate(st.RaftAddr), sv.ID, sv.Address)
	case st.Halted != nil || st.LastIndex < commit:
		return nil
	}
	n.vers.raise.Lock()
	defer n.vers.raise.Unlock()
	// The configuration may have changed while the learner answered
	// (a POST /v1/remove of it, above all): the changes this leader asks
	// for are made under vers.raise, so one still a nonvoter here is one
	// until the change below. GetConfiguration reports no index
	// (hashicorp/raft 1.7), so prevIndex cannot say it: the server is
	// looked for. Before, a learner removed meanwhile was added back, as
	// a voter.
	if !n.stillNonvoter(sv, term, changes) {
		return nil
	}
	n.vers.changed(sv.ID)
	if l := st.Learner; l != nil && l.NonvoterAt == 0 {
		if l.Since == 0 {
			// Its join was not answered; it joins again when restarted
			// with --join.
			return nil
		}
		if !readd || st.CommitIndex < l.Since {
			// It may find the entry yet: it has not committed it (a
			// learner of this build reads its log up to the commit
			// index its status reports), or, a learner of a build
			// before that, has committed it a moment ago and not
			// read it yet, which a look of the watch after a join,
			// 100 ms apart, would catch.
			return nil
		}
		if err := n.raft.AddNonvoter(sv.ID, sv.Address, 0, n.cfg.ApplyTimeout).Error(); err != nil {
			return configChangeError(err, "add nonvoter %s again", sv.ID)
		}
		n.log.Info("learner caught up from a snapshot: made a nonvoter again, to find that in its log", "id", sv.ID)
		n.learnerAdded()
		return nil
	}
	if err := n.raft.AddVoter(sv.ID, sv.Address, 0, n.cfg.ApplyTimeout).Error(); err != nil {
		return configChangeError(err, "promote %s", sv.ID)
	}
	n.log.Info("learner promoted to voter: it caught up", "id", sv.ID, "lastIndex", st.LastIndex, "leaderCommitIndex", commit)
	return nil
}

// stillNonvoter reports whether the latest configuration lists sv, at its
// address, as a nonvoter, as it did when promote asked it for its status,
// in term, after changes of its ID (vers.changesOf). A learner removed and
// joined again at the same addresses is listed as before: the changes of
// its ID this leader made meanwhile, or the term of another leader that
// may have made them, say that its answer may be its old incarnation's
// (in a rejoin on an empty directory, of a log that is gone). Before, the
// promotion made it a voter on that answer, and the quorum counted a
// member that had not caught up. Called with vers.raise held.
func (n *Node) stillNonvoter(sv raft.Server, term, changes uint64) bool {
	if n.raft.CurrentTerm() != term || n.vers.changesOf(sv.ID) != changes {
		n.log.Info("learner not promoted: a change of its ID or a new term came while it was asked; a later look asks it again", "id", sv.ID)
		return false
	}
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return false
	}
	for _, s := range f.Configuration().Servers {
		if s.ID == sv.ID {
			return s.Suffrage == raft.Nonvoter && s.Address == sv.Address
		}
	}
	n.log.Info("learner not promoted: it left the configuration while it was asked", "id", sv.ID)
	return false
}
