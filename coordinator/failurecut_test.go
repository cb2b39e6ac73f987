package coordinator

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/mapper"
	"github.com/shardproof/shardproof/objstore"
	"github.com/shardproof/shardproof/objstore/faults"
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
// all; the one map task's commit record lists as many.
func TestReportFailuresCutAtTheBound(t *testing.T) {
	s, res, want := manyFailing(t, 4500)
	total := want.VersionMissing + 3*want.DigestFailures
	j, r := runPlan(t, s, PlanOptions{Root: res.Root, MapTasks: 1, Parallelism: 2})
	var mc MapCommit
	if found, err := readRecord(context.Background(), s, j.mapCommitKey(0), &mc); !found || err != nil {
		t.Fatalf("map commit record: found %v, %v", found, err)
	}
	if listed, omitted := listedIn(mc.Results); len(listed) != manifest.MaxReportFailures || len(omitted) != 500 {
		t.Fatalf("the map task's record lists %d failures and omits %d; want %d, 500", len(listed), len(omitted), manifest.MaxReportFailures)
	}
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

// listedIn returns the failures results list, in the canonical order
// (a result keeps the mapper's), and the codes they leave out.
func listedIn(results []mapper.Result) (listed []manifest.ShardFailure, omitted []string) {
	for _, r := range results {
		listed = append(listed, r.Failures...)
		omitted = append(omitted, r.FailuresOmitted...)
	}
	slices.SortFunc(listed, func(a, b manifest.ShardFailure) int { return manifest.CompareFailures(&a, &b) })
	return listed, omitted
}

// runPlan plans o, runs it with the local executor and returns the job
// (its task records are kept) and the report.
func runPlan(t *testing.T, s objstore.Store, o PlanOptions) (*Job, *manifest.Report) {
	t.Helper()
	ctx := context.Background()
	o.Tool = "shardproof test"
	_, pd, err := NewPlan(ctx, s, o)
	if err != nil {
		t.Fatal(err)
	}
	out, err := Run(ctx, s, pd, 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	j, err := Open(ctx, s, pd)
	if err != nil {
		t.Fatal(err)
	}
	return j, out.Report
}

// A map task's commit record lists at most the failures a report lists,
// the first of its own in the canonical order, and keeps the codes of
// the others; a reduce task's record does the same with the snapshot
// members it read. So one task of 50,000 failing files no longer makes a
// record over manifest.MaxDocumentSize, and the report still has exact
// counts and the first failures of all.
func TestCommitRecordFailuresCut(t *testing.T) {
	ctx := context.Background()
	s, res, want := manyFailing(t, 30)
	whole := verify(t, s, PlanOptions{Root: res.Root, MapTasks: 1, Reducers: 1})
	withBound(7, manifest.MaxReportFailureBytes, func() {
		j, r := runPlan(t, s, PlanOptions{Root: res.Root, MapTasks: 1, Reducers: 1})
		var mc MapCommit
		if found, err := readRecord(ctx, s, j.mapCommitKey(0), &mc); !found || err != nil {
			t.Fatalf("map commit record: found %v, %v", found, err)
		}
		listed, omitted := listedIn(mc.Results)
		if !slices.Equal(listed, whole.Failures[:7]) || len(omitted) != len(whole.Failures)-7 {
			t.Fatalf("the map task's record lists %d failures and omits %d; want the first 7 of %d and the rest omitted:\n%+v", len(listed), len(omitted), len(whole.Failures), listed)
		}
		if r.Counts != want || !slices.Equal(r.Failures, whole.Failures[:7]) || r.FailuresOmitted != int64(len(whole.Failures)-7) {
			t.Fatalf("report from cut records: counts %+v, %d failures listed, %d omitted; want %+v, the first 7, %d", r.Counts, len(r.Failures), r.FailuresOmitted, want, len(whole.Failures)-7)
		}
	})

	// Snapshot members a reducer reads: every member rotted at one byte.
	s, res = synth(t)
	keys := map[string]bool{}
	for _, m := range res.SnapshotDoc.Members {
		keys[m.Digest.BlobKey()] = true
	}
	rotted := &faults.BitFlip{Store: s, Match: func(k string) bool { return keys[k] }, Offset: 200, Bit: 3}
	o := PlanOptions{Root: res.Root, Reducers: 1, ReadAllMembers: true}
	_, whole = runPlan(t, rotted, o)
	var members int
	for _, f := range whole.Failures {
		if f.Side == "snapshot" && f.Code != "TUPLE_ROOT_MISMATCH" {
			members++
		}
	}
	if members < 2 || whole.FailuresOmitted != 0 {
		t.Fatalf("rotted members: %d member failures, %d omitted: %+v", members, whole.FailuresOmitted, whole.Failures)
	}
	withBound(1, manifest.MaxReportFailureBytes, func() {
		j, r := runPlan(t, rotted, o)
		var rc ReduceCommit
		if found, err := readRecord(ctx, rotted, j.reduceCommitKey(0), &rc); !found || err != nil {
			t.Fatalf("reduce commit record: found %v, %v", found, err)
		}
		listed, omitted := listedIn(rc.Members)
		if len(listed) != 1 || len(omitted) != members-1 {
			t.Fatalf("the reduce task's record lists %d failures and omits %d; want 1 of %d", len(listed), len(omitted), members)
		}
		if r.Counts != whole.Counts || !slices.Equal(r.Failures, whole.Failures[:1]) || r.FailuresOmitted != int64(len(whole.Failures)-1) {
			t.Fatalf("report from cut records: counts %+v, failures %+v, %d omitted; want %+v, %+v, %d", r.Counts, r.Failures, r.FailuresOmitted, whole.Counts, whole.Failures[:1], len(whole.Failures)-1)
		}
	})
}

// A detail may hold bytes that are not UTF-8 (a SCHEMA_MISMATCH lists the
// names of the file's own fields), which a commit record's JSON turns
// into U+FFFD: the aggregation sorts and measures the failures as the
// records give them back, so a task's cut must too, or a task of many
// such failures keeps fewer than the report lists and the report depends
// on the plan's shape. Here 20 shards name a field with 150 bytes of
// 0xff (and fail 3 times each), and the bound is the bytes of the first
// 10 failures. (150 bytes, not more: a detail over MaxFailureDetail lists
// fewer fields, and this one must list the field whole.)
func TestReportFailuresCutNotUTF8(t *testing.T) {
	const oddShards = 20
	s, res := withExtraColumn(t, strings.Repeat("\xff", 150), "odd", oddShards)

	whole := verify(t, s, PlanOptions{Root: res.Root, MapTasks: 1, Reducers: 1})
	replaced := 0
	for _, f := range whole.Failures {
		if f.Code == "SCHEMA_MISMATCH" && strings.Contains(f.Detail, strings.Repeat("\ufffd", 150)) {
			replaced++
		}
	}
	if whole.Counts.SchemaMismatches != oddShards || replaced != oddShards || whole.FailuresOmitted != 0 {
		t.Fatalf("unbounded: %d schema mismatches, %d with the field's bytes as U+FFFD, %d omitted; want %d, %d, 0", whole.Counts.SchemaMismatches, replaced, whole.FailuresOmitted, oddShards, oddShards)
	}
	ten := 0
	for _, f := range whole.Failures[:10] {
		b, err := manifest.Encode(f)
		if err != nil {
			t.Fatal(err)
		}
		ten += len(b) + 1
	}
	withBound(manifest.MaxReportFailures, ten, func() {
		for _, maps := range []int{1, len(res.Release.Shards)} {
			r := verify(t, s, PlanOptions{Root: res.Root, MapTasks: maps, Reducers: 1})
			if r.Counts != whole.Counts || !slices.Equal(r.Failures, whole.Failures[:10]) || r.FailuresOmitted != int64(len(whole.Failures)-10) {
				t.Fatalf("%d map tasks: counts %+v, %d failures listed, %d omitted; want %+v, the first 10, %d", maps, r.Counts, len(r.Failures), r.FailuresOmitted, whole.Counts, len(whole.Failures)-10)
			}
		}
	})
}
