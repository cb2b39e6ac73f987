package raftgate

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/raft"

	"github.com/shardproof/shardproof/internal/errcode"
)

// A member's join record (State.Nodes) holds the addresses the others
// forward to when it leads and the leader asks it for its version at. It
// is written by the join command of POST /v1/join and, for a leader, by
// recordSelf; a member whose join was added to the Raft configuration but
// whose command was not applied (leadership lost in between), or one
// restarted with another --http-advertise, had none or a stale one, and
// kept the cluster version at 0 until it led. Such a member asks the
// leader, as a follower, to record it (POST /v1/record): the leader
// records only a server of its Raft configuration at the Raft address it
// names, so a member removed with gate remove, which may never learn of
// its removal, cannot come back through it (POST /v1/join would add it).

// handleRecord records a member's addresses at its request, with the
// join command, once it checked that the member is a server of its Raft
// configuration at that Raft address (BAD_INPUT otherwise, changing
// nothing) and answers at both addresses as that member. A record that
// holds the addresses already is answered without a command.
func (n *Node) handleRecord(w http.ResponseWriter, r *http.Request) {
	j, release := n.leaderJoinBody(w, r, "record")
	defer release()
	if j == nil {
		return
	}
	// No vers.raise: a raise counts a member's answer only from its ID
	// at the configuration's Raft address, whichever record it polled.
	ni, err := n.recordMember(r.Context(), j)
	if err != nil {
		writeError(w, err, nil)
		return
	}
	raw, _ := json.Marshal(ni)
	writeJSON(w, http.StatusOK, CommandResponse{Result: raw})
}

// recordMember is handleRecord on the leader.
func (n *Node) recordMember(ctx context.Context, j *Join) (NodeInfo, error) {
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return NodeInfo{}, errcode.Wrap(errcode.Internal, err, "read the configuration")
	}
	var members []string
	at := ""
	for _, sv := range f.Configuration().Servers {
		members = append(members, string(sv.ID)+" at "+string(sv.Address))
		if string(sv.ID) == j.ID {
			at = string(sv.Address)
		}
	}
	if at != j.RaftAddr {
		// Not a member, or one whose Raft address changed, which Raft
		// reaches at the configuration's only: a join adds it, or moves
		// it to its new address.
		return NodeInfo{}, errcode.New(errcode.BadInput, "record of %s: not a member at raftAddr %s (the Raft configuration has %s): join it with --join (a member removed with gate remove, or whose data directory was wiped, on a wiped directory with its ID); nothing changed",
			truncate(j.ID), truncate(j.RaftAddr), strings.Join(members, ", "))
	}
	// The records as committed before this leader's term, so a record
	// already there is not proposed again.
	if err := n.caughtUp(); err != nil {
		return NodeInfo{}, err
	}
	want := NodeInfo{ID: j.ID, RaftAddr: j.RaftAddr, HTTPAddr: j.HTTPAddr}
	recorded := false
	n.fsm.Read(func(s *State) { recorded = s.Nodes[j.ID] != nil && *s.Nodes[j.ID] == want })
	if recorded {
		return want, nil
	}
	st, err := n.probeMember(ctx, j, "record")
	if err != nil {
		return NodeInfo{}, err
	}
	if st.RaftAddr != j.RaftAddr {
		// Another process of that ID, at addresses the member does not
		// hold: recorded, the leader would forward to it and ask it for
		// the member's version (see pollVersions).
		return NodeInfo{}, errcode.New(errcode.BadInput, "record of %s: the gate at httpAddr %s is %s at raftAddr %s, and the Raft configuration has %s at %s; nothing changed",
			truncate(j.ID), truncate(j.HTTPAddr), truncate(j.ID), truncate(st.RaftAddr), truncate(j.ID), truncate(j.RaftAddr))
	}
	res, err := n.Apply(j)
	if err != nil {
		return NodeInfo{}, err
	}
	n.log.Info("member's join record updated at its request", "id", j.ID, "raftAddr", j.RaftAddr, "httpAddr", j.HTTPAddr)
	return res.Value.(NodeInfo), nil
}

// recordsItself says whether this build serves and sends POST
// /v1/record: every build but a test's stand-in for one from before the
// version handshake (Config.olderBuild 0).
func (n *Node) recordsItself() bool {
	return n.cfg.olderBuild == nil || *n.cfg.olderBuild > 0
}

// askRecord, on a follower that is a server of its own Raft
// configuration, asks the leader to record its addresses when the join
// record in its applied state is missing or differs from them. It sends
// the request in the background, one at a time, to the leader's recorded
// HTTP address first, then to the other members' (which forward it): a
// member that knows no leader (one removed, that never learnt of it)
// still hears why it is not recorded. The leader loop calls it at most
// every versionInterval.
func (n *Node) askRecord() {
	if !n.recordsItself() || n.Halted() != nil || n.raft.AppliedIndex() < n.raft.CommitIndex() {
		// A state behind the log may lack a record committed already.
		return
	}
	j := &Join{ID: n.cfg.ID, RaftAddr: n.RaftAddr(), HTTPAddr: n.HTTPAddr()}
	f := n.raft.GetConfiguration()
	if f.Error() != nil || !slices.ContainsFunc(f.Configuration().Servers, func(sv raft.Server) bool {
		return string(sv.ID) == j.ID && string(sv.Address) == j.RaftAddr
	}) {
		return
	}
	var endpoints []string
	recorded := false
	leader := n.leaderHTTP()
	if leader != "" {
		endpoints = append(endpoints, leader)
	}
	n.fsm.Read(func(s *State) {
		self := s.Nodes[j.ID]
		recorded = self != nil && self.HTTPAddr == j.HTTPAddr && self.RaftAddr == j.RaftAddr
		for _, id := range sortedKeys(s.Nodes) {
			if a := s.Nodes[id].HTTPAddr; id != j.ID && a != leader && a != j.HTTPAddr {
				endpoints = append(endpoints, a)
			}
		}
	})
	if recorded || len(endpoints) == 0 || !n.recording.CompareAndSwap(false, true) {
		return
	}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		defer n.recording.Store(false)
		n.sendRecord(j, endpoints)
	}()
}

// untilStop returns ctx with its cancel, cancelled too once the node
// stops, for work the node runs in the background.
func (n *Node) untilStop(ctx context.Context, cancel context.CancelFunc) (context.Context, context.CancelFunc) {
	go func() {
		select {
		case <-n.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// sendRecord sends one POST /v1/record of j to endpoints in turn.
func (n *Node) sendRecord(j *Join, endpoints []string) {
	ctx, cancel := n.untilStop(context.WithTimeout(context.Background(), n.forwardTimeout()+joinProbeTimeout+time.Second))
	defer cancel()
	urls := make([]string, len(endpoints))
	for i, a := range endpoints {
		urls[i] = n.scheme() + "://" + a
	}
	c := n.memberClient(strings.Join(urls, ","))
	defer c.Close()
	c.RetryFor = -1
	err := c.do(ctx, http.MethodPost, "/v1/record", j, nil)
	code := "OK"
	switch {
	case err == nil:
		n.log.Info("this member's join record holds its addresses, at its request", "raftAddr", j.RaftAddr, "httpAddr", j.HTTPAddr)
	case errors.Is(err, errNotAPI):
		// A leader on a build before /v1/record: this member's record
		// waits until it is upgraded, or until this member leads.
		code = "UNSUPPORTED"
		n.log.Debug("the leader's build has no /v1/record; asked again later", "raftAddr", j.RaftAddr, "httpAddr", j.HTTPAddr, "err", err)
	default:
		code = string(errcode.Of(err))
		n.sayRecord(err)
	}
	n.met.recordRequests.WithLabelValues(code).Inc()
}

// sayRecord logs a refused or failed record request, once per message: a
// removed member asks for good.
func (n *Node) sayRecord(err error) {
	msg := err.Error()
	n.vers.mu.Lock()
	said := msg == n.vers.saidRecord
	n.vers.saidRecord = msg
	n.vers.mu.Unlock()
	if said {
		n.log.Debug("this member's join record is missing or stale; asked again later", "code", errcode.Of(err), "err", err)
		return
	}
	n.log.Warn("this member's join record is missing or stale, and the leader did not record it; asked again later", "code", errcode.Of(err), "err", err)
}
