// Package raftgate is the gate: the embedded Raft group (hashicorp/raft,
// raft-boltdb, TCP transport) that holds shardproof's linearizable state —
// releases and their states, aliases with generations, the tombstone and
// benchmark fences, permits, and training runs with their worker barrier.
// Every publication, rollback, fence advance, run creation, attestation,
// reassignment and checkpoint admission is one Raft log entry checked
// inside FSM.Apply.
//
// It sits after verify in the pipeline: verify writes a report bound to a
// root digest; `gate register` hands the gate a summary of that report
// (the FSM never reads the object store); publish moves an alias; a run
// resolves the alias once and its workers attest before step 0. This
// package imports manifest (digests) and errcode only — never Arrow,
// Parquet or a store implementation.
//
// # Commands
//
// A command is a JSON envelope {"type": …, fields…, "now": unix-ms}.
// DecodeCommand is strict, by the manifests' rules (manifest.DecodeJSON):
// an unknown type or field, a key twice or in another case, a null that
// is not an empty list, a bad digest, bytes that are not UTF-8 or
// trailing data is BAD_DOCUMENT, and such a command never reaches the log
// (the HTTP handler decodes before proposing). A committed entry a member
// cannot decode is another build's (a newer leader's field or type): the
// member halts there (HaltError, GATE_HALTED) rather than skip it and
// part from the others; it applies nothing more, leaves the cluster and
// says so on /healthz, /readyz and /v1/status, and answers every other
// request GATE_HALTED without forwarding it, which clients take to the
// next member (a command committed on a leader after its halt is
// INDETERMINATE). "now" is stamped by the
// leader's HTTP handler when it proposes; Apply takes every time-based
// decision (barrier deadlines) from it and never reads a clock, the store
// or randomness, and it iterates maps in sorted key order, so replicas
// that apply the same log hold byte-identical states. Deadlines are thus
// judged by the clock of whichever leader proposes the command; leaders'
// clocks are assumed to agree to well within a barrier timeout. Apply
// returns a
// *Result: a value (the changed alias, release, run summary, …) and, for
// a rejection, an error carrying an errcode. A few rejections change state
// on purpose and say so below.
//
//   - register(root, shards, report?) — without a report the release is
//     STAGED. A VERIFIED report moves STAGED → VERIFIED; a newer VERIFIED
//     report of a known release raises the watermarks it was checked at
//     and renews its permits. An INVALID report moves any state → INVALID
//     and closes the release's open permits. The shard digests, in manifest
//     order, are what attest checks assignments against. A different shard
//     list for a known root is ALREADY_EXISTS. A refused register (a
//     retry contradicting the report recorded or another snapshot:
//     BAD_INPUT; a VERIFIED report of an INVALID release: NOT_VERIFIED)
//     changes nothing from cluster version 2; below it a pruned release
//     took its shard list back first.
//   - publish(alias, root, expectedGeneration, retain) — compare-and-set
//     from expectedGeneration to expectedGeneration+1. The root must be
//     VERIFIED or PUBLISHED (else NOT_VERIFIED) and checked at or above both
//     current fences with zero hits (else FENCE_BEHIND). A new alias is
//     created by publishing with expected generation 0. The command issues
//     a publish permit bound to (root, the release's checked tombstone
//     watermark and benchmark fence, generation) and supersedes the
//     previous generation's permit. Idempotence: if generation
//     expected+1 already exists with the same root and kind, the original
//     result is returned unchanged (so retrying after an unknown outcome
//     is safe). If expected+1 is the current generation and holds another
//     root, the command lost a race for exactly that generation:
//     PUBLISH_CONFLICT. Any other mismatch (further behind, or ahead) is
//     GENERATION_CONFLICT.
//   - rollback(alias, root, expectedGeneration) — the same CAS and
//     idempotence, to a root inside the rollback window that is not the
//     current root, is still PUBLISHED (not INVALID/RETIRED) and satisfies
//     both current fences; otherwise ROLLBACK_INELIGIBLE. It is a new,
//     higher generation, never a rewrite of history.
//   - advanceFence(kind, value, spareChecked, log) — monotonic: lower is
//     FENCE_REGRESSION, equal changes nothing but, with a log prefix
//     digest (cluster version 4), records it on a fence that has none
//     and is FENCE_LOG_MISMATCH on one that has another; higher records
//     the log named, or none. Every OPEN permit whose bound
//     for that kind is below the new value becomes CLOSED, except, with
//     spareChecked (which the proposing node sets on every new advance
//     once the cluster version is 1; older entries lack it), a permit
//     whose release the gate already holds checked at or above both new
//     fences with zero hits: it stays OPEN, re-bound to the release's
//     watermarks.
//   - recheck(root, kind, value, report, hits) — value below the current
//     fence is FENCE_BEHIND. A node refuses to propose one that names no
//     report (BAD_INPUT, checked before the log, so old logs replay as
//     they did): the CLI sends the value and hits of a stored report it
//     has read. Zero hits raises the release's checked value
//     and reopens its CLOSED permits (re-bound to the new watermarks) when
//     it satisfies both fences. Non-zero hits make the release INVALID and
//     its permits stay closed; the command returns TOMBSTONE_HIT or
//     BENCHMARK_HIT (a state-changing rejection).
//   - createRun(run, alias, worldSize, assignment?, barrierTimeoutMs) —
//     reads the alias exactly once and pins (root, generation); requires
//     the alias's current permit OPEN (else PERMIT_CLOSED); issues a run
//     permit. The assignment is rank → shard indices and must name every
//     shard exactly once; without one, shard i goes to rank i % worldSize.
//     The barrier deadline is now + barrierTimeoutMs (default 10 min; a
//     node refuses to propose one above MaxBarrierTimeoutMs, ten years,
//     BAD_INPUT, whose deadline could wrap past the int64 limit). The
//     same run ID with the same parameters returns the existing run; with
//     others, ALREADY_EXISTS. The ID of a pruned run is RUN_PRUNED: it is
//     never made anew, so no retry, however late, resolves the alias again.
//   - attest(run, rank, root, shards, epoch?) — an epoch other than the
//     run's current assignment epoch is STALE_EPOCH and changes nothing
//     (a reassignment landed while the worker verified), from cluster
//     version 2 before the rank range is checked; below it the rank came
//     first, so a rank a scale-in removed got BAD_INPUT "rank outside". A
//     passed deadline and another root come before the epoch at every
//     version. A root other than the run's FAILS
//     the run with ROOT_MISMATCH; a shard outside the rank's assignment
//     FAILS it with SHARD_NOT_ASSIGNED (both before step 0, both
//     state-changing). An attestation missing assigned shards is BAD_INPUT
//     and changes nothing. The barrier opens, inside Apply, when every rank
//     of the current assignment has attested.
//   - checkBarrier(run) — if the barrier is closed and now > deadline the
//     run FAILS with BARRIER_TIMEOUT. The leader proposes it for overdue
//     runs every SweepInterval; an attestation after the deadline does the
//     same, and from cluster version 6 a reassign.
//   - reassign(run, worldSize, assignment?, reset?, expectedEpoch?) —
//     scale-out and recovery. It uses the run's pinned root and NEVER
//     reads the alias. Ranks whose shard list changed, new ranks and the
//     ranks in reset lose their attestation; if any rank lacks one the
//     barrier closes again with a fresh deadline. Each reassignment starts
//     a new epoch. With expectedEpoch it is a compare-and-set: from
//     another epoch it is STALE_EPOCH and changes nothing, except that the
//     same parameters arriving again once they made epoch expected+1 (a
//     retry) return the run unchanged. Without expectedEpoch a repeat is
//     another reassignment (`run reassign` always sends one). From
//     cluster version 6 a passed deadline of a closed barrier comes
//     first, as for attest: the run FAILS with BARRIER_TIMEOUT
//     (state-changing) and nothing is reassigned; below it the
//     reassignment was applied, setting a new deadline or, on a
//     scale-in that removed the ranks still missing, opening the
//     barrier of a run the sweep was about to fail.
//   - admitCheckpoint(run, step, root) — only the run's root
//     (ROOT_MISMATCH), only with the run's permit OPEN (PERMIT_CLOSED), only
//     with the barrier open (BARRIER_CLOSED), steps never go back
//     (STEP_REGRESSION; the same step again is a no-op).
//   - cancelRun(run) — CANCELLED, permit RELEASED; idempotent.
//   - prune(olderThanMs) — with cutoff = now − olderThanMs: deletes runs
//     that ended (FAILED or CANCELLED) before the cutoff;
//     then deletes the non-OPEN permits changed before it that no alias
//     history and no remaining run names; then drops the shard lists of
//     releases registered before it that are RETIRED, or INVALID, and that
//     no rollback window and no remaining run holds (the release is marked
//     pruned; a register of the same root takes its shards back). Release
//     records and alias histories stay, and each deleted run leaves a
//     tombstone (root, generation, state, ended, pruned: about 150 bytes
//     against its assignment and attestations) under which every command
//     naming it answers RUN_PRUNED. Idempotent. With
//     Config.PruneOlderThan the leader proposes it every PruneInterval
//     (`gate serve --auto-prune`).
//   - join(id, raftAddr, httpAddr) — records a member's addresses so
//     followers can forward to the leader's HTTP API.
//   - setClusterVersion(version, clusterID) — raises the cluster's
//     command-schema version (never lowers it); proposed by a leader only
//     (a client's is BAD_INPUT), see "Versions" below. A raise to 3 or
//     above of a state without a cluster identity gives it clusterID
//     (BAD_INPUT, nothing changed, without a valid one); a state that has
//     one keeps it.
//
// A failed or cancelled run answers RUN_FAILED to everything but cancel
// and an identical createRun; once pruned, RUN_PRUNED to everything.
//
// # Release states and retention
//
// STAGED → VERIFIED | INVALID; VERIFIED → PUBLISHED on first publish;
// PUBLISHED → RETIRED when no alias retains it; any → INVALID on an
// INVALID report or a recheck with hits. The rollback window of an alias
// is its last N generations, (generation−N, generation], with N = retain
// given when the alias is created (default 8, at most 1024). A root in
// some alias's window is PUBLISHED and is never retired; when a generation
// leaves the window and no alias's window holds its root any more, the
// root becomes RETIRED and can be neither published nor rolled back to.
// Alias history is kept whole (it is small) so `gate history` and
// idempotent retries can see every generation. What grows with every
// release and run (shard lists, per-rank attestations) is what prune
// removes once nothing can use it: a gate embedded for years would
// otherwise snapshot every nightly release's shard list forever.
//
// # Permits
//
// A permit is bound to (root, tombstone watermark, benchmark fence,
// generation); the watermarks are those the release was checked at.
// OPEN → CLOSED (a fence passed it, or its release became INVALID) →
// OPEN (a recheck renewed it); OPEN|CLOSED → SUPERSEDED (publish/rollback
// permits, when the alias moves on) or RELEASED (run permits, when the
// run fails or is cancelled). Invariant: an OPEN permit is bound at or
// above both fences.
//
// # Nodes, HTTP and clients
//
// Node runs one member: raft-boltdb in DataDir/raft.db (log and stable
// store), FileSnapshotStore in DataDir/snapshots, a TCP transport, and the
// HTTP/JSON API: POST /v1/commands (a command envelope), POST /v1/join,
// POST /v1/remove, POST /v1/record (a follower's own join record, see
// handleRecord),
// GET /v1/state, /v1/aliases/{name}, /v1/releases/{root}, /v1/fences, /v1/permits, /v1/permits/{id},
// /v1/runs/{id}, /v1/runs/{id}/wait?timeout=ms (long poll), /v1/status
// (the node's own view; ?digest=1 adds its state digest), /metrics, /healthz and /readyz. A
// linearizable read answers the log index of the state it read in
// X-Shardproof-State-Index, so a backup is placed against the digests
// members report. Errors are
// {"error":{"code","message"}} with 409 for rejections, 400 for bad input,
// 404 for unknown names, 410 for a pruned run, 401 UNAUTHENTICATED, 503 NOT_LEADER/GATE_UNAVAILABLE, 504
// INDETERMINATE. A node with no state
// bootstraps a single-node cluster of itself only with Config.Bootstrap
// (else it refuses: it may be a wiped member, which must rejoin rather
// than found a second cluster); a node with Join reads the cluster's
// identity from that member's /v1/status (identity.go), then asks it to add
// it as a learner: a nonvoter (a voter of the same ID, whose directory
// was lost, is demoted first; a new address replaces the old one) that
// grants no vote and asks for none until the leader promotes it, once it
// applied what the leader had committed (see learner.go; the leader asks
// each learner on its own, with a timeout of its own, and promotes only
// one the configuration still lists as a nonvoter, with no change of its
// ID since it asked, under the lock a POST /v1/remove takes too, so a
// learner removed meanwhile stays removed, and one that joined again
// meanwhile is not promoted on its old incarnation's answer). Writes on a follower are forwarded
// once to the leader (X-Shardproof-Forwarded prevents loops), once the
// follower made the checks that need no state (the body's size cap, the
// command's fields and caps, then evidence signatures, in the order the
// leader checks them before Apply), so a request they refuse costs no
// round trip and is refused with the leader's code, even one that breaks
// more than one rule; the
// follower waits for the answer at most twice ApplyTimeout (a join adds
// the leader's probe of the joiner, a long-poll its wait): a leader
// address that answers nothing makes a command sent INDETERMINATE and
// anything else NOT_LEADER, however long the client would wait. Reads that
// must be linearizable run on the leader after VerifyLeader and, once per
// term, a Barrier, so they observe every write acknowledged before them.
// With Config.Token every request but /healthz and /readyz must carry it
// (401 UNAUTHENTICATED otherwise) and every Raft connection starts with a
// mutual HMAC challenge-response keyed by it (auth.go). The token itself
// travels in every HTTP request: without TLS, a node whose API other hosts
// reach warns at start, and a Client warns once per URL when it sends it
// over plain http to an address that is not loopback.
//
// A data directory is one process's at a time: a node started on a
// directory another process holds fails after 2 s with DATA_DIR_IN_USE,
// also when it found a port in use first, the usual case of a gate
// started twice (Start binds its ports before it touches DataDir, and a
// port in use is IO only while no one holds raft.db). A Start that fails
// after it made DataDir removes it, and the parents it made for it,
// unless it asked a member to add it (see removeMade); a DataDir that
// existed is never removed.
//
// With Config.VerifierKeys a register carrying a report and a recheck
// must carry a signature, by a trusted verifier key, of their fields
// (Register.Evidence, RecheckCmd.Evidence; package evidence), else 403
// EVIDENCE_UNSIGNED or EVIDENCE_SIGNATURE_INVALID. The member that
// receives the request checks it (checkEvidence) before it forwards or
// proposes; Node.Apply drops the signatures before the command is
// encoded, so no log entry holds them and Apply never sees them. A
// Client sends them only to a member whose Status lists VerifierKeys,
// or again after the bare command was refused EVIDENCE_UNSIGNED (see
// Client.Register): a member on a build before the field refuses it.
// Node.ReloadVerifierKeys (gate serve's SIGHUP) reads
// Config.VerifierKeysFile again and swaps the whole set at once (an
// atomic pointer: each check loads one set); a file it cannot use keeps
// the set in effect, and a node without keys gains none. The leader
// names the trusted keys that signed a command's evidence in its answer
// (RecheckResult.VerifiedBy) and log line and, from command-schema
// version 7 (versionSigners), in the command it logs (VerifiedBy, set
// from its own check, never from the request: a request naming signers
// is BAD_INPUT), so the state records them beside the report
// (Release.VerifiedBy) and the recheck (Recheck.VerifiedBy), and they
// are in snapshots and backups. Below version 7 a signed command is
// logged as builds of version 6 log it, and the state records no signer.
//
// Every cluster has an identity (State.ClusterID, see identity.go),
// drawn when it is founded (--bootstrap; a restore draws a new one) or,
// for a cluster founded by an older build, by its first raise to version
// 3 or above (from 2 straight to 7 when every member runs this build).
// From version 3 every Raft connection carries it, inside the token's
// handshake when there is one and in a handshake of its own when there
// is none, and a member refuses a connection that carries another or
// none (CLUSTER_ID_MISMATCH, logged once per peer, counted in
// shardproof_gate_raft_connections_refused_total): a member of the
// cluster a backup was taken from can neither vote, append entries nor
// install a snapshot in the cluster restored from it. An acceptor tells
// the handshakes from raw Raft traffic by the first byte (raft's RPC
// types are 0 to 4). Below 3 members dial as builds of version 2 do
// (raw Raft, or the token's handshake) and accept what they send. The
// handshakes run in the stream layer, under hashicorp/raft's network
// transport, and a learner's vote gate (learner.go) wraps that transport:
// a refused connection reaches neither the gate nor Raft, and a learner
// still refuses the votes of its own cluster's members.
//
// Outcomes: raft.ErrNotLeader / ErrEnqueueTimeout / a leadership transfer
// mean the entry was never appended: NOT_LEADER, retried by the Client.
// ErrLeadershipLost, shutdown mid-commit, or a connection that broke after
// a write was sent mean the outcome is unknown: INDETERMINATE (exit 5).
// Every command is safe to retry with the same arguments (see publish
// idempotence above; createRun, attest, checkpoint, cancel and fence
// commands are idempotent by construction; reassign when it carries
// expectedEpoch), so the answer to INDETERMINATE is to send the same
// command again. One answer of a retry needs reading:
// advanceFence(v) retried after INDETERMINATE answers FENCE_REGRESSION if
// the fence has meanwhile moved past v, whether or not the first attempt
// was applied; either way the fence is at or above v.
//
// /v1/status?digest=1 (`gate status --digest`) adds the sha256 of the
// member's state and the log index of the last command it reflects:
// members at the same index must report the same digest. The chaos test
// (cmd/shardproof, `make chaos`) runs three `gate serve` processes under
// SIGKILL, restart, SIGSTOP of the leader and Raft network partitions (the
// leader cut off from both followers while clients still reach it, or one
// link cut; Config.WrapStream is the seam) with concurrent clients
// (register, some with INVALID reports, publish, rollback, advanceFence closing the permits of the
// older releases it passes, recheck reopening them or, with a hit,
// invalidating the release, createRun (some with
// a short barrier timeout, some repeated late), attest, reassign,
// admitCheckpoint, prune and linearizable reads), checks the history
// with porcupine against a model of the commands above, and ends by
// comparing the members' digests. The model bounds barrier deadlines
// with each operation's call and answer times: a command stamped before
// the deadline cannot find the run late, and an attestation or a
// reassignment called after it must.
//
// # Versions
//
// Each build applies command-schema versions up to CommandVersion (7;
// builds before the version handshake report none, the baseline 0) and
// reports it in /v1/status. The cluster version, State.ClusterVersion,
// is replicated: a leader whose build is newer asks every server of its
// Raft configuration for its version (GET /v1/status at the HTTP address
// of its join record, answering with its ID and the configuration's Raft
// address for it) every 5 s and when a request needs more, and raises
// the version with setClusterVersion to the lowest answer once every
// server answered. A member down, not yet recorded, or answering as
// another ID or from another Raft address keeps it where it is, and so
// does a member on a build before the handshake, which could not decode
// the raise. Asking live members, rather than recording versions in the log,
// follows restarts, replacements and removals as they are. Nothing of a
// version above the cluster's is proposed: below 1, advanceFence goes
// without spareChecked, and one whose outcome depends on it (it keeps a
// rechecked permit open) is CLUSTER_VERSION and changes nothing; below
// 7 a register or recheck is logged without the signers the leader
// checked. What
// Apply does with a command already in logs changes only with the
// version in the state, never the build's: below 2 register and attest
// are applied as builds of version 1 apply them, below 6 reassign as
// builds of version 5 apply it, so members on either
// build replaying one log hold the same state. The leader loop polls in
// the background, and neither a poll nor a join's probe of its joiner
// holds a lock while it waits for an answer: a member that never answers
// delays no barrier sweep and no join. A raise's commit and a voter's
// addition are serialized on the leader: the raise commits only while
// the configuration it polled is the latest, and a joiner below the
// cluster version is refused (CLUSTER_VERSION). A member below the version
// halts at the raise entry or at a snapshot of that version, and a start
// on such a snapshot (a downgrade) fails, GATE_HALTED naming both
// versions; a backup of a higher version is not restored.
//
// # Snapshots
//
// The snapshot is the JSON encoding of State (encoding/json sorts map
// keys), so the same log yields byte-identical snapshots. Restore decodes
// strictly and checks State.Validate before replacing the state. A state
// carries its format's version, clusterVersion, omitted at 0: a snapshot
// at the baseline is what builds before the version handshake write and
// read. From version 3 it carries the cluster identity, clusterID, too,
// which a restore of a backup replaces with a new one.
package raftgate
