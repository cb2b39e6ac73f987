package trainer

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/objstore"
	"github.com/shardproof/shardproof/stage/stagetest"
)

// damageOnNextFetch is a store whose Get of a shard blob first damages,
// in place, one entry the worker has already verified into cache: a
// process writing into the cache directory while the worker is still
// fetching its other shards.
type damageOnNextFetch struct {
	objstore.Store
	cache  *Cache
	shards []manifest.Shard
	once   sync.Once
	hit    manifest.Shard
}

func (d *damageOnNextFetch) Get(ctx context.Context, key string, v objstore.Version) (io.ReadCloser, error) {
	for _, s := range d.shards {
		if s.Digest.BlobKey() != key {
			continue
		}
		for _, other := range d.shards {
			p := d.cache.Path(other.Digest)
			b, err := os.ReadFile(p)
			if other.Digest == s.Digest || err != nil || int64(len(b)) != other.Size {
				continue
			}
			d.once.Do(func() {
				d.hit = other
				os.WriteFile(p, stagetest.FlipBit(b, len(b)/2, 2), 0o644)
			})
		}
	}
	return d.Store.Get(ctx, key, v)
}

// An entry damaged after it was verified, while the worker fetched its
// other shards, was recorded as the file the worker verified (a stat
// taken once every shard was done), so neither the attestation nor a
// sidecar's recheck looked at it again: the worker attested and turned
// ready on bytes it never verified. The worker now keeps the identity of
// the file it hashed and checks every entry against it before attesting.
func TestEntryDamagedAfterItsVerificationIsNotAttested(t *testing.T) {
	e := newEnv(t)
	e.publish(e.gen1, 0)
	e.createRun("r1", 1, 20*time.Second)
	c, err := OpenCache(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	d := &damageOnNextFetch{Store: e.store, cache: c, shards: e.gen1.Release.Shards}
	w := e.worker("r1", 0, d, nil)
	w.cfg.Cache, w.cfg.Parallelism = c, 1
	if err := w.Run(e.ctx, true); err != nil {
		t.Fatal(err)
	}
	if d.hit.ID == "" {
		t.Fatal("no entry was damaged")
	}
	for _, f := range w.Status().Files {
		b, err := os.ReadFile(f.Path)
		if err != nil || manifest.Sum(b) != f.Digest {
			t.Errorf("ready with %s's entry holding bytes hashing to %s (%v), want %s", f.ID, manifest.Sum(b), err, f.Digest)
		}
	}
	if n := value(w.Metrics().CacheCorruptions.WithLabelValues(e.gen1.Root.String())); n != 1 {
		t.Errorf("cache corruptions %v, want 1", n)
	}
}

// Two workers on one host pointed at the same --cache, each the only
// rank of its own run over the same release, start at once over a cache
// a crashed worker left damaged (a flipped bit, a truncation, a
// directory, a link out of the cache, a mode 0600 entry): both become
// ready with every entry of its list holding the shard's bytes, each
// damaged entry counted as a corruption by at least one of them, and no
// temp file left. Entries are only ever renamed into place, so neither
// reads a torn file nor removes the other's verified one for good.
func TestTwoWorkersShareOneCache(t *testing.T) {
	e := newEnv(t)
	e.publish(e.gen1, 0)
	shards := e.gen1.Release.Shards
	outside := filepath.Join(t.TempDir(), "outside")
	if err := os.WriteFile(outside, stagetest.ShardBytes(t, e.store, shards[3]), 0o644); err != nil {
		t.Fatal(err)
	}
	for round := range 4 {
		dir := t.TempDir()
		c, err := OpenCache(dir)
		if err != nil {
			t.Fatal(err)
		}
		damage := []func(string, []byte) error{
			func(p string, b []byte) error { return os.WriteFile(p, stagetest.FlipBit(b, len(b)/3, 4), 0o644) },
			func(p string, b []byte) error { return os.WriteFile(p, b[:len(b)/2], 0o644) },
			func(p string, b []byte) error { return os.MkdirAll(filepath.Join(p, "sub"), 0o755) },
			func(p string, b []byte) error { return os.Symlink(outside, p) },
			func(p string, b []byte) error { return os.WriteFile(p, b, 0o600) },
		}
		for i, f := range damage {
			if err := f(c.Path(shards[i].Digest), stagetest.ShardBytes(t, e.store, shards[i])); err != nil {
				t.Fatal(err)
			}
		}
		var ws []*Worker
		for k := range 2 {
			run := fmt.Sprintf("share-%d-%d", round, k)
			e.createRun(run, 1, 30*time.Second)
			w := e.worker(run, 0, nil, nil)
			if w.cfg.Cache, err = OpenCache(dir); err != nil {
				t.Fatal(err)
			}
			ws = append(ws, w)
		}
		for k, err := range runAll(e.ctx, ws...) {
			if err != nil {
				t.Fatalf("round %d worker %d: %v", round, k, err)
			}
		}
		var corrupt float64
		for k, w := range ws {
			corrupt += value(w.Metrics().CacheCorruptions.WithLabelValues(e.gen1.Root.String()))
			for _, f := range w.Status().Files {
				b, err := os.ReadFile(f.Path)
				if err != nil || manifest.Sum(b) != f.Digest {
					t.Fatalf("round %d worker %d ready with %s's entry hashing to %s (%v)", round, k, f.ID, manifest.Sum(b), err)
				}
				if st, err := os.Lstat(f.Path); err != nil || !st.Mode().IsRegular() || st.Mode().Perm() != 0o644 {
					t.Fatalf("round %d: %s's entry is %v (%v)", round, f.ID, st.Mode(), err)
				}
			}
		}
		if corrupt < float64(len(damage)) {
			t.Fatalf("round %d: %v corruptions counted, want at least %d", round, corrupt, len(damage))
		}
		if tmp, _ := os.ReadDir(filepath.Join(dir, "tmp")); len(tmp) != 0 {
			t.Fatalf("round %d: %d temp files left", round, len(tmp))
		}
	}
	if b, err := os.ReadFile(outside); err != nil || manifest.Sum(b) != shards[3].Digest {
		t.Fatalf("the file outside the cache changed: %v", err)
	}
}

// An entry replaced between its hash and the decode of its content (a
// process writing into the cache) made the decoder read bytes the hash
// never saw, and the rank failed with the decoder's DIGEST_MISMATCH as if
// the shard were bad: the entry is no longer the file verified, so it is
// verified again, fetched again as a corruption, and the rank is ready
// on the shard's bytes.
func TestEntryReplacedWhileDecodedIsVerifiedAgain(t *testing.T) {
	e := newEnv(t)
	e.publish(e.gen1, 0)
	e.createRun("r1", 1, 20*time.Second)
	w := e.worker("r1", 0, nil, nil)
	decode := w.cfg.Verify
	var once sync.Once
	replaced := false
	w.cfg.Verify = func(ctx context.Context, path string, rel *manifest.Release, desc manifest.Shard) error {
		once.Do(func() {
			b, err := os.ReadFile(path)
			if err != nil {
				t.Error(err)
				return
			}
			tmp := filepath.Join(w.cfg.Cache.Dir(), "tmp", "damaged")
			if err := os.WriteFile(tmp, stagetest.FlipBit(b, len(b)/2, 5), 0o644); err != nil {
				t.Error(err)
				return
			}
			replaced = os.Rename(tmp, path) == nil
		})
		return decode(ctx, path, rel, desc)
	}
	if err := w.Run(e.ctx, true); err != nil {
		t.Fatal(err)
	}
	if !replaced {
		t.Fatal("no entry was replaced")
	}
	for _, f := range w.Status().Files {
		if b, err := os.ReadFile(f.Path); err != nil || manifest.Sum(b) != f.Digest {
			t.Errorf("ready with %s's entry hashing to %s (%v)", f.ID, manifest.Sum(b), err)
		}
	}
	if n := value(w.Metrics().CacheCorruptions.WithLabelValues(e.gen1.Root.String())); n != 1 {
		t.Errorf("cache corruptions %v, want 1", n)
	}
}
