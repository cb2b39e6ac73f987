//go:build unix

package scratchdir

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// age sets path's modification time back by d.
func age(t *testing.T, path string, d time.Duration) {
	t.Helper()
	old := time.Now().Add(-d)
	if err := os.Chtimes(path, old, old); err != nil {
		t.Fatal(err)
	}
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// Sweep removes exactly the directories no living holder has: a held one
// stays however old, a freshly made one stays until its lock settles, and
// one whose holder is gone (its lock released without the directory being
// removed, as when the process is killed) goes; so does a lock-less one
// from an older build, once a day old.
func TestSweepRemovesOnlyAbandoned(t *testing.T) {
	parent := t.TempDir()
	held, err := New(parent, "sp-x-")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Remove()
	age(t, filepath.Join(held.Path, lockName), time.Hour)

	dead, err := New(parent, "sp-x-")
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dead.Path, "spool"), make([]byte, 1<<10), 0o600)
	young, err := New(parent, "sp-x-")
	if err != nil {
		t.Fatal(err)
	}
	dead.lock.Close() // the holder is gone; the directory is not
	young.lock.Close()
	age(t, filepath.Join(dead.Path, lockName), time.Hour)

	oldOrphan := filepath.Join(parent, "sp-x-orphan-old")
	newOrphan := filepath.Join(parent, "sp-x-orphan-new")
	other := filepath.Join(parent, "someone-else")
	for _, d := range []string{oldOrphan, newOrphan, other} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	age(t, oldOrphan, 25*time.Hour)
	age(t, other, 25*time.Hour)

	if n := Sweep(parent, "sp-x-"); n != 2 {
		t.Errorf("Sweep removed %d directories, want 2", n)
	}
	for path, want := range map[string]bool{
		held.Path: true, dead.Path: false, young.Path: true,
		oldOrphan: false, newOrphan: true, other: true,
	} {
		if exists(path) != want {
			t.Errorf("%s: exists %v, want %v", filepath.Base(path), !want, want)
		}
	}
	if err := held.Remove(); err != nil || exists(held.Path) {
		t.Fatalf("Remove: %v (exists %v)", err, exists(held.Path))
	}
}
