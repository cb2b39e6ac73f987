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
// failure on a member read bucket by bucket.
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
			j.Store = &overlayStore{Store: j0.Store, key: commitFuzzKeys[maps], body: forged}
			rep, _, err := j.Aggregate(context.Background(), manifest.Execution{Executor: "test"})
			if c.verdict == "" {
				if errcode.Of(err) != errcode.ShuffleCorrupt {
					t.Fatalf("aggregate: %v, want SHUFFLE_CORRUPT", err)
				}
				return
			}
			if err != nil || rep.Verdict != c.verdict {
				t.Fatalf("aggregate: %v, verdict %v, want %s", err, rep, c.verdict)
			}
		})
	}
}
