package coordinator

import (
	"bytes"
	"context"
	"testing"

	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/objstore"
	"github.com/shardproof/shardproof/snapindex"
	"github.com/shardproof/shardproof/stage"
	"github.com/shardproof/shardproof/stage/stagetest"
)

// A release with a few faults, verified with the snapshot's leaf index:
// reducers read only the members declaring a bucket that differs, and
// the report (minus execution) is byte-identical to a full read's.
func TestLeafIndexSkipsMatchingMembers(t *testing.T) {
	s := stagetest.Store(t)
	res := stagetest.Synth(t, s, 4000, 8, 11)
	res = stagetest.RewriteShard(t, s, res, 3, func(rows []stage.Row) []stage.Row {
		rows[1].Text += "~"
		rows[2].Split = "other"
		return rows[1:] // rows[0] missing
	})
	members := len(res.SnapshotDoc.Members)
	full := verify(t, s, PlanOptions{Root: res.Root, Parallelism: 2, ReadAllMembers: true})
	if ex := full.Execution; ex.SnapshotMembersRead != members || ex.SnapshotMembersSkipped != 0 {
		t.Fatalf("--read-all-members: %d members read, %d skipped; want all %d read", ex.SnapshotMembersRead, ex.SnapshotMembersSkipped, members)
	}
	if c := full.Counts; c.Missing != 1 || c.ContentSubstitution != 1 || c.SplitConflict != 1 || full.Verdict != manifest.Invalid {
		t.Fatalf("full read: counts %+v", c)
	}
	for _, reducers := range []int{2, 8} {
		r := verify(t, s, PlanOptions{Root: res.Root, Parallelism: 2, Reducers: reducers})
		ex := r.Execution
		// Three samples differ: at most three members are needed.
		if ex.SnapshotMembersRead+ex.SnapshotMembersSkipped != members || ex.SnapshotMembersRead > 3 || ex.SnapshotMembersRead == 0 {
			t.Fatalf("%d reducers: %d members read, %d skipped of %d; want 1 to 3 read", reducers, ex.SnapshotMembersRead, ex.SnapshotMembersSkipped, members)
		}
		if a, b := withoutExecution(t, full), withoutExecution(t, r); !bytes.Equal(a, b) {
			t.Fatalf("%d reducers: report with the leaf index differs from a full read's:\n%s\n%s", reducers, a, b)
		}
	}
}

// An index that is damaged, or that names another snapshot, is not used:
// verify reads every member, reports as it would have, and stores a valid
// index again, which the next verification uses.
func TestLeafIndexDamagedIsIgnoredAndRewritten(t *testing.T) {
	ctx := context.Background()
	s, res := synth(t)
	key := snapindex.Key(res.Snapshot)
	k := uint(12)
	_, good, found, err := snapindex.Find(ctx, s, res.Snapshot, k, res.SnapshotDoc.TupleRoot)
	if err != nil || !found {
		t.Fatalf("stage left no valid leaf index: found %v, %v", found, err)
	}
	members := len(res.SnapshotDoc.Members)
	other := snapindex.Key(manifest.Sum([]byte("another snapshot")))
	for name, bad := range map[string]func([]byte) []byte{
		"leaf flipped": func(b []byte) []byte { b[len(b)-1] ^= 1; return b },
		"truncated":    func(b []byte) []byte { return b[:len(b)-32] },
		"other root":   func(b []byte) []byte { b[len("sp.leaves.v1\x00")] ^= 1; return b },
	} {
		t.Run(name, func(t *testing.T) {
			b, err := snapindex.Encode(k, splitLeaves(good))
			if err != nil {
				t.Fatal(err)
			}
			putVersion(t, s, key, bad(b))
			if _, _, _, err := snapindex.Find(ctx, s, res.Snapshot, k, res.SnapshotDoc.TupleRoot); err == nil {
				t.Fatal("damaged index accepted by Find")
			}
			r := verify(t, s, PlanOptions{Root: res.Root, Parallelism: 2})
			expect(t, r, clean(res))
			if ex := r.Execution; ex.SnapshotMembersRead != members {
				t.Fatalf("damaged index: %d of %d members read", ex.SnapshotMembersRead, members)
			}
			_, leaves, found, err := snapindex.Find(ctx, s, res.Snapshot, k, res.SnapshotDoc.TupleRoot)
			if err != nil || !found || !bytes.Equal(leaves, good) {
				t.Fatalf("index not rewritten: found %v, %v", found, err)
			}
			r = verify(t, s, PlanOptions{Root: res.Root, Parallelism: 2})
			expect(t, r, clean(res))
			if ex := r.Execution; ex.SnapshotMembersSkipped != members {
				t.Fatalf("rewritten index: %d of %d members skipped", ex.SnapshotMembersSkipped, members)
			}
		})
	}
	// The valid index of one snapshot is no index of another.
	putVersion(t, s, other, must(snapindex.Encode(k, splitLeaves(good))))
	if _, _, _, err := snapindex.Find(ctx, s, manifest.Sum([]byte("another snapshot")), k, manifest.Sum([]byte("its root"))); err == nil {
		t.Fatal("an index of another snapshot's root accepted")
	}
}

func splitLeaves(b []byte) [][32]byte {
	out := make([][32]byte, len(b)/32)
	for i := range out {
		out[i] = [32]byte(b[32*i:])
	}
	return out
}

func putVersion(t *testing.T, s objstore.Store, key string, b []byte) {
	t.Helper()
	if _, err := s.Put(context.Background(), key, bytes.NewReader(b), objstore.PutOptions{Size: int64(len(b))}); err != nil {
		t.Fatal(err)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
