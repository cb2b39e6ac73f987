package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/shardproof/shardproof/internal/errcode"
)

const usage = `usage:
  spbench run   [-samples N] [-shards N] [-rounds N] [-tools list] [-shardproof path] ...
  spbench scale [-sizes 1000000,4000000] [-largest] [-rounds N] [-shardproof path] ...
  spbench render results/<run>.json   (rewrites the run's .md and .svg from its JSON)
  spbench attribute verify.prof ceiling.prof ...   (CPU seconds per kind of work, a column per CPU profile)
  spbench child -tool T -meta .cache/<key>/meta.json [-cpuprofile F]
                                      (one measured tool, as a run starts it; F: a CPU profile)

run measures verify, its stages, the ceiling loop and DuckDB on one
synthesized release; scale measures verify at several sizes. Results go to
-results as JSON, Markdown and SVG. Run "spbench run -h" for every flag.
`

// allTools is the measured order of round 1; roundOrder rotates it.
var allTools = []string{toolVerify, toolCeiling, toolDuckDiff, toolDuckScan, toolStartup, toolPhases, toolLadder}

// compared are the tools the targets compare. Each round runs them first
// and next to each other, so one round's ratios are measured within half
// a minute rather than across the ladder's: this shared machine's speed
// drifts by a fifth within minutes.
var compared = []string{toolVerify, toolCeiling, toolDuckDiff}

// roundOrder is the order of round r (from 1) over tools: the compared
// ones among them, then the others, each group rotated by r-1 so every
// tool takes its turn first.
func roundOrder(tools []string, r int) []string {
	var first, rest []string
	for _, t := range tools {
		if contains(compared, t) {
			first = append(first, t)
		} else {
			rest = append(rest, t)
		}
	}
	rot := func(g []string) []string {
		out := make([]string, len(g))
		for k := range g {
			out[k] = g[(k+r-1)%len(g)]
		}
		return out
	}
	return append(rot(first), rot(rest)...)
}

func main() {
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(errcode.ExitUsage)
	}
	if a := os.Args[1]; a == "-h" || a == "-help" || a == "--help" || a == "help" {
		fmt.Fprint(os.Stdout, usage)
		return
	}
	var err error
	switch os.Args[1] {
	case "run":
		err = cmdRun(ctx, os.Args[2:])
	case "scale":
		err = cmdScale(ctx, os.Args[2:])
	case "render":
		err = cmdRender(os.Args[2:])
	case "attribute":
		err = cmdAttribute(os.Args[2:])
	case prepareSubcmd:
		fs := flag.NewFlagSet(prepareSubcmd, flag.ContinueOnError)
		cache := fs.String("cache", ".cache", "dataset cache directory")
		params := fs.String("params", "", "dataset parameters as JSON")
		if err = fs.Parse(os.Args[2:]); err == nil {
			err = runPrepare(ctx, *cache, *params)
		}
	case childSubcmd:
		fs := flag.NewFlagSet(childSubcmd, flag.ContinueOnError)
		tool := fs.String("tool", "", "tool to run")
		meta := fs.String("meta", "", "dataset meta.json")
		prof := fs.String("cpuprofile", "", "write a CPU profile of the tool's run to this file")
		if err = fs.Parse(os.Args[2:]); err == nil {
			err = runChildTool(ctx, *tool, *meta, *prof)
		}
	default:
		fmt.Fprint(os.Stderr, usage)
		os.Exit(errcode.ExitUsage)
	}
	if errors.Is(err, flag.ErrHelp) {
		return // -h printed the flags: not an error
	}
	if err != nil {
		code := errcode.Of(err)
		msg := strings.TrimPrefix(err.Error(), string(code)+": ")
		fmt.Fprintf(os.Stderr, "spbench: %s: %s\n", code, msg)
		os.Exit(code.Exit())
	}
}

// common are the flags run and scale share.
type common struct {
	shardproof, cache, results string
	seed                       int64
	rounds                     int
	driftShards, driftPerClass int
	shardRecords               int
}

func (c *common) register(fs *flag.FlagSet) {
	fs.StringVar(&c.shardproof, "shardproof", "../bin/shardproof", "shardproof binary to measure (make build)")
	fs.StringVar(&c.cache, "cache", ".cache", "dataset cache directory (gitignored)")
	fs.StringVar(&c.results, "results", "results", "directory for result JSON, Markdown and SVG")
	fs.Int64Var(&c.seed, "seed", 1, "synthesis seed")
	fs.IntVar(&c.rounds, "rounds", 3, "rounds (at least 3 for a min and a median)")
	fs.IntVar(&c.driftShards, "drift-shards", 4, "release shards rewritten with injected faults")
	fs.IntVar(&c.driftPerClass, "drift-per-class", 25, "faults of each class per drifted shard")
	fs.IntVar(&c.shardRecords, "shard-records", 32768, "records per shard when -shards is 0")
}

func (c *common) params(samples, shards int) Params {
	if shards <= 0 {
		shards = max(1, samples/c.shardRecords)
	}
	return Params{Samples: samples, Shards: shards, Seed: c.seed,
		DriftShards: min(c.driftShards, shards), DriftPerClass: c.driftPerClass}
}

func (c *common) check() error {
	if c.rounds < 1 {
		return errcode.New(errcode.Usage, "-rounds must be at least 1")
	}
	abs, err := filepath.Abs(c.shardproof)
	if err != nil {
		return errcode.Wrap(errcode.Usage, err, "-shardproof")
	}
	if _, err := os.Stat(abs); err != nil {
		return errcode.Wrap(errcode.Usage, err, "-shardproof %s (run make build)", c.shardproof)
	}
	c.shardproof = abs
	return os.MkdirAll(c.results, 0o755)
}

func host() Host {
	h := Host{CPUs: runtime.NumCPU(), GoVersion: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				h.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	return h
}

// loadAvg returns the 1-minute load average, or 0 if unknown.
func loadAvg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f, _, _ := strings.Cut(string(b), " ")
	v, _ := strconv.ParseFloat(f, 64)
	return v
}

// prepareSubcmd builds (or finds) a dataset and warms the page cache in a
// child process, so that the measuring parent never grows: Go starts
// children with vfork semantics, and Linux carries the parent's peak RSS
// into the child's ru_maxrss at exec, so a large parent would inflate every
// measured peak RSS.
const prepareSubcmd = "prepare"

// runPrepare is the child side of prepare: it prints the meta.json path.
func runPrepare(ctx context.Context, cache, params string) error {
	var p Params
	if err := json.Unmarshal([]byte(params), &p); err != nil {
		return errcode.Wrap(errcode.Usage, err, "-params")
	}
	d, mp, err := ensureDataset(ctx, cache, p)
	if err != nil {
		return err
	}
	if err := warm(d); err != nil {
		return err
	}
	_, err = fmt.Println(mp)
	return err
}

// prepare runs the prepare child for p and loads the dataset it names.
func prepare(ctx context.Context, self, cache string, p Params) (*Dataset, string, error) {
	b, err := json.Marshal(p)
	if err != nil {
		return nil, "", errcode.Wrap(errcode.Internal, err, "encode params")
	}
	cmd := exec.CommandContext(ctx, self, prepareSubcmd, "-cache", cache, "-params", string(b))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, "", errcode.Wrap(errcode.Internal, err, "prepare dataset %s", p.Key())
	}
	mp := strings.TrimSpace(string(out))
	d, err := loadDataset(mp)
	return d, mp, err
}

// selfMaxRSS is this process's own peak RSS: the floor under every
// child's ru_maxrss (see prepareSubcmd).
func selfMaxRSS() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Maxrss * 1024
}

// warm reads every file once so that no tool pays for the first read from
// disk; all tools then read from the page cache alike.
func warm(d *Dataset) error {
	for _, f := range loopFiles(d) {
		if _, err := readChecked(f.File); err != nil {
			return err
		}
	}
	return nil
}

func cmdRun(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	var c common
	c.register(fs)
	samples := fs.Int("samples", 1000000, "records in the synthesized release")
	shards := fs.Int("shards", 0, "release shards (0: samples / -shard-records)")
	tools := fs.String("tools", strings.Join(allTools, ","), "tools to measure, comma-separated")
	profiled := fs.Bool("profile", true, "after the measured rounds, run verify and the ceiling once more with CPU profiles (kept under -cache) and report where each one's CPU went")
	if err := fs.Parse(args); err != nil {
		return errcode.Wrap(errcode.Usage, err, "run")
	}
	if err := c.check(); err != nil {
		return err
	}
	if *samples < 1 || *shards < 0 || *shards > *samples {
		return errcode.New(errcode.Usage, "run: -samples %d, -shards %d: want at least one sample and 0 (derived) to samples shards", *samples, *shards)
	}
	order := strings.Split(*tools, ",")
	for _, t := range order {
		if !contains(allTools, t) {
			return errcode.New(errcode.Usage, "-tools: unknown tool %q (have %s)", t, strings.Join(allTools, ","))
		}
	}
	self, err := os.Executable()
	if err != nil {
		return errcode.Wrap(errcode.IO, err, "own executable")
	}
	p := c.params(*samples, *shards)
	d, mp, err := prepare(ctx, self, c.cache, p)
	if err != nil {
		return err
	}
	started := time.Now().UTC()
	res := &Result{
		Schema: ResultSchema, Started: started.Format(time.RFC3339),
		Command: "spbench run " + strings.Join(args, " "), Host: host(), Params: p, Rounds: c.rounds,
		Dataset: DatasetSummary{Key: p.Key(), Root: d.Root.String(), Snapshot: d.Snapshot.String(),
			Shards: len(d.ReleaseFiles), MemberFiles: len(d.MemberFiles), Records: d.Records, SnapshotRecords: d.SnapshotRecords,
			StoredBytes: d.StoredBytes, MemberStoredBytes: d.MemberStoredBytes, Expected: d.Expected},
	}
	r := &runner{self: self, shardproof: c.shardproof, metaPath: mp, d: d}
	res.Host.LoadStart = loadAvg()
	for round := 1; round <= c.rounds; round++ {
		for _, tool := range roundOrder(order, round) {
			s, err := r.run(ctx, tool, round)
			if err != nil {
				return fmt.Errorf("round %d: %w", round, err)
			}
			if s.Child.LogicalBytes > 0 {
				res.Dataset.LogicalBytes = s.Child.LogicalBytes
			}
			slog.Info("bench: measured", "round", round, "tool", tool, "wall", fmt.Sprintf("%.2fs", s.WallSeconds),
				"maxRSS", fmt.Sprintf("%.0fMiB", mb(s.MaxRSSBytes)), "records", s.Child.Records)
			res.Samples = append(res.Samples, s)
		}
	}
	res.Host.LoadEnd = loadAvg()
	if *profiled && contains(order, toolVerify) && contains(order, toolCeiling) {
		dir := filepath.Join(c.cache, "profiles", started.Format("20060102T150405Z"))
		if res.Attribution, err = r.profiledRound(ctx, dir); err != nil {
			return fmt.Errorf("profiled round: %w", err)
		}
		slog.Info("bench: profiled", "verify", res.Attribution.Profiles[0], "ceiling", res.Attribution.Profiles[1])
	}
	res.Host.RSSFloorBytes = selfMaxRSS()
	sortSamples(res.Samples)
	if res.Dataset.LogicalBytes > 0 {
		res.Dataset.DecompressionRatio = float64(res.Dataset.LogicalBytes) / float64(res.Dataset.StoredBytes)
	}
	res.summarize(allTools)
	res.checkCounts()
	res.Notes = append(runNotes(res), res.Notes...)
	base := filepath.Join(c.results, fmt.Sprintf("%s-n%d", started.Format("20060102T150405Z"), p.Samples))
	if err := writeOutputs(base, res, res.Markdown(), res.SVG()); err != nil {
		return err
	}
	fmt.Print(res.Markdown())
	fmt.Printf("\nresults: %s.{json,md,svg}\n", base)
	if !res.Counts.Equal {
		return errcode.New(errcode.Internal, "diff counts differ: %s", strings.Join(res.Counts.Mismatches, "; "))
	}
	return nil
}

// runNotes says what the numbers do not show.
func runNotes(r *Result) []string {
	notes := []string{
		fmt.Sprintf("Every tool runs as its own child process; wall time, CPU time and peak RSS (rusage) are the parent's view of that process. Peak RSS includes a floor of %.0f MiB, the harness's own peak, which Linux carries into a vforked child at exec.", mb(r.Host.RSSFloorBytes)),
		"The machine is shared: when the load average exceeds the CPU count, wall times are inflated for every tool alike (rounds are interleaved); records per CPU-second is the steadier comparison.",
		"Rates divide release records, release stored bytes and release logical bytes by wall time for every tool; duckdb-diff and phases also read the snapshot member files, and the ceiling reads and hashes them too; verify, with the snapshot's leaf index, reads only the row groups of the member buckets that differ and skips members whose buckets all match (its report's execution.snapshotMembers* fields say how many).",
		"The startup row is the harness binary (Go + the statically linked DuckDB) doing nothing: every harness-measured tool (phases, ladder, ceiling, duckdb-*) includes it; verify runs the shardproof binary, whose start-up is smaller.",
		"Files are in the page cache (read once before round 1): these are CPU numbers, not disk numbers.",
	}
	if r.stagesMeasured() {
		notes = append(notes, "The verify stage rows are measured by verify itself: its report's execution.stages, worker seconds per stage summed over its worker goroutines (≈ CPU seconds when CPU-bound), medians over rounds; \"median s\" is that ÷ CPUs and records/s alone is release records over it. Their sum compares with verify's CPU s in the tools table; on a loaded machine worker seconds include time a worker waited for a core, so the sum can exceed it. The zstd rows are still the harness's estimates from its ladder and ceiling loops.")
	} else if len(r.Stages) > 0 {
		notes = append(notes, "The stage breakdown is estimated (this verify binary's report has no execution.stages): the stages inside a map task come from cumulative ladder loops over the same files (each level minus the one before), the rest from the phases tool.")
	}
	return notes
}

// cmdRender rewrites the Markdown and SVG of stored run results, so the
// renderings follow changes to them without measuring again. Figures
// derived from the samples that a result predates (the map-side bound)
// are derived again, and so is the attribution of a profiled round whose
// profiles are still where the run kept them (its JSON is rewritten
// then), so a change to the attribution rules reaches earlier runs.
func cmdRender(files []string) error {
	if len(files) == 0 {
		return errcode.New(errcode.Usage, "render: name the result JSON files to render again")
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return errcode.Wrap(errcode.IO, err, "render")
		}
		var r Result
		if err := json.Unmarshal(b, &r); err != nil || r.Schema != ResultSchema {
			return errcode.New(errcode.BadDocument, "%s is not a %s result (%v)", f, ResultSchema, err)
		}
		r.mapSide() // derived from the samples; older results lack it
		base := strings.TrimSuffix(f, ".json")
		if a := r.Attribution; a != nil && len(a.Profiles) == 2 {
			if fresh, err := attributeProfiles(a.Profiles[0], a.Profiles[1]); err == nil {
				r.Attribution = fresh
				if err := writeOutputs(base, &r, r.Markdown(), r.SVG()); err != nil {
					return err
				}
				continue
			} else if !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
		if err := writeFileAtomic(base+".md", []byte(r.Markdown())); err != nil {
			return err
		}
		if err := writeFileAtomic(base+".svg", []byte(r.SVG())); err != nil {
			return err
		}
	}
	return nil
}

func writeOutputs(base string, v any, md, svg string) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return errcode.Wrap(errcode.Internal, err, "encode result")
	}
	for ext, data := range map[string][]byte{".json": append(b, '\n'), ".md": []byte(md), ".svg": []byte(svg)} {
		if len(data) == 0 {
			continue
		}
		if err := writeFileAtomic(base+ext, data); err != nil {
			return err
		}
	}
	return nil
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}
