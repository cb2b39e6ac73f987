package main

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/shardproof/shardproof/coordinator"
	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/objstore"
	_ "github.com/shardproof/shardproof/objstore/s3" // s3://bucket/prefix
)

// store ls|get|put|prune-jobs: raw access to the object store, like `crane blob` or
// `restic cat`. It bypasses digests on purpose (get prints whatever a version
// holds), so it is a debugging and scripting tool, not a verifier.
var storeCmd = &cobra.Command{
	Use:   "store",
	Short: "List, read and write raw objects in a store; prune abandoned job scratch",
	Long: `List, read and write raw objects in a store.

The store is a directory (a plain path or file:///abs/path) or an S3 bucket
with versioning (s3://bucket/prefix?endpoint=…&path_style=true&region=…).
--store defaults to $SHARDPROOF_STORE.`,
}

var storeFlags struct {
	url       string
	version   string
	overwrite bool
}

var storeLsCmd = &cobra.Command{
	Use:   "ls [PREFIX]",
	Short: "List keys with their latest version and size",
	Args: func(cmd *cobra.Command, args []string) error {
		if len(args) > 1 {
			return errcode.New(errcode.Usage, "%s: at most one PREFIX", cmd.CommandPath())
		}
		return nil
	},
	RunE: func(cmd *cobra.Command, args []string) error {
		s, err := openStore(cmd, storeFlags.url)
		if err != nil {
			return err
		}
		prefix := ""
		if len(args) == 1 {
			prefix = args[0]
		}
		out := cmd.OutOrStdout()
		after := ""
		for {
			page, err := s.List(cmd.Context(), prefix, after, 1000)
			if err != nil {
				return err
			}
			for _, o := range page.Objects {
				if _, err := fmt.Fprintf(out, "%s\t%s\t%d\n", o.Key, o.Version, o.Size); err != nil {
					return errcode.Wrap(errcode.IO, err, "write listing")
				}
			}
			if page.Next == "" {
				return nil
			}
			after = page.Next
		}
	},
}

var storeGetCmd = &cobra.Command{
	Use:   "get KEY",
	Short: "Write the exact bytes of a key's version (default: latest) to stdout",
	Args:  exactArgs(1),
	RunE: func(cmd *cobra.Command, args []string) error {
		s, err := openStore(cmd, storeFlags.url)
		if err != nil {
			return err
		}
		rc, err := s.Get(cmd.Context(), args[0], objstore.Version(storeFlags.version))
		if err != nil {
			return err
		}
		defer rc.Close()
		if _, err := io.Copy(cmd.OutOrStdout(), objstore.ContextReader(cmd.Context(), rc)); err != nil {
			if errcode.Of(err) == errcode.Internal {
				err = errcode.Wrap(errcode.IO, err, "get %s", args[0])
			}
			return err
		}
		return nil
	},
}

var storePutCmd = &cobra.Command{
	Use:   "put KEY [FILE|-]",
	Short: "Create KEY from FILE or stdin and print the new version",
	Long: `Create KEY from FILE (or stdin when FILE is "-" or absent) and print the
new version id. By default put is a conditional create: if KEY already has
a version it fails with PRECONDITION_FAILED (exit status 4) and writes
nothing, unless its latest version holds exactly these bytes (a create
whose answer was lost and was sent again, or the same put run twice):
then it prints that version and succeeds. --overwrite adds a new version
unconditionally; earlier versions stay readable with get --version.
A FILE that cannot be opened, or a directory, is USAGE (exit status 2)
and writes nothing.`,
	Args: func(cmd *cobra.Command, args []string) error {
		if len(args) < 1 || len(args) > 2 {
			return errcode.New(errcode.Usage, "%s: want KEY [FILE|-]", cmd.CommandPath())
		}
		return nil
	},
	RunE: func(cmd *cobra.Command, args []string) error {
		if err := objstore.ValidateKey(args[0]); err != nil {
			return err
		}
		s, err := openStore(cmd, storeFlags.url)
		if err != nil {
			return err
		}
		body := cmd.InOrStdin()
		opts := objstore.PutOptions{IfNoneMatch: !storeFlags.overwrite}
		if len(args) == 2 && args[1] != "-" {
			f, err := openArgFile("put "+args[0], args[1])
			if err != nil {
				return err
			}
			defer f.Close()
			if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() {
				opts.Size = fi.Size()
			}
			body = f
		}
		var v objstore.Version
		if opts.IfNoneMatch {
			// A create whose answer was lost and that the SDK sent
			// again meets its own object: those bytes are success.
			v, _, err = objstore.CreateOrMatch(cmd.Context(), s, args[0], body, opts)
		} else {
			v, err = s.Put(cmd.Context(), args[0], body, opts)
		}
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(cmd.OutOrStdout(), v)
		return err
	},
}

var pruneFlags struct {
	olderThan time.Duration
	dryRun    bool
}

var storePruneJobsCmd = &cobra.Command{
	Use:   "prune-jobs",
	Short: "Delete the scratch (jobs/<plan>/) of verifications abandoned long enough ago",
	Long: `verify deletes its job's shuffle files and task commit records once the
report is stored. A verification that was interrupted and never resumed
(verify --resume PLAN), or one run with --keep-job, leaves them behind.
prune-jobs deletes every job whose newest object is older than
--older-than (default 24h), reduce commit records first. Age is judged
by the store's clock, which times the objects (S3: its server's), not
by this machine's: prune-jobs writes one probe object under jobs/clock/
to read it, and deletes it again (and any an interrupted prune left,
once an hour old). A job whose removal kept only its hold records,
released (its end cut a renewal of its record that the store may still
write), is pruned like any other. A verification
still running is left alone: its tasks write as they go, and a verify
waiting for an engine (process, Slurm, Kubernetes --submit) writes a new
version of jobs/<plan>/lease every 10 minutes, so a reduce array held in
a queue after the map phase keeps its inputs. Jobs run by hand (task
commands, or --emit alone) have no lease: give them a cutoff longer than
their longest gap between phases. A job that a live process holds (a
verify --resume of it, or another prune-jobs deleting it) is kept, and
printed with the holder. Each job is printed with its object count and
bytes, and when none is deleted (or, with --dry-run, would be) a last
line says so: "nothing to prune: N jobs kept, none abandoned for more
than D". --dry-run only prints, and writes nothing: it judges ages, and
holders on other machines, by this machine's clock, and warns that the
store's may disagree (a real prune also writes a probe to read the
store's clock when it judges a holder on another machine).`,
	Args: exactArgs(0),
	RunE: func(cmd *cobra.Command, _ []string) error {
		if pruneFlags.olderThan < 0 {
			return errcode.New(errcode.Usage, "%s: --older-than must not be negative", cmd.CommandPath())
		}
		s, err := openStore(cmd, storeFlags.url)
		if err != nil {
			return err
		}
		out := cmd.OutOrStdout()
		kept, pruned := 0, 0
		err = coordinator.PruneJobs(cmd.Context(), s, coordinator.PruneOptions{OlderThan: pruneFlags.olderThan, DryRun: pruneFlags.dryRun}, func(j coordinator.PrunedJob) error {
			if j.Action == coordinator.PruneKept {
				kept++
			} else {
				pruned++
			}
			holder := ""
			if inUse := j.InUse; inUse != nil {
				// A verify --resume of an old job, or another prune.
				h := &inUse.Holder
				holder = fmt.Sprintf("\tin use by %q (pid %d on host %s, %s)", h.Command, h.Process.PID, h.Process.Host, h.Purpose)
				if inUse.Unreadable != nil {
					holder = fmt.Sprintf("\tin use by a holder whose record could not be read (generation %d: %v)", h.Generation, inUse.Unreadable)
				}
				if inUse.Estimated && !inUse.Local {
					holder += fmt.Sprintf(", renewed %s ago by this machine's clock", inUse.Age.Round(time.Second))
				}
			}
			if _, err := fmt.Fprintf(out, "%s\tjobs/%s/\t%d objects\t%d bytes\tnewest %s%s\n",
				j.Action, j.Plan.Hex(), j.Objects, j.Bytes, j.Newest.UTC().Format(time.RFC3339), holder); err != nil {
				return errcode.Wrap(errcode.IO, err, "write listing")
			}
			return nil
		})
		if err != nil || pruned > 0 {
			return err
		}
		// Silence would not tell an empty prune from one that looked
		// in the wrong store.
		jobs := "jobs"
		if kept == 1 {
			jobs = "job"
		}
		if _, err := fmt.Fprintf(out, "nothing to prune: %d %s kept, none abandoned for more than %s\n", kept, jobs, pruneFlags.olderThan); err != nil {
			return errcode.Wrap(errcode.IO, err, "write listing")
		}
		return nil
	},
}

func init() {
	storePruneJobsCmd.Flags().DurationVar(&pruneFlags.olderThan, "older-than", 24*time.Hour, "delete jobs whose newest object is older than this")
	storePruneJobsCmd.Flags().BoolVar(&pruneFlags.dryRun, "dry-run", false, "print what would be deleted and delete nothing")
	storeCmd.PersistentFlags().StringVar(&storeFlags.url, "store", os.Getenv("SHARDPROOF_STORE"), "store URL or path (default $SHARDPROOF_STORE)")
	storeGetCmd.Flags().StringVar(&storeFlags.version, "version", "", "read this version instead of the latest")
	storePutCmd.Flags().BoolVar(&storeFlags.overwrite, "overwrite", false, "add a new version even if KEY exists")
	storeCmd.AddCommand(storeLsCmd, storeGetCmd, storePutCmd, storePruneJobsCmd)
	rootCmd.AddCommand(storeCmd)
}
