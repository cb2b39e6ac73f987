package raftgate

import (
	"maps"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
)

// metrics are a node's Prometheus metrics, served at GET /metrics. Each
// node has its own registry, so several nodes in one process (tests) do
// not collide. Commands are counted on the node that proposed them (the
// leader), so a cluster's totals are the sum over its nodes.
type metrics struct {
	reg *prometheus.Registry
	// commands counts proposed commands by type and outcome code ("OK").
	commands *prometheus.CounterVec
	// applySeconds is the time from proposing a command to its result.
	applySeconds *prometheus.HistogramVec
	// barrierWait is, per release, the time from run creation to the
	// barrier opening (leader-stamped command times).
	barrierWait *prometheus.HistogramVec
	// runFailures counts runs failed in Apply, per release and code
	// (ROOT_MISMATCH, SHARD_NOT_ASSIGNED, BARRIER_TIMEOUT).
	runFailures *prometheus.CounterVec
	// bodyBudgetRefusals counts requests refused because the request
	// bodies in flight held the whole budget (Config.RequestMemory).
	bodyBudgetRefusals prometheus.Counter
	// responsesCut counts responses given up because their client took
	// none of their bytes for Config.WriteTimeout.
	responsesCut prometheus.Counter
	// forwarded counts requests this node sent on to the leader.
	forwarded prometheus.Counter
	// recordRequests counts this member's requests, as a follower, that
	// the leader record its addresses (POST /v1/record), by outcome.
	recordRequests *prometheus.CounterVec
	// raftConnsRefused counts Raft connections, accepted or dialed,
	// refused by their handshake, by code.
	raftConnsRefused *prometheus.CounterVec
	// evidenceRefusals counts registers and rechecks this member refused
	// for their evidence signatures (Config.VerifierKeys), by code.
	evidenceRefusals *prometheus.CounterVec

	// mu guards what follows, and orders observe's new series
	// with forget's deletions.
	mu sync.Mutex
	// releases are the releases barrierWait and runFailures have series
	// of.
	releases map[manifest.Digest]bool
	// added is set when observe gives a release its first series, so
	// forget looks at it even if no run was dropped since.
	added bool
	// forgotAt is FSM.runsDropped of the state forget last looked at.
	forgotAt uint64
}

func newMetrics(n *Node) *metrics {
	m := &metrics{
		reg:      prometheus.NewRegistry(),
		releases: map[manifest.Digest]bool{},
		commands: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shardproof_gate_commands_total",
			Help: "Gate commands proposed by this node, by type and result code (OK when accepted).",
		}, []string{"type", "code"}),
		applySeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "shardproof_gate_apply_seconds",
			Help:    "Time from proposing a gate command to its applied result.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, []string{"type"}),
		barrierWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "shardproof_gate_barrier_wait_seconds",
			Help:    "Time from run creation to its barrier opening, by release root digest.",
			Buckets: prometheus.ExponentialBuckets(0.01, 2, 18),
		}, []string{"release"}),
		runFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shardproof_gate_run_failures_total",
			Help: "Runs failed before step 0, by release root digest and code (e.g. ROOT_MISMATCH).",
		}, []string{"release", "code"}),
		bodyBudgetRefusals: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shardproof_gate_body_budget_refusals_total",
			Help: "Requests answered GATE_UNAVAILABLE because the request bodies in flight held the node's whole request-memory budget.",
		}),
		responsesCut: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shardproof_gate_responses_cut_total",
			Help: "Responses given up, their connection closed, because the client took none of their bytes for the write timeout.",
		}),
		forwarded: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shardproof_gate_forwarded_total",
			Help: "Requests this node, not the leader, sent on to the leader's HTTP address.",
		}),
		recordRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shardproof_gate_record_requests_total",
			Help: "Requests this member sent, as a follower whose join record was missing or stale, for the leader to record its addresses, by result code (OK when recorded, UNSUPPORTED when the leader's build has no /v1/record).",
		}, []string{"code"}),
		raftConnsRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shardproof_gate_raft_connections_refused_total",
			Help: "Raft connections between members, accepted or dialed, that this member refused at their handshake, by code (CLUSTER_ID_MISMATCH: the other end is of another gate cluster or presents no identity where the cluster checks it; UNAUTHENTICATED: the gate token).",
		}, []string{"code"}),
		evidenceRefusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shardproof_gate_evidence_refusals_total",
			Help: "Registers of a report and rechecks this member refused for their verifier signatures (gate serve --verifier-keys), by code (EVIDENCE_UNSIGNED, EVIDENCE_SIGNATURE_INVALID, BAD_INPUT: too many).",
		}, []string{"code"}),
	}
	leader := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "shardproof_gate_leader",
		Help: "1 while this node is the Raft leader.",
	}, func() float64 {
		if n.IsLeader() {
			return 1
		}
		return 0
	})
	applied := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "shardproof_gate_applied_index",
		Help: "Last Raft log index applied to this node's state.",
	}, func() float64 {
		if n.raft == nil {
			return 0
		}
		return float64(n.raft.AppliedIndex())
	})
	bodyBytes := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "shardproof_gate_request_body_bytes",
		Help: "Bytes of the request-memory budget that request bodies being read hold now.",
	}, func() float64 { return float64(n.bodyBytes.Load()) })
	m.reg.MustRegister(m.commands, m.applySeconds, m.barrierWait, m.runFailures, m.bodyBudgetRefusals, m.responsesCut, m.forwarded, m.recordRequests, m.raftConnsRefused, m.evidenceRefusals, leader, applied, bodyBytes)
	return m
}

// raftRefused counts a Raft connection refused at its handshake.
func (m *metrics) raftRefused(code errcode.Code) {
	m.raftConnsRefused.WithLabelValues(string(code)).Inc()
}

// observe records one command this node proposed.
func (m *metrics) observe(c Command, res *Result, err error, took time.Duration) {
	typ := commandType(c)
	code := "OK"
	if err != nil {
		code = string(errcode.Of(err))
	}
	m.commands.WithLabelValues(typ, code).Inc()
	m.applySeconds.WithLabelValues(typ).Observe(took.Seconds())
	if res == nil {
		return
	}
	s, ok := res.Value.(RunSummary)
	if !ok {
		return
	}
	now := c.header().Now
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case s.Barrier == BarrierOpen && s.BarrierOpened == now:
		m.barrierWait.WithLabelValues(s.Root.String()).Observe(float64(s.BarrierOpened-s.Created) / 1000)
	case s.State == RunFailed && res.Err != nil && errcode.Of(res.Err) == errcode.Code(s.FailCode):
		m.runFailures.WithLabelValues(s.Root.String(), s.FailCode).Inc()
	default:
		return
	}
	if !m.releases[s.Root] {
		m.releases[s.Root] = true
		m.added = true
	}
}

// forget deletes the barrierWait and runFailures series of every release
// no run in s is on: a nightly release gave each metric a series more for
// the process's lifetime. A run stays in the state until prune drops it,
// ended and older than the prune's age, so a release's series outlive
// its last run by that age (--auto-prune, gate prune) and are scraped
// meanwhile; a gate that never prunes keeps them, as it keeps its runs.
// Every member forgets, once it applied the prune, the series it made
// while it led.
//
// dropped is FSM.runsDropped of s: forget walks the runs (under the
// state's read lock, which applies wait for) only once a prune or a
// restore dropped some since it last looked, or once observe gave a
// release its first series (which may come after the prune of its last
// run was applied), not at every applied entry.
func (m *metrics) forget(s *State, dropped uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.added && (len(m.releases) == 0 || dropped == m.forgotAt) {
		return
	}
	m.added, m.forgotAt = false, dropped
	gone := maps.Clone(m.releases)
	for _, r := range s.Runs {
		if gone[r.Root] {
			delete(gone, r.Root)
			if len(gone) == 0 {
				return
			}
		}
	}
	for root := range gone {
		release := root.String()
		m.barrierWait.DeletePartialMatch(prometheus.Labels{"release": release})
		m.runFailures.DeletePartialMatch(prometheus.Labels{"release": release})
		delete(m.releases, root)
	}
}

func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}
