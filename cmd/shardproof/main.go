// Command shardproof publishes ML training-data shard releases so that a
// trainer can prove, before step 0, that it reads exactly one approved
// release. See README.md and DESIGN.md.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/pprof"
	"runtime/trace"
	"strconv"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/shardproof/shardproof/coordinator"
	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/objstore"
	_ "github.com/shardproof/shardproof/objstore/file" // file:// and plain paths
)

// version is set with -ldflags "-X main.version=…".
var version = "dev"

var rootCmd = &cobra.Command{
	Use:           "shardproof",
	Short:         "Publish training-data shard releases a trainer can prove it reads",
	SilenceUsage:  true,
	SilenceErrors: true,
	Version:       version,
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	rootCmd.SetContext(ctx)
	stopProfile := startProfile()
	err := rootCmd.Execute()
	stopProfile()
	stop()
	os.Exit(exitStatus(err))
}

// startProfile writes a CPU profile to $SHARDPROOF_CPUPROFILE, an
// execution trace to $SHARDPROOF_TRACE and, when the returned function is
// called, a heap profile (allocations since start included) to
// $SHARDPROOF_MEMPROFILE, if they are set (see README, Performance).
func startProfile() func() {
	tf := startRecording("SHARDPROOF_TRACE", "trace", trace.Start)
	f := startRecording("SHARDPROOF_CPUPROFILE", "cpu profile", pprof.StartCPUProfile)
	mem := os.Getenv("SHARDPROOF_MEMPROFILE")
	return func() {
		if tf != nil {
			trace.Stop()
			tf.Close()
		}
		if f != nil {
			pprof.StopCPUProfile()
			f.Close()
		}
		if mem != "" {
			m, err := os.Create(mem)
			if err != nil {
				fmt.Fprintf(os.Stderr, "shardproof: heap profile: %v\n", err)
				return
			}
			defer m.Close()
			if err := pprof.Lookup("allocs").WriteTo(m, 0); err != nil {
				fmt.Fprintf(os.Stderr, "shardproof: heap profile: %v\n", err)
			}
		}
	}
}

// startRecording creates the file $env names, if set, and starts writing
// to it; it returns nil (after saying why on stderr) when there is none.
func startRecording(env, what string, start func(io.Writer) error) *os.File {
	name := os.Getenv(env)
	if name == "" {
		return nil
	}
	f, err := os.Create(name)
	if err == nil {
		if err = start(f); err != nil {
			f.Close()
		}
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "shardproof: %s: %v\n", what, err)
		return nil
	}
	return f
}

// stderr is where exitStatus prints; tests replace it.
var stderr io.Writer = os.Stderr

// exitError carries a specific exit status without printing anything more
// (the command already wrote its result, e.g. verify's INVALID summary).
type exitError struct{ status int }

func (e *exitError) Error() string { return fmt.Sprintf("exit status %d", e.status) }

// exitStatus prints err as "shardproof: CODE: message" and maps it to the
// exit status of its code. The message is one line with what is not
// printable escaped (escapeUnprintable): it can carry what stored bytes
// say, such as a shard failure's detail naming a file's own schema
// fields (publish's snapshot member check, the trainer's decode). The
// line ends without a space: a message that ends with text that does (a
// run's cancel reason, a store's or a tool's answer) loses those spaces,
// and an empty message leaves "shardproof: CODE".
func exitStatus(err error) int {
	if err == nil {
		return errcode.ExitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.status
	}
	code, msg := codedMessage(err)
	if msg = strings.TrimRight(escapeUnprintable(msg), " "); msg == "" {
		fmt.Fprintf(stderr, "shardproof: %s\n", code)
	} else {
		fmt.Fprintf(stderr, "shardproof: %s: %s\n", code, msg)
	}
	slog.Debug("command failed", "code", code)
	return code.Exit()
}

// codedMessage returns err's code and its message without the code in
// front, as the "shardproof: CODE: message" line shows them.
func codedMessage(err error) (errcode.Code, string) {
	code := errcode.Of(err)
	head := string(code) + ": "
	if err.Error() == string(code) {
		return code, "" // a coded error without a message
	}
	// An uncoded error, or a coded one wrapped in context (a store key),
	// may not start with the code.
	msg := strings.TrimPrefix(err.Error(), head)
	// Context wrapped around a coded error repeats it ("GENERATION_CONFLICT:
	// publish main at generation 5: GENERATION_CONFLICT: alias main is at
	// …"): say it once.
	return code, strings.ReplaceAll(msg, ": "+head, ": ")
}

// countFlags are the int flags that count something (tasks, ranks,
// attempts, generations): a negative value is a usage error, where the
// commands took it for "the default" (0, where the help says so).
var countFlags = []string{
	"map-tasks", "reducers", "parallelism", "k8s-parallelism", "task-attempts",
	"k8s-backoff-limit-per-index", "retain", "world-size", "rank", "shards", "samples",
}

// checkCounts refuses a negative value of a count flag that was set.
func checkCounts(cmd *cobra.Command) error {
	for _, name := range countFlags {
		f := cmd.Flags().Lookup(name)
		if f == nil || !f.Changed || f.Value.Type() != "int" {
			continue
		}
		if n, err := strconv.Atoi(f.Value.String()); err == nil && n < 0 {
			return errcode.New(errcode.Usage, "%s: --%s %d: must not be negative", cmd.CommandPath(), name, n)
		}
	}
	return nil
}

func init() {
	rootCmd.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return errcode.Wrap(errcode.Usage, err, "%s", c.CommandPath())
	})
	rootCmd.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error {
		if err := checkCounts(cmd); err != nil {
			return err
		}
		return setupLogging(cmd)
	}
	// Runs after every cmd_*.go init (files initialize in name order), so
	// every command is registered.
	requireSubcommand(rootCmd)
}

// requireSubcommand makes every command that only groups others (the root,
// gate, run, store, manifest) print its help when called alone and refuse
// an unknown subcommand with USAGE, where cobra would exit 0 after the
// help or with an uncoded error.
func requireSubcommand(c *cobra.Command) {
	for _, sub := range c.Commands() {
		requireSubcommand(sub)
	}
	if !c.HasSubCommands() || c.Runnable() {
		return
	}
	c.Args = func(cmd *cobra.Command, args []string) error {
		if len(args) > 0 {
			return errcode.New(errcode.Usage, "unknown command %q for %q (see %s --help)", args[0], cmd.CommandPath(), cmd.CommandPath())
		}
		return nil
	}
	c.RunE = func(cmd *cobra.Command, args []string) error { return cmd.Help() }
}

// openStore opens --store, which must exist.
func openStore(cmd *cobra.Command, url string) (objstore.Store, error) {
	return objstore.Open(cmd.Context(), url)
}

// openJobStore opens --store for a command that runs a verification job.
// With a scratch URL (--scratch) the job's shuffle files and task commit
// records (jobs/) live in that store instead, which may be created: plans,
// reports and every input stay in --store.
func openJobStore(cmd *cobra.Command, url, scratch string) (objstore.Store, error) {
	s, err := openStore(cmd, url)
	if err != nil || scratch == "" {
		return s, err
	}
	sc, err := objstore.Create(cmd.Context(), scratch)
	if err != nil {
		return nil, errcode.Wrap(errcode.Of(err), err, "--scratch")
	}
	return objstore.NewRouted(s, sc, coordinator.JobsPrefix)
}

// createStore opens --store for a command that may start it (synth,
// stage): a file store's directory is created if missing.
func createStore(cmd *cobra.Command, url string) (objstore.Store, error) {
	return objstore.Create(cmd.Context(), url)
}

// exactArgs is cobra.ExactArgs with a USAGE code.
func exactArgs(n int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := cobra.ExactArgs(n)(cmd, args); err != nil {
			return errcode.Wrap(errcode.Usage, err, "%s", cmd.CommandPath())
		}
		return nil
	}
}

// unsetInt is an int64 flag whose default, "not given", is -1 to the
// code and shown as no default at all (pflag would print "(default -1)"
// after a usage text that says what not giving it means).
type unsetInt struct{ p *int64 }

func (u unsetInt) String() string {
	if u.p == nil || *u.p < 0 {
		return ""
	}
	return strconv.FormatInt(*u.p, 10)
}

func (u unsetInt) Set(s string) error {
	if s == "" {
		*u.p = -1
		return nil
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return err
	}
	*u.p = v
	return nil
}

func (unsetInt) Type() string { return "int" }

// unsetIntVar registers an unsetInt flag, initially -1.
func unsetIntVar(f *pflag.FlagSet, p *int64, name, usage string) {
	*p = -1
	f.Var(unsetInt{p}, name, usage)
}
