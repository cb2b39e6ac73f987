package main

import (
	"bytes"
	"io"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// runInProcess runs `shardproof args…` in this process, with stdin (nil for
// none), and returns what it wrote to stdout and stderr. cobra keeps parsed
// flag values (and Changed) and a subcommand's first context between runs of
// one process, so the invoked command's flags are reset to their defaults
// and every command gets the test's context first.
func runInProcess(t *testing.T, stdin io.Reader, args ...string) (stdout, stderr []byte, err error) {
	t.Helper()
	if cmd, _, ferr := rootCmd.Find(args); ferr == nil {
		cmd.Flags().VisitAll(func(f *pflag.Flag) {
			if sv, ok := f.Value.(pflag.SliceValue); ok {
				sv.Replace(nil)
			} else {
				f.Value.Set(f.DefValue)
			}
			f.Changed = false
		})
	}
	var setCtx func(c *cobra.Command)
	setCtx = func(c *cobra.Command) {
		c.SetContext(t.Context())
		for _, sub := range c.Commands() {
			setCtx(sub)
		}
	}
	setCtx(rootCmd)
	var out, errOut bytes.Buffer
	rootCmd.SetArgs(args)
	rootCmd.SetIn(stdin)
	rootCmd.SetOut(&out)
	rootCmd.SetErr(&errOut)
	defer func() {
		rootCmd.SetIn(nil)
		rootCmd.SetOut(nil)
		rootCmd.SetErr(nil)
	}()
	err = rootCmd.Execute()
	return out.Bytes(), errOut.Bytes(), err
}
