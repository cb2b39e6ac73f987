package stage

// SetMaxOpenSpools lets tests force several spool passes.
func SetMaxOpenSpools(n int) (restore func()) {
	old := maxOpenSpools
	maxOpenSpools = n
	return func() { maxOpenSpools = old }
}

// SetSortRun makes the sort spill a run every runBytes of keys and merge
// at most fanIn runs at once, as a release far larger than the test's
// would.
func SetSortRun(runBytes, fanIn int) (restore func()) {
	oldBytes, oldFan := sortRunBytes, sortFanIn
	sortRunBytes, sortFanIn = runBytes, fanIn
	return func() { sortRunBytes, sortFanIn = oldBytes, oldFan }
}

// SetKeyHashMask keeps only mask's bits of the sort hashes, so that
// distinct sampleIds tie on their hash.
func SetKeyHashMask(mask uint64) (restore func()) {
	old := keyHashMask
	keyHashMask = mask
	return func() { keyHashMask = old }
}
