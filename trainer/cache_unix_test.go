//go:build unix

package trainer

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/stage/stagetest"
)

// A FIFO in an entry's place is replaced like any other bad entry:
// opening it would block until a writer came, and no signal ends that
// wait (a worker hung for good and ignored SIGTERM).
func TestCacheReplacesAFIFO(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := stagetest.Store(t)
	gen := stagetest.Synth(t, s, 300, 2, 1)
	c, err := OpenCache(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	d := gen.Release.Shards[0]
	if err := syscall.Mkfifo(c.Path(d.Digest), 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var res FillResult
	go func() {
		defer close(done)
		res, err = c.Fill(ctx, s, d)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatal("Fill blocked on a FIFO in the entry's place")
	}
	if err != nil || !res.Corrupt || res.Code != errcode.BadInput || res.Fetched != d.Size {
		t.Fatalf("fill over a FIFO: %+v, %v; want corrupt (BAD_INPUT) and refetched", res, err)
	}
	if got, _ := os.ReadFile(c.Path(d.Digest)); !bytes.Equal(got, stagetest.ShardBytes(t, s, d)) {
		t.Fatal("the FIFO was not replaced by the shard's bytes")
	}
}

// An entry replaced between its hash and the decode of its content by a
// FIFO, or by a link to a FIFO outside the cache: the decoder opened it
// and waited for a writer for good, deaf to ctx and SIGTERM. It now
// opens neither, and the worker fetches the entry again.
func TestEntryReplacedByAFIFOWhileDecoded(t *testing.T) {
	for _, link := range []bool{false, true} {
		t.Run(fmt.Sprintf("link=%v", link), func(t *testing.T) {
			e := newEnv(t)
			e.publish(e.gen1, 0)
			e.createRun("r1", 1, 20*time.Second)
			w := e.worker("r1", 0, nil, nil)
			fifo := filepath.Join(t.TempDir(), "fifo")
			if err := syscall.Mkfifo(fifo, 0o644); err != nil {
				t.Fatal(err)
			}
			decode := w.cfg.Verify
			var once sync.Once
			w.cfg.Verify = func(ctx context.Context, path string, rel *manifest.Release, desc manifest.Shard) error {
				once.Do(func() {
					tmp := filepath.Join(w.cfg.Cache.Dir(), "tmp", "planted")
					var err error
					if link {
						err = os.Symlink(fifo, tmp)
					} else {
						err = syscall.Mkfifo(tmp, 0o644)
					}
					if err == nil {
						err = os.Rename(tmp, path)
					}
					if err != nil {
						t.Error(err)
					}
				})
				return decode(ctx, path, rel, desc)
			}
			ctx, cancel := context.WithTimeout(e.ctx, time.Minute)
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- w.Run(ctx, true) }()
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
			case <-ctx.Done():
				t.Fatal("the decoder waited on a FIFO in the entry's place")
			}
			for _, f := range w.Status().Files {
				if b, err := os.ReadFile(f.Path); err != nil || manifest.Sum(b) != f.Digest {
					t.Errorf("ready with %s's entry hashing to %s (%v)", f.ID, manifest.Sum(b), err)
				}
			}
		})
	}
}
