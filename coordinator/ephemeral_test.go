package coordinator

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/ipc"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/objstore"
	"github.com/shardproof/shardproof/objstore/faults"
	"github.com/shardproof/shardproof/reducer"
	"github.com/shardproof/shardproof/shuffle"
)

// putLog is a store decorator recording each Put's key and whether it
// asked for an ephemeral write.
type putLog struct {
	objstore.Store
	mu   sync.Mutex
	puts map[string]bool
}

func (p *putLog) Put(ctx context.Context, key string, body io.Reader, o objstore.PutOptions) (objstore.Version, error) {
	p.mu.Lock()
	p.puts[key] = o.Ephemeral
	p.mu.Unlock()
	return p.Store.Put(ctx, key, body, o)
}

// The local executor writes its shuffle files without syncing them
// (they are read back at once and checked by digest), and every commit
// record, plan and report durably; tasks run by an engine (here the
// process executor's code path, Job.Map and Job.Reduce) write everything
// durably, since their files may cross machines.
func TestShuffleFilesEphemeralOnlyLocally(t *testing.T) {
	s, res := synth(t)
	local := &putLog{Store: s, puts: map[string]bool{}}
	rep := verify(t, local, PlanOptions{Root: res.Root})
	if j, err := Open(t.Context(), s, rep.Execution.Plan); err != nil {
		t.Fatal(err)
	} else if j.Plan.ShuffleChecksum != shuffle.XXH64 {
		t.Fatalf("local verify's plan checks shuffle files with %q, want xxh64", j.Plan.ShuffleChecksum)
	}
	var shuffle, durable int
	for key, eph := range local.puts {
		isShuffle := strings.HasPrefix(key, JobsPrefix) && strings.HasSuffix(key, ".arrow")
		if eph != isShuffle {
			t.Errorf("local verify put %s with Ephemeral=%v", key, eph)
		}
		if isShuffle {
			shuffle++
		} else {
			durable++
		}
	}
	if shuffle == 0 || durable == 0 {
		t.Fatalf("local verify put %d shuffle files and %d other objects", shuffle, durable)
	}
	engine := &putLog{Store: s, puts: map[string]bool{}}
	out, err := VerifyWith(t.Context(), engine, "unused", Options{PlanOptions: PlanOptions{Root: res.Root, Tool: "shardproof test"}}, &inProcess{s: engine})
	if err != nil {
		t.Fatal(err)
	}
	if j, err := Open(t.Context(), s, out.Report.Execution.Plan); err != nil {
		t.Fatal(err)
	} else if j.Plan.ShuffleChecksum != "" {
		t.Fatalf("an engine's plan checks shuffle files with %q, want sha256 (the default)", j.Plan.ShuffleChecksum)
	}
	n := 0
	for key, eph := range engine.puts {
		if eph {
			t.Errorf("engine task put %s ephemerally", key)
		}
		if strings.HasSuffix(key, ".arrow") {
			n++
		}
	}
	if n == 0 {
		t.Fatal("engine run put no shuffle files")
	}
}

// Shuffle files are checked with the plan's checksum: the map commit
// record holds exactly that one, a file damaged between its map and its
// reduce task fails the reduce task with SHUFFLE_CORRUPT naming it (once
// its map task ran as often as it may: redoMap), and a record holding the
// other checksum is taken for damaged.
func TestShuffleChecksums(t *testing.T) {
	for _, sum := range []shuffle.Checksum{shuffle.XXH64, shuffle.SHA256} {
		t.Run(string(sum), func(t *testing.T) {
			s, res := synth(t)
			ctx := t.Context()
			o := PlanOptions{Root: res.Root, MapTasks: 2, Reducers: 2, Tool: "shardproof test", ShuffleCompression: shuffle.None, ShuffleChecksum: sum}
			j := openPlan(t, s, o)
			pd := j.PlanDigest
			var commits []*MapCommit
			for i := range 2 {
				c, err := j.Map(ctx, i, nil)
				if err != nil {
					t.Fatal(err)
				}
				commits = append(commits, c)
			}
			for _, c := range commits {
				for _, out := range c.Outputs {
					if _, ok := parseXXH64(out.XXH64); ok != (sum == shuffle.XXH64) || out.Digest.IsZero() != (sum == shuffle.XXH64) {
						t.Fatalf("%s plan: output %s has xxh64 %q and digest %s", sum, out.Key, out.XXH64, out.Digest)
					}
				}
			}
			// A bit of the last row's tuple digest (before the 8-byte
			// end-of-stream marker and the buffer's padding).
			out := commits[1].Outputs[1]
			rotted := &faults.BitFlip{Store: s, Match: func(k string) bool { return k == out.Key }, Offset: out.Size - 8 - 16, Bit: 3}
			jr, err := Open(ctx, rotted, pd)
			if err != nil {
				t.Fatal(err)
			}
			_, err = jr.Reduce(ctx, 1)
			if errcode.Of(err) != errcode.ShuffleCorrupt || !strings.Contains(err.Error(), out.Key) || !strings.Contains(err.Error(), string(sum)+":") {
				t.Fatalf("reduce over a damaged shuffle file: %v; want %s naming %s and its %s", err, errcode.ShuffleCorrupt, out.Key, sum)
			}
			if _, err := j.Reduce(ctx, 0); err != nil {
				t.Fatalf("reduce task 0, whose files are intact: %v", err)
			}
			// The commit record of map task 0, rewritten with the other
			// checksum, is refused.
			c := *commits[0]
			c.Outputs = slices.Clone(c.Outputs)
			for k := range c.Outputs {
				if sum == shuffle.XXH64 {
					c.Outputs[k].XXH64, c.Outputs[k].Digest = "", manifest.Digest{1}
				} else {
					c.Outputs[k].XXH64, c.Outputs[k].Digest = "0123456789abcdef", manifest.Digest{}
				}
			}
			b, err := manifest.Encode(&c)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.Put(ctx, j.mapCommitKey(0), bytes.NewReader(b), objstore.PutOptions{}); err != nil {
				t.Fatal(err)
			}
			// That record is damaged, to a reduce task as to Map: its map
			// task runs again (redoMap) and records the plan's checksum.
			if _, err := j.Reduce(ctx, 1); err != nil {
				t.Fatalf("reduce over a map commit record with the other checksum: %v", err)
			}
			var redone MapCommit
			if found, err := readRecord(ctx, s, j.mapCommitKey(0), &redone); !found || err != nil {
				t.Fatalf("map task 0's record: found %v, %v", found, err)
			}
			for r, out := range redone.Outputs {
				if !sameOutput(out, commits[0].Outputs[r]) {
					t.Errorf("map task 0 run again: output %d is %+v, want %+v in another version", r, out, commits[0].Outputs[r])
				}
			}
		})
	}
}

// openPlan plans o in s and opens the job.
func openPlan(t *testing.T, s objstore.Store, o PlanOptions) *Job {
	t.Helper()
	_, pd, err := NewPlan(t.Context(), s, o)
	if err != nil {
		t.Fatal(err)
	}
	j, err := Open(t.Context(), s, pd)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// The plan fixes the shuffle files' rows per record batch: as many as fit
// ReduceBatchBytes for its map tasks, at most 1,024, and a plan's number
// is what every map task writes (a plan from before the field, zero, means
// shuffle.BatchRows). The reduce result does not depend on it.
func TestShuffleBatchRowsFromPlan(t *testing.T) {
	for _, c := range []struct{ m, want int }{{1, 1024}, {31, 1024}, {61, 1024}, {122, 512}, {244, 256}, {5000, 256}} {
		if got := ShuffleBatchRowsFor(c.m); got != c.want {
			t.Errorf("ShuffleBatchRowsFor(%d) = %d, want %d", c.m, got, c.want)
		}
	}
	s, res := synth(t)
	ctx := t.Context()
	o := PlanOptions{Root: res.Root, MapTasks: 2, Reducers: 2, Tool: "shardproof test", Nonce: "batch", ShuffleCompression: shuffle.None}
	var results []*reducer.Result
	for _, rows := range []int{0, 16, 300} {
		plan, _, err := NewPlan(ctx, s, o)
		if err != nil {
			t.Fatal(err)
		}
		if plan.ShuffleBatchRows != ShuffleBatchRowsFor(2) {
			t.Fatalf("plan of 2 map tasks has %d rows per batch, want %d", plan.ShuffleBatchRows, ShuffleBatchRowsFor(2))
		}
		plan.ShuffleBatchRows = rows
		plan.Nonce = fmt.Sprint("batch-", rows)
		j, err := Open(ctx, s, putDoc(t, s, plan))
		if err != nil {
			t.Fatal(err)
		}
		var outs []Output
		for i := range 2 {
			c, err := j.Map(ctx, i, nil)
			if err != nil {
				t.Fatal(err)
			}
			outs = append(outs, c.Outputs...)
		}
		want := rows
		if want == 0 {
			want = shuffle.BatchRows
		}
		full := 0
		for _, out := range outs {
			rc, err := s.Get(ctx, out.Key, out.Version)
			if err != nil {
				t.Fatal(err)
			}
			ir, err := ipc.NewReader(rc)
			if err != nil {
				t.Fatal(err)
			}
			var sizes []int64
			for ir.Next() {
				sizes = append(sizes, ir.RecordBatch().NumRows())
			}
			ir.Release()
			rc.Close()
			for k, n := range sizes {
				if n > int64(want) || k < len(sizes)-1 && n != int64(want) {
					t.Fatalf("plan of %d rows per batch: %s has batches of %v rows", rows, out.Key, sizes)
				}
				if n == int64(want) {
					full++
				}
			}
		}
		if full == 0 {
			t.Fatalf("plan of %d rows per batch: no full batch among the files; the test needs more tuples", rows)
		}
		var r reducer.Result
		for i := range 2 {
			c, err := j.Reduce(ctx, i)
			if err != nil {
				t.Fatal(err)
			}
			if !r.Merge(c.Result) {
				t.Fatalf("reduce task %d: counts past int64", i)
			}
			r.ReleaseLeaves = append(r.ReleaseLeaves, c.Result.ReleaseLeaves...)
		}
		results = append(results, &r)
	}
	for _, r := range results[1:] {
		if r.Counts != results[0].Counts || !bytes.Equal(r.ReleaseLeaves, results[0].ReleaseLeaves) {
			t.Fatal("reduce results differ with the rows per batch")
		}
	}
}
