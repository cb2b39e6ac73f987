package main

import (
	"context"
	"encoding/xml"
	"errors"
	"io"
	"math"
	"strings"
	"testing"

	"github.com/shardproof/shardproof/coordinator"
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
	if n, err := mapShards(ctx, d); err != nil || n != d.Records+d.SnapshotRecords {
		t.Fatalf("mapper emitted %d tuples (err %v), want %d", n, err, d.Records+d.SnapshotRecords)
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
	r.summarize(allTools)
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
	if md := r.Markdown(); !strings.Contains(md, "ratioVerifyOverDuckdbDiff **2.50**") {
		t.Fatalf("markdown lacks the ratio:\n%s", md)
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
