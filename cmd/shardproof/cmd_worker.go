package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/raftgate"
	"github.com/shardproof/shardproof/trainer"
)

func init() {
	var (
		store, gateURL, run, cacheDir, listen, readyFile string
		rank, parallelism                                int
		cacheMax                                         int64
		once, bytesOnly, quiet                           bool
		poll, rankWait                                   time.Duration
	)
	cmd := &cobra.Command{
		Use:   "worker --gate URL --store URL --run ID --rank K --cache DIR [--cache-max-bytes SIZE] [--listen ADDR] [--once]",
		Short: "Trainer sidecar: verify this rank's shards of the run's root into a local cache, attest, wait at the barrier",
		Long: `worker runs next to one trainer rank, as a sidecar or (with --once) an init
container. It reads the run's pinned root from the gate — never the alias —,
fetches the root manifest by digest, fills the digest-addressed cache DIR
with this rank's assigned shards read at their exact object versions
(re-hashing entries already there: a corrupt or stale entry is refetched and
counted) and decodes each one, attests (run, rank, root, shard digests), and
waits at the barrier. The trainer reads shard bytes from
DIR/sha256/<hex of the shard digest>. Workers of other ranks and runs
may share DIR.

With --cache-max-bytes SIZE (bytes, or with a unit: 500GiB, 2TB; 0, the
default, is unbounded) the entries and temp files in DIR stay within
SIZE. Before fetching anything, a rank whose assigned shards alone (their
sizes in the root manifest) exceed SIZE fails with CACHE_TOO_SMALL (exit
2) and changes nothing. Otherwise entries that are not this rank's are
evicted, least recently used first (a fetch or a hit marks an entry used,
in DIR/used/, across restarts), until the rank's shards fit, and the
bytes of those still to fetch are reserved (DIR/tmp/reserve.*, shrunk
as each fetch starts), so workers sharing DIR count each other's
fetches to come. Neither an
entry a live worker verified nor a temp file is ever evicted: every
worker holds a lock (flock) on each of its entries while it runs, an
open file per shard (a bounded worker fails with FILE_LIMIT, exit 3,
when they exceed ulimit -n). When the rest cannot make room the worker
fails with CACHE_FULL (exit 3) and removes nothing. With --once the
locks end with the worker: a trainer keeps the files it reads by holding
a shared flock on each ('flock -s FILE', or fcntl.flock in Python), else
they are kept only by being the most recently used. A bound needs unix
(flock); elsewhere it is USAGE. 'shardproof cache prune' evicts by the
same rules, offline.

With --once it prints "ready run=… rank=… root=… generation=… epoch=…
shards=… cache=…" on stdout as the barrier opens, then exits 0. A sidecar
prints no such line, not even when stopped while ready: its readiness is
/readyz and --ready-file, which end with it.

With --ready-file PATH it writes, while ready, a JSON file with the root,
the epoch and every assigned shard's id, digest and cache path: what an init
container hands to the trainer container on a shared volume. Its
directory must exist (USAGE otherwise, before any work), and with --once a
file that cannot be written fails the worker (IO) even once the barrier
has opened. A file already at PATH (an earlier worker's: a crash, the
node's previous job) is removed before any work, and a sidecar removes
its own when it stops, so the file never outlives the worker's readiness.

A rank at or above the run's world size waits up to --rank-wait (default
10m) for a reassignment that includes it, re-reading the run every --poll:
an orchestrator scaling out may start the new ranks before it sends
'run reassign'. It then fails with USAGE (a mistyped rank, a run that never
grew); --rank-wait 0 fails at once.

With --listen HOST:PORT (anything else is USAGE, before any work) it
serves /readyz (200 only while the barrier and the run's
permit are open), /healthz, /status (JSON, including the shard list) and
/metrics (Prometheus, labelled by release digest). Without --once it keeps
watching the run: a reassignment that resets this rank is verified and
attested again; a fence advance that closes the run's permit turns /readyz
red until a recheck renews it. --poll (default 2s) is from 10ms to 1h
(USAGE otherwise, before any work).

Exit status: 0 barrier open and permit open (--once), or a sidecar stopped
by a signal; 3 CANCELED: --once stopped by a signal before that; otherwise
the code of the failure: ROOT_MISMATCH, BARRIER_TIMEOUT, RUN_FAILED
(cancelled), RUN_PRUNED (the run ended and was pruned between two polls),
PERMIT_CLOSED (--once: a fence advance closed the run's permit),
DIGEST_MISMATCH / SIZE_MISMATCH / SCHEMA_MISMATCH / … (a shard of this rank
failed; the rank did not attest), CACHE_TOO_SMALL, CACHE_FULL and
FILE_LIMIT (--cache-max-bytes, above), GATE_UNAVAILABLE (also a minute
after the run's barrier deadline, when no gate has answered a rank
waiting there; members that answer GATE_HALTED, halted until upgraded,
are waited through like members that do not answer).`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if run == "" || !cmd.Flags().Changed("rank") || cacheDir == "" {
				return errcode.New(errcode.Usage, "%s: --run, --rank and --cache are required", cmd.CommandPath())
			}
			if rankWait < 0 {
				return errcode.New(errcode.Usage, "%s: --rank-wait %s: must not be negative", cmd.CommandPath(), rankWait)
			}
			if poll < trainer.MinPollInterval || poll > trainer.MaxPollInterval {
				// 0 and below were the default in silence, a few
				// nanoseconds re-read the run in a busy loop, and the
				// barrier's slices (five polls) wrapped negative above
				// about 512,000 h.
				return errcode.New(errcode.Usage, "%s: --poll %s: must be from %s to %s", cmd.CommandPath(), poll, trainer.MinPollInterval, trainer.MaxPollInterval)
			}
			if listen != "" {
				// As gate serve's --http-addr: a typo is no I/O
				// failure to retry.
				if err := raftgate.CheckHostPort(listen); err != nil {
					return errcode.New(errcode.Usage, "%s: --listen %q: want HOST:PORT, such as 127.0.0.1:9464 (%v)", cmd.CommandPath(), listen, err)
				}
			}
			if readyFile != "" {
				// Before any verification: the file is written only
				// once the barrier opens, and an init container that
				// cannot write it fails (IO) even then.
				if fi, err := os.Stat(filepath.Dir(readyFile)); err != nil || !fi.IsDir() {
					return errcode.New(errcode.Usage, "%s: --ready-file %s: its directory does not exist", cmd.CommandPath(), readyFile)
				}
			}
			s, err := openStore(cmd, store)
			if err != nil {
				return err
			}
			c, err := trainer.OpenCache(cacheDir)
			if err != nil {
				return err
			}
			defer c.Close()
			if err := c.SetMaxBytes(cacheMax); err != nil {
				return errcode.Wrap(errcode.Of(err), err, "%s: --cache-max-bytes", cmd.CommandPath())
			}
			g := newGateClient(gateURL)
			defer g.Close()
			cfg := trainer.Config{
				Gate: g, Store: s, Cache: c, Run: run, Rank: rank,
				Parallelism: parallelism, PollInterval: poll, ReadyFile: readyFile, RankWait: rankWait,
				Logger: cmdLogger(cmd.ErrOrStderr(), quiet).With("component", "worker"),
			}
			if rankWait == 0 {
				cfg.RankWait = -1 // at once
			}
			if !bytesOnly {
				cfg.Verify = trainer.DecodeVerifier(s)
			}
			w := trainer.NewWorker(cfg)
			ctx, cancel := context.WithCancel(cmd.Context())
			defer cancel()
			if listen != "" {
				ln, err := net.Listen("tcp", listen)
				if err != nil {
					return errcode.Wrap(errcode.IO, err, "--listen %s", listen)
				}
				srv := &http.Server{Handler: w.Handler(), ReadHeaderTimeout: 10 * time.Second}
				go srv.Serve(ln)
				defer srv.Close()
				fmt.Fprintf(cmd.ErrOrStderr(), "worker run=%s rank=%d serving http://%s (/readyz /healthz /status /metrics)\n", run, rank, ln.Addr())
			}
			err = w.Run(ctx, once)
			st := w.Status()
			// Only an init container hands on its readiness as it
			// exits; a sidecar that exits has stopped being ready.
			if err == nil && once && st.State == trainer.StateReady {
				fmt.Fprintf(cmd.OutOrStdout(), "ready run=%s rank=%d root=%s generation=%d epoch=%d shards=%d cache=%s\n",
					run, rank, st.Root, st.Generation, st.Epoch, len(st.Shards), st.Cache)
			}
			// Stopped by a signal: the error is the interruption's, not a
			// failure that landed at the same moment (ROOT_MISMATCH, …),
			// which is returned as it is.
			if c := errcode.Of(err); errors.Is(cmd.Context().Err(), context.Canceled) && err != nil &&
				(c == errcode.BarrierClosed || c == errcode.Canceled || errors.Is(err, context.Canceled)) {
				if once {
					// An init container that did not see the barrier
					// open must not exit as if it had.
					return errcode.New(errcode.Canceled, "stopped by a signal before the barrier opened")
				}
				if c == errcode.BarrierClosed {
					return nil // a sidecar stopped by a signal while waiting
				}
			}
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&store, "store", os.Getenv("SHARDPROOF_STORE"), "object store URL or path (default $SHARDPROOF_STORE)")
	f.StringVar(&gateURL, "gate", defaultGateURL(), "gate URL(s), comma-separated (env SHARDPROOF_GATE)")
	addGateTokenFlag(f)
	f.StringVar(&run, "run", "", "run id")
	f.IntVar(&rank, "rank", 0, "this worker's rank")
	f.StringVar(&cacheDir, "cache", "", "local cache directory (digest-addressed)")
	byteSizeVar(f, &cacheMax, "cache-max-bytes", "bound the cache's bytes, evicting entries not this rank's (least recently used first, none a live worker holds): bytes, or 500GiB, 2TB (0: unbounded)")
	f.StringVar(&listen, "listen", "", "serve /readyz, /healthz, /status and /metrics on this address, e.g. 127.0.0.1:9464")
	f.StringVar(&readyFile, "ready-file", "", "write the status (root, epoch, each shard's cache path) as JSON here while ready; removed when not")
	f.BoolVar(&once, "once", false, "exit 0 as soon as the barrier is open (init container)")
	f.IntVar(&parallelism, "parallelism", 4, "shards fetched and verified at once")
	f.DurationVar(&poll, "poll", 2*time.Second, "how often a ready sidecar re-reads its run (10ms to 1h)")
	f.DurationVar(&rankWait, "rank-wait", trainer.DefaultRankWait, "how long a rank outside the run's world size waits for a reassignment that includes it (0: fail at once)")
	f.BoolVar(&bytesOnly, "bytes-only", false, "check digests and sizes only, skip decoding (faster, misses schema and logical mismatches)")
	f.BoolVarP(&quiet, "quiet", "q", false, "log warnings only")
	rootCmd.AddCommand(cmd)
}
