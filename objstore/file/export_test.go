package file

import (
	"sync"
	"sync/atomic"
)

// WatchDirSyncs records the path of every directory the store fsyncs
// until restore; synced returns them in order and starts a new record.
func WatchDirSyncs() (synced func() []string, restore func()) {
	var (
		mu   sync.Mutex
		dirs []string
	)
	dirSynced = func(dir string) {
		mu.Lock()
		dirs = append(dirs, dir)
		mu.Unlock()
	}
	return func() []string {
			mu.Lock()
			defer mu.Unlock()
			out := dirs
			dirs = nil
			return out
		}, func() {
			dirSynced = nil
		}
}

// CountListEntries counts the directory entries List reads until
// restore; read returns the count so far.
func CountListEntries() (read func() int64, restore func()) {
	var n atomic.Int64
	listEntries = func(k int) { n.Add(int64(k)) }
	return n.Load, func() { listEntries = nil }
}
