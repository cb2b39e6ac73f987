package coordinator

import (
	"slices"

	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/mapper"
)

// listedFailures and listedFailureBytes bound the failures a report
// lists (manifest.ListedFailures); tests lower them to cut a small
// release's list.
var (
	listedFailures     = manifest.MaxReportFailures
	listedFailureBytes = manifest.MaxReportFailureBytes
)

// failureList gathers a report's failures and keeps, in the canonical
// order, those the report lists, counting the others: it holds at most
// twice the bound whatever the number of failures.
type failureList struct {
	kept    []manifest.ShardFailure
	omitted int64
}

func (l *failureList) add(f manifest.ShardFailure) {
	l.kept = append(l.kept, f)
	if len(l.kept) >= 2*max(listedFailures, 1) {
		l.cut()
	}
}

// cut sorts the failures kept and leaves those the report would list of
// them. A failure the last cut keeps had no more failures, nor bytes of
// them, before it in any earlier cut's list than in the whole, so every
// earlier cut kept it: cutting as they come changes nothing.
func (l *failureList) cut() {
	slices.SortFunc(l.kept, func(a, b manifest.ShardFailure) int { return manifest.CompareFailures(&a, &b) })
	n := manifest.ListedFailures(l.kept, listedFailures, listedFailureBytes)
	l.omitted += int64(len(l.kept) - n)
	clear(l.kept[n:])
	l.kept = l.kept[:n]
}

// cutResults leaves in the Failures of a task's results those a report
// could list of them, the first in the canonical order within the bound,
// and moves the codes of the others to FailuresOmitted. So a commit
// record holds at most the bound's failures whatever its inputs (50,000
// failing files of one map task made a record over
// manifest.MaxDocumentSize), the aggregation still counts every failure,
// and the report still lists the first of all: a failure the report
// lists is one its own task's cut keeps (manifest.ListedFailures).
func cutResults(results []mapper.Result) {
	type at struct{ r, k int }
	var refs []at
	for r := range results {
		for k := range results[r].Failures {
			refs = append(refs, at{r, k})
		}
	}
	failure := func(a at) *manifest.ShardFailure { return &results[a.r].Failures[a.k] }
	slices.SortFunc(refs, func(a, b at) int { return manifest.CompareFailures(failure(a), failure(b)) })
	sorted := make([]manifest.ShardFailure, len(refs))
	for i, a := range refs {
		sorted[i] = *failure(a)
	}
	n := manifest.ListedFailures(sorted, listedFailures, listedFailureBytes)
	if n == len(refs) {
		return
	}
	omit := make(map[at]bool, len(refs)-n)
	for _, a := range refs[n:] {
		omit[a] = true
	}
	for r := range results {
		res := &results[r]
		var kept []manifest.ShardFailure
		for k, f := range res.Failures {
			if omit[at{r, k}] {
				res.FailuresOmitted = append(res.FailuresOmitted, f.Code)
			} else {
				kept = append(kept, f)
			}
		}
		res.Failures = kept
	}
}
