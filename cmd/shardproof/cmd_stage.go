package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/objstore/file"
	"github.com/shardproof/shardproof/stage"
)

// stagingFlags are the flags stage and synth share.
type stagingFlags struct {
	store       string
	shards      int
	codec       string
	level       int
	tombstone   uint64
	benchmark   uint64
	snapshotOut string
	json        bool
}

func (f *stagingFlags) register(c *cobra.Command) {
	c.Flags().StringVar(&f.store, "store", os.Getenv("SHARDPROOF_STORE"), "object store URL or directory (required) (default $SHARDPROOF_STORE)")
	c.Flags().IntVar(&f.shards, "shards", 0, "number of release shards (required, >= 1)")
	c.Flags().StringVar(&f.codec, "compression", "zstd", "Parquet codec: zstd, snappy, gzip or none")
	c.Flags().IntVar(&f.level, "level", 3, "compression level: zstd 1-22, gzip 1-9, or 0 for the codec's own default (zstd 3, gzip 6); snappy and none have none (recorded, no effect)")
	c.Flags().Uint64Var(&f.tombstone, "tombstone-watermark", 0, "tombstone watermark the release is built against")
	c.Flags().Uint64Var(&f.benchmark, "benchmark-fence", 0, "benchmark fence the release is built against")
	c.Flags().StringVar(&f.snapshotOut, "snapshot-out", "", "also write the snapshot digest to this file")
	c.Flags().BoolVar(&f.json, "json", false, "print the result as JSON")
}

// check refuses, before a store is created or a row read, a codec and
// level the Parquet writer would refuse, and a --snapshot-out that could
// not be written (its directory missing, or a directory itself): that
// was IO once the release was written, and its root never printed.
func (f *stagingFlags) check() error {
	if f.snapshotOut != "" {
		if fi, err := os.Stat(filepath.Dir(f.snapshotOut)); err != nil || !fi.IsDir() {
			return errcode.New(errcode.Usage, "--snapshot-out %s: its directory does not exist", f.snapshotOut)
		}
		if fi, err := os.Stat(f.snapshotOut); err == nil && fi.IsDir() {
			return errcode.New(errcode.Usage, "--snapshot-out %s is a directory: give a file", f.snapshotOut)
		}
	}
	return stage.ParquetOptions{Codec: f.codec, Level: f.level}.Check()
}

func (f *stagingFlags) options(errOut io.Writer) (stage.Options, func()) {
	o := stage.Options{
		Parquet:            stage.ParquetOptions{Codec: f.codec, Level: f.level},
		TombstoneWatermark: f.tombstone,
		BenchmarkFence:     f.benchmark,
	}
	if fl, ok := errOut.(*os.File); ok && term.IsTerminal(int(fl.Fd())) {
		bar := progressbar.NewOptions(-1,
			progressbar.OptionSetWriter(errOut),
			progressbar.OptionSetDescription("writing shards and member files"),
			progressbar.OptionShowCount(),
			progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionClearOnFinish(),
		)
		o.Progress = func(done, total int) {
			if bar.GetMax() != total {
				bar.ChangeMax(total)
			}
			bar.Set(done)
		}
		return o, func() { bar.Finish() }
	}
	return o, func() {}
}

// stageOutput is the --json form of a staging result.
type stageOutput struct {
	Root         string  `json:"root"`
	Snapshot     string  `json:"snapshot"`
	RecordSchema string  `json:"recordSchema"`
	Shards       int64   `json:"shards"`
	Records      int64   `json:"records"`
	Tokens       int64   `json:"tokens"`
	StoredBytes  int64   `json:"storedBytes"`
	Created      int     `json:"created"`
	Seconds      float64 `json:"seconds"`
}

// printStaged prints the root first, then the snapshot, one per line, or
// the JSON object with --json.
func (f *stagingFlags) printStaged(w io.Writer, res stage.Result, took time.Duration) error {
	if f.snapshotOut != "" {
		if err := os.WriteFile(f.snapshotOut, []byte(res.Snapshot.String()+"\n"), 0o644); err != nil {
			return errcode.Wrap(errcode.IO, err, "--snapshot-out")
		}
	}
	if !f.json {
		fmt.Fprintf(w, "root %s\nsnapshot %s\n", res.Root, res.Snapshot)
		return nil
	}
	out := stageOutput{
		Root: res.Root.String(), Snapshot: res.Snapshot.String(), RecordSchema: res.RecordSchema.String(),
		Shards: res.Release.Totals.Shards, Records: res.Release.Totals.Records, Tokens: res.Release.Totals.Tokens,
		Created: res.Created, Seconds: took.Seconds(),
	}
	for _, s := range res.Release.Shards {
		out.StoredBytes += s.Size
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

var stageFlags struct {
	stagingFlags
	seed uint64
}

var stageCmd = &cobra.Command{
	Use:   "stage --store URL --shards S [--seed X] FILE.parquet...",
	Short: "Stage source Parquet files as a release: shards, snapshot and manifest",
	Long: `stage reads source rows from Parquet files carrying the record schema
(sample_id, source_id, source_version, split, lang, text, tokens), sorts
them with the sort seed, writes S Parquet shards (zstd unless
--compression says otherwise), the snapshot member files, the snapshot
manifest and the release manifest to blobs/sha256/<hex> with conditional
creates, and prints the root and snapshot digests.
Staging the same input again prints the same digests and writes nothing.

Every input needs those columns, with no nulls: sample_id, source_id,
split, lang and text as Parquet strings, source_version and tokens as
INT64. sample_id must be unique across the inputs; every string column
valid UTF-8; split at most 255 bytes; tokens non-negative and
summing to at most 2^63-1. One shard's values of a string column may
hold at most 2 GiB (give more --shards otherwise). Anything else is
BAD_INPUT naming the input (and the row or column), found before
anything is stored. An input that cannot be opened, or a directory, is
USAGE.`,
	Args: func(cmd *cobra.Command, args []string) error {
		if len(args) == 0 {
			return errcode.New(errcode.Usage, "%s: give at least one source Parquet file", cmd.CommandPath())
		}
		return nil
	},
	RunE: func(cmd *cobra.Command, args []string) error {
		f := &stageFlags
		if f.shards < 1 {
			return errcode.New(errcode.Usage, "--shards must be at least 1")
		}
		if err := f.check(); err != nil {
			return err
		}
		for _, in := range args {
			// A file the command line names that is not there is a
			// usage error, as for every other command's FILE, not
			// BAD_INPUT, exit 1, which reads as "checked and invalid".
			fh, err := openArgFile("input", in)
			if err != nil {
				return err
			}
			fh.Close()
		}
		s, err := createStore(cmd, f.store)
		if err != nil {
			return err
		}
		o, done := f.options(cmd.ErrOrStderr())
		start := time.Now()
		res, err := stage.Stage(cmd.Context(), s, stage.StageOptions{Inputs: args, Shards: f.shards, Seed: f.seed, Options: o})
		done()
		if err != nil {
			// Bad input changes nothing: not even an empty store.
			if fs, ok := s.(*file.Store); ok {
				fs.RemoveIfUnused()
			}
			return err
		}
		return f.printStaged(cmd.OutOrStdout(), res, time.Since(start))
	},
}

func init() {
	stageFlags.register(stageCmd)
	stageCmd.Flags().Uint64Var(&stageFlags.seed, "seed", 0, "sort seed recorded in build.sortSeed")
	rootCmd.AddCommand(stageCmd)
}
