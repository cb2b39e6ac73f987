//go:build unix

package trainer

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/objstore"
	"github.com/shardproof/shardproof/objstore/file"
	"github.com/shardproof/shardproof/stage/stagetest"
)

// openCache opens the cache at dir, closed when the test ends.
func openCache(t *testing.T, dir string) *Cache {
	t.Helper()
	c, err := OpenCache(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// fill fills the cache with each shard, in order, and fails the test on
// an error.
func fill(t *testing.T, c *Cache, s objstore.Store, shards ...manifest.Shard) []FillResult {
	t.Helper()
	var out []FillResult
	for _, d := range shards {
		res, err := c.Fill(context.Background(), s, d)
		if err != nil {
			t.Fatalf("fill %s: %v", d.ID, err)
		}
		out = append(out, res)
	}
	return out
}

// filledByExitedWorker fills a cache at dir with shards, in order, as a
// worker that then exits: its locks end with it.
func filledByExitedWorker(t *testing.T, dir string, s objstore.Store, shards ...manifest.Shard) {
	t.Helper()
	c, err := OpenCache(dir)
	if err != nil {
		t.Fatal(err)
	}
	fill(t, c, s, shards...)
	c.Close()
}

func totalSize(shards ...manifest.Shard) int64 {
	var n int64
	for _, s := range shards {
		n += s.Size
	}
	return n
}

func digestsOf(es []CacheEntry) []manifest.Digest {
	var out []manifest.Digest
	for _, e := range es {
		out = append(out, e.Digest)
	}
	return out
}

func shardDigests(shards ...manifest.Shard) []manifest.Digest {
	var out []manifest.Digest
	for _, s := range shards {
		out = append(out, s.Digest)
	}
	return out
}

// wantPresent fails the test unless exactly the shards of present have
// an entry (holding their bytes) among shards.
func wantPresent(t *testing.T, c *Cache, shards []manifest.Shard, present ...manifest.Shard) {
	t.Helper()
	for _, d := range shards {
		b, err := os.ReadFile(c.Path(d.Digest))
		want := slices.ContainsFunc(present, func(p manifest.Shard) bool { return p.Digest == d.Digest })
		switch {
		case want && (err != nil || manifest.Sum(b) != d.Digest):
			t.Errorf("%s's entry: %v, want its bytes", d.ID, err)
		case !want && !os.IsNotExist(err):
			t.Errorf("%s's entry is still there (%v), want it evicted", d.ID, err)
		}
	}
}

// cacheBytes is what the cache's entries and temp files take on disk.
func cacheBytes(t *testing.T, c *Cache) int64 {
	t.Helper()
	entries, tmp, err := c.scan()
	if err != nil {
		t.Fatal(err)
	}
	return tmp + sizeOf(entries)
}

// A bounded cache evicts the entry used least recently, by the marks a
// fill or a hit leaves, which outlive the worker that made them: shard
// 0, filled first but then hit, outlives shards 1 and 2, filled after
// it. The fill that follows finds room made and evicts nothing more.
func TestEvictionLeastRecentlyUsedFirst(t *testing.T) {
	s := stagetest.Store(t)
	old := stagetest.Synth(t, s, 800, 4, 11).Release.Shards
	next := stagetest.Synth(t, s, 800, 2, 12).Release.Shards[0]
	dir := t.TempDir()
	c1, err := OpenCache(dir)
	if err != nil {
		t.Fatal(err)
	}
	fill(t, c1, s, old...)
	if res := fill(t, c1, s, old[0]); !res[0].Hit {
		t.Fatalf("fill again: %+v, want a hit", res[0])
	}
	c1.Close()

	// Another worker (the marks are on disk): room for its shard is
	// exactly shard 1's bytes short.
	c := openCache(t, dir)
	bound := totalSize(old...) - old[1].Size + next.Size
	if err := c.SetMaxBytes(bound); err != nil {
		t.Fatal(err)
	}
	adm, err := c.Admit(context.Background(), []manifest.Shard{next})
	if err != nil {
		t.Fatalf("admit: %v", err)
	}
	if got := digestsOf(adm.Eviction.Removed); !slices.Equal(got, shardDigests(old[1])) {
		t.Fatalf("evicted %v, want only %s (least recently used; %s was hit since)", got, old[1].Digest, old[0].Digest)
	}
	if adm.Eviction.Before != totalSize(old...) || adm.Eviction.After != totalSize(old...)-old[1].Size || adm.Eviction.RemovedBytes() != old[1].Size {
		t.Fatalf("eviction %d -> %d bytes, removed %d; want %d -> %d", adm.Eviction.Before, adm.Eviction.After, adm.Eviction.RemovedBytes(), totalSize(old...), totalSize(old...)-old[1].Size)
	}
	wantPresent(t, c, old, old[0], old[2], old[3])
	if _, err := os.Lstat(c.markPath(old[1].Digest)); !os.IsNotExist(err) {
		t.Errorf("the evicted entry's mark is left: %v", err)
	}
	res := fill(t, c, s, next)
	if res[0].Fetched != next.Size || len(res[0].Evicted) != 0 {
		t.Fatalf("fill after admit: %+v, want a fetch that evicts nothing", res[0])
	}
	if n := cacheBytes(t, c); n != bound {
		t.Fatalf("cache holds %d bytes, want the bound, %d", n, bound)
	}

	// One entry more to go: shard 2 is now the least recently used.
	ev, err := c.Prune(context.Background(), bound-1, false)
	if err != nil {
		t.Fatalf("prune: %v", err)
	}
	if got := digestsOf(ev.Removed); !slices.Equal(got, shardDigests(old[2])) {
		t.Fatalf("prune evicted %v, want only %s", got, old[2].Digest)
	}
	wantPresent(t, c, old, old[0], old[3])
}

// The rank's own shards are never evicted, not even the least recently
// used entry; temp files being written are counted and never removed.
func TestEvictionKeepsTheRanksShards(t *testing.T) {
	s := stagetest.Store(t)
	old := stagetest.Synth(t, s, 800, 4, 13).Release.Shards
	next := stagetest.Synth(t, s, 800, 2, 14).Release.Shards[0]
	dir := t.TempDir()
	filledByExitedWorker(t, dir, s, old...)
	// Another worker's fetch in flight, its bytes reserved.
	const inFlight = 1000
	tmp := filepath.Join(dir, "tmp", "inflight")
	if err := os.WriteFile(tmp, make([]byte, inFlight), 0o600); err != nil {
		t.Fatal(err)
	}
	c := openCache(t, dir)
	mine := []manifest.Shard{old[0], next}
	// Room for the rank's shards, the temp file and shard 3.
	if err := c.SetMaxBytes(old[0].Size + next.Size + inFlight + old[3].Size); err != nil {
		t.Fatal(err)
	}
	adm, err := c.Admit(context.Background(), mine)
	if err != nil {
		t.Fatalf("admit: %v", err)
	}
	if got := digestsOf(adm.Eviction.Removed); !slices.Equal(got, shardDigests(old[1], old[2])) {
		t.Fatalf("evicted %v, want %s and %s (never %s, the rank's, though least recently used)", got, old[1].Digest, old[2].Digest, old[0].Digest)
	}
	wantPresent(t, c, old, old[0], old[3])
	if st, err := os.Stat(tmp); err != nil || st.Size() != inFlight {
		t.Fatalf("the temp file in flight: %v", err)
	}
}

// Admit reserves the bytes of the rank's shards not in the cache yet (a
// temp file of their size), so a second worker admitted before the first
// fetched anything counts them and evicts for them too; each fetch
// shrinks the reservation as its temp file takes the bytes, and once
// both ranks are filled the cache is exactly at its bound, no temp file
// left.
func TestReservationCountsForOtherWorkers(t *testing.T) {
	s := stagetest.Store(t)
	old := stagetest.Synth(t, s, 800, 4, 20).Release.Shards
	first := stagetest.Synth(t, s, 800, 2, 21).Release.Shards
	second := stagetest.Synth(t, s, 800, 2, 22).Release.Shards
	dir := t.TempDir()
	filledByExitedWorker(t, dir, s, old...)
	bound := totalSize(first...) + totalSize(second...) + old[3].Size
	a, b := openCache(t, dir), openCache(t, dir)
	for _, c := range []*Cache{a, b} {
		if err := c.SetMaxBytes(bound); err != nil {
			t.Fatal(err)
		}
	}
	adm, err := a.Admit(context.Background(), first)
	if err != nil {
		t.Fatalf("first admit: %v", err)
	}
	evicted := digestsOf(adm.Eviction.Removed)
	if n := cacheBytes(t, a); n > bound {
		t.Fatalf("after the first admit the cache counts %d bytes, above %d", n, bound)
	}
	adm, err = b.Admit(context.Background(), second)
	if err != nil {
		t.Fatalf("second admit: %v", err)
	}
	evicted = append(evicted, digestsOf(adm.Eviction.Removed)...)
	if !slices.Equal(evicted, shardDigests(old[:3]...)) {
		t.Fatalf("the two admits evicted %v, want %v: room for both ranks' shards, reserved and not yet fetched", evicted, shardDigests(old[:3]...))
	}
	wantPresent(t, a, old, old[3])
	fill(t, a, s, first...)
	fill(t, b, s, second...)
	if n := cacheBytes(t, a); n != bound {
		t.Fatalf("both ranks filled: %d bytes, want the bound, %d", n, bound)
	}
	if tmp, _ := os.ReadDir(filepath.Join(dir, "tmp")); len(tmp) != 0 {
		t.Fatalf("%d temp files left (a reservation?)", len(tmp))
	}
}

// A live worker's reservation is never taken for a crashed fill's debris,
// however long since it last changed: OpenCache's stale-temp sweep skips
// it while it is locked. Close removes it.
func TestStaleSweepKeepsALiveReservation(t *testing.T) {
	s := stagetest.Store(t)
	shards := stagetest.Synth(t, s, 600, 2, 23).Release.Shards
	dir := t.TempDir()
	c := openCache(t, dir)
	if err := c.SetMaxBytes(totalSize(shards...)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Admit(context.Background(), shards); err != nil {
		t.Fatal(err)
	}
	res, _ := filepath.Glob(filepath.Join(dir, "tmp", "reserve.*"))
	if len(res) != 1 {
		t.Fatalf("reservations %v, want one", res)
	}
	if st, err := os.Stat(res[0]); err != nil || st.Size() != totalSize(shards...) {
		t.Fatalf("reservation: %v, want %d bytes", err, totalSize(shards...))
	}
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(res[0], old, old); err != nil {
		t.Fatal(err)
	}
	openCache(t, dir)
	if _, err := os.Stat(res[0]); err != nil {
		t.Fatalf("the sweep removed a live worker's reservation: %v", err)
	}
	fill(t, c, s, shards[0])
	if st, err := os.Stat(res[0]); err != nil || st.Size() != shards[1].Size {
		t.Fatalf("reservation after one fetch: %v, want %d bytes", err, shards[1].Size)
	}
	c.Close()
	if _, err := os.Stat(res[0]); !os.IsNotExist(err) {
		t.Fatalf("Close left the reservation: %v", err)
	}
}

// An entry another live worker holds (here a second Cache, its own open
// files and locks, as another process's would be) is never evicted:
// with nothing else to evict, Admit is CACHE_FULL and removes nothing,
// and once that worker's assignment moves on (Admit with other shards),
// the entries it let go are evicted and those it kept are not.
func TestEvictionSkipsEntriesALiveWorkerHolds(t *testing.T) {
	s := stagetest.Store(t)
	old := stagetest.Synth(t, s, 800, 4, 15).Release.Shards
	next := stagetest.Synth(t, s, 800, 2, 16).Release.Shards
	dir := t.TempDir()
	live := openCache(t, dir)
	if _, err := live.Admit(context.Background(), old); err != nil {
		t.Fatal(err)
	}
	fill(t, live, s, old...)

	c := openCache(t, dir)
	if err := c.SetMaxBytes(totalSize(next...)); err != nil {
		t.Fatal(err)
	}
	adm, err := c.Admit(context.Background(), next)
	if errcode.Of(err) != errcode.CacheFull {
		t.Fatalf("admit beside a live worker holding every other entry: %v, want CACHE_FULL", err)
	}
	if len(adm.Eviction.Removed) != 0 || len(adm.Eviction.InUse) != len(old) {
		t.Fatalf("eviction %+v: want nothing removed, %d entries in use", adm.Eviction, len(old))
	}
	wantPresent(t, c, old, old...)
	// A fill of a shard does not make room either.
	if _, err := c.Fill(context.Background(), s, next[0]); errcode.Of(err) != errcode.CacheFull {
		t.Fatalf("fill: %v, want CACHE_FULL", err)
	}
	wantPresent(t, c, old, old...)
	if tmp, _ := os.ReadDir(filepath.Join(dir, "tmp")); len(tmp) != 0 {
		t.Fatalf("a refused fill left %d temp files", len(tmp))
	}

	// Reassigned to shards 2 and 3: 0 and 1 are no longer held.
	if _, err := live.Admit(context.Background(), old[2:]); err != nil {
		t.Fatal(err)
	}
	if err := c.SetMaxBytes(totalSize(next...) + old[2].Size + old[3].Size); err != nil {
		t.Fatal(err)
	}
	adm, err = c.Admit(context.Background(), next)
	if err != nil {
		t.Fatalf("admit once the live worker let go of two entries: %v", err)
	}
	if got := digestsOf(adm.Eviction.Removed); !slices.Equal(got, shardDigests(old[0], old[1])) {
		t.Fatalf("evicted %v, want %s and %s", got, old[0].Digest, old[1].Digest)
	}
	wantPresent(t, c, old, old[2], old[3])
	fill(t, c, s, next...)
}

// A worker process holds its entries: another process's eviction skips
// them while it lives, and removes them once it was killed (its locks
// died with it).
func TestEvictionSkipsAnEntryAChildProcessHolds(t *testing.T) {
	if dir := os.Getenv("TRAINER_HOLD_CACHE"); dir != "" {
		holdForParent(t, dir)
		return
	}
	storeDir := t.TempDir()
	s, err := file.Open(storeDir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	shards := stagetest.Synth(t, s, 600, 2, 17).Release.Shards
	dir := t.TempDir()
	filledByExitedWorker(t, dir, s, shards...)
	desc, err := json.Marshal(shards[1])
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestEvictionSkipsAnEntryAChildProcessHolds$")
	cmd.Env = append(os.Environ(), "TRAINER_HOLD_CACHE="+dir, "TRAINER_HOLD_STORE="+storeDir, "TRAINER_HOLD_SHARD="+string(desc))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "holding") {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("child: %q %v", line, err)
	}

	c := openCache(t, dir)
	ev, err := c.Prune(context.Background(), 0, false)
	if errcode.Of(err) != errcode.CacheFull {
		t.Fatalf("prune beside the child: %v, want CACHE_FULL", err)
	}
	if !slices.Equal(digestsOf(ev.Removed), shardDigests(shards[0])) || !slices.Equal(digestsOf(ev.InUse), shardDigests(shards[1])) {
		t.Fatalf("prune removed %v, skipped %v; want %s removed, %s in use", digestsOf(ev.Removed), digestsOf(ev.InUse), shards[0].Digest, shards[1].Digest)
	}
	wantPresent(t, c, shards, shards[1])

	// Killed, as a crash would: its lock dies with it.
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	ev, err = c.Prune(context.Background(), 0, false)
	if err != nil || !slices.Equal(digestsOf(ev.Removed), shardDigests(shards[1])) {
		t.Fatalf("prune after the child died: removed %v, %v; want %s", digestsOf(ev.Removed), err, shards[1].Digest)
	}
	wantPresent(t, c, shards)
}

// holdForParent is the child of TestEvictionSkipsAnEntryAChildProcessHolds:
// it verifies one entry (a hit) and holds it until its stdin closes or
// it is killed.
func holdForParent(t *testing.T, dir string) {
	s, err := file.Open(os.Getenv("TRAINER_HOLD_STORE"))
	if err != nil {
		t.Fatal(err)
	}
	var d manifest.Shard
	if err := json.Unmarshal([]byte(os.Getenv("TRAINER_HOLD_SHARD")), &d); err != nil {
		t.Fatal(err)
	}
	c, err := OpenCache(dir)
	if err != nil {
		t.Fatal(err)
	}
	if res := fill(t, c, s, d); !res[0].Hit {
		t.Fatalf("child fill: %+v, want a hit", res[0])
	}
	fmt.Println("holding")
	io.Copy(io.Discard, os.Stdin)
}

// listing is every file under dir with its size and modification time.
func listing(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		out = append(out, fmt.Sprintf("%s %d %s", p, info.Size(), info.ModTime().Format(time.RFC3339Nano)))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// A bound below the rank's shards alone is CACHE_TOO_SMALL naming both
// sizes, and changes nothing: no entry evicted, no mark touched.
func TestCacheTooSmallChangesNothing(t *testing.T) {
	s := stagetest.Store(t)
	old := stagetest.Synth(t, s, 800, 2, 18).Release.Shards
	mine := stagetest.Synth(t, s, 800, 3, 19).Release.Shards
	dir := t.TempDir()
	filledByExitedWorker(t, dir, s, old...)
	c := openCache(t, dir)
	before := listing(t, dir)
	bound := totalSize(mine...) - 1
	if err := c.SetMaxBytes(bound); err != nil {
		t.Fatal(err)
	}
	adm, err := c.Admit(context.Background(), mine)
	if errcode.Of(err) != errcode.CacheTooSmall {
		t.Fatalf("admit: %v, want CACHE_TOO_SMALL", err)
	}
	if msg := err.Error(); !strings.Contains(msg, fmt.Sprint(bound)) || !strings.Contains(msg, fmt.Sprint(totalSize(mine...))) {
		t.Fatalf("%q does not name the bound (%d) and the shards' bytes (%d)", msg, bound, totalSize(mine...))
	}
	if len(adm.Eviction.Removed) != 0 {
		t.Fatalf("evicted %v", digestsOf(adm.Eviction.Removed))
	}
	wantPresent(t, c, old, old...)
	if after := listing(t, dir); !slices.Equal(after, before) {
		t.Fatalf("a refused admit changed the cache:\n%v\nwas\n%v", after, before)
	}
	if err := c.SetMaxBytes(-1); errcode.Of(err) != errcode.Usage {
		t.Fatalf("a negative bound: %v, want USAGE", err)
	}
}

// A bounded cache holds one open file per shard: more shards than the
// open-file limit allows (less the worker's slack) are FILE_LIMIT before
// anything changes; an unbounded cache goes on and says how many it
// cannot hold locked. The limit is the whole process's, so the check runs
// in a child test process.
func TestCacheBoundFileLimit(t *testing.T) {
	if os.Getenv("TRAINER_NOFILE_CHILD") == "" {
		cmd := exec.Command(os.Args[0], "-test.run=^TestCacheBoundFileLimit$", "-test.v")
		cmd.Env = append(os.Environ(), "TRAINER_NOFILE_CHILD=1")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "file limit refused") {
			t.Fatalf("child: %v\n%s", err, out)
		}
		return
	}
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	limit := old
	limit.Cur = cacheFileSlack + 2
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &limit); err != nil {
		t.Fatal(err)
	}
	c, err := OpenCache(t.TempDir())
	if rerr := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old); rerr != nil {
		t.Fatal(rerr)
	}
	if err != nil {
		t.Fatal(err)
	}
	shards := make([]manifest.Shard, 3)
	for i := range shards {
		shards[i] = manifest.Shard{ID: fmt.Sprint(i), Digest: manifest.Sum([]byte{byte(i)}), Size: 10}
	}
	if adm, err := c.Admit(context.Background(), shards); err != nil || adm.Unlocked != 1 {
		t.Fatalf("unbounded admit: %+v, %v; want 1 shard unlocked", adm, err)
	}
	if err := c.SetMaxBytes(1 << 20); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Admit(context.Background(), shards); errcode.Of(err) != errcode.FileLimit {
		t.Fatalf("bounded admit of 3 shards under a 2-lock budget: %v, want FILE_LIMIT", err)
	}
	if _, err := c.Admit(context.Background(), shards[:2]); err != nil {
		t.Fatalf("bounded admit of 2 shards: %v", err)
	}
	t.Log("file limit refused")
}

// A worker with a bounded cache over another release's entries: a bound
// below its shards fails the rank with CACHE_TOO_SMALL before it fetches
// a byte or evicts an entry; one that fits evicts all but the most
// recently used of the other entries, counts them (evictions and bytes,
// labelled by the run's release), and is ready on its shards' bytes with
// the cache within the bound.
func TestWorkerBoundedCache(t *testing.T) {
	e := newEnv(t)
	e.publish(e.gen1, 0)
	e.createRun("r1", 1, 30*time.Second)
	mine, other := e.gen1.Release.Shards, e.gen2.Release.Shards
	dir := t.TempDir()
	filledByExitedWorker(t, dir, e.store, other...)
	label := e.gen1.Root.String()

	w := e.worker("r1", 0, nil, nil)
	w.cfg.Cache = openCache(t, dir)
	if err := w.cfg.Cache.SetMaxBytes(totalSize(mine...) - 1); err != nil {
		t.Fatal(err)
	}
	wantCode(t, w.Run(e.ctx, true), errcode.CacheTooSmall)
	if n := value(w.Metrics().ReadBytes.WithLabelValues(label)); n != 0 {
		t.Fatalf("read %v bytes from the store, want none", n)
	}
	wantPresent(t, w.cfg.Cache, append(slices.Clone(mine), other...), other...)

	w = e.worker("r1", 0, nil, nil)
	w.cfg.Cache = openCache(t, dir)
	last := other[len(other)-1]
	bound := totalSize(mine...) + last.Size
	if err := w.cfg.Cache.SetMaxBytes(bound); err != nil {
		t.Fatal(err)
	}
	if err := w.Run(e.ctx, true); err != nil {
		t.Fatal(err)
	}
	for _, f := range w.Status().Files {
		if b, err := os.ReadFile(f.Path); err != nil || manifest.Sum(b) != f.Digest {
			t.Errorf("ready with %s's entry hashing to %s (%v)", f.ID, manifest.Sum(b), err)
		}
	}
	wantPresent(t, w.cfg.Cache, other, last)
	evicted := other[:len(other)-1]
	if n := value(w.Metrics().CacheEvictions.WithLabelValues(label)); n != float64(len(evicted)) {
		t.Errorf("evictions %v, want %d", n, len(evicted))
	}
	if n := value(w.Metrics().CacheEvictedBytes.WithLabelValues(label)); n != float64(totalSize(evicted...)) {
		t.Errorf("evicted bytes %v, want %d", n, totalSize(evicted...))
	}
	if n := cacheBytes(t, w.cfg.Cache); n > bound {
		t.Errorf("cache holds %d bytes, above its bound %d", n, bound)
	}
	if tmp, _ := os.ReadDir(filepath.Join(dir, "tmp")); len(tmp) != 0 {
		t.Errorf("%d temp files left (a reservation?)", len(tmp))
	}
}

// A trainer keeps the files it reads, after an init container (`worker
// --once`) has verified them and exited, by holding a shared flock on
// each: here util-linux's flock(1), as a shell-script trainer would use
// it (Python's fcntl.flock(f, fcntl.LOCK_SH) takes the same lock). The
// entry it holds is in use to a prune; once it lets go, it is evicted.
func TestEvictionSkipsAnEntryATrainerLocks(t *testing.T) {
	flockBin, err := exec.LookPath("flock")
	if err != nil {
		t.Fatalf("flock(1) (util-linux) not found: %v", err)
	}
	s, err := file.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	shards := stagetest.Synth(t, s, 600, 2, 19).Release.Shards
	dir := t.TempDir()
	filledByExitedWorker(t, dir, s, shards...)
	c := openCache(t, dir)

	cmd := exec.Command(flockBin, "--shared", "--nonblock", c.Path(shards[1].Digest), "-c", "echo holding; exec cat")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || line != "holding\n" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("flock: %q %v", line, err)
	}

	ev, err := c.Prune(context.Background(), 0, false)
	if errcode.Of(err) != errcode.CacheFull {
		t.Fatalf("prune beside the trainer's lock: %v, want CACHE_FULL", err)
	}
	if !slices.Equal(digestsOf(ev.Removed), shardDigests(shards[0])) || !slices.Equal(digestsOf(ev.InUse), shardDigests(shards[1])) {
		t.Fatalf("prune removed %v, skipped %v; want %s removed, %s in use", digestsOf(ev.Removed), digestsOf(ev.InUse), shards[0].Digest, shards[1].Digest)
	}
	wantPresent(t, c, shards, shards[1])

	// The trainer is done: closing cat's stdin ends flock, and its lock.
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("flock: %v", err)
	}
	ev, err = c.Prune(context.Background(), 0, false)
	if err != nil || !slices.Equal(digestsOf(ev.Removed), shardDigests(shards[1])) {
		t.Fatalf("prune after the trainer let go: removed %v, %v; want %s", digestsOf(ev.Removed), err, shards[1].Digest)
	}
	wantPresent(t, c, shards)
}
