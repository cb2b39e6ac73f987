package coordinator

import (
	"bytes"
	"context"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/objstore"
	"github.com/shardproof/shardproof/shuffle"
)

// cutRecord is a store whose first create of key stores its first 100
// bytes alone: a map task's commit record damaged as it lands.
type cutRecord struct {
	objstore.Store
	key string
}

func (c *cutRecord) Put(ctx context.Context, key string, body io.Reader, o objstore.PutOptions) (objstore.Version, error) {
	if key != c.key || !o.IfNoneMatch {
		return c.Store.Put(ctx, key, body, o)
	}
	b, err := io.ReadAll(body)
	if err != nil {
		return "", err
	}
	return c.Store.Put(ctx, key, bytes.NewReader(b[:100]), objstore.PutOptions{IfNoneMatch: true})
}

// readSignal is a store that closes read once a Get of key found it.
type readSignal struct {
	objstore.Store
	key  string
	once sync.Once
	read chan struct{}
}

func (r *readSignal) Get(ctx context.Context, key string, v objstore.Version) (io.ReadCloser, error) {
	rc, err := r.Store.Get(ctx, key, v)
	if key == r.key && err == nil {
		r.once.Do(func() { close(r.read) })
	}
	return rc, err
}

// damagedMapEngine runs every task in this process, as inProcess does,
// over a store that damages map task 1's commit record as it lands; it
// starts the reduce tasks, which run map task 1 again, once the
// verify's progress has read that record damaged.
type damagedMapEngine struct {
	s    objstore.Store
	seen <-chan struct{}
}

func (e *damagedMapEngine) Name() string { return "in-process" }

func (e *damagedMapEngine) Run(ctx context.Context, ref PlanRef, maps, reduces int) error {
	j, err := Open(ctx, e.s, ref.Plan)
	if err != nil {
		return err
	}
	for i := range maps {
		if _, err := j.Map(ctx, i, nil); err != nil {
			return err
		}
	}
	select {
	case <-e.seen:
	case <-ctx.Done():
		return ctx.Err()
	}
	for r := range reduces {
		if _, err := j.Reduce(ctx, r); err != nil {
			return err
		}
	}
	return nil
}

// An engine's verify counts a map task as done once its commit record
// reads well: a record damaged when the progress reads it (here from
// the moment it lands) is counted as not done, and the progress goes on
// to count the run again that a reduce task makes of the task, its
// inputs once each, ending at the total. (This held before: the
// progress skips a record it cannot read, and reads it again at its
// next look.)
func TestEngineProgressOverDamagedMapRecord(t *testing.T) {
	s, res := synth(t)
	old := ProgressInterval
	ProgressInterval = 5 * time.Millisecond
	defer func() { ProgressInterval = old }()
	_, pd, err := NewPlan(t.Context(), s, PlanOptions{Root: res.Root, MapTasks: 2, Reducers: 2, Tool: "shardproof test",
		ShuffleCompression: shuffle.None, ShuffleChecksum: shuffle.XXH64})
	if err != nil {
		t.Fatal(err)
	}
	key := jobPrefix(pd) + "map/1/commit.json"
	watched := &readSignal{Store: s, key: key, read: make(chan struct{})}
	var (
		got  []Progress
		seen = map[[2]int]bool{}
	)
	out, err := RunWithProgress(t.Context(), watched, PlanRef{Store: "unused", Plan: pd}, &damagedMapEngine{s: &cutRecord{Store: s, key: key}, seen: watched.read}, func(p Progress) {
		got = append(got, p)
		k := [2]int{int(p.Result.Side), p.Result.Index}
		if seen[k] {
			t.Errorf("input %v reported twice", k)
		}
		seen[k] = true
	})
	if err != nil || out.Report.Verdict != manifest.Verified {
		t.Fatalf("verify over a map commit record damaged as it landed: %v", err)
	}
	total := len(res.Release.Shards) + len(res.SnapshotDoc.Members)
	if len(got) != total || got[total-1].Done != total || got[total-1].Total != total {
		t.Fatalf("%d progress calls %+v; want %d ending at %d/%d", len(got), got, total, total, total)
	}
	vs, err := s.(objstore.VersionLister).Versions(t.Context(), key, 10)
	if err != nil || len(vs) != 2 {
		t.Fatalf("map task 1's record: %d versions, %v; want 2, the damaged one and the run again", len(vs), err)
	}
}
