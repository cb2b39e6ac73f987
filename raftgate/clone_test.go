package raftgate

import (
	"bytes"
	"fmt"
	"reflect"
	"testing"

	"github.com/shardproof/shardproof/manifest"
)

// cloneHarness is a gate with something in every table of its state: a
// cluster version and identity, fences with a log, releases with reports
// and rechecks, a pruned one, aliases, permits, a run with attestations
// and a checkpoint, a pruned run, a node.
func cloneHarness(t *testing.T) *harness {
	h := newHarness(t)
	h.ok(&SetClusterVersion{Version: CommandVersion, ClusterID: newClusterID()})
	h.ok(&AdvanceFence{Kind: FenceTombstone, Value: 3, Log: dig("log at 3")})
	old := h.verified("old", 4, 3, 0)
	h.ok(&Publish{Alias: "main", Root: old})
	h.ok(&CreateRun{Run: "gone", Alias: "main", WorldSize: 1})
	h.ok(&CancelRun{Run: "gone"})
	root := h.verified("r1", 6, 3, 0)
	h.ok(&Publish{Alias: "main", Root: root, ExpectedGeneration: 1})
	h.ok(&Publish{Alias: "other", Root: root})
	h.ok(&RecheckCmd{Root: root, Kind: FenceTombstone, Value: 3, Report: dig("recheck"), Hits: 0})
	h.ok(&CreateRun{Run: "live", Alias: "main", WorldSize: 3, BarrierTimeoutMs: 30 * 24 * 3600 * 1000})
	h.ok(&Attest{Run: "live", Rank: 0, Root: root, Shards: []manifest.Digest{shardsOf("r1", 6)[0], shardsOf("r1", 6)[3]}})
	h.ok(&Join{ID: "n1", RaftAddr: "127.0.0.1:1", HTTPAddr: "127.0.0.1:2"})
	h.now += 48 * 3600 * 1000
	h.ok(&Prune{OlderThanMs: 3600 * 1000})
	return h
}

// A snapshot is the state when Raft asked for it, whatever Apply does to
// the state while Persist encodes it: the copy Snapshot takes shares
// nothing that Apply writes to (a list Apply appends to or sets an
// element of, a map it adds to, a record it changes), and encodes to the
// bytes of the state it copied.
func TestSnapshotIsTheStateItWasTaken(t *testing.T) {
	h := cloneHarness(t)
	want, err := h.f.Encode()
	if err != nil {
		t.Fatal(err)
	}
	snap, err := h.f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	h.f.Read(func(s *State) {
		if path := sharedMemory(reflect.ValueOf(s), reflect.ValueOf(snap.(*snapshot).s), "$"); path != "" {
			t.Fatalf("the snapshot shares %s with the state", path)
		}
	})
	// Every table changes, in place where Apply changes it so.
	root := dig("r1")
	list := shardsOf("r1", 6)
	h.ok(&Attest{Run: "live", Rank: 1, Root: root, Shards: []manifest.Digest{list[1], list[4]}})
	h.ok(&Attest{Run: "live", Rank: 2, Root: root, Shards: []manifest.Digest{list[2], list[5]}})
	h.ok(&AdmitCheckpoint{Run: "live", Step: 10, Root: root})
	h.ok(&Reassign{Run: "live", WorldSize: 2})
	h.ok(&RecheckCmd{Root: root, Kind: FenceTombstone, Value: 3, Report: dig("recheck 2"), Hits: 0})
	h.ok(&AdvanceFence{Kind: FenceTombstone, Value: 4, Log: dig("log at 4")})
	r2 := h.verified("r2", 3, 4, 0)
	h.ok(&Publish{Alias: "main", Root: r2, ExpectedGeneration: 2})
	h.ok(&Publish{Alias: "other", Root: r2, ExpectedGeneration: 1})
	h.ok(&CancelRun{Run: "live"})
	h.ok(&Join{ID: "n2", RaftAddr: "127.0.0.1:3", HTTPAddr: "127.0.0.1:4"})
	h.now += 48 * 3600 * 1000
	h.ok(&Prune{OlderThanMs: 3600 * 1000})
	if now, _ := h.f.Encode(); bytes.Equal(now, want) {
		t.Fatal("the commands changed nothing")
	}
	sink := &memSink{}
	if err := snap.Persist(sink); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(sink.Bytes(), want) {
		t.Fatalf("the snapshot persisted\n%s\nwhere the state was\n%s", sink.Bytes(), want)
	}
}

// sharedMemory returns the path of the first map, pointer or non-empty
// list a and b share, "" when they share none.
func sharedMemory(a, b reflect.Value, path string) string {
	switch a.Kind() {
	case reflect.Pointer:
		if a.IsNil() || b.IsNil() {
			return ""
		}
		if a.Pointer() == b.Pointer() {
			return path
		}
		return sharedMemory(a.Elem(), b.Elem(), path)
	case reflect.Map:
		if a.IsNil() || b.IsNil() {
			return ""
		}
		if a.Pointer() == b.Pointer() {
			return path
		}
		for it := a.MapRange(); it.Next(); {
			if v := b.MapIndex(it.Key()); v.IsValid() {
				if p := sharedMemory(it.Value(), v, fmt.Sprintf("%s[%v]", path, it.Key())); p != "" {
					return p
				}
			}
		}
	case reflect.Slice:
		if a.Len() > 0 && b.Len() > 0 && a.Pointer() == b.Pointer() {
			return path
		}
		for i := range min(a.Len(), b.Len()) {
			if p := sharedMemory(a.Index(i), b.Index(i), fmt.Sprintf("%s[%d]", path, i)); p != "" {
				return p
			}
		}
	case reflect.Struct:
		for i := range a.NumField() {
			if p := sharedMemory(a.Field(i), b.Field(i), path+"."+a.Type().Field(i).Name); p != "" {
				return p
			}
		}
	}
	return ""
}

// Snapshot copies the state and leaves its encoding to Persist, which
// Raft runs beside later Applies: its work does not grow with the
// shards. Encoding in Snapshot, it allocated three times per shard digest
// (a release of 10,000 shards and a run that attested them, 80,000
// allocations), and held up every Apply behind it for as long: seconds
// at 30 releases of 30,000 shards (BenchmarkReleaseScale).
func TestSnapshotDoesNotEncode(t *testing.T) {
	f := NewFSM()
	const shards, ranks = 10_000, 4
	root := dig("r1")
	list := shardsOf("r1", shards)
	for _, c := range []Command{
		&Register{Root: root, Shards: list, Report: &ReportSummary{Digest: dig("report/r1"), Verdict: manifest.Verified, DatasetSnapshot: dig("snap")}},
		&Publish{Alias: "main", Root: root},
		&CreateRun{Run: "live", Alias: "main", WorldSize: ranks},
	} {
		if r := f.ApplyCommand(c); r.Err != nil {
			t.Fatalf("%T: %v", c, r.Err)
		}
	}
	for r := range ranks {
		var mine []manifest.Digest
		for k := r; k < shards; k += ranks {
			mine = append(mine, list[k])
		}
		if res := f.ApplyCommand(&Attest{Run: "live", Rank: r, Root: root, Shards: mine}); res.Err != nil {
			t.Fatal(res.Err)
		}
	}
	allocs := testing.AllocsPerRun(3, func() {
		if _, err := f.Snapshot(); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 1000 {
		t.Fatalf("Snapshot of a release of %d shards allocates %.0f times", shards, allocs)
	}
}
