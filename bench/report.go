package main

import (
	"cmp"
	"fmt"
	"html"
	"maps"
	"math"
	"slices"
	"strings"
)

// ResultSchema identifies the JSON result of one `spbench run`.
const ResultSchema = "shardproof.bench.run.v1"

// Host describes the machine a run measured.
type Host struct {
	CPUs     int    `json:"cpus"`
	CPUModel string `json:"cpuModel"`
	// LoadStart and LoadEnd are /proc/loadavg's 1-minute load when the
	// rounds began and ended: above the CPU count, other processes
	// competed for the cores and wall times are inflated.
	LoadStart float64 `json:"loadStart"`
	LoadEnd   float64 `json:"loadEnd"`
	// RSSFloorBytes is the harness's own peak RSS, included in every
	// child's peak RSS.
	RSSFloorBytes int64  `json:"rssFloorBytes"`
	GoVersion     string `json:"goVersion"`
	OS            string `json:"os"`
	Arch          string `json:"arch"`
}

// DatasetSummary is what a result says about its dataset.
type DatasetSummary struct {
	Key                string     `json:"key"`
	Root               string     `json:"root"`
	Snapshot           string     `json:"snapshot"`
	Shards             int        `json:"shards"`
	MemberFiles        int        `json:"memberFiles"`
	Records            int64      `json:"records"`
	SnapshotRecords    int64      `json:"snapshotRecords"`
	StoredBytes        int64      `json:"storedBytes"`
	MemberStoredBytes  int64      `json:"memberStoredBytes"`
	LogicalBytes       int64      `json:"logicalBytes"`
	DecompressionRatio float64    `json:"decompressionRatio"`
	Expected           DiffCounts `json:"expected"`
}

// ToolStats summarize the rounds of one tool. Rates use release records,
// release stored bytes and release logical bytes for every tool, so they
// compare; the tools that diff also read the snapshot member files.
type ToolStats struct {
	Tool          string  `json:"tool"`
	Runs          int     `json:"runs"`
	MinSeconds    float64 `json:"minSeconds"`
	MedianSeconds float64 `json:"medianSeconds"`
	// RecordsPerSecond, StoredMBPerSecond and LogicalMBPerSecond are from
	// the median wall time; BestRecordsPerSecond from the minimum.
	RecordsPerSecond     float64 `json:"recordsPerSecond"`
	BestRecordsPerSecond float64 `json:"bestRecordsPerSecond"`
	StoredMBPerSecond    float64 `json:"storedMBPerSecond"`
	LogicalMBPerSecond   float64 `json:"logicalMBPerSecond"`
	PeakRSSBytes         int64   `json:"peakRssBytes"`
	MedianRSSBytes       int64   `json:"medianRssBytes"`
	// MedianCPUSeconds is the median user+system time of the child;
	// RecordsPerCPUSecond divides release records by it.
	MedianCPUSeconds    float64 `json:"medianCpuSeconds"`
	RecordsPerCPUSecond float64 `json:"recordsPerCpuSecond"`
}

// StageStats is one stage of verify's breakdown.
type StageStats struct {
	// Tool is the tool whose samples the row comes from: verify for
	// stages verify measured itself, ladder, ceiling or phases for the
	// harness's estimates.
	Tool  string `json:"tool"`
	Stage string `json:"stage"`
	// Source says how the time was obtained.
	Source        string  `json:"source"`
	MedianSeconds float64 `json:"medianSeconds"`
	// RecordsPerSecond is release records over the stage's time: the rate
	// verify would have if it did only this stage. For stages verify
	// measured, MedianSeconds is its worker seconds ÷ the CPUs, the wall
	// time of the stage with every core busy on it.
	RecordsPerSecond float64 `json:"recordsPerSecond"`
	// MedianCPUSeconds and RecordsPerCPUSecond are the same from the
	// process's user+system time.
	MedianCPUSeconds    float64 `json:"medianCpuSeconds"`
	RecordsPerCPUSecond float64 `json:"recordsPerCpuSecond"`
}

// Target is one goal of issue 7, measured and reported, never asserted.
type Target struct {
	Name  string  `json:"name"`
	Value float64 `json:"value"`
	Want  string  `json:"want"`
	Met   bool    `json:"met"`
}

// CountsCheck compares the diff counts of verify and DuckDB with the
// injected drift, in every round.
type CountsCheck struct {
	Expected DiffCounts `json:"expected"`
	Verify   DiffCounts `json:"verify"`
	DuckDB   DiffCounts `json:"duckdb"`
	Equal    bool       `json:"equal"`
	// Mismatches lists every round whose counts differed.
	Mismatches []string `json:"mismatches,omitempty"`
}

// Result is the JSON document of one run, written to results/.
type Result struct {
	Schema                    string         `json:"schema"`
	Started                   string         `json:"started"`
	Command                   string         `json:"command"`
	Host                      Host           `json:"host"`
	Params                    Params         `json:"params"`
	Dataset                   DatasetSummary `json:"dataset"`
	Rounds                    int            `json:"rounds"`
	Tools                     []ToolStats    `json:"tools"`
	Stages                    []StageStats   `json:"stages"`
	RatioVerifyOverDuckdbDiff float64        `json:"ratioVerifyOverDuckdbDiff"`
	RatioVerifyOverCeiling    float64        `json:"ratioVerifyOverCeiling"`
	RatioVerifyOverDuckdbScan float64        `json:"ratioVerifyOverDuckdbScan"`
	// The CPU ratios compare records per CPU-second (medians): what the
	// tools would do on an idle machine if they scaled to every core.
	RatioVerifyOverDuckdbDiffCPU float64 `json:"ratioVerifyOverDuckdbDiffCpu"`
	RatioVerifyOverCeilingCPU    float64 `json:"ratioVerifyOverCeilingCpu"`
	// The round ratios compare each round's wall times: tools of one
	// round ran minutes apart at most, so a slow spell of a shared
	// machine moves both sides of a round's ratio, where it may move
	// only one tool's median.
	RoundRatiosVerifyOverDuckdbDiff []float64 `json:"roundRatiosVerifyOverDuckdbDiff"`
	RoundRatiosVerifyOverCeiling    []float64 `json:"roundRatiosVerifyOverCeiling"`
	// MapSideSeconds is the median wall time of the ladder's last level:
	// mapper.MapShard, verify's own map code, over every release shard
	// on all cores with the tuples dropped (no member files, no shuffle,
	// no diff). Its ratios bound what verify with this map code can reach
	// whatever its shuffle and reduce cost. Zero without the ladder.
	MapSideSeconds             float64 `json:"mapSideSeconds,omitempty"`
	RatioMapSideOverCeiling    float64 `json:"ratioMapSideOverCeiling,omitempty"`
	RatioMapSideOverDuckdbDiff float64 `json:"ratioMapSideOverDuckdbDiff,omitempty"`
	// Attribution is where verify's and the ceiling's CPU went, by kind
	// of work, in one more round run with CPU profiles (spbench run
	// -profile); nil without it.
	Attribution *Attribution `json:"attribution,omitempty"`
	Targets     []Target     `json:"targets"`
	Counts      CountsCheck  `json:"counts"`
	Notes       []string     `json:"notes"`
	Samples     []Sample     `json:"samples"`
}

// roundRatios returns, for every round in which both verify and other
// ran, other's wall time over verify's (verify's records/s over other's),
// in round order.
func (r *Result) roundRatios(other string) []float64 {
	wall := map[string]map[int]float64{toolVerify: {}, other: {}}
	for _, s := range r.Samples {
		if m, ok := wall[s.Tool]; ok && s.WallSeconds > 0 {
			m[s.Round] = s.WallSeconds
		}
	}
	var out []float64
	for round := 1; round <= r.Rounds; round++ {
		v, vok := wall[toolVerify][round]
		o, ook := wall[other][round]
		if vok && ook {
			out = append(out, o/v)
		}
	}
	return out
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func rate(n float64, secs float64) float64 {
	if secs <= 0 {
		return 0
	}
	return n / secs
}

// measuredSource is the "how measured" of the stages verify reports.
const measuredSource = "verify --json execution.stages (worker seconds ÷ CPUs)"

// measuredStageLabels names the stages of a report's execution.stages, in
// pipeline order.
var measuredStageLabels = []struct{ key, label string }{
	{stageRead, "read"},
	{stageStorageDigest, "storage digest (sha256 of the bytes)"},
	{stageDecode, "decompress+decode (all columns)"},
	{stageContentDigest, "content digest (sha256 per value)"},
	{stageTuples, "canonical encode+logical digest+tuples+partitions"},
	{stageShuffleWrite, "shuffle write: sort+Arrow IPC (+zstd if the plan says)+store puts+commits"},
	{stageReduce, "reduce: merge+diff+bucket leaves (snapshot members the reducers read count in the rows above)"},
	{stageAggregate, "aggregate+report"},
}

// measuredStage is the median over rounds of one stage verify measured:
// worker seconds as cpu, worker seconds ÷ CPUs as wall.
type measuredStage struct {
	key, label string
	v          struct{ wall, cpu float64 }
}

// measuredStages returns the medians of the stages the verify samples
// report, known stages in pipeline order, then any others by name. It is
// empty when no sample reports stages (a binary older than
// execution.stages).
func (r *Result) measuredStages(verify []Sample) []measuredStage {
	cpus := float64(max(1, r.Host.CPUs))
	vals := map[string][]float64{}
	for _, s := range verify {
		for k, v := range s.Child.Stages {
			vals[k] = append(vals[k], v)
		}
	}
	if len(vals) == 0 {
		return nil
	}
	var out []measuredStage
	one := func(key, label string) {
		m := measuredStage{key: key, label: label}
		m.v.cpu = median(vals[key])
		m.v.wall = m.v.cpu / cpus
		out = append(out, m)
		delete(vals, key)
	}
	var missing []string
	for _, l := range measuredStageLabels {
		if _, ok := vals[l.key]; ok {
			one(l.key, l.label)
		} else {
			missing = append(missing, l.key)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(vals)) {
		one(k, k)
	}
	if len(missing) > 0 {
		r.Notes = append(r.Notes, fmt.Sprintf("verify's report has no execution.stages.%s: those stages are not in the table.", strings.Join(missing, ", ")))
	}
	return out
}

// stagesMeasured says whether the stage table comes from verify's own
// execution.stages rather than the harness's estimates.
func (r *Result) stagesMeasured() bool {
	return slices.ContainsFunc(r.Stages, func(s StageStats) bool { return s.Tool == toolVerify })
}

// summarize fills r.Tools, r.Stages, the ratios and the targets from
// r.Samples.
func (r *Result) summarize(order []string) {
	by := map[string][]Sample{}
	for _, s := range r.Samples {
		by[s.Tool] = append(by[s.Tool], s)
	}
	ds := &r.Dataset
	r.Tools = nil
	for _, tool := range order {
		ss := by[tool]
		if len(ss) == 0 {
			continue
		}
		var walls, rss, cpus []float64
		var peak int64
		for _, s := range ss {
			walls = append(walls, s.WallSeconds)
			cpus = append(cpus, s.CPUSeconds)
			rss = append(rss, float64(s.MaxRSSBytes))
			peak = max(peak, s.MaxRSSBytes)
		}
		med := median(walls)
		r.Tools = append(r.Tools, ToolStats{
			Tool: tool, Runs: len(ss), MinSeconds: slices.Min(walls), MedianSeconds: med,
			RecordsPerSecond:     rate(float64(ds.Records), med),
			BestRecordsPerSecond: rate(float64(ds.Records), slices.Min(walls)),
			StoredMBPerSecond:    rate(float64(ds.StoredBytes)/1e6, med),
			LogicalMBPerSecond:   rate(float64(ds.LogicalBytes)/1e6, med),
			PeakRSSBytes:         peak, MedianRSSBytes: int64(median(rss)),
			MedianCPUSeconds: median(cpus), RecordsPerCPUSecond: rate(float64(ds.Records), median(cpus)),
		})
	}
	// st is the median of one stage's (wall, CPU) seconds.
	type st struct{ wall, cpu float64 }
	stage := func(tool, name string) st {
		var ws, cs []float64
		for _, s := range by[tool] {
			if v, ok := s.Child.Stages[name]; ok {
				ws = append(ws, v)
				cs = append(cs, s.Child.StagesCPU[name])
			}
		}
		return st{median(ws), median(cs)}
	}
	minus := func(a, b st) st { return st{max(0, a.wall-b.wall), max(0, a.cpu-b.cpu)} }
	r.Stages = nil
	add := func(tool, name, source string, v st) {
		r.Stages = append(r.Stages, StageStats{Tool: tool, Stage: name, Source: source,
			MedianSeconds: v.wall, RecordsPerSecond: rate(float64(ds.Records), v.wall),
			MedianCPUSeconds: v.cpu, RecordsPerCPUSecond: rate(float64(ds.Records), v.cpu)})
	}
	ladderZstdRow := func() {
		add(toolLadder, "  of which zstd decompress (ladder estimate)", "ladder: thread CPU time inside arrow-go's zstd Decode during its pqarrow decode level, summed over workers (CPU s), ÷ CPUs (s)", stage(toolLadder, ladderZstd))
	}
	if measured := r.measuredStages(by[toolVerify]); len(measured) > 0 {
		var total st
		for _, m := range measured {
			add(toolVerify, m.label, measuredSource, m.v)
			total.wall, total.cpu = total.wall+m.v.wall, total.cpu+m.v.cpu
			if m.key == stageDecode && len(by[toolLadder]) > 0 {
				ladderZstdRow()
			}
		}
		add(toolVerify, "all stages (sum of the medians)", measuredSource, total)
	} else if len(by[toolLadder]) > 0 {
		l1, l2, l3 := stage(toolLadder, ladderRead), stage(toolLadder, ladderDecode), stage(toolLadder, ladderContent)
		add(toolLadder, "read+storage digest", "ladder: read+sha256", l1)
		add(toolLadder, "decompress+decode", "ladder: +pqarrow decode of all columns, minus the level before", minus(l2, l1))
		ladderZstdRow()
		add(toolLadder, "content digest", "ladder: sha256 loops over text, thread CPU time summed over workers (CPU s), ÷ CPUs (s)", stage(toolLadder, ladderHash))
		lm := stage(toolLadder, ladderMapper)
		add(toolLadder, "canonical encode+logical digest+tuples", "ladder: mapper.MapShard over every file (verify's code, its default column-reader decoder) minus the ladder's content level (pqarrow decoder)", minus(lm, l3))
		if len(by[toolPhases]) > 0 {
			add(toolPhases, "shuffle: sort+Arrow IPC zstd files+store puts+commits", "phases: map phase minus the ladder's mapper.MapShard loop", minus(stage(toolPhases, phaseMap), lm))
		}
		if l3.wall < l2.wall {
			r.Notes = append(r.Notes, "The ladder's content level ran faster than its decode level: noise exceeds the content digest's cost at this size.")
		}
	}
	if len(by[toolCeiling]) > 0 {
		add(toolCeiling, "ceiling: zstd decompress of the content columns", "ceiling: thread CPU time inside zstd Decode, summed over workers (CPU s), ÷ CPUs (s)", stage(toolCeiling, ceilingZstd))
	}
	if len(by[toolPhases]) > 0 && !r.stagesMeasured() {
		add(toolPhases, "map phase (all of the above)", "phases: coordinator Map tasks", stage(toolPhases, phaseMap))
		add(toolPhases, "reduce", "phases: coordinator Reduce tasks", stage(toolPhases, phaseReduce))
		pl, ag := stage(toolPhases, phasePlan), stage(toolPhases, phaseAggregate)
		add(toolPhases, "plan+aggregate", "phases: NewPlan+Open, Aggregate", st{pl.wall + ag.wall, pl.cpu + ag.cpu})
	}
	med := func(tool string, cpu bool) float64 {
		for _, t := range r.Tools {
			if t.Tool == tool {
				if cpu {
					return t.MedianCPUSeconds
				}
				return t.MedianSeconds
			}
		}
		return 0
	}
	ratio := func(other string, cpu bool) float64 {
		v, o := med(toolVerify, cpu), med(other, cpu)
		if v <= 0 || o <= 0 {
			return 0
		}
		return o / v // records/s ratio: same records, so the inverse of the time ratio
	}
	r.RatioVerifyOverDuckdbDiff = ratio(toolDuckDiff, false)
	r.RatioVerifyOverCeiling = ratio(toolCeiling, false)
	r.RatioVerifyOverDuckdbScan = ratio(toolDuckScan, false)
	r.RatioVerifyOverDuckdbDiffCPU = ratio(toolDuckDiff, true)
	r.RatioVerifyOverCeilingCPU = ratio(toolCeiling, true)
	r.RoundRatiosVerifyOverDuckdbDiff = r.roundRatios(toolDuckDiff)
	r.RoundRatiosVerifyOverCeiling = r.roundRatios(toolCeiling)
	r.mapSide()
	r.Targets = []Target{
		{Name: "verify records/s over DuckDB diff records/s", Value: r.RatioVerifyOverDuckdbDiff, Want: ">= 3", Met: r.RatioVerifyOverDuckdbDiff >= 3},
		{Name: "verify records/s over ceiling records/s", Value: r.RatioVerifyOverCeiling, Want: ">= 0.85", Met: r.RatioVerifyOverCeiling >= 0.85},
	}
}

// mapSide fills MapSideSeconds and its ratios from the ladder's samples
// and the tools' medians.
func (r *Result) mapSide() {
	var ws []float64
	for _, s := range r.Samples {
		if v, ok := s.Child.Stages[ladderMapper]; ok && s.Tool == toolLadder {
			ws = append(ws, v)
		}
	}
	r.MapSideSeconds, r.RatioMapSideOverCeiling, r.RatioMapSideOverDuckdbDiff = 0, 0, 0
	ms := median(ws)
	if ms <= 0 {
		return
	}
	r.MapSideSeconds = ms
	for _, t := range r.Tools {
		switch {
		case t.Tool == toolCeiling && t.MedianSeconds > 0:
			r.RatioMapSideOverCeiling = t.MedianSeconds / ms
		case t.Tool == toolDuckDiff && t.MedianSeconds > 0:
			r.RatioMapSideOverDuckdbDiff = t.MedianSeconds / ms
		}
	}
}

// checkCounts compares every round's verify and DuckDB counts with the
// injected drift.
func (r *Result) checkCounts() {
	c := &r.Counts
	c.Expected = r.Dataset.Expected
	c.Equal = true
	for _, s := range r.Samples {
		if s.Child.Counts == nil || (s.Tool != toolVerify && s.Tool != toolDuckDiff && s.Tool != toolPhases) {
			continue
		}
		if s.Tool == toolDuckDiff {
			c.DuckDB = *s.Child.Counts
		} else if s.Tool == toolVerify {
			c.Verify = *s.Child.Counts
		}
		if *s.Child.Counts != c.Expected {
			c.Equal = false
			c.Mismatches = append(c.Mismatches, fmt.Sprintf("round %d %s: %+v, expected %+v", s.Round, s.Tool, *s.Child.Counts, c.Expected))
		}
	}
}

func mb(b int64) float64 { return float64(b) / (1 << 20) }

// Markdown renders the result as the tables README.md shows.
func (r *Result) Markdown() string {
	var b strings.Builder
	ds := &r.Dataset
	fmt.Fprintf(&b, "### %s — %d records, %d shards, %d rounds\n\n", r.Started, ds.Records, ds.Shards, r.Rounds)
	fmt.Fprintf(&b, "`%s` on %d × %s, %s. Release: %.1f MB stored (+%.1f MB snapshot member files), %.1f MB logical, decompression ratio %.2f.\n\n",
		r.Command, r.Host.CPUs, r.Host.CPUModel, r.Host.GoVersion, float64(ds.StoredBytes)/1e6, float64(ds.MemberStoredBytes)/1e6, float64(ds.LogicalBytes)/1e6, ds.DecompressionRatio)
	fmt.Fprintf(&b, "Load average (1 min) %.1f at start, %.1f at end, on %d CPUs.\n\n", r.Host.LoadStart, r.Host.LoadEnd, r.Host.CPUs)
	b.WriteString("| tool | median s | min s | records/s | stored MB/s | logical MB/s | CPU s | records/CPU-s | peak RSS MiB |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, t := range r.Tools {
		fmt.Fprintf(&b, "| %s | %.2f | %.2f | %.0f | %.1f | %.1f | %.2f | %.0f | %.0f |\n", t.Tool, t.MedianSeconds, t.MinSeconds,
			t.RecordsPerSecond, t.StoredMBPerSecond, t.LogicalMBPerSecond, t.MedianCPUSeconds, t.RecordsPerCPUSecond, mb(t.PeakRSSBytes))
	}
	if len(r.Stages) > 0 {
		b.WriteString("\n| verify stage | median s | records/s alone | CPU (worker) s | records/CPU-s | how measured |\n|---|---:|---:|---:|---:|---|\n")
		for _, s := range r.Stages {
			fmt.Fprintf(&b, "| %s | %.2f | %.0f | %.2f | %.0f | %s |\n", s.Stage, s.MedianSeconds, s.RecordsPerSecond, s.MedianCPUSeconds, s.RecordsPerCPUSecond, s.Source)
		}
	}
	fmt.Fprintf(&b, "\nratioVerifyOverDuckdbDiff **%.2f**, ratioVerifyOverCeiling **%.2f**, verify/DuckDB scan %.2f (records/s, medians); per CPU-second: verify/DuckDB diff %.2f, verify/ceiling %.2f.\n\n",
		r.RatioVerifyOverDuckdbDiff, r.RatioVerifyOverCeiling, r.RatioVerifyOverDuckdbScan, r.RatioVerifyOverDuckdbDiffCPU, r.RatioVerifyOverCeilingCPU)
	if len(r.RoundRatiosVerifyOverDuckdbDiff) > 0 || len(r.RoundRatiosVerifyOverCeiling) > 0 {
		fmt.Fprintf(&b, "Round by round (wall times of the same round): verify/DuckDB diff %s; verify/ceiling %s.\n\n",
			joinRatios(r.RoundRatiosVerifyOverDuckdbDiff), joinRatios(r.RoundRatiosVerifyOverCeiling))
	}
	for _, smp := range r.Samples {
		if m := smp.Child.Members; smp.Tool == toolVerify && m != nil {
			// The same in every round: the plan and the data are.
			fmt.Fprintf(&b, "Snapshot member files verify read (round %d): %d whole, %d bucket by bucket (%d buckets, each through the pages or row groups holding it), %d skipped (every bucket matched the snapshot's leaf index).\n\n",
				smp.Round, m.Whole, m.ByBucket, m.Buckets, m.Skipped)
			break
		}
	}
	if r.MapSideSeconds > 0 {
		fmt.Fprintf(&b, "Map side alone (the ladder's last level: `mapper.MapShard`, verify's own map code, over every release shard on all cores, tuples dropped; no member files, no shuffle, no diff): median %.2f s, %.0f records/s, %.2f× the ceiling's records/s and %.2f× DuckDB's diff (tools' medians as above). verify runs this map code and more, so these bound its two ratios from above, whatever its shuffle and reduce cost; a bound below a target says the target is out of reach for this map code.\n\n",
			r.MapSideSeconds, rate(float64(r.Dataset.Records), r.MapSideSeconds), r.RatioMapSideOverCeiling, r.RatioMapSideOverDuckdbDiff)
	}
	if a := r.Attribution; a != nil {
		fmt.Fprintf(&b, "Where the CPU went, by kind of work: one more round after the measured ones, verify and the ceiling each run with a CPU profile (not timed; `spbench attribute` over the profiles, each sample charged to the first kind any of its stack's functions belongs to, in the table's order):\n\n%s\n", a.markdown())
	}
	b.WriteString("| target | value | want | met |\n|---|---:|---|---|\n")
	for _, t := range r.Targets {
		fmt.Fprintf(&b, "| %s | %.2f | %s | %v |\n", t.Name, t.Value, t.Want, t.Met)
	}
	c := &r.Counts
	b.WriteString("\n| diff count | injected | verify | DuckDB |\n|---|---:|---:|---:|\n")
	for _, row := range []struct {
		name    string
		e, v, d int64
	}{
		{"records", c.Expected.Records, c.Verify.Records, c.DuckDB.Records},
		{"snapshot records", c.Expected.SnapshotRecords, c.Verify.SnapshotRecords, c.DuckDB.SnapshotRecords},
		{"MISSING_MEMBER", c.Expected.Missing, c.Verify.Missing, c.DuckDB.Missing},
		{"EXTRA_MEMBER", c.Expected.Extra, c.Verify.Extra, c.DuckDB.Extra},
		{"DUPLICATE_MEMBER", c.Expected.Duplicate, c.Verify.Duplicate, c.DuckDB.Duplicate},
		{"CONTENT_SUBSTITUTION", c.Expected.ContentSubstitution, c.Verify.ContentSubstitution, c.DuckDB.ContentSubstitution},
		{"SOURCE_VERSION_CHANGE", c.Expected.SourceVersionChange, c.Verify.SourceVersionChange, c.DuckDB.SourceVersionChange},
		{"SOURCE_ID_CHANGE", c.Expected.SourceIDChange, c.Verify.SourceIDChange, c.DuckDB.SourceIDChange},
		{"SPLIT_CONFLICT", c.Expected.SplitConflict, c.Verify.SplitConflict, c.DuckDB.SplitConflict},
	} {
		fmt.Fprintf(&b, "| %s | %d | %d | %d |\n", row.name, row.e, row.v, row.d)
	}
	fmt.Fprintf(&b, "\nAll rounds equal: **%v**.\n", c.Equal)
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "\n- %s", n)
	}
	if len(r.Notes) > 0 {
		b.WriteString("\n")
	}
	return b.String()
}

// bar is one bar of a chart.
type bar struct {
	label string
	value float64
	color string
}

// Bar colours: tools, stages verify measured, stages the harness estimated.
const (
	colorTool      = "#3b7dd8"
	colorMeasured  = "#e08a2c"
	colorEstimated = "#9a9a9a"
)

// SVG renders two bar charts by hand: records/s per tool (linear) and
// records/s per verify stage alone (log scale, since stages differ by
// orders of magnitude), stages verify measured in one colour and the
// harness's estimates in another.
func (r *Result) SVG() string {
	var tools, stages []bar
	for _, t := range r.Tools {
		if t.Tool == toolStartup { // a floor, not a throughput
			continue
		}
		tools = append(tools, bar{t.Tool, t.RecordsPerSecond, colorTool})
	}
	for _, s := range r.Stages {
		c := colorEstimated
		if s.Tool == toolVerify {
			c = colorMeasured
		}
		stages = append(stages, bar{s.Stage, s.RecordsPerSecond, c})
	}
	const (
		width  = 980
		left   = 420
		right  = 120
		rowH   = 26
		titleH = 40
	)
	h := titleH*2 + rowH*(len(tools)+len(stages)) + 40
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="13">`+"\n", width, h)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", width, h)
	y := 0
	section := func(title string, bars []bar, logScale bool) {
		y += titleH
		fmt.Fprintf(&b, `<text x="10" y="%d" font-weight="bold">%s</text>`+"\n", y-12, html.EscapeString(title))
		maxV := 0.0
		for _, x := range bars {
			maxV = max(maxV, x.value)
		}
		scale := func(v float64) float64 {
			if v <= 0 || maxV <= 0 {
				return 0
			}
			if logScale {
				lo := math.Log10(max(1, maxV)) - 4 // four decades
				return max(0, (math.Log10(v)-lo)/(math.Log10(maxV)-lo))
			}
			return v / maxV
		}
		for _, x := range bars {
			w := scale(x.value) * float64(width-left-right)
			fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="end">%s</text>`, left-8, y+17, html.EscapeString(x.label))
			fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%.1f" height="%d" fill="%s"/>`, left, y+4, w, rowH-8, x.color)
			fmt.Fprintf(&b, `<text x="%.1f" y="%d">%s</text>`+"\n", float64(left)+w+6, y+17, humanRate(x.value))
			y += rowH
		}
	}
	section(fmt.Sprintf("records/s per tool (median of %d rounds, %d records)", r.Rounds, r.Dataset.Records), tools, false)
	title := "records/s per verify stage alone on all CPUs (log scale; grey: harness estimate)"
	if r.stagesMeasured() {
		title = "records/s per verify stage alone on all CPUs (log scale; orange: measured by verify, grey: estimate)"
	}
	section(title, stages, true)
	b.WriteString("</svg>\n")
	return b.String()
}

func humanRate(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.2fM/s", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.1fk/s", v/1e3)
	}
	return fmt.Sprintf("%.0f/s", v)
}

// sortSamples orders samples by round, then tool, for stable output.
func sortSamples(ss []Sample) {
	slices.SortStableFunc(ss, func(a, b Sample) int { return cmp.Compare(a.Round, b.Round) })
}

// joinRatios formats ratios as "1.23, 0.98" ("—" for none).
func joinRatios(xs []float64) string {
	if len(xs) == 0 {
		return "—"
	}
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmt.Sprintf("%.2f", x)
	}
	return strings.Join(parts, ", ")
}
