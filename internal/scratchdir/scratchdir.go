// Package scratchdir makes temporary directories that a later process
// can tell from live ones. Each holds a lock file that its creator keeps
// locked (flock) for as long as it lives, so a directory whose lock can be
// taken was left by a process that died without removing it (kill -9, the
// OOM killer), and Sweep removes it. A process that exits normally, or on
// SIGTERM or SIGINT, removes its own.
//
// Where flock is not available (Windows), directories are made unlocked
// and Sweep removes only directories without a lock file that are older
// than a day.
package scratchdir

import (
	"os"
	"path/filepath"
	"strings"
	"time"
)

// lockName is the lock file inside every directory.
const lockName = ".lock"

// settle is how old a free lock must be before Sweep trusts it: a new
// directory's lock is created, then locked, a few microseconds apart.
const settle = time.Minute

// orphanAge is how old a directory without a lock file (made by an older
// build) must be before Sweep removes it.
const orphanAge = 24 * time.Hour

// Dir is a temporary directory this process holds.
type Dir struct {
	// Path is the directory.
	Path string
	lock *os.File
}

// New creates a directory in parent (os.TempDir() when empty) named
// prefix followed by random characters, and locks it for this process.
func New(parent, prefix string) (*Dir, error) {
	dir, err := os.MkdirTemp(parent, prefix)
	if err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(dir, lockName), os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o600)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if err := lock(f, true); err != nil {
		f.Close()
		os.RemoveAll(dir)
		return nil, err
	}
	return &Dir{Path: dir, lock: f}, nil
}

// Remove deletes the directory and releases its lock.
func (d *Dir) Remove() error {
	err := os.RemoveAll(d.Path)
	if d.lock != nil {
		d.lock.Close() // closing the file releases the lock
		d.lock = nil
	}
	return err
}

// Sweep removes the directories in parent (os.TempDir() when empty) named
// prefix… that no living process holds, and returns how many it removed.
// It is best effort: what it cannot read or remove it leaves.
func Sweep(parent, prefix string) int {
	if parent == "" {
		parent = os.TempDir()
	}
	entries, err := os.ReadDir(parent)
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), prefix) {
			continue
		}
		dir := filepath.Join(parent, e.Name())
		if abandoned(dir) && os.RemoveAll(dir) == nil {
			n++
		}
	}
	return n
}

// abandoned reports whether no living process holds dir.
func abandoned(dir string) bool {
	path := filepath.Join(dir, lockName)
	st, err := os.Stat(path)
	if os.IsNotExist(err) {
		info, err := os.Stat(dir)
		return err == nil && time.Since(info.ModTime()) > orphanAge
	}
	if err != nil || time.Since(st.ModTime()) < settle {
		return false
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return false
	}
	defer f.Close()
	// Taking the lock means nobody holds it; it is released on Close.
	return lock(f, false) == nil
}
