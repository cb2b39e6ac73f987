package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"syscall"
	"time"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
)

// Measured tools.
const (
	toolVerify     = "verify"
	toolPhases     = "phases"
	toolLadder     = "ladder"
	toolCeiling    = "ceiling"
	toolDuckDiff   = "duckdb-diff"
	toolDuckScan   = "duckdb-scan"
	toolStartup    = "startup"
	ladderRead     = "ladder-read"
	ladderDecode   = "ladder-decode"
	ladderContent  = "ladder-content"
	ladderHash     = "ladder-content-hash-loop"
	ladderZstd     = "ladder-decode-zstd"
	ladderMapper   = "ladder-mapper"
	ceilingZstd    = "ceiling-zstd"
	childSubcmd    = "child"
	verifyExecutor = "local"
)

// childResult is what a child prints on stdout as one JSON object.
type childResult struct {
	Tool string `json:"tool"`
	// Seconds is the child's own timing of its work (no process start-up).
	Seconds float64 `json:"seconds"`
	// Stages holds sub-timings: the coordinator phases, the ladder
	// levels, or (verify) the report's execution.stages, in worker
	// seconds summed over verify's workers.
	Stages map[string]float64 `json:"stages,omitempty"`
	// StagesCPU holds the process's user+system seconds of each stage.
	StagesCPU map[string]float64 `json:"stagesCpu,omitempty"`
	Records   int64              `json:"records"`
	// ZstdCodec names the zstd implementation the harness's own loops used.
	ZstdCodec string      `json:"zstdCodec,omitempty"`
	Counts    *DiffCounts `json:"counts,omitempty"`
	// Verdict and LogicalBytes come from a verification report.
	Verdict      string `json:"verdict,omitempty"`
	LogicalBytes int64  `json:"logicalBytes,omitempty"`
	// Members is how verify read the snapshot's member files (its
	// report's execution.snapshotMembers* figures).
	Members *MemberReads `json:"members,omitempty"`
}

// MemberReads says how verify read the snapshot member files: whole, not
// at all (every bucket matched the snapshot's leaf index), or bucket by
// bucket (Buckets in all).
type MemberReads struct {
	Whole    int `json:"whole"`
	Skipped  int `json:"skipped"`
	ByBucket int `json:"byBucket"`
	Buckets  int `json:"buckets"`
}

// Sample is one measured run of one tool.
type Sample struct {
	Tool  string `json:"tool"`
	Round int    `json:"round"`
	// WallSeconds is measured by the parent around the child process.
	WallSeconds float64 `json:"wallSeconds"`
	// CPUSeconds is the child's user+system time (rusage); on a shared,
	// loaded machine it moves less than wall time.
	CPUSeconds  float64     `json:"cpuSeconds"`
	MaxRSSBytes int64       `json:"maxRssBytes"`
	Child       childResult `json:"child"`
}

// runChildTool is the child side: it runs one tool over the dataset
// described by metaPath and writes its childResult to stdout.
func runChildTool(ctx context.Context, tool, metaPath, profile string) error {
	if tool == "" || metaPath == "" {
		return errcode.New(errcode.Usage, "child: -tool and -meta are required")
	}
	d, err := loadDataset(metaPath)
	if err != nil {
		return err
	}
	stop, err := startCPUProfile(profile)
	if err != nil {
		return err
	}
	res, err := childTool(ctx, tool, d)
	if perr := stop(); err == nil {
		err = perr
	}
	if err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(&res)
}

// startCPUProfile starts a CPU profile of the tool's run into path (none
// if path is empty), so the harness's loops and DuckDB can be profiled as
// verify is (SHARDPROOF_CPUPROFILE): `go tool pprof bin/spbench path`.
// stop ends it and reports a failed write.
func startCPUProfile(path string) (stop func() error, err error) {
	if path == "" {
		return func() error { return nil }, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, errcode.Wrap(errcode.IO, err, "cpu profile")
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, errcode.Wrap(errcode.Internal, err, "cpu profile")
	}
	return func() error {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			return errcode.Wrap(errcode.IO, err, "cpu profile %s", path)
		}
		return nil
	}, nil
}

// childTool runs one harness-measured tool over d, checking what it read
// against the dataset.
func childTool(ctx context.Context, tool string, d *Dataset) (childResult, error) {
	res := childResult{Tool: tool, ZstdCodec: zstdCodecName}
	if tool == toolLadder || tool == toolCeiling {
		if err := timeZstd(); err != nil {
			return res, err
		}
	}
	start := time.Now()
	switch tool {
	case toolPhases:
		st, stc, rep, err := phases(ctx, d)
		if err != nil {
			return res, err
		}
		c := countsOf(&rep.Counts)
		res.StagesCPU = stc
		res.Stages, res.Counts, res.Verdict, res.LogicalBytes = st, &c, rep.Verdict, rep.Stats.LogicalBytes
		res.Records = rep.Counts.Records
	case toolLadder:
		res.Stages, res.StagesCPU = map[string]float64{}, map[string]float64{}
		for _, l := range []struct {
			name string
			lv   level
		}{{ladderRead, levelRead}, {ladderDecode, levelDecode}, {ladderContent, levelContent}} {
			t, cpu := time.Now(), cpuSeconds()
			n, hash, err := ladder(ctx, d, l.lv)
			if err != nil {
				return res, err
			}
			res.Stages[l.name] = time.Since(t).Seconds()
			res.StagesCPU[l.name] = cpuSeconds() - cpu
			if l.lv == levelDecode {
				// CPU seconds inside zstd Decode during the decode level.
				res.StagesCPU[ladderZstd] = time.Duration(zstdDecodeNanos.Load()).Seconds()
				res.Stages[ladderZstd] = res.StagesCPU[ladderZstd] / float64(runtime.NumCPU())
			}
			if l.lv == levelContent {
				// CPU seconds summed over workers, and wall seconds
				// if the workers kept every core busy.
				res.StagesCPU[ladderHash] = hash
				res.Stages[ladderHash] = hash / float64(runtime.NumCPU())
			}
			if l.lv >= levelDecode && n != d.Records+d.SnapshotRecords {
				return res, errcode.New(errcode.Internal, "ladder %s decoded %d records, dataset has %d", l.name, n, d.Records+d.SnapshotRecords)
			}
		}
		t, cpu := time.Now(), cpuSeconds()
		n, err := mapShards(ctx, d)
		if err != nil {
			return res, err
		}
		res.Stages[ladderMapper], res.StagesCPU[ladderMapper] = time.Since(t).Seconds(), cpuSeconds()-cpu
		if n != d.Records {
			return res, errcode.New(errcode.Internal, "mapper emitted %d tuples, the release has %d records", n, d.Records)
		}
		res.Records = d.Records
	case toolCeiling:
		rel, mem, err := ceiling(ctx, d)
		if err != nil {
			return res, err
		}
		z := time.Duration(zstdDecodeNanos.Load()).Seconds()
		res.Stages = map[string]float64{ceilingZstd: z / float64(runtime.NumCPU())}
		res.StagesCPU = map[string]float64{ceilingZstd: z}
		if rel != d.Records || mem != d.SnapshotRecords {
			return res, errcode.New(errcode.Internal, "ceiling read %d/%d records, dataset has %d/%d", rel, mem, d.Records, d.SnapshotRecords)
		}
		res.Records = rel
	case toolDuckDiff:
		c, err := duckDiff(ctx, d)
		if err != nil {
			return res, err
		}
		res.Counts, res.Records = &c, c.Records
	case toolStartup:
		// Nothing: the cost of starting the harness binary and loading the
		// dataset meta, which every harness-measured tool pays.
	case toolDuckScan:
		n, err := duckScan(ctx, d)
		if err != nil {
			return res, err
		}
		if n != d.Records {
			return res, errcode.New(errcode.Internal, "duckdb scan read %d records, dataset has %d", n, d.Records)
		}
		res.Records = n
	default:
		return res, errcode.New(errcode.Usage, "unknown tool %q", tool)
	}
	res.Seconds = time.Since(start).Seconds()
	return res, nil
}

// cpuSeconds is this process's user+system time so far.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// childUsage is what the parent measures of one child process.
type childUsage struct {
	wall, cpu float64
	maxRSS    int64
}

// measure runs cmd as a child, waits for it and returns its stdout, wall
// time, CPU time and peak RSS (rusage ru_maxrss, kilobytes on Linux).
// okExit lists exit statuses that are not failures.
func measure(cmd *exec.Cmd, okExit ...int) ([]byte, childUsage, error) {
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	wall := time.Since(start).Seconds()
	if cmd.ProcessState == nil {
		return nil, childUsage{}, errcode.Wrap(errcode.IO, err, "start %s", cmd.Path)
	}
	u := childUsage{wall: wall}
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		u.maxRSS = ru.Maxrss * 1024
		u.cpu = time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
	}
	if err != nil {
		var ee *exec.ExitError
		ok := false
		if errors.As(err, &ee) {
			for _, c := range okExit {
				ok = ok || ee.ExitCode() == c
			}
		}
		if !ok {
			return nil, childUsage{}, errcode.Wrap(errcode.Internal, err, "%s %v: %s", filepath.Base(cmd.Path), cmd.Args[1:], tail(stderr.Bytes(), 2000))
		}
	}
	return stdout.Bytes(), u, nil
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(bytes.TrimSpace(b))
}

// runner starts measured children.
type runner struct {
	self       string // this executable, re-executed for the harness's own tools
	shardproof string // the shardproof binary
	metaPath   string
	d          *Dataset
}

// clearJobs removes the store's jobs/ tree before each verification. Each
// verification plans with a fresh nonce, so it never reuses an earlier
// one's commits; clearing keeps every round's shuffle writes landing in an
// equally empty store (and the cache from growing by a shuffle per run).
// The harness owns the cached store.
func (r *runner) clearJobs() error {
	if err := os.RemoveAll(filepath.Join(r.d.StoreDir, "jobs")); err != nil {
		return errcode.Wrap(errcode.IO, err, "clear jobs")
	}
	return nil
}

// verifyCmd is the verification every round measures: the local
// executor on all cores, the report as JSON on stdout.
func (r *runner) verifyCmd(ctx context.Context) *exec.Cmd {
	return exec.CommandContext(ctx, r.shardproof, "verify", "--store", r.d.StoreDir, "--root", r.d.Root.String(), "--json")
}

// run measures one tool once.
func (r *runner) run(ctx context.Context, tool string, round int) (Sample, error) {
	s := Sample{Tool: tool, Round: round}
	if tool == toolVerify || tool == toolPhases {
		if err := r.clearJobs(); err != nil {
			return s, err
		}
	}
	if tool == toolVerify {
		cmd := r.verifyCmd(ctx)
		// Exit status 1 is verdict INVALID: the drifted release must be.
		out, u, err := measure(cmd, errcode.ExitInvalid)
		if err != nil {
			return s, err
		}
		c, err := parseVerifyReport(out)
		if err != nil {
			return s, err
		}
		s.WallSeconds, s.CPUSeconds, s.MaxRSSBytes = u.wall, u.cpu, u.maxRSS
		s.Child = c
		return s, nil
	}
	cmd := exec.CommandContext(ctx, r.self, childSubcmd, "-tool", tool, "-meta", r.metaPath)
	out, u, err := measure(cmd)
	if err != nil {
		return s, err
	}
	if err := json.Unmarshal(out, &s.Child); err != nil {
		return s, errcode.Wrap(errcode.Internal, err, "child %s printed %q", tool, tail(out, 200))
	}
	s.WallSeconds, s.CPUSeconds, s.MaxRSSBytes = u.wall, u.cpu, u.maxRSS
	return s, nil
}

// Keys of a verification report's execution.stages, in pipeline order.
const (
	stageRead          = "read"
	stageStorageDigest = "storageDigest"
	stageDecode        = "decode"
	stageContentDigest = "contentDigest"
	stageTuples        = "tuples"
	stageShuffleWrite  = "shuffleWrite"
	stageReduce        = "reduce"
	stageAggregate     = "aggregate"
)

// parseVerifyReport reads the report `shardproof verify --json` printed
// into the verify tool's childResult. Stages holds the report's
// execution.stages as printed: worker seconds per stage, summed over
// verify's worker goroutines; it is nil for binaries that predate the
// field, and the harness then falls back to its estimated breakdown.
func parseVerifyReport(out []byte) (childResult, error) {
	out = bytes.TrimSpace(out)
	rep, err := manifest.DecodeReport(out)
	if err != nil {
		return childResult{}, fmt.Errorf("verify printed no valid report: %w", err)
	}
	if rep.Execution.Executor != verifyExecutor {
		return childResult{}, errcode.New(errcode.Internal, "verify ran executor %q, want %q", rep.Execution.Executor, verifyExecutor)
	}
	// Read as a map, not through manifest's type, so that a stage the
	// harness does not know yet still shows in the table, and an absent
	// one is absent rather than zero.
	var doc struct {
		Execution struct {
			Stages map[string]float64 `json:"stages"`
		} `json:"execution"`
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		return childResult{}, errcode.Wrap(errcode.Internal, err, "verify report execution.stages")
	}
	c := countsOf(&rep.Counts)
	return childResult{Tool: toolVerify, Seconds: rep.Execution.Seconds, Records: rep.Counts.Records,
		Stages: doc.Execution.Stages, Counts: &c, Verdict: rep.Verdict, LogicalBytes: rep.Stats.LogicalBytes,
		Members: &MemberReads{Whole: rep.Execution.SnapshotMembersRead, Skipped: rep.Execution.SnapshotMembersSkipped,
			ByBucket: rep.Execution.SnapshotMembersByBucket, Buckets: rep.Execution.SnapshotBucketsRead}}, nil
}
