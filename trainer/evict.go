package trainer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
)

// CacheEntry is one cache entry as an eviction saw it.
type CacheEntry struct {
	Digest manifest.Digest
	Size   int64
	// Used is when a worker last filled the entry or found it intact:
	// its mark under used/, or the entry's modification time when that
	// is later (an entry no worker marked: an older build's).
	Used time.Time
}

// Eviction is what one eviction removed, and what it skipped because a
// live worker holds it.
type Eviction struct {
	// Removed are the entries removed (with Prune's dry run, that would
	// be), least recently used first.
	Removed []CacheEntry
	// InUse are the entries it would have removed before those it did,
	// skipped because another open file holds a lock on them.
	InUse []CacheEntry
	// Before and After are the bytes of the cache's entries and temp
	// files when it started, and once it removed Removed.
	Before, After int64
}

// RemovedBytes is the total size of Removed.
func (e Eviction) RemovedBytes() int64 { return sizeOf(e.Removed) }

// InUseBytes is the total size of InUse.
func (e Eviction) InUseBytes() int64 { return sizeOf(e.InUse) }

func sizeOf(es []CacheEntry) int64 {
	var n int64
	for _, e := range es {
		n = addSat(n, e.Size)
	}
	return n
}

// addSat adds two sizes, saturating: sizes come from the files and the
// manifest, and no sum of them wraps negative.
func addSat(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// SetMaxBytes bounds the bytes of the cache's entries and temp files to
// n (0: unbounded, as a cache opens). Admit then refuses shards that do
// not fit in n alone, and evicts the entries not among them, least
// recently used first and never one another live worker holds, until
// they do, and reserves the bytes of those still to fetch; a fetch the
// reservation does not cover makes room for its shard the same way
// before it writes a byte. A negative n is USAGE, and so is a bound on
// a platform without file locks, where an eviction could not tell the
// entries in use.
func (c *Cache) SetMaxBytes(n int64) error {
	if n < 0 {
		return errcode.New(errcode.Usage, "cache bound %d bytes: must not be negative", n)
	}
	if n > 0 && !canEvict {
		return errcode.New(errcode.Usage, "cache bound: eviction needs file locks (flock), which this platform does not have")
	}
	c.max = n
	return nil
}

// MaxBytes returns the cache's bound; 0 is unbounded.
func (c *Cache) MaxBytes() int64 { return c.max }

// Admission is what Admit did.
type Admission struct {
	// Eviction is what it evicted to make room.
	Eviction Eviction
	// Unlocked is how many of the shards an unbounded cache cannot hold
	// locked within the process's open-file limit: evictions by bounded
	// workers sharing the directory may remove those entries.
	Unlocked int
}

// Admit makes shards the worker's: the cache releases its locks on
// entries of other shards (an earlier assignment's) and, when bounded,
// makes room for shards before any is fetched. Shards whose sizes in the
// manifest add up to more than the bound alone are CACHE_TOO_SMALL, and
// more of them than the process may hold locked at once are FILE_LIMIT,
// before anything changes. Otherwise it evicts entries of other shards,
// least recently used first, skipping those a live worker holds, until
// the entries and temp files there would be, once every shard is
// filled, within the bound; CACHE_FULL, removing nothing, when the
// entries it may remove do not make enough room. It then holds the
// shards' entries already there, as a fill does, and reserves the bytes
// of the others: a temp file of their size (tmp/reserve.*, locked, so
// no stale-temp sweep removes it while the worker lives), which each
// fetch of one of them shrinks as it creates its own temp file at its
// shard's full size. Every worker sharing the directory counts the bytes
// still to come, and those fetches need no eviction of their own.
func (c *Cache) Admit(ctx context.Context, shards []manifest.Shard) (Admission, error) {
	var adm Admission
	sizes := make(map[manifest.Digest]int64, len(shards))
	var total int64
	for _, s := range shards {
		if _, ok := sizes[s.Digest]; !ok {
			sizes[s.Digest] = s.Size
			total = addSat(total, s.Size)
		}
	}
	if c.max > 0 {
		if total > c.max {
			return adm, errcode.New(errcode.CacheTooSmall, "cache bound %d bytes: this worker's %d assigned shards alone take %d bytes (their sizes in the root manifest)", c.max, len(sizes), total)
		}
		if c.lockLimit > 0 && len(sizes) > c.lockLimit {
			return adm, errcode.New(errcode.FileLimit, "a bounded cache holds each of this worker's %d shards locked, and this process may hold %d files open (ulimit -n, less %d for the rest): raise the limit", len(sizes), c.lockLimit+cacheFileSlack, cacheFileSlack)
		}
	} else if c.lockLimit > 0 && len(sizes) > c.lockLimit {
		adm.Unlocked = len(sizes) - c.lockLimit
	}
	keep := make(map[manifest.Digest]bool, len(sizes))
	for d := range sizes {
		keep[d] = true
	}
	c.mu.Lock()
	c.keep = keep
	for d, f := range c.held {
		if !keep[d] {
			f.Close()
			delete(c.held, d)
		}
	}
	c.dropReservation()
	c.mu.Unlock()
	if c.max == 0 {
		return adm, nil
	}
	unlock, err := c.lockDir(ctx)
	if err != nil {
		return adm, err
	}
	defer unlock()
	if adm.Eviction, err = c.evict(keep, keep, total, c.max, false, false); err != nil {
		return adm, err
	}
	// An entry held here is safe from other workers' evictions until a
	// fill verifies it (or fetches it again, its bytes wrong: the one
	// transient excess, a shard's size at most while it is replaced).
	pending := map[manifest.Digest]int64{}
	var pendingBytes int64
	for d, size := range sizes {
		if f := c.lockPresent(d); f != nil {
			c.hold(d, f)
			continue
		}
		pending[d] = size
		pendingBytes = addSat(pendingBytes, size)
	}
	if pendingBytes == 0 {
		return adm, nil
	}
	f, err := os.CreateTemp(filepath.Join(c.dir, "tmp"), "reserve.*")
	if err != nil {
		return adm, errcode.Wrap(errcode.IO, err, "cache %s", c.dir)
	}
	ok, err := tryLockShared(f)
	if err == nil && !ok {
		err = errors.New("locked by another process")
	}
	if err == nil {
		err = f.Truncate(pendingBytes)
	}
	if err != nil {
		f.Close()
		os.Remove(f.Name())
		return adm, errcode.Wrap(errcode.IO, err, "cache reserve %d bytes", pendingBytes)
	}
	c.mu.Lock()
	c.reserve, c.pending, c.pendingBytes = f, pending, pendingBytes
	c.mu.Unlock()
	return adm, nil
}

// lockPresent opens d's entry and takes a shared lock on it: nil when
// there is none (or not a regular file, or an eviction holds it).
func (c *Cache) lockPresent(d manifest.Digest) *os.File {
	path := c.Path(d)
	f, err := os.OpenFile(path, os.O_RDONLY|entryOpenFlags, 0)
	if err != nil {
		return nil
	}
	st, err := f.Stat()
	if err == nil && st.Mode().IsRegular() {
		if ok, lerr := tryLockShared(f); lerr == nil && ok {
			if now, err := os.Lstat(path); err == nil && os.SameFile(now, st) {
				return f
			}
		}
	}
	f.Close()
	return nil
}

// dropReservation removes the cache's reservation, if any. The caller
// holds c.mu.
func (c *Cache) dropReservation() {
	if c.reserve != nil {
		os.Remove(c.reserve.Name())
		c.reserve.Close()
	}
	c.reserve, c.pending, c.pendingBytes = nil, nil, 0
}

// takeReserved takes d's bytes out of the reservation, if Admit reserved
// them and no fetch took them yet: true when it did.
func (c *Cache) takeReserved(d manifest.Digest) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	size, ok := c.pending[d]
	if !ok {
		return false, nil
	}
	delete(c.pending, d)
	if c.pendingBytes -= size; c.pendingBytes <= 0 || len(c.pending) == 0 {
		c.dropReservation()
		return true, nil
	}
	if err := c.reserve.Truncate(c.pendingBytes); err != nil {
		return true, errcode.Wrap(errcode.IO, err, "cache reservation")
	}
	return true, nil
}

// Prune evicts entries by Admit's rules, with no shard of its own, until
// the cache's entries and temp files take at most maxBytes: least
// recently used first, skipping those a live worker holds. With dryRun
// it removes nothing and reports what it would have. It is CACHE_FULL,
// after removing what it could, when the cache stays above maxBytes.
func (c *Cache) Prune(ctx context.Context, maxBytes int64, dryRun bool) (Eviction, error) {
	if maxBytes < 0 {
		return Eviction{}, errcode.New(errcode.Usage, "cache prune to %d bytes: must not be negative", maxBytes)
	}
	if !canEvict {
		return Eviction{}, errcode.New(errcode.Usage, "cache prune: eviction needs file locks (flock), which this platform does not have")
	}
	unlock, err := c.lockDir(ctx)
	if err != nil {
		return Eviction{}, err
	}
	defer unlock()
	return c.evict(nil, nil, 0, maxBytes, true, dryRun)
}

// createTemp creates the temp file desc is fetched into. In a bounded
// cache it has its full size from the start, so every worker sharing the
// directory counts the bytes still to come: bytes Admit reserved, taken
// from its reservation once the temp file holds them, or else made room
// for now, by Admit's rules (a shard fetched again, or one filled
// without Admit).
func (c *Cache) createTemp(ctx context.Context, desc manifest.Shard) (*os.File, []CacheEntry, error) {
	create := func() (*os.File, error) {
		tmp, err := os.CreateTemp(filepath.Join(c.dir, "tmp"), desc.Digest.Hex()+".*")
		if err != nil {
			return nil, errcode.Wrap(errcode.IO, err, "cache %s", c.dir)
		}
		if c.max == 0 {
			return tmp, nil
		}
		if err := tmp.Truncate(desc.Size); err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
			return nil, errcode.Wrap(errcode.IO, err, "cache reserve %d bytes", desc.Size)
		}
		return tmp, nil
	}
	if c.max == 0 {
		tmp, err := create()
		return tmp, nil, err
	}
	c.mu.Lock()
	_, reserved := c.pending[desc.Digest]
	c.mu.Unlock()
	if reserved {
		tmp, err := create()
		if err != nil {
			return nil, nil, err
		}
		if _, err := c.takeReserved(desc.Digest); err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
			return nil, nil, err
		}
		return tmp, nil, nil
	}
	c.mu.Lock()
	keep := make(map[manifest.Digest]bool, len(c.keep)+1)
	for d := range c.keep {
		keep[d] = true
	}
	c.mu.Unlock()
	// Not counted: whatever the entry's path holds now, which the fetch
	// replaces.
	keep[desc.Digest] = true
	unlock, err := c.lockDir(ctx)
	if err != nil {
		return nil, nil, err
	}
	defer unlock()
	ev, err := c.evict(keep, map[manifest.Digest]bool{desc.Digest: true}, desc.Size, c.max, false, false)
	if err != nil {
		return nil, ev.Removed, fmt.Errorf("%s: %w", desc.ID, err)
	}
	tmp, err := create()
	return tmp, ev.Removed, err
}

// lockDir takes the cache's lock (an exclusive flock on <dir>/lock, each
// time on a file opened anew, so goroutines of one process exclude each
// other as processes do), held while an eviction checks and removes
// entries and while a fill renames one into place. It tries again,
// every 1 to 100 ms, until ctx ends (CANCELED), and returns the unlock.
// Without locks (not unix) there is no eviction to exclude.
func (c *Cache) lockDir(ctx context.Context) (func(), error) {
	if !canEvict {
		return func() {}, nil
	}
	f, err := os.OpenFile(filepath.Join(c.dir, "lock"), os.O_RDONLY|os.O_CREATE|entryOpenFlags, 0o644)
	if err != nil {
		return nil, errcode.Wrap(errcode.IO, err, "cache %s lock", c.dir)
	}
	for wait := time.Millisecond; ; wait = min(2*wait, 100*time.Millisecond) {
		ok, err := tryLockExclusive(f)
		if err != nil {
			f.Close()
			return nil, errcode.Wrap(errcode.IO, err, "cache %s lock", c.dir)
		}
		if ok {
			return func() { f.Close() }, nil
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			f.Close()
			return nil, errcode.Wrap(errcode.Canceled, ctx.Err(), "waiting for cache %s's lock", c.dir)
		case <-t.C:
		}
	}
}

// markUsed records that d's entry was used now: the modification time of
// <dir>/used/<hex>, later than any mark this cache made before. A mark
// that cannot be written leaves the entry looking older than it is; the
// fill itself does not fail for it.
func (c *Cache) markUsed(d manifest.Digest) {
	c.mu.Lock()
	now := time.Now()
	if !now.After(c.lastMark) {
		now = c.lastMark.Add(time.Nanosecond)
	}
	c.lastMark = now
	c.mu.Unlock()
	// A Root: no link under used/ leads a mark outside it.
	r, err := os.OpenRoot(filepath.Join(c.dir, "used"))
	if err != nil {
		return
	}
	defer r.Close()
	name := d.Hex()
	if err := r.Chtimes(name, now, now); errors.Is(err, fs.ErrNotExist) {
		if f, err := r.OpenFile(name, os.O_WRONLY|os.O_CREATE, 0o644); err == nil {
			f.Close()
			r.Chtimes(name, now, now)
		}
	}
}

// scan lists the cache's entries (regular files named by a digest under
// sha256/; anything else there is neither counted nor removed) and the
// bytes of its temp files.
func (c *Cache) scan() ([]CacheEntry, int64, error) {
	des, err := os.ReadDir(filepath.Join(c.dir, "sha256"))
	if err != nil {
		return nil, 0, errcode.Wrap(errcode.IO, err, "cache %s", c.dir)
	}
	var entries []CacheEntry
	for _, de := range des {
		d, err := manifest.ParseDigest("sha256:" + de.Name())
		if err != nil {
			continue
		}
		info, err := de.Info()
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, 0, errcode.Wrap(errcode.IO, err, "cache entry %s", de.Name())
		}
		if !info.Mode().IsRegular() {
			continue
		}
		entries = append(entries, CacheEntry{Digest: d, Size: info.Size(), Used: info.ModTime()})
	}
	tmps, err := os.ReadDir(filepath.Join(c.dir, "tmp"))
	if err != nil {
		return nil, 0, errcode.Wrap(errcode.IO, err, "cache %s", c.dir)
	}
	var tmpBytes int64
	for _, de := range tmps {
		if info, err := de.Info(); err == nil && info.Mode().IsRegular() {
			tmpBytes = addSat(tmpBytes, info.Size())
		}
	}
	return entries, tmpBytes, nil
}

// evict removes entries, least recently used first, until the cache's
// entries and temp files take at most limit bytes, extra included, with
// the entries of uncounted left out of the count (what a fill replaces
// or writes anew). It never removes those of keep, nor those another
// open file holds locked. Unless partial, it removes nothing when that
// is not enough (CACHE_FULL); otherwise it removes what it can and is
// CACHE_FULL afterwards. The caller holds the cache's lock, so no fill
// renames an entry into place meanwhile.
func (c *Cache) evict(keep, uncounted map[manifest.Digest]bool, extra, limit int64, partial, dryRun bool) (Eviction, error) {
	var ev Eviction
	entries, tmpBytes, err := c.scan()
	if err != nil {
		return ev, err
	}
	ev.Before = tmpBytes
	usage := addSat(tmpBytes, extra)
	var keptBytes int64
	var cands []CacheEntry
	for _, e := range entries {
		ev.Before = addSat(ev.Before, e.Size)
		if !uncounted[e.Digest] {
			usage = addSat(usage, e.Size)
		}
		if keep[e.Digest] {
			if !uncounted[e.Digest] {
				keptBytes = addSat(keptBytes, e.Size)
			}
			continue
		}
		cands = append(cands, e)
	}
	ev.After = ev.Before
	if usage <= limit {
		return ev, nil
	}
	for i := range cands {
		if st, err := os.Lstat(c.markPath(cands[i].Digest)); err == nil && st.ModTime().After(cands[i].Used) {
			cands[i].Used = st.ModTime()
		}
	}
	slices.SortFunc(cands, func(a, b CacheEntry) int {
		if r := a.Used.Compare(b.Used); r != 0 {
			return r
		}
		return cmp.Compare(a.Digest.Hex(), b.Digest.Hex())
	})
	type victim struct {
		e CacheEntry
		f *os.File
	}
	var victims []victim
	release := func() {
		for _, v := range victims {
			v.f.Close()
		}
	}
	for _, e := range cands {
		if usage <= limit {
			break
		}
		f, ok, err := c.lockEntry(e.Digest)
		if err != nil {
			release()
			return ev, err
		}
		if f == nil && ok {
			// Gone since the scan (a fill removed it as corrupt).
			usage -= e.Size
			continue
		}
		if !ok {
			ev.InUse = append(ev.InUse, e)
			continue
		}
		victims = append(victims, victim{e, f})
		usage -= e.Size
	}
	if usage > limit && !partial {
		release()
		return ev, c.fullError(usage, limit, extra, tmpBytes, keptBytes, ev.InUse)
	}
	for i, v := range victims {
		if !dryRun {
			if err := os.Remove(c.Path(v.e.Digest)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				victims = victims[i:]
				release()
				return ev, errcode.Wrap(errcode.IO, err, "evict cache entry %s", v.e.Digest)
			}
			os.Remove(c.markPath(v.e.Digest))
		}
		v.f.Close()
		ev.Removed = append(ev.Removed, v.e)
		ev.After -= v.e.Size
	}
	if usage > limit {
		return ev, c.fullError(usage, limit, extra, tmpBytes, keptBytes, ev.InUse)
	}
	return ev, nil
}

// fullError is CACHE_FULL with the figures of what holds the cache.
func (c *Cache) fullError(usage, limit, extra, tmpBytes, keptBytes int64, inUse []CacheEntry) error {
	return errcode.New(errcode.CacheFull, "cache %s: %d bytes over its bound of %d bytes even with every entry it may evict removed: %d bytes to fill, %d bytes of this worker's own entries, %d entries (%d bytes) in use by live workers, %d bytes of temp files",
		c.dir, usage-limit, limit, extra, keptBytes, len(inUse), sizeOf(inUse), tmpBytes)
}

// markPath is where d's used mark lives.
func (c *Cache) markPath(d manifest.Digest) string {
	return filepath.Join(c.dir, "used", d.Hex())
}

// lockEntry opens d's entry and locks it exclusively: the open file when
// no other open file holds a lock on it (nil and true when the entry is
// gone), false when one does (a live worker uses it).
func (c *Cache) lockEntry(d manifest.Digest) (*os.File, bool, error) {
	path := c.Path(d)
	f, err := os.OpenFile(path, os.O_RDONLY|entryOpenFlags, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, true, nil
	}
	if err != nil {
		return nil, false, errcode.Wrap(errcode.IO, err, "cache entry %s", d)
	}
	ok, err := tryLockExclusive(f)
	if err != nil || !ok {
		f.Close()
		if err != nil {
			return nil, false, errcode.Wrap(errcode.IO, err, "lock cache entry %s", d)
		}
		return nil, false, nil
	}
	// The file locked must be the entry the path names.
	st, err := f.Stat()
	now, lerr := os.Lstat(path)
	if err != nil || lerr != nil || !os.SameFile(st, now) {
		f.Close()
		return nil, false, nil
	}
	return f, true, nil
}
