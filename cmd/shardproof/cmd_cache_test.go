//go:build unix

package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/raftgate"
	"github.com/shardproof/shardproof/stage/stagetest"
	"github.com/shardproof/shardproof/trainer"
)

func TestParseByteSize(t *testing.T) {
	for in, want := range map[string]int64{
		"0": 0, "4096": 4096, "4096B": 4096, "1kB": 1000, "1KiB": 1024, "500GiB": 500 << 30,
		"2TB": 2e12, "2tb": 2e12, "3MiB": 3 << 20, "1PiB": 1 << 50, "8191PiB": 8191 << 50,
		"9223372036854775807": math.MaxInt64,
	} {
		if got, err := parseByteSize(in); err != nil || got != want {
			t.Errorf("parseByteSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "-1", "+1", "1.5TiB", "1G", "GiB", "1 GiB", "8192PiB", "9223372036854775808", "10EiB"} {
		if got, err := parseByteSize(in); err == nil {
			t.Errorf("parseByteSize(%q) = %d, want an error", in, got)
		}
	}
}

// cache prune through the command: entries evicted least recently used
// first (a hit refreshes one), an entry a live worker holds skipped and
// listed, a temp file counted and kept; --dry-run removes nothing; a
// bound the rest cannot meet is CACHE_FULL (exit 3) after removing what
// it could; a bad size or a directory that is no cache is USAGE, and
// creates nothing.
func TestCachePruneCLI(t *testing.T) {
	ctx := context.Background()
	r := newRelease(t)
	shards := r.res.Release.Shards
	dir := t.TempDir()
	c, err := trainer.OpenCache(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range append(shards, shards[0]) {
		if _, err := c.Fill(ctx, r.store, d); err != nil {
			t.Fatal(err)
		}
	}
	c.Close()
	// Least recently used first: 1, 2, 3, 4, then 0 (hit last).
	live, err := trainer.OpenCache(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	if res, err := live.Fill(ctx, r.store, shards[2]); err != nil || !res.Hit {
		t.Fatalf("live worker's fill: %+v %v", res, err)
	}
	const inFlight = 100
	tmp := filepath.Join(dir, "tmp", "inflight")
	if err := os.WriteFile(tmp, make([]byte, inFlight), 0o600); err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, d := range shards {
		total += d.Size
	}
	// Shard 2 is used after 1 now (the live worker's hit): 1, 3, 4, 0, 2.
	bound := total + inFlight - shards[1].Size - shards[3].Size
	line := func(action string, d manifest.Shard) string {
		return fmt.Sprintf("%s\t%s\t%d bytes\tused ", action, d.Digest, d.Size)
	}
	present := func(d manifest.Shard) bool {
		_, err := os.Stat(filepath.Join(dir, "sha256", d.Digest.Hex()))
		return err == nil
	}

	out, err := cli(t, "cache", "prune", "--cache", dir, "--max-bytes", fmt.Sprint(bound), "--dry-run")
	if err != nil {
		t.Fatalf("dry run: %v\n%s", err, out)
	}
	summary := fmt.Sprintf("would remove 2 entries, %d bytes; skipped 0 in use, 0 bytes; cache %d bytes (bound %d)\n", shards[1].Size+shards[3].Size, bound, bound)
	if !strings.HasPrefix(out, line("would remove", shards[1])) || !strings.Contains(out, "\n"+line("would remove", shards[3])) || !strings.HasSuffix(out, summary) {
		t.Fatalf("dry run printed\n%s\nwant shards 1 and 3, then %q", out, summary)
	}
	for _, d := range shards {
		if !present(d) {
			t.Fatalf("the dry run removed %s", d.ID)
		}
	}

	out, err = cli(t, "cache", "prune", "--cache", dir, "--max-bytes", fmt.Sprint(bound))
	if err != nil || !strings.HasPrefix(out, line("removed", shards[1])) || !strings.Contains(out, "\n"+line("removed", shards[3])) ||
		!strings.HasSuffix(out, fmt.Sprintf("removed 2 entries, %d bytes; skipped 0 in use, 0 bytes; cache %d bytes (bound %d)\n", shards[1].Size+shards[3].Size, bound, bound)) {
		t.Fatalf("prune to %d: %v\n%s", bound, err, out)
	}
	if present(shards[1]) || present(shards[3]) || !present(shards[0]) || !present(shards[2]) || !present(shards[4]) {
		t.Fatal("prune removed other entries than shards 1 and 3")
	}

	// Down to nothing: 4 and 0 go, 2 is in use and the temp file stays.
	out, err = cli(t, "cache", "prune", "--cache", dir, "--max-bytes", "0")
	wantExit(t, err, errcode.CacheFull, errcode.ExitError)
	want := []string{line("removed", shards[4]), line("removed", shards[0]), line("in use", shards[2]),
		fmt.Sprintf("removed 2 entries, %d bytes; skipped 1 in use, %d bytes; cache %d bytes (bound 0)\n", shards[4].Size+shards[0].Size, shards[2].Size, shards[2].Size+inFlight)}
	for i, l := range strings.SplitAfter(out, "\n")[:4] {
		if !strings.HasPrefix(l, want[i]) {
			t.Fatalf("prune to 0 printed\n%s\nline %d, want %q", out, i, want[i])
		}
	}
	if !present(shards[2]) || present(shards[0]) || present(shards[4]) {
		t.Fatal("prune to 0 removed the entry in use, or kept another")
	}
	if st, err := os.Stat(tmp); err != nil || st.Size() != inFlight {
		t.Fatalf("the temp file in flight: %v", err)
	}

	_, err = cli(t, "cache", "prune", "--cache", dir, "--max-bytes", "1G")
	wantExit(t, err, errcode.Usage, errcode.ExitUsage)
	_, err = cli(t, "cache", "prune", "--cache", dir)
	wantExit(t, err, errcode.Usage, errcode.ExitUsage)
	missing := filepath.Join(t.TempDir(), "nocache")
	_, err = cli(t, "cache", "prune", "--cache", missing, "--max-bytes", "1GiB")
	wantExit(t, err, errcode.Usage, errcode.ExitUsage)
	if _, err := os.Stat(missing); !os.IsNotExist(err) {
		t.Fatalf("prune of a missing cache made it: %v", err)
	}
}

// worker --cache-max-bytes through the command: a bound below the rank's
// shards is CACHE_TOO_SMALL (exit 2) and fetches nothing; one that fits
// evicts another release's entries and the worker is ready; a size it
// cannot parse is USAGE before any work.
func TestWorkerCacheMaxBytesCLI(t *testing.T) {
	ctx := context.Background()
	dir, s := tempFileStore(t)
	gen1 := stagetest.Synth(t, s, 1200, 3, 1)
	gen2 := stagetest.Synth(t, s, 1200, 3, 2)
	node, g := startLeader(t)
	var digests []manifest.Digest
	var need int64
	for _, d := range gen1.Release.Shards {
		digests = append(digests, d.Digest)
		need += d.Size
	}
	// The worker reads the gate's VERIFIED record only; the publish tests
	// produce its report for real.
	if _, err := g.Register(ctx, &raftgate.Register{Root: gen1.Root, Shards: digests, Report: &raftgate.ReportSummary{
		Digest: manifest.Sum([]byte("report")), Verdict: manifest.Verified, DatasetSnapshot: gen1.Snapshot,
	}}); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Publish(ctx, "main", gen1.Root, 0, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := g.CreateRun(ctx, &raftgate.CreateRun{Run: "r1", Alias: "main", WorldSize: 1, BarrierTimeoutMs: 30_000}); err != nil {
		t.Fatal(err)
	}
	cache := t.TempDir()
	c, err := trainer.OpenCache(cache)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range gen2.Release.Shards {
		if _, err := c.Fill(ctx, s, d); err != nil {
			t.Fatal(err)
		}
	}
	c.Close()
	worker := func(max string) (string, error) {
		return cli(t, "worker", "--store", dir, "--gate", node.URL(), "--run", "r1", "--rank", "0", "--cache", cache, "--once", "-q", "--cache-max-bytes", max)
	}
	entries := func() int {
		es, _ := os.ReadDir(filepath.Join(cache, "sha256"))
		return len(es)
	}

	_, err = worker(fmt.Sprint(need - 1))
	wantExit(t, err, errcode.CacheTooSmall, errcode.ExitUsage)
	if !strings.Contains(err.Error(), fmt.Sprint(need)) {
		t.Fatalf("%v does not name the shards' %d bytes", err, need)
	}
	if n := entries(); n != len(gen2.Release.Shards) {
		t.Fatalf("a refused worker left %d entries, want the %d it found", n, len(gen2.Release.Shards))
	}
	_, err = worker("1.5GiB")
	wantExit(t, err, errcode.Usage, errcode.ExitUsage)

	out, err := worker(fmt.Sprint(need))
	if err != nil || !strings.Contains(out, "ready run=r1 rank=0 root="+gen1.Root.String()) {
		t.Fatalf("worker: %q %v", out, err)
	}
	if n := entries(); n != len(gen1.Release.Shards) {
		t.Fatalf("%d entries, want only the rank's %d", n, len(gen1.Release.Shards))
	}
}
