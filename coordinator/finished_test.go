package coordinator

import (
	"bytes"
	"context"
	"io"
	"sync"
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

// planReports returns how many report records plan pd has.
func planReports(t *testing.T, s objstore.Store, pd manifest.Digest) int {
	t.Helper()
	n := 0
	for ; ; n++ {
		if _, err := s.Head(t.Context(), planReportKey(pd, n), ""); objstore.IsNotExist(err) {
			return n
		} else if err != nil {
			t.Fatal(err)
		}
	}
}

// A plan whose job finished keeps its report: a run of it again (a
// resume after the job's files were deleted, or while they were being
// deleted) returns that report, byte for byte, and runs nothing; an
// aggregation run again returns it too. A record that is damaged (a key
// twice or in another case too), or names the report of another plan, is
// no record: the job runs again and its report is recorded, at the next
// key (the record damaged is the plan's last).
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
			n := planReports(t, s, pd)
			if _, err := s.Put(ctx, planReportKey(pd, n-1), bytes.NewReader(c.record), objstore.PutOptions{}); err != nil {
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
			if m := planReports(t, s, pd); m != n+1 {
				t.Fatalf("%d report records, want %d: the rerun's at the next key", m, n+1)
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
		got, _, err := jj.finished(ctx, false)
		checkCoded(t, "Finished", err, b)
		if got != nil && (got.Report.Execution.Plan != out.Plan || got.ReportDigest != out.ReportDigest) {
			t.Fatalf("record %q gave report %s of plan %s", b, got.ReportDigest, got.Report.Execution.Plan)
		}
	})
}

// readThen decorates a store: the first Get of key opens the version
// there, then calls then before the caller reads it, as another process
// acting between a read and what the reader does next.
type readThen struct {
	objstore.Store
	key  string
	then func()
	once sync.Once
}

func (r *readThen) Get(ctx context.Context, key string, v objstore.Version) (io.ReadCloser, error) {
	rc, err := r.Store.Get(ctx, key, v)
	if key == r.key {
		r.once.Do(r.then)
	}
	return rc, err
}

// A plan's report record that is not valid (damaged bytes) was replaced
// by a new version, written over unconditionally: two aggregations
// racing over it (a job taken over while its holder still aggregates,
// or two aggregate tasks run by hand) each wrote its own report, and
// the one that wrote first returned a report that was not the plan's.
// The report is now recorded at a new key, report.v1.1, by conditional
// create: exactly one of the two makes it, and both return its report;
// the damaged record is left as it is, and every reader after takes the
// highest valid record.
func TestInvalidReportRecordReplacedOnce(t *testing.T) {
	s, _, res := fileSynth(t)
	ctx := t.Context()
	first, err := Verify(ctx, s, Options{PlanOptions: PlanOptions{Root: res.Root, Tool: "shardproof test", Nonce: "replaced once"}})
	if err != nil {
		t.Fatal(err)
	}
	pd := first.Plan
	key := PlanReportKey(pd)
	damaged := []byte(`{"schema":"training.verify.plan-report.v1","plan":"sha`)
	if _, err := s.Put(ctx, key, bytes.NewReader(damaged), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}

	b, err := Open(ctx, s, pd)
	if err != nil {
		t.Fatal(err)
	}
	var (
		dB   manifest.Digest
		errB error
	)
	// Aggregation a reads the damaged record; aggregation b then runs
	// whole before a goes on.
	race := &readThen{Store: s, key: key, then: func() { _, dB, errB = b.Aggregate(ctx, manifest.Execution{Executor: "b"}) }}
	a, err := Open(ctx, race, pd)
	if err != nil {
		t.Fatal(err)
	}
	_, dA, errA := a.Aggregate(ctx, manifest.Execution{Executor: "a"})
	if errA != nil || errB != nil {
		t.Fatalf("aggregations over a damaged report record: %v, %v", errA, errB)
	}
	if dB.IsZero() {
		t.Fatal("aggregation b did not run beside a")
	}
	if dA != dB {
		t.Fatalf("two aggregations racing over a damaged report record returned reports %s and %s: one is not the plan's", dA, dB)
	}

	// The damaged record is left as it was; one new record names the
	// report, and no more are made.
	rc, err := s.Get(ctx, key, "")
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(rc)
	rc.Close()
	if !bytes.Equal(got, damaged) {
		t.Fatalf("the damaged record was written over: %q", got)
	}
	if n := versions(t, s, key+".1"); n != 1 {
		t.Fatalf("%s.1 has %d versions, want 1", key, n)
	}
	again, err := Open(ctx, s, pd)
	if err != nil {
		t.Fatal(err)
	}
	if _, d, err := again.Aggregate(ctx, manifest.Execution{Executor: "c"}); err != nil || d != dB {
		t.Fatalf("aggregate once more: %s, %v; want the recorded %s", d, err, dB)
	}
	if _, err := s.Head(ctx, key+".2", ""); !objstore.IsNotExist(err) {
		t.Fatalf("%s.2: %v; want none", key, err)
	}

	// A resume of the plan, its job's files gone, gives that report.
	if err := RemoveJob(ctx, s, pd); err != nil {
		t.Fatal(err)
	}
	out, err := Run(ctx, s, pd, 2, nil)
	if err != nil || !out.Reused || out.ReportDigest != dB {
		t.Fatalf("resume: %+v, %v; want report %s reused", out, err, dB)
	}

	// A record past the valid one that is not valid itself (written by
	// hand) leaves the plan's report as it is: the highest valid one.
	if _, err := s.Put(ctx, key+".2", bytes.NewReader(damaged), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if out, err := again.Finished(ctx); err != nil || out == nil || out.ReportDigest != dB {
		t.Fatalf("finished past a damaged record .2: %+v, %v; want report %s", out, err, dB)
	}

	// A plan whose every record is damaged, MaxPlanReports of them,
	// records no more: its aggregation fails BAD_DOCUMENT, writing none.
	o := PlanOptions{Root: res.Root, Tool: "shardproof test", Nonce: "every record damaged"}
	full, err := Verify(ctx, s, Options{PlanOptions: o})
	if err != nil {
		t.Fatal(err)
	}
	for n := range MaxPlanReports {
		if _, err := s.Put(ctx, planReportKey(full.Plan, n), bytes.NewReader(damaged), objstore.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	j, err := Open(ctx, s, full.Plan)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := j.Aggregate(ctx, manifest.Execution{Executor: "d"}); errcode.Of(err) != errcode.BadDocument {
		t.Fatalf("aggregate with every report record damaged: %v, want %s", err, errcode.BadDocument)
	}
	if n := planReports(t, s, full.Plan); n != MaxPlanReports {
		t.Fatalf("%d report records, want %d", n, MaxPlanReports)
	}
}
