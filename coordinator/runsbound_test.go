package coordinator

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/objstore"
	"github.com/shardproof/shardproof/objstore/file"
	"github.com/shardproof/shardproof/shuffle"
)

// runRace is one round of two processes running one map task again at
// once: each counts the runs before either records (both reach the
// task's first shuffle file, arrived), and the first records its run
// before the second reads the record once more (recorded), so the
// second uses the first one's record and records none.
type runRace struct {
	arrived  sync.WaitGroup
	recorded chan struct{}
	once     sync.Once
}

// record lets the second process read the record once more.
func (r *runRace) record() { r.once.Do(func() { close(r.recorded) }) }

func newRunRace() *runRace {
	r := &runRace{recorded: make(chan struct{})}
	r.arrived.Add(2)
	return r
}

// racingProcess is the file store as one of the two processes reaches
// it: a decorator of Put and Get, counting the runs of the map task
// whose first shuffle file is out and commit record key is commit.
type racingProcess struct {
	*file.Store
	out, commit string
	second      bool
	race        **runRace
	runs        *atomic.Int32
	running     atomic.Bool
}

func (p *racingProcess) Put(ctx context.Context, key string, body io.Reader, o objstore.PutOptions) (objstore.Version, error) {
	race := *p.race
	if key == p.out && !o.IfNoneMatch {
		p.runs.Add(1)
		race.arrived.Done()
		race.arrived.Wait()
		p.running.Store(true)
	}
	v, err := p.Store.Put(ctx, key, body, o)
	if key == p.commit && !p.second {
		race.record()
	}
	return v, err
}

func (p *racingProcess) Get(ctx context.Context, key string, v objstore.Version) (io.ReadCloser, error) {
	if key == p.commit && p.second && p.running.Load() {
		<-(*p.race).recorded
	}
	return p.Store.Get(ctx, key, v)
}

// The runs of one task are counted by its commit record's versions and
// by each process's own runs again; neither counts a run another
// process has under way. Processes that find the task damaged at once
// each run it again, and one that uses another's record meanwhile
// records none: its run counts only in itself. So P processes running a
// task again side by side may run it up to 1 + P*(maxRuns-1) times in
// all (each makes at most maxRuns-1 runs again, and none starts one
// once the record has maxRuns versions), no more: here two processes,
// twice at once over a record damaged again, run it 5 times, writing 3
// versions, and a third process, or either of them, then runs it no
// more. (One process alone, its reducers sharing redoLocks, runs it at
// most maxRuns times: TestLostMapTaskRunsAgainOnce.)
func TestConcurrentRunsAgainBound(t *testing.T) {
	s, dir, res := fileSynth(t)
	ctx := t.Context()
	j, _ := mappedJob(t, s, uncompressedPlan(res.Root, 2, 2, shuffle.XXH64))
	key := j.mapCommitKey(1)
	cut := func() {
		t.Helper()
		rewriteLatest(t, s, dir, key, func(b []byte) []byte { return b[:100] })
	}
	var (
		race *runRace
		runs atomic.Int32
	)
	var (
		procs  [2]*Job
		stores [2]*racingProcess
	)
	for k := range procs {
		stores[k] = &racingProcess{Store: s, out: j.mapOutputKey(1, 0), commit: key, second: k == 1, race: &race, runs: &runs}
		procs[k] = must(Open(ctx, stores[k], j.PlanDigest))
	}
	const p = len(procs)
	for round := 1; round < maxRuns; round++ {
		cut()
		race = newRunRace()
		for _, ps := range stores {
			ps.running.Store(false)
		}
		var (
			wg   sync.WaitGroup
			errs [p]error
		)
		for k, proc := range procs {
			wg.Go(func() {
				_, errs[k] = proc.Map(ctx, 1, nil)
				if k == 0 {
					// Had the first failed before recording, the
					// second reads the record all the same.
					race.record()
				}
			})
		}
		wg.Wait()
		for k, err := range errs {
			if err != nil {
				t.Fatalf("round %d: process %d running map task 1 again: %v", round, k, err)
			}
		}
	}
	if n, bound := 1+int(runs.Load()), 1+p*(maxRuns-1); n != bound {
		t.Fatalf("map task 1 ran %d times (its first run and runs again); want %d, the bound for %d processes", n, bound, p)
	}
	if n := versions(t, s, key); n != maxRuns {
		t.Fatalf("map task 1's record has %d versions, want %d", n, maxRuns)
	}

	cut()
	for k, proc := range append(procs[:], must(Open(ctx, s, j.PlanDigest))) {
		_, err := proc.Map(ctx, 1, nil)
		if errcode.Of(err) != errcode.ShuffleCorrupt || !strings.Contains(err.Error(), fmt.Sprintf("run %d times", maxRuns)) {
			t.Fatalf("process %d, the record damaged once it has %d versions: %v; want %s", k, maxRuns, err, errcode.ShuffleCorrupt)
		}
	}
	if n := 1 + int(runs.Load()); n != 1+p*(maxRuns-1) {
		t.Fatalf("map task 1 ran %d times: past the bound", n)
	}
}
