package coordinator

import (
	"bytes"
	"context"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/objstore"
	"github.com/shardproof/shardproof/shuffle"
)

// memOverlay keeps every Put in memory and serves it back, over a real
// store it only reads: a fuzz iteration writes nothing to disk.
type memOverlay struct {
	objstore.Store
	mu sync.Mutex
	m  map[string][]byte
}

func (o *memOverlay) lookup(key string) ([]byte, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	b, ok := o.m[key]
	return b, ok
}

func (o *memOverlay) Get(ctx context.Context, key string, v objstore.Version) (io.ReadCloser, error) {
	if b, ok := o.lookup(key); ok {
		if v != "" && v != "m1" {
			return nil, objstore.ErrNotExist
		}
		return io.NopCloser(bytes.NewReader(b)), nil
	}
	return o.Store.Get(ctx, key, v)
}

func (o *memOverlay) Head(ctx context.Context, key string, v objstore.Version) (objstore.ObjectInfo, error) {
	if b, ok := o.lookup(key); ok {
		return objstore.ObjectInfo{Key: key, Version: "m1", Size: int64(len(b)), Modified: time.Unix(0, 0)}, nil
	}
	return o.Store.Head(ctx, key, v)
}

func (o *memOverlay) Put(ctx context.Context, key string, body io.Reader, po objstore.PutOptions) (objstore.Version, error) {
	b, err := io.ReadAll(body)
	if err != nil {
		return "", err
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if po.IfNoneMatch {
		if _, ok := o.m[key]; ok {
			return "", objstore.ErrPreconditionFailed
		}
		if _, err := o.Store.Head(ctx, key, ""); err == nil {
			return "", objstore.ErrPreconditionFailed
		}
	}
	o.m[key] = b
	return "m1", nil
}

var (
	planFuzzOnce  sync.Once
	planFuzzStore objstore.Store
	planFuzzSeeds [][]byte
)

// FuzzPlan opens arbitrary bytes as a verification plan (what `shardproof
// task --plan` reads from the store by digest) against a real release and
// snapshot, and runs every task of a plan Open accepts: nothing may panic,
// and every error has a catalogued code other than INTERNAL.
func FuzzPlan(f *testing.F) {
	commitFuzzSetup(f)
	planFuzzOnce.Do(func() {
		j := commitFuzzJob
		planFuzzStore = j.Store
		ctx := context.Background()
		base := PlanOptions{Root: j.Plan.Root, Tool: "fuzz", Nonce: "fuzz-plan", ShuffleCompression: shuffle.None}
		for _, o := range []PlanOptions{
			{MapTasks: 2, Reducers: 2, Parallelism: 2},
			{MapTasks: 3, Reducers: 3, Parallelism: 2, MapMembers: true},
			{MapTasks: 1, Reducers: 1, Parallelism: 1, ReadAllMembers: true},
		} {
			o.Root, o.Tool, o.Nonce, o.ShuffleCompression = base.Root, base.Tool, base.Nonce, base.ShuffleCompression
			p, _, err := NewPlan(ctx, j.Store, o)
			if err != nil {
				f.Fatal(err)
			}
			b, err := manifest.Encode(p)
			if err != nil {
				f.Fatal(err)
			}
			planFuzzSeeds = append(planFuzzSeeds, b)
		}
	})
	for _, b := range planFuzzSeeds {
		f.Add(b)
		f.Add(bytes.Replace(b, []byte(`"members":[`), []byte(`"members":[3,`), 1))
		f.Add(bytes.Replace(b, []byte(`"hi":`), []byte(`"hi":1`), 1))
		f.Add(bytes.Replace(b, []byte(`"shuffleBatchRows":`), []byte(`"shuffleBatchRows":1`), 1))
		f.Add(bytes.Replace(b, []byte(`"k":12`), []byte(`"k":2`), 1))
		f.Add(bytes.Replace(b, []byte(`"shuffleCompression":"none"`), []byte(`"shuffleCompression":"zstd"`), 1))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		ctx := context.Background()
		o := &memOverlay{Store: planFuzzStore, m: map[string][]byte{}}
		d := manifest.Sum(b)
		o.m[d.BlobKey()] = b
		check := func(what string, err error) bool {
			if err == nil {
				return true
			}
			if c := errcode.Of(err); !errcode.Known(c) || c == errcode.Internal {
				t.Fatalf("%s: uncoded or INTERNAL error: %v\nplan %s", what, err, b)
			}
			return false
		}
		j, err := Open(ctx, o, d)
		if !check("open", err) {
			return
		}
		if len(j.Plan.MapTasks) > 16 || len(j.Plan.Reducers) > 16 {
			return // valid but slow; the shape checks ran in Open
		}
		for i := range j.Plan.MapTasks {
			if _, err := j.Map(ctx, i, nil); !check("map", err) {
				return
			}
		}
		for r := range j.Plan.Reducers {
			if _, err := j.Reduce(ctx, r); !check("reduce", err) {
				return
			}
		}
		_, _, err = j.Aggregate(ctx, manifest.Execution{Executor: "fuzz"})
		check("aggregate", err)
	})
}
