package manifest

// Figure is the type of a figure a document or a task's record declares
// and a report sums: a count, a size in bytes, a number of buckets.
type Figure interface{ ~int | ~int64 }

// AddFigure returns a+b, two figures, and whether the sum is one: both
// non-negative and the sum no more than the type holds. Figures each
// one a record may declare sum past it only when forged; wrapped, the
// sum would be a small number taken for the true one, or a negative one
// a report's own check refuses (BAD_COUNT). On false it returns a.
func AddFigure[T Figure](a, b T) (T, bool) {
	s := a + b
	if a < 0 || b < 0 || s < a {
		return a, false
	}
	return s, true
}
