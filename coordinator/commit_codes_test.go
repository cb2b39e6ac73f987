package coordinator

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/objstore"
	"github.com/shardproof/shardproof/stage"
	"github.com/shardproof/shardproof/stage/stagetest"
)

// Commit records no task writes are SHUFFLE_CORRUPT when aggregated,
// and the aggregation runs their task again (redoMap, redoReduce) and
// reports what the run gives: a failure code without a counter (was
// INTERNAL), negative figures (were summed into a VERIFIED report with
// wrong totals), an example class no report keeps (was BAD_DOCUMENT
// from the report's encoding), a stray ']' or '}' after the record (was
// aggregated as the record before it), a key given twice or in another
// case (was aggregated as encoding/json reads it, the last of the two or
// the field of that name in any case, where a reader keeping the first
// finds a failure or no outputs). A damaged map record failed the
// aggregation with SHUFFLE_CORRUPT, which only a resume mended. A reduce
// task, which decodes only its own output of a map commit record,
// refuses those of them no reader may take (mapRecordRefused).
func TestForgedCommitRecords(t *testing.T) {
	commitFuzzSetup(t)
	j0 := commitFuzzJob
	maps := len(j0.Plan.MapTasks)
	mc, rc := commitFuzzBody[0], commitFuzzBody[maps]
	for _, c := range []struct {
		name     string
		w        int
		old, new string
	}{
		{"map: unknown failure code", 0, `"Failures":null`, `"Failures":[{"shard":"x","side":"release","code":"BOGUS","detail":""}]`},
		{"map: negative StoredBytes", 0, `"StoredBytes":`, `"StoredBytes":-`},
		{"map: negative Records", 0, `"Records":`, `"Records":-`},
		{"map: negative Tokens", 0, `"Tokens":`, `"Tokens":-`},
		{"reduce: unknown example class", maps, `"examples":{}`, `"examples":{"NOT_A_CLASS":["a"]}`},
		{"reduce: negative count", maps, `"records":`, `"records":-`},
		// A commit record with a stray ']' or '}' after it is no record.
		{"map: trailing bracket", 0, "", "]"},
		{"reduce: trailing brace", maps, "", "}"},
		// The first "Failures" lists a digest mismatch, the last none.
		{"map: failures twice", 0, `"Failures":null`, `"Failures":[{"shard":"x","side":"release","code":"DIGEST_MISMATCH","detail":""}],"Failures":null`},
		{"map: outputs twice", 0, `"outputs":`, `"outputs":null,"outputs":`},
		{"map: outputs in another case", 0, `"outputs":`, `"Outputs":`},
		{"map: failures in another case", 0, `"Failures":null`, `"failures":null`},
		{"map: output key in another case", 0, `"digest":`, `"Digest":`},
		{"map: result key twice", 0, `"Decoded":`, `"Decoded":false,"Decoded":`},
		{"map: unknown key in a result", 0, `"Decoded":`, `"decoded":false,"Decoded":`},
		{"map: result not UTF-8", 0, `"ShardID":"`, "\"ShardID\":\"\xff"},
		{"map: result digest in upper case", 0, `"LogicalDigest":"sha256:`, `"LogicalDigest":"SHA256:`},
		// A value the whole record's decoding refuses, in an output
		// neither the aggregation nor reduce task 1 decodes.
		{"map: output digest not hex", 0, `"digest":"sha256:`, `"digest":"sha256:z`},
		{"map: output version not a string", 0, `"version":"v1"`, `"version":1`},
		// Each reducer's output names the other's file.
		{"map: another reducer's output", 0, `r0.arrow`, `r1.arrow`},
		{"map: a result too many", 0, `"results":[`, `"results":[{"Side":0,"Index":0,"ShardID":"x","Records":0,"Tokens":0,"LogicalDigest":"sha256:0000000000000000000000000000000000000000000000000000000000000000","MemberSetDigest":"sha256:0000000000000000000000000000000000000000000000000000000000000000","StorageDigest":"sha256:0000000000000000000000000000000000000000000000000000000000000000","StoredBytes":0,"LogicalBytes":0,"Failures":null,"Decoded":false},`},
		// The first "counts" has a member missing, the last none.
		{"reduce: counts twice", maps, `"counts":{`, `"counts":{"missing":1},"counts":{`},
		{"reduce: counts in another case", maps, `"counts":`, `"Counts":`},
		{"reduce: example not UTF-8", maps, `"examples":{}`, "\"examples\":{\"MISSING_MEMBER\":[\"\xff\"]}"},
		// The shuffle files a reduce task read, whose sizes the report
		// sums: one of each map task's.
		{"reduce: an input too many", maps, `"inputs":[{`, `"inputs":[{"key":"x","version":"v1","digest":"sha256:0000000000000000000000000000000000000000000000000000000000000000","size":1,"rows":1},{`},
		{"reduce: negative input size", maps, `"size":`, `"size":-`},
	} {
		t.Run(c.name, func(t *testing.T) {
			body := mc
			if c.w != 0 {
				body = rc
			}
			forged := bytes.Replace(body, []byte(c.old), []byte(c.new), 1)
			if c.old == "" {
				forged = append(bytes.Clone(bytes.TrimRight(body, "\n")), c.new...)
			}
			if bytes.Equal(forged, body) {
				t.Fatalf("%q not in the record %.300s", c.old, body)
			}
			j := *j0
			// Runs again counted afresh: the cases shared the count of
			// one process, and those after the second met maxRuns.
			j.redos = new(redoLocks)
			ov := &overlayStore{Store: j0.Store, key: commitFuzzKeys[c.w], body: forged}
			j.Store = ov
			rep, _, err := j.Aggregate(context.Background(), manifest.Execution{Executor: "test"})
			// The report of the record as its task wrote it.
			j.Store = &overlayStore{Store: j0.Store, key: commitFuzzKeys[c.w], body: body}
			want, _, werr := j.Aggregate(context.Background(), manifest.Execution{Executor: "test"})
			if werr != nil {
				t.Fatal(werr)
			}
			if aggregationTakes[c.name] {
				// The aggregation decodes the results of a map commit
				// record, not its outputs (readMapResults).
				if err != nil || rep.Verdict != want.Verdict || rep.Counts != want.Counts || rep.Execution.ShuffleBytes != want.Execution.ShuffleBytes || ov.puts.Load() != 0 {
					t.Fatalf("aggregate: %v (report %+v) after %d runs again, want %+v", err, rep, ov.puts.Load(), want)
				}
			} else {
				// A record refused has its task run again (redoMap,
				// redoReduce): the aggregation gives the report of the
				// record the task wrote, the run again's record put in
				// its place (this store keeps the forged one).
				if err != nil || !bytes.Equal(withoutExec(t, rep), withoutExec(t, want)) || rep.Execution.ShuffleBytes != want.Execution.ShuffleBytes {
					t.Fatalf("aggregate: %v (report %+v), want %+v", err, rep, want)
				}
				if ov.puts.Load() != 1 {
					t.Fatalf("the aggregation stored %s %d times, want once: the record was taken", commitFuzzKeys[c.w], ov.puts.Load())
				}
			}
			// A reduce task decodes only its own output of a map commit
			// record, but holds the whole record to the same rules.
			refused, ok := mapRecordRefused[c.name]
			if c.w != 0 || !ok {
				return
			}
			if refused == nil {
				refused = []int{0, 1}
			}
			j.Store = &overlayStore{Store: j0.Store, key: commitFuzzKeys[c.w], body: forged, hide: func(k string) bool { return strings.Contains(k, "/reduce/") }}
			for _, r := range refused {
				if _, err := j.Reduce(context.Background(), r); errcode.Of(err) != errcode.ShuffleCorrupt {
					t.Fatalf("reduce task %d: %v, want SHUFFLE_CORRUPT", r, err)
				}
			}
		})
	}
}

// mapRecordRefused names the cases of TestForgedCommitRecords whose map
// commit record a reduce task refuses too, and which of the two (nil:
// both): a record no reader may take, whatever part of it it uses, or
// one whose output for that reducer is wrong.
var mapRecordRefused = map[string][]int{
	"map: trailing bracket":            nil,
	"map: failures twice":              nil,
	"map: outputs twice":               nil,
	"map: outputs in another case":     nil,
	"map: failures in another case":    nil,
	"map: output key in another case":  nil,
	"map: result key twice":            nil,
	"map: unknown key in a result":     nil,
	"map: result not UTF-8":            nil,
	"map: result digest in upper case": nil,
	"map: a result too many":           nil,
	"map: output digest not hex":       nil,
	"map: output version not a string": nil,
	"map: another reducer's output":    {0},
}

// aggregationTakes names the cases of TestForgedCommitRecords whose map
// commit record the aggregation takes: one whose outputs alone are
// wrong, which the aggregation does not decode, the reduce task of each
// refusing it (mapRecordRefused).
var aggregationTakes = map[string]bool{
	"map: another reducer's output": true,
}

// A shard whose sampleIds are not UTF-8 (a Parquet utf8 column nothing
// checked) fails with DECODE_ERROR and the release is INVALID with a
// report that decodes; two such IDs in one reducer's range made verify
// fail with SHUFFLE_CORRUPT and no verdict.
func TestNonUTF8SampleIDs(t *testing.T) {
	s, res := synth(t)
	res = stagetest.RewriteShard(t, s, res, 1, func(rows []stage.Row) []stage.Row {
		rows[0].SampleID = "x\U0001F600"
		rows[1].SampleID = "x\xff"
		rows[2].SampleID = "x\xfe"
		return rows
	})
	out, err := Verify(context.Background(), s, Options{PlanOptions: PlanOptions{Root: res.Root, Tool: "test", Reducers: 1}})
	if err != nil {
		t.Fatalf("verify: %v", err)
	}
	r := out.Report
	if r.Verdict != manifest.Invalid || r.Counts.DecodeErrors != 1 {
		t.Fatalf("verdict %s with %d decode errors, want INVALID with 1", r.Verdict, r.Counts.DecodeErrors)
	}
	found := false
	for _, f := range r.Failures {
		if f.Code == string(errcode.DecodeError) && strings.Contains(f.Detail, "sampleId is not valid UTF-8") {
			found = true
		}
	}
	if !found {
		t.Errorf("no DECODE_ERROR naming the sampleId column in %+v", r.Failures)
	}
	b, _, err := objstore.ReadBlob(context.Background(), s, out.ReportDigest, manifest.MaxDocumentSize)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := manifest.DecodeReport(b); err != nil {
		t.Errorf("the stored report does not decode: %v", err)
	}
}
