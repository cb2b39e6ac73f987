package main

import (
	"bytes"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/publish"
	"github.com/shardproof/shardproof/stage/stagetest"
)

var failureLine = regexp.MustCompile(`(?m)^  release bad-\d+: [A-Z_]+: `)

// A release of 40 truncated shards, 120 failures: verify's summary
// prints the first 20 failure lines and says how many more the report
// lists, and its log has the first 20 failures and one line for the
// rest, instead of 120 summary lines and 240 log lines (the mapper's and
// the aggregation's).
func TestVerifySummaryBoundsFailures(t *testing.T) {
	r := newRelease(t)
	d := r.res.Release.Shards[0]
	truncated := stagetest.PutVersion(t, r.store, d.Digest.BlobKey(), stagetest.Truncate(stagetest.ShardBytes(t, r.store, d), 100))
	rel := stagetest.CloneRelease(r.res.Release)
	for i := range 40 {
		b := d
		b.ID, b.ObjectVersion = fmt.Sprintf("bad-%03d", i), string(truncated)
		rel.Shards = append(rel.Shards, b)
	}
	res := stagetest.Reissue(t, r.store, r.res, rel, false)
	out := runCLI(t, cliEnv(), "verify", "--store", r.dir, "--root", res.Root.String())
	if out.status != errcode.ExitInvalid {
		t.Fatalf("exit %d, want %d\n%s\n%s", out.status, errcode.ExitInvalid, out.stdout, out.stderr)
	}
	m := reportLine.FindStringSubmatch(out.stdout)
	if m == nil {
		t.Fatalf("no report line:\n%s", out.stdout)
	}
	if n := len(failureLine.FindAllString(out.stdout, -1)); n != summaryFailures ||
		!strings.Contains(out.stdout, "  DIGEST_MISMATCH        40\n") ||
		!strings.Contains(out.stdout, "\n  … and 100 more failures (report "+m[1]+" lists 120 of 120)\n") {
		t.Fatalf("summary with %d failure lines, want %d and the line for 100 more:\n%s", n, summaryFailures, out.stdout)
	}
	if n, more, mapped := strings.Count(out.stderr, "msg=\"verification failure\""), strings.Count(out.stderr, "msg=\"more verification failures\""), strings.Count(out.stderr, "map: shard failure"); n != 20 || more != 1 || mapped != 0 ||
		!strings.Contains(out.stderr, "report="+m[1]+" more=100 listed=120 failuresOmitted=0") {
		t.Fatalf("log: %d failure lines, %d for more, %d of the mapper; want 20, 1, 0:\n%s", n, more, mapped, out.stderr)
	}
}

// publish's summary of an INVALID report prints as many failure lines as
// verify's, and counts those the report leaves out.
func TestPublishSummaryBoundsFailures(t *testing.T) {
	rep := &manifest.Report{Verdict: manifest.Invalid, Counts: manifest.Counts{DigestFailures: 35}, FailuresOmitted: 5}
	for i := range 30 {
		rep.Failures = append(rep.Failures, manifest.ShardFailure{Shard: fmt.Sprintf("bad-%03d", i), Side: "release", Code: "DIGEST_MISMATCH", Detail: "d"})
	}
	d := manifest.Sum([]byte("report"))
	var w bytes.Buffer
	printPublishOutcome(&w, &publish.Outcome{Report: rep, ReportDigest: d}, false, false)
	if n := len(failureLine.FindAllString(w.String(), -1)); n != summaryFailures ||
		!strings.HasSuffix(w.String(), fmt.Sprintf("  … and 15 more failures (report %s lists 30 of 35)\n", d)) {
		t.Fatalf("publish summary with %d failure lines, want %d and the line for 15 more:\n%s", n, summaryFailures, w.String())
	}
}

// manifest show's line for a report counts the failures it leaves out
// of its list, and says how many it lists.
func TestManifestShowCountsOmittedFailures(t *testing.T) {
	rep := &manifest.Report{Verdict: manifest.Invalid, Counts: manifest.Counts{Shards: 40, DigestFailures: 40}, FailuresOmitted: 10_500 - manifest.MaxReportFailures}
	rep.Failures = make([]manifest.ShardFailure, manifest.MaxReportFailures)
	if got := summary(manifest.Sum([]byte("report")), "v1", rep); !strings.Contains(got, "10500 shard-level failures (10000 listed)") {
		t.Fatalf("manifest show: %s", got)
	}
}
