package coordinator

import (
	"bytes"
	"errors"
	"io/fs"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/objstore"
	"github.com/shardproof/shardproof/objstore/faults"
)

// A verification whose store runs out of space (ENOSPC, as the file store
// reports it: IO carrying the cause) while it writes a shuffle file, the
// report or the plan's report record fails
// with that error, unfinished (so verify prints the --resume command), has
// written nothing at the key it failed on, and records no report; run
// again once there is space, it finishes with the undisturbed report.
func TestNoSpaceThenResume(t *testing.T) {
	s, res := synth(t)
	ctx := t.Context()
	want := verify(t, s, PlanOptions{Root: res.Root, MapTasks: 2, Reducers: 2})
	noSpace := errcode.Wrap(errcode.IO, &fs.PathError{Op: "write", Path: "@tmp/l-0", Err: syscall.ENOSPC}, "file store: put")
	for _, c := range []struct {
		name  string
		match func(key string) bool
	}{
		{"shuffle file", func(k string) bool { return strings.HasSuffix(k, "/map/1/r1.arrow") }},
		{"report", func(k string) bool { return strings.HasPrefix(k, objstore.BlobPrefix) }},
		{"report record", func(k string) bool { return strings.HasPrefix(k, "index/plans/") }},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, pd, err := NewPlan(ctx, s, PlanOptions{Root: res.Root, MapTasks: 2, Reducers: 2, Tool: "shardproof test", Nonce: "no space " + c.name})
			if err != nil {
				t.Fatal(err)
			}
			var (
				mu     sync.Mutex
				failed string // the first key matched: the one failed
			)
			broken := &faults.ErrorOnce{Store: s, Method: faults.Put, Err: noSpace, Match: func(k string) bool {
				mu.Lock()
				defer mu.Unlock()
				if c.match(k) && failed == "" {
					failed = k
				}
				return c.match(k)
			}}
			_, err = Run(ctx, broken, pd, 2, nil)
			var unfinished *UnfinishedError
			if errcode.Of(err) != errcode.IO || !errors.Is(err, syscall.ENOSPC) || !errors.As(err, &unfinished) {
				t.Fatalf("run with no space left at %s: %v (%T), want IO carrying ENOSPC, unfinished", failed, err, err)
			}
			if _, err := s.Head(ctx, failed, ""); !objstore.IsNotExist(err) {
				t.Fatalf("%s after the failed Put: %v", failed, err)
			}
			if _, err := s.Head(ctx, PlanReportKey(pd), ""); !objstore.IsNotExist(err) {
				t.Fatalf("a report recorded by the failed run: %v", err)
			}
			again, err := Run(ctx, s, pd, 2, nil)
			if err != nil {
				t.Fatalf("the run again, with space: %v", err)
			}
			if again.Reused || !bytes.Equal(withoutExecution(t, again.Report), withoutExecution(t, want)) {
				t.Fatalf("the run again: reused %v, or its report differs from an undisturbed run's", again.Reused)
			}
		})
	}
}
