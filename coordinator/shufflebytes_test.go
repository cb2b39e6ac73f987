package coordinator

import (
	"bytes"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/objstore"
	"github.com/shardproof/shardproof/shuffle"
)

// forgeSizes stores a new version of reduce task r's commit record
// whose every input (or every merged file, merged) declares size.
func forgeSizes(t *testing.T, j *Job, r int, merged bool, size int64) {
	t.Helper()
	var rc ReduceCommit
	if found, err := readRecord(t.Context(), j.Store, j.reduceCommitKey(r), &rc); !found || err != nil {
		t.Fatalf("reduce task %d's record: found %v, %v", r, found, err)
	}
	files := rc.Inputs
	if merged {
		files = rc.Merged
	}
	for k := range files {
		files[k].Size = size
	}
	b := must(manifest.Encode(&rc))
	if _, err := j.Store.Put(t.Context(), j.reduceCommitKey(r), bytes.NewReader(b), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
}

// The report's execution.shuffleBytes sums the sizes the reduce commit
// records declare for their inputs, and mergedBytes those of their
// merged files. Forged sizes, each a size a record may hold, used to
// wrap those sums past int64: to a small number, taken for the job's,
// or to a negative one, which the report's own check refused
// (BAD_COUNT). Sizes of one record that sum past int64 make that record
// damaged (SHUFFLE_CORRUPT, as a negative size does): the aggregation
// runs the reduce task again, whose record gives the true sums. Records
// whose sizes fit one by one but not together are SHUFFLE_CORRUPT
// naming the record that went past, and no report is recorded.
func TestForgedShuffleSizesDoNotOverflow(t *testing.T) {
	s, _, res := fileSynth(t)
	ctx := t.Context()
	// Four map tasks at fan-in 2: four inputs and two merged files a
	// reduce task.
	o := PlanOptions{Root: res.Root, MapTasks: 4, Reducers: 2, ReduceFanIn: 2, Tool: "shardproof test", ShuffleCompression: shuffle.None, ShuffleChecksum: shuffle.XXH64}
	for _, merged := range []bool{false, true} {
		files := 4
		if merged {
			files = 2
		}
		t.Run(fmt.Sprintf("merged=%v/one record", merged), func(t *testing.T) {
			o := o
			o.Nonce = t.Name()
			j, _ := mappedJob(t, s, o)
			var shuffled, mergedBytes int64
			for r := range j.Plan.Reducers {
				rc := must(j.Reduce(ctx, r))
				for _, in := range rc.Inputs {
					shuffled += in.Size
				}
				for _, m := range rc.Merged {
					mergedBytes += m.Size
				}
			}
			// Sizes of 2^62+1 bytes: four inputs sum to 2^64+4, which
			// wraps to 4, two merged files to 2^63+2, which wraps to
			// a negative number.
			forgeSizes(t, j, 0, merged, 1<<62+1)
			rep, _, err := j.Aggregate(ctx, manifest.Execution{Executor: "test"})
			if err != nil {
				t.Fatalf("aggregate over a record whose sizes sum past int64: %v", err)
			}
			if ex := rep.Execution; ex.ShuffleBytes != shuffled || ex.MergedBytes != mergedBytes {
				t.Fatalf("shuffleBytes %d, mergedBytes %d; want %d and %d, what the tasks wrote", ex.ShuffleBytes, ex.MergedBytes, shuffled, mergedBytes)
			}
			if n := versions(t, s, j.reduceCommitKey(0)); n != 3 {
				t.Fatalf("reduce task 0's record has %d versions, want 3: its own, the forged one, the run again", n)
			}
		})

		t.Run(fmt.Sprintf("merged=%v/two records", merged), func(t *testing.T) {
			o := o
			o.Nonce = t.Name()
			j, _, _ := committedJob(t, s, o)
			// Each record's sizes sum to at most 2^63-1, which fits;
			// the two records' to about 2^64, which wraps.
			for r := range j.Plan.Reducers {
				forgeSizes(t, j, r, merged, math.MaxInt64/int64(files))
			}
			_, _, err := j.Aggregate(ctx, manifest.Execution{Executor: "test"})
			if errcode.Of(err) != errcode.ShuffleCorrupt || !strings.Contains(err.Error(), j.reduceCommitKey(1)) {
				t.Fatalf("aggregate over records whose sizes together sum past int64: %v; want %s naming %s", err, errcode.ShuffleCorrupt, j.reduceCommitKey(1))
			}
			if out, err := j.Finished(ctx); out != nil || err != nil {
				t.Fatalf("a report was recorded (%v, %v)", out, err)
			}
		})
	}
}
