package file

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/internal/verifyread"
	"github.com/shardproof/shardproof/objstore"
)

func init() {
	objstore.Register("file", func(_ context.Context, u *url.URL, create bool) (objstore.Store, error) {
		if u.Host != "" && u.Host != "localhost" {
			return nil, errcode.New(errcode.Usage, "file store URL %q: host %q not supported (use file:///abs/path)", u.String(), u.Host)
		}
		if u.RawQuery != "" {
			return nil, errcode.New(errcode.Usage, "file store URL %q: no query parameters are supported", u.String())
		}
		if create {
			return Open(u.Path)
		}
		return OpenExisting(u.Path)
	})
}

const (
	tmpDir     = "@tmp"
	seqDigits  = 20
	defaultMax = 1000 // List page size when the caller gives none
)

// Store is a file-system object store. It is safe for concurrent use by
// goroutines and by processes sharing the directory.
type Store struct {
	dir  string
	root *os.Root
	// created: Open made the directory.
	created bool
}

var _ objstore.Store = (*Store)(nil)

// Open opens (creating if needed) the store rooted at directory dir. A
// directory that cannot be created or opened is STORE_UNAVAILABLE.
func Open(dir string) (*Store, error) {
	if dir == "" {
		return nil, errcode.New(errcode.Usage, "file store: empty path")
	}
	_, statErr := os.Stat(dir)
	if err := mkdirAll(dir); err != nil {
		return nil, errcode.Wrap(fsCode(err, errcode.StoreUnavailable), err, "file store %s", dir)
	}
	s, err := open(dir)
	if err == nil {
		s.created = errors.Is(statErr, fs.ErrNotExist)
	}
	return s, err
}

// mkdirAll is os.MkdirAll that fsyncs the parent of each directory it
// creates, so a store that synth or stage has just made, and every object
// in it, survives a crash: a Put fsyncs the directories inside the store,
// never the one that names the store.
func mkdirAll(dir string) error {
	var missing []string
	for p := filepath.Clean(dir); ; p = filepath.Dir(p) {
		if _, err := os.Lstat(p); err == nil || !errors.Is(err, fs.ErrNotExist) {
			break
		}
		missing = append(missing, p)
		if filepath.Dir(p) == p {
			break
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil || len(missing) == 0 {
		return err
	}
	for _, p := range missing {
		parent := filepath.Dir(p)
		d, err := os.Open(parent)
		if err != nil {
			return err
		}
		err = fsyncDir(d, parent)
		d.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

// dirSynced, when set (by tests), is called with the path of each
// directory fsynced, once its fsync has succeeded.
var dirSynced func(dir string)

// listEntries, when set (by benchmarks), is called with the number of
// directory entries each List reads.
var listEntries func(n int)

// fsyncDir fsyncs directory d, opened at path name.
func fsyncDir(d *os.File, name string) error {
	if err := d.Sync(); err != nil {
		return err
	}
	if dirSynced != nil {
		dirSynced(name)
	}
	return nil
}

// RemoveIfUnused removes the store's directory if Open created it and
// nothing has been written to it since, so a command that created a store
// and then failed on its input leaves no empty store behind. It reports
// whether it removed the directory; a directory that holds anything stays.
func (s *Store) RemoveIfUnused() bool {
	return s.created && os.Remove(s.dir) == nil
}

// OpenExisting opens the store rooted at directory dir, which must exist:
// a mistyped path is STORE_UNAVAILABLE rather than a new, empty store in
// which every object is NOT_FOUND. Opening writes nothing; the first Put
// creates the store's temp directory.
func OpenExisting(dir string) (*Store, error) {
	if dir == "" {
		return nil, errcode.New(errcode.Usage, "file store: empty path")
	}
	info, err := os.Stat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, errcode.New(errcode.StoreUnavailable, "file store %s: no such directory (synth and stage create a store; every other command opens an existing one)", dir)
	}
	if err != nil {
		return nil, errcode.Wrap(fsCode(err, errcode.StoreUnavailable), err, "file store %s", dir)
	}
	if !info.IsDir() {
		return nil, errcode.New(errcode.StoreUnavailable, "file store %s: not a directory", dir)
	}
	return open(dir)
}

func open(dir string) (*Store, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, errcode.Wrap(fsCode(err, errcode.StoreUnavailable), err, "file store %s", dir)
	}
	s := &Store{dir: dir, root: root}
	s.sweepTemp(time.Now())
	return s, nil
}

// TempMaxAge is how old a temp file must be before Open removes it
// whatever its lock says. A Put removes its temp file itself, whether it
// succeeds or fails, so a temp file is left only by a process that died
// mid-Put; one this old belongs to no Put still running.
const TempMaxAge = 24 * time.Hour

// TempSettle is how old a locked-kind temp file (lockedPrefix) must be
// before Open trusts that its lock is free: a Put creates the file, then
// locks it, a few microseconds apart.
const TempSettle = time.Minute

// lockedPrefix starts the name of a temp file that its Put keeps locked
// (flock) from its creation until its name is removed, so that a free
// lock means the Put's process died (kill -9, the OOM killer, a machine
// that rebooted). Unmarked names are an older build's, or a platform's
// without locks.
const lockedPrefix = "l-"

// sweepTemp removes the temp files that crashed Puts left behind, which
// would otherwise accumulate (one large shard's worth per process killed
// mid-upload): a locked-kind one older than TempSettle whose lock is free,
// and any older than TempMaxAge. It is best effort: a file it cannot
// remove is left for the next Open, and one whose lock cannot be tried
// (a file system without flock) waits for TempMaxAge.
func (s *Store) sweepTemp(now time.Time) {
	d, err := s.root.Open(tmpDir)
	if err != nil {
		return
	}
	defer d.Close()
	for {
		entries, err := d.ReadDir(256)
		for _, e := range entries {
			name := tmpDir + "/" + e.Name()
			info, ierr := e.Info()
			if ierr != nil || !info.Mode().IsRegular() {
				continue
			}
			age := now.Sub(info.ModTime())
			if age <= TempMaxAge && (!strings.HasPrefix(e.Name(), lockedPrefix) || age <= TempSettle || !s.unlocked(name)) {
				continue
			}
			if s.root.Remove(name) == nil {
				slog.Debug("file store: removed a temp file no Put holds", "store", s.dir, "name", e.Name(), "age", age.Round(time.Second))
			}
		}
		if err != nil {
			return
		}
	}
}

// heldTemps holds the names (random, so unique) of the temp files this
// process's Puts hold. A sweep skips them without trying their locks:
// where flock is emulated by POSIX locks (NFS), a process's own lock
// does not stop it taking the lock again, and closing the file it took
// it by would release the Put's.
var heldTemps sync.Map

// unlocked reports whether temp file name's lock could be taken: no
// running Put holds it.
func (s *Store) unlocked(name string) bool {
	if _, mine := heldTemps.Load(path.Base(name)); mine {
		return false
	}
	f, err := s.root.Open(name)
	if err != nil {
		return false
	}
	defer f.Close() // releases the lock taken
	return lock(f, false) == nil
}

// Close releases the root directory handle.
func (s *Store) Close() error { return s.root.Close() }

// String returns the store's directory.
func (s *Store) String() string { return s.dir }

func seqName(seq uint64) string { return fmt.Sprintf("@%0*d", seqDigits, seq) }

// parseSeqName returns the sequence of a version file name, or false.
func parseSeqName(name string) (uint64, bool) {
	if len(name) != 1+seqDigits || name[0] != '@' {
		return 0, false
	}
	n, err := strconv.ParseUint(name[1:], 10, 64)
	return n, err == nil && n > 0
}

func versionOf(seq uint64) objstore.Version {
	return objstore.Version("v" + strconv.FormatUint(seq, 10))
}

// parseVersion accepts exactly the ids this store issues.
func parseVersion(v objstore.Version) (uint64, bool) {
	s := string(v)
	if len(s) < 2 || s[0] != 'v' || s[1] == '0' {
		return 0, false
	}
	n, err := strconv.ParseUint(s[1:], 10, 64)
	return n, err == nil && strconv.FormatUint(n, 10) == s[1:]
}

// Put implements objstore.Store.
func (s *Store) Put(ctx context.Context, key string, body io.Reader, opts objstore.PutOptions) (objstore.Version, error) {
	if err := objstore.ValidateKey(key); err != nil {
		return "", err
	}
	if err := ctx.Err(); err != nil {
		return "", errcode.Wrap(errcode.Canceled, err, "put %s", key)
	}
	if opts.IfNoneMatch {
		// Fail fast rather than copy a large body only to lose the link;
		// the link below remains the atomic check.
		if _, err := s.root.Lstat(path.Join(key, seqName(1))); err == nil {
			return "", fmt.Errorf("put %s: %w", key, objstore.ErrPreconditionFailed)
		}
	}
	sync := !opts.Ephemeral
	tmp, release, err := s.writeTemp(ctx, key, body, opts.SHA256, sync)
	if err != nil {
		return "", err
	}
	defer release() // after the name is gone, so no sweep takes it first
	defer s.root.Remove(tmp)
	if err := s.mkdirs(key, sync); err != nil {
		return "", err
	}
	if err := ctx.Err(); err != nil {
		return "", errcode.Wrap(errcode.Canceled, err, "put %s", key)
	}
	seq := uint64(1)
	if !opts.IfNoneMatch {
		if seq, err = s.latest(key); err != nil {
			return "", err
		}
		seq++
	}
	for {
		err := s.root.Link(tmp, path.Join(key, seqName(seq)))
		if err == nil {
			break
		}
		if errors.Is(err, syscall.EPERM) {
			// link(2) answers EPERM both for an immutable directory and on
			// file systems without hard links (vfat, exFAT, some FUSE and
			// SMB mounts), which the store's conditional create needs.
			return "", s.ioErr(err, "put %s: the directory is immutable, or its file system has no hard links, which a file store needs", key)
		}
		if !errors.Is(err, fs.ErrExist) {
			return "", s.ioErr(err, "put %s", key)
		}
		if opts.IfNoneMatch {
			return "", fmt.Errorf("put %s: %w", key, objstore.ErrPreconditionFailed)
		}
		// Another writer took this sequence number; take the next free one.
		if seq, err = s.latest(key); err != nil {
			return "", err
		}
		seq++
	}
	if sync {
		if err := s.syncDir(key); err != nil {
			return "", err
		}
	}
	return versionOf(seq), nil
}

// writeTemp writes body to a new temp file, fsyncs it (if sync) and
// returns its name relative to the root, and the function that releases
// its lock, which the caller calls once the name is removed. If want is
// non-zero the body must hash to it.
func (s *Store) writeTemp(ctx context.Context, key string, body io.Reader, want [32]byte, sync bool) (string, func(), error) {
	var rnd [12]byte
	rand.Read(rnd[:])
	name := tmpDir + "/" + hex.EncodeToString(rnd[:])
	if canLock {
		name = tmpDir + "/" + lockedPrefix + hex.EncodeToString(rnd[:])
	}
	f, err := s.root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o444)
	if errors.Is(err, fs.ErrNotExist) {
		// The store's first Put: make the temp directory (another
		// process may be making it too).
		if err = s.root.Mkdir(tmpDir, 0o755); err == nil || errors.Is(err, fs.ErrExist) {
			f, err = s.root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o444)
		}
	}
	if err != nil {
		return "", nil, s.ioErr(err, "put %s: create temp file", key)
	}
	// The lock is held by a file of its own, so that f is closed (and
	// its error seen) before the link, as before.
	release, err := s.holdTemp(name)
	if err != nil {
		f.Close()
		s.root.Remove(name)
		return "", nil, s.ioErr(err, "put %s: open temp file", key)
	}
	h := sha256.New()
	// Hashed only to check a digest the caller gave.
	var w io.Writer = f
	if want != ([32]byte{}) {
		w = io.MultiWriter(f, h)
	}
	_, err = io.Copy(w, objstore.ContextReader(ctx, body))
	if err == nil && sync {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && want != ([32]byte{}) {
		var got [32]byte
		h.Sum(got[:0])
		if got != want {
			err = &verifyread.DigestMismatchError{Key: key, Want: want, Got: got}
		}
	}
	if err != nil {
		s.root.Remove(name)
		release()
		if errcode.Of(err) == errcode.Internal {
			err = errcode.Wrap(errcode.IO, err, "put %s", key)
		}
		return "", nil, err
	}
	return name, release, nil
}

// holdTemp locks temp file name for this Put, through an open file of
// its own, and returns the function that releases it. Where the file
// system takes no lock (NFS without lockd) a sweep cannot take it
// either, and leaves the file for TempMaxAge.
func (s *Store) holdTemp(name string) (release func(), err error) {
	if !canLock {
		return func() {}, nil
	}
	base := path.Base(name)
	heldTemps.Store(base, struct{}{})
	f, err := s.root.Open(name)
	if err != nil {
		heldTemps.Delete(base)
		return nil, err
	}
	lock(f, true) // no lock taken: see above
	return func() {
		f.Close()
		heldTemps.Delete(base)
	}, nil
}

// mkdirs creates the key's directory and its missing parents, fsyncing
// (if sync) each parent that gained an entry so the new path survives a
// crash.
func (s *Store) mkdirs(key string, sync bool) error {
	// A DeletePrefix running at the same time removes the ancestors it
	// leaves empty, and may remove one this loop has just seen, before
	// it makes the next level: then start again from the top.
	for attempt := 0; ; attempt++ {
		err := s.mkdirsOnce(key, sync)
		if err == nil || !errors.Is(err, fs.ErrNotExist) || attempt == 8 {
			return err
		}
	}
}

func (s *Store) mkdirsOnce(key string, sync bool) error {
	dir := ""
	for seg := range strings.SplitSeq(key, "/") {
		parent := dir
		dir = path.Join(dir, seg)
		err := s.root.Mkdir(dir, 0o755)
		switch {
		case err == nil:
			if !sync {
				continue
			}
			if err := s.syncDir(parent); err != nil {
				return err
			}
		case errors.Is(err, fs.ErrExist):
			fi, serr := s.root.Stat(dir)
			if errors.Is(serr, fs.ErrNotExist) {
				return serr // removed since: start again
			}
			if serr != nil || !fi.IsDir() {
				return s.ioErr(fmt.Errorf("%s is not a directory", dir), "put %s", key)
			}
		case errors.Is(err, fs.ErrNotExist):
			return err // a parent vanished under us
		default:
			return s.ioErr(err, "put %s: mkdir", key)
		}
	}
	return nil
}

func (s *Store) syncDir(dir string) error {
	if dir == "" {
		dir = "."
	}
	d, err := s.root.Open(dir)
	if err != nil {
		return s.ioErr(err, "sync %s", dir)
	}
	defer d.Close()
	if err := fsyncDir(d, filepath.Join(s.dir, filepath.FromSlash(dir))); err != nil {
		return s.ioErr(err, "sync %s", dir)
	}
	return nil
}

// latest returns the highest version sequence of key, or 0 if it has none.
func (s *Store) latest(key string) (uint64, error) {
	seqs, err := s.seqs(key)
	if err != nil || len(seqs) == 0 {
		return 0, err
	}
	return seqs[len(seqs)-1], nil
}

// seqs returns key's version sequences, ascending.
func (s *Store) seqs(key string) ([]uint64, error) {
	d, err := s.root.Open(key)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
		return nil, nil
	}
	if err != nil {
		return nil, s.ioErr(err, "read %s", key)
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil // deleted since it was opened
	}
	if err != nil {
		return nil, s.ioErr(err, "read %s", key)
	}
	var out []uint64
	for _, n := range names {
		if seq, ok := parseSeqName(n); ok {
			out = append(out, seq)
		}
	}
	slices.Sort(out)
	return out, nil
}

// Versions implements objstore.VersionLister.
func (s *Store) Versions(ctx context.Context, key string, limit int) ([]objstore.ObjectInfo, error) {
	if err := objstore.ValidateKey(key); err != nil {
		return nil, err
	}
	seqs, err := s.seqs(key)
	if err != nil {
		return nil, err
	}
	var out []objstore.ObjectInfo
	for i := len(seqs) - 1; i >= 0 && len(out) < limit; i-- {
		if err := ctx.Err(); err != nil {
			return nil, errcode.Wrap(errcode.Canceled, err, "versions of %s", key)
		}
		info, err := s.Head(ctx, key, versionOf(seqs[i]))
		if objstore.IsNotExist(err) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, info)
	}
	return out, nil
}

// versionFile resolves (key, version) to a version file name and its id.
func (s *Store) versionFile(key string, v objstore.Version) (string, objstore.Version, error) {
	if err := objstore.ValidateKey(key); err != nil {
		return "", "", err
	}
	var seq uint64
	if v == "" {
		var err error
		if seq, err = s.latest(key); err != nil {
			return "", "", err
		}
	} else if n, ok := parseVersion(v); ok {
		seq = n
	}
	if seq == 0 {
		return "", "", s.notExist(key, v)
	}
	return path.Join(key, seqName(seq)), versionOf(seq), nil
}

func (s *Store) notExist(key string, v objstore.Version) error {
	if v == "" {
		return fmt.Errorf("%s: %w", key, objstore.ErrNotExist)
	}
	return fmt.Errorf("%s version %s: %w", key, v, objstore.ErrNotExist)
}

// Get implements objstore.Store.
func (s *Store) Get(ctx context.Context, key string, v objstore.Version) (io.ReadCloser, error) {
	if err := ctx.Err(); err != nil {
		return nil, errcode.Wrap(errcode.Canceled, err, "get %s", key)
	}
	name, _, err := s.versionFile(key, v)
	if err != nil {
		return nil, err
	}
	f, err := s.root.Open(name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, s.notExist(key, v)
	}
	if err != nil {
		return nil, s.ioErr(err, "get %s", key)
	}
	return f, nil
}

// Head implements objstore.Store.
func (s *Store) Head(ctx context.Context, key string, v objstore.Version) (objstore.ObjectInfo, error) {
	if err := ctx.Err(); err != nil {
		return objstore.ObjectInfo{}, errcode.Wrap(errcode.Canceled, err, "head %s", key)
	}
	name, id, err := s.versionFile(key, v)
	if err != nil {
		return objstore.ObjectInfo{}, err
	}
	fi, err := s.root.Stat(name)
	if errors.Is(err, fs.ErrNotExist) {
		return objstore.ObjectInfo{}, s.notExist(key, v)
	}
	if err != nil {
		return objstore.ObjectInfo{}, s.ioErr(err, "head %s", key)
	}
	if !fi.Mode().IsRegular() {
		return objstore.ObjectInfo{}, s.ioErr(fmt.Errorf("%s is not a regular file", name), "head %s", key)
	}
	return objstore.ObjectInfo{Key: key, Version: id, Size: fi.Size(), Modified: fi.ModTime()}, nil
}

// List implements objstore.Store. It walks the tree under the prefix's
// directory in key order, skipping every directory whose keys all sort
// at or before after, and stops once it has found the page's keys and the
// one after them, so a page reads the directories on the way to its first
// key and those that hold its keys, not every key under the prefix.
func (s *Store) List(ctx context.Context, prefix, after string, limit int) (objstore.ListPage, error) {
	if err := objstore.ValidatePrefix(prefix); err != nil {
		return objstore.ListPage{}, err
	}
	if limit <= 0 {
		limit = defaultMax
	}
	start := "."
	if i := strings.LastIndexByte(prefix, '/'); i >= 0 {
		start = prefix[:i]
	}
	// One key past the page tells whether there is a next page.
	w := lister{ctx: ctx, fsys: s.root.FS(), prefix: prefix, after: after, want: limit + 1}
	if err := w.walkStart(start); err != nil && err != errPageFull {
		if errcode.Of(err) == errcode.Internal {
			err = s.ioErr(err, "list %s", prefix)
		}
		return objstore.ListPage{}, err
	}
	var page objstore.ListPage
	for i, k := range w.keys {
		if i == limit {
			page.Next = w.keys[i-1]
			break
		}
		info, err := s.Head(ctx, k, "")
		if err != nil {
			if objstore.IsNotExist(err) {
				continue
			}
			return objstore.ListPage{}, err
		}
		page.Objects = append(page.Objects, info)
	}
	return page, nil
}

// errPageFull stops a lister that has found its keys.
var errPageFull = errors.New("page full")

// lister finds, in ascending byte order, the first want keys under
// prefix that sort after after.
//
// A directory p holds key p (if it holds a version file) and the keys
// p/..., which sort apart: "a" < "a.b" < "a.b/x" < "a/x", since '.' sorts
// before '/'. So each subdirectory n of a directory is two items, its
// own key sorted as "n" and its subtree sorted as "n/"; no name holds
// '/', so no other item sorts inside a subtree's range, and visiting a
// directory's items in that order yields its keys in byte order.
type lister struct {
	ctx           context.Context
	fsys          fs.FS
	prefix, after string
	want          int
	keys          []string
}

// walkStart lists the keys under start, the prefix's directory. A
// start that does not exist, or is no directory, holds no keys.
func (w *lister) walkStart(start string) error {
	info, err := fs.Stat(w.fsys, start)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := w.ctx.Err(); err != nil {
		return errcode.Wrap(errcode.Canceled, err, "list %s", w.prefix)
	}
	if listEntries != nil {
		listEntries(1)
	}
	if !info.IsDir() {
		return nil
	}
	entries, err := w.readDir(start)
	if err != nil {
		return err
	}
	return w.walk(start, entries)
}

// readDir reads directory p. One removed since its parent was read (a
// DeletePrefix running beside this List) holds no keys.
func (w *lister) readDir(p string) ([]fs.DirEntry, error) {
	if err := w.ctx.Err(); err != nil {
		return nil, errcode.Wrap(errcode.Canceled, err, "list %s", w.prefix)
	}
	entries, err := fs.ReadDir(w.fsys, p)
	if listEntries != nil {
		listEntries(len(entries))
	}
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	return entries, err
}

// walk lists the keys under directory dir, whose entries are given.
func (w *lister) walk(dir string, entries []fs.DirEntry) error {
	type child struct {
		path    string
		entries []fs.DirEntry
		read    bool
	}
	type item struct {
		sortKey string
		subtree bool
		child   int
	}
	var (
		children []child
		items    []item
	)
	for _, e := range entries {
		name := e.Name()
		// '@' directories (the temp area, strays) hold no keys, and a
		// directory whose path neither extends nor leads to the prefix
		// holds no matching key.
		if !e.IsDir() || strings.HasPrefix(name, "@") {
			continue
		}
		p := path.Join(dir, name)
		if !strings.HasPrefix(p, w.prefix) && !strings.HasPrefix(w.prefix, p+"/") {
			continue
		}
		items = append(items, item{name, false, len(children)}, item{name + "/", true, len(children)})
		children = append(children, child{path: p})
	}
	slices.SortFunc(items, func(a, b item) int { return strings.Compare(a.sortKey, b.sortKey) })
	for _, it := range items {
		c := &children[it.child]
		if !it.subtree {
			key := c.path
			if !strings.HasPrefix(key, w.prefix) || key <= w.after || objstore.ValidateKey(key) != nil {
				continue
			}
		} else if sub := c.path + "/"; sub < w.after && !strings.HasPrefix(w.after, sub) {
			// Every key under c sorts before after.
			continue
		}
		if !c.read {
			var err error
			if c.entries, err = w.readDir(c.path); err != nil {
				return err
			}
			c.read = true
		}
		if it.subtree {
			entries := c.entries
			c.entries = nil
			if err := w.walk(c.path, entries); err != nil {
				return err
			}
			continue
		}
		if slices.ContainsFunc(c.entries, isVersionFile) {
			w.keys = append(w.keys, c.path)
			if len(w.keys) == w.want {
				return errPageFull
			}
		}
	}
	return nil
}

// isVersionFile reports whether e is one of a key's version files.
func isVersionFile(e fs.DirEntry) bool {
	_, ok := parseSeqName(e.Name())
	return ok && !e.IsDir()
}

// DeletePrefix implements objstore.Deleter: it removes the directory
// tree of prefix but the versions of the key the directory itself names
// ("a" beside "a/b", which this store allows, is not under "a/"), then
// whichever of its parents that leaves empty, and fsyncs the directory
// that held what it removed, so that a removal it returned from survives
// a crash, and two removals survive in the order they were made
// (RemoveJob deletes reduce commit records before the map files they
// name).
func (s *Store) DeletePrefix(ctx context.Context, prefix string) error {
	if err := objstore.ValidateDeletePrefix(prefix); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return errcode.Wrap(errcode.Canceled, err, "delete %s", prefix)
	}
	dir := strings.TrimSuffix(prefix, "/")
	// held is the directory that lost an entry, removed is whether one was.
	held, removed := dir, false
	d, err := s.root.Open(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR):
	case err != nil:
		return s.ioErr(err, "delete %s", prefix)
	default:
		names, err := d.Readdirnames(-1)
		d.Close()
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return s.ioErr(err, "delete %s", prefix)
		}
		for _, n := range names {
			if _, ok := parseSeqName(n); ok {
				continue
			}
			if err := s.root.RemoveAll(dir + "/" + n); err != nil {
				return s.ioErr(err, "delete %s", prefix)
			}
			removed = true
		}
		if err := s.root.Remove(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
			// The key dir names, or one created since, uses it.
			return s.syncRemoval(held, removed, prefix)
		} else if err == nil {
			held, removed = path.Dir(dir), true
		}
	}
	// A parent another key still uses is not empty: Remove fails and the
	// pruning stops there.
	for p := path.Dir(dir); p != "."; p = path.Dir(p) {
		if s.root.Remove(p) != nil {
			break
		}
		held, removed = path.Dir(p), true
	}
	return s.syncRemoval(held, removed, prefix)
}

// syncRemoval fsyncs dir, which lost entries to DeletePrefix(prefix) if
// removed. A dir that is gone since (another deletion beside this one
// removed it) holds nothing to sync.
func (s *Store) syncRemoval(dir string, removed bool, prefix string) error {
	if !removed {
		return nil
	}
	if err := s.syncDir(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("delete %s: %w", prefix, err)
	}
	return nil
}

func (s *Store) ioErr(err error, format string, args ...any) error {
	return errcode.Wrap(fsCode(err, errcode.IO), err, "file store %s: %s", s.dir, fmt.Sprintf(format, args...))
}

// fsCode is the code of file-system error err: STORE_DENIED for a
// permission the store's directory refuses (EACCES: its mode or owner;
// EPERM: an immutable directory) and for a read-only file system
// (EROFS), which, like an S3 bucket's AccessDenied, no retry overcomes;
// otherwise the code given.
func fsCode(err error, otherwise errcode.Code) errcode.Code {
	if errors.Is(err, fs.ErrPermission) || errors.Is(err, syscall.EROFS) {
		return errcode.StoreDenied
	}
	return otherwise
}
