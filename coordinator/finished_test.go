package coordinator

import (
	"bytes"
	"context"
	"io"
	"testing"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/objstore"
	"github.com/shardproof/shardproof/stage/stagetest"
)

// jobKeys counts the keys under plan pd's job prefix, and under prefix
// within it.
func jobKeys(t *testing.T, s objstore.Store, pd manifest.Digest, within string) int {
	t.Helper()
	page, err := s.List(t.Context(), jobPrefix(pd)+within, "", 1000)
	if err != nil {
		t.Fatal(err)
	}
	return len(page.Objects)
}

// A plan whose job finished keeps its report: a run of it again (a
// resume after the job's files were deleted, or while they were being
// deleted) returns that report, byte for byte, and runs nothing; an
// aggregation run again returns it too. A record that is damaged (a key
// twice or in another case too), or names the report of another plan, is
// no record: the job runs again and its report is recorded.
func TestFinishedPlanKeepsItsReport(t *testing.T) {
	s, res := synth(t)
	ctx := t.Context()
	first, err := Verify(ctx, s, Options{PlanOptions: PlanOptions{Root: res.Root, Tool: "shardproof test", Nonce: "finished"}})
	if err != nil {
		t.Fatal(err)
	}
	pd := first.Plan
	if err := RemoveJob(ctx, s, pd); err != nil {
		t.Fatal(err)
	}
	again, err := Run(ctx, s, pd, 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !again.Reused || again.ReportDigest != first.ReportDigest || !bytes.Equal(must(manifest.Encode(again.Report)), must(manifest.Encode(first.Report))) {
		t.Fatalf("run of a finished plan: reused %v, report %s, want %s", again.Reused, again.ReportDigest, first.ReportDigest)
	}
	if n := jobKeys(t, s, pd, ""); n != 0 {
		t.Fatalf("run of a finished plan wrote %d job keys", n)
	}

	// An aggregation run again, as a retried aggregate pod does.
	other, err := Verify(ctx, s, Options{PlanOptions: PlanOptions{Root: res.Root, Tool: "shardproof test", Nonce: "aggregate twice"}})
	if err != nil {
		t.Fatal(err)
	}
	j, err := Open(ctx, s, other.Plan)
	if err != nil {
		t.Fatal(err)
	}
	if _, d, err := j.Aggregate(ctx, manifest.Execution{Executor: "task", Seconds: 99}); err != nil || d != other.ReportDigest {
		t.Fatalf("aggregate again: report %s, %v; want the recorded %s", d, err, other.ReportDigest)
	}

	for _, c := range []struct {
		name   string
		record []byte
	}{
		{"not JSON", []byte("{")},
		{"another plan's report", must(manifest.Encode(&PlanReport{Schema: PlanReportSchema, Plan: pd, Report: other.ReportDigest}))},
		{"another plan", must(manifest.Encode(&PlanReport{Schema: PlanReportSchema, Plan: other.Plan, Report: first.ReportDigest}))},
		{"a report not stored", must(manifest.Encode(&PlanReport{Schema: PlanReportSchema, Plan: pd, Report: manifest.Sum([]byte("gone"))}))},
		// encoding/json read the last "report", this plan's; another
		// reader the first. And it took "Report" for "report".
		{"report twice", bytes.Replace(must(manifest.Encode(&PlanReport{Schema: PlanReportSchema, Plan: pd, Report: first.ReportDigest})),
			[]byte(`"report":`), []byte(`"report":"`+other.ReportDigest.String()+`","report":`), 1)},
		{"report in another case", bytes.Replace(must(manifest.Encode(&PlanReport{Schema: PlanReportSchema, Plan: pd, Report: first.ReportDigest})),
			[]byte(`"report":`), []byte(`"Report":`), 1)},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := s.Put(ctx, PlanReportKey(pd), bytes.NewReader(c.record), objstore.PutOptions{}); err != nil {
				t.Fatal(err)
			}
			out, err := Run(ctx, s, pd, 2, nil)
			if err != nil {
				t.Fatal(err)
			}
			if out.Reused || !bytes.Equal(withoutExecution(t, out.Report), withoutExecution(t, first.Report)) {
				t.Fatalf("reused %v, or another report", out.Reused)
			}
			next, err := Run(ctx, s, pd, 2, nil)
			if err != nil || !next.Reused || next.ReportDigest != out.ReportDigest {
				t.Fatalf("the rerun's report was not recorded: %+v, %v", next, err)
			}
			if err := RemoveJob(ctx, s, pd); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// bodyOf decorates a store: every version of key reads as body.
type bodyOf struct {
	objstore.Store
	key  string
	body []byte
}

func (b *bodyOf) Get(ctx context.Context, key string, v objstore.Version) (io.ReadCloser, error) {
	if key == b.key {
		return io.NopCloser(bytes.NewReader(b.body)), nil
	}
	return b.Store.Get(ctx, key, v)
}

// checkCoded fails t for an error without a catalogued code, or INTERNAL.
func checkCoded(t *testing.T, what string, err error, input []byte) {
	t.Helper()
	if c := errcode.Of(err); err != nil && (!errcode.Known(c) || c == errcode.Internal) {
		t.Fatalf("%s: uncoded or INTERNAL error: %v\n%q", what, err, input)
	}
}

// FuzzPlanReportRecord gives a plan's report record arbitrary bytes, as
// anyone who can write the store could: looking for the plan's report
// must never panic, a record that does not hold up is no record, and an
// error carries a catalogued code other than INTERNAL.
func FuzzPlanReportRecord(f *testing.F) {
	s := stagetest.Store(f)
	res := stagetest.Synth(f, s, 200, 2, 3)
	ctx := context.Background()
	out, err := Verify(ctx, s, Options{PlanOptions: PlanOptions{Root: res.Root, Tool: "fuzz", Nonce: "fuzz"}})
	if err != nil {
		f.Fatal(err)
	}
	j, err := Open(ctx, s, out.Plan)
	if err != nil {
		f.Fatal(err)
	}
	rc, err := s.Get(ctx, PlanReportKey(out.Plan), "")
	if err != nil {
		f.Fatal(err)
	}
	record, _ := io.ReadAll(rc)
	rc.Close()
	f.Add(record)
	f.Add(bytes.Replace(record, []byte(`"report":"sha256:`), []byte(`"report":"sha256:0`), 1))
	f.Add(bytes.Replace(record, []byte(`"plan":"sha256:`), []byte(`"plan":"sha256:1`), 1))
	f.Add([]byte("null"))
	f.Fuzz(func(t *testing.T, b []byte) {
		jj := *j
		jj.Store = &bodyOf{Store: s, key: PlanReportKey(out.Plan), body: b}
		got, err := jj.finished(ctx, false)
		checkCoded(t, "Finished", err, b)
		if got != nil && (got.Report.Execution.Plan != out.Plan || got.ReportDigest != out.ReportDigest) {
			t.Fatalf("record %q gave report %s of plan %s", b, got.ReportDigest, got.Report.Execution.Plan)
		}
	})
}
