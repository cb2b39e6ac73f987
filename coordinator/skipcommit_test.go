package coordinator

import (
	"bytes"
	"context"
	"testing"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
)

// A reduce commit's skipped member (one the leaf index spared) may carry
// only what a Head can find, VERSION_MISSING or SIZE_MISMATCH: a commit
// written before the lookup (skipped, no failures) is still accepted, one
// naming a failure only a read could find is SHUFFLE_CORRUPT, and so is a
// failure on a member read bucket by bucket: the aggregation runs the
// reduce task again (redoReduce) and reports what its run gives, the
// report of the record as the task wrote it.
func TestSkippedMemberCommitRecords(t *testing.T) {
	commitFuzzSetup(t)
	j0 := commitFuzzJob
	if j0.Plan.SnapshotLeaves == nil {
		t.Fatal("the plan has no leaf index: no member is skipped")
	}
	maps := len(j0.Plan.MapTasks)
	rc := commitFuzzBody[maps]
	const skipped = `"Failures":null,"Decoded":false,"Skipped":true`
	fail := func(code string) string {
		return `"Failures":[{"shard":"member-00000-of-00004","side":"snapshot","code":"` + code + `","detail":"x"}],"Decoded":false,"Skipped":true`
	}
	for _, c := range []struct {
		name, new string
		verdict   string // "": refused
	}{
		{"previous binary: skipped, no failures", skipped, manifest.Verified},
		{"skipped, VERSION_MISSING", fail("VERSION_MISSING"), manifest.Invalid},
		{"skipped, SIZE_MISMATCH", fail("SIZE_MISMATCH"), manifest.Invalid},
		{"skipped, DIGEST_MISMATCH", fail("DIGEST_MISMATCH"), ""},
		{"skipped, LOGICAL_MISMATCH", fail("LOGICAL_MISMATCH"), ""},
		{"read by bucket, VERSION_MISSING", `"Failures":[{"shard":"member-00000-of-00004","side":"snapshot","code":"VERSION_MISSING","detail":"x"}],"Decoded":false,"BucketsRead":1`, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			forged := bytes.Replace(rc, []byte(skipped), []byte(c.new), 1)
			if !bytes.Contains(rc, []byte(skipped)) {
				t.Fatalf("%q not in the record %.300s", skipped, rc)
			}
			j := *j0
			// Runs again counted afresh: the cases shared the count of
			// one process, and the third refused met maxRuns.
			j.redos = new(redoLocks)
			ov := &overlayStore{Store: j0.Store, key: commitFuzzKeys[maps], body: forged}
			j.Store = ov
			rep, _, err := j.Aggregate(context.Background(), manifest.Execution{Executor: "test"})
			if c.verdict == "" {
				// Refused (SHUFFLE_CORRUPT): the task ran again, and its
				// run found every member as the task first did.
				if err != nil || ov.puts.Load() != 1 || rep.Verdict != manifest.Verified {
					t.Fatalf("aggregate: %v, report %v after %d runs again, want the record refused and the task's run again VERIFIED", err, rep, ov.puts.Load())
				}
				if errcode.Of(j.checkReduceCommit(0, decodeReduce(t, forged))) != errcode.ShuffleCorrupt {
					t.Fatal("the record is not SHUFFLE_CORRUPT")
				}
				// The report is the one of the record as the task wrote
				// it, nothing of the forgery in it.
				j.Store = &overlayStore{Store: j0.Store, key: commitFuzzKeys[maps], body: rc}
				want, _, werr := j.Aggregate(context.Background(), manifest.Execution{Executor: "test"})
				if werr != nil || !bytes.Equal(withoutExec(t, rep), withoutExec(t, want)) {
					t.Fatalf("report\n%s\nwant (%v)\n%s", withoutExec(t, rep), werr, withoutExec(t, want))
				}
				return
			}
			if err != nil || rep.Verdict != c.verdict || ov.puts.Load() != 0 {
				t.Fatalf("aggregate: %v, verdict %v after %d runs again, want %s", err, rep, ov.puts.Load(), c.verdict)
			}
		})
	}
}

// decodeReduce decodes a reduce commit record.
func decodeReduce(t *testing.T, b []byte) *ReduceCommit {
	t.Helper()
	var rc ReduceCommit
	if err := manifest.Decode(b, &rc); err != nil {
		t.Fatal(err)
	}
	return &rc
}
