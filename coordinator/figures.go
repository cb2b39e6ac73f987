package coordinator

import (
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/mapper"
)

// addFigure adds n, a figure a commit record declares (a file's size, a
// count, buckets read), to *total, and reports whether the sum fits
// (manifest.AddFigure); *total is left as it was when it does not.
// Figures each one a record may hold sum past an int64 only when
// forged: wrapped, the report's sum would be a small number taken for
// the job's, or a negative one.
func addFigure[T manifest.Figure](total *T, n T) bool {
	s, ok := manifest.AddFigure(*total, n)
	*total = s
	return ok
}

// sizesFit reports whether the sizes of files sum to no more than an
// int64 holds.
func sizesFit(files []Output) bool {
	var total int64
	for _, o := range files {
		if !addFigure(&total, o.Size) {
			return false
		}
	}
	return true
}

// resultsFit reports whether the figures of results the report sums
// (stored and logical bytes, buckets read) each sum to no more than
// their type holds: results of one record whose figures do not are
// forged, and the record damaged.
func resultsFit(results []mapper.Result) bool {
	var stored, logical int64
	var buckets int
	for k := range results {
		r := &results[k]
		if !addFigure(&stored, r.StoredBytes) || !addFigure(&logical, r.LogicalBytes) || !addFigure(&buckets, r.BucketsRead) {
			return false
		}
	}
	return true
}
