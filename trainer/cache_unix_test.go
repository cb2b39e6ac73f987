//go:build unix

package trainer

import (
	"bytes"
	"context"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/shardproof/shardproof/internal/errcode"
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
