package coordinator

import (
	"bytes"
	"context"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/objstore"
	"github.com/shardproof/shardproof/objstore/file"
	"github.com/shardproof/shardproof/shuffle"
	"github.com/shardproof/shardproof/stage/stagetest"
)

// overlayStore serves body as the latest version of key, hides the keys
// hide selects, and accepts every Put without writing it, so a fuzz
// iteration leaves the real store as it was.
type overlayStore struct {
	objstore.Store
	key  string
	body []byte
	hide func(string) bool
	// puts counts the Puts of key: a run again of its task.
	puts atomic.Int32
}

func (o *overlayStore) Get(ctx context.Context, key string, v objstore.Version) (io.ReadCloser, error) {
	if key == o.key && v == "" {
		return io.NopCloser(bytes.NewReader(o.body)), nil
	}
	if o.hide != nil && o.hide(key) {
		return nil, objstore.ErrNotExist
	}
	return o.Store.Get(ctx, key, v)
}

func (o *overlayStore) Put(ctx context.Context, key string, body io.Reader, _ objstore.PutOptions) (objstore.Version, error) {
	io.Copy(io.Discard, body)
	if key == o.key {
		o.puts.Add(1)
	}
	return "vfuzz", nil
}

var (
	commitFuzzOnce sync.Once
	commitFuzzJob  *Job
	commitFuzzKeys []string
	commitFuzzBody [][]byte
)

// commitFuzzSetup runs every task of a small verification once, keeping
// its commit records: 2 map tasks, 2 reducers that read snapshot members
// themselves.
func commitFuzzSetup(t testing.TB) {
	commitFuzzOnce.Do(func() {
		// Shared by every caller in the process, so not tied to the
		// first caller's temp directory.
		dir, err := os.MkdirTemp("", "commitfuzz-")
		if err != nil {
			t.Fatal(err)
		}
		s, err := file.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		res := stagetest.Synth(t, s, 200, 4, 3)
		ctx := context.Background()
		_, pd, err := NewPlan(ctx, s, PlanOptions{Root: res.Root, MapTasks: 2, Reducers: 2, Parallelism: 2, Tool: "fuzz", Nonce: "fuzz", ShuffleCompression: shuffle.None})
		if err != nil {
			t.Fatal(err)
		}
		j, err := Open(ctx, s, pd)
		if err != nil {
			t.Fatal(err)
		}
		for i := range j.Plan.MapTasks {
			if _, err := j.Map(ctx, i, nil); err != nil {
				t.Fatal(err)
			}
		}
		for r := range j.Plan.Reducers {
			if _, err := j.Reduce(ctx, r); err != nil {
				t.Fatal(err)
			}
		}
		for i := range j.Plan.MapTasks {
			commitFuzzKeys = append(commitFuzzKeys, j.mapCommitKey(i))
		}
		for r := range j.Plan.Reducers {
			commitFuzzKeys = append(commitFuzzKeys, j.reduceCommitKey(r))
		}
		for _, k := range commitFuzzKeys {
			rc, err := s.Get(ctx, k, "")
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(rc)
			rc.Close()
			commitFuzzBody = append(commitFuzzBody, b)
		}
		commitFuzzJob = j
	})
}

// FuzzCommitRecord replaces one task commit record (bytes from the
// scratch store, which any task of any engine writes) with arbitrary
// bytes and runs the tasks that read it back: a reduce task and the
// aggregate. They must never panic, and every rejection must carry a
// catalogued code other than INTERNAL.
func FuzzCommitRecord(f *testing.F) {
	commitFuzzSetup(f)
	for i, b := range commitFuzzBody {
		f.Add(uint8(i), b)
		f.Add(uint8(i), bytes.Replace(b, []byte(`"index":`), []byte(`"index":9`), 1))
		f.Add(uint8(i), bytes.Replace(b, []byte(`"code":"`), []byte(`"code":"X`), 1))
		f.Add(uint8(i), bytes.Replace(b, []byte(`"side":1`), []byte(`"side":0`), 1))
		f.Add(uint8(i), bytes.Replace(b, []byte(`"records":`), []byte(`"records":-`), 1))
		f.Add(uint8(i), bytes.Replace(b, []byte(`"Failures":null`), []byte(`"Failures":[{"shard":"x","side":"release","code":"BOGUS","detail":""}]`), 1))
		f.Add(uint8(i), bytes.Replace(b, []byte(`"Failures":null`), []byte(`"Failures":[{"shard":"x","side":"release","code":"DIGEST_MISMATCH","detail":""}]`), 1))
		f.Add(uint8(i), bytes.Replace(b, []byte(`"StoredBytes":`), []byte(`"StoredBytes":-`), 1))
	}
	f.Fuzz(func(t *testing.T, which uint8, b []byte) {
		j0 := commitFuzzJob
		w := int(which) % len(commitFuzzKeys)
		key := commitFuzzKeys[w]
		maps := len(j0.Plan.MapTasks)
		o := &overlayStore{Store: j0.Store, key: key, body: b}
		if w < maps {
			// A map commit: the reducers must read it, so hide theirs.
			o.hide = func(k string) bool { return strings.Contains(k, "/reduce/") }
		}
		j := *j0
		j.Store = o
		// Each input's own runs again, so every one that refuses a
		// reduce record reaches redoReduce, not the bound that earlier
		// inputs spent.
		j.redos = new(redoLocks)
		check := func(what string, err error) {
			if err == nil {
				return
			}
			if c := errcode.Of(err); !errcode.Known(c) || c == errcode.Internal {
				t.Fatalf("%s with %s replaced: uncoded or INTERNAL error: %v\n%q", what, key, err, b)
			}
		}
		r := 0
		if w >= maps {
			r = w - maps
		}
		_, err := j.Reduce(context.Background(), r)
		check("reduce", err)
		if w < maps {
			o.hide = nil
		}
		_, _, err = j.Aggregate(context.Background(), manifest.Execution{Executor: "fuzz"})
		check("aggregate", err)
	})
}
