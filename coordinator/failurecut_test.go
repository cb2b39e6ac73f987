package coordinator

import (
	"bytes"
	"fmt"
	"slices"
	"testing"

	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/objstore"
	"github.com/shardproof/shardproof/stage"
	"github.com/shardproof/shardproof/stage/stagetest"
)

// manyFailing returns a release of 2 sound shards and n failing ones,
// each a copy of shard 0's descriptor under its own id: every third pins
// a version the store never had (VERSION_MISSING), the others a version
// of shard 0's blob truncated by 100 bytes (DIGEST_MISMATCH,
// FOOTER_CORRUPT and SIZE_MISMATCH). None decodes, so the sound shards'
// tuples are the release's and both roots match: the failures are all
// shard-level, 1 or 3 per shard. want are the counts of its report.
func manyFailing(t *testing.T, n int) (objstore.Store, stage.Result, manifest.Counts) {
	t.Helper()
	s := stagetest.Store(t)
	res := stagetest.Synth(t, s, 40, 2, 7)
	want := clean(res)
	d := res.Release.Shards[0]
	truncated := stagetest.PutVersion(t, s, d.Digest.BlobKey(), stagetest.Truncate(stagetest.ShardBytes(t, s, d), 100))
	rel := stagetest.CloneRelease(res.Release)
	for i := range n {
		b := d
		b.ID = fmt.Sprintf("bad-%06d", i)
		if i%3 == 0 {
			b.ObjectVersion = "v999999"
			want.VersionMissing++
		} else {
			b.ObjectVersion = string(truncated)
			want.DigestFailures++
			want.SizeMismatches++
			want.DecodeErrors++
		}
		rel.Shards = append(rel.Shards, b)
	}
	want.Shards += int64(n)
	return s, stagetest.Reissue(t, s, res, rel, false), want
}

// withBound runs f with the report's failure list bounded at count
// failures and size bytes, as if those were manifest's bounds.
func withBound(count, size int, f func()) {
	oldCount, oldSize := listedFailures, listedFailureBytes
	listedFailures, listedFailureBytes = count, size
	defer func() { listedFailures, listedFailureBytes = oldCount, oldSize }()
	f()
}

// A release whose shards nearly all fail gets its INVALID report with
// exact counts, the first failures in the canonical order (as many as the
// bound lets it list) and how many it left out, and the same report
// whatever the plan's shape: the bound cuts the sorted list of them all,
// not what a task happened to see. The bound is lowered to 7 failures
// here, or to the bytes of the first 5, so 30 shards are enough.
func TestReportFailuresCut(t *testing.T) {
	s, res, want := manyFailing(t, 30)
	whole := verify(t, s, PlanOptions{Root: res.Root, MapTasks: 1, Reducers: 1})
	total := want.VersionMissing + 3*want.DigestFailures
	if whole.Counts != want || int64(len(whole.Failures)) != total || whole.FailuresOmitted != 0 {
		t.Fatalf("unbounded: counts %+v, %d failures listed, %d omitted; want %+v, %d, 0", whole.Counts, len(whole.Failures), whole.FailuresOmitted, want, total)
	}
	if !slices.IsSortedFunc(whole.Failures, func(a, b manifest.ShardFailure) int { return manifest.CompareFailures(&a, &b) }) {
		t.Fatal("failures not in the canonical order")
	}
	five := 0
	for _, f := range whole.Failures[:5] {
		b, err := manifest.Encode(f)
		if err != nil {
			t.Fatal(err)
		}
		five += len(b) + 1
	}
	for _, bound := range []struct {
		count, bytes, listed int
	}{
		{7, manifest.MaxReportFailureBytes, 7},
		{manifest.MaxReportFailures, five, 5},
	} {
		var first []byte
		withBound(bound.count, bound.bytes, func() {
			for _, shape := range []struct{ maps, reducers int }{{1, 1}, {4, 8}, {32, 3}, {7, 2}} {
				r := verify(t, s, PlanOptions{Root: res.Root, MapTasks: shape.maps, Reducers: shape.reducers, Parallelism: 2})
				if r.Verdict != manifest.Invalid || r.Counts != want {
					t.Fatalf("bound %+v, %d×%d: verdict %s, counts %+v, want INVALID, %+v", bound, shape.maps, shape.reducers, r.Verdict, r.Counts, want)
				}
				if !slices.Equal(r.Failures, whole.Failures[:bound.listed]) || r.FailuresOmitted != total-int64(bound.listed) {
					t.Fatalf("bound %+v, %d×%d: %d failures listed, %d omitted; want the first %d of the %d, %d omitted:\n%+v",
						bound, shape.maps, shape.reducers, len(r.Failures), r.FailuresOmitted, bound.listed, total, total-int64(bound.listed), r.Failures)
				}
				b := withoutExecution(t, r)
				if first == nil {
					first = b
				} else if !bytes.Equal(first, b) {
					t.Fatalf("bound %+v, %d×%d: report differs from the first shape's:\n%s\n%s", bound, shape.maps, shape.reducers, first, b)
				}
			}
		})
	}
}

// At the real bound: 4,500 failing shards make 10,500 failures, and the
// report lists the first MaxReportFailures of them in the canonical
// order and counts the other 500 in failuresOmitted, with counts of them
// all.
func TestReportFailuresCutAtTheBound(t *testing.T) {
	s, res, want := manyFailing(t, 4500)
	total := want.VersionMissing + 3*want.DigestFailures
	r := verify(t, s, PlanOptions{Root: res.Root, Parallelism: 2})
	if r.Verdict != manifest.Invalid || r.Counts != want {
		t.Fatalf("verdict %s, counts %+v, want INVALID, %+v", r.Verdict, r.Counts, want)
	}
	if len(r.Failures) != manifest.MaxReportFailures || r.FailuresOmitted != total-manifest.MaxReportFailures || total != 10_500 {
		t.Fatalf("%d failures listed, %d omitted; want %d, %d of %d", len(r.Failures), r.FailuresOmitted, manifest.MaxReportFailures, total-manifest.MaxReportFailures, total)
	}
	// Every 3 shards from bad-000000 fail 7 times (VERSION_MISSING, then
	// 3 each): 1,428 threes make 9,996, and bad-004284's VERSION_MISSING
	// and bad-004285's DIGEST_MISMATCH, FOOTER_CORRUPT and SIZE_MISMATCH
	// the 10,000.
	first, last := r.Failures[0], r.Failures[len(r.Failures)-1]
	if first.Shard != "bad-000000" || first.Code != "VERSION_MISSING" || last.Shard != "bad-004285" || last.Code != "SIZE_MISMATCH" {
		t.Fatalf("failures listed from %s %s to %s %s; want bad-000000 VERSION_MISSING to bad-004285 SIZE_MISMATCH", first.Shard, first.Code, last.Shard, last.Code)
	}
}
