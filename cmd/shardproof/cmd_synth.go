package main

import (
	"time"

	"github.com/spf13/cobra"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/stage"
)

var synthFlags struct {
	stagingFlags
	samples int
	seed    int64
}

var synthCmd = &cobra.Command{
	Use:   "synth --samples N --shards S --seed X --store DIR",
	Short: "Generate a realistic synthetic dataset from a seed and stage it",
	Long: `synth generates N records deterministically from the seed (several
sources with versions, train/val/test ~90/5/5, languages, English-like text
of ~1 KB on average, token counts) and stages them like 'shardproof stage'.
The same flags always print the same root and snapshot digests; a second
run writes nothing.`,
	Args: exactArgs(0),
	RunE: func(cmd *cobra.Command, args []string) error {
		f := &synthFlags
		if f.samples < 1 {
			return errcode.New(errcode.Usage, "--samples must be at least 1")
		}
		if f.shards < 1 {
			return errcode.New(errcode.Usage, "--shards must be at least 1")
		}
		if f.seed < 0 {
			return errcode.New(errcode.Usage, "--seed must be at least 0, got %d", f.seed)
		}
		if err := f.check(); err != nil {
			return err
		}
		s, err := createStore(cmd, f.store)
		if err != nil {
			return err
		}
		o, done := f.options(cmd.ErrOrStderr())
		start := time.Now()
		res, err := stage.Synth(cmd.Context(), s, stage.SynthOptions{Samples: f.samples, Shards: f.shards, Seed: f.seed, Options: o})
		done()
		if err != nil {
			return err
		}
		return f.printStaged(cmd.OutOrStdout(), res, time.Since(start))
	},
}

func init() {
	synthFlags.register(synthCmd)
	synthCmd.Flags().IntVar(&synthFlags.samples, "samples", 0, "number of records to generate (required)")
	synthCmd.Flags().Int64Var(&synthFlags.seed, "seed", 0, "seed of every generated value and of the sort")
	rootCmd.AddCommand(synthCmd)
}
