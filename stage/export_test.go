package stage

// SetMaxOpenSpools lets tests force several spool levels.
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

// CountInputReads counts the reads of the inputs' rows (each a pass over
// one input file) until restore.
func CountInputReads() (reads func() int, restore func()) {
	n := 0
	onInputRead = func(string) { n++ }
	return func() int { return n }, func() { onInputRead = nil }
}

// WatchSpool calls fn once each Stage has spooled its rows, with the
// levels the deepest shard took and the rows written to spool files.
func WatchSpool(fn func(levels int, written int64)) (restore func()) {
	onSpooled = fn
	return func() { onSpooled = nil }
}

// OnSpoolSplit calls fn before each spool file is split, with its level.
func OnSpoolSplit(fn func(level int)) (restore func()) {
	onSpoolSplit = fn
	return func() { onSpoolSplit = nil }
}

// OnInputRead calls fn each time an input's rows are about to be read
// (the sort's pass, then the spool's).
func OnInputRead(fn func(path string)) (restore func()) {
	onInputRead = fn
	return func() { onInputRead = nil }
}

// WatchSpoolBatches calls fn with the rows and string bytes of each batch
// written to a spool file, and makes a spool file write its rows out once
// they hold flushBytes of strings.
func WatchSpoolBatches(flushBytes int, fn func(rows, bytes int)) (restore func()) {
	old := spoolFlushBytes
	spoolFlushBytes, onSpoolBatch = flushBytes, fn
	return func() { spoolFlushBytes, onSpoolBatch = old, nil }
}

// SetMaxColumnBytes lowers the bytes a shard's string column may hold.
func SetMaxColumnBytes(n int64) (restore func()) {
	old := maxColumnBytes
	maxColumnBytes = n
	return func() { maxColumnBytes = old }
}
