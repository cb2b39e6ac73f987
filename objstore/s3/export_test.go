package s3

// SetVersionsPage sets the page size DeletePrefix lists versions with.
func SetVersionsPage(s *Store, n int32) { s.versionsPage = n }
