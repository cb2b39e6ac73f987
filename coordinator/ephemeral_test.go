package coordinator

import (
	"context"
	"io"
	"strings"
	"sync"
	"testing"

	"github.com/shardproof/shardproof/objstore"
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
	verify(t, local, PlanOptions{Root: res.Root})
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
	if _, err := VerifyWith(t.Context(), engine, "unused", Options{PlanOptions: PlanOptions{Root: res.Root, Tool: "shardproof test"}}, &inProcess{s: engine}); err != nil {
		t.Fatal(err)
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
