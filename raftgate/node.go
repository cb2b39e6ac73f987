package raftgate

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"
	"golang.org/x/sync/semaphore"

	"github.com/shardproof/shardproof/evidence"
	"github.com/shardproof/shardproof/internal/errcode"
)

// Sentinel conditions; errors.Is matches any error carrying the same code.
var (
	ErrNotLeader          error = &errcode.Error{Code: errcode.NotLeader}
	ErrIndeterminate      error = &errcode.Error{Code: errcode.Indeterminate}
	ErrGenerationConflict error = &errcode.Error{Code: errcode.GenerationConflict}
	ErrPublishConflict    error = &errcode.Error{Code: errcode.PublishConflict}
	ErrFenceBehind        error = &errcode.Error{Code: errcode.FenceBehind}
	ErrPermitClosed       error = &errcode.Error{Code: errcode.PermitClosed}
	ErrRootMismatch       error = &errcode.Error{Code: errcode.RootMismatch}
	ErrBarrierTimeout     error = &errcode.Error{Code: errcode.BarrierTimeout}
	ErrRunFailed          error = &errcode.Error{Code: errcode.RunFailed}
	ErrGateUnavailable    error = &errcode.Error{Code: errcode.GateUnavailable}
)

// Default addresses of a single embedded gate, on loopback.
const (
	DefaultHTTPAddr = "127.0.0.1:7480"
	DefaultRaftAddr = "127.0.0.1:7481"
	DefaultGateURL  = "http://" + DefaultHTTPAddr
)

// Timing are the Raft timeouts. The zero value means hashicorp/raft's
// defaults (1 s heartbeat and election, 500 ms lease).
type Timing struct {
	Heartbeat   time.Duration
	Election    time.Duration
	LeaderLease time.Duration
	Commit      time.Duration
}

// FastTiming is for loopback tests: elections in a few hundred ms.
var FastTiming = Timing{Heartbeat: 200 * time.Millisecond, Election: 200 * time.Millisecond, LeaderLease: 100 * time.Millisecond, Commit: 5 * time.Millisecond}

// Config configures a Node.
type Config struct {
	// ID is the Raft server ID; it MUST stay the same across restarts.
	ID string
	// DataDir holds raft.db (log and stable store) and snapshots/.
	DataDir string
	// RaftAddr is the host:port the Raft TCP transport binds and
	// advertises; HTTPAddr is the API's. Port 0 picks a free port.
	RaftAddr string
	HTTPAddr string
	// RaftAdvertise and HTTPAdvertise are the addresses other members use
	// to reach this node, when they differ from the bind addresses (e.g.
	// binding 0.0.0.0). Empty means the bound address.
	RaftAdvertise string
	HTTPAdvertise string
	// Join is the HTTP address of a running member. A node with Join set
	// and no state on disk asks that member to add it.
	Join string
	// Bootstrap lets a node with no state on disk and no Join found a new
	// single-node cluster of itself. Without it such a node refuses to
	// start (USAGE): it may be a wiped member of a running cluster, which
	// must rejoin, and founding a second cluster under the same addresses
	// would answer reads from an empty state and acknowledge writes the
	// real cluster never sees. A node whose stored configuration has
	// other members also refuses Bootstrap, so it is given on a cluster's
	// first start only and never stays in a restart command. A node with
	// state and a single-member configuration ignores it.
	Bootstrap bool
	// Recover makes a node with state the only member of its cluster,
	// keeping every command it has: the way out when a majority of the
	// members is lost for good, which leaves the rest unable to elect a
	// leader or answer a read. It commits entries that were only in this
	// node's log, and a member that comes back must not be restarted on
	// its old directory (it would form a rival majority): wipe it and
	// rejoin with Join. Used once, then dropped from the restart command.
	Recover bool
	// Restore, with Bootstrap, founds the new cluster on a gate backup
	// (the bytes of GET /v1/state, as `gate backup` writes them) instead
	// of an empty state: the way back after every member's directory is
	// lost, or to move a gate to new machines. The backup is decoded and
	// validated first; a DIR that holds state is refused, and so is a
	// Raft address that a still running member of the backup's cluster
	// has in its configuration (see checkRestoreBeside). The backup's
	// member records are dropped: the new members record their own.
	Restore []byte
	Timing  Timing
	// ApplyTimeout bounds how long a write waits to be enqueued and for a
	// linearizable read's barrier; zero means 10 s.
	ApplyTimeout time.Duration
	// SnapshotThreshold is the number of log entries between snapshots;
	// zero means raft's default (8192).
	SnapshotThreshold uint64
	// Logger receives the gate's structured logs; RaftLog receives
	// hashicorp/raft's own, at RaftLogLevel. Nil means slog.Default()
	// and os.Stderr.
	Logger  *slog.Logger
	RaftLog io.Writer
	// RaftLogLevel is the process's log level, which raft's lines follow:
	// warnings and errors at info (the default) and warn, errors only at
	// error, and all of them, raft's info and debug lines (elections,
	// replication), at debug.
	RaftLogLevel slog.Level
	// RaftLogJSON writes RaftLog's lines as JSON objects, for a log
	// collector that parses the gate's own logs as JSON too.
	RaftLogJSON bool
	// SweepInterval is how often the leader fails runs whose barrier
	// deadline passed; zero means 250 ms.
	SweepInterval time.Duration
	// WrapStream, if set, decorates the Raft stream layer (the TCP
	// listener and dialer between members) before the transport uses it:
	// TLS, or, in tests, cutting links between members (see the gate's
	// chaos test). Nil means plain TCP.
	WrapStream func(raft.StreamLayer) raft.StreamLayer
	// PruneOlderThan, if positive, makes the leader propose a prune
	// command (see Prune) with this age every PruneInterval, so a gate
	// that runs for years needs no cron job to stay small. Zero means
	// never.
	PruneOlderThan time.Duration
	// PruneInterval is how often the leader prunes; zero means an hour.
	PruneInterval time.Duration
	// RequestMemory bounds the request bodies a node holds at once,
	// across requests; a body beyond it is answered GATE_UNAVAILABLE,
	// which clients retry. Zero means 256 MiB (eight commands of the
	// largest size).
	RequestMemory int64
	// WriteTimeout is how long a response waits for its client to take
	// its next bytes before the node gives it up and closes the
	// connection; zero means 30 s. It bounds no response as a whole: a
	// large state read by a slow client, or a long-poll, may take longer.
	WriteTimeout time.Duration
	// decode, if set, decodes the log's entries instead of DecodeCommand:
	// tests make some members a newer build that knows one more field.
	decode func([]byte) (Command, error)
	// encodeAnswer, if set, encodes the answers of reads instead of
	// json.Marshal: tests see whether the FSM's lock is held meanwhile.
	encodeAnswer func(any) ([]byte, error)
	// olderBuild, if set, makes the node a build of this command-schema
	// version instead of CommandVersion: tests stand in a member not
	// upgraded yet (0: a build before the version handshake), which
	// reports it, refuses what is newer and halts at it. At 0 it neither
	// serves nor sends POST /v1/record, which came after the handshake;
	// from 1 on it is the build of that version before the next, which
	// does both (see recordsItself).
	olderBuild *uint64
	// versionInterval is how often a leader whose cluster version is
	// below its build's asks the members for theirs, and a follower
	// whose join record is missing or stale asks the leader to record
	// it; zero means 5 s.
	versionInterval time.Duration
	// promoteInterval is how often promoteLoop looks for learners to
	// promote outside a join's watch; zero means versionInterval, at most
	// a second. Tests stretch it, to see a promotion the join triggers.
	promoteInterval time.Duration
	// learnerScanInterval is how often a learner reads its log's new
	// committed entries (watchLearner); zero means learnerScanInterval.
	// Tests stretch it, to see what a status finds.
	learnerScanInterval time.Duration
	// versionPollTimeout bounds one poll of the members' versions; zero
	// means versionPollTimeout. Tests lengthen it, so a poll held by a
	// member that never answers outlasts what they watch happen meanwhile.
	versionPollTimeout time.Duration
	// wrapHTTP, if set, decorates the API's listener (before TLS): tests
	// black-hole a member's HTTP address.
	wrapHTTP func(net.Listener) net.Listener
	// wrapStable, if set, decorates the stable store Raft keeps its term
	// and vote in: tests hold a write of the term.
	wrapStable func(raft.StableStore) raft.StableStore
	// TLS, if set, serves the API over HTTPS and makes Raft connections
	// between members mutual TLS (see TLSConfig).
	TLS *TLSConfig
	// Token, if set, is the gate's shared secret (see LoadToken): every
	// API request but the health probes must carry it, and every Raft
	// connection between members must prove both ends hold it. Every
	// member of a cluster needs the same token.
	Token []byte
	// VerifierKeys, if set, are the verifier keys whose signatures the
	// gate requires of evidence (see evidence.Trusted): a register with
	// a report and a recheck are refused (EVIDENCE_UNSIGNED,
	// EVIDENCE_SIGNATURE_INVALID) unless one of them signed the
	// command's fields. It is checked where a request is admitted, not
	// in Apply; every member should be given the same keys.
	VerifierKeys *evidence.Trusted
	// VerifierKeysFile, if set, is the verifier keys file (see
	// evidence.LoadTrusted) VerifierKeys was read from: Start reads it
	// when VerifierKeys is nil, and ReloadVerifierKeys reads it again
	// (gate serve does on SIGHUP). A node without it keeps the keys it
	// started with, or none.
	VerifierKeysFile string
}

// Node is one gate server: a Raft member with its FSM and HTTP API.
type Node struct {
	cfg  Config
	log  *slog.Logger
	fsm  *FSM
	raft *raft.Raft
	// leaderLease is the Raft leader lease in effect (not reloadable, so
	// raft does not report it).
	leaderLease time.Duration
	trans       *raft.NetworkTransport
	// stream is the Raft stream layer as members dial each other (TLS,
	// token handshake), which a joiner's probe goes through too.
	stream raft.StreamLayer
	store  *raftboltdb.BoltStore
	snaps  raft.SnapshotStore
	ln     net.Listener
	srv    *http.Server
	hc     *http.Client
	met    *metrics
	// bodies is the request-memory budget (bodyBudget bytes).
	bodies     *semaphore.Weighted
	bodyBudget int64
	// bodyBytes is how much of the budget request bodies hold now.
	bodyBytes atomic.Int64

	// barrierTerm is the term in which this node, as leader, last
	// completed a barrier; reads in that term need only VerifyLeader.
	barrierTerm atomic.Uint64

	stop     chan struct{}
	wg       sync.WaitGroup
	shutOnce sync.Once
	shutErr  error
	// raftDown shuts Raft down once, for Shutdown or a halt, whichever
	// comes first; the other waits for it.
	raftDown    sync.Once
	raftDownErr error
	// vers is the leader's view of the members' versions.
	vers versions
	// recording is set while a record request (askRecord) is in flight.
	recording atomic.Bool
	// learner is set while the node is a learner (see learner.go);
	// promoting while the leader's promoteLearners runs (it starts the
	// promotions, each learner's in asking while in flight).
	learner   learner
	promoting atomic.Bool
	asking    learnersAsked
	// joined wakes promoteLoop when this leader added a learner: it then
	// looks for learners to promote every promoteWatchInterval for a while
	// (see promoteLoop).
	joined chan struct{}
	// beats is held, read-locked, by each heartbeat Raft handles on a
	// transport goroutine (voteGate.SetHeartbeatHandler), and beatsOff
	// set under its write lock before the store closes: see Shutdown.
	beats    sync.RWMutex
	beatsOff bool
	// ident is the cluster identity this member knows (see identity.go).
	ident *identity
	// trusted is the verifier key set in effect (Config.VerifierKeys,
	// then what each ReloadVerifierKeys read), nil when the node requires
	// no signatures: a check loads it once, so it sees one whole set.
	// reloading serializes reloads.
	trusted   atomic.Pointer[evidence.Trusted]
	reloading sync.Mutex
	// made are the directories Start made for DataDir, outermost first,
	// and joinAsked is set once Start asked a member to add this node:
	// see removeMade.
	made      []string
	joinAsked bool
}

// NewNode returns a node; Start opens its storage and starts serving.
func NewNode(cfg Config) *Node {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.RaftLog == nil {
		cfg.RaftLog = os.Stderr
	}
	if cfg.ApplyTimeout == 0 {
		cfg.ApplyTimeout = 10 * time.Second
	}
	if cfg.SweepInterval == 0 {
		cfg.SweepInterval = 250 * time.Millisecond
	}
	if cfg.PruneInterval == 0 {
		cfg.PruneInterval = time.Hour
	}
	if cfg.WriteTimeout == 0 {
		cfg.WriteTimeout = 30 * time.Second
	}
	n := &Node{
		cfg:   cfg,
		log:   cfg.Logger.With("node", cfg.ID),
		fsm:   NewFSM(),
		hc:    &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: 30 * time.Second}},
		stop:  make(chan struct{}),
		ident: newIdentity(),
	}
	n.fsm.onClusterID = func(id string) { n.learnClusterID(id, "state") }
	n.trusted.Store(cfg.VerifierKeys)
	if cfg.TLS != nil {
		n.hc.Transport.(*http.Transport).TLSClientConfig = cfg.TLS.client()
	}
	if cfg.decode != nil {
		n.fsm.decode = cfg.decode
	}
	if cfg.olderBuild != nil {
		n.fsm.version = min(*cfg.olderBuild, CommandVersion)
	}
	if n.cfg.versionInterval == 0 {
		n.cfg.versionInterval = 5 * time.Second
	}
	if n.cfg.versionPollTimeout == 0 {
		n.cfg.versionPollTimeout = versionPollTimeout
	}
	if n.cfg.learnerScanInterval == 0 {
		n.cfg.learnerScanInterval = learnerScanInterval
	}
	if n.cfg.promoteInterval == 0 {
		n.cfg.promoteInterval = min(n.cfg.versionInterval, time.Second)
	}
	n.joined = make(chan struct{}, 1)
	n.met = newMetrics(n)
	n.bodyBudget = cfg.RequestMemory
	if n.bodyBudget <= 0 {
		n.bodyBudget = 8 * MaxCommandSize
	}
	n.bodies = semaphore.NewWeighted(n.bodyBudget)
	return n
}

// recoveredMarker is the file, in a data directory, that a recovery
// leaves (Config.Recover).
const recoveredMarker = "recovered"

// noStateError refuses to found a cluster that Config did not ask for.
func (n *Node) noStateError() error {
	return errcode.New(errcode.Usage, "%s holds no gate state: give --bootstrap to found a new single-node cluster (the first start of a gate's first node), or --join HTTP-ADDR of a running member to join (or, for a member whose directory was wiped, rejoin) its cluster",
		n.cfg.DataDir)
}

// checkAddrs refuses an address that is no HOST:PORT (USAGE), before
// anything is created in the data directory: a typo in --http-addr or
// --raft-addr was IO, exit 3, from the listener, and left DIR behind; a
// --join without a port asked port 80 for 30 s, leaving a learner DIR.
func (n *Node) checkAddrs() error {
	addrs := []struct{ flag, addr string }{
		{"--http-addr", n.cfg.HTTPAddr}, {"--raft-addr", n.cfg.RaftAddr},
		{"--http-advertise", n.cfg.HTTPAdvertise}, {"--raft-advertise", n.cfg.RaftAdvertise},
	}
	for _, j := range strings.Split(n.cfg.Join, ",") {
		// --join may list members, as --gate does; a URL names its
		// port by its scheme if need be.
		if j = strings.TrimSpace(j); !strings.Contains(j, "://") {
			addrs = append(addrs, struct{ flag, addr string }{"--join", j})
		}
	}
	for _, a := range addrs {
		if a.addr == "" {
			continue
		}
		if err := CheckHostPort(a.addr); err != nil {
			return errcode.New(errcode.Usage, "%s %q: want HOST:PORT, such as 127.0.0.1:7480 (%v)", a.flag, a.addr, err)
		}
	}
	return nil
}

// CheckHostPort says why addr is no HOST:PORT a listener binds or a
// client dials: no port, or one that is no number in [0,65535] (a
// service name such as "http" is refused too). An empty host is every
// interface. The caller makes it a USAGE error naming its flag.
func CheckHostPort(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		return err
	}
	if p < 0 || p > 65535 {
		return fmt.Errorf("port %d outside [0,65535]", p)
	}
	return nil
}

// dataLockWait is how long Start waits for another process's lock on the
// data directory's raft.db (one that is shutting down) before it gives up.
const dataLockWait = 2 * time.Second

// bind binds the Raft and HTTP ports, in that order, before anything is
// created in the data directory: a port in use left DIR made, with an
// empty raft.db, and the next start, on a free port, found a directory no
// start had finished. The HTTP listener is n.ln; the caller closes the
// Raft one on a later failure (Shutdown closes n.ln). A port in use is
// IO, unless the directory's raft.db is locked (portInUse).
func (n *Node) bind() (*tcpStream, error) {
	var advertise net.Addr
	if n.cfg.RaftAdvertise != "" {
		var err error
		if advertise, err = net.ResolveTCPAddr("tcp", n.cfg.RaftAdvertise); err != nil {
			return nil, errcode.Wrap(errcode.Usage, err, "raft advertise address")
		}
	}
	raftLn, err := listenTCPStream(n.cfg.RaftAddr, advertise)
	if err != nil {
		return nil, n.portInUse(err, "raft transport on %s", n.cfg.RaftAddr)
	}
	n.ln, err = net.Listen("tcp", n.cfg.HTTPAddr)
	if err != nil {
		raftLn.Close()
		return nil, n.portInUse(err, "gate HTTP listener on %s", n.cfg.HTTPAddr)
	}
	if n.cfg.wrapHTTP != nil {
		n.ln = n.cfg.wrapHTTP(n.ln)
	}
	if a, ok := n.ln.Addr().(*net.TCPAddr); ok && a.IP.IsUnspecified() && n.cfg.HTTPAdvertise == "" && n.cfg.Join != "" {
		// The address a member records is the one others forward
		// writes to when it leads: [::]:port names each of them.
		raftLn.Close()
		return nil, errcode.New(errcode.Usage, "gate HTTP address %s binds every interface; a member joining a cluster needs --http-advertise, the address the other members reach it at", a)
	}
	return raftLn, nil
}

// portInUse is the error of a listener that failed with err: IO, with
// what and args saying which, or DATA_DIR_IN_USE when its port was in use
// and the data directory's raft.db is locked by another process, waited
// for as Start waits for it (dataLockWait): the gate serving DIR runs
// already, most likely on these very ports, and the port was only the
// first thing the second start met. A port in use while no one holds
// raft.db (none there, or its gate stopped) stays IO.
func (n *Node) portInUse(err error, what string, args ...any) error {
	if !errors.Is(err, syscall.EADDRINUSE) {
		return errcode.Wrap(errcode.IO, err, what, args...)
	}
	db := filepath.Join(n.cfg.DataDir, "raft.db")
	// Read-only: a shared lock, which waits for the exclusive one a
	// running gate holds, as a second writer would. bbolt opens with
	// O_CREATE, which must not make a raft.db that was not there.
	b, lerr := bbolt.Open(db, 0o600, &bbolt.Options{ReadOnly: true, Timeout: dataLockWait, OpenFile: func(name string, flag int, perm os.FileMode) (*os.File, error) {
		return os.OpenFile(name, flag&^os.O_CREATE, perm)
	}})
	if lerr == nil {
		b.Close()
	}
	if !errors.Is(lerr, bbolt.ErrTimeout) {
		return errcode.Wrap(errcode.IO, err, what, args...)
	}
	return errcode.New(errcode.DataDirInUse, "%s is locked by another gate process (waited %s), and the %s found its port in use: a gate serves this directory already; stop it, or give this node its own --data and ports",
		db, dataLockWait, fmt.Sprintf(what, args...))
}

// makeDirs makes dir and the parents it lacks, as os.MkdirAll, and
// returns those it made, outermost first: one another process made
// meanwhile is not among them.
func makeDirs(dir string) ([]string, error) {
	var missing []string
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		if _, err := os.Stat(d); err == nil || !errors.Is(err, fs.ErrNotExist) || filepath.Dir(d) == d {
			break
		}
		missing = append(missing, d)
	}
	var made []string
	for i := len(missing) - 1; i >= 0; i-- {
		if err := os.Mkdir(missing[i], 0o755); err == nil {
			made = append(made, missing[i])
		} else if !errors.Is(err, fs.ErrExist) {
			return made, err
		}
	}
	return made, os.MkdirAll(dir, 0o755)
}

// removeMade removes, after a failed Start, what it made of DataDir (the
// directory, with all Start wrote there, and the parents made for it), so
// the next start finds none, as it was given: a half-made DIR (an empty
// raft.db, a learner marker of a join never asked) misled it, refusing
// --bootstrap for a member whose join was not answered. A DIR that
// existed is left as it is. It runs with raft.db's lock held, so a start
// beside this one that waits for the lock finds the file gone and stops.
// It keeps DIR once a member was asked to add this node (the leader may
// have: the marker keeps a restart from founding a second cluster under
// a member's ID), and when another process holds raft.db (cause is
// DATA_DIR_IN_USE: a start beside this one uses the DIR this one made).
func (n *Node) removeMade(cause error) {
	if len(n.made) == 0 || n.joinAsked || errcode.Of(cause) == errcode.DataDirInUse {
		return
	}
	for i := len(n.made) - 1; i >= 0; i-- {
		rm := os.Remove // a parent: empty, unless another put something there
		if i == len(n.made)-1 {
			rm = os.RemoveAll
		}
		if err := rm(n.made[i]); err != nil {
			n.log.Warn("the start failed; a directory it made for its data is left", "dir", n.made[i], "code", errcode.IO, "err", err)
			return
		}
	}
	n.log.Info("the start failed; removed the directories it made for its data", "dir", n.made[0])
}

// Start opens the node's storage, starts Raft and the HTTP API, and
// bootstraps or joins as Config says. On error everything opened is
// closed, and DataDir, when Start made it, is removed (see removeMade).
func (n *Node) Start(ctx context.Context) (err error) {
	if n.cfg.ID == "" || n.cfg.DataDir == "" {
		return errcode.New(errcode.Usage, "gate node needs an ID and a data directory")
	}
	if err := n.checkAddrs(); err != nil {
		return err
	}
	if n.cfg.VerifierKeysFile != "" && n.trusted.Load() == nil {
		t, err := evidence.LoadTrusted(n.cfg.VerifierKeysFile)
		if err != nil {
			return err
		}
		n.trusted.Store(t)
	}
	var restored *State
	if n.cfg.Restore != nil {
		if !n.cfg.Bootstrap || n.cfg.Join != "" || n.cfg.Recover {
			return errcode.New(errcode.Usage, "restoring a gate backup founds a new cluster: it goes with --bootstrap, and without --join or --recover")
		}
		// Whether DIR holds state is asked of raft below, not of the
		// file: a start that failed after opening the store leaves an
		// empty raft.db, and refusing the retry sent the operator to
		// --bootstrap alone, which founded an empty gate.
		var err error
		if restored, err = DecodeBackup(n.cfg.Restore); err != nil {
			return errcode.Wrap(errcode.Of(err), err, "gate backup")
		}
		if restored.ClusterVersion > n.fsm.version {
			return errcode.Wrap(errcode.ClusterVersion, &VersionError{Cluster: restored.ClusterVersion, Build: n.fsm.version},
				"gate backup: restore it with a build of version %d or later", restored.ClusterVersion)
		}
		if err := n.checkRestoreBeside(ctx, restored.Nodes); err != nil {
			return err
		}
		restored.Nodes = map[string]*NodeInfo{}
		// A new cluster, with an identity of its own: the members of
		// the backup's, should one come back with a configuration that
		// names this node's address, are refused (see identity.go). The
		// cluster starts at this build's version (at or above the
		// backup's, checked above, and versionClusterID), so it checks
		// connections from its first one: its only member runs this
		// build, and its leader would raise it there at its first tick,
		// a raise that landed after its first commands. A backup at
		// versionFenceLog keeps its fences' logs.
		restored.ClusterID = ""
		if n.fsm.version >= versionClusterID {
			restored.ClusterID = newClusterID()
			restored.ClusterVersion = n.fsm.version
		}
	}
	if n.cfg.TLS != nil {
		raftAddr, httpAddr := n.cfg.RaftAddr, n.cfg.HTTPAddr
		if n.cfg.RaftAdvertise != "" {
			raftAddr = n.cfg.RaftAdvertise
		}
		if n.cfg.HTTPAdvertise != "" {
			httpAddr = n.cfg.HTTPAdvertise
		}
		if err := n.cfg.TLS.checkNames(raftAddr, httpAddr); err != nil {
			return err
		}
	}
	if n.cfg.Join == "" && !n.cfg.Bootstrap {
		// Refused before anything is created in the directory.
		if _, err := os.Stat(filepath.Join(n.cfg.DataDir, "raft.db")); errors.Is(err, fs.ErrNotExist) {
			if n.cfg.Recover {
				return errcode.New(errcode.Usage, "%s holds no gate state to recover", n.cfg.DataDir)
			}
			return n.noStateError()
		}
	}
	defer func() {
		if err != nil {
			n.shutdown(func() { n.removeMade(err) })
		}
	}()
	raftLn, err := n.bind()
	if err != nil {
		return err
	}
	defer func() {
		if err != nil && n.trans == nil {
			raftLn.Close()
		}
	}()
	if n.made, err = makeDirs(n.cfg.DataDir); err != nil {
		return errcode.Wrap(errcode.IO, err, "gate data dir")
	}
	hl := hclog.New(&hclog.LoggerOptions{Name: "raft", Level: raftLogLevel(n.cfg.RaftLogLevel), Output: n.cfg.RaftLog, JSONFormat: n.cfg.RaftLogJSON})
	// bbolt locks the file for its one writer and, without a timeout,
	// waits for the lock for ever: a second gate started on a running
	// gate's directory hung without a word.
	db := filepath.Join(n.cfg.DataDir, "raft.db")
	var dbFile *os.File
	n.store, err = raftboltdb.New(raftboltdb.Options{Path: db, BoltOptions: &bbolt.Options{Timeout: dataLockWait, OpenFile: func(name string, flag int, perm os.FileMode) (*os.File, error) {
		f, err := os.OpenFile(name, flag, perm)
		dbFile = f
		return f, err
	}}})
	if errors.Is(err, bbolt.ErrTimeout) {
		return errcode.New(errcode.DataDirInUse, "%s is locked by another gate process (waited %s); stop it, or give this node its own --data", db, dataLockWait)
	}
	if err != nil {
		return errcode.Wrap(errcode.IO, err, "open %s", db)
	}
	// The lock is on the file opened, which a failed start beside this
	// one, which made DIR, may have removed meanwhile (see removeMade):
	// going on would keep the state in a file no path names.
	if held, err := dbFile.Stat(); err != nil {
		return errcode.Wrap(errcode.IO, err, "open %s", db)
	} else if now, err := os.Stat(db); err != nil || !os.SameFile(held, now) {
		return errcode.New(errcode.IO, "%s was removed while this start waited for its lock (a start beside this one that made %s failed and removed it); start again", db, n.cfg.DataDir)
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(n.cfg.DataDir, 2, hl)
	if err != nil {
		return errcode.Wrap(errcode.IO, err, "open snapshot store")
	}
	n.snaps = snaps
	var stream raft.StreamLayer = raftLn
	if n.cfg.TLS != nil {
		stream = &tlsStream{StreamLayer: stream, server: n.cfg.TLS.raftServer(), client: n.cfg.TLS.client()}
	}
	var tok []byte
	if len(n.cfg.Token) > 0 {
		tok = n.cfg.Token
	}
	switch {
	case n.fsm.version >= versionClusterID:
		stream = &authStream{StreamLayer: stream, tok: tok, log: n.log, ids: n.ident, refused: n.met.raftRefused}
	case tok != nil:
		// A build of version 2 (tests): the token handshake alone.
		stream = newAuthStream(stream, tok, n.log)
	}
	if n.cfg.WrapStream != nil {
		stream = n.cfg.WrapStream(stream)
	}
	n.stream = stream
	n.trans = raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream: stream, MaxPool: 4, Timeout: 10 * time.Second, Logger: hl,
	})

	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(n.cfg.ID)
	rc.Logger = hl
	if t := n.cfg.Timing; t.Heartbeat > 0 {
		rc.HeartbeatTimeout, rc.ElectionTimeout, rc.LeaderLeaseTimeout = t.Heartbeat, t.Election, t.LeaderLease
		if t.Commit > 0 {
			rc.CommitTimeout = t.Commit
		}
	}
	n.leaderLease = rc.LeaderLeaseTimeout
	if n.cfg.SnapshotThreshold > 0 {
		rc.SnapshotThreshold = n.cfg.SnapshotThreshold
		rc.TrailingLogs = n.cfg.SnapshotThreshold
	}
	existing, err := raft.HasExistingState(n.store, n.store, snaps)
	if err != nil {
		return errcode.Wrap(errcode.IO, err, "inspect raft state")
	}
	if err := n.learner.load(n.cfg.DataDir); err != nil {
		return err
	}
	if !existing && n.cfg.Join == "" && n.learner.on.Load() {
		// A joiner stopped before its join was answered: it rejoins
		// with --join. Founding a cluster here (--bootstrap, --restore)
		// would make a second one under a member's ID.
		return errcode.New(errcode.Usage, "%s is a member whose join was not answered (it holds %s and no gate state): restart it with --join HTTP-ADDR of a running member, as it was started; --bootstrap would found a second cluster (to found one here, empty the directory first)",
			n.cfg.DataDir, filepath.Join(n.cfg.DataDir, learnerFile))
	}
	if !existing && n.cfg.Join != "" {
		// Before Raft starts: from its first RPC on, this node grants
		// no vote until the leader promoted it (see learner.go).
		if err := n.learner.begin(); err != nil {
			return err
		}
	}
	if err := n.loadClusterID(existing, restored); err != nil {
		return err
	}
	if restored != nil {
		if existing {
			return errcode.New(errcode.Usage, "%s holds gate state already: a backup is restored into an empty directory only", n.cfg.DataDir)
		}
		if err := seedSnapshot(snaps, n.trans, rc.LocalID, restored); err != nil {
			return err
		}
		n.log.Info("restored a gate backup as a new single-node cluster", "aliases", len(restored.Aliases), "releases", len(restored.Releases), "runs", len(restored.Runs))
	}
	if n.cfg.Recover {
		if !existing {
			return errcode.New(errcode.Usage, "%s holds no gate state to recover", n.cfg.DataDir)
		}
		// A second recovery, with the rejoined members alive, would
		// make this node a cluster of its own again, behind them: the
		// marker the first one left refuses it.
		marker := filepath.Join(n.cfg.DataDir, recoveredMarker)
		if b, err := os.ReadFile(marker); err == nil {
			return errcode.New(errcode.Usage, "%s was recovered already (%s): --recover is for once, after a majority is lost; restart without it (if a majority is lost again, delete %s first)",
				n.cfg.DataDir, strings.TrimSpace(string(b)), marker)
		}
		// Replays this node's log into a snapshot and rewrites the
		// configuration to this node alone (hashicorp/raft's manual
		// recovery, as peers.json does).
		if err := raft.RecoverCluster(rc, n.fsm, n.store, n.store, snaps, n.trans, raft.Configuration{Servers: []raft.Server{{
			Suffrage: raft.Voter, ID: rc.LocalID, Address: n.trans.LocalAddr(),
		}}}); err != nil {
			if _, h := n.fsm.Halted(); h != nil {
				// As in NewRaft below: its newest snapshot is a newer
				// build's.
				return fmt.Errorf("recover %s: %w", n.cfg.DataDir, h)
			}
			return errcode.Wrap(errcode.Internal, err, "recover %s", n.cfg.DataDir)
		}
		if err := os.WriteFile(marker, []byte("at "+time.Now().UTC().Format(time.RFC3339)+"\n"), 0o644); err != nil {
			return errcode.Wrap(errcode.IO, err, "recovery marker")
		}
		// The only member votes: a learner that recovers is one no more.
		if err := n.learner.end(); err != nil {
			return err
		}
		n.log.Warn("recovered as a single-node cluster from this node's own state; other members must rejoin with wiped directories and --join", "id", n.cfg.ID)
	}
	var stable raft.StableStore = n.store
	if n.cfg.wrapStable != nil {
		stable = n.cfg.wrapStable(stable)
	}
	n.raft, err = raft.NewRaft(rc, n.fsm, n.store, stable, snaps, &voteGate{NetworkTransport: n.trans, n: n})
	if err != nil {
		if _, h := n.fsm.Halted(); h != nil {
			// Its newest snapshot is a newer build's.
			return fmt.Errorf("start raft: %w", h)
		}
		return errcode.Wrap(errcode.Internal, err, "start raft")
	}
	if existing {
		// A node started on another member's data (a forgotten --id on
		// a restart) would serve, but never vote or lead: every write
		// would answer NOT_LEADER with no word of why. Its address is in
		// the stored configuration under the other ID. A node killed
		// while joining holds a configuration without itself, and
		// without its address: the leader adds it once it is back.
		f := n.raft.GetConfiguration()
		if err := f.Error(); err != nil {
			return errcode.Wrap(errcode.Internal, err, "read the stored configuration")
		}
		var ids []string
		member, owner := false, ""
		for _, s := range f.Configuration().Servers {
			ids = append(ids, string(s.ID))
			member = member || s.ID == rc.LocalID
			if s.Address == n.trans.LocalAddr() && s.ID != rc.LocalID {
				owner = string(s.ID)
			}
		}
		switch {
		case n.cfg.Recover:
		case member && n.cfg.Bootstrap && len(ids) > 1:
			return errcode.New(errcode.Usage, "%s holds the state of member %q of a %d-member gate cluster (%s): --bootstrap founds a new cluster and belongs to the first start of its first node only; restart without it (and if this directory is ever wiped, rejoin with --join, never --bootstrap)",
				n.cfg.DataDir, n.cfg.ID, len(ids), strings.Join(ids, ", "))
		case member:
		case owner != "":
			return errcode.New(errcode.Usage, "%s holds the state of gate member %q at %s (members: %s), not of %q: restart with the ID it was created with (--id %s)",
				n.cfg.DataDir, owner, n.trans.LocalAddr(), strings.Join(ids, ", "), n.cfg.ID, owner)
		case len(ids) > 0:
			n.log.Warn("this node is not in the stored configuration yet; the leader adds it when it joins", "id", n.cfg.ID, "members", strings.Join(ids, ","))
		}
	}
	if !existing && n.cfg.Join == "" && !n.cfg.Bootstrap {
		return n.noStateError()
	}
	if !existing && n.cfg.Join == "" && restored == nil {
		f := n.raft.BootstrapCluster(raft.Configuration{Servers: []raft.Server{{
			Suffrage: raft.Voter, ID: rc.LocalID, Address: n.trans.LocalAddr(),
		}}})
		if err := f.Error(); err != nil && !errors.Is(err, raft.ErrCantBootstrap) {
			return errcode.Wrap(errcode.Internal, err, "bootstrap")
		}
		n.log.Info("bootstrapped single-node gate", "raftAddr", n.trans.LocalAddr())
	}

	n.warnCleartextToken()

	// A client that sends a body slowly holds its memory (up to
	// MaxCommandSize) until ReadTimeout. Responses have no timeout as a
	// whole, since /v1/runs/{id}/wait long-polls, but each of their
	// writes has one (writeDeadlines).
	h := n.handler()
	if len(n.cfg.Token) > 0 {
		h = requireToken(n.cfg.Token, n.log, h)
	}
	h = n.writeDeadlines(h)
	n.srv = &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: time.Minute}
	ln := n.ln
	if n.cfg.TLS != nil {
		ln = tls.NewListener(ln, n.cfg.TLS.server())
	}
	n.wg.Add(3)
	go func() {
		defer n.wg.Done()
		n.watchHalt()
	}()
	go func() {
		defer n.wg.Done()
		if err := n.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			n.log.Error("gate HTTP server stopped", "err", err, "code", errcode.IO)
		}
	}()
	go func() {
		defer n.wg.Done()
		n.leaderLoop()
	}()

	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		n.promoteLoop()
	}()
	if n.learner.on.Load() {
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			n.watchLearner()
		}()
	}
	if !existing && n.cfg.Join != "" {
		if err := n.join(ctx); err != nil {
			return err
		}
	} else if l := n.learner.status(); l != nil && l.Since == 0 {
		// A learner stopped before its join was answered: the leader
		// promotes it only once it knows the answer.
		if n.cfg.Join == "" {
			n.log.Warn("this member is a learner whose join was not answered: it votes only once the leader promoted it; restart it with --join", "id", n.cfg.ID)
		} else if err := n.join(ctx); err != nil {
			return err
		}
	}
	n.log.Info("gate node started", "httpAddr", n.HTTPAddr(), "raftAddr", n.RaftAddr(), "existingState", existing)
	if t := n.trusted.Load(); t != nil {
		n.log.Info("registers of a report and rechecks need a signature by one of these verifier keys; every member should list the same", "verifierKeys", strings.Join(t.IDs(), ","))
	}
	return nil
}

// warnCleartextToken warns, at start, of a token that travels in clear
// text: without TLS, every client and every member forwarding to this
// node sends it with each request, so an API that other hosts reach
// (bound to an address that is not loopback, or advertised at one) shows
// it to whoever sees the traffic. Raft connections never carry it (their
// handshake sends MACs, not the token). A gate on a network its
// operators trust may run so; the warning says what that trusts.
func (n *Node) warnCleartextToken() {
	if len(n.cfg.Token) == 0 || n.cfg.TLS != nil {
		return
	}
	exposed := ""
	if a, ok := n.ln.Addr().(*net.TCPAddr); !ok || !a.IP.IsLoopback() {
		exposed = n.ln.Addr().String()
	} else if adv := n.cfg.HTTPAdvertise; adv != "" && !loopbackHost(adv) {
		exposed = adv
	}
	if exposed == "" {
		return
	}
	n.log.Warn("the gate token travels in clear text: the API is plain HTTP at "+exposed+", which other hosts reach, and clients and members send the token with every request, so whoever sees the traffic can read it and use the gate; give --tls-cert, --tls-key and --tls-ca, or keep the gate on a network you trust",
		"httpAddr", exposed)
}

// loopbackHost reports whether host:port names a loopback address: a
// loopback IP, or localhost.
func loopbackHost(hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		host = hostport
	}
	if ip := net.ParseIP(host); ip != nil {
		return ip.IsLoopback()
	}
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	return host == "localhost" || strings.HasSuffix(host, ".localhost")
}

// join asks the member at Config.Join to add this node as a learner,
// retrying for up to joinRetryFor or until ctx ends, and records the
// index of the nonvoter entry the leader answers with (see learner.go).
// A join whose outcome is INDETERMINATE (the leader lost its leadership
// while committing it, as one on a short lease does when a new member
// answers late, or the answer was lost) is asked again: the nonvoter
// added again at the same addresses, and its addresses recorded again,
// change nothing. The node's start failed on it instead.
func (n *Node) join(ctx context.Context) error {
	c := n.memberClient(n.cfg.Join)
	defer c.Close()
	c.RetryFor = joinRetryFor
	// The cluster's identity first, so the leader's first Raft
	// connection, once it adds this node, is checked against it, and
	// no other cluster's is taken meanwhile. A member that knows none
	// (a cluster below versionClusterID, or a follower that has not
	// applied it yet) leaves it to the state this node receives.
	if n.fsm.version >= versionClusterID {
		st, err := c.Status(ctx)
		if err != nil {
			return errcode.Wrap(errcode.Of(err), err, "join via %s: its status", n.cfg.Join)
		}
		if st.ClusterID != "" {
			n.learnClusterID(st.ClusterID, "join via "+n.cfg.Join)
		}
	}
	req := &Join{ID: n.cfg.ID, RaftAddr: n.RaftAddr(), HTTPAddr: n.HTTPAddr()}
	var ans joinAnswer
	deadline := time.Now().Add(joinRetryFor)
	n.joinAsked = true
	for {
		err := c.do(ctx, http.MethodPost, "/v1/join", req, &ans)
		if err == nil {
			break
		}
		if !IsIndeterminate(err) || ctx.Err() != nil || time.Now().After(deadline) {
			return errcode.Wrap(errcode.Of(err), err, "join via %s", n.cfg.Join)
		}
		n.log.Warn("join outcome unknown; asking again", "via", n.cfg.Join, "code", errcode.Of(err), "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
	if ans.nonvoter == 0 {
		// A leader of a build before learners added it as a voter.
		n.log.Warn("joined as a voter at once: the leader's build has no learners", "via", n.cfg.Join)
		return n.learner.end()
	}
	if err := n.learnerAnswered(ans.nonvoter); err != nil {
		return err
	}
	n.log.Info("joined gate cluster as a learner: it votes once the leader promoted it", "via", n.cfg.Join, "index", ans.nonvoter)
	return nil
}

// joinRetryFor bounds how long a joining node asks to be added.
const joinRetryFor = 30 * time.Second

// HTTPAddr is the host:port other members and clients reach the API at:
// HTTPAdvertise if set, else the bound address.
func (n *Node) HTTPAddr() string {
	if n.cfg.HTTPAdvertise != "" {
		return n.cfg.HTTPAdvertise
	}
	return n.ln.Addr().String()
}

// RaftAddr is the host:port the Raft transport advertises.
func (n *Node) RaftAddr() string { return string(n.trans.LocalAddr()) }

// URL is the API's base URL.
func (n *Node) URL() string { return n.scheme() + "://" + n.HTTPAddr() }

// scheme is the API's URL scheme.
func (n *Node) scheme() string {
	if n.cfg.TLS != nil {
		return "https"
	}
	return "http"
}

// memberClient returns a client for another member's API at addr
// (host:port, or a URL): over HTTPS verified against the gate's CAs when
// the gate runs TLS, with the gate's token when it has one.
func (n *Node) memberClient(addr string) *Client {
	if !strings.Contains(addr, "://") {
		addr = n.scheme() + "://" + addr
	}
	c := NewClient(addr)
	if n.cfg.TLS != nil {
		c.UseTLS(n.cfg.TLS.client())
	}
	c.Token = string(n.cfg.Token)
	c.memberTraffic = true
	return c
}

// ID is the node's Raft server ID.
func (n *Node) ID() string { return n.cfg.ID }

// FSM returns the node's local state machine. Reading it directly is not
// linearizable; use ReadConsistent for that.
func (n *Node) FSM() *FSM { return n.fsm }

// Raft returns the underlying raft instance (for operators and tests).
func (n *Node) Raft() *raft.Raft { return n.raft }

// IsLeader reports whether this node currently believes it is the leader.
func (n *Node) IsLeader() bool { return n.raft != nil && n.raft.State() == raft.Leader }

// Shutdown stops the HTTP API and Raft and closes the storage. It is safe
// to call more than once.
func (n *Node) Shutdown() error { return n.shutdown(nil) }

// shutdown is Shutdown, calling beforeClose, if set, once everything but
// the store is closed: raft.db's lock is still held.
func (n *Node) shutdown(beforeClose func()) error {
	n.shutOnce.Do(func() {
		close(n.stop)
		n.ident.markReady()
		var errs []error
		if n.srv != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			if err := n.srv.Shutdown(ctx); err != nil {
				n.srv.Close()
			}
			cancel()
		} else if n.ln != nil {
			n.ln.Close()
		}
		if n.raft != nil {
			errs = append(errs, n.shutdownRaft())
		}
		if n.trans != nil {
			errs = append(errs, n.trans.Close())
		}
		n.wg.Wait()
		// hashicorp/raft handles a heartbeat on the transport's
		// connection goroutine, which neither its Shutdown nor the
		// transport's Close waits for: one that began before them may
		// still write the term it carries, and raft panics when that
		// write fails ("failed to save current term: database not
		// open"). The store closes once those are done; later ones are
		// refused.
		n.beats.Lock()
		n.beatsOff = true
		n.beats.Unlock()
		if beforeClose != nil {
			beforeClose()
		}
		if n.store != nil {
			errs = append(errs, n.store.Close())
		}
		n.hc.CloseIdleConnections()
		if err := errors.Join(errs...); err != nil {
			n.shutErr = errcode.Wrap(errcode.IO, err, "gate shutdown")
		}
	})
	return n.shutErr
}

// shutdownRaft shuts Raft down and waits until it is.
func (n *Node) shutdownRaft() error {
	n.raftDown.Do(func() { n.raftDownErr = n.raft.Shutdown().Error() })
	return n.raftDownErr
}

// watchHalt takes the node out of its cluster when its FSM halts (see
// HaltError): Raft is shut down, so the member neither votes, nor leads,
// nor acknowledges entries it will not apply, and its data directory keeps
// the log from the entry on for a build that decodes it. The HTTP API
// stays up: /healthz, /readyz and /v1/status say GATE_HALTED, /metrics
// answers, and every other request is answered GATE_HALTED at once, never
// forwarded (see unlessHalted).
func (n *Node) watchHalt() {
	haltCh, _ := n.fsm.Halted()
	select {
	case <-n.stop:
		return
	case <-haltCh:
	}
	_, h := n.fsm.Halted()
	n.log.Error("gate member halted: a committed command or a snapshot of the state does not decode with this build; upgrade it to the other members' build and restart it on the same data directory",
		"code", errcode.GateHalted, "index", h.Index, "snapshot", h.Snapshot, "err", h.Err)
	if err := n.shutdownRaft(); err != nil {
		n.log.Warn("raft shutdown after a halt", "err", err)
	}
}

// raftLogLevel is the hclog level of raft's own lines at the process's
// log level l (see Config.RaftLogLevel).
func raftLogLevel(l slog.Level) hclog.Level {
	switch {
	case l <= slog.LevelDebug:
		return hclog.Debug
	case l >= slog.LevelError:
		return hclog.Error
	}
	return hclog.Warn
}

// Halted returns why the node stopped applying its log, or nil.
func (n *Node) Halted() *HaltError {
	_, h := n.fsm.Halted()
	return h
}

// Apply stamps c with this node's clock, proposes it and waits until it is
// committed and applied here. Only the leader may apply.
//
// Errors: ErrNotLeader (the command was not appended: safe to send to the
// leader), ErrIndeterminate (it was appended but leadership was lost or
// the node shut down before it committed, or it committed after this
// node's FSM halted: it may or may not take effect), or the command's own
// coded rejection (Result.Err, returned as err too).
//
// A register or recheck applied here records no signers: it went through
// no evidence check of this node's (see applyVouched).
func (n *Node) Apply(c Command) (*Result, error) { return n.applyVouched(c, nil) }

// applyVouched is Apply of a register or recheck whose evidence the
// trusted keys signers signed, as this node checked them where it
// admitted the request (checkEvidence): from cluster version
// versionSigners the command is logged naming them (VerifiedBy), and the
// state records them. Below it they are left out, as builds of version 6
// log the command, and only the answer and the log line name them
// (vouched). The version is this node's applied state's: one that has
// the raise was committed, so every member applies it before this
// command; one applied a moment before the raise leaves them out.
func (n *Node) applyVouched(c Command, signers []string) (*Result, error) {
	if err := checkProposal(c); err != nil {
		return nil, err
	}
	if h := n.Halted(); h != nil {
		// Raft may still lead for a moment (watchHalt shuts it down): a
		// command proposed now would commit, and this FSM would answer
		// it with its halt, not its result.
		return nil, errcode.Wrap(errcode.NotLeader, h, "node %s halted at entry %d; send it to another member", n.cfg.ID, h.Index)
	}
	c.header().Now = time.Now().UnixMilli()
	// Signatures were checked where the request was admitted
	// (checkEvidence); the log holds the command without them, and
	// names who signed once every member records that.
	if n.ClusterVersion() < versionSigners {
		signers = nil
	}
	switch c := c.(type) {
	case *Register:
		c.Signatures, c.VerifiedBy = nil, signers
	case *RecheckCmd:
		c.Signatures, c.VerifiedBy = nil, signers
	}
	if f, ok := c.(*AdvanceFence); ok {
		// A rule newer than some logs: stamped like the clock, so those
		// logs replay as they did (see AdvanceFence.SpareChecked), and
		// only once every member applies it (see stampFence).
		if err := n.stampFence(f); err != nil {
			return nil, err
		}
		if !f.Log.IsZero() {
			if err := n.needVersion(versionFenceLog, fmt.Sprintf("advancing the %s fence to %d with its log's prefix digest", truncate(f.Kind), f.Value)); err != nil {
				return nil, err
			}
		}
	}
	b, err := EncodeCommand(c)
	if err != nil {
		return nil, err
	}
	if len(b) > MaxCommandSize {
		return nil, errcode.New(errcode.DocumentTooLarge, "command is %d bytes, cap %d", len(b), MaxCommandSize)
	}
	start := time.Now()
	res, err := n.apply(c, b)
	n.met.observe(c, res, err, time.Since(start))
	return res, err
}

// errSignersSent refuses a register or recheck whose sender named its
// signers: the gate records the keys it checked itself, never what a
// client claims.
func errSignersSent(what string) error {
	return errcode.New(errcode.BadInput, "%s carries verifiedBy, which the gate records from the signatures it checks itself; send the signatures, never who signed; nothing changed", what)
}

// checkProposal refuses a command before it is proposed, for rules that
// Apply cannot enforce: Apply must give, on replay, the state it gave when
// the entry was first applied, so a rule added after entries were written
// would change what an old log replays to. Entries already in a log are
// not checked again.
func checkProposal(c Command) error {
	switch c := c.(type) {
	case *RecheckCmd:
		if c.VerifiedBy != nil {
			return errSignersSent("recheck of " + c.Root.String())
		}
		if c.Report.IsZero() {
			// A recheck renews permits a fence closed; without the
			// report that found its hits it is a claim, not evidence.
			return errcode.New(errcode.BadInput, "recheck of %s names no report", c.Root)
		}
	case *Register:
		if c.VerifiedBy != nil {
			return errSignersSent("register of " + c.Root.String())
		}
		if c.Report != nil && c.Report.Digest.IsZero() {
			// A report is named by its digest: a summary without one
			// is no stored report, and Apply takes the zero digest
			// for a retry of the report a release already holds.
			return errcode.New(errcode.BadInput, "register of %s: its report summary names no report digest", c.Root)
		}
	case *Publish:
		return CheckPathName("alias", c.Alias)
	case *CreateRun:
		if c.BarrierTimeoutMs > MaxBarrierTimeoutMs {
			return errcode.New(errcode.BadInput, "run %s: barrier timeout %d ms above the cap of %d (ten years)", truncate(c.Run), c.BarrierTimeoutMs, int64(MaxBarrierTimeoutMs))
		}
		return CheckPathName("run", c.Run)
	case *Join:
		return checkJoin(c)
	}
	return nil
}

// checkJoin refuses a join whose fields could not name a reachable member:
// POST /v1/join adds the Raft voter before the join command is applied,
// and a voter at an address nothing answers costs the cluster its quorum
// (a single node asked to add one stayed a candidate for good).
func checkJoin(c *Join) error {
	if err := CheckPathName("member", c.ID); err != nil {
		return err
	}
	if !utf8.ValidString(c.ID) || len(c.ID) > 256 {
		return errcode.New(errcode.BadInput, "member ID %q is not UTF-8 of at most 256 bytes", truncate(c.ID))
	}
	for _, a := range []struct{ name, addr string }{{"raftAddr", c.RaftAddr}, {"httpAddr", c.HTTPAddr}} {
		host, port, err := net.SplitHostPort(a.addr)
		if err == nil && host == "" {
			err = errors.New("no host")
		}
		if err == nil {
			var p uint64
			if p, err = strconv.ParseUint(port, 10, 16); err == nil && p == 0 {
				err = errors.New("port 0")
			}
		}
		if err != nil || !utf8.ValidString(a.addr) || len(a.addr) > 256 {
			return errcode.New(errcode.BadInput, "join of %s: %s %q is not host:port (%v)", truncate(c.ID), a.name, truncate(a.addr), err)
		}
	}
	return nil
}

// CheckPathName refuses the names an HTTP path cannot carry as one
// segment: empty, "." and "..", which path cleaning removes, so an alias
// or run of that name could be created but never read back.
func CheckPathName(kind, name string) error {
	if !addressable(name) {
		return errcode.New(errcode.BadInput, "%s name %q cannot be addressed", kind, name)
	}
	return nil
}

func addressable(name string) bool { return name != "" && name != "." && name != ".." }

// notAppended reports whether err, from a raft future of a command or a
// configuration change, means raft never appended the entry: this node
// leads no more, a leadership transfer is in progress, or the leader's
// loop took nothing within the timeout. The change did not happen and
// retrying it (on the leader) is safe: NOT_LEADER. Any other error may
// come after the entry was appended: INDETERMINATE.
func notAppended(err error) bool {
	return errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipTransferInProgress) || errors.Is(err, raft.ErrEnqueueTimeout)
}

func (n *Node) apply(c Command, b []byte) (*Result, error) {
	f := n.raft.Apply(b, n.cfg.ApplyTimeout)
	if err := f.Error(); err != nil {
		switch {
		case notAppended(err):
			return nil, errcode.Wrap(errcode.NotLeader, err, "%s not applied", commandType(c))
		default:
			n.log.Warn("command outcome unknown", "type", commandType(c), "code", errcode.Indeterminate, "err", err)
			return nil, errcode.Wrap(errcode.Indeterminate, err, "%s may or may not have been applied; retrying it is safe", commandType(c))
		}
	}
	res, ok := f.Response().(*Result)
	if !ok {
		return nil, errcode.New(errcode.Internal, "apply returned %T", f.Response())
	}
	if h := (*HaltError)(nil); errors.As(res.Err, &h) {
		// Committed, so the other members apply it, but this FSM halted
		// at or before it and knows no result: not a rejection.
		n.log.Warn("command committed after this member halted; outcome unknown here", "type", commandType(c), "code", errcode.Indeterminate, "index", f.Index(), "haltIndex", h.Index)
		return nil, errcode.Wrap(errcode.Indeterminate, h, "%s committed at entry %d after this member halted at entry %d: the other members apply it; retrying it is safe", commandType(c), f.Index(), h.Index)
	}
	if res.Err != nil {
		n.log.Info("command rejected", "type", commandType(c), "code", errcode.Of(res.Err), "index", f.Index())
	}
	return res, res.Err
}

// ReadConsistent calls fn with the state after confirming, with a quorum,
// that this node is still the leader and (once per term) that it has
// applied everything committed before its term: a linearizable read.
func (n *Node) ReadConsistent(fn func(*State)) error {
	return n.readConsistentAt(func(s *State, _ uint64) { fn(s) })
}

// readConsistentAt is ReadConsistent that also passes fn the log index of
// the last command the state reflects (FSM.readAt).
func (n *Node) readConsistentAt(fn func(s *State, index uint64)) error {
	if n.raft.State() != raft.Leader {
		return ErrNotLeader
	}
	if err := n.raft.VerifyLeader().Error(); err != nil {
		return errcode.Wrap(errcode.NotLeader, err, "verify leadership")
	}
	if err := n.caughtUp(); err != nil {
		return err
	}
	n.fsm.readAt(fn)
	if h := n.Halted(); h != nil {
		// The state stopped before a committed entry (Raft may still
		// lead until watchHalt shuts it down): answering from it would
		// be a stale read. An FSM that halts only after the read had
		// applied every entry the read waited for.
		return errcode.Wrap(errcode.NotLeader, h, "node %s halted at entry %d; read from another member", n.cfg.ID, h.Index)
	}
	return nil
}

// caughtUp returns once this leader's FSM applied every entry committed
// before its term (a barrier, once per term). A leader elected a moment
// ago may not have: a restarted member applies the entries after its
// snapshot only once it learns they are committed, and a slow disk lags.
// What the leader decides on its own state (a read, the version checks
// of a join and of a fence advance) waits for it; its own later commands
// are applied before their Apply returns.
func (n *Node) caughtUp() error {
	term := n.raft.CurrentTerm()
	if n.barrierTerm.Load() == term {
		return nil
	}
	if err := n.raft.Barrier(n.cfg.ApplyTimeout).Error(); err != nil {
		if h := n.Halted(); h != nil {
			// The halt shut Raft down under the barrier: say so, as a
			// read after it does.
			return errcode.Wrap(errcode.NotLeader, h, "node %s halted at entry %d; read from another member", n.cfg.ID, h.Index)
		}
		return errcode.Wrap(errcode.NotLeader, err, "barrier")
	}
	n.barrierTerm.Store(term)
	return nil
}

// leaderHTTP returns the leader's HTTP address as recorded by join
// commands, or "" if it is unknown.
func (n *Node) leaderHTTP() string {
	_, id := n.raft.LeaderWithID()
	if id == "" {
		return ""
	}
	if string(id) == n.cfg.ID {
		return n.HTTPAddr()
	}
	var addr string
	n.fsm.Read(func(s *State) {
		if ni := s.Nodes[string(id)]; ni != nil {
			addr = ni.HTTPAddr
		}
	})
	return addr
}

// leaderLoop runs the leader's housekeeping: it records this node's
// addresses in the state, fails runs whose barrier deadline passed,
// prunes (Config.PruneOlderThan), and starts a raise of the cluster
// version in the background (raiseInBackground), which no member's
// answer holds the loop up for. On every member it deletes the per-release
// metric series of releases no run is on any more (metrics.forget). The deadline and age decisions
// themselves happen in Apply, from the timestamp the command carries. On
// a follower it asks the leader to record this node's addresses when its
// record is missing or stale (askRecord).
func (n *Node) leaderLoop() {
	t := time.NewTicker(n.cfg.SweepInterval)
	defer t.Stop()
	var lastPrune time.Time   // zero: prune soon after becoming leader
	var lastVersion time.Time // zero: ask the members soon too
	var lastRecord time.Time  // a follower's record request, likewise
	for {
		select {
		case <-n.stop:
			return
		case <-t.C:
		}
		n.forgetSeries()
		if !n.IsLeader() {
			lastPrune, lastVersion = time.Time{}, time.Time{}
			if time.Since(lastRecord) >= n.cfg.versionInterval {
				lastRecord = time.Now()
				n.askRecord()
			}
			continue
		}
		if n.ClusterVersion() < n.BuildVersion() && time.Since(lastVersion) >= n.cfg.versionInterval {
			lastVersion = time.Now()
			n.raiseInBackground()
		}
		if n.cfg.PruneOlderThan > 0 && time.Since(lastPrune) >= n.cfg.PruneInterval {
			lastPrune = time.Now()
			res, err := n.Apply(&Prune{OlderThanMs: n.cfg.PruneOlderThan.Milliseconds()})
			if err == nil && res.Err != nil {
				err = res.Err
			}
			if err != nil {
				n.log.Warn("prune", "code", errcode.Of(err), "err", err)
			} else if r, ok := res.Value.(PruneResult); ok && len(r.Runs)+len(r.Permits)+len(r.Releases) > 0 {
				n.log.Info("pruned", "runs", len(r.Runs), "permits", len(r.Permits), "releases", len(r.Releases))
			}
		}
		var overdue []string
		now := time.Now().UnixMilli()
		n.fsm.Read(func(s *State) {
			for _, id := range sortedKeys(s.Runs) {
				if r := s.Runs[id]; r.State == RunWaiting && now > r.Deadline {
					overdue = append(overdue, id)
				}
			}
		})
		if err := n.recordSelf(); err != nil {
			n.log.Warn("record leader address", "code", errcode.Of(err), "err", err)
		}
		for _, id := range overdue {
			if _, err := n.Apply(&CheckBarrier{Run: id}); err != nil && errcode.Of(err) != errcode.BarrierTimeout {
				n.log.Warn("check barrier", "run", id, "code", errcode.Of(err), "err", err)
			} else if err != nil {
				n.log.Warn("run failed at barrier deadline", "run", id, "code", errcode.BarrierTimeout)
			}
		}
	}
}

// forgetSeries deletes the per-release series of releases no run is on
// (metrics.forget), from the runs of the state the FSM applied.
func (n *Node) forgetSeries() {
	// The count under the state's lock: the one the state reflects.
	n.fsm.Read(func(s *State) { n.met.forget(s, n.fsm.runsDropped) })
}

// recordSelf records this leader's addresses in the state (a join
// command) unless they are there: followers forward to the HTTP address,
// and a leader asks a member for its version there.
func (n *Node) recordSelf() error {
	recorded := false
	n.fsm.Read(func(s *State) {
		self := s.Nodes[n.cfg.ID]
		recorded = self != nil && self.HTTPAddr == n.HTTPAddr() && self.RaftAddr == n.RaftAddr()
	})
	if recorded {
		return nil
	}
	_, err := n.Apply(&Join{ID: n.cfg.ID, RaftAddr: n.RaftAddr(), HTTPAddr: n.HTTPAddr()})
	return err
}

// restoreProbeTimeout bounds checkRestoreBeside.
const restoreProbeTimeout = 3 * time.Second

// checkRestoreBeside refuses to found a cluster on a backup at a Raft
// address that a member of the backup's cluster, still running, has in
// its configuration (USAGE, before anything is created). hashicorp/raft
// takes entries from whichever leader sends them, and the old cluster's
// leader, replicating to every address of its configuration, made the
// restored node its follower within a heartbeat: it took the old log and
// configuration, and served as a member of the old cluster while gate
// serve said it had founded a new one (a write it acknowledged before
// then would have been cut from its log). The members asked are those
// the backup recorded (old); one that does not answer /v1/status within
// restoreProbeTimeout is taken for gone.
func (n *Node) checkRestoreBeside(ctx context.Context, old map[string]*NodeInfo) error {
	self := n.cfg.RaftAddr
	if n.cfg.RaftAdvertise != "" {
		self = n.cfg.RaftAdvertise
	}
	a, err := net.ResolveTCPAddr("tcp", self)
	if err != nil || a.Port == 0 || a.IP == nil || a.IP.IsUnspecified() {
		// A port the kernel picks is in no configuration yet; an
		// address that does not resolve is refused when bound.
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, restoreProbeTimeout)
	defer cancel()
	type answer struct {
		member, httpAddr string
		st               *Status
	}
	answers := make(chan answer, len(old))
	for _, id := range sortedKeys(old) {
		go func(ni *NodeInfo) {
			c := n.memberClient(ni.HTTPAddr)
			defer c.Close()
			c.RetryFor = -1
			st, err := c.Status(ctx)
			if err != nil {
				st = nil
			}
			answers <- answer{ni.ID, ni.HTTPAddr, st}
		}(old[id])
	}
	var refusals []string
	for range old {
		ans := <-answers
		if ans.st == nil {
			continue
		}
		for _, v := range ans.st.Voters {
			if va, err := net.ResolveTCPAddr("tcp", v.RaftAddr); err == nil && va.String() == a.String() {
				refusals = append(refusals, fmt.Sprintf("member %s (at %s) has %s in its configuration as %s", truncate(ans.st.ID), truncate(ans.httpAddr), a, truncate(v.ID)))
				break
			}
		}
	}
	if len(refusals) == 0 {
		return nil
	}
	slices.Sort(refusals)
	return errcode.New(errcode.Usage, "gate backup: the cluster it was taken from still runs, and its leader would take this node over, replacing the restored state with its own: %s; to replace a member of that cluster, start it with --join and its --id instead of --restore; to found a new cluster on the backup, stop the old members first, or give this node a Raft address they do not have",
		strings.Join(refusals, "; "))
}

// seedSnapshot writes s as the snapshot a new single-node cluster of id
// starts from, at index 1 of term 1 with a configuration of id alone: what
// BootstrapCluster does with a log entry, with a state instead of an empty
// one. Raft restores it into the FSM when it starts.
func seedSnapshot(snaps raft.SnapshotStore, trans raft.Transport, id raft.ServerID, s *State) error {
	b, err := EncodeState(s)
	if err != nil {
		return err
	}
	conf := raft.Configuration{Servers: []raft.Server{{Suffrage: raft.Voter, ID: id, Address: trans.LocalAddr()}}}
	sink, err := snaps.Create(raft.SnapshotVersionMax, 1, 1, conf, 1, trans)
	if err != nil {
		return errcode.Wrap(errcode.IO, err, "create the restored snapshot")
	}
	if _, err := sink.Write(b); err != nil {
		sink.Cancel()
		return errcode.Wrap(errcode.IO, err, "write the restored snapshot")
	}
	if err := sink.Close(); err != nil {
		return errcode.Wrap(errcode.IO, err, "write the restored snapshot")
	}
	return nil
}
