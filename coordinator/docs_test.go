package coordinator

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/objstore"
	"github.com/shardproof/shardproof/objstore/faults"
	"github.com/shardproof/shardproof/objstore/file"
)

// A rerun writing the same bytes reuses the committed version; a rerun
// writing other bytes is NONDETERMINISM and leaves the committed bytes.
func TestPutExact(t *testing.T) {
	ctx := context.Background()
	s, err := file.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	v1, err := putExact(ctx, s, "jobs/x/map/0/r0.arrow", []byte("output"))
	if err != nil {
		t.Fatal(err)
	}
	v2, err := putExact(ctx, s, "jobs/x/map/0/r0.arrow", []byte("output"))
	if err != nil || v2 != v1 {
		t.Fatalf("identical rerun: version %q (first %q), err %v", v2, v1, err)
	}
	_, err = putExact(ctx, s, "jobs/x/map/0/r0.arrow", []byte("outpuT"))
	if errcode.Of(err) != errcode.Nondeterminism {
		t.Fatalf("different rerun: err = %v", err)
	}
	var got struct{ A int }
	if found, err := readRecord(ctx, s, "jobs/x/none.json", &got); found || err != nil {
		t.Fatalf("absent record: found=%v err=%v", found, err)
	}
	if _, err := putExact(ctx, s, "jobs/x/c.json", []byte(`{"A":1,"B":2}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := readRecord(ctx, s, "jobs/x/c.json", &got); errcode.Of(err) != errcode.ShuffleCorrupt {
		t.Fatalf("record with unknown field: err = %v", err)
	}
}

// A rerun whose read of the committed output fails (a lost connection,
// Ctrl-C) fails with that read's code: it learnt nothing of the bytes, so
// it is no NONDETERMINISM (exit 1, "no rerun of this task can commit").
func TestPutExactReadFailureIsNotNondeterminism(t *testing.T) {
	ctx := context.Background()
	fs, err := file.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	if _, err := putExact(ctx, fs, "jobs/x/map/0/r0.arrow", []byte("output")); err != nil {
		t.Fatal(err)
	}
	for _, c := range []errcode.Code{errcode.StoreUnavailable, errcode.Canceled} {
		s := &faults.BodyError{Store: fs, Err: errcode.New(c, "injected")}
		if _, err := putExact(ctx, s, "jobs/x/map/0/r0.arrow", []byte("output")); errcode.Of(err) != c {
			t.Fatalf("rerun whose read fails with %s: %s (%v)", c, errcode.Of(err), err)
		}
	}
	s := &faults.BodyError{Store: fs, Err: errors.New("bare")}
	if _, err := putExact(ctx, s, "jobs/x/map/0/r0.arrow", []byte("output")); errcode.Of(err) != errcode.IO {
		t.Fatalf("rerun whose read fails without a code: %s (%v), want IO", errcode.Of(err), err)
	}
}

func TestRunAllStopsAtFirstError(t *testing.T) {
	boom := errors.New("boom")
	var ran atomic.Int64
	err := runAll(context.Background(), 1000, 4, func(ctx context.Context, i int) error {
		ran.Add(1)
		if i == 3 {
			return boom
		}
		return ctx.Err()
	})
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v", err)
	}
	if ran.Load() == 1000 {
		t.Fatal("every task ran after the failure")
	}
	ran.Store(0)
	if err := runAll(context.Background(), 10, 3, func(context.Context, int) error { ran.Add(1); return nil }); err != nil || ran.Load() != 10 {
		t.Fatalf("ran %d, err %v", ran.Load(), err)
	}
}

// A record type the strict scan does not model is INTERNAL, a fault of
// the build, not BAD_DOCUMENT or SHUFFLE_CORRUPT, which would read as a
// corrupt record and have its task run again; a record that is corrupt is
// still SHUFFLE_CORRUPT.
func TestDecodeInternalIsNotCorrupt(t *testing.T) {
	ctx := context.Background()
	s, err := file.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const key = "jobs/x/map/0/commit.json"
	if _, err := s.Put(ctx, key, strings.NewReader(`{"at":"2024-01-01T00:00:00Z"}`), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	var unmodelled struct {
		At time.Time `json:"at"`
	}
	if err := decodeStrict([]byte(`{"at":"2024-01-01T00:00:00Z"}`), &unmodelled); errcode.Of(err) != errcode.Internal {
		t.Errorf("decodeStrict into a type the scan does not model: %v, want INTERNAL", err)
	}
	if _, err := readRecord(ctx, s, key, &unmodelled); errcode.Of(err) != errcode.Internal {
		t.Errorf("readRecord into a type the scan does not model: %v, want INTERNAL", err)
	}
	var unmodelledList struct {
		At []time.Time `json:"at"`
	}
	picks := []manifest.Pick{{Field: "at", Index: 0}}
	if err := decodeRecord([]byte(`{"at":["2024-01-01T00:00:00Z"]}`), key, &unmodelledList, picks); errcode.Of(err) != errcode.Internal {
		t.Errorf("decodeRecord of picks into a type the scan does not model: %v, want INTERNAL", err)
	}
	if err := decodeRecord([]byte(`{"at":[],"at":[]}`), key, &struct {
		At []string `json:"at"`
	}{}, picks); errcode.Of(err) != errcode.ShuffleCorrupt {
		t.Errorf("decodeRecord of picks of a record with a key twice: %v, want SHUFFLE_CORRUPT", err)
	}
	var modelled struct {
		At string `json:"at"`
	}
	if _, err := s.Put(ctx, key, strings.NewReader(`{"at":"x","at":"y"}`), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := readRecord(ctx, s, key, &modelled); errcode.Of(err) != errcode.ShuffleCorrupt {
		t.Errorf("readRecord of a key twice: %v, want SHUFFLE_CORRUPT", err)
	}
}
