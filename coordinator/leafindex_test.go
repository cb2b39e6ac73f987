package coordinator

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shardproof/shardproof/internal/canon"
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/objstore"
	"github.com/shardproof/shardproof/objstore/faults"
	"github.com/shardproof/shardproof/snapindex"
	"github.com/shardproof/shardproof/stage"
	"github.com/shardproof/shardproof/stage/stagetest"
	"github.com/shardproof/shardproof/tuplehash"
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
		// Three samples differ: at most three buckets of at most three
		// members are read, each through its row groups alone.
		if ex.SnapshotMembersByBucket+ex.SnapshotMembersSkipped != members || ex.SnapshotMembersRead != 0 ||
			ex.SnapshotMembersByBucket == 0 || ex.SnapshotMembersByBucket > 3 || ex.SnapshotBucketsRead < ex.SnapshotMembersByBucket || ex.SnapshotBucketsRead > 3 {
			t.Fatalf("%d reducers: members %d read whole, %d by bucket (%d buckets), %d skipped of %d; want 1 to 3 buckets of 1 to 3 members",
				reducers, ex.SnapshotMembersRead, ex.SnapshotMembersByBucket, ex.SnapshotBucketsRead, ex.SnapshotMembersSkipped, members)
		}
		if a, b := withoutExecution(t, full), withoutExecution(t, r); !bytes.Equal(a, b) {
			t.Fatalf("%d reducers: report with the leaf index differs from a full read's:\n%s\n%s", reducers, a, b)
		}
	}
}

// A member whose footer's bucket run list is damaged (one bit of it
// flipped on the way from the store) cannot be read bucket by bucket:
// the list no longer fits the file, or what its runs give does not hash
// to the indexed leaf, so the reducer maps the whole member, which then
// fails its storage digest, as a full read reports it.
func TestLeafIndexMemberListDamaged(t *testing.T) {
	s := stagetest.Store(t)
	res := stagetest.Synth(t, s, 4000, 8, 11)
	var missing string
	res = stagetest.RewriteShard(t, s, res, 3, func(rows []stage.Row) []stage.Row {
		missing = rows[0].SampleID
		return rows[1:]
	})
	b := tuplehash.Bucket(missing, 12)
	var m manifest.Shard
	for _, c := range res.SnapshotDoc.Members {
		if c.Buckets.Lo <= b && b < c.Buckets.Hi {
			m = c
		}
	}
	data := stagetest.ShardBytes(t, s, m)
	at := bytes.Index(data, []byte(canon.BucketRunsKey))
	if at < 0 {
		t.Fatal("stage wrote no bucket run list")
	}
	at += len(canon.BucketRunsKey)
	for data[at] < '0' || data[at] > '9' {
		at++
	}
	key := m.Digest.BlobKey()
	rotted := &faults.BitFlip{Store: s, Match: func(k string) bool { return k == key }, Offset: int64(at), Bit: 3}
	full := verify(t, rotted, PlanOptions{Root: res.Root, Parallelism: 2, ReadAllMembers: true})
	r := verify(t, rotted, PlanOptions{Root: res.Root, Parallelism: 2})
	if ex := r.Execution; ex.SnapshotMembersRead != 1 {
		t.Fatalf("members %d read whole, %d by bucket, %d skipped; want the damaged one read whole", ex.SnapshotMembersRead, ex.SnapshotMembersByBucket, ex.SnapshotMembersSkipped)
	}
	if r.Counts.DigestFailures != 1 || r.Counts.Missing != 1 {
		t.Fatalf("counts %+v; want the member's digest failure and the missing sample", r.Counts)
	}
	if a, b := withoutExecution(t, full), withoutExecution(t, r); !bytes.Equal(a, b) {
		t.Fatalf("report differs from a full read's:\n%s\n%s", a, b)
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

// memberGone decorates a store: the version of key is gone (Head and Get
// answer not-exist), or, with grow, holds one byte more (replaced out of
// band by other bytes).
type memberGone struct {
	objstore.Store
	key  string
	grow bool
}

func (m *memberGone) Head(ctx context.Context, key string, v objstore.Version) (objstore.ObjectInfo, error) {
	info, err := m.Store.Head(ctx, key, v)
	if key == m.key {
		if !m.grow {
			return objstore.ObjectInfo{}, objstore.ErrNotExist
		}
		info.Size++
	}
	return info, err
}

func (m *memberGone) Get(ctx context.Context, key string, v objstore.Version) (io.ReadCloser, error) {
	if key != m.key {
		return m.Store.Get(ctx, key, v)
	}
	if !m.grow {
		return nil, objstore.ErrNotExist
	}
	rc, err := m.Store.Get(ctx, key, v)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	return io.NopCloser(bytes.NewReader(append(b, 0))), err
}

// A snapshot member whose buckets all match the leaf index is not read,
// but its version must still be in the store with its size: a member
// deleted or replaced out of band is VERSION_MISSING or SIZE_MISMATCH, as
// a full read finds it, and the release is not VERIFIED on a snapshot
// whose files are gone.
func TestLeafIndexSkippedMemberMustExist(t *testing.T) {
	s := stagetest.Store(t)
	res := stagetest.Synth(t, s, 4000, 8, 11)
	m := res.SnapshotDoc.Members[2]
	for _, tc := range []struct {
		grow bool
		code string
	}{{false, "VERSION_MISSING"}, {true, "SIZE_MISMATCH"}} {
		st := &memberGone{Store: s, key: m.Digest.BlobKey(), grow: tc.grow}
		r := verify(t, st, PlanOptions{Root: res.Root, Parallelism: 2})
		if r.Verdict != manifest.Invalid || r.Execution.SnapshotMembersSkipped == 0 {
			t.Fatalf("%s: verdict %s with %d members skipped, want INVALID with skipped members", tc.code, r.Verdict, r.Execution.SnapshotMembersSkipped)
		}
		var found bool
		for _, f := range r.Failures {
			found = found || f.Shard == m.ID && f.Code == tc.code && f.Side == "snapshot"
		}
		if !found || r.Counts.VersionMissing+r.Counts.SizeMismatches != 1 {
			t.Fatalf("%s: failures %+v, counts %+v; want one %s of member %s", tc.code, r.Failures, r.Counts, tc.code, m.ID)
		}
		full := verify(t, st, PlanOptions{Root: res.Root, Parallelism: 2, ReadAllMembers: true})
		if full.Verdict != manifest.Invalid {
			t.Fatalf("%s: a full read says %s", tc.code, full.Verdict)
		}
	}
	// The same store, untouched: VERIFIED, every member skipped.
	if r := verify(t, s, PlanOptions{Root: res.Root, Parallelism: 2}); r.Verdict != manifest.Verified || r.Execution.SnapshotMembersSkipped != len(res.SnapshotDoc.Members) {
		t.Fatalf("untouched: %s, %d of %d members skipped", r.Verdict, r.Execution.SnapshotMembersSkipped, len(res.SnapshotDoc.Members))
	}
}

// A snapshot whose sampleIds are long (hundreds of bytes to KBs, URLs
// or paths with their query strings): its members' pages hold few rows
// and a bucket's runs span pages, and the leaf index still reads only
// the differing buckets' rows, each tuple whole, so the report (minus
// execution) is byte-identical to a full read's.
func TestLeafIndexReadsMemberOfLongSampleIDs(t *testing.T) {
	rows := make([]stage.Row, 2000)
	for i := range rows {
		id := fmt.Sprintf("https://example.invalid/doc/%05d?", i)
		id += strings.Repeat(fmt.Sprintf("q%d=", i%97), (100+(i*37)%4000)/8)
		rows[i] = stage.Row{SampleID: id, SourceID: "web", SourceVersion: 1, Split: "train", Lang: "en", Text: fmt.Sprintf("text %d", i), Tokens: 1}
	}
	path := filepath.Join(t.TempDir(), "long-ids.parquet")
	if err := os.WriteFile(path, stagetest.Encode(t, rows, stage.ParquetOptions{Codec: "snappy"}), 0o644); err != nil {
		t.Fatal(err)
	}
	s := stagetest.Store(t)
	res, err := stage.Stage(context.Background(), s, stage.StageOptions{Inputs: []string{path}, Shards: 4, Seed: 5, TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	clean := verify(t, s, PlanOptions{Root: res.Root, Parallelism: 2, Reducers: 4})
	if clean.Verdict != manifest.Verified || clean.Counts.Records != int64(len(rows)) {
		t.Fatalf("clean release: verdict %s, %d records, failures %+v", clean.Verdict, clean.Counts.Records, clean.Failures)
	}
	res = stagetest.RewriteShard(t, s, res, 2, func(rows []stage.Row) []stage.Row {
		rows[1].Text += "~"
		rows[2].Split = "other"
		return rows[1:] // rows[0] missing
	})
	members := len(res.SnapshotDoc.Members)
	full := verify(t, s, PlanOptions{Root: res.Root, Parallelism: 2, ReadAllMembers: true})
	if c := full.Counts; c.Missing != 1 || c.ContentSubstitution != 1 || c.SplitConflict != 1 || full.Verdict != manifest.Invalid {
		t.Fatalf("full read: counts %+v", c)
	}
	for _, reducers := range []int{1, 4} {
		r := verify(t, s, PlanOptions{Root: res.Root, Parallelism: 2, Reducers: reducers})
		ex := r.Execution
		if ex.SnapshotMembersRead != 0 || ex.SnapshotMembersByBucket == 0 || ex.SnapshotMembersByBucket+ex.SnapshotMembersSkipped != members || ex.SnapshotBucketsRead == 0 || ex.SnapshotBucketsRead > 3 {
			t.Fatalf("%d reducers: members %d read whole, %d by bucket (%d buckets), %d skipped of %d; want 1 to 3 buckets read by bucket",
				reducers, ex.SnapshotMembersRead, ex.SnapshotMembersByBucket, ex.SnapshotBucketsRead, ex.SnapshotMembersSkipped, members)
		}
		if a, b := withoutExecution(t, full), withoutExecution(t, r); !bytes.Equal(a, b) {
			t.Fatalf("%d reducers: report with the leaf index differs from a full read's:\n%s\n%s", reducers, a, b)
		}
	}
}
