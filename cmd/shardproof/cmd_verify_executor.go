package main

import (
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/shardproof/shardproof/coordinator"
	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/shuffle"
)

// executorFlags are verify's --executor and the settings of each engine.
// verify hands its run to them when an executor other than local is chosen.
type executorFlags struct {
	executor   string
	taskBinary string
	taskStore  string
	attempts   int

	slurmDir, slurmPartition string
	slurmArgs                []string

	k8s    coordinator.Kubernetes
	submit bool
	k8sEnv []string
}

// addFlags registers --executor and the engine settings on verify's flags.
func (x *executorFlags) addFlags(f *pflag.FlagSet) {
	f.StringVar(&x.executor, "executor", "local", "where tasks run: local (goroutines), process (child processes), slurm (job arrays), kubernetes (Indexed Jobs)")
	f.StringVar(&x.taskBinary, "task-binary", "", "shardproof executable the process and slurm tasks run (default: this one)")
	f.StringVar(&x.taskStore, "task-store", "", "store URL as the tasks reach it (default: --store, made absolute)")
	f.IntVar(&x.attempts, "task-attempts", 3, "runs of one task before it fails (process, slurm; kubernetes: --k8s-backoff-limit-per-index)")
	f.StringVar(&x.slurmDir, "slurm-dir", "", "shared directory for the Slurm task script and logs (default: a new temp directory, kept for its logs)")
	f.StringVar(&x.slurmPartition, "slurm-partition", "", "Slurm partition (default: the cluster's default)")
	f.StringArrayVar(&x.slurmArgs, "slurm-arg", nil, "extra sbatch argument (repeatable), e.g. --slurm-arg=--time=30")
	f.StringVar(&x.k8s.Emit, "emit", "", "kubernetes: write the Indexed Job YAML files to this directory")
	f.BoolVar(&x.submit, "submit", false, "kubernetes: apply the Jobs with kubectl, wait for them and aggregate (with --resume, a Job of the plan an earlier run left failed is deleted, waiting at most 5m for its pods to go, and applied again)")
	f.StringVar(&x.k8s.Image, "image", "", "kubernetes: container image holding the shardproof binary")
	f.StringVar(&x.k8s.Command, "image-command", "shardproof", "kubernetes: shardproof executable inside the image")
	f.StringVar(&x.k8s.Namespace, "namespace", "", "kubernetes: namespace of the Jobs")
	f.IntVar(&x.k8s.BackoffLimitPerIndex, "k8s-backoff-limit-per-index", 2, "kubernetes: retries of one index")
	f.IntVar(&x.k8s.Parallelism, "k8s-parallelism", 0, "kubernetes: pods of one Job at once (default: all)")
	f.StringVar(&x.k8s.Kubectl, "kubectl", "kubectl", "kubernetes: kubectl executable (--submit)")
	f.StringArrayVar(&x.k8sEnv, "k8s-env", nil, "kubernetes: container environment variable NAME=VALUE (repeatable)")
}

// executorOnly names the executors each engine setting applies to; given
// with another executor it would be silently ignored.
var executorOnly = map[string][]string{
	"task-binary":                 {"process", "slurm"},
	"task-store":                  {"process", "slurm", "kubernetes"},
	"task-attempts":               {"process", "slurm"},
	"slurm-dir":                   {"slurm"},
	"slurm-partition":             {"slurm"},
	"slurm-arg":                   {"slurm"},
	"emit":                        {"kubernetes"},
	"submit":                      {"kubernetes"},
	"image":                       {"kubernetes"},
	"image-command":               {"kubernetes"},
	"namespace":                   {"kubernetes"},
	"k8s-backoff-limit-per-index": {"kubernetes"},
	"k8s-parallelism":             {"kubernetes"},
	"kubectl":                     {"kubernetes"},
	"k8s-env":                     {"kubernetes"},
}

// checkApplies refuses an engine setting given for an executor it does
// not apply to, and a --task-attempts below 1.
func (x *executorFlags) checkApplies(cmd *cobra.Command) error {
	for _, name := range slices.Sorted(maps.Keys(executorOnly)) {
		if ex := executorOnly[name]; cmd.Flags().Changed(name) && !slices.Contains(ex, x.executor) {
			return errcode.New(errcode.Usage, "verify: --%s applies to --executor %s, not %s", name, strings.Join(ex, " or "), x.executor)
		}
	}
	if cmd.Flags().Changed("task-attempts") && x.attempts < 1 {
		return errcode.New(errcode.Usage, "verify: --task-attempts %d: a task runs at least once", x.attempts)
	}
	return nil
}

// run is verify with an external engine: plan, run the tasks there,
// aggregate here, print like the local executor.
//
// With resume (a plan digest) it plans nothing: the engine runs the plan's
// tasks that have not committed (those that have return at once), as
// after a verify that was killed, an engine that ran out of attempts, or
// a cluster that lost track of its jobs.
func (x *executorFlags) run(cmd *cobra.Command, resume string) error {
	var (
		opts     coordinator.Options
		storeURL string
		asJSON   bool
		err      error
		pd       manifest.Digest
	)
	if resume != "" {
		f := cmd.Flags()
		if pd, err = manifest.ParseDigest(resume); err != nil {
			return errcode.Wrap(errcode.Usage, err, "verify: --resume")
		}
		storeURL, _ = f.GetString("store")
		asJSON, _ = f.GetBool("json")
		if opts.Parallelism, _ = f.GetInt("parallelism"); opts.Parallelism <= 0 {
			opts.Parallelism = runtime.NumCPU()
		}
	} else if opts, storeURL, asJSON, err = verifyOptionsFromFlags(cmd); err != nil {
		return err
	}
	taskStore := x.taskStore
	if taskStore == "" {
		if taskStore, err = taskURL(storeURL, "--store"); err != nil {
			return err
		}
	}
	scratch, _ := cmd.Flags().GetString("scratch")
	if opts.TaskScratch, err = taskURL(scratch, "--scratch"); err != nil {
		return err
	}
	var engine coordinator.Engine
	switch x.executor {
	case "process":
		engine = &coordinator.Process{Binary: x.taskBinary, Parallelism: opts.Parallelism, Attempts: x.attempts}
	case "slurm":
		engine = &coordinator.Slurm{Binary: x.taskBinary, Dir: x.slurmDir, Attempts: x.attempts,
			Partition: x.slurmPartition, Args: x.slurmArgs}
	case "kubernetes":
		x.k8s.Env = map[string]string{}
		for _, kv := range x.k8sEnv {
			k, v, ok := strings.Cut(kv, "=")
			if !ok || k == "" {
				return errcode.New(errcode.Usage, "verify: --k8s-env %q: want NAME=VALUE", kv)
			}
			x.k8s.Env[k] = v
		}
		// The pods log as this verify does, as process and Slurm tasks,
		// which inherit the environment, do; --k8s-env says otherwise.
		for name, set := range map[string]bool{"SHARDPROOF_LOG_FORMAT": logSettings.json, "SHARDPROOF_LOG_LEVEL": logSettings.level != slog.LevelInfo} {
			if _, given := x.k8s.Env[name]; set && !given {
				x.k8s.Env[name] = os.Getenv(name)
			}
		}
		if x.k8s.Image == "" {
			return errcode.New(errcode.Usage, "verify: --executor kubernetes needs --image IMAGE, a container image holding the shardproof binary")
		}
		if !x.submit && resume != "" {
			return errcode.New(errcode.Usage, "verify: --resume with --executor kubernetes needs --submit (it runs the plan's Jobs)")
		}
		if !x.submit {
			// Only planned here: no report to print or measure.
			for _, name := range []string{"json", "metrics-file"} {
				if cmd.Flags().Changed(name) {
					return errcode.New(errcode.Usage, "verify: --%s needs a report, and --emit without --submit only plans (the printed task aggregate stores and names it)", name)
				}
			}
			return x.emitOnly(cmd, opts, taskStore)
		}
		engine = &x.k8s
	default:
		return errcode.New(errcode.Usage, "verify: --executor %q: want local, process, slurm or kubernetes", x.executor)
	}
	s, err := openJobStore(cmd, storeURL, scratch)
	if err != nil {
		return err
	}
	if err := takeOverJob(cmd, s, pd); err != nil {
		return err
	}
	if resume == "" {
		if _, pd, err = coordinator.NewPlan(cmd.Context(), s, opts.PlanOptions); err != nil {
			return err
		}
		slog.Info("verification planned; if it stops, verify --resume with this plan finishes it", "plan", pd.String(), "executor", x.executor)
	}
	prog := newVerifyProgress(cmd.ErrOrStderr())
	out, err := coordinator.RunWithProgress(cmd.Context(), s, coordinator.PlanRef{Store: taskStore, Plan: pd, Scratch: opts.TaskScratch}, engine, prog.update)
	prog.finish()
	if c := errcode.Of(err); err != nil && c != errcode.JobInUse && c != errcode.NoSuchBucket {
		scratchArg, jobs := "", storeURL
		if scratch != "" {
			scratchArg, jobs = " --scratch "+shellQuote(scratch), scratch
		}
		fmt.Fprintf(cmd.ErrOrStderr(), "shardproof: verify: plan %s stopped; its committed tasks are kept: `shardproof verify --executor %s --store %s%s --resume %s` (with this executor's flags, or --executor local) finishes it, `shardproof store prune-jobs --store %s` deletes what is left once it is old\n",
			pd, x.executor, shellQuote(storeURL), scratchArg, pd, shellQuote(jobs))
	}
	if err != nil {
		// Another process holds the job: its message says what to do.
		return err
	}
	return finishVerify(cmd, s, out, asJSON)
}

// emitOnly plans and writes the Indexed Jobs without running anything,
// and says how to run them and aggregate.
func (x *executorFlags) emitOnly(cmd *cobra.Command, opts coordinator.Options, taskStore string) error {
	if x.k8s.Emit == "" {
		return errcode.New(errcode.Usage, "verify: --executor kubernetes needs --emit DIR, --submit, or both")
	}
	storeURL, _ := cmd.Flags().GetString("store")
	// Only the plan is written here, to --store: the scratch is the
	// pods' business, and may be reachable from the cluster alone.
	s, err := openStore(cmd, storeURL)
	if err != nil {
		return err
	}
	plan, pd, err := coordinator.NewPlan(cmd.Context(), s, opts.PlanOptions)
	if err != nil {
		return err
	}
	ref := coordinator.PlanRef{Store: taskStore, Plan: pd, Scratch: opts.TaskScratch}
	paths, err := x.k8s.EmitJobs(x.k8s.Emit, ref, len(plan.MapTasks), len(plan.Reducers))
	if err != nil {
		return err
	}
	w := cmd.OutOrStdout()
	fmt.Fprintf(w, "plan %s\n", ref)
	kubectl := "kubectl"
	if x.k8s.Namespace != "" {
		kubectl += " -n " + shellQuote(x.k8s.Namespace)
	}
	// kubectl wait takes one condition: waiting for Complete alone sat
	// out its whole timeout on a Job that had Failed. The loop ends on
	// either and fails on Failed (with a plain false, which set -e
	// honours: it ignores a failure inverted with !).
	for i, kind := range []coordinator.Kind{coordinator.KindMap, coordinator.KindReduce} {
		job := "job/" + x.k8s.JobName(ref, kind)
		fmt.Fprintf(w, "%[1]s apply -f %[2]s && until c=$(%[1]s get %[3]s -o jsonpath='{.status.conditions[?(@.status==\"True\")].type}') && echo \"$c\" | grep -Eq 'Complete|Failed'; do sleep 10; done && case $c in *Failed*) echo %[3]s failed >&2; false;; esac\n",
			kubectl, shellQuote(paths[i]), job)
	}
	extra := ""
	if ref.Scratch != "" {
		extra += " --scratch " + shellQuote(ref.Scratch)
	}
	if keep, _ := cmd.Flags().GetBool("keep-job"); keep {
		extra += " --keep-job"
	}
	if key, _ := cmd.Flags().GetString("sign-key"); key != "" {
		// The aggregate makes the report, so it signs it: verify has
		// none to sign here, and dropped the key without a word.
		abs, err := filepath.Abs(key)
		if err != nil {
			return errcode.Wrap(errcode.Usage, err, "verify: --sign-key %q", key)
		}
		extra += " --sign-key " + shellQuote(abs)
	}
	fmt.Fprintf(w, "shardproof task aggregate --plan %s%s\n", shellQuote(ref.String()), extra)
	return nil
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// taskURL is a store URL as tasks reach it: a plain path made absolute,
// since tasks run in other working directories; "" stays "".
func taskURL(url, flag string) (string, error) {
	if url == "" || strings.Contains(url, "://") {
		return url, nil
	}
	abs, err := filepath.Abs(url)
	if err != nil {
		return "", errcode.Wrap(errcode.Usage, err, "verify: %s %q", flag, url)
	}
	return abs, nil
}

// verifyOptionsFromFlags reads verify's own flags (defined in
// cmd_verify.go) into coordinator options.
func verifyOptionsFromFlags(cmd *cobra.Command) (opts coordinator.Options, store string, asJSON bool, err error) {
	f := cmd.Flags()
	store, _ = f.GetString("store")
	asJSON, _ = f.GetBool("json")
	opts.MapTasks, _ = f.GetInt("map-tasks")
	opts.Reducers, _ = f.GetInt("reducers")
	opts.Parallelism, _ = f.GetInt("parallelism")
	if opts.Parallelism <= 0 {
		opts.Parallelism = runtime.NumCPU()
	}
	opts.Tool = "shardproof " + version
	opts.MapMembers, _ = f.GetBool("map-members")
	opts.ReadAllMembers, _ = f.GetBool("read-all-members")
	opts.ReduceFanIn, _ = f.GetInt("reduce-fan-in")
	comp, _ := f.GetString("shuffle-compression")
	if opts.ShuffleCompression = shuffle.Compression(comp); !opts.ShuffleCompression.Valid() {
		return opts, "", false, errcode.New(errcode.Usage, "verify: --shuffle-compression %q: want zstd or none", comp)
	}
	if sum, _ := f.GetString("shuffle-checksum"); sum != "" && shuffle.Checksum(sum) != shuffle.SHA256 {
		// Another process, often another machine, wrote the files.
		return opts, "", false, errcode.New(errcode.Usage, "verify: --shuffle-checksum %q: the %s executor checks shuffle files with sha256 (xxh64 is for the local executor's own files)", sum, f.Lookup("executor").Value)
	}
	for _, d := range []struct {
		flag     string
		dst      *manifest.Digest
		required bool
	}{
		{"root", &opts.Root, true},
		{"snapshot", &opts.Snapshot, false},
		{"tombstones", &opts.Tombstones, false},
		{"benchmark", &opts.Benchmark, false},
	} {
		v, _ := f.GetString(d.flag)
		if v == "" {
			if d.required {
				return opts, "", false, errcode.New(errcode.Usage, "verify: --%s is required", d.flag)
			}
			continue
		}
		if *d.dst, err = parseDigestValue(v); err != nil {
			return opts, "", false, errcode.Wrap(errcode.Usage, err, "verify: --%s", d.flag)
		}
	}
	return opts, store, asJSON, nil
}
