package raftgate

import (
	"bytes"
	"encoding/json"

	"github.com/shardproof/shardproof/evidence"
	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
)

// Command types: the "type" field of a command envelope.
const (
	CmdRegister        = "register"
	CmdRecheck         = "recheck"
	CmdPublish         = "publish"
	CmdRollback        = "rollback"
	CmdAdvanceFence    = "advanceFence"
	CmdCreateRun       = "createRun"
	CmdAttest          = "attest"
	CmdCheckBarrier    = "checkBarrier"
	CmdReassign        = "reassign"
	CmdAdmitCheckpoint = "admitCheckpoint"
	CmdCancelRun       = "cancelRun"
	CmdJoin            = "join"
	CmdPrune           = "prune"
	// CmdSetClusterVersion is command-schema version 1: only a leader
	// proposes it, once every member reports a build that applies it.
	CmdSetClusterVersion = "setClusterVersion"
)

// MaxCommandSize caps one encoded command (a register of a release with
// ~200,000 shards fits).
const MaxCommandSize = 32 << 20

// Command is one gate command. Every implementation embeds Header.
type Command interface {
	header() *Header
}

// Header is the part common to every command envelope.
type Header struct {
	Type string `json:"type"`
	// Now is the proposing leader's clock in unix milliseconds. Apply uses
	// it for every time-based decision and never reads a clock itself.
	Now int64 `json:"now"`
}

func (h *Header) header() *Header { return h }

// ReportSummary is what the gate needs from a verification report.
type ReportSummary struct {
	Digest             manifest.Digest `json:"digest"`
	Verdict            string          `json:"verdict"`
	DatasetSnapshot    manifest.Digest `json:"datasetSnapshot"`
	TombstoneWatermark uint64          `json:"tombstoneWatermark"`
	BenchmarkFence     uint64          `json:"benchmarkFence"`
	TombstoneHits      int64           `json:"tombstoneHits"`
	BenchmarkHits      int64           `json:"benchmarkHits"`
}

// Register records a release (STAGED when Report is nil) or a new
// verification report of it.
type Register struct {
	Header
	Root   manifest.Digest   `json:"root"`
	Shards []manifest.Digest `json:"shards"`
	Report *ReportSummary    `json:"report,omitempty"`
	// Signatures are verifiers' signatures of the report's evidence
	// (Evidence): a gate given verifier keys (Config.VerifierKeys)
	// admits a register with a report only with one by a key it trusts.
	// The member that receives the request checks them, and the leader
	// before it proposes; they are never logged (Node.Apply drops them).
	Signatures []evidence.Signature `json:"signatures,omitempty"`
	// VerifiedBy are the IDs (evidence.KeyID) of the trusted keys whose
	// signatures of the report's evidence the leader checked, sorted:
	// the leader sets them in the command it logs, from its own check,
	// once the cluster version is versionSigners (command-schema version
	// 7), and the state records them with the report
	// (Release.VerifiedBy). A client never sends them: a request that
	// carries them is BAD_INPUT (checkProposal).
	VerifiedBy []string `json:"verifiedBy,omitempty"`
}

// Evidence is what a verifier's signature of c's report covers; nil when
// c carries no report.
func (c *Register) Evidence() *evidence.Report {
	if c.Report == nil {
		return nil
	}
	r := c.Report
	return &evidence.Report{
		Root: c.Root, Shards: c.Shards, Digest: r.Digest, Verdict: r.Verdict, DatasetSnapshot: r.DatasetSnapshot,
		TombstoneWatermark: r.TombstoneWatermark, BenchmarkFence: r.BenchmarkFence,
		TombstoneHits: r.TombstoneHits, BenchmarkHits: r.BenchmarkHits,
	}
}

// RecheckCmd records a fence recheck: the release was checked against the
// fence Kind at Value and Hits items were found.
type RecheckCmd struct {
	Header
	Root   manifest.Digest `json:"root"`
	Kind   string          `json:"kind"`
	Value  uint64          `json:"value"`
	Report manifest.Digest `json:"report"`
	Hits   int64           `json:"hits"`
	// Signatures are verifiers' signatures of Evidence, as Register's.
	Signatures []evidence.Signature `json:"signatures,omitempty"`
	// VerifiedBy are the trusted keys that signed Evidence, as
	// Register's; the state records them with the recheck
	// (Recheck.VerifiedBy).
	VerifiedBy []string `json:"verifiedBy,omitempty"`
}

// Evidence is what a verifier's signature of c covers.
func (c *RecheckCmd) Evidence() *evidence.Recheck {
	return &evidence.Recheck{Root: c.Root, Kind: c.Kind, Value: c.Value, Report: c.Report, Hits: c.Hits}
}

// Publish moves Alias from ExpectedGeneration to ExpectedGeneration+1
// pointing at Root. Retain sets the rollback window of a new alias.
type Publish struct {
	Header
	Alias              string          `json:"alias"`
	Root               manifest.Digest `json:"root"`
	ExpectedGeneration uint64          `json:"expectedGeneration"`
	Retain             int             `json:"retain,omitempty"`
}

// Rollback moves Alias to a new generation pointing at a retained
// previous Root.
type Rollback struct {
	Header
	Alias              string          `json:"alias"`
	Root               manifest.Digest `json:"root"`
	ExpectedGeneration uint64          `json:"expectedGeneration"`
}

// AdvanceFence raises the tombstone watermark or benchmark fence.
type AdvanceFence struct {
	Header
	Kind  string `json:"kind"`
	Value uint64 `json:"value"`
	// SpareChecked keeps open, re-bound to its release's watermarks, a
	// permit whose release the gate already holds checked at or above
	// the new fences with no hits (a recheck or report recorded before
	// the advance), where the permit's own bound would close it. The
	// proposing node sets it on every advance once the cluster version
	// is 1 (see CommandVersion); entries written before the field lack
	// it and replay as they did.
	SpareChecked bool `json:"spareChecked,omitempty"`
	// Log is the prefix digest at Value (manifest.FenceLog.PrefixDigest)
	// of the tombstone log or benchmark registry the fence is advanced
	// with; the gate keeps it beside the fence (Fences.TombstoneLog,
	// BenchmarkLog). Zero: none, and an advance to a higher value then
	// leaves the fence without one. Command-schema version 4: a node
	// proposes it only once the cluster version is 4 (CLUSTER_VERSION
	// before).
	Log manifest.Digest `json:"log,omitzero"`
}

// CreateRun pins a run to the alias's current root. Assignment, when
// non-nil, is rank → shard indices; nil means round-robin (shard i goes to
// rank i % WorldSize).
type CreateRun struct {
	Header
	Run              string  `json:"run"`
	Alias            string  `json:"alias"`
	WorldSize        int     `json:"worldSize"`
	Assignment       [][]int `json:"assignment,omitempty"`
	BarrierTimeoutMs int64   `json:"barrierTimeoutMs,omitempty"`
}

// Attest is one rank's attestation.
type Attest struct {
	Header
	Run    string            `json:"run"`
	Rank   int               `json:"rank"`
	Root   manifest.Digest   `json:"root"`
	Shards []manifest.Digest `json:"shards"`
	// Epoch, when set, is the assignment epoch the worker verified against.
	// A reassignment since then makes the attestation STALE_EPOCH, which
	// changes nothing, instead of failing the whole run with
	// SHARD_NOT_ASSIGNED for shards that were the rank's a moment ago.
	Epoch *uint64 `json:"epoch,omitempty"`
}

// CheckBarrier fails the run with BARRIER_TIMEOUT if its barrier is still
// closed after its deadline.
type CheckBarrier struct {
	Header
	Run string `json:"run"`
}

// Reassign changes a run's world size and assignment. Reset lists ranks
// that must attest again even if their assignment did not change
// (recovery of a replaced worker). ExpectedEpoch, if set, makes it a
// compare-and-set on the run's epoch, and so safe to retry: the same
// reassignment sent again once it made epoch ExpectedEpoch+1 returns the
// run unchanged instead of starting another epoch and resetting the
// ranks again.
type Reassign struct {
	Header
	Run           string  `json:"run"`
	WorldSize     int     `json:"worldSize"`
	Assignment    [][]int `json:"assignment,omitempty"`
	Reset         []int   `json:"reset,omitempty"`
	ExpectedEpoch *uint64 `json:"expectedEpoch,omitempty"`
}

// AdmitCheckpoint admits a checkpoint at Step of Root.
type AdmitCheckpoint struct {
	Header
	Run  string          `json:"run"`
	Step int64           `json:"step"`
	Root manifest.Digest `json:"root"`
}

// CancelRun cancels a run and releases its permit.
type CancelRun struct {
	Header
	Run    string `json:"run"`
	Reason string `json:"reason,omitempty"`
}

// Prune drops what a long-lived gate no longer needs: runs that ended
// (FAILED or CANCELLED) more than OlderThanMs before the command, the
// closed permits nothing names any more, and the shard lists
// of releases no alias and no remaining run can reach (RETIRED, or INVALID
// outside every rollback window). Release records and alias histories
// stay.
type Prune struct {
	Header
	OlderThanMs int64 `json:"olderThanMs"`
}

// Join records a node's addresses.
type Join struct {
	Header
	ID       string `json:"id"`
	RaftAddr string `json:"raftAddr"`
	HTTPAddr string `json:"httpAddr"`
}

// SetClusterVersion raises the cluster's command-schema version (see
// CommandVersion) to Version; a lower or equal Version changes nothing.
// The leader proposes it once every server of its Raft configuration
// reports a build of at least Version, so no member meets a command or a
// state field it cannot apply. A member whose build is below Version
// halts at it (HaltError), saying so.
//
// ClusterID, in a raise to versionClusterID or above of a state that has
// no cluster identity yet, is the identity the state takes (the leader
// draws it); a state that has one keeps it.
type SetClusterVersion struct {
	Header
	Version   uint64 `json:"version"`
	ClusterID string `json:"clusterID,omitempty"`
}

// newCommand returns an empty command of the given type.
func newCommand(typ string) Command {
	switch typ {
	case CmdRegister:
		return &Register{}
	case CmdRecheck:
		return &RecheckCmd{}
	case CmdPublish:
		return &Publish{}
	case CmdRollback:
		return &Rollback{}
	case CmdAdvanceFence:
		return &AdvanceFence{}
	case CmdCreateRun:
		return &CreateRun{}
	case CmdAttest:
		return &Attest{}
	case CmdCheckBarrier:
		return &CheckBarrier{}
	case CmdReassign:
		return &Reassign{}
	case CmdAdmitCheckpoint:
		return &AdmitCheckpoint{}
	case CmdCancelRun:
		return &CancelRun{}
	case CmdJoin:
		return &Join{}
	case CmdPrune:
		return &Prune{}
	case CmdSetClusterVersion:
		return &SetClusterVersion{}
	}
	return nil
}

// DecodeCommand strictly decodes a command envelope by the manifests'
// rules (manifest.DecodeJSON): one JSON object of UTF-8 whose keys are
// exact, unrepeated field names, strict digests, and null for a list
// alone. An unknown type, or anything those rules refuse, is BAD_DOCUMENT;
// a command larger than MaxCommandSize is DOCUMENT_TOO_LARGE.
//
// The API decodes a request with it and Apply each log entry. Every entry
// a gate logs is a command a leader encoded with EncodeCommand: a
// json.Marshal of these types, whose pointers are omitted when nil, so
// null stands only for a nil list, strings are UTF-8 and no key repeats.
// What the rules refuse besides encoding/json (a key twice or in another
// case, a null string, number, boolean or object, bytes that are not
// UTF-8) no leader ever logged, and an old log replays as it did.
func DecodeCommand(b []byte) (Command, error) {
	if len(b) > MaxCommandSize {
		return nil, errcode.New(errcode.DocumentTooLarge, "command is %d bytes, cap %d", len(b), MaxCommandSize)
	}
	typ, ok := leadingType(b)
	if !ok {
		var h struct {
			Type string `json:"type"`
		}
		if err := json.Unmarshal(b, &h); err != nil {
			return nil, errcode.Wrap(errcode.BadDocument, err, "command envelope")
		}
		typ = h.Type
	}
	c := newCommand(typ)
	if c == nil {
		return nil, errcode.New(errcode.BadDocument, "unknown command type %q", truncate(typ))
	}
	if err := manifest.DecodeJSON(b, c, MaxCommandSize); err != nil {
		if errcode.Of(err) == errcode.Internal {
			// A command type the strict scan does not model: no
			// document of it decodes, whatever it holds.
			return nil, err
		}
		return nil, errcode.Wrap(errcode.BadDocument, err, "%s command", typ)
	}
	if c.header().Type != typ {
		// Not reached: the scan refuses a second "type".
		return nil, errcode.New(errcode.BadDocument, "%s command says type %q", typ, truncate(c.header().Type))
	}
	return c, nil
}

// leadingType returns the type of a command that names it first and
// without escapes, as EncodeCommand writes it, so the envelope is not
// parsed twice; ok is false for any other spelling.
func leadingType(b []byte) (typ string, ok bool) {
	const prefix = `{"type":"`
	if !bytes.HasPrefix(b, []byte(prefix)) {
		return "", false
	}
	rest := b[len(prefix):]
	end := bytes.IndexByte(rest, '"')
	if end < 0 || bytes.IndexByte(rest[:end], '\\') >= 0 {
		return "", false
	}
	return string(rest[:end]), true
}

// EncodeCommand encodes c with its type set.
func EncodeCommand(c Command) ([]byte, error) {
	c.header().Type = commandType(c)
	b, err := json.Marshal(c)
	if err != nil {
		return nil, errcode.Wrap(errcode.Internal, err, "encode command")
	}
	return b, nil
}

// commandType returns the envelope type of c.
func commandType(c Command) string {
	switch c.(type) {
	case *Register:
		return CmdRegister
	case *RecheckCmd:
		return CmdRecheck
	case *Publish:
		return CmdPublish
	case *Rollback:
		return CmdRollback
	case *AdvanceFence:
		return CmdAdvanceFence
	case *CreateRun:
		return CmdCreateRun
	case *Attest:
		return CmdAttest
	case *CheckBarrier:
		return CmdCheckBarrier
	case *Reassign:
		return CmdReassign
	case *AdmitCheckpoint:
		return CmdAdmitCheckpoint
	case *CancelRun:
		return CmdCancelRun
	case *Join:
		return CmdJoin
	case *Prune:
		return CmdPrune
	case *SetClusterVersion:
		return CmdSetClusterVersion
	}
	return ""
}

func truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// maxNameLen is the longest alias name or run ID the gate takes.
const maxNameLen = 253

// truncateName bounds a name a client asked for (an alias, a run ID, a
// release root, a permit ID) where an error names it: one the gate could
// hold is shown whole, so "no release" names the whole digest a client
// sent (71 bytes, which truncate cut to 64), and only a longer one is
// cut. truncate stays for other values, and for what the state keeps.
func truncateName(s string) string {
	if len(s) > maxNameLen {
		return s[:maxNameLen] + "…"
	}
	return s
}
