package main

import (
	"compress/gzip"
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/pprof/profile"

	"github.com/shardproof/shardproof/coordinator"
	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/objstore"
	"github.com/shardproof/shardproof/stage"
)

func TestInjectFaultsCounts(t *testing.T) {
	rows := make([]stage.Row, 100)
	for i := range rows {
		rows[i] = stage.Row{SampleID: string(rune('a'+i%26)) + string(rune('0'+i/26)), Split: "train", Text: "x"}
	}
	out, c, err := injectFaults(rows, 3, 4)
	if err != nil {
		t.Fatal(err)
	}
	want := DiffCounts{Missing: 4, Extra: 4, Duplicate: 4, ContentSubstitution: 4, SplitConflict: 4, SourceVersionChange: 4}
	if c != want {
		t.Fatalf("counts %+v, want %+v", c, want)
	}
	if got := len(out); got != len(rows)-4+4+4 {
		t.Fatalf("%d rows out, want %d", got, len(rows)+4)
	}
	if _, _, err := injectFaults(rows[:10], 0, 4); err == nil {
		t.Fatal("10 rows accepted 20 faults")
	}
}

// TestEndToEnd builds a tiny drifted dataset and checks that verify (the
// coordinator, in process), the DuckDB diff and the injected truth agree,
// and that every loop reads every record.
func TestEndToEnd(t *testing.T) {
	ctx := context.Background()
	cache := t.TempDir()
	p := Params{Samples: 3000, Shards: 3, Seed: 7, DriftShards: 2, DriftPerClass: 5}
	d, mp, err := ensureDataset(ctx, cache, p)
	if err != nil {
		t.Fatal(err)
	}
	want := DiffCounts{Records: 3010, SnapshotRecords: 3000, Missing: 10, Extra: 10, Duplicate: 10,
		ContentSubstitution: 10, SourceVersionChange: 10, SplitConflict: 10}
	if d.Expected != want {
		t.Fatalf("expected counts %+v, want %+v", d.Expected, want)
	}
	again, _, err := ensureDataset(ctx, cache, p)
	if err != nil || again.Root != d.Root {
		t.Fatalf("cached dataset root %v (err %v), first %v", again.Root, err, d.Root)
	}
	if again2, err := loadDataset(mp); err != nil || again2.Records != d.Records {
		t.Fatalf("meta %s: %v", mp, err)
	}

	st, err := objstore.Open(ctx, d.StoreDir)
	if err != nil {
		t.Fatal(err)
	}
	out, err := coordinator.Verify(ctx, st, coordinator.Options{PlanOptions: coordinator.PlanOptions{Root: d.Root, Parallelism: 2}})
	if err != nil {
		t.Fatal(err)
	}
	if got := countsOf(&out.Report.Counts); got != want {
		t.Fatalf("verify counts %+v, want %+v", got, want)
	}
	if out.Report.Counts.TupleRootMismatches != 0 || out.Report.Counts.DigestFailures != 0 {
		t.Fatalf("drifted release is not internally consistent: %+v", out.Report.Counts)
	}

	dc, err := duckDiff(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	if dc != want {
		t.Fatalf("duckdb counts %+v, want %+v", dc, want)
	}
	if n, err := duckScan(ctx, d); err != nil || n != d.Records {
		t.Fatalf("duckdb scan %d records (err %v), want %d", n, err, d.Records)
	}
	rel, mem, err := ceiling(ctx, d)
	if err != nil || rel != d.Records || mem != d.SnapshotRecords {
		t.Fatalf("ceiling %d/%d records (err %v), want %d/%d", rel, mem, err, d.Records, d.SnapshotRecords)
	}
	for _, lv := range []level{levelDecode, levelContent} {
		n, hash, err := ladder(ctx, d, lv)
		if err != nil || n != d.Records+d.SnapshotRecords {
			t.Fatalf("ladder level %d: %d records (err %v)", lv, n, err)
		}
		if (lv == levelContent) != (hash > 0) {
			t.Fatalf("ladder level %d: hash seconds %v", lv, hash)
		}
	}
	if n, err := mapShards(ctx, d); err != nil || n != d.Records {
		t.Fatalf("mapper emitted %d tuples (err %v), want the release's %d", n, err, d.Records)
	}
	wall, cpu, rep, err := phases(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	if got := countsOf(&rep.Counts); got != want {
		t.Fatalf("phases counts %+v, want %+v", got, want)
	}
	for _, ph := range []string{phasePlan, phaseMap, phaseReduce, phaseAggregate} {
		if _, ok := wall[ph]; !ok {
			t.Fatalf("phase %s not timed: %v", ph, wall)
		}
		if _, ok := cpu[ph]; !ok {
			t.Fatalf("phase %s has no CPU time: %v", ph, cpu)
		}
	}
	// Every harness-measured tool as `make bench`'s children run it, with
	// their own checks of what they read against the dataset.
	for _, tool := range []string{toolLadder, toolCeiling, toolPhases, toolDuckDiff, toolDuckScan, toolStartup} {
		res, err := childTool(ctx, tool, d)
		if err != nil {
			t.Fatalf("child %s: %v", tool, err)
		}
		if tool != toolStartup && res.Records != d.Records {
			t.Fatalf("child %s counted %d release records, want %d", tool, res.Records, d.Records)
		}
	}

	// spbench child -cpuprofile: the ceiling's run, profiled.
	prof := filepath.Join(t.TempDir(), "ceiling.prof")
	if err := runChildTool(ctx, toolCeiling, mp, prof); err != nil {
		t.Fatal(err)
	}
	checkCPUProfile(t, prof)
	// Every CPU second of the real profile is charged to some kind of work.
	pf, err := os.Open(prof)
	if err != nil {
		t.Fatal(err)
	}
	pp, err := profile.Parse(pf)
	pf.Close()
	if err != nil {
		t.Fatal(err)
	}
	var total float64
	for _, s := range pp.Sample {
		total += float64(s.Value[1]) / 1e9
	}
	a, err := attributeFile(prof)
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, v := range a {
		sum += v
	}
	if math.Abs(sum-total) > 1e-9 {
		t.Fatalf("attributed %.3f CPU s of the profile's %.3f", sum, total)
	}
	bad := filepath.Join(t.TempDir(), "no-such-dir", "x.prof")
	if err := runChildTool(ctx, toolCeiling, mp, bad); errcode.Of(err) != errcode.IO {
		t.Fatalf("profile into a missing directory: %v (code %s), want %s", err, errcode.Of(err), errcode.IO)
	}
}

// checkCPUProfile checks that path holds a CPU profile as runtime/pprof
// writes it: a gzipped profile.proto whose string table names the CPU
// sample type.
func checkCPUProfile(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatalf("profile %s is not gzipped: %v", path, err)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		t.Fatalf("profile %s: %v", path, err)
	}
	for _, s := range []string{"samples", "cpu", "nanoseconds"} {
		if !strings.Contains(string(b), s) {
			t.Fatalf("profile %s (%d bytes) does not name %q", path, len(b), s)
		}
	}
}

func TestSummarizeRatiosAndOutputs(t *testing.T) {
	r := &Result{Rounds: 3, Dataset: DatasetSummary{Records: 1000, StoredBytes: 1e6, LogicalBytes: 3e6}}
	secs := map[string][]float64{
		toolVerify: {2, 1, 3}, toolCeiling: {1, 0.5, 0.8}, toolDuckDiff: {6, 4, 5}, toolDuckScan: {1, 1, 1},
	}
	for tool, ws := range secs {
		for i, w := range ws {
			r.Samples = append(r.Samples, Sample{Tool: tool, Round: i + 1, WallSeconds: w, CPUSeconds: 2 * w, MaxRSSBytes: int64(100 + i)})
		}
	}
	for i, w := range []float64{1.5, 1.25, 2} { // the ladder's map-side level
		r.Samples = append(r.Samples, Sample{Tool: toolLadder, Round: i + 1, WallSeconds: 4, CPUSeconds: 8,
			Child: childResult{Stages: map[string]float64{ladderMapper: w}, StagesCPU: map[string]float64{ladderMapper: 2 * w}}})
	}
	r.summarize(allTools)
	// Map side: median 1.5 s; ceiling median 0.8 s, DuckDB diff 5 s.
	if math.Abs(r.RatioMapSideOverCeiling-0.8/1.5) > 1e-9 || math.Abs(r.RatioMapSideOverDuckdbDiff-5/1.5) > 1e-9 || r.MapSideSeconds != 1.5 {
		t.Fatalf("map side %v s, ratios %v %v, want 1.5 s, 0.53 and 3.33", r.MapSideSeconds, r.RatioMapSideOverCeiling, r.RatioMapSideOverDuckdbDiff)
	}
	if r.RatioVerifyOverDuckdbDiff != 2.5 { // median 5 s over median 2 s
		t.Fatalf("ratioVerifyOverDuckdbDiff %v, want 2.5", r.RatioVerifyOverDuckdbDiff)
	}
	if math.Abs(r.RatioVerifyOverCeiling-0.4) > 1e-9 {
		t.Fatalf("ratioVerifyOverCeiling %v, want 0.4", r.RatioVerifyOverCeiling)
	}
	if r.Tools[0].Tool != toolVerify || r.Tools[0].MinSeconds != 1 || r.Tools[0].RecordsPerSecond != 500 || r.Tools[0].PeakRSSBytes != 102 {
		t.Fatalf("verify stats %+v", r.Tools[0])
	}
	if r.Targets[0].Met || r.Targets[1].Met {
		t.Fatalf("targets met: %+v", r.Targets)
	}
	dec := xml.NewDecoder(strings.NewReader(r.SVG()))
	for {
		if _, err := dec.Token(); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("SVG is not well-formed XML: %v", err)
		}
	}
	if md := r.Markdown(); !strings.Contains(md, "ratioVerifyOverDuckdbDiff **2.50**") || !strings.Contains(md, "median 1.50 s, 667 records/s, 0.53× the ceiling's records/s and 3.33× DuckDB's diff (tools' medians as above)") ||
		!strings.Contains(md, "verify/DuckDB diff 3.00, 4.00, 1.67; verify/ceiling 0.50, 0.50, 0.27") {
		t.Fatalf("markdown lacks the ratios:\n%s", md)
	}
	// Per round: DuckDB 6/2, 4/1, 5/3; ceiling 1/2, 0.5/1, 0.8/3.
	if got := r.RoundRatiosVerifyOverDuckdbDiff; len(got) != 3 || got[0] != 3 || got[1] != 4 || math.Abs(got[2]-5.0/3) > 1e-9 {
		t.Fatalf("roundRatiosVerifyOverDuckdbDiff %v, want [3 4 1.67]", got)
	}
}

func TestCheckCountsFlagsMismatch(t *testing.T) {
	exp := DiffCounts{Records: 10, Missing: 1}
	bad := DiffCounts{Records: 10}
	r := &Result{Dataset: DatasetSummary{Expected: exp}, Samples: []Sample{
		{Tool: toolVerify, Round: 1, Child: childResult{Counts: &exp}},
		{Tool: toolDuckDiff, Round: 1, Child: childResult{Counts: &bad}},
	}}
	r.checkCounts()
	if r.Counts.Equal || len(r.Counts.Mismatches) != 1 {
		t.Fatalf("mismatch not flagged: %+v", r.Counts)
	}
}

// TestVerifyStagesTable feeds a verify report carrying execution.stages
// (hand-built, with round numbers, in the shape verify prints) through the parser and
// summarize, and checks the stage table: verify's measured stages in
// pipeline order, each ÷ CPUs, the ladder's zstd estimate under decode,
// and no estimate rows the measured ones replace.
func TestVerifyStagesTable(t *testing.T) {
	c := parseTestdataReport(t, "verify-report-stages.json")
	if c.Verdict != "INVALID" || c.Records != 30000 || len(c.Stages) != 8 || c.Stages[stageDecode] != 1.5 {
		t.Fatalf("parsed %+v", c)
	}
	r := &Result{Rounds: 3, Host: Host{CPUs: 2}, Dataset: DatasetSummary{Records: 30000}}
	for round, scale := range []float64{1, 2, 0.5} {
		v := c
		v.Stages = maps.Clone(c.Stages)
		for k := range v.Stages {
			v.Stages[k] *= scale
		}
		stage := func(k string, x float64) map[string]float64 { return map[string]float64{k: x} }
		r.Samples = append(r.Samples,
			Sample{Tool: toolVerify, Round: round + 1, WallSeconds: 3, Child: v},
			Sample{Tool: toolLadder, Round: round + 1, WallSeconds: 4, Child: childResult{Stages: stage(ladderZstd, 0.25), StagesCPU: stage(ladderZstd, 0.5)}},
			Sample{Tool: toolCeiling, Round: round + 1, WallSeconds: 1, Child: childResult{Stages: stage(ceilingZstd, 0.2), StagesCPU: stage(ceilingZstd, 0.4)}},
			Sample{Tool: toolPhases, Round: round + 1, WallSeconds: 3, Child: childResult{Stages: stage(phaseMap, 2)}})
	}
	r.summarize(allTools)
	want := []struct {
		tool, stage string
		cpu         float64
	}{
		{toolVerify, "read", 0.4},
		{toolVerify, "storage digest (sha256 of the bytes)", 0.5},
		{toolVerify, "decompress+decode (all columns)", 1.5},
		{toolLadder, "  of which zstd decompress (ladder estimate)", 0.5},
		{toolVerify, "content digest (sha256 per value)", 0.26},
		{toolVerify, "canonical encode+logical digest+tuples+partitions", 0.66},
		{toolVerify, "shuffle write: sort+Arrow IPC (+zstd if the plan says)+store puts+commits", 1.2},
		{toolVerify, "reduce: merge+diff+bucket leaves (snapshot members the reducers read count in the rows above)", 0.8},
		{toolVerify, "aggregate+report", 0.04},
		{toolVerify, "all stages (sum of the medians)", 5.36},
		{toolCeiling, "ceiling: zstd decompress of the content columns", 0.4},
	}
	if len(r.Stages) != len(want) {
		t.Fatalf("%d stage rows, want %d: %+v", len(r.Stages), len(want), r.Stages)
	}
	for i, w := range want {
		s := r.Stages[i]
		if s.Tool != w.tool || s.Stage != w.stage || math.Abs(s.MedianCPUSeconds-w.cpu) > 1e-9 {
			t.Fatalf("row %d: %s %q cpu %v, want %s %q cpu %v", i, s.Tool, s.Stage, s.MedianCPUSeconds, w.tool, w.stage, w.cpu)
		}
		if s.Tool != toolVerify {
			continue
		}
		// Medians of 1×, 2× and 0.5× are the 1× values; seconds ÷ 2 CPUs.
		if s.Source != measuredSource || math.Abs(s.MedianSeconds-w.cpu/2) > 1e-9 || math.Abs(s.RecordsPerSecond-30000/(w.cpu/2)) > 1e-6 {
			t.Fatalf("row %d: %+v", i, s)
		}
	}
	r.Notes = runNotes(r)
	md := r.Markdown()
	for _, line := range []string{
		"| decompress+decode (all columns) | 0.75 | 40000 | 1.50 | 20000 | verify --json execution.stages (worker seconds ÷ CPUs) |",
		"| read | 0.20 | 150000 | 0.40 | 75000 | verify --json execution.stages (worker seconds ÷ CPUs) |",
	} {
		if !strings.Contains(md, line) {
			t.Fatalf("markdown lacks %q:\n%s", line, md)
		}
	}
	if strings.Contains(md, "map phase") || strings.Contains(md, "ladder: read+sha256") || strings.Contains(md, "is estimated") {
		t.Fatalf("markdown keeps estimate rows that measured stages replace:\n%s", md)
	}
	if svg := r.SVG(); !strings.Contains(svg, ">decompress+decode (all columns)<") || !strings.Contains(svg, colorMeasured) {
		t.Fatalf("SVG lacks the measured stages:\n%s", svg)
	}
}

// TestVerifyStagesFallback checks that a report without execution.stages
// (a binary older than the field) leaves the estimated breakdown in place.
func TestVerifyStagesFallback(t *testing.T) {
	out, err := os.ReadFile("testdata/verify-report-stages.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(out, &doc); err != nil {
		t.Fatal(err)
	}
	delete(doc["execution"].(map[string]any), "stages")
	if out, err = json.Marshal(doc); err != nil {
		t.Fatal(err)
	}
	c, err := parseVerifyReport(out)
	if err != nil || c.Stages != nil {
		t.Fatalf("stages %v (err %v), want none", c.Stages, err)
	}
	r := &Result{Rounds: 1, Host: Host{CPUs: 2}, Dataset: DatasetSummary{Records: 30000}, Samples: []Sample{
		{Tool: toolVerify, Round: 1, WallSeconds: 3, Child: c},
		{Tool: toolLadder, Round: 1, WallSeconds: 4, Child: childResult{Stages: map[string]float64{ladderRead: 1, ladderDecode: 2, ladderContent: 2.5}}},
	}}
	r.summarize(allTools)
	if r.stagesMeasured() || len(r.Stages) == 0 || r.Stages[0].Stage != "read+storage digest" || r.Stages[0].Tool != toolLadder {
		t.Fatalf("fallback rows %+v", r.Stages)
	}
}

// TestParseCapturedVerifyReport parses a report that `shardproof verify
// --json` printed for the 200k bench dataset (exit status 1, INVALID):
// every stage the harness names is present.
func TestParseCapturedVerifyReport(t *testing.T) {
	c := parseTestdataReport(t, "verify-report-captured.json")
	if c.Verdict != "INVALID" || c.Records != 200100 || c.Counts.Missing != 100 {
		t.Fatalf("parsed %+v", c)
	}
	for _, l := range measuredStageLabels {
		if v, ok := c.Stages[l.key]; !ok || v <= 0 {
			t.Fatalf("stage %s = %v (present %v) in %v", l.key, v, ok, c.Stages)
		}
	}
}

// parseTestdataReport parses testdata/name as verify's --json output.
func parseTestdataReport(t *testing.T, name string) childResult {
	t.Helper()
	out, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	c, err := parseVerifyReport(out)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Each round measures the compared tools first, next to each other, and
// every tool of a group goes first in some round.
func TestRoundOrder(t *testing.T) {
	firsts := map[string]bool{}
	for r := 1; r <= 3; r++ {
		o := roundOrder(allTools, r)
		if len(o) != len(allTools) {
			t.Fatalf("round %d: %v", r, o)
		}
		for k, tool := range o[:len(compared)] {
			if !contains(compared, tool) {
				t.Fatalf("round %d: %s at %d, before a compared tool", r, tool, k)
			}
		}
		firsts[o[0]] = true
	}
	for _, tool := range compared {
		if !firsts[tool] {
			t.Errorf("%s never goes first in 3 rounds", tool)
		}
	}
	if o := roundOrder([]string{toolLadder, toolVerify}, 2); o[0] != toolVerify || o[1] != toolLadder {
		t.Errorf("-tools ladder,verify, round 2: %v", o)
	}
}

// Bad arguments are USAGE before any work (BENCH_SAMPLES=0 was INTERNAL,
// caught only after synthesis had started and left a cache directory).
func TestUsageBeforeWork(t *testing.T) {
	cache := t.TempDir()
	for _, args := range [][]string{
		{"-samples", "0"}, {"-samples", "-5"}, {"-samples", "10", "-shards", "-1"}, {"-samples", "10", "-shards", "11"},
	} {
		err := cmdRun(t.Context(), append(args, "-shardproof", os.Args[0], "-cache", cache, "-results", t.TempDir()))
		if errcode.Of(err) != errcode.Usage {
			t.Errorf("run %v: %v, want USAGE", args, err)
		}
	}
	if es, _ := os.ReadDir(cache); len(es) != 0 {
		t.Errorf("refused runs left %d entries in the cache", len(es))
	}
	if err := cmdRender(nil); errcode.Of(err) != errcode.Usage {
		t.Errorf("render with no file: %v, want USAGE", err)
	}
	if err := runChildTool(t.Context(), "verify", "", ""); errcode.Of(err) != errcode.Usage {
		t.Errorf("child without -meta: %v, want USAGE", err)
	}
}
