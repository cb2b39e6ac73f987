package mapper

import (
	"testing"

	"github.com/shardproof/shardproof/internal/canon"
)

// TestColumnCache: a file's batch columns go to the next file of the same
// schema, emptied, and never to a file of another schema; the cache keeps
// at most maxCachedCols sets.
func TestColumnCache(t *testing.T) {
	var c colCache
	member := canon.SnapshotMemberSchema()
	other := canon.SnapshotMemberSchema()
	other.Fields[0].Nullable = !other.Fields[0].Nullable

	k1, first, err := c.get(member)
	if err != nil {
		t.Fatal(err)
	}
	sc, ok := first[0].(*stringCol)
	if !ok {
		t.Fatalf("column 0 is %T, want a string column", first[0])
	}
	sc.arena = append(sc.arena, "left over"...)
	sc.offs = append(sc.offs, 0, 9)
	c.put(k1, first)

	k2, cols, err := c.get(other)
	if err != nil {
		t.Fatal(err)
	}
	if k2 == k1 || &cols[0] == &first[0] || cols[0].(*stringCol).nullable == first[0].(*stringCol).nullable {
		t.Fatal("a schema that differs in one field's nullability got the other schema's columns")
	}
	k3, again, err := c.get(member)
	if err != nil {
		t.Fatal(err)
	}
	if k3 != k1 || &again[0] != &first[0] {
		t.Fatal("the cached columns of the schema were not reused")
	}
	if s := again[0].(*stringCol); len(s.arena) != 0 || len(s.offs) != 1 {
		t.Fatalf("a reused column holds the last file's values: arena %q, offsets %v", s.arena, s.offs)
	}
	for range maxCachedCols + 3 {
		_, cols, err := c.get(other)
		if err != nil {
			t.Fatal(err)
		}
		defer c.put(k2, cols)
	}
	t.Cleanup(func() {
		if len(c.sets) > maxCachedCols {
			t.Errorf("the cache holds %d sets, at most %d", len(c.sets), maxCachedCols)
		}
	})
}
