package main

import (
	"os"

	"github.com/shardproof/shardproof/internal/errcode"
)

// openArgFile opens a local file the command line names (manifest check
// and put's FILE, store put's FILE, --assignment, --shards-file). One
// that cannot be opened (missing, not readable) or is a directory is
// USAGE, exit 2, as gate serve --restore's FILE, --sign-key's and the
// gate token file are: the command line is wrong, and nothing was done.
// They were IO, exit 3, the status scripts retry. A failure to read the
// file once opened stays the caller's IO.
func openArgFile(what, path string) (*os.File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, errcode.Wrap(errcode.Usage, err, "%s", what)
	}
	if fi, err := f.Stat(); err == nil && fi.IsDir() {
		f.Close()
		return nil, errcode.New(errcode.Usage, "%s: %s is a directory: give a file", what, path)
	}
	return f, nil
}
