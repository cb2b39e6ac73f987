package objstore_test

import (
	"bytes"
	"slices"
	"testing"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/objstore"
	"github.com/shardproof/shardproof/objstore/storetest"
)

// TestRoutedConformance runs the store contract on Routed with prefixes
// the suite's keys fall on both sides of, so its listings, paging and
// deletes span the two stores.
func TestRoutedConformance(t *testing.T) {
	for _, prefix := range []string{"jobs/", "p/ab/", "blobs/sha256/"} {
		t.Run(prefix, func(t *testing.T) {
			storetest.Run(t, func(t *testing.T) objstore.Store {
				r, err := objstore.NewRouted(newStore(t), newStore(t), prefix)
				if err != nil {
					t.Fatal(err)
				}
				return r
			})
		})
	}
}

// TestRoutedPlacement: each key is written to, read from and listed in the
// store that owns it, and Main's keys under the prefix stay hidden.
func TestRoutedPlacement(t *testing.T) {
	main, scratch := newStore(t), newStore(t)
	ctx := t.Context()
	// Left in the main store by a run without a scratch.
	if _, err := main.Put(ctx, "jobs/old/commit.json", bytes.NewReader([]byte("old")), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	r, err := objstore.NewRouted(main, scratch, "jobs/")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"blobs/sha256/aa", "jobs/p/map/0/r0.arrow", "jobs/p/map/0/commit.json", "zz", "jobsx"} {
		if _, err := r.Put(ctx, k, bytes.NewReader([]byte(k)), objstore.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := storetest.Keys(t, main, "", 2), []string{"blobs/sha256/aa", "jobs/old/commit.json", "jobsx", "zz"}; !slices.Equal(got, want) {
		t.Fatalf("main holds %q, want %q", got, want)
	}
	if got, want := storetest.Keys(t, scratch, "", 2), []string{"jobs/p/map/0/commit.json", "jobs/p/map/0/r0.arrow"}; !slices.Equal(got, want) {
		t.Fatalf("scratch holds %q, want %q", got, want)
	}
	if got, want := storetest.Keys(t, r, "", 2), []string{"blobs/sha256/aa", "jobs/p/map/0/commit.json", "jobs/p/map/0/r0.arrow", "jobsx", "zz"}; !slices.Equal(got, want) {
		t.Fatalf("routed lists %q, want %q", got, want)
	}
	_, err = r.Head(ctx, "jobs/old/commit.json", "")
	if errcode.Of(err) != errcode.NotFound {
		t.Fatalf("Head of a main key under the prefix: %v, want NOT_FOUND", err)
	}
	if err := r.DeletePrefix(ctx, "jobs/p/"); err != nil {
		t.Fatal(err)
	}
	if got := storetest.Keys(t, scratch, "", 2); len(got) != 0 {
		t.Fatalf("scratch after DeletePrefix(jobs/p/): %q", got)
	}
	if got := storetest.Keys(t, main, "", 2); len(got) != 4 {
		t.Fatalf("DeletePrefix(jobs/p/) touched main: %q", got)
	}
	if _, err := objstore.NewRouted(main, scratch, "jobs"); errcode.Of(err) != errcode.BadKey {
		t.Fatalf("NewRouted with prefix %q: %v, want BAD_KEY", "jobs", err)
	}
}
