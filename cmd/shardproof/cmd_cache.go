package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/trainer"
)

var cacheCmd = &cobra.Command{
	Use:   "cache",
	Short: "Operator tools on a trainer's shard cache (worker --cache)",
}

var cachePruneFlags struct {
	dir      string
	maxBytes int64
	dryRun   bool
}

var cachePruneCmd = &cobra.Command{
	Use:   "prune --cache DIR --max-bytes SIZE [--dry-run]",
	Short: "Evict cache entries, least recently used first, until the cache fits SIZE; never one a live worker holds",
	Long: `prune evicts entries from a worker's cache (worker --cache DIR) by the
rules a worker with --cache-max-bytes follows, with no shard of its own:
least recently used first (a worker's fetch or hit marks an entry used,
in DIR/used/; an entry no worker marked counts from its modification
time), until the entries and temp files in DIR take at most --max-bytes
(bytes, or with a unit: 500GiB, 2TB; 0 evicts every entry it may). An
entry a live worker holds (each holds a lock on its verified entries
while it runs) is skipped, and so are temp files, which fills are
writing. Workers may run meanwhile.

It prints a line for each entry removed and each skipped as in use
(digest, bytes, last use), then a summary: entries and bytes removed,
entries skipped, and the cache's bytes after. --dry-run removes nothing
and prints what it would remove. A cache that stays above --max-bytes
once every entry it may evict is gone is CACHE_FULL (exit 3), after
removing them. DIR must be a cache (hold sha256/): anything else is
USAGE. Unix only: elsewhere there are no locks to tell the entries in use.`,
	Args: exactArgs(0),
	RunE: func(cmd *cobra.Command, _ []string) error {
		f := cachePruneFlags
		if f.dir == "" || !cmd.Flags().Changed("max-bytes") {
			return errcode.New(errcode.Usage, "%s: --cache and --max-bytes are required", cmd.CommandPath())
		}
		// Not a cache OpenCache would create: a mistyped --cache is no
		// new, empty cache.
		if _, err := os.Lstat(filepath.Join(f.dir, "sha256")); errors.Is(err, fs.ErrNotExist) {
			return errcode.New(errcode.Usage, "%s: --cache %s is not a worker cache (no sha256/ in it)", cmd.CommandPath(), f.dir)
		}
		c, err := trainer.OpenCache(f.dir)
		if err != nil {
			return err
		}
		defer c.Close()
		ev, err := c.Prune(cmd.Context(), f.maxBytes, f.dryRun)
		if errcode.Of(err) != errcode.CacheFull && err != nil {
			return err
		}
		removed := "removed"
		if f.dryRun {
			removed = "would remove"
		}
		out := cmd.OutOrStdout()
		lines := func(action string, es []trainer.CacheEntry) error {
			for _, e := range es {
				if _, err := fmt.Fprintf(out, "%s\t%s\t%d bytes\tused %s\n", action, e.Digest, e.Size, e.Used.UTC().Format(time.RFC3339)); err != nil {
					return errcode.Wrap(errcode.IO, err, "write listing")
				}
			}
			return nil
		}
		if werr := lines(removed, ev.Removed); werr != nil {
			return werr
		}
		if werr := lines("in use", ev.InUse); werr != nil {
			return werr
		}
		if _, werr := fmt.Fprintf(out, "%s %d entries, %d bytes; skipped %d in use, %d bytes; cache %d bytes (bound %d)\n",
			removed, len(ev.Removed), ev.RemovedBytes(), len(ev.InUse), ev.InUseBytes(), ev.After, f.maxBytes); werr != nil {
			return errcode.Wrap(errcode.IO, werr, "write summary")
		}
		return err
	},
}

func init() {
	f := cachePruneCmd.Flags()
	f.StringVar(&cachePruneFlags.dir, "cache", "", "the worker's cache directory")
	byteSizeVar(f, &cachePruneFlags.maxBytes, "max-bytes", "evict until the cache's entries and temp files take at most this: bytes, or 500GiB, 2TB")
	f.BoolVar(&cachePruneFlags.dryRun, "dry-run", false, "print what would be removed and remove nothing")
	cacheCmd.AddCommand(cachePruneCmd)
	rootCmd.AddCommand(cacheCmd)
}
