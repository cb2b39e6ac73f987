package stage

// SetMaxOpenSpools lets tests force several spool passes.
func SetMaxOpenSpools(n int) (restore func()) {
	old := maxOpenSpools
	maxOpenSpools = n
	return func() { maxOpenSpools = old }
}
