package trainer

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/stage/stagetest"
)

// A disk that fills while a shard is written into the cache (here the
// process's file size limit, which fails the write past it with EFBIG as
// a full disk does with ENOSPC, the real file store and cache
// underneath): the fill fails IO, leaves neither an entry nor a temp
// file, and the next fill, with room again, fetches the shard whole. A
// half-written file is never taken for the entry. The limit is the whole
// process's, so the fills run in a child test process.
func TestCacheWriteFailureLeavesNothing(t *testing.T) {
	if os.Getenv("TRAINER_FSIZE_CHILD") == "" {
		cmd := exec.Command(os.Args[0], "-test.run=^TestCacheWriteFailureLeavesNothing$", "-test.v")
		cmd.Env = append(os.Environ(), "TRAINER_FSIZE_CHILD=1")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "full disk refused and filled again") {
			t.Fatalf("child: %v\n%s", err, out)
		}
		return
	}
	ctx := context.Background()
	s := stagetest.Store(t)
	gen := stagetest.Synth(t, s, 600, 2, 6)
	d := gen.Release.Shards[0]
	want := stagetest.ShardBytes(t, s, d)
	c, err := OpenCache(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_FSIZE, &old); err != nil {
		t.Fatal(err)
	}
	limit := old
	limit.Cur = uint64(d.Size / 2)
	if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &limit); err != nil {
		t.Fatal(err)
	}
	res, err := c.Fill(ctx, s, d)
	if rerr := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &old); rerr != nil {
		t.Fatal(rerr)
	}
	if errcode.Of(err) != errcode.IO || res.Info != nil {
		t.Fatalf("fill on a full disk: %+v, %v; want IO", res, err)
	}
	t.Logf("fill on a full disk: %s, %d bytes read", errcode.Of(err), res.Fetched)
	if _, err := os.Lstat(c.Path(d.Digest)); !os.IsNotExist(err) {
		t.Fatalf("a failed write left an entry: %v", err)
	}
	if tmp, _ := os.ReadDir(filepath.Join(c.Dir(), "tmp")); len(tmp) != 0 {
		t.Fatalf("a failed write left %d temp files", len(tmp))
	}
	res, err = c.Fill(ctx, s, d)
	if err != nil || res.Hit || res.Fetched != d.Size {
		t.Fatalf("fill with room again: %+v, %v; want a %d-byte fetch", res, err, d.Size)
	}
	if got, _ := os.ReadFile(c.Path(d.Digest)); !bytes.Equal(got, want) {
		t.Fatal("entry differs from the shard's bytes")
	}
	t.Log("full disk refused and filled again")
}
