package trainer

import (
	"context"
	"io"
	"os"
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
