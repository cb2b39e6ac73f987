package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/raft"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/shardproof/shardproof/evidence"
	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/objstore"
	"github.com/shardproof/shardproof/publish"
	"github.com/shardproof/shardproof/raftgate"
)

// gate: the embedded Raft group and its client commands.
var gateCmd = &cobra.Command{
	Use:   "gate",
	Short: "Run or talk to the gate: aliases, fences, permits (linearizable, Raft)",
	Long: `Run or talk to the gate, the Raft group that holds aliases with
generations, the tombstone/benchmark fences, release states, permits and
training runs.

Client commands take --gate URL[,URL…] (default $SHARDPROOF_GATE or
` + raftgate.DefaultGateURL + `). Exit status: 0 done, 1 the release is
INVALID (register with an INVALID report, recheck with hits) or an input
file or value the gate checked is wrong (BAD_INPUT; what the CLI can
check itself is usage), 2 usage, a token the gate refuses
(UNAUTHENTICATED), or a --store whose credentials or bucket S3 refuses
(STORE_DENIED, NO_SUCH_BUCKET), 3 gate unreachable, every member named
halted (GATE_HALTED), or a request the cluster's command-schema version
does not allow until every member is upgraded (CLUSTER_VERSION; see
"gate status"), 4 the gate refused (the code says why), 5 outcome
unknown — retrying the same command is safe.`,
}

// gateClientFlags are shared by the gate and run client commands.
var gateClientFlags struct {
	url    string
	asJSON bool
	retry  time.Duration
}

// addGateClientFlags registers --gate and --json on a command tree.
func addGateClientFlags(f *pflag.FlagSet) {
	def := os.Getenv("SHARDPROOF_GATE")
	if def == "" {
		def = raftgate.DefaultGateURL
	}
	f.StringVar(&gateClientFlags.url, "gate", def, "gate URL(s), comma-separated (env SHARDPROOF_GATE)")
	f.BoolVar(&gateClientFlags.asJSON, "json", false, "print the result as JSON")
	f.DurationVar(&gateClientFlags.retry, "retry", 15*time.Second, "keep retrying an unreachable gate or a leader election this long (0: one attempt per gate URL)")
	addGateTokenFlag(f)
}

// gateTokenFile is --gate-token-file of every command that talks to a gate.
var gateTokenFile string

// addGateTokenFlag registers --gate-token-file.
func addGateTokenFlag(f *pflag.FlagSet) {
	f.StringVar(&gateTokenFile, "gate-token-file", os.Getenv("SHARDPROOF_GATE_TOKEN_FILE"), "file holding the gate's token, for a gate started with --token-file (env SHARDPROOF_GATE_TOKEN_FILE)")
	f.StringVar(&gateCAFile, "gate-ca", os.Getenv("SHARDPROOF_GATE_CA"), "PEM file of the CA that signed an https:// gate's certificate, instead of the system's roots (env SHARDPROOF_GATE_CA)")
}

// gateCAFile is --gate-ca of every command that talks to a gate.
var gateCAFile string

// newGateClient returns a client for a --gate value that sends
// --gate-token-file's token and verifies an https gate against --gate-ca.
func newGateClient(urls string) *raftgate.Client {
	c := raftgate.NewClient(urls)
	c.UseTokenFile(gateTokenFile)
	c.UseCAFile(gateCAFile)
	return c
}

// gateClient returns a client for --gate.
func gateClient() *raftgate.Client {
	c := newGateClient(gateClientFlags.url)
	c.RetryFor = gateClientFlags.retry
	if c.RetryFor <= 0 {
		c.RetryFor = -1 // one attempt per URL
	}
	return c
}

// printResult prints v as JSON with --json, or the human form.
func printResult(cmd *cobra.Command, v any, human func(w io.Writer)) error {
	w := cmd.OutOrStdout()
	if gateClientFlags.asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	human(w)
	return nil
}

// parseDigestArg parses a digest argument or flag with a USAGE code.
func parseDigestArg(cmd *cobra.Command, what, s string) (manifest.Digest, error) {
	if s == "" {
		return manifest.Digest{}, errcode.New(errcode.Usage, "%s: %s is required (sha256:<64 hex>)", cmd.CommandPath(), what)
	}
	d, err := parseDigestValue(s)
	if err != nil {
		return d, errcode.Wrap(errcode.Usage, err, "%s: %s", cmd.CommandPath(), what)
	}
	return d, nil
}

// checkAliasArg refuses, as USAGE before any request, an alias name the
// gate would refuse.
func checkAliasArg(cmd *cobra.Command, name string) error {
	err := raftgate.CheckAliasName(name)
	if err == nil {
		err = raftgate.CheckPathName("alias", name)
	}
	var e *errcode.Error
	if errors.As(err, &e) {
		return errcode.New(errcode.Usage, "%s: %s", cmd.CommandPath(), e.Msg)
	}
	return err
}

// parseDigestValue parses a digest given on the command line. The
// all-zero digest is well formed but names nothing, and shardproof's
// zero value means "not given": accepted, it would silently turn a flag
// off (verify --tombstones sha256:000… checked no fence).
func parseDigestValue(s string) (manifest.Digest, error) {
	d, err := manifest.ParseDigest(s)
	if err == nil && d.IsZero() {
		err = fmt.Errorf("%s names no document", s) // the caller gives the code
	}
	return d, err
}

// gateWrapStream decorates `gate serve`'s Raft links. Nil in the
// shipped binary; the chaos test's binary sets it to cut links between
// members on demand.
var gateWrapStream func(raft.StreamLayer) raft.StreamLayer

var gateServeFlags struct {
	data, id, raftAddr, httpAddr, join string
	raftAdvertise, httpAdvertise       string
	bootstrap, recover                 bool
	tokenFile, restore                 string
	verifierKeys                       string
	tlsCert, tlsKey, tlsCA             string
	autoPrune                          time.Duration
	heartbeat, election, lease         time.Duration
	writeTimeout                       time.Duration
}

var gateServeCmd = &cobra.Command{
	Use:   "serve --data DIR",
	Short: "Run a gate node (single node on loopback by default)",
	Long: `Run a gate node until interrupted.

The first start of a gate's first node takes --bootstrap: it founds a
single-node cluster of itself. Later starts recover from DIR and take
neither --bootstrap nor --join. To form a cluster, start the first node
with --bootstrap, then the others with --join HTTP-ADDR of a running member
and distinct --id, --raft-addr and --http-addr; restart them all without
either flag.

A DIR with no state and neither flag is refused (USAGE): it may be a member
whose directory was wiped, which must rejoin with --join, since founding a
second cluster under the same addresses would answer from an empty state
and acknowledge writes its cluster never sees. --bootstrap on a DIR whose
stored configuration has other members is refused too, so it never stays
in a restart command. A start that fails after it made DIR removes it
(and the parents it made), unless it had asked a member to add it: a DIR
that existed is never removed. A DIR whose join was never answered
(DIR/learner, no state) restarts only with --join: without it, or with
--bootstrap or --restore, it is refused (USAGE).

When a majority of the members is lost for good, the rest cannot elect a
leader or answer a read. --recover, once, on the member with the most
recent state makes it the only member of its cluster with every command it
has; wipe every other member's DIR and rejoin it with --join (restarted on
its old DIR it would form a rival majority). The Raft log and stable store
live in DIR/raft.db, snapshots in DIR/snapshots.

--bootstrap --restore FILE founds the new cluster on a backup written by
"gate backup" instead of an empty state (DIR must hold none): after every
member's directory is lost, or to move a gate to new machines. A FILE
that is no whole gate state ({}, null, truncated, a key twice, a null
value, bytes after its end) is BAD_DOCUMENT, and
one whose cluster version is above this build's CLUSTER_VERSION; nothing
is started. So is a FILE that is missing or a directory (USAGE), and a
restore at a Raft address that a still running member of the backup's
cluster has in its configuration (USAGE): its leader would take the
node over. A member whose directory was lost
rejoins its running cluster with --join.

Every cluster founded with --bootstrap has a cluster ID of its own (a
restore draws a new one, never the backup's; "gate status" prints it).
From cluster version 3 every Raft connection between members carries it,
and a member refuses one that carries another or none
(CLUSTER_ID_MISMATCH, logged once per peer): a member of the cluster a
backup was taken from, back later with a configuration naming the new
cluster's addresses, can neither vote nor append entries there. A member
keeps the ID in DIR/cluster-id; --recover keeps it.

To upgrade a cluster, restart one member at a time on its directory with
the new build; the leader raises the cluster's command-schema version
once every member reports a build of it ("gate status" shows both).
A build below the cluster's version is refused as a joiner
(CLUSTER_VERSION), and as a member halts or does not start (GATE_HALTED):
a halted member serves no client, which goes on to its next --gate URL.

--token-file FILE (or $SHARDPROOF_GATE_TOKEN_FILE) makes the gate require
a shared token: every API request but /healthz and /readyz must carry it
(clients take --gate-token-file, or the same variable), or is refused with
UNAUTHENTICATED; and Raft connections between members must prove that
both ends hold it. Every member needs the same token. The token
authenticates; it does not encrypt: without TLS, a member whose API other
hosts reach warns at start, and clients warn when they send it over plain
http to a host that is not loopback.

--verifier-keys FILE makes the gate require evidence a trusted verifier
signed: a register of a report (publish, gate register) and a recheck
(recheck, gate recheck) must carry a signature by one of FILE's ed25519
public keys (one "ed25519:<base64>" a line, as "shardproof keys generate"
writes it; # starts a comment) over the fields the gate records, or is
refused with EVIDENCE_UNSIGNED (none by a trusted key) or
EVIDENCE_SIGNATURE_INVALID (malformed, or a field changed since it was
signed), exit 4, HTTP 403, and nothing changes. Verifiers sign with
verify --sign-key (or --sign-key where the evidence is registered); the
signature is stored beside the report and sent by whoever registers it,
who needs the token but no key. The member that receives a request checks
it, before forwarding it to the leader, which checks it again: give every
member the same FILE ("gate status" lists the key IDs a member trusts, as
the start-up log does). Clients send signatures only to a member whose
status lists keys, or once more after one without keys answers
EVIDENCE_UNSIGNED from its leader, so a member on a build older than
signatures (which refuses a command carrying them, BAD_DOCUMENT) or
without keys never gets them: give members keys only once every member
runs this build. Signatures are not logged. From the cluster's
command-schema version 7 the leader logs, and so every member's state
records, the IDs of the trusted keys that signed each register of a
report and each recheck, from its own check ("gate release", "gate
history" and backups show them); below it, while a member runs an
older build, only its answer and its log line name them. A FILE that
lists no key or a line that is no key is USAGE, and the gate does not
start.

SIGHUP makes the gate read its --verifier-keys FILE again, to revoke a
key (or add one) without a restart: a good FILE replaces the keys at
once (a check already running finishes with the old set, none sees a
mix), "gate status" lists the new key IDs, and the log names the IDs
added and removed. A FILE that cannot be read, lists no key or has a
line that is no public key keeps the keys in effect, and the gate logs
why with the code (USAGE); a reload never leaves a gate requiring no
signature. A gate started without --verifier-keys gains no keys by
SIGHUP (it logs that it has no key file); restart it with the flag.
SIGHUP is caught from the start of gate serve, before it reads its
files: one sent while the gate starts (reads a --token-file that is a
pipe, waits for raft.db's lock, joins) reloads FILE once the gate is up.
Each member reads its own FILE: update every member's, then send each
one SIGHUP, and compare their "gate status".

--tls-cert, --tls-key and --tls-ca put the member on TLS: the API is
served over HTTPS (clients use https:// URLs, and --gate-ca or
$SHARDPROOF_GATE_CA when the CA is not in the system's roots), and Raft
connections between members are mutual TLS, each end's certificate
verified against --tls-ca. A member's certificate must name the host or
IP of its advertised HTTP address and the IP of its Raft address (always
an IP: a host name there is resolved at start); --join HOST:PORT is then
reached over HTTPS. With both, the token still guards the API.

--write-timeout (default 30s) is how long a response waits for its client
to take its next bytes: a client that stopped reading (a large /v1/state
to a process that hangs) is given up and its connection closed, counted in
shardproof_gate_responses_cut_total. It bounds no response as a whole: a
slow reader that keeps reading is not cut, nor a "wait" long-poll, which
writes nothing while it waits. "gate status" shows the value in effect.`,
	Args: exactArgs(0),
	RunE: func(cmd *cobra.Command, args []string) error {
		// SIGHUP reloads the verifier keys file (a daemon's convention).
		// Its default action ends the process, so it is caught first,
		// before the files below are read (a --token-file that is a
		// pipe, <(…), waits for its writer) and the node starts (binds,
		// opens raft.db, waits for its lock, joins); one that comes
		// meanwhile waits in hup and is done once the node is up.
		// SIGINT and SIGTERM are caught from main on, in cmd.Context().
		hup := make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		defer signal.Stop(hup)
		f := gateServeFlags
		var token []byte
		if f.tokenFile != "" {
			var err error
			if token, err = raftgate.LoadToken(f.tokenFile); err != nil {
				return err
			}
		}
		if f.data == "" {
			return errcode.New(errcode.Usage, "%s: --data DIR is required", cmd.CommandPath())
		}
		var trusted *evidence.Trusted
		if f.verifierKeys != "" {
			var err error
			if trusted, err = evidence.LoadTrusted(f.verifierKeys); err != nil {
				return err
			}
		}
		var tlsCfg *raftgate.TLSConfig
		if f.tlsCert != "" || f.tlsKey != "" || f.tlsCA != "" {
			if f.tlsCert == "" || f.tlsKey == "" || f.tlsCA == "" {
				return errcode.New(errcode.Usage, "%s: TLS takes --tls-cert, --tls-key and --tls-ca together", cmd.CommandPath())
			}
			var err error
			if tlsCfg, err = raftgate.LoadTLS(f.tlsCert, f.tlsKey, f.tlsCA); err != nil {
				return err
			}
		}
		var restore []byte
		if f.restore != "" {
			if !f.bootstrap {
				return errcode.New(errcode.Usage, "%s: --restore founds a new cluster on a backup and goes with --bootstrap", cmd.CommandPath())
			}
			var err error
			if restore, err = readBackup(f.restore); err != nil {
				return err
			}
		}
		if f.bootstrap && f.join != "" || f.recover && (f.bootstrap || f.join != "") {
			return errcode.New(errcode.Usage, "%s: --bootstrap, --join and --recover exclude each other", cmd.CommandPath())
		}
		if f.autoPrune < 0 {
			return errcode.New(errcode.Usage, "%s: --auto-prune %s is negative", cmd.CommandPath(), f.autoPrune)
		}
		if f.writeTimeout <= 0 {
			// raftgate.Config reads zero as its default: a flag that
			// said 0 would not mean what it says.
			return errcode.New(errcode.Usage, "%s: --write-timeout %s: want a positive duration (e.g. 30s)", cmd.CommandPath(), f.writeTimeout)
		}
		// hashicorp/raft's own rules (ValidateConfig), said before it starts.
		if min(f.heartbeat, f.election, f.lease) < 5*time.Millisecond || f.election < f.heartbeat || f.lease > f.heartbeat {
			return errcode.New(errcode.Usage, "%s: --raft-heartbeat %s, --raft-election %s, --raft-lease %s: each at least 5ms, election at least heartbeat, lease at most heartbeat",
				cmd.CommandPath(), f.heartbeat, f.election, f.lease)
		}
		logger := newLogger(cmd.ErrOrStderr(), logSettings.level)
		n := raftgate.NewNode(raftgate.Config{
			ID: f.id, DataDir: f.data, RaftAddr: f.raftAddr, HTTPAddr: f.httpAddr, Join: f.join, Bootstrap: f.bootstrap, Recover: f.recover,
			RaftAdvertise: f.raftAdvertise, HTTPAdvertise: f.httpAdvertise,
			Logger: logger, RaftLog: cmd.ErrOrStderr(), RaftLogJSON: logSettings.json, RaftLogLevel: logSettings.level,
			PruneOlderThan:   f.autoPrune,
			WriteTimeout:     f.writeTimeout,
			Timing:           raftgate.Timing{Heartbeat: f.heartbeat, Election: f.election, LeaderLease: f.lease},
			WrapStream:       gateWrapStream,
			Token:            token,
			Restore:          restore,
			TLS:              tlsCfg,
			VerifierKeys:     trusted,
			VerifierKeysFile: f.verifierKeys,
		})
		if err := n.Start(cmd.Context()); err != nil {
			return err
		}
		fmt.Fprintf(cmd.ErrOrStderr(), "gate node %s serving %s (raft %s)\n", f.id, n.URL(), n.RaftAddr())
		for {
			select {
			case <-cmd.Context().Done():
				return n.Shutdown()
			case <-hup:
				// It logs what it did, or why it kept the keys in effect.
				n.ReloadVerifierKeys()
			}
		}
	},
}

var gateStatusDigest bool

var gateStatusCmd = &cobra.Command{
	Use:   "status",
	Short: "Show a gate node's view: role, leader, indexes, fences",
	Long: `Show one gate node's own view (not forwarded to the leader): its role,
term and leader, its log indexes, the fences and the size of its state.

--digest adds the sha256 of the node's state and the log index of the last
command it reflects: members reporting the same index must report the same
digest, so comparing them checks that the replicas agree. The index is 0
until the node applies a command after start-up or a snapshot restore.

A member that met a committed command or a snapshot of the state its
build cannot decode (a newer build's) stops applying the log and leaves
the cluster: its status starts with HALTED and where (the log index, or
"a snapshot of the gate's state"), and the exit status is 3 (GATE_HALTED).
Upgrade it to the other members' build and restart it on its directory.

A node that gate remove took out of the cluster (its own Raft
configuration no longer lists it; a leader that removed itself shows
"Shutdown") says so first, REMOVED, and the exit status is 3 (NOT_LEADER,
what it answers every read and write). Stop it, or rejoin it with --join
on a wiped directory.

"command-schema version" is the highest version the node's build applies
and the cluster's version in its state. The leader raises the cluster
version once every member reports a build of it; until then, what a
newer version adds is refused (CLUSTER_VERSION) and the leader's status
lists each member's version. In a rolling upgrade, upgrade one member at
a time and check here that the cluster version rose after the last.

"cluster ID" (from cluster version 3) is the cluster's identity, which
Raft connections between members carry: members of one cluster print the
same.

"verifier keys" (a member started with --verifier-keys) are the IDs of
the keys whose signature it requires of a report or a recheck: every
member should print the same, or a command one member admits another
refuses.`,
	Args: exactArgs(0),
	RunE: func(cmd *cobra.Command, args []string) error {
		c := gateClient()
		defer c.Close()
		status := c.Status
		if gateStatusDigest {
			status = c.StatusDigest
		}
		st, err := status(cmd.Context())
		if err != nil {
			return err
		}
		err = printResult(cmd, st, func(w io.Writer) {
			if h := st.Halted; h != nil {
				fmt.Fprintf(w, "HALTED at %s: %s\n", haltedAt(h), h.Message)
			}
			if st.Removed() {
				fmt.Fprintf(w, "REMOVED: %s\n", removedMessage(st))
			}
			fmt.Fprintf(w, "node %s: %s, term %d, leader %s (%s)\n", st.ID, st.RaftState, st.Term, st.Leader, st.LeaderHTTP)
			fmt.Fprintf(w, "log: last %d, committed %d, applied %d\n", st.LastIndex, st.CommitIndex, st.AppliedIndex)
			if t := st.RaftTimeouts; t != nil {
				fmt.Fprintf(w, "raft timeouts: heartbeat %dms, election %dms, lease %dms\n", t.HeartbeatMs, t.ElectionMs, t.LeaderLeaseMs)
			}
			if st.WriteTimeoutMs > 0 {
				fmt.Fprintf(w, "write timeout: %s\n", time.Duration(st.WriteTimeoutMs)*time.Millisecond)
			}
			if st.StateDigest != nil {
				fmt.Fprintf(w, "state: %s at command index %d\n", st.StateDigest, st.StateIndex)
			}
			if st.CommandVersion == 0 {
				fmt.Fprintf(w, "command-schema version: build none (a build before the version handshake), cluster %d\n", st.ClusterVersion)
			} else {
				fmt.Fprintf(w, "command-schema version: build %d, cluster %d\n", st.CommandVersion, st.ClusterVersion)
			}
			if st.ClusterID != "" {
				fmt.Fprintf(w, "cluster ID: %s\n", st.ClusterID)
			}
			if len(st.VerifierKeys) > 0 {
				fmt.Fprintf(w, "verifier keys: %s\n", strings.Join(st.VerifierKeys, ", "))
			}
			if len(st.MemberVersions) > 0 {
				var ms []string
				for _, m := range st.MemberVersions {
					ms = append(ms, m.String())
				}
				fmt.Fprintf(w, "cluster version rises once every member reports %d: %s\n", st.CommandVersion, strings.Join(ms, "; "))
			}
			fmt.Fprintf(w, "fences: tombstone %d, benchmark %d\n", st.Fences.Tombstone, st.Fences.Benchmark)
			fmt.Fprintf(w, "%d aliases, %d releases, %d runs\n", st.Aliases, st.Releases, st.Runs)
			// Members are the node's Raft configuration, which decides
			// quorums; HTTP addresses come from their join records.
			httpOf := map[string]string{}
			for _, n := range st.Nodes {
				httpOf[n.ID] = n.HTTPAddr
			}
			voters := st.Voters
			if voters == nil {
				// A node from before /v1/status carried its
				// configuration: its join records.
				for _, n := range st.Nodes {
					voters = append(voters, &raftgate.Voter{ID: n.ID, RaftAddr: n.RaftAddr, Suffrage: "voter (join record)"})
				}
			}
			for _, v := range voters {
				h := httpOf[v.ID]
				if h == "" {
					h = "(not recorded yet)"
				}
				fmt.Fprintf(w, "member %s: http %s, raft %s, %s\n", v.ID, h, v.RaftAddr, suffrageText(v.Suffrage))
			}
			if l := st.Learner; l != nil {
				fmt.Fprintf(w, "learner: %s\n", learnerText(l))
			}
		})
		if err == nil && st.Halted != nil {
			return errcode.New(errcode.GateHalted, "gate member %s halted at %s and serves no client: upgrade it to the other members' build and restart it on its data directory", st.ID, haltedAt(st.Halted))
		}
		if err == nil && st.Removed() {
			// What it answers every read and write.
			return errcode.New(errcode.NotLeader, "%s", removedMessage(st))
		}
		return err
	},
}

// suffrageText is how gate status names a member's suffrage: a
// nonvoter is a learner the leader promotes once it caught up.
func suffrageText(s string) string {
	if s == "Nonvoter" {
		return "nonvoter (learner: catching up, no vote until the leader promotes it)"
	}
	return strings.ToLower(s)
}

// learnerText is a learner's own progress, as gate status prints it.
func learnerText(l *raftgate.LearnerStatus) string {
	switch {
	case l.Since == 0:
		return "joined on an empty directory; its join was not answered (restart it with --join); grants no vote"
	case l.NonvoterAt == 0:
		return fmt.Sprintf("catching up to the nonvoter entry at index %d; grants no vote until promoted", l.Since)
	}
	return fmt.Sprintf("caught up to its nonvoter entry (index %d); grants no vote until the leader promotes it", l.NonvoterAt)
}

var gateRemoveCmd = &cobra.Command{
	Use:   "remove ID",
	Short: "Remove a member from the gate cluster's Raft configuration",
	Long: `Remove member ID from the cluster's Raft configuration (on the leader).

Use it to shrink a cluster, and before replacing a dead member by a node
with another ID: the newcomer would otherwise be one voter more, and the
quorum one larger (a 3-node cluster that lost a member and gained a new one
without this has 4 voters and stops at the next loss). A replacement that
reuses the dead member's --id needs no remove: its --join (on an empty
--data) updates the address, and makes it a nonvoter until it caught up.
Stop the removed member's process (it no longer counts, and a restart of
it would not rejoin without --join). Removing a non-member or the last
member is BAD_INPUT and changes nothing; the leader may remove itself,
and steps down.

Exit status: 0 removed, 1 not a member or the last one (BAD_INPUT), 2
usage, 3 error, 5 indeterminate (run "gate status" to see the
configuration).`,
	Args: exactArgs(1),
	RunE: func(cmd *cobra.Command, args []string) error {
		c := gateClient()
		defer c.Close()
		if err := c.RemoveMember(cmd.Context(), args[0]); err != nil {
			return err
		}
		fmt.Fprintf(cmd.OutOrStdout(), "removed %s\n", args[0])
		return nil
	},
}

var gateBackupForce bool

// readBackup reads a gate backup file, bounded by the largest state a
// gate restores.
func readBackup(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, errcode.Wrap(errcode.Usage, err, "gate backup")
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.IsDir() {
		// Read, it failed IO, as if a disk were at fault.
		return nil, errcode.New(errcode.Usage, "gate backup: %s is a directory: give the FILE gate backup wrote", path)
	}
	b, err := io.ReadAll(io.LimitReader(f, raftgate.MaxStateSize+1))
	if err != nil {
		return nil, errcode.Wrap(errcode.IO, err, "read gate backup %s", path)
	}
	if len(b) > raftgate.MaxStateSize {
		return nil, errcode.New(errcode.DocumentTooLarge, "gate backup %s exceeds %d bytes", path, raftgate.MaxStateSize)
	}
	return b, nil
}

var gateBackupCmd = &cobra.Command{
	Use:   "backup FILE",
	Short: "Write the gate's whole state to FILE, to found a new gate on with serve --restore",
	Long: `Write the gate's whole state, read linearizably on the leader, to FILE:
the bytes of GET /v1/state, which are the Raft snapshot format (JSON). It
prints the state's sha256 and the log index of the last command the state
reflects, read on the leader with the bytes: "gate status --digest" on a
member at that command index shows the same sha256. (A gate of a build
that does not send the index leaves it unknown.)

A backup is the way back when every member's directory is lost, and the way
to move a gate to new machines: "gate serve --bootstrap --restore FILE
--data NEWDIR" founds a new single-node cluster on it (other members then
join it with --join). It keeps aliases with their generations and history,
releases, fences, permits and runs; it drops the old members' addresses.
Commands acknowledged after the backup are not in it.

FILE is written to a temporary file beside it, synced, and moved into
place; an existing FILE is refused unless --force.

Exit status: 0 written, 1 the answer is no whole gate state (BAD_DOCUMENT:
not a gate at --gate; nothing written), 2 usage (FILE exists), 3 error
(gate unreachable, I/O).`,
	Args: exactArgs(1),
	RunE: func(cmd *cobra.Command, args []string) error {
		path := args[0]
		if _, err := os.Lstat(path); err == nil && !gateBackupForce {
			return errcode.New(errcode.Usage, "%s exists: give another name, or --force to replace it", path)
		}
		c := gateClient()
		defer c.Close()
		b, index, indexKnown, err := c.StateBackup(cmd.Context())
		if err != nil {
			return err
		}
		// What the gate sent must found a gate: checked here, not on
		// the day it is needed.
		st, err := raftgate.DecodeBackup(b)
		if err != nil {
			return errcode.Wrap(errcode.Of(err), err, "the gate's state")
		}
		if err := writeFileAtomic(path, b, gateBackupForce); err != nil {
			return err
		}
		d := manifest.Sum(b)
		out := map[string]any{"file": path, "bytes": len(b), "stateDigest": d, "aliases": len(st.Aliases),
			"releases": len(st.Releases), "runs": len(st.Runs), "permits": len(st.Permits), "fences": st.Fences}
		at := "command index unknown (the gate does not send it: an older build)"
		if indexKnown {
			out["stateIndex"] = index
			at = fmt.Sprintf("at command index %d", index)
		}
		return printResult(cmd, out, func(w io.Writer) {
			fmt.Fprintf(w, "backup %s: %d bytes, state %s %s: %d aliases, %d releases, %d runs, %d permits, tombstone fence %d, benchmark fence %d\n",
				path, len(b), d, at, len(st.Aliases), len(st.Releases), len(st.Runs), len(st.Permits), st.Fences.Tombstone, st.Fences.Benchmark)
		})
	},
}

// writeFileAtomic writes b to path through a synced temporary file in the
// same directory, so path holds either nothing (or its old bytes) or all
// of b. Without replace an existing path is refused, also one created
// meanwhile.
func writeFileAtomic(path string, b []byte, replace bool) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return errcode.Wrap(errcode.IO, err, "write %s", path)
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	if _, err = f.Write(b); err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return errcode.Wrap(errcode.IO, err, "write %s", path)
	}
	if replace {
		err = os.Rename(tmp, path)
	} else if err = os.Link(tmp, path); errors.Is(err, fs.ErrExist) {
		return errcode.New(errcode.Usage, "%s exists: give another name, or --force to replace it", path)
	}
	if err != nil {
		return errcode.Wrap(errcode.IO, err, "write %s", path)
	}
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

var gateRegisterFlags struct {
	store, report, root string
}

var gateRegisterCmd = &cobra.Command{
	Use:   "register --store URL (--report DIGEST | --root DIGEST)",
	Short: "Register a release with its verification report (or stage it without one)",
	Long: `Register a release in the gate.

With --report, the report and the root manifest it names are read from the
store (digest-checked, strictly decoded) and the gate records the verdict,
the watermarks checked and the hit counts: a VERIFIED report moves the
release to VERIFIED (or renews its permits if it was checked at newer
fences), an INVALID one to INVALID. A VERIFIED report that is older
than what the gate records for the release (no watermark higher, one
lower) is refused (BAD_INPUT): it would bring nothing but leave the gate
naming a report that does not back its watermarks. A VERIFIED report
checked below the tombstoneWatermark or benchmarkFence the root manifest
claims is refused too (WATERMARK_UNCHECKED; verify no longer writes
one), and so is a report that checked the root against another snapshot
than the one its manifest binds (verify --snapshot; BAD_INPUT), whatever
its verdict. A VERIFIED report whose tombstone log or benchmark registry
is not the log the gate's fence of that kind was advanced with (its
prefix digest at the fence differs from the one the gate records, or the
report names none), where the report reaches that fence, is refused
(FENCE_LOG_MISMATCH, exit 4): it may have missed a sample the fence's log
erased. Where it does not reach a fence that the watermarks the gate
records for the release do, the gate's report or one of its rechecks at
or above the fence must have checked the fence's log (FENCE_LOG_MISMATCH
otherwise): registering would make the release satisfy the fences on
what the gate recorded before the fence named its log. An INVALID report
whose failures include bytes that fail their digests, sizes or versions
is refused with that code when the gate holds the release VERIFIED,
PUBLISHED or RETIRED, as publish refuses it: those bytes were proven
once, so the store's copy is what is bad, and the verdict would close
the permits of the root's aliases and runs for good. With only --root
the release is STAGED.

The signatures stored beside the report (verify --sign-key) are sent with
it; --sign-key signs it now too. A gate started with --verifier-keys
refuses a report no key it trusts signed (EVIDENCE_UNSIGNED, exit 4),
and names the trusted keys that signed one it takes ("verified by", and
"verifiedBy" with --json). From the cluster's command-schema version 7
its state records them with the report ("gate release ROOT" shows
them); below it, the answer and the leader's log are all that keep them.

Exit status: 0 registered, 1 the release is INVALID (recorded as such),
the report does not reach its claims or describes a damaged copy of a
release the gate holds proven (nothing recorded), 2 usage,
3 error, 4 rejected, 5 indeterminate.`,
	Args: exactArgs(0),
	RunE: func(cmd *cobra.Command, args []string) error {
		f := gateRegisterFlags
		if f.report == "" && f.root == "" {
			return errcode.New(errcode.Usage, "%s: give --report or --root", cmd.CommandPath())
		}
		key, err := signKey(cmd)
		if err != nil {
			return err
		}
		s, err := openStore(cmd, f.store)
		if err != nil {
			return err
		}
		ctx := cmd.Context()
		reg := &raftgate.Register{}
		var rep *manifest.Report
		if f.root != "" {
			if reg.Root, err = parseDigestArg(cmd, "--root", f.root); err != nil {
				return err
			}
		}
		if f.report != "" {
			rd, err := parseDigestArg(cmd, "--report", f.report)
			if err != nil {
				return err
			}
			b, _, err := objstore.ReadBlob(ctx, s, rd, manifest.MaxDocumentSize)
			if err != nil {
				return errcode.Wrap(errcode.Of(err), err, "report %s", rd)
			}
			if rep, err = manifest.DecodeReport(b); err != nil {
				return errcode.Wrap(errcode.Of(err), err, "report %s", rd)
			}
			if rep.Schema != manifest.ReportSchema {
				return errcode.New(errcode.BadDocument, "report %s: schema %q, want %s", rd, rep.Schema, manifest.ReportSchema)
			}
			if f.root != "" && rep.Root != reg.Root {
				return errcode.New(errcode.RootMismatch, "report %s verifies root %s, --root is %s", rd, rep.Root, reg.Root)
			}
			reg.Root = rep.Root
			reg.Report = &raftgate.ReportSummary{
				Digest: rd, Verdict: rep.Verdict, DatasetSnapshot: rep.DatasetSnapshot,
				TombstoneWatermark: rep.TombstoneWatermark, BenchmarkFence: rep.BenchmarkFence,
				TombstoneHits: rep.Counts.TombstoneHits, BenchmarkHits: rep.Counts.BenchmarkHits,
			}
		}
		b, _, err := objstore.ReadBlob(ctx, s, reg.Root, manifest.MaxDocumentSize)
		if err != nil {
			return errcode.Wrap(errcode.Of(err), err, "root manifest %s", reg.Root)
		}
		rel, err := manifest.DecodeRelease(b)
		if err != nil {
			return errcode.Wrap(errcode.Of(err), err, "root manifest %s", reg.Root)
		}
		for _, sh := range rel.Shards {
			reg.Shards = append(reg.Shards, sh.Digest)
		}
		if reg.Report != nil && reg.Report.DatasetSnapshot != rel.DatasetSnapshot {
			// verify --snapshot checks a release against another
			// snapshot: its verdict, either way, is not about the
			// release's membership, which is the snapshot it binds.
			return errcode.New(errcode.BadInput, "report %s checks root %s against snapshot %s, but the root manifest binds snapshot %s: it says nothing of the release's own membership (verify without --snapshot)",
				reg.Report.Digest, reg.Root, reg.Report.DatasetSnapshot, rel.DatasetSnapshot)
		}
		if reg.Report != nil && reg.Report.Verdict == manifest.Verified {
			// verify no longer writes such a report, but an older build
			// did, and a report is only a stored document.
			if err := rel.CheckWatermarks(reg.Report.TombstoneWatermark, reg.Report.BenchmarkFence); err != nil {
				return fmt.Errorf("report %s is VERIFIED below the watermarks root manifest %s claims, and cannot make it VERIFIED: %w", reg.Report.Digest, reg.Root, err)
			}
		}
		c := gateClient()
		defer c.Close()
		if reg.Report != nil {
			gr, err := c.Release(ctx, reg.Root)
			if err != nil && errcode.Of(err) != errcode.UnknownRelease {
				return err
			}
			if reg.Report.Verdict == manifest.Verified {
				// The logs the report checked must be the fences'
				// logs where it reaches the fences, and where only
				// the gate's watermarks do, what the gate records
				// must have checked them (publish.CheckEvidenceLogs).
				fences, ferr := c.Fences(ctx)
				if ferr != nil {
					return ferr
				}
				var known *raftgate.Release
				if err == nil {
					known = gr
				}
				if err := publish.CheckEvidenceLogs(ctx, s, rep, known, *fences); err != nil {
					return fmt.Errorf("report %s: %w; nothing registered", reg.Report.Digest, err)
				}
			}
			if err == nil {
				// The gate keeps the highest watermarks any VERIFIED
				// report or recheck showed but names the last report
				// registered: one checked below them would leave it
				// naming a report that does not back them.
				if err := publish.OlderReport(gr, reg.Report); err != nil {
					return err
				}
				// An INVALID verdict on this store's bytes of a root
				// the gate holds proven is about the copy, as publish
				// judges it.
				if err := publish.DamagedCopy(gr, rep, reg.Report.Digest); err != nil {
					return err
				}
			}
		}
		if err := publish.AttachRegisterSignatures(ctx, s, key, reg, slog.Default()); err != nil {
			return fmt.Errorf("%w; nothing registered", err)
		}
		res, err := c.Register(ctx, reg)
		if err != nil {
			return err
		}
		r := res.Release
		if err := printResult(cmd, res, func(w io.Writer) {
			fmt.Fprintf(w, "release %s %s (%d shards", r.Root, r.State, len(r.Shards))
			if !r.Report.IsZero() {
				fmt.Fprintf(w, ", report %s, tombstone %d, benchmark %d", r.Report, r.TombstoneWatermark, r.BenchmarkFence)
			}
			fmt.Fprintln(w, ")")
			if len(res.VerifiedBy) > 0 {
				fmt.Fprintf(w, "verified by %s\n", strings.Join(res.VerifiedBy, ", "))
			}
			if len(res.Reopened) > 0 {
				fmt.Fprintf(w, "renewed permits: %s\n", strings.Join(res.Reopened, ", "))
			}
		}); err != nil {
			return err
		}
		if r.State == raftgate.ReleaseInvalid {
			// Recorded, but the release can never be published: exit 1,
			// as verify does for an INVALID verdict.
			return &exitError{status: errcode.ExitInvalid}
		}
		return nil
	},
}

var gatePublishFlags struct {
	expect uint64
	retain int
}

func printPublish(cmd *cobra.Command, r *raftgate.PublishResult) error {
	return printResult(cmd, r, func(w io.Writer) {
		fmt.Fprintf(w, "%s generation %d → %s (%s, permit %s)\n", r.Alias, r.Generation, r.Root, r.Kind, r.Permit)
	})
}

var gatePublishCmd = &cobra.Command{
	Use:   "publish ALIAS ROOT --expect GENERATION",
	Short: "Compare-and-set ALIAS from GENERATION to GENERATION+1 pointing at ROOT",
	Long: `Compare-and-set ALIAS from --expect GENERATION to GENERATION+1 pointing
at ROOT. ROOT must be VERIFIED (or PUBLISHED), checked at or above the
current fences with zero hits. A new alias is created with --expect 0 and
keeps the roots of its last --retain generations, the current one
included: --retain N leaves N-1 earlier generations to roll back to.
Retrying the same command returns the original result, so after exit
status 5 (outcome unknown) simply run it again.`,
	Args: exactArgs(2),
	RunE: func(cmd *cobra.Command, args []string) error {
		if err := checkAliasArg(cmd, args[0]); err != nil {
			return err
		}
		if r := gatePublishFlags.retain; r < 0 || r > raftgate.MaxRetain {
			return errcode.New(errcode.Usage, "%s: --retain %d outside [1,%d] (0: the gate's default, %d)", cmd.CommandPath(), r, raftgate.MaxRetain, raftgate.DefaultRetain)
		}
		root, err := parseDigestArg(cmd, "ROOT", args[1])
		if err != nil {
			return err
		}
		c := gateClient()
		defer c.Close()
		r, err := c.Publish(cmd.Context(), args[0], root, gatePublishFlags.expect, gatePublishFlags.retain)
		if err != nil {
			return err
		}
		return printPublish(cmd, r)
	},
}

var gateRollbackFlags struct{ expect uint64 }

var gateRollbackCmd = &cobra.Command{
	Use:   "rollback ALIAS ROOT --expect GENERATION",
	Short: "Point ALIAS at a retained previous ROOT under a new generation",
	Long: `Point ALIAS at ROOT again under a new generation (GENERATION+1), as a
compare-and-set on --expect GENERATION, the alias's current one. ROOT must
be inside the alias's rollback window (see "gate history") and still
satisfy both current fences; a rollback issues a new permit, as a publish
does.

Exit status: 0 rolled back, 2 usage, 3 gate unreachable, 4 refused
(GENERATION_CONFLICT: the alias moved; ROLLBACK_INELIGIBLE: ROOT is not
retained or fails a fence; UNKNOWN_ALIAS), 5 indeterminate: sending the
same command again is safe.`,
	Args: exactArgs(2),
	RunE: func(cmd *cobra.Command, args []string) error {
		if err := checkAliasArg(cmd, args[0]); err != nil {
			return err
		}
		if !cmd.Flags().Changed("expect") {
			return errcode.New(errcode.Usage, "%s: --expect GENERATION is required: the alias's current generation", cmd.CommandPath())
		}
		root, err := parseDigestArg(cmd, "ROOT", args[1])
		if err != nil {
			return err
		}
		c := gateClient()
		defer c.Close()
		r, err := c.Rollback(cmd.Context(), args[0], root, gateRollbackFlags.expect)
		if err != nil {
			return err
		}
		return printPublish(cmd, r)
	},
}

var gateFenceCmd = &cobra.Command{
	Use:   "fence [tombstone|benchmark VALUE]",
	Short: "Show the fences, or advance one (closes permits bound below it)",
	Long: `With no arguments, print the gate's tombstone and benchmark fences, each
with the prefix digest of the log it was advanced with ("gate fence
advance" records it), or "no log recorded".
With KIND VALUE, advance that fence to VALUE: every open permit bound
below it is closed, but one whose release the gate already holds checked
at or above both new fences with no hits (a recheck made before the
advance) is kept open; the answer lists both, and the 'recheck --closed'
to run whenever roots are left behind the fences (closed permits', or
earlier generations' of a rollback window, which lose no permit), with
the documents of the fences those roots are behind and the --gate flags
given here.
Keeping one open takes the gate cluster's command-schema version 1:
during a rolling upgrade from a build before it, such an advance is
refused (CLUSTER_VERSION, exit 3) and changes nothing. An advance this
way records no log, so it moves only a fence that has none (one advanced
before command-schema version 4, or only this way): publish, gate register
and recheck then cannot check that the logs reports checked are the
fence's log. A fence that names its log is advanced only by "gate fence
advance", which takes VALUE from a stored tombstone log or benchmark
registry that extends the fence's log and records it; KIND VALUE for it is
FENCE_LOG_MISMATCH (exit 4) and changes nothing, from the cluster's
command-schema version 5 (below it, during a rolling upgrade from a build
of version 4, it moves the fence and drops its log, as those builds do).`,
	Args: func(cmd *cobra.Command, args []string) error {
		if len(args) != 0 && len(args) != 2 {
			return errcode.New(errcode.Usage, "%s: give no arguments or KIND VALUE", cmd.CommandPath())
		}
		return nil
	},
	RunE: func(cmd *cobra.Command, args []string) error {
		c := gateClient()
		defer c.Close()
		if len(args) == 0 {
			f, err := c.Fences(cmd.Context())
			if err != nil {
				return err
			}
			return printResult(cmd, f, func(w io.Writer) {
				for _, k := range []struct {
					kind  string
					value uint64
					log   manifest.Digest
				}{{raftgate.FenceTombstone, f.Tombstone, f.TombstoneLog}, {raftgate.FenceBenchmark, f.Benchmark, f.BenchmarkLog}} {
					fmt.Fprintf(w, "%s %d", k.kind, k.value)
					switch {
					case !k.log.IsZero():
						fmt.Fprintf(w, " log prefix %s", k.log)
					case k.value > 0:
						fmt.Fprint(w, " (no log recorded: no log can be checked against it)")
					}
					fmt.Fprintln(w)
				}
			})
		}
		if args[0] != raftgate.FenceTombstone && args[0] != raftgate.FenceBenchmark {
			return errcode.New(errcode.Usage, "%s: fence kind %q: want %s or %s", cmd.CommandPath(), args[0], raftgate.FenceTombstone, raftgate.FenceBenchmark)
		}
		v, err := strconv.ParseUint(args[1], 10, 64)
		if err != nil {
			return errcode.Wrap(errcode.Usage, err, "%s: VALUE", cmd.CommandPath())
		}
		r, err := c.AdvanceFence(cmd.Context(), args[0], v)
		if err != nil {
			return err
		}
		return printResult(cmd, r, func(w io.Writer) {
			fmt.Fprintf(w, "fences: tombstone %d, benchmark %d; ", r.Fences.Tombstone, r.Fences.Benchmark)
			printPermitsMoved(w, r)
			printRecheckHint(cmd, c, args[0], v, "")
		})
	},
}

// removedMessage says that the node of st is no longer a member, and
// what to do.
func removedMessage(st *raftgate.Status) string {
	ids := make([]string, len(st.Voters))
	for i, v := range st.Voters {
		ids[i] = v.ID
	}
	return fmt.Sprintf("node %s is no longer a member of the gate cluster: its Raft configuration lists %s, not itself (gate remove took it out): stop it, or to bring it back start it with --join on a wiped directory",
		st.ID, strings.Join(ids, ", "))
}

// haltedAt says where a halted member stopped.
func haltedAt(h *raftgate.Halted) string {
	if h.Snapshot {
		return "a snapshot of the gate's state"
	}
	return fmt.Sprintf("log index %d", h.Index)
}

// printPermitsMoved ends a fence advance's line: the permits it closed,
// and those it kept open because their releases were already rechecked at
// the new value.
func printPermitsMoved(w io.Writer, r *raftgate.FenceResult) {
	fmt.Fprintf(w, "closed %d permits", len(r.Closed))
	if len(r.Closed) > 0 {
		fmt.Fprintf(w, ": %s", strings.Join(r.Closed, ", "))
	}
	if len(r.Spared) > 0 {
		fmt.Fprintf(w, "; kept %d open (their releases were rechecked at this value): %s", len(r.Spared), strings.Join(r.Spared, ", "))
	}
	fmt.Fprintln(w)
}

var gatePruneFlags struct{ olderThan time.Duration }

var gatePruneCmd = &cobra.Command{
	Use:   "prune [--older-than 720h]",
	Short: "Drop ended runs, closed permits nothing names, and the shard lists of releases no alias or run can reach",
	Long: `prune keeps a long-lived gate's state, and so its Raft snapshots, from
growing with every nightly release: it deletes runs that ended (FAILED or
CANCELLED) more than --older-than ago, the closed permits
no alias history or remaining run names, and the shard lists of releases
registered more than --older-than ago that are RETIRED, or INVALID outside
every rollback window, and that no remaining run pins. Release records,
alias histories and open permits stay. It is one linearizable command.`,
	Args: exactArgs(0),
	RunE: func(cmd *cobra.Command, _ []string) error {
		if gatePruneFlags.olderThan < 0 {
			return errcode.New(errcode.Usage, "%s: --older-than %s is negative", cmd.CommandPath(), gatePruneFlags.olderThan)
		}
		c := gateClient()
		defer c.Close()
		r, err := c.Prune(cmd.Context(), gatePruneFlags.olderThan)
		if err != nil {
			return err
		}
		return printResult(cmd, r, func(w io.Writer) {
			fmt.Fprintf(w, "pruned %d runs, %d permits, the shard lists of %d releases\n", len(r.Runs), len(r.Permits), len(r.Releases))
		})
	},
}

var gateRecheckFlags struct {
	store, kind, report string
	value               uint64
	hits                int64
}

var gateRecheckCmd = &cobra.Command{
	Use:   "recheck ROOT --store URL --kind tombstone|benchmark --report DIGEST [--value N] [--hits H]",
	Short: "Record a fence recheck of ROOT from its report: zero hits renews its closed permits",
	Long: `Record, from a stored report, that ROOT was checked against a tombstone
log or benchmark registry: the low-level step 'shardproof recheck' takes
after computing the hits.

The report is read from --store (digest-checked, strictly decoded): a
recheck report (training.shard.recheck.v1) or a verification report that
shows no failure but fence hits. It must name ROOT, have checked it
against the snapshot ROOT's manifest binds (a report of another
snapshot, verify --snapshot, is BAD_INPUT, as gate register refuses it),
and have checked a document of --kind; the watermark and hits sent to
the gate are the report's. --value and --hits, if given, must equal them
(a typo is caught, not recorded). The document of --kind the report
checked must be the log the gate's fence was advanced with, when the
gate records one (FENCE_LOG_MISMATCH, exit 4, nothing recorded). Zero
hits renews ROOT's permits a fence advance closed; any hit marks the
release INVALID. The signatures stored for the recheck (recheck
--sign-key) are sent with it, and --sign-key signs it now: a gate started
with --verifier-keys refuses one no key it trusts signed
(EVIDENCE_UNSIGNED, exit 4), and names the trusted keys that signed one
it takes ("verified by"), which its state records with the recheck from
the cluster's command-schema version 7 ("gate release ROOT").

Exit status: 0 recorded, 1 the release has hits (now INVALID), or the
report does not show what --value/--hits say or checked another
snapshot (BAD_INPUT; nothing recorded), 2 usage, 3 error, 4 refused, 5
indeterminate.`,
	Args: exactArgs(1),
	RunE: func(cmd *cobra.Command, args []string) error {
		root, err := parseDigestArg(cmd, "ROOT", args[0])
		if err != nil {
			return err
		}
		f := gateRecheckFlags
		if f.report == "" {
			return errcode.New(errcode.Usage, "%s: --report is required: a recheck is recorded only with the report that found its hits", cmd.CommandPath())
		}
		if f.kind != raftgate.FenceTombstone && f.kind != raftgate.FenceBenchmark {
			return errcode.New(errcode.Usage, "%s: --kind must be %s or %s", cmd.CommandPath(), raftgate.FenceTombstone, raftgate.FenceBenchmark)
		}
		rd, err := parseDigestArg(cmd, "--report", f.report)
		if err != nil {
			return err
		}
		key, err := signKey(cmd)
		if err != nil {
			return err
		}
		s, err := openStore(cmd, f.store)
		if err != nil {
			return err
		}
		value, hits, doc, err := publish.RecheckEvidence(cmd.Context(), s, root, f.kind, rd)
		if err != nil {
			return err
		}
		if cmd.Flags().Changed("value") && f.value != value {
			return errcode.New(errcode.BadInput, "--value %d, but report %s checked %s watermark %d", f.value, rd, f.kind, value)
		}
		if cmd.Flags().Changed("hits") && f.hits != hits {
			return errcode.New(errcode.BadInput, "--hits %d, but report %s found %d %s hits", f.hits, rd, hits, f.kind)
		}
		rc := &raftgate.RecheckCmd{Root: root, Kind: f.kind, Value: value, Report: rd, Hits: hits}
		c := gateClient()
		defer c.Close()
		// The document the report checked must be the fence's log (the
		// other kind is not rechecked here).
		fences, err := c.Fences(cmd.Context())
		if err != nil {
			return err
		}
		var tomb, bench manifest.Digest
		if f.kind == raftgate.FenceTombstone {
			tomb, fences.BenchmarkLog = doc, manifest.Digest{}
		} else {
			bench, fences.TombstoneLog = doc, manifest.Digest{}
		}
		if err := publish.CheckFenceLogs(cmd.Context(), s, tomb, bench, *fences); err != nil {
			return fmt.Errorf("report %s: %w; nothing recorded", rd, err)
		}
		if err := publish.AttachRecheckSignatures(cmd.Context(), s, key, rc, slog.Default()); err != nil {
			return fmt.Errorf("%w; nothing recorded", err)
		}
		r, err := c.Recheck(cmd.Context(), rc)
		if err != nil {
			return err
		}
		return printResult(cmd, r, func(w io.Writer) {
			fmt.Fprintf(w, "release %s %s (%s %d, %d hits, report %s); renewed %d permits%s\n",
				r.Release.Root, r.Release.State, f.kind, value, hits, rd, len(r.Reopened), spaced(strings.Join(r.Reopened, ", ")))
			if len(r.VerifiedBy) > 0 {
				fmt.Fprintf(w, "verified by %s\n", strings.Join(r.VerifiedBy, ", "))
			}
		})
	},
}

var gatePermitsFlags struct {
	root string
	open bool
}

var gatePermitsCmd = &cobra.Command{
	Use:   "permits [--root DIGEST] [--open]",
	Short: "List permits",
	Long: `List the gate's permits, sorted by ID: the alias or run each was issued
for, its root and generation, the fence values it was bound at, and
whether it is OPEN or CLOSED (with the reason). A fence advance closes
every open permit bound below it until a recheck shows zero hits (one
made before the advance keeps its root's permits open).

Exit status: 0 listed, 2 usage, 3 gate unreachable.`,
	Args: exactArgs(0),
	RunE: func(cmd *cobra.Command, args []string) error {
		var root manifest.Digest
		if gatePermitsFlags.root != "" {
			// A malformed filter would match nothing and look like "no
			// permits".
			var err error
			if root, err = parseDigestArg(cmd, "--root", gatePermitsFlags.root); err != nil {
				return err
			}
		}
		c := gateClient()
		defer c.Close()
		ps, err := c.Permits(cmd.Context())
		if err != nil {
			return err
		}
		out := []*raftgate.Permit{}
		for _, p := range ps {
			if (root.IsZero() || p.Root == root) && (!gatePermitsFlags.open || p.State == raftgate.PermitOpen) {
				out = append(out, p)
			}
		}
		return printResult(cmd, out, func(w io.Writer) {
			for _, p := range out {
				who := "alias " + p.Alias
				if p.Run != "" {
					who = "run " + p.Run
				}
				fmt.Fprintf(w, "%s %-10s %-8s %s generation %d root %s tombstone %d benchmark %d%s\n",
					p.ID, p.State, p.Kind, who, p.Generation, p.Root, p.TombstoneWatermark, p.BenchmarkFence, spaced(p.Reason))
			}
		})
	},
}

// spaced is s after the space that separates it from what a line
// printed before it, or nothing when s is empty: a last column left
// empty ended its line in a space.
func spaced(s string) string {
	if s == "" {
		return ""
	}
	return " " + s
}

var gateHistoryCmd = &cobra.Command{
	Use:   "history ALIAS",
	Short: "Show an alias's generations and its rollback window",
	Long: `Show ALIAS's current generation and root, its permit, and every
generation it has had, newest first; "*" marks the generations inside the
rollback window, whose roots "gate rollback" may return to.

A generation inside the window whose release records who signed its
report ends with "verified by:" and the IDs of those trusted verifier
keys (see "gate release ROOT", which shows the rest of the record and
the rechecks' signers); --json adds them as "verifiedBy", each such
root's key IDs. The gate records them from the cluster's command-schema
version 7 on, at a gate started with --verifier-keys. The generations
outside the window are shown without them: reading each of their
releases would cost a read of a whole shard list.

Exit status: 0 shown, 2 usage, 3 gate unreachable, 4 UNKNOWN_ALIAS.`,
	Args: exactArgs(1),
	RunE: func(cmd *cobra.Command, args []string) error {
		c := gateClient()
		defer c.Close()
		a, err := c.Alias(cmd.Context(), args[0])
		if err != nil {
			return err
		}
		window := a.History[max(0, len(a.History)-a.Retain):]
		signers := map[string][]string{}
		for _, h := range window {
			k := h.Root.String()
			if _, ok := signers[k]; ok {
				continue
			}
			rel, err := c.Release(cmd.Context(), h.Root)
			if err != nil {
				return fmt.Errorf("release %s of generation %d: %w", h.Root, h.Generation, err)
			}
			signers[k] = rel.VerifiedBy
		}
		maps.DeleteFunc(signers, func(_ string, ids []string) bool { return len(ids) == 0 })
		out := struct {
			*raftgate.Alias
			// VerifiedBy maps each root of the rollback window whose
			// release records its report's signers to them.
			VerifiedBy map[string][]string `json:"verifiedBy,omitempty"`
		}{a, signers}
		return printResult(cmd, out, func(w io.Writer) {
			fmt.Fprintf(w, "%s generation %d → %s (permit %s, rollback window %d)\n", a.Name, a.Generation, a.Root, a.Permit, a.Retain)
			for i := len(a.History) - 1; i >= 0; i-- {
				h := a.History[i]
				mark, by := " ", ""
				if i >= len(a.History)-a.Retain {
					mark = "*" // inside the rollback window
					by = verifiedBy(signers[h.Root.String()])
				}
				fmt.Fprintf(w, "%s %4d %s %-8s %s%s\n", mark, h.Generation, h.Root, h.Kind, time.UnixMilli(h.At).UTC().Format(time.RFC3339), by)
			}
		})
	},
}

// verifiedBy is how gate history and gate release end a line of a
// record that names its signers: nothing when it names none.
func verifiedBy(ids []string) string {
	if len(ids) == 0 {
		return ""
	}
	return ", verified by: " + strings.Join(ids, ", ")
}

var gateReleaseCmd = &cobra.Command{
	Use:   "release ROOT",
	Short: "Show what the gate records of a release: its state, report, watermarks, rechecks and who signed them",
	Long: `Show the gate's record of the release ROOT, read linearizably on the
leader: its state and shard count, when it was registered, the report
that set its watermarks with the snapshot it was checked against, the
tombstone and benchmark watermarks with their hits, and each recheck
(kind, value, hits, report, time), oldest first.

"verified by:" names the trusted verifier keys (key IDs, as "keys
generate" prints them) whose signatures of the report's, or a recheck's,
evidence the leader checked when it recorded it. The gate records them
from the cluster's command-schema version 7 on, at a gate started with
--verifier-keys; evidence registered unsigned, before that version or
at a gate without keys names none. A register of the report the release
holds, signed, gives a release that names none its signers.

--json prints the record as the gate holds it: the shard list,
"verifiedBy" beside "report", and in each recheck, where recorded.

Exit status: 0 shown, 2 usage, 3 gate unreachable, 4 UNKNOWN_RELEASE.`,
	Args: exactArgs(1),
	RunE: func(cmd *cobra.Command, args []string) error {
		root, err := parseDigestArg(cmd, "ROOT", args[0])
		if err != nil {
			return err
		}
		c := gateClient()
		defer c.Close()
		r, err := c.Release(cmd.Context(), root)
		if err != nil {
			return err
		}
		at := func(ms int64) string { return time.UnixMilli(ms).UTC().Format(time.RFC3339) }
		return printResult(cmd, r, func(w io.Writer) {
			shards := fmt.Sprintf("%d shards", len(r.Shards))
			if r.Pruned {
				shards = "shard list pruned"
			}
			fmt.Fprintf(w, "release %s %s, %s, registered %s\n", r.Root, r.State, shards, at(r.Registered))
			if r.Report.IsZero() {
				fmt.Fprintln(w, "no report")
			} else {
				fmt.Fprintf(w, "report %s against snapshot %s: tombstone %d (%d hits), benchmark %d (%d hits)%s\n",
					r.Report, r.DatasetSnapshot, r.TombstoneWatermark, r.TombstoneHits, r.BenchmarkFence, r.BenchmarkHits, verifiedBy(r.VerifiedBy))
			}
			for _, rc := range r.Rechecks {
				report := ""
				if !rc.Report.IsZero() {
					report = ", report " + rc.Report.String()
				}
				fmt.Fprintf(w, "recheck %s %d: %d hits%s, %s%s\n", rc.Kind, rc.Value, rc.Hits, report, at(rc.At), verifiedBy(rc.VerifiedBy))
			}
		})
	},
}

func init() {
	f := gateServeCmd.Flags()
	f.StringVar(&gateServeFlags.data, "data", "", "data directory (raft.db, snapshots/)")
	f.StringVar(&gateServeFlags.id, "id", "gate-1", "Raft server ID; keep it across restarts")
	f.StringVar(&gateServeFlags.raftAddr, "raft-addr", raftgate.DefaultRaftAddr, "Raft TCP address to bind and advertise")
	f.StringVar(&gateServeFlags.httpAddr, "http-addr", raftgate.DefaultHTTPAddr, "HTTP API address")
	f.StringVar(&gateServeFlags.raftAdvertise, "raft-advertise", "", "Raft address other members dial, if not --raft-addr (e.g. when binding 0.0.0.0)")
	f.StringVar(&gateServeFlags.httpAdvertise, "http-advertise", "", "HTTP address other members forward to, if not --http-addr")
	f.StringVar(&gateServeFlags.join, "join", "", "HTTP address of a running member to join (first start only)")
	f.BoolVar(&gateServeFlags.bootstrap, "bootstrap", false, "found a new single-node cluster of this node: the first start of a gate's first node only")
	f.DurationVar(&gateServeFlags.autoPrune, "auto-prune", 0, "while leader, run 'gate prune --older-than' with this age every hour (0: never)")
	f.StringVar(&gateServeFlags.restore, "restore", "", "with --bootstrap: found the new cluster on a backup FILE written by 'gate backup' (an empty --data only)")
	f.StringVar(&gateServeFlags.tlsCert, "tls-cert", "", "PEM certificate (chain) of this member: serve the API over HTTPS and talk mutual TLS to the other members (with --tls-key and --tls-ca)")
	f.StringVar(&gateServeFlags.tlsKey, "tls-key", "", "PEM private key of --tls-cert")
	f.StringVar(&gateServeFlags.tlsCA, "tls-ca", "", "PEM file of the CA(s) that signed every member's certificate")
	f.StringVar(&gateServeFlags.tokenFile, "token-file", os.Getenv("SHARDPROOF_GATE_TOKEN_FILE"), "require this file's token of every client and member (env SHARDPROOF_GATE_TOKEN_FILE; see above)")
	f.StringVar(&gateServeFlags.verifierKeys, "verifier-keys", "", "require a signature by one of this file's verifier public keys (one a line, # comments) of every register of a report and every recheck (see above); SIGHUP reads it again")
	f.BoolVar(&gateServeFlags.recover, "recover", false, "make this member, with its state, the only member of its cluster: once, after a majority of the members is lost for good (the others must then be wiped and rejoin with --join)")
	f.DurationVar(&gateServeFlags.heartbeat, "raft-heartbeat", time.Second, "Raft heartbeat timeout: how long a follower waits for the leader before it starts an election (every member should use the same values)")
	f.DurationVar(&gateServeFlags.election, "raft-election", time.Second, "Raft election timeout, at least --raft-heartbeat")
	f.DurationVar(&gateServeFlags.writeTimeout, "write-timeout", 30*time.Second, "give up a response, and close its connection, when its client takes none of its bytes this long (a 'wait' long-poll waiting for the barrier is not cut)")
	f.DurationVar(&gateServeFlags.lease, "raft-lease", 500*time.Millisecond, "Raft leader lease: how long a leader keeps leading without hearing from a quorum, at most --raft-heartbeat (raise all three on slow disks or loaded hosts, where leaders step down on 'failed to contact quorum')")

	f = gateRegisterCmd.Flags()
	f.StringVar(&gateRegisterFlags.store, "store", os.Getenv("SHARDPROOF_STORE"), "object store URL or path (default $SHARDPROOF_STORE)")
	f.StringVar(&gateRegisterFlags.report, "report", "", "digest of the verification report")
	f.StringVar(&gateRegisterFlags.root, "root", "", "root digest (without --report: stage the release)")
	addSignKeyFlag(f, "the report's evidence")

	gatePublishCmd.Flags().Uint64Var(&gatePublishFlags.expect, "expect", 0, "the alias's current generation (0 creates it)")
	gatePublishCmd.Flags().IntVar(&gatePublishFlags.retain, "retain", 0, fmt.Sprintf("rollback window of a new alias: the roots of its last N generations, the current one included, are kept (default %d)", raftgate.DefaultRetain))
	gateRollbackCmd.Flags().Uint64Var(&gateRollbackFlags.expect, "expect", 0, "the alias's current generation")

	f = gateRecheckCmd.Flags()
	f.StringVar(&gateRecheckFlags.store, "store", os.Getenv("SHARDPROOF_STORE"), "object store URL or path holding the report (default $SHARDPROOF_STORE)")
	f.StringVar(&gateRecheckFlags.kind, "kind", "", "tombstone or benchmark")
	f.StringVar(&gateRecheckFlags.report, "report", "", "digest of the recheck or verification report")
	f.Uint64Var(&gateRecheckFlags.value, "value", 0, "the watermark the report checked (optional; checked against the report)")
	f.Int64Var(&gateRecheckFlags.hits, "hits", 0, "the hits the report found (optional; checked against the report)")
	addSignKeyFlag(f, "the recheck's evidence")

	gatePruneCmd.Flags().DurationVar(&gatePruneFlags.olderThan, "older-than", 30*24*time.Hour, "prune only what was created, closed or registered longer ago than this")
	gateBackupCmd.Flags().BoolVar(&gateBackupForce, "force", false, "replace FILE if it exists")
	gateStatusCmd.Flags().BoolVar(&gateStatusDigest, "digest", false, "also show the sha256 of the node's state and the command index it reflects")
	gatePermitsCmd.Flags().StringVar(&gatePermitsFlags.root, "root", "", "only permits of this root")
	gatePermitsCmd.Flags().BoolVar(&gatePermitsFlags.open, "open", false, "only open permits")

	// The client flags go on each client command, not on `gate` itself:
	// `gate serve` is the server and takes none of them.
	clients := []*cobra.Command{gateStatusCmd, gateBackupCmd, gateRemoveCmd, gateRegisterCmd, gatePublishCmd, gateRollbackCmd,
		gateFenceCmd, gateRecheckCmd, gatePermitsCmd, gateHistoryCmd, gateReleaseCmd, gatePruneCmd}
	for _, c := range clients {
		addGateClientFlags(c.PersistentFlags())
	}
	gateCmd.AddCommand(gateServeCmd)
	gateCmd.AddCommand(clients...)
	rootCmd.AddCommand(gateCmd)
}
