package trainer

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/internal/fdlimit"
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/objstore"
)

// Cache is a digest-addressed directory of shard bytes on the trainer's
// local disk: the bytes of a shard with digest sha256:<hex> live at
// <dir>/sha256/<hex>. Nothing in the cache is trusted: Fill re-hashes an
// existing entry before using it, so an entry that was corrupted on disk,
// truncated by a crash, or that holds another release's bytes (a stale
// cache from an earlier run) is detected, replaced and counted; so is
// one that is not a regular file readable by everyone (a directory, a
// symlink, which is never followed, a FIFO, mode 0600). The sha256 and
// tmp directories must be the cache's own: OpenCache refuses links.
//
// Entries are written to <dir>/tmp, fsynced, then renamed into place and
// the directory fsynced, so a reader never sees a partial entry under a
// digest name. Several workers may share one directory: two fills of the
// same digest rename identical bytes over each other.
//
// A Cache serves one worker. On unix it holds a shared flock on every
// entry it filled or found intact, from before the entry is hashed or
// renamed into place until Admit is given shards without it, or Close:
// an eviction (a bounded cache's Admit or fetch, or Prune) by any process
// sharing the directory removes only entries it can lock exclusively, so
// never one a live worker holds, and the locks of a worker that dies die
// with it. Each
// fill or hit also marks the entry used (<dir>/used/<hex>, whose
// modification time is the mark, kept across restarts), the order in
// which evictions remove entries, least recently used first.
type Cache struct {
	dir string
	// max bounds the bytes of entries and temp files; 0 is unbounded.
	max int64
	// lockLimit is how many entries the cache may hold locked within
	// the process's open-file limit; 0 when there is no such limit.
	lockLimit int

	mu sync.Mutex
	// held are the open, shared-locked files of the entries this cache
	// verified, by digest; keep are the digests of the worker's shards
	// (Admit), which an eviction of its own never removes.
	held     map[manifest.Digest]*os.File
	keep     map[manifest.Digest]bool
	lastMark time.Time
	// reserve is a bounded cache's reservation (Admit): a temp file of
	// pendingBytes, the sizes of the worker's shards in pending, those
	// that were not in the cache and no fetch has started yet.
	reserve      *os.File
	pending      map[manifest.Digest]int64
	pendingBytes int64
}

// FillResult says what Fill did for one shard.
type FillResult struct {
	// Hit is true when an intact entry was already present.
	Hit bool
	// Corrupt is true when an entry was present but its bytes did not
	// match the descriptor; it was replaced by a fresh fetch (removed when
	// that fetch failed).
	Corrupt bool
	// Reason describes the corrupt entry (sizes or digests), for logs,
	// and Code classifies it: SIZE_MISMATCH, DIGEST_MISMATCH, or
	// BAD_INPUT for something that is not a regular file readable by
	// everyone.
	Reason string
	Code   errcode.Code
	// Fetched is the number of bytes read from the store.
	Fetched int64
	// Info is the file Fill verified (the entry it hashed, or the fetched
	// file it renamed into place), as it was then; nil when Fill failed.
	// A later Lstat of the entry's path that is not this file (another
	// file, size, modification time or mode) holds bytes Fill did not
	// verify: a stat taken after Fill returned may already be of such a
	// file.
	Info fs.FileInfo
	// Evicted are the entries a bounded cache removed to make room for
	// the fetch.
	Evicted []CacheEntry
}

// staleTemp is how long a temp file goes unwritten before OpenCache takes
// it for the debris of a crashed fill.
const staleTemp = 15 * time.Minute

// OpenCache creates (if needed) and opens the cache at dir, removing temp
// files a crashed fill left behind. A sha256, tmp or used under dir that
// is not a directory (a symlink to one included) is BAD_INPUT. The cache
// is unbounded until SetMaxBytes.
func OpenCache(dir string) (*Cache, error) {
	if dir == "" {
		return nil, errcode.New(errcode.Usage, "no cache directory given")
	}
	for _, d := range []string{filepath.Join(dir, "sha256"), filepath.Join(dir, "tmp"), filepath.Join(dir, "used")} {
		// The cache's own directories, not links: MkdirAll follows a
		// link, and entries were written, read and removed (stale temp
		// files, below) wherever it pointed.
		st, err := os.Lstat(d)
		if err == nil && !st.IsDir() {
			return nil, errcode.New(errcode.BadInput, "cache %s: %s is not a directory (%s); entries and temp files must stay inside the cache", dir, filepath.Base(d), st.Mode().Type())
		}
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, errcode.Wrap(errcode.IO, err, "cache %s", dir)
		}
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, errcode.Wrap(errcode.IO, err, "cache %s", dir)
		}
	}
	tmp, err := os.ReadDir(filepath.Join(dir, "tmp"))
	if err != nil {
		return nil, errcode.Wrap(errcode.IO, err, "cache %s", dir)
	}
	for _, e := range tmp {
		// Another worker sharing the directory may be writing this one
		// right now; only a file nobody wrote to for a while is debris,
		// and nobody holds locked (a live worker's reservation).
		// RemoveAll: a directory moved aside by a fill (a directory in
		// an entry's place) whose removal did not finish.
		p := filepath.Join(dir, "tmp", e.Name())
		if info, err := e.Info(); err == nil && time.Since(info.ModTime()) > staleTemp && !heldLocked(p, info) {
			os.RemoveAll(p)
		}
	}
	c := &Cache{dir: dir, held: map[manifest.Digest]*os.File{}}
	if limit, ok := fdlimit.Open(); ok {
		c.lockLimit = max(1, int(min(limit, 1<<30))-cacheFileSlack)
	}
	return c, nil
}

// heldLocked reports whether another open file holds a lock on the
// regular file at p (info): a live worker's reservation.
func heldLocked(p string, info fs.FileInfo) bool {
	if !canEvict || !info.Mode().IsRegular() {
		return false
	}
	f, err := os.OpenFile(p, os.O_RDONLY|entryOpenFlags, 0)
	if err != nil {
		return false
	}
	defer f.Close()
	ok, err := tryLockExclusive(f)
	return err == nil && !ok
}

// cacheFileSlack is what a worker keeps open besides its entries' locks:
// standard streams, the fills running at once (an entry or temp file and
// a store read each), the gate client's and /metrics' connections.
const cacheFileSlack = 128

// Close releases the locks the cache holds on its entries, from then on
// an eviction may remove them, and removes its reservation. The cache
// must not be used afterwards.
func (c *Cache) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for d, f := range c.held {
		f.Close()
		delete(c.held, d)
	}
	c.dropReservation()
	return nil
}

// hold keeps f, an open file of d's entry with a shared lock, for as long
// as the entry is the worker's, in place of the one it held before (an
// entry filled again is another file). Past lockLimit (an unbounded
// cache whose worker has more shards than the process may hold files
// open: Admit warns) and where there are no locks, f is closed.
func (c *Cache) hold(d manifest.Digest, f *os.File) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if old := c.held[d]; old != nil {
		old.Close()
		delete(c.held, d)
	}
	if !canEvict || c.lockLimit > 0 && len(c.held) >= c.lockLimit {
		f.Close()
		return
	}
	c.held[d] = f
}

// Dir returns the cache's root directory.
func (c *Cache) Dir() string { return c.dir }

// Path returns where the bytes with digest d live. A trainer reads its
// shards from these paths once the worker reports ready.
func (c *Cache) Path(d manifest.Digest) string {
	return filepath.Join(c.dir, "sha256", d.Hex())
}

// Fill makes the cache hold exactly the bytes of shard desc. An existing
// entry is used only if it has desc.Size bytes hashing to desc.Digest;
// otherwise the shard is fetched from s at exactly desc.ObjectVersion
// (never the latest version) through a size-bounded, hash-checking
// reader and renamed over it. A fetch that does not yield those bytes
// fails with DIGEST_MISMATCH or SIZE_MISMATCH and leaves no entry behind;
// a version that does not exist fails with VERSION_MISSING.
func (c *Cache) Fill(ctx context.Context, s objstore.Store, desc manifest.Shard) (FillResult, error) {
	var res FillResult
	path := c.Path(desc.Digest)
	switch f, info, code, reason, err := c.check(path, desc); {
	case err != nil:
		return res, err
	case info != nil:
		c.hold(desc.Digest, f)
		c.markUsed(desc.Digest)
		// Another worker fetched it since Admit reserved its bytes. A
		// reservation that cannot shrink stays larger than needed.
		c.takeReserved(desc.Digest)
		res.Hit, res.Info = true, info
		return res, nil
	case reason != "":
		res.Corrupt, res.Code, res.Reason = true, code, reason
		if st, err := os.Lstat(path); err == nil && st.IsDir() {
			// A rename cannot replace a directory, and one holding
			// files cannot be removed in one step: it is moved aside
			// first. Anything else (a link, a FIFO) is renamed over.
			if err := c.moveAside(path); err != nil {
				return res, err
			}
		}
	}
	// The fetched bytes are renamed over a corrupt entry, never after
	// removing it: a trainer reading the entry, or a worker sharing the
	// directory that has just filled it (two workers that both found
	// the same damaged entry: the slower one removed the faster one's
	// fresh copy), never finds the path missing.
	n, info, evicted, err := c.fetch(ctx, s, desc, path)
	res.Fetched, res.Info, res.Evicted = n, info, evicted
	if err == nil {
		c.markUsed(desc.Digest)
	}
	if err != nil && res.Corrupt {
		// Still leave no corrupt entry behind.
		f, info, _, _, cerr := c.check(path, desc)
		if f != nil {
			f.Close()
		}
		if cerr == nil && info == nil {
			if rerr := os.Remove(path); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
				return res, errors.Join(err, errcode.Wrap(errcode.IO, rerr, "remove corrupt cache entry %s", path))
			}
		}
	}
	return res, err
}

// check reports whether path holds desc's bytes: when it does, the file
// it hashed, open and share-locked (the caller closes it), and its stat.
// A missing entry is (nil, nil, "", "", nil); a wrong one is (nil, nil,
// code, reason, nil).
func (c *Cache) check(path string, desc manifest.Shard) (*os.File, fs.FileInfo, errcode.Code, string, error) {
	// Lstat before opening: opening a FIFO put in an entry's place blocks
	// until a writer comes, and a signal does not end the wait.
	st, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, "", "", nil
	}
	if err != nil {
		return nil, nil, "", "", errcode.Wrap(errcode.IO, err, "cache entry %s", path)
	}
	if !st.Mode().IsRegular() {
		return nil, nil, errcode.BadInput, fmt.Sprintf("%s: not a regular file (%s)", desc.ID, st.Mode().Type()), nil
	}
	// A trainer running as another user must be able to read it (a hit
	// for a worker running as root otherwise).
	if perm := st.Mode().Perm(); perm&0o444 != 0o444 {
		return nil, nil, errcode.BadInput, fmt.Sprintf("%s: mode %s, not readable by everyone", desc.ID, perm), nil
	}
	// Not following a link, nor waiting for a FIFO's writer: either may
	// have been put in the entry's place since the Lstat.
	f, err := os.OpenFile(path, os.O_RDONLY|entryOpenFlags, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, "", "", nil
	}
	if err != nil {
		if st, lerr := os.Lstat(path); lerr == nil && !st.Mode().IsRegular() {
			return nil, nil, errcode.BadInput, fmt.Sprintf("%s: not a regular file (%s)", desc.ID, st.Mode().Type()), nil
		}
		return nil, nil, "", "", errcode.Wrap(errcode.IO, err, "cache entry %s", path)
	}
	keep := false
	defer func() {
		if !keep {
			f.Close()
		}
	}()
	if st, err = f.Stat(); err != nil {
		return nil, nil, "", "", errcode.Wrap(errcode.IO, err, "cache entry %s", path)
	}
	if !st.Mode().IsRegular() {
		return nil, nil, errcode.BadInput, fmt.Sprintf("%s: not a regular file (%s)", desc.ID, st.Mode().Type()), nil
	}
	// Held from before the hash, so no eviction removes the entry once
	// it is found intact. One an eviction holds is being removed, and
	// one no longer at the path (removed or replaced since the open) is
	// not the entry: either is missing here, and fetched again.
	if ok, err := tryLockShared(f); err != nil {
		return nil, nil, "", "", errcode.Wrap(errcode.IO, err, "lock cache entry %s", path)
	} else if !ok {
		return nil, nil, "", "", nil
	}
	if now, err := os.Lstat(path); err != nil || !os.SameFile(now, st) {
		return nil, nil, "", "", nil
	}
	if st.Size() != desc.Size {
		return nil, nil, errcode.SizeMismatch, fmt.Sprintf("%s: manifest.size=%d, cache entry size=%d", desc.ID, desc.Size, st.Size()), nil
	}
	h := sha256.New()
	// Read one byte past the expected size so a file growing under us is
	// caught rather than hashed partially.
	n, err := io.Copy(h, io.LimitReader(f, desc.Size+1))
	if err != nil {
		return nil, nil, "", "", errcode.Wrap(errcode.IO, err, "read cache entry %s", path)
	}
	var got manifest.Digest
	h.Sum(got[:0])
	if n != desc.Size || got != desc.Digest {
		return nil, nil, errcode.DigestMismatch, fmt.Sprintf("%s: manifest.digest=%s, cache entry hashes to %s (%d bytes)", desc.ID, desc.Digest, got, n), nil
	}
	// Written to while it was hashed: the bytes hashed may be half old,
	// half new, and what the file holds now was not hashed.
	after, err := f.Stat()
	if err != nil {
		return nil, nil, "", "", errcode.Wrap(errcode.IO, err, "cache entry %s", path)
	}
	if !(entry{info: st}).unchanged(after) {
		return nil, nil, errcode.DigestMismatch, fmt.Sprintf("%s: cache entry written to while it was hashed (size %d, then %d)", desc.ID, st.Size(), after.Size()), nil
	}
	keep = true
	return f, st, "", "", nil
}

// moveAside moves the directory at path into the cache's tmp directory
// and removes it there. A worker sharing the cache may have moved it
// first and renamed its fetched file into place: a file moved aside is
// linked back (the fetch renames over it anyway), so the entry's path is
// not missing meanwhile to that worker or its trainer.
func (c *Cache) moveAside(path string) error {
	aside, err := os.MkdirTemp(filepath.Join(c.dir, "tmp"), filepath.Base(path)+".dir.*")
	if err != nil {
		return errcode.Wrap(errcode.IO, err, "cache %s", c.dir)
	}
	defer os.RemoveAll(aside)
	moved := filepath.Join(aside, "entry")
	if err := os.Rename(path, moved); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return errcode.Wrap(errcode.IO, err, "move aside cache entry %s", path)
	}
	if st, err := os.Lstat(moved); err == nil && st.Mode().IsRegular() {
		os.Link(moved, path)
	}
	return nil
}

// fetch copies version desc.ObjectVersion of the shard from s into path
// and returns the file it renamed there (held from before the rename),
// and the entries a bounded cache evicted to make room for it.
func (c *Cache) fetch(ctx context.Context, s objstore.Store, desc manifest.Shard, path string) (int64, fs.FileInfo, []CacheEntry, error) {
	if desc.ObjectVersion == "" {
		return 0, nil, nil, errcode.New(errcode.VersionMissing, "%s: descriptor has no objectVersion", desc.ID)
	}
	rc, err := objstore.GetBlob(ctx, s, desc.Digest, objstore.Version(desc.ObjectVersion), desc.Size)
	if objstore.IsNotExist(err) {
		return 0, nil, nil, errcode.Wrap(errcode.VersionMissing, err, "%s: %s version %s", desc.ID, desc.Digest.BlobKey(), desc.ObjectVersion)
	}
	if err != nil {
		return 0, nil, nil, fmt.Errorf("%s: %w", desc.ID, err)
	}
	defer rc.Close()
	tmp, evicted, err := c.createTemp(ctx, desc)
	if err != nil {
		return 0, nil, evicted, err
	}
	committed := false
	defer func() {
		if !committed {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	n, err := io.Copy(tmp, objstore.ContextReader(ctx, rc))
	if err != nil {
		// verifyread's typed errors carry DIGEST_MISMATCH / SIZE_MISMATCH.
		if errcode.Of(err) == errcode.Internal {
			err = errcode.Wrap(errcode.IO, err, "read")
		}
		return n, nil, evicted, fmt.Errorf("%s: fetch %s version %s: %w", desc.ID, desc.Digest.BlobKey(), desc.ObjectVersion, err)
	}
	if n != desc.Size {
		// The reader ends with SIZE_MISMATCH first; a temp file reserved
		// at its full size must never pass for the shard's bytes.
		return n, nil, evicted, errcode.New(errcode.SizeMismatch, "%s: manifest.size=%d, bytes read=%d", desc.ID, desc.Size, n)
	}
	// Readable by the trainer, which may run as another user on a
	// shared volume (CreateTemp makes 0600).
	if err := tmp.Chmod(0o644); err != nil {
		return n, nil, evicted, errcode.Wrap(errcode.IO, err, "cache chmod")
	}
	if err := tmp.Sync(); err != nil {
		return n, nil, evicted, errcode.Wrap(errcode.IO, err, "cache fsync")
	}
	info, err := tmp.Stat()
	if err != nil {
		return n, nil, evicted, errcode.Wrap(errcode.IO, err, "cache stat")
	}
	if err := tmp.Close(); err != nil {
		return n, nil, evicted, errcode.Wrap(errcode.IO, err, "cache close")
	}
	// Held before it is an entry: no eviction finds it unlocked.
	held, err := os.OpenFile(tmp.Name(), os.O_RDONLY|entryOpenFlags, 0)
	if err != nil {
		return n, nil, evicted, errcode.Wrap(errcode.IO, err, "cache reopen")
	}
	ok, err := tryLockShared(held)
	if err == nil && !ok {
		err = errors.New("locked by another process")
	}
	if err != nil {
		held.Close()
		return n, nil, evicted, errcode.Wrap(errcode.IO, err, "lock cache entry %s", tmp.Name())
	}
	if st, err := held.Stat(); err != nil || !os.SameFile(st, info) {
		held.Close()
		return n, nil, evicted, errcode.New(errcode.IO, "%s: temp file %s replaced before it was renamed into place", desc.ID, tmp.Name())
	}
	// Under the cache's lock: an eviction checks an entry is the file it
	// locked, then removes it, and must not remove this one in between.
	unlock, err := c.lockDir(ctx)
	if err != nil {
		held.Close()
		return n, nil, evicted, err
	}
	err = os.Rename(tmp.Name(), path)
	unlock()
	if err != nil {
		held.Close()
		return n, nil, evicted, errcode.Wrap(errcode.IO, err, "cache rename")
	}
	committed = true
	c.hold(desc.Digest, held)
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		d.Sync()
		d.Close()
	}
	return n, info, evicted, nil
}
