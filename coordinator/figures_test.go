package coordinator

import (
	"bytes"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/mapper"
	"github.com/shardproof/shardproof/objstore"
)

// forgeRecord stores a new version of the commit record at key, read
// into a T and changed by edit.
func forgeRecord[T any](t *testing.T, j *Job, key string, edit func(*T)) {
	t.Helper()
	v := new(T)
	if found, err := readRecord(t.Context(), j.Store, key, v); !found || err != nil {
		t.Fatalf("%s: found %v, %v", key, found, err)
	}
	edit(v)
	b := must(manifest.Encode(v))
	if _, err := j.Store.Put(t.Context(), key, bytes.NewReader(b), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
}

// forgeReleaseFigure sets figure (storedBytes or logicalBytes) of every
// release shard's result in map task i's record to n(results), results
// the number of them.
func forgeReleaseFigure(t *testing.T, j *Job, i int, figure string, n func(results int64) int64) {
	t.Helper()
	forgeRecord(t, j, j.mapCommitKey(i), func(mc *MapCommit) {
		var rel []*mapper.Result
		for k := range mc.Results {
			if mc.Results[k].Side == mapper.SideRelease {
				rel = append(rel, &mc.Results[k])
			}
		}
		if len(rel) < 2 {
			t.Fatalf("map task %d has %d release results, want at least 2", i, len(rel))
		}
		for _, r := range rel {
			switch figure {
			case "storedBytes":
				r.StoredBytes = n(int64(len(rel)))
			case "logicalBytes":
				r.LogicalBytes = n(int64(len(rel)))
			}
		}
	})
}

// The report sums figures the task commit records declare: the stored
// and logical bytes of the release shards' results of map records, the
// buckets read of snapshot members a reduce record read bucket by
// bucket, and the counts of reduce records' results. Forged figures,
// each one a record may hold, used to wrap those sums past int64: to a
// small number taken for the job's (stored bytes of 2^62+1 in four
// results sum to 4), or to a negative one the report's own check
// refused (BAD_COUNT). A record whose own figures sum past int64 is
// damaged (SHUFFLE_CORRUPT) and its task runs again, as is a reduce
// record whose result holds a shard-level count (a reduce task counts
// members and tuples alone; shards forged near 2^63 took the report's
// past it). Records whose figures fit one by one but not
// together fail the aggregation with SHUFFLE_CORRUPT naming a record
// that went past, and no report is recorded.
func TestForgedFiguresDoNotOverflow(t *testing.T) {
	s, _, res := fileSynth(t)
	ctx := t.Context()
	// What the report of every plan of the root gives but for its
	// execution. Its aggregation stores the snapshot's leaf index too,
	// which the plans below use unless they read every member.
	want := verify(t, s, PlanOptions{Root: res.Root})
	run := func(t *testing.T, o PlanOptions) *Job {
		t.Helper()
		o.Root, o.Tool, o.Nonce = res.Root, "shardproof test", t.Name()
		j, _, _ := committedJob(t, s, o)
		return j
	}
	// ranAgain: the aggregation runs the task of the record at key
	// again and gives the honest report.
	ranAgain := func(t *testing.T, j *Job, key string) *manifest.Report {
		t.Helper()
		rep, _, err := j.Aggregate(ctx, manifest.Execution{Executor: "test"})
		if err != nil {
			t.Fatalf("aggregate over a record whose figures sum past int64: %v", err)
		}
		if got, w := withoutExec(t, rep), withoutExec(t, want); !bytes.Equal(got, w) {
			t.Fatalf("report differs from an honest one but for execution:\n%s\n%s", got, w)
		}
		if n := versions(t, s, key); n != 3 {
			t.Fatalf("%s has %d versions, want 3: its own, the forged one, the run again", key, n)
		}
		return rep
	}
	// refused: the aggregation fails SHUFFLE_CORRUPT naming one of keys
	// and records no report.
	refused := func(t *testing.T, j *Job, keys ...string) {
		t.Helper()
		_, _, err := j.Aggregate(ctx, manifest.Execution{Executor: "test"})
		if errcode.Of(err) != errcode.ShuffleCorrupt || !slices.ContainsFunc(keys, func(k string) bool { return strings.Contains(err.Error(), k) }) {
			t.Fatalf("aggregate over records whose figures together sum past int64: %v; want %s naming one of %v", err, errcode.ShuffleCorrupt, keys)
		}
		if out, err := j.Finished(ctx); out != nil || err != nil {
			t.Fatalf("a report was recorded (%v, %v)", out, err)
		}
	}

	for _, figure := range []string{"storedBytes", "logicalBytes"} {
		t.Run("map/one record/"+figure, func(t *testing.T) {
			// Members read by reducers: the map task holds the four
			// release shards alone.
			j := run(t, PlanOptions{MapTasks: 1, Reducers: 2, ReadAllMembers: true})
			forgeReleaseFigure(t, j, 0, figure, func(int64) int64 { return 1<<62 + 1 })
			ranAgain(t, j, j.mapCommitKey(0))
		})
		t.Run("map/two records/"+figure, func(t *testing.T) {
			j := run(t, PlanOptions{MapTasks: 2, Reducers: 2, ReadAllMembers: true})
			// Each record's figures sum to at most 2^63-1; the two
			// records' to about 2^64.
			for i := range 2 {
				forgeReleaseFigure(t, j, i, figure, func(n int64) int64 { return math.MaxInt64 / n })
			}
			refused(t, j, j.mapCommitKey(0), j.mapCommitKey(1))
		})
	}

	t.Run("reduce/one record/shards", func(t *testing.T) {
		j := run(t, PlanOptions{MapTasks: 2, Reducers: 2})
		forgeRecord(t, j, j.reduceCommitKey(0), func(rc *ReduceCommit) {
			c := &rc.Result.Counts
			c.Shards, c.ShardsVerified = math.MaxInt64, math.MaxInt64
		})
		ranAgain(t, j, j.reduceCommitKey(0))
	})
	for _, count := range []string{"records", "missing"} {
		t.Run("reduce/two records/"+count, func(t *testing.T) {
			j := run(t, PlanOptions{MapTasks: 2, Reducers: 2})
			for r := range 2 {
				forgeRecord(t, j, j.reduceCommitKey(r), func(rc *ReduceCommit) {
					c := &rc.Result.Counts
					switch count {
					case "records":
						c.Records = math.MaxInt64/2 + 1
					case "missing":
						c.Missing = math.MaxInt64/2 + 1
					}
				})
			}
			refused(t, j, j.reduceCommitKey(1))
		})
	}

	// Members skipped (their buckets match the leaf index), forged as
	// read bucket by bucket: the buckets read are summed.
	byBucket := func(t *testing.T, rc *ReduceCommit, n int64) {
		t.Helper()
		for k := range rc.Members {
			m := &rc.Members[k]
			if !m.Skipped {
				t.Fatalf("member result %d was not skipped", k)
			}
			m.Skipped, m.BucketsRead = false, int(n)
		}
	}
	t.Run("reduce/one record/bucketsRead", func(t *testing.T) {
		j := run(t, PlanOptions{MapTasks: 2, Reducers: 2})
		if j.Plan.SnapshotLeaves == nil || len(j.Plan.Reducers[0].Members) < 2 {
			t.Fatalf("plan: leaf index %v, reduce task 0 reads %d members; want the index and 2 members or more", j.Plan.SnapshotLeaves, len(j.Plan.Reducers[0].Members))
		}
		forgeRecord(t, j, j.reduceCommitKey(0), func(rc *ReduceCommit) { byBucket(t, rc, 1<<62+1) })
		if rep := ranAgain(t, j, j.reduceCommitKey(0)); rep.Execution.SnapshotBucketsRead != 0 {
			t.Fatalf("%d snapshot buckets read, want 0: every member was skipped", rep.Execution.SnapshotBucketsRead)
		}
	})
	t.Run("reduce/two records/bucketsRead", func(t *testing.T) {
		j := run(t, PlanOptions{MapTasks: 2, Reducers: 2})
		for r := range 2 {
			members := int64(len(j.Plan.Reducers[r].Members))
			if members == 0 {
				t.Fatalf("reduce task %d reads no member", r)
			}
			forgeRecord(t, j, j.reduceCommitKey(r), func(rc *ReduceCommit) { byBucket(t, rc, math.MaxInt64/members) })
		}
		refused(t, j, j.reduceCommitKey(1))
	})
}
