package raftgate

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
)

// forwardedHeader marks a request a follower forwarded to the leader; a
// node that receives one and is not the leader answers NOT_LEADER instead
// of forwarding again, so a request is forwarded at most once.
const forwardedHeader = "X-Shardproof-Forwarded"

// stateIndexHeader carries, on the answer to a linearizable read, the log
// index of the last command the state it was read from reflects, taken
// under the same lock as the state: what `gate status --digest` shows as
// the index of its digest (0 until the leader applied a command after
// start-up or a snapshot restore). A follower passes the leader's on.
const stateIndexHeader = "X-Shardproof-State-Index"

// CommandResponse is the body of a successful POST /v1/commands.
type CommandResponse struct {
	Result json.RawMessage `json:"result"`
}

// ErrorBody is the body of every error response.
type ErrorBody struct {
	Error struct {
		Code    errcode.Code `json:"code"`
		Message string       `json:"message"`
	} `json:"error"`
	// Result is set when a rejection changed state (a failed run).
	Result json.RawMessage `json:"result,omitempty"`
}

// Status is a node's own view (GET /v1/status), not linearizable.
type Status struct {
	ID           string `json:"id"`
	RaftState    string `json:"raftState"`
	Leader       string `json:"leader"`
	LeaderHTTP   string `json:"leaderHttp"`
	Term         uint64 `json:"term"`
	LastIndex    uint64 `json:"lastIndex"`
	CommitIndex  uint64 `json:"commitIndex"`
	AppliedIndex uint64 `json:"appliedIndex"`
	Fences       Fences `json:"fences"`
	Aliases      int    `json:"aliases"`
	Releases     int    `json:"releases"`
	Runs         int    `json:"runs"`
	// Nodes are the members' join records in the state (their HTTP
	// addresses, for forwarding); Voters is this node's Raft
	// configuration, which decides quorums: the two differ after a
	// member is removed, or on a node that holds a configuration of its
	// own (a wiped member that founded a second cluster).
	Nodes  []*NodeInfo `json:"nodes"`
	Voters []*Voter    `json:"voters"`
	// RaftTimeouts are the node's Raft timeouts in milliseconds, which
	// every member should share.
	RaftTimeouts *RaftTimeouts `json:"raftTimeouts,omitempty"`
	// WriteTimeoutMs is the node's Config.WriteTimeout in milliseconds.
	WriteTimeoutMs int64 `json:"writeTimeoutMs,omitempty"`
	// StateIndex and StateDigest are set when the request asks for them
	// (?digest=1): the sha256 of this member's state and the log index of
	// the last command it reflects (0: none applied since start-up or the
	// last snapshot restore). Members at the same non-zero index must
	// agree on the digest.
	StateIndex  uint64           `json:"stateIndex,omitempty"`
	StateDigest *manifest.Digest `json:"stateDigest,omitempty"`
	// Halted is set when the node stopped applying its log at a
	// committed command its build cannot decode (see HaltError): its
	// state is the one before that entry, and it left the cluster.
	Halted *Halted `json:"halted,omitempty"`
	// CommandVersion is the highest command-schema version the node's
	// build applies (CommandVersion); builds before the version
	// handshake report none, the baseline 0. ClusterVersion is the
	// cluster version in the node's state.
	CommandVersion uint64 `json:"commandVersion,omitempty"`
	ClusterVersion uint64 `json:"clusterVersion"`
	// RaftAddr is the Raft address the node advertises (builds before
	// the version handshake report none): a leader asking for a
	// member's version takes the answer only from the process the Raft
	// configuration names.
	RaftAddr string `json:"raftAddr,omitempty"`
	// MemberVersions, on a leader whose cluster version is below its
	// build's, are the members' versions as it last asked them: what
	// keeps the version from rising.
	MemberVersions []MemberVersion `json:"memberVersions,omitempty"`
	// Learner is set while the node is a learner (it joined on an empty
	// directory and the leader has not promoted it yet): it grants no
	// vote and asks for none.
	Learner *LearnerStatus `json:"learner,omitempty"`
	// ClusterID is the cluster identity in the node's state (see
	// identity.go); none below cluster version 3.
	ClusterID string `json:"clusterID,omitempty"`
	// VerifierKeys are the IDs (evidence.KeyID) of the verifier keys
	// this member requires evidence signatures of (Config.VerifierKeys),
	// sorted; none when it requires none. Members should list the same.
	VerifierKeys []string `json:"verifierKeys,omitempty"`
}

// Removed reports whether the node's own Raft configuration, as its
// status gives it, no longer lists the node: `gate remove` took it out (a
// leader that removes itself shuts its Raft down, and its status said
// "Shutdown" and nothing more). A node that knows no configuration yet (a
// joiner not yet added) and a build that sends none are not taken for
// removed.
func (s *Status) Removed() bool {
	if len(s.Voters) == 0 {
		return false
	}
	for _, v := range s.Voters {
		if v.ID == s.ID {
			return false
		}
	}
	return true
}

// Halted says where and why a node stopped applying its log.
type Halted struct {
	Index uint64 `json:"index"`
	// Snapshot: what did not decode is a snapshot of the state (Index
	// is then 0), not a log entry.
	Snapshot bool         `json:"snapshot,omitempty"`
	Code     errcode.Code `json:"code"`
	Message  string       `json:"message"`
}

// RaftTimeouts are a node's Raft timeouts in milliseconds.
type RaftTimeouts struct {
	HeartbeatMs   int64 `json:"heartbeatMs"`
	ElectionMs    int64 `json:"electionMs"`
	LeaderLeaseMs int64 `json:"leaderLeaseMs"`
}

// Voter is one server of a node's Raft configuration.
type Voter struct {
	ID       string `json:"id"`
	RaftAddr string `json:"raftAddr"`
	Suffrage string `json:"suffrage"`
}

// Remove asks the leader to remove a member from the Raft configuration.
type Remove struct {
	ID string `json:"id"`
}

// handler routes the API:
//
//	POST /v1/commands          a command envelope (writes; forwarded to the leader)
//	POST /v1/join              add a learner (leader): a nonvoter, promoted once it caught up
//	POST /v1/record            record a member's addresses at its own request (leader; a
//	                           server of the Raft configuration at that Raft address only)
//	POST /v1/remove            remove a member from the Raft configuration (leader)
//	GET  /v1/state             the whole state (linearizable; like every linearizable read,
//	                           the index of the command it reflects in X-Shardproof-State-Index)
//	GET  /v1/aliases/{name}    one alias with its history (linearizable)
//	GET  /v1/releases/{root}   one release (linearizable)
//	GET  /v1/permits           every permit, sorted by id (linearizable)
//	GET  /v1/permits/{id}      one permit (linearizable)
//	GET  /v1/runs/{id}         one run with its tables (linearizable)
//	GET  /v1/runs/{id}/wait    long-poll until the barrier opens or the run fails (?timeout=ms)
//	GET  /v1/status            this node's view (local; ?digest=1 adds its state digest)
//	GET  /metrics              Prometheus metrics of this node
//	GET  /healthz, /readyz     liveness; readiness = a leader is known and the FSM caught up
//	                           (both GATE_HALTED once the node stopped applying its log)
//
// Once the node halted (see HaltError) it answers every route but
// /v1/status, /metrics and the probes GATE_HALTED at once (unlessHalted).
func (n *Node) handler() http.Handler {
	mux := http.NewServeMux()
	api := func(pattern string, fn http.HandlerFunc) { mux.HandleFunc(pattern, n.unlessHalted(fn)) }
	api("POST /v1/commands", n.handleCommand)
	api("POST /v1/join", n.handleJoin)
	if n.recordsItself() {
		// A test's build before the handshake answers 404, as builds
		// before the path do.
		api("POST /v1/record", n.handleRecord)
	}
	api("POST /v1/remove", n.handleRemove)
	// The whole state is copied under the lock and encoded once it is
	// released: encoding it there held up every Apply for as long (a
	// backup of 30 releases of 30,000 shards, seconds).
	api("GET /v1/state", n.read(func(s *State, r *http.Request) (any, error) { return apart{cloneState(s)}, nil }))
	api("GET /v1/aliases/{name}", n.read(func(s *State, r *http.Request) (any, error) {
		if a := s.Aliases[r.PathValue("name")]; a != nil {
			return a, nil
		}
		return nil, errcode.New(errcode.UnknownAlias, "no alias %s", truncateName(r.PathValue("name")))
	}))
	api("GET /v1/releases/{root}", n.read(func(s *State, r *http.Request) (any, error) {
		if rel := s.Releases[r.PathValue("root")]; rel != nil {
			return rel, nil
		}
		return nil, errcode.New(errcode.UnknownRelease, "no release %s", truncateName(r.PathValue("root")))
	}))
	api("GET /v1/fences", n.read(func(s *State, r *http.Request) (any, error) { return s.Fences, nil }))
	api("GET /v1/permits", n.read(func(s *State, r *http.Request) (any, error) {
		out := []*Permit{}
		for _, id := range sortedKeys(s.Permits) {
			out = append(out, s.Permits[id])
		}
		return out, nil
	}))
	api("GET /v1/permits/{id}", n.read(func(s *State, r *http.Request) (any, error) {
		if p := s.Permits[r.PathValue("id")]; p != nil {
			return p, nil
		}
		return nil, errcode.New(errcode.UnknownPermit, "no permit %s", truncateName(r.PathValue("id")))
	}))
	api("GET /v1/runs/{id}", n.read(func(s *State, r *http.Request) (any, error) {
		if run := s.Runs[r.PathValue("id")]; run != nil {
			return run, nil
		}
		return nil, s.noRun(r.PathValue("id"))
	}))
	api("GET /v1/runs/{id}/wait", n.handleWait)
	// The node's own view and its probes answer while it is halted, and
	// say so.
	mux.HandleFunc("GET /v1/status", n.handleStatus)
	mux.Handle("GET /metrics", n.met.handler())
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		if h := n.Halted(); h != nil {
			writeError(w, h, nil)
			return
		}
		if n.raft.State() == raft.Shutdown {
			writeError(w, errcode.New(errcode.GateUnavailable, "raft is shut down"), nil)
			return
		}
		io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if h := n.Halted(); h != nil {
			writeError(w, h, nil)
			return
		}
		if addr, _ := n.raft.LeaderWithID(); addr == "" {
			writeError(w, errcode.New(errcode.NotLeader, "no leader known"), nil)
			return
		}
		if n.raft.AppliedIndex() < n.raft.CommitIndex() {
			writeError(w, errcode.New(errcode.GateUnavailable, "applied %d of %d committed entries", n.raft.AppliedIndex(), n.raft.CommitIndex()), nil)
			return
		}
		io.WriteString(w, "ready\n")
	})
	return mux
}

// unlessHalted answers GATE_HALTED (503) once the node halted, before
// fn reads a body, forwards or reads the state. A halted follower
// forwarded writes and reads to the leader it still knew, as if healthy,
// until its Raft was down, and then answered NOT_LEADER: a client that
// listed it first waited on it, and its write was in flight through a
// member that had left the cluster. Clients take GATE_HALTED to the
// next member.
func (n *Node) unlessHalted(fn http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if h := n.Halted(); h != nil {
			writeError(w, n.haltAnswer(r, h), nil)
			return
		}
		fn(w, r)
	}
}

// haltAnswer is the error a halted node answers r with: h, GATE_HALTED,
// which a client takes as "skip this member", but NOT_LEADER to a
// request another member forwarded. That member still takes this node
// for the leader (its Raft leads until watchHalt has shut it down and
// the others elected another) and passes the answer on as its own: a
// client then skipped a member that serves, and one listing only the
// followers failed GATE_HALTED at once, as if every member had halted,
// instead of retrying until a leader serves.
func (n *Node) haltAnswer(r *http.Request, h *HaltError) error {
	if r.Header.Get(forwardedHeader) == "" {
		return h
	}
	return errcode.Wrap(errcode.NotLeader, h, "node %s halted and leads no more; ask again once the others have elected a leader", n.cfg.ID)
}

// httpStatus maps a code to the HTTP status of its error response.
func httpStatus(c errcode.Code) int {
	switch c {
	case errcode.NotLeader, errcode.GateUnavailable, errcode.GateHalted:
		return http.StatusServiceUnavailable
	case errcode.Indeterminate:
		return http.StatusGatewayTimeout
	case errcode.UnknownAlias, errcode.UnknownRelease, errcode.UnknownRun, errcode.UnknownPermit:
		return http.StatusNotFound
	case errcode.RunPruned:
		return http.StatusGone
	case errcode.Unauthenticated:
		return http.StatusUnauthorized
	case errcode.EvidenceUnsigned, errcode.EvidenceSignatureInvalid:
		return http.StatusForbidden
	case errcode.TombstoneHit, errcode.BenchmarkHit:
		// A recheck that found hits: a rejection that changed state (the
		// release is INVALID now), not bad input.
		return http.StatusConflict
	}
	switch c.Exit() {
	case errcode.ExitRejected:
		return http.StatusConflict
	case errcode.ExitInvalid, errcode.ExitUsage:
		return http.StatusBadRequest
	}
	return http.StatusInternalServerError
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.Encode(v)
}

func writeError(w http.ResponseWriter, err error, result any) {
	var body ErrorBody
	body.Error.Code = errcode.Of(err)
	body.Error.Message = err.Error()
	if result != nil {
		body.Result, _ = json.Marshal(result)
	}
	writeJSON(w, httpStatus(body.Error.Code), body)
}

// readBody reads a request body of up to limit+1 bytes (one more than
// allowed, so the decoder can say it is too large), taking the memory it
// holds from the node's request-memory budget as the bytes arrive: the
// buffer grows (doubling, never beyond the declared Content-Length) only
// once bytes that do not fit it came, and each growth is taken from the
// budget. A declared length is never trusted for allocation: eight
// connections that declared 32 MiB and sent nothing held the whole budget
// and refused every write until ReadTimeout. A body the budget cannot hold
// is GATE_UNAVAILABLE (503), which clients retry with backoff, so many
// large bodies in flight at once (slow senders, a burst of registers of
// huge releases) queue at the clients instead of growing the gate's memory
// without bound. release returns the bytes to the budget.
func (n *Node) readBody(r *http.Request, limit int64, what string) (b []byte, release func(), err error) {
	var taken int64
	release = func() {
		if taken > 0 {
			n.bodies.Release(taken)
			n.bodyBytes.Add(-taken)
			taken = 0
		}
	}
	lr := io.LimitReader(r.Body, limit+1)
	chunk := make([]byte, 16<<10)
	for {
		k, rerr := lr.Read(chunk)
		if k > 0 {
			if need := int64(len(b) + k); need > int64(cap(b)) {
				size := max(2*int64(cap(b)), need, int64(len(chunk)))
				if cl := r.ContentLength; cl >= need {
					size = min(size, cl)
				}
				size = min(size, limit+1)
				if !n.bodies.TryAcquire(size - int64(cap(b))) {
					release()
					n.met.bodyBudgetRefusals.Inc()
					return nil, release, errcode.New(errcode.GateUnavailable, "the gate holds %d MiB of request bodies already (its limit); retry", n.bodyBudget>>20)
				}
				taken += size - int64(cap(b))
				n.bodyBytes.Add(size - int64(cap(b)))
				nb := make([]byte, len(b), size)
				copy(nb, b)
				b = nb
			}
			b = append(b, chunk[:k]...)
		}
		if rerr == io.EOF {
			return b, release, nil
		}
		if rerr != nil {
			release()
			return nil, release, errcode.Wrap(errcode.IO, rerr, "read %s", what)
		}
	}
}

func (n *Node) handleCommand(w http.ResponseWriter, r *http.Request) {
	if r.ContentLength > MaxCommandSize {
		// Refused before a byte of it is read or held.
		writeError(w, errcode.New(errcode.DocumentTooLarge, "command body declares %d bytes, cap %d", r.ContentLength, MaxCommandSize), nil)
		return
	}
	b, release, err := n.readBody(r, MaxCommandSize, "command")
	defer release()
	if err != nil {
		writeError(w, err, nil)
		return
	}
	if len(b) > MaxCommandSize {
		// readBody stops one byte past the cap: the body's size is unknown.
		writeError(w, errcode.New(errcode.DocumentTooLarge, "command body exceeds the cap of %d bytes", MaxCommandSize), nil)
		return
	}
	c, err := DecodeCommand(b)
	if err != nil {
		writeError(w, err, nil)
		return
	}
	if _, ok := c.(*SetClusterVersion); ok {
		writeError(w, errcode.New(errcode.BadInput, "%s is proposed by the leader alone, once every member reports a build of that version; nothing changed", CmdSetClusterVersion), nil)
		return
	}
	// Every member, leader or not, checks in this one order: the
	// command's fields and caps, then its evidence, then (on the leader)
	// what Apply decides on the state. A command that breaks more than
	// one rule gets the same code whichever member it reaches.
	if err := checkProposal(c); err != nil {
		// The leader's own caps (a run's barrier timeout, an alias's or
		// a run's name, a report's digest), checked where the request
		// is admitted, as its size is: a follower forwarded a command
		// they refuse and passed on the leader's refusal, a round trip
		// for an answer it could give. Apply checks them again.
		writeError(w, err, nil)
		return
	}
	signers, err := n.checkEvidence(c)
	if err != nil {
		// Like the token: refused by the member that admits the
		// request, before it is forwarded or proposed.
		n.met.evidenceRefusals.WithLabelValues(string(errcode.Of(err))).Inc()
		n.log.Warn("command refused: evidence signature", "type", commandType(c), "code", errcode.Of(err))
		writeError(w, err, nil)
		return
	}
	if !n.IsLeader() {
		n.forward(w, r, b, 0)
		return
	}
	// The keys that signed its evidence, as this leader checked them:
	// in the command it logs, and so the state, from cluster version
	// versionSigners (applyVouched); in the answer and the log line at
	// every version (vouched). A follower's check admits the request;
	// the leader's names the signers.
	res, err := n.applyVouched(c, signers)
	if res == nil {
		if errcode.Of(err) == errcode.NotLeader {
			n.forward(w, r, b, 0)
			return
		}
		writeError(w, err, nil)
		return
	}
	value := n.vouched(c, res.Value, res.Err, signers)
	if res.Err != nil {
		writeError(w, res.Err, value)
		return
	}
	raw, err := json.Marshal(value)
	if err != nil {
		writeError(w, errcode.Wrap(errcode.Internal, err, "encode result"), nil)
		return
	}
	writeJSON(w, http.StatusOK, CommandResponse{Result: raw})
}

func (n *Node) handleJoin(w http.ResponseWriter, r *http.Request) {
	j, release := n.leaderJoinBody(w, r, "join")
	defer release()
	if j == nil {
		return
	}
	st, err := n.probeMember(r.Context(), j, "join")
	if err != nil {
		writeError(w, err, nil)
		return
	}
	// This leader's own record before another voter: a leader records
	// itself at its loop's next tick, and one that lost the leadership
	// to the joiner before that (a cluster's first node, joined at once)
	// stayed unrecorded until it led again, and the cluster version
	// could not rise without its address.
	if err := n.recordSelf(); err != nil {
		writeError(w, err, nil)
		return
	}
	index, err := n.addLearner(j, st)
	if err != nil {
		writeError(w, err, nil)
		return
	}
	res, err := n.Apply(j)
	if err != nil {
		writeError(w, err, nil)
		return
	}
	n.log.Info("learner added: a voter once it caught up", "id", j.ID, "raftAddr", j.RaftAddr, "httpAddr", j.HTTPAddr, "index", index)
	n.learnerAdded()
	ni, _ := res.Value.(NodeInfo)
	raw, _ := json.Marshal(joinResult{NodeInfo: ni, NonvoterIndex: index})
	w.Header().Set(nonvoterIndexHeader, strconv.FormatUint(index, 10))
	writeJSON(w, http.StatusOK, CommandResponse{Result: raw})
}

// handleRemove removes a member from the Raft configuration: the way to
// shrink a cluster, or to replace a dead member by one with another ID
// (which would otherwise be a voter more, and raise the quorum). The
// leader may remove itself; it steps down once the change commits. The
// last voter cannot be removed, nor an ID that is not in the
// configuration (BAD_INPUT, changing nothing). A change Raft refuses
// before appending it is NOT_LEADER, as a command (notAppended); one
// that may have been appended is INDETERMINATE. A learner removed while
// the leader asks it whether it caught up stays removed: its promotion
// finds it gone (promote).
func (n *Node) handleRemove(w http.ResponseWriter, r *http.Request) {
	b, release, err := n.readBody(r, 64<<10, "remove")
	defer release()
	if err != nil {
		writeError(w, err, nil)
		return
	}
	// Strictly: encoding/json took {"id":"a","id":"b"} for b, "ID" for
	// "id" and ignored an unknown key.
	var req Remove
	if err := manifest.DecodeJSON(b, &req, 64<<10); err != nil || req.ID == "" {
		writeError(w, errcode.New(errcode.BadDocument, "remove body must be {\"id\": \"<member ID>\"}"), nil)
		return
	}
	if !n.IsLeader() {
		n.forward(w, r, b, 0)
		return
	}
	// Under the lock the leader's other configuration changes take: a
	// promotion in flight checks under it that its learner is still a
	// nonvoter before it adds it as a voter (promote).
	n.vers.raise.Lock()
	defer n.vers.raise.Unlock()
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		writeError(w, errcode.Wrap(errcode.Internal, err, "read the configuration"), nil)
		return
	}
	cfg := f.Configuration()
	found, voter, voters := false, false, 0
	var ids []string
	for _, sv := range cfg.Servers {
		ids = append(ids, string(sv.ID))
		if sv.Suffrage == raft.Voter {
			voters++
		}
		if string(sv.ID) == req.ID {
			found, voter = true, sv.Suffrage == raft.Voter
		}
	}
	switch {
	case !found:
		writeError(w, errcode.New(errcode.BadInput, "%s is not a member (members: %s)", truncate(req.ID), strings.Join(ids, ", ")), nil)
		return
	case len(cfg.Servers) == 1:
		writeError(w, errcode.New(errcode.BadInput, "%s is the only member: a gate cannot remove its last one", req.ID), nil)
		return
	case voter && voters == 1:
		// The learners left could neither elect a leader nor be
		// promoted. Raft refuses the change itself, which the gate
		// answered INDETERMINATE (the removal might have happened).
		writeError(w, errcode.New(errcode.BadInput, "%s is the only voter: a gate cannot remove its last one (its learners cannot elect a leader; remove them, or wait for their promotion, first)", req.ID), nil)
		return
	}
	n.vers.changed(raft.ServerID(req.ID))
	if err := n.raft.RemoveServer(raft.ServerID(req.ID), 0, n.cfg.ApplyTimeout).Error(); err != nil {
		writeError(w, configChangeError(err, "remove server %s", req.ID), nil)
		return
	}
	n.log.Info("member removed", "id", req.ID)
	writeJSON(w, http.StatusOK, map[string]any{"removed": req.ID})
}

// probeMember checks that the member j names answers at j's addresses:
// its Raft address completes the handshake members use, and its HTTP API
// answers /v1/status with its ID. what names the request in errors.
//
// Before a joiner becomes a voter: a voter nobody answers for costs the
// cluster its quorum (a single node that added one stayed a candidate for
// good, and so it stays after a restart), so a join from a process that
// is not the member it names is refused (BAD_INPUT) and changes nothing.
func (n *Node) probeMember(ctx context.Context, j *Join, what string) (*Status, error) {
	ctx, cancel := context.WithTimeout(ctx, joinProbeTimeout)
	defer cancel()
	// The leader must be able to talk Raft to the joiner, through the
	// TLS and token handshakes members use: a plain TCP dial passed a
	// joiner whose certificate named its HTTP host but not the IP its
	// Raft address resolves to, and the voter added cost a single node
	// its quorum for good.
	conn, err := n.stream.Dial(raft.ServerAddress(j.RaftAddr), joinProbeTimeout)
	if err != nil {
		if op := (*net.OpError)(nil); errors.As(err, &op) && op.Op == "dial" {
			return nil, errcode.Wrap(errcode.BadInput, err, "%s of %s: nothing accepts connections at raftAddr %s", what, truncate(j.ID), truncate(j.RaftAddr))
		}
		// A build below the cluster version cannot read the identity
		// handshake of a cluster at versionClusterID: say what it
		// needs, as the version check after the probe would.
		if verr := n.joinerBelowVersion(ctx, j); verr != nil {
			return nil, verr
		}
		return nil, errcode.Wrap(errcode.BadInput, err, "%s of %s: the Raft handshake with raftAddr %s failed (with TLS, the member's certificate must name the IP of its Raft address and be signed by the gate's CA; with a token, the member must hold the gate's)", what, truncate(j.ID), truncate(j.RaftAddr))
	}
	conn.Close()
	c := n.memberClient(j.HTTPAddr)
	defer c.Close()
	c.RetryFor = -1
	st, err := c.Status(ctx)
	if err != nil {
		// Members forward writes to the leader's HTTP address, so
		// every member must reach every other's, this one's too once
		// it leads. The joiner retries this answer (503) for a while:
		// a joiner still starting, or a network still settling.
		return nil, errcode.Wrap(errcode.GateUnavailable, err, "%s of %s: the leader cannot reach its httpAddr %s; members forward writes to the leader's HTTP address, so each must reach every other's (give --http-advertise an address the other members reach)", what, truncate(j.ID), truncate(j.HTTPAddr))
	}
	if st.ID != j.ID {
		return nil, errcode.New(errcode.BadInput, "%s of %s: the gate at httpAddr %s is %s", what, truncate(j.ID), truncate(j.HTTPAddr), truncate(st.ID))
	}
	return st, nil
}

// joinerBelowVersion returns checkJoinerVersion's refusal of j when its
// status answers with a build that cannot read the identity handshake
// and the cluster's version is above it, else nil.
func (n *Node) joinerBelowVersion(ctx context.Context, j *Join) error {
	c := n.memberClient(j.HTTPAddr)
	defer c.Close()
	c.RetryFor = -1
	st, err := c.Status(ctx)
	if err != nil || st.ID != j.ID || st.CommandVersion >= versionClusterID {
		return nil
	}
	// Against the version committed, which a leader elected a moment
	// ago may not have applied yet (checkJoinerVersion waits for it).
	return n.checkJoinerVersion(j, st)
}

// joinProbeTimeout bounds probeMember.
const joinProbeTimeout = 5 * time.Second

// voters returns this node's Raft configuration.
func (n *Node) voters() []*Voter {
	out := []*Voter{}
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return out
	}
	for _, sv := range f.Configuration().Servers {
		out = append(out, &Voter{ID: string(sv.ID), RaftAddr: string(sv.Address), Suffrage: sv.Suffrage.String()})
	}
	return out
}

// read wraps a linearizable read: on the leader it verifies leadership
// before reading; elsewhere it forwards the request to the leader.
func (n *Node) read(fn func(*State, *http.Request) (any, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !n.IsLeader() {
			n.forward(w, r, nil, 0)
			return
		}
		var raw []byte
		var index uint64
		var ferr error
		var later any
		err := n.readConsistentAt(func(s *State, i uint64) {
			var v any
			if v, ferr = fn(s, r); ferr == nil {
				if a, ok := v.(apart); ok {
					later = a.v
				} else {
					raw, ferr = n.encodeAnswer(v)
				}
				index = i
			}
		})
		if err == nil && ferr == nil && later != nil {
			raw, ferr = n.encodeAnswer(later)
		}
		if err == nil {
			err = ferr
		}
		if err != nil {
			if errcode.Of(err) == errcode.NotLeader && r.Header.Get(forwardedHeader) == "" {
				n.forward(w, r, nil, 0)
				return
			}
			writeError(w, err, nil)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set(stateIndexHeader, strconv.FormatUint(index, 10))
		w.Write(raw)
	}
}

// apart is an answer a read's fn built apart from the state (a copy of
// it), which read encodes once the lock is released.
type apart struct{ v any }

// encodeAnswer encodes a read's answer (Config.encodeAnswer in tests).
func (n *Node) encodeAnswer(v any) ([]byte, error) {
	if n.cfg.encodeAnswer != nil {
		return n.cfg.encodeAnswer(v)
	}
	return json.Marshal(v)
}

// maxWaitTimeout bounds a long-poll's timeout (handleWait).
const maxWaitTimeout = 5 * time.Minute

// handleWait long-polls a run on the leader until its barrier opens, it
// fails, or the timeout (default 30 s, at most 5 min) ends; it answers
// with the run's summary in every case.
func (n *Node) handleWait(w http.ResponseWriter, r *http.Request) {
	timeout := 30 * time.Second
	if v := r.URL.Query().Get("timeout"); v != "" {
		ms, err := strconv.ParseInt(v, 10, 64)
		if err != nil || ms < 0 {
			writeError(w, errcode.New(errcode.Usage, "timeout must be milliseconds"), nil)
			return
		}
		// Capped in milliseconds: one above what a Duration holds
		// wrapped into a negative or tiny wait that answered at once.
		timeout = time.Duration(min(ms, maxWaitTimeout.Milliseconds())) * time.Millisecond
	}
	if !n.IsLeader() {
		// The leader holds the poll for as long as it asks.
		n.forward(w, r, nil, timeout)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), timeout)
	defer cancel()
	id := r.PathValue("id")
	halted, _ := n.fsm.Halted()
	first := true
	for {
		changed := n.fsm.Changed()
		var sum *RunSummary
		var missing error
		read := func(s *State) {
			if run := s.Runs[id]; run != nil {
				v := run.Summary()
				sum = &v
			} else {
				missing = s.noRun(id)
			}
		}
		if first {
			if err := n.ReadConsistent(read); err != nil {
				writeError(w, err, nil)
				return
			}
			first = false
		} else {
			n.fsm.Read(read)
		}
		if sum == nil {
			writeError(w, missing, nil)
			return
		}
		if sum.Barrier == BarrierOpen || sum.State == RunFailed || sum.State == RunCancelled {
			writeJSON(w, http.StatusOK, sum)
			return
		}
		select {
		case <-changed:
		case <-halted:
			// Its state stops here: the client asks another member.
			writeError(w, n.haltAnswer(r, n.Halted()), nil)
			return
		case <-ctx.Done():
			writeJSON(w, http.StatusOK, sum)
			return
		case <-n.stop:
			writeError(w, errcode.New(errcode.GateUnavailable, "node shutting down"), nil)
			return
		}
	}
}

func (n *Node) handleStatus(w http.ResponseWriter, r *http.Request) {
	addr, id := n.raft.LeaderWithID()
	// A learner's progress as of the commit index reported (see
	// scanLearner).
	commit := n.raft.CommitIndex()
	n.scanLearner(commit)
	st := Status{
		ID: n.cfg.ID, RaftState: n.raft.State().String(), Leader: string(id),
		Term: n.raft.CurrentTerm(), LastIndex: n.raft.LastIndex(),
		CommitIndex: commit, AppliedIndex: n.raft.AppliedIndex(),
		Nodes: []*NodeInfo{}, Voters: n.voters(),
	}
	rl := n.raft.ReloadableConfig()
	st.RaftTimeouts = &RaftTimeouts{HeartbeatMs: rl.HeartbeatTimeout.Milliseconds(), ElectionMs: rl.ElectionTimeout.Milliseconds(), LeaderLeaseMs: n.leaderLease.Milliseconds()}
	st.WriteTimeoutMs = n.cfg.WriteTimeout.Milliseconds()
	if addr != "" {
		st.LeaderHTTP = n.leaderHTTP()
	}
	if h := n.Halted(); h != nil {
		st.Halted = &Halted{Index: h.Index, Snapshot: h.Snapshot, Code: errcode.GateHalted, Message: h.Error()}
	}
	st.CommandVersion, st.RaftAddr = n.BuildVersion(), n.RaftAddr()
	st.Learner = n.learner.status()
	if t := n.trusted.Load(); t != nil {
		st.VerifierKeys = t.IDs()
	}
	if n.IsLeader() {
		n.vers.mu.Lock()
		st.MemberVersions = n.vers.last
		n.vers.mu.Unlock()
	}
	n.fsm.Read(func(s *State) {
		st.ClusterVersion, st.ClusterID = s.ClusterVersion, s.ClusterID
		if st.ClusterVersion >= st.CommandVersion {
			st.MemberVersions = nil
		}
		st.Fences, st.Aliases, st.Releases, st.Runs = s.Fences, len(s.Aliases), len(s.Releases), len(s.Runs)
		for _, k := range sortedKeys(s.Nodes) {
			ni := *s.Nodes[k]
			st.Nodes = append(st.Nodes, &ni)
		}
	})
	if r.URL.Query().Get("digest") == "1" {
		idx, d, err := n.fsm.Digest()
		if err != nil {
			writeError(w, err, nil)
			return
		}
		st.StateIndex, st.StateDigest = idx, &d
	}
	writeJSON(w, http.StatusOK, st)
}

// forward sends the request to the leader once and streams its answer
// to the client. If the request never reached the leader the client is
// told NOT_LEADER (retry is safe); if the connection broke after a write
// was sent, before the leader's status came, the outcome is
// INDETERMINATE. Once the status is passed on, a failure can only cut
// the answer: the client's connection is closed before its end.
//
// The leader's answer is awaited for forwardTimeout plus hold, the time
// the leader may legitimately hold the request besides Raft (a join's
// probe of the joiner, a long-poll's wait), then each next part of it for
// forwardTimeout: a large answer that keeps arriving is not cut. A leader
// HTTP address that accepted the connection and answered nothing (a
// frozen process, a paused VM, a black-holed path) held the request, its
// goroutine, its body's share of the request memory and a connection to
// the leader for as long as the client waited: for ever with a client
// that has no timeout of its own (curl).
func (n *Node) forward(w http.ResponseWriter, r *http.Request, body []byte, hold time.Duration) {
	if r.Header.Get(forwardedHeader) != "" {
		writeError(w, errcode.New(errcode.NotLeader, "node %s is not the leader", n.cfg.ID), nil)
		return
	}
	leader := n.leaderHTTP()
	if leader == "" || leader == n.HTTPAddr() {
		writeError(w, errcode.New(errcode.NotLeader, "node %s is not the leader and knows no leader", n.cfg.ID), nil)
		return
	}
	limit := n.forwardTimeout()
	ctx, cancel := context.WithCancelCause(r.Context())
	defer cancel(nil)
	timer := time.AfterFunc(limit+hold, func() { cancel(errForwardTimeout) })
	defer timer.Stop()
	timedOut := func(err error, what string) error {
		if context.Cause(ctx) == errForwardTimeout {
			return fmt.Errorf("%s within %s: %w", what, limit+hold, err)
		}
		return err
	}
	// WroteRequest runs on the transport's goroutine.
	var wrote atomic.Bool
	tctx := httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		WroteRequest: func(httptrace.WroteRequestInfo) { wrote.Store(true) },
	})
	req, err := http.NewRequestWithContext(tctx, r.Method, n.scheme()+"://"+leader+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		writeError(w, errcode.Wrap(errcode.Internal, err, "forward"), nil)
		return
	}
	req.Header.Set(forwardedHeader, n.cfg.ID)
	if len(n.cfg.Token) > 0 {
		req.Header.Set("Authorization", bearer(n.cfg.Token))
	}
	req.Header.Set("Content-Type", "application/json")
	n.met.forwarded.Inc()
	resp, err := n.hc.Do(req)
	if err != nil {
		err = timedOut(err, "no answer")
		if wrote.Load() && r.Method == http.MethodPost {
			writeError(w, errcode.Wrap(errcode.Indeterminate, err, "forwarded to leader %s, connection lost or no answer; retrying it is safe", leader), nil)
		} else {
			writeError(w, errcode.Wrap(errcode.NotLeader, err, "leader %s unreachable", leader), nil)
		}
		return
	}
	defer resp.Body.Close()
	// The leader's status is known: the answer is passed on as it comes,
	// headers first, so the follower holds one buffer of it, not all of
	// it (a whole state of up to maxResponseSize was read into memory
	// first, outside the request-memory budget). The timer bounds each
	// wait for the leader's next bytes; writes to the client have their
	// own deadline (writeDeadlines).
	w.Header().Set("Content-Type", resp.Header.Get("Content-Type"))
	if v := resp.Header.Get(stateIndexHeader); v != "" {
		w.Header().Set(stateIndexHeader, v)
	}
	if v := resp.Header.Get(nonvoterIndexHeader); v != "" {
		w.Header().Set(nonvoterIndexHeader, v)
	}
	if resp.ContentLength >= 0 {
		w.Header().Set("Content-Length", strconv.FormatInt(resp.ContentLength, 10))
	}
	w.WriteHeader(resp.StatusCode)
	rc := http.NewResponseController(w)
	timer.Reset(limit)
	buf := make([]byte, 32<<10)
	var copied int64
	for {
		k, rerr := resp.Body.Read(buf)
		if k > 0 {
			// Writing to a slow client is not the leader's silence.
			timer.Stop()
			if copied += int64(k); copied > maxResponseSize {
				rerr = fmt.Errorf("the answer exceeds %d bytes", int64(maxResponseSize))
			} else if _, werr := w.Write(buf[:k]); werr != nil || rc.Flush() != nil {
				// The client went away or stopped reading.
				panic(http.ErrAbortHandler)
			}
			timer.Reset(limit)
		}
		if rerr == io.EOF {
			return
		}
		if rerr != nil {
			// The client has the leader's status and part of its
			// answer; the connection is closed before the end, so it
			// reads a broken answer (a command's is then
			// INDETERMINATE to it, as the leader's own would be),
			// never a short one that parses.
			n.log.Warn("forwarded answer cut", "leader", leader, "method", r.Method, "path", r.URL.Path, "bytes", copied,
				"err", timedOut(rerr, "no part of the answer"))
			panic(http.ErrAbortHandler)
		}
	}
}

// forwardTimeout is how long a forwarded request waits for the leader's
// answer, besides what the request itself asks the leader to wait: twice
// ApplyTimeout, the longest the leader waits for Raft to take a command
// or a read's barrier, so a command the leader is still committing is
// not cut short (the reasoning of DefaultAttemptTimeout).
func (n *Node) forwardTimeout() time.Duration { return 2 * n.cfg.ApplyTimeout }

// errForwardTimeout is the cause of a forward cut at its bound.
var errForwardTimeout = errors.New("forward timeout")

// maxResponseSize bounds what a client or forwarder reads of an answer.
const maxResponseSize = 1 << 30

// leaderJoinBody reads the join command of a POST /v1/join or
// /v1/record (what names the route) and checks its fields, before the
// voter is added or the record written: a join the command would refuse
// must not change the configuration either. On a member that is not the
// leader it forwards the request (the leader probes the member before it
// answers). It returns nil once it has answered; release frees the
// body's budget, and must be called either way.
func (n *Node) leaderJoinBody(w http.ResponseWriter, r *http.Request, what string) (j *Join, release func()) {
	b, release, err := n.readBody(r, 64<<10, what)
	if err != nil {
		writeError(w, err, nil)
		return nil, release
	}
	c, err := DecodeCommand(b)
	j, ok := c.(*Join)
	if err != nil || !ok {
		writeError(w, errcode.New(errcode.BadDocument, "%s body must be a join command", what), nil)
		return nil, release
	}
	if err := checkJoin(j); err != nil {
		writeError(w, err, nil)
		return nil, release
	}
	if !n.IsLeader() {
		n.forward(w, r, b, joinProbeTimeout)
		return nil, release
	}
	return j, release
}
