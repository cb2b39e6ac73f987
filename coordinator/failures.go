package coordinator

import (
	"slices"

	"github.com/shardproof/shardproof/manifest"
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
