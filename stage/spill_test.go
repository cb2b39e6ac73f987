package stage

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"testing"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/tuplehash"
)

// Every tuple added comes back, whole, from the member whose bucket range
// holds it, however many small flushes its file took; the files are gone
// once read and the directory once the spill is closed.
func TestMemberSpillRoundTrip(t *testing.T) {
	schema := [32]byte{7}
	const members, n = 5, 3000
	sp, err := newMemberSpill(t.TempDir(), members, schema)
	if err != nil {
		t.Fatal(err)
	}
	sp.bufCap = 100 // a flush every few tuples
	var all []memberTuple
	for i := range n {
		tu := tuplehash.Tuple{
			SampleID: fmt.Sprintf("s%d", i), SourceID: []string{"web", "books", ""}[i%3], SourceVersion: int64(i - 1000),
			Split: []string{"train", "val"}[i%2], SchemaDigest: schema,
		}
		tu.LogicalContentDigest[0], tu.LogicalContentDigest[31] = byte(i), byte(i>>8)
		all = append(all, memberTuple{t: tu, digest: [32]byte{byte(i), 1}, bucket: tuplehash.Bucket(tu.SampleID, tuplehash.DefaultK)})
	}
	// Two "shards" of tuples, added in turn.
	if err := sp.add(all[:n/2]); err != nil {
		t.Fatal(err)
	}
	if err := sp.add(all[n/2:]); err != nil {
		t.Fatal(err)
	}
	var got []memberTuple
	for j := range members {
		ts, err := sp.read(j, nil)
		if err != nil {
			t.Fatal(err)
		}
		lo, hi := memberRange(j, members)
		for _, x := range ts {
			if x.bucket < lo || x.bucket >= hi {
				t.Fatalf("member %d [%d,%d) got a tuple of bucket %d", j, lo, hi, x.bucket)
			}
		}
		got = append(got, ts...)
		if _, err := os.Stat(sp.path(j)); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("member %d's spill file left after reading: %v", j, err)
		}
	}
	key := func(a, b memberTuple) int { return tupleOrder(a, b) }
	slices.SortFunc(got, key)
	slices.SortFunc(all, key)
	if !slices.Equal(got, all) {
		t.Fatalf("%d tuples back for %d added, or some changed", len(got), len(all))
	}
	sp.close()
	if _, err := os.Stat(sp.dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("spill directory left after close: %v", err)
	}
}

// A tuple of another schema is refused; a truncated spill is an IO error,
// never a panic.
func TestMemberSpillRejects(t *testing.T) {
	sp, err := newMemberSpill(t.TempDir(), 2, [32]byte{1})
	if err != nil {
		t.Fatal(err)
	}
	defer sp.close()
	if err := sp.add([]memberTuple{{t: tuplehash.Tuple{SampleID: "x", SchemaDigest: [32]byte{2}}}}); errcode.Of(err) != errcode.Internal {
		t.Fatalf("a tuple of another schema: %v", err)
	}
	whole := appendSpilled(nil, &memberTuple{t: tuplehash.Tuple{SampleID: "sample", SourceID: "src", Split: "train"}})
	for cut := range len(whole) {
		var x memberTuple
		if _, err := readSpilled(whole[:cut], &x); errcode.Of(err) != errcode.IO || !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("spill cut at %d of %d: %v", cut, len(whole), err)
		}
	}
}
