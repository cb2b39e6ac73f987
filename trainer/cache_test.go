package trainer

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/objstore"
	"github.com/shardproof/shardproof/objstore/faults"
	"github.com/shardproof/shardproof/stage/stagetest"
)

func TestCacheFillHitAndCorruptEntries(t *testing.T) {
	ctx := context.Background()
	s := stagetest.Store(t)
	gen1 := stagetest.Synth(t, s, 600, 3, 1)
	gen2 := stagetest.Synth(t, s, 600, 3, 2)
	c, err := OpenCache(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	d := gen2.Release.Shards[0]

	res, err := c.Fill(ctx, s, d)
	if err != nil || res.Hit || res.Corrupt || res.Fetched != d.Size {
		t.Fatalf("first fill: %+v, %v; want a %d-byte fetch", res, err, d.Size)
	}
	want := stagetest.ShardBytes(t, s, d)
	if got, _ := os.ReadFile(c.Path(d.Digest)); !bytes.Equal(got, want) {
		t.Fatal("cache entry differs from the shard's bytes")
	}
	// Readable by a trainer running as another user on a shared volume.
	if st, err := os.Stat(c.Path(d.Digest)); err != nil || st.Mode().Perm() != 0o644 {
		t.Fatalf("cache entry mode %v (%v), want 0644", st.Mode(), err)
	}
	if res, err = c.Fill(ctx, s, d); err != nil || !res.Hit || res.Fetched != 0 {
		t.Fatalf("second fill: %+v, %v; want a hit", res, err)
	}

	// A stale cache: the entry under gen2's digest holds gen1's part
	// (same size class, different bytes), as a cache keyed by shard id
	// would after a release switch.
	for name, c2 := range map[string]struct {
		bad  []byte
		code errcode.Code
	}{
		"previous release's part": {stagetest.ShardBytes(t, s, gen1.Release.Shards[0]), errcode.SizeMismatch},
		"bit flip":                {stagetest.FlipBit(want, len(want)/2, 3), errcode.DigestMismatch},
		"truncated":               {stagetest.Truncate(want, 7), errcode.SizeMismatch},
		"empty":                   {[]byte{}, errcode.SizeMismatch},
	} {
		t.Run(name, func(t *testing.T) {
			if err := os.WriteFile(c.Path(d.Digest), c2.bad, 0o644); err != nil {
				t.Fatal(err)
			}
			res, err := c.Fill(ctx, s, d)
			if err != nil || res.Hit || !res.Corrupt || res.Reason == "" || res.Fetched != d.Size || res.Code != c2.code {
				t.Fatalf("fill over a bad entry: %+v, %v; want corrupt (%s) and refetched", res, err, c2.code)
			}
			if got, _ := os.ReadFile(c.Path(d.Digest)); !bytes.Equal(got, want) {
				t.Fatal("bad entry was not replaced by the shard's bytes")
			}
		})
	}
}

func TestCacheFetchFaultsLeaveNoEntry(t *testing.T) {
	ctx := context.Background()
	s := stagetest.Store(t)
	res := stagetest.Synth(t, s, 400, 2, 3)
	d := res.Release.Shards[1]
	key := d.Digest.BlobKey()
	only := func(k string) bool { return k == key }
	missing := d
	missing.ObjectVersion = "no-such-version"

	for _, tc := range []struct {
		name string
		fill func(c *Cache) error
		code errcode.Code
	}{
		{"bit flip in transit", func(c *Cache) error {
			_, err := c.Fill(ctx, &faults.BitFlip{Store: s, Match: only, Offset: 100, Bit: 1}, d)
			return err
		}, errcode.DigestMismatch},
		{"torn download", func(c *Cache) error {
			_, err := c.Fill(ctx, &faults.Truncate{Store: s, Match: only, N: d.Size / 2}, d)
			return err
		}, errcode.SizeMismatch},
		{"version missing", func(c *Cache) error {
			_, err := c.Fill(ctx, s, missing)
			return err
		}, errcode.VersionMissing},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := OpenCache(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			err = tc.fill(c)
			if got := errcode.Of(err); got != tc.code {
				t.Fatalf("code %s (%v), want %s", got, err, tc.code)
			}
			if _, err := os.Stat(c.Path(d.Digest)); !os.IsNotExist(err) {
				t.Fatalf("a failed fetch left an entry: %v", err)
			}
			if tmp, _ := os.ReadDir(filepath.Join(c.Dir(), "tmp")); len(tmp) != 0 {
				t.Fatalf("a failed fetch left %d temp files", len(tmp))
			}
		})
	}
}

// OpenCache removes the debris of a crashed fill but not a temp file
// another worker sharing the directory is writing.
func TestOpenCacheRemovesOnlyStaleTemps(t *testing.T) {
	dir := t.TempDir()
	if _, err := OpenCache(dir); err != nil {
		t.Fatal(err)
	}
	stale, live := filepath.Join(dir, "tmp", "a.1"), filepath.Join(dir, "tmp", "b.2")
	for _, p := range []string{stale, live} {
		if err := os.WriteFile(p, []byte("partial"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-time.Hour)
	os.Chtimes(stale, old, old)
	if _, err := OpenCache(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Fatal("stale temp file survived")
	}
	if _, err := os.Stat(live); err != nil {
		t.Fatalf("live temp file removed: %v", err)
	}
}

// slowGet delays every Get: a fetch from a remote store.
type slowGet struct {
	objstore.Store
	d time.Duration
}

func (s slowGet) Get(ctx context.Context, key string, v objstore.Version) (io.ReadCloser, error) {
	time.Sleep(s.d)
	return s.Store.Get(ctx, key, v)
}

// A damaged entry was removed before the shard was fetched again: for
// the whole fetch its path was missing, to a trainer reading it and to a
// worker sharing the directory, which failed (IO) when it statted the
// entry it had just verified -- or, having found the same damage a moment
// later, removed the first worker's fresh copy. The fresh bytes are
// renamed over the damaged entry now; a fetch that fails still leaves no
// damaged entry behind.
func TestCacheRefetchReplacesInPlace(t *testing.T) {
	ctx := context.Background()
	s := stagetest.Store(t)
	gen := stagetest.Synth(t, s, 600, 3, 4)
	d := gen.Release.Shards[0]
	want := stagetest.ShardBytes(t, s, d)
	c, err := OpenCache(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	path := c.Path(d.Digest)
	if err := os.WriteFile(path, stagetest.FlipBit(want, 10, 1), 0o644); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	missing := make(chan bool, 1)
	go func() {
		seen := false
		for {
			select {
			case <-stop:
				missing <- seen
				return
			default:
			}
			if _, err := os.Lstat(path); os.IsNotExist(err) {
				seen = true
			}
			time.Sleep(time.Millisecond)
		}
	}()
	res, err := c.Fill(ctx, slowGet{s, 200 * time.Millisecond}, d)
	close(stop)
	if err != nil || !res.Corrupt {
		t.Fatalf("fill: %+v %v", res, err)
	}
	if <-missing {
		t.Fatal("the entry's path was missing while the shard was fetched again")
	}
	if got, _ := os.ReadFile(path); !bytes.Equal(got, want) {
		t.Fatal("entry not replaced by the shard's bytes")
	}

	// A fetch that fails over a damaged entry leaves no entry.
	if err := os.WriteFile(path, stagetest.FlipBit(want, 10, 1), 0o644); err != nil {
		t.Fatal(err)
	}
	only := func(k string) bool { return k == d.Digest.BlobKey() }
	_, err = c.Fill(ctx, &faults.BitFlip{Store: s, Match: only, Offset: 100, Bit: 1}, d)
	if errcode.Of(err) != errcode.DigestMismatch {
		t.Fatalf("fetch in error: %v", err)
	}
	if _, err := os.Lstat(path); !os.IsNotExist(err) {
		t.Fatalf("a failed refetch left the damaged entry: %v", err)
	}
}

// What a crashed or careless process may leave under an entry's name
// that is not a file of the shard's bytes: each is replaced by a fresh
// fetch (BAD_INPUT), and nothing outside the cache is read, written or
// removed. A directory holding files failed the fill with IO (a rename
// cannot replace it, and a remove of a directory that is not empty
// fails); an entry of the right bytes that not everyone may read (0600,
// 0000: left by an older worker, a umask, a chmod) was a hit for a
// worker running as root, and the trainer, running as another user,
// could not read the file it was handed.
func TestCacheReplacesEntriesThatAreNotTheShardsFile(t *testing.T) {
	ctx := context.Background()
	s := stagetest.Store(t)
	gen := stagetest.Synth(t, s, 300, 2, 5)
	d := gen.Release.Shards[0]
	want := stagetest.ShardBytes(t, s, d)
	outside := filepath.Join(t.TempDir(), "outside")
	for _, tc := range []struct {
		name  string
		plant func(path string) error
	}{
		{"directory holding files", func(path string) error {
			if err := os.MkdirAll(filepath.Join(path, "sub"), 0o755); err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(path, "sub", "f"), want, 0o644); err != nil {
				return err
			}
			return os.Symlink(outside, filepath.Join(path, "link"))
		}},
		{"symlink out of the cache", func(path string) error { return os.Symlink(outside, path) }},
		{"mode 0600", func(path string) error { return os.WriteFile(path, want, 0o600) }},
		{"mode 0000", func(path string) error {
			if err := os.WriteFile(path, want, 0o644); err != nil {
				return err
			}
			return os.Chmod(path, 0)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The outside file holds the shard's own bytes: following a
			// link to it would be a hit.
			if err := os.WriteFile(outside, want, 0o600); err != nil {
				t.Fatal(err)
			}
			c, err := OpenCache(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			path := c.Path(d.Digest)
			if err := tc.plant(path); err != nil {
				t.Fatal(err)
			}
			res, err := c.Fill(ctx, s, d)
			if err != nil || res.Hit || !res.Corrupt || res.Code != errcode.BadInput || res.Fetched != d.Size {
				t.Fatalf("fill: %+v, %v; want corrupt (BAD_INPUT) and refetched", res, err)
			}
			st, err := os.Lstat(path)
			if err != nil || !st.Mode().IsRegular() || st.Mode().Perm() != 0o644 {
				t.Fatalf("entry after the fill: %v, %v; want a regular 0644 file", st.Mode(), err)
			}
			if got, _ := os.ReadFile(path); !bytes.Equal(got, want) {
				t.Fatal("entry not replaced by the shard's bytes")
			}
			if st, err := os.Lstat(outside); err != nil || st.Mode().Perm() != 0o600 {
				t.Fatalf("the file outside the cache changed: %v, %v", st.Mode(), err)
			}
			if got, _ := os.ReadFile(outside); !bytes.Equal(got, want) {
				t.Fatal("the file outside the cache was written")
			}
			if tmp, _ := os.ReadDir(filepath.Join(c.Dir(), "tmp")); len(tmp) != 0 {
				t.Fatalf("the fill left %d files in tmp", len(tmp))
			}
		})
	}
}

// A cache whose sha256, tmp or used directory is a symlink (or not a
// directory) is refused BAD_INPUT: entries were written, read and
// removed (and used marks touched) wherever the link pointed.
func TestOpenCacheRefusesLinkedSubdirectories(t *testing.T) {
	for _, sub := range []string{"sha256", "tmp", "used"} {
		t.Run(sub, func(t *testing.T) {
			outside := t.TempDir()
			old := time.Now().Add(-time.Hour)
			victim := filepath.Join(outside, "old")
			if err := os.WriteFile(victim, []byte("not the cache's"), 0o644); err != nil {
				t.Fatal(err)
			}
			os.Chtimes(victim, old, old)
			dir := t.TempDir()
			if err := os.Symlink(outside, filepath.Join(dir, sub)); err != nil {
				t.Fatal(err)
			}
			_, err := OpenCache(dir)
			if errcode.Of(err) != errcode.BadInput {
				t.Fatalf("open: %v, want BAD_INPUT", err)
			}
			if _, err := os.Stat(victim); err != nil {
				t.Fatalf("a file the link points at was removed: %v", err)
			}

			file := t.TempDir()
			if err := os.WriteFile(filepath.Join(file, sub), nil, 0o644); err != nil {
				t.Fatal(err)
			}
			if _, err := OpenCache(file); errcode.Of(err) != errcode.BadInput {
				t.Fatalf("open with a file for %s: %v, want BAD_INPUT", sub, err)
			}
		})
	}
}

// A fill that found a directory in an entry's place moves it aside; a
// worker sharing the cache may have moved it first and renamed its
// fetched file in: that file is put back, not removed with the
// directory, so the path is never missing to that worker's trainer.
func TestMoveAsideKeepsAFileRenamedInMeanwhile(t *testing.T) {
	c, err := OpenCache(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(c.Dir(), "sha256", "entry")
	if err := os.WriteFile(path, []byte("fresh"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := c.moveAside(path); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != "fresh" {
		t.Fatalf("the file renamed in meanwhile: %q, %v", b, err)
	}
	if tmp, _ := os.ReadDir(filepath.Join(c.Dir(), "tmp")); len(tmp) != 0 {
		t.Fatalf("moveAside left %d entries in tmp", len(tmp))
	}
}
