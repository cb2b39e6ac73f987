package coordinator

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/mapper"
	"github.com/shardproof/shardproof/objstore"
	"github.com/shardproof/shardproof/objstore/faults"
	"github.com/shardproof/shardproof/stage"
	"github.com/shardproof/shardproof/stage/stagetest"
)

// A release of hundreds of shards that each fail with a long detail (a
// writer added a column whose name is 150,000 bytes long; a SCHEMA_MISMATCH
// lists the file's fields) still gets its INVALID report. Every failure
// goes into a map commit record and the report, both capped at
// manifest.MaxDocumentSize: with the details whole, these 450 shards made
// a report of about 68 MB, and verify failed with DOCUMENT_TOO_LARGE and
// no report at all.
func TestManyLongFailuresStillReport(t *testing.T) {
	const wideShards = 450
	s, res := withExtraColumn(t, strings.Repeat("n", 150_000), "wide", wideShards)

	r := verify(t, s, PlanOptions{Root: res.Root})
	if r.Verdict != manifest.Invalid || r.Counts.SchemaMismatches != wideShards || r.Counts.ShardsVerified != 2 {
		t.Fatalf("verdict %s, %d schema mismatches, %d shards verified; want INVALID, %d, 2", r.Verdict, r.Counts.SchemaMismatches, r.Counts.ShardsVerified, wideShards)
	}
	for _, f := range r.Failures {
		if len(f.Detail) > mapper.MaxFailureDetail {
			t.Fatalf("%s %s: detail of %d bytes", f.Shard, f.Code, len(f.Detail))
		}
	}
}

// A reduce task and the aggregation read the map commit records several
// at a time; when several are bad, the failure is still the lowest map
// task's, as when they were read one by one: here map task 0's record,
// slow to answer, is missing (TASK_NOT_READY, which `task reduce --wait`
// waits out) while task 3's, answered at once, is damaged.
func TestMapCommitReadsFailInTaskOrder(t *testing.T) {
	s := stagetest.Store(t)
	res := stagetest.Synth(t, s, 200, 6, 7)
	ctx := t.Context()
	_, pd, err := NewPlan(ctx, s, PlanOptions{Root: res.Root, MapTasks: 6, Reducers: 2, MapMembers: true})
	if err != nil {
		t.Fatal(err)
	}
	j, err := Open(ctx, s, pd)
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{1, 2, 4, 5} {
		if _, err := j.Map(ctx, i, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Put(ctx, j.mapCommitKey(3), strings.NewReader("{"), objstore.PutOptions{IfNoneMatch: true}); err != nil {
		t.Fatal(err)
	}
	slow := *j
	slow.Store = &faults.Latency{Store: s, Delay: 300 * time.Millisecond, Match: func(k string) bool { return k == j.mapCommitKey(0) }}
	if _, err := slow.Reduce(ctx, 1); errcode.Of(err) != errcode.TaskNotReady || !strings.Contains(err.Error(), "map task 0 ") {
		t.Fatalf("reduce: %v, want TASK_NOT_READY for map task 0", err)
	}
	if _, _, err := slow.Aggregate(ctx, manifest.Execution{Executor: "test"}); errcode.Of(err) != errcode.TaskNotReady || !strings.Contains(err.Error(), "map task 0 ") {
		t.Fatalf("aggregate: %v, want TASK_NOT_READY for map task 0", err)
	}
}

// withExtraColumn synthesizes a 2-shard release of 40 records and adds
// n shards "<prefix>-000", … that all name one stored file: shard 0's
// rows with an extra float32 column called name, so each is a
// SCHEMA_MISMATCH (and more) whose detail names that column.
func withExtraColumn(t *testing.T, name, prefix string, n int) (objstore.Store, stage.Result) {
	t.Helper()
	s := stagetest.Store(t)
	res := stagetest.Synth(t, s, 40, 2, 7)
	rows := stagetest.ShardRows(t, s, res, 0)
	rec := stage.BuildRows(rows)
	defer rec.Release()
	b := array.NewFloat32Builder(memory.DefaultAllocator)
	for range rows {
		b.Append(0.5)
	}
	col := b.NewArray()
	b.Release()
	defer col.Release()
	fields := append(slices.Clone(rec.Schema().Fields()), arrow.Field{Name: name, Type: arrow.PrimitiveTypes.Float32})
	extra := array.NewRecordBatch(arrow.NewSchema(fields, nil), append(slices.Clone(rec.Columns()), col), rec.NumRows())
	defer extra.Release()
	// One stored file, listed under n shard ids with shard 0's figures.
	data := stagetest.EncodeRecord(t, extra, stage.DefaultSchema(), stage.ParquetOptions{})
	dg, v, _, err := objstore.PutBlob(t.Context(), s, data)
	if err != nil {
		t.Fatal(err)
	}
	d := res.Release.Shards[0]
	d.Digest, d.Size, d.ObjectVersion = dg, int64(len(data)), string(v)
	rel := stagetest.CloneRelease(res.Release)
	for i := range n {
		d.ID = fmt.Sprintf("%s-%03d", prefix, i)
		rel.Shards = append(rel.Shards, d)
	}
	return s, stagetest.Reissue(t, s, res, rel, false)
}
