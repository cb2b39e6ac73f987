package tuplehash_test

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"github.com/shardproof/shardproof/tuplehash"
)

// A tuple digest and its bucket, as a mapper computes them for one record.
func ExampleTuple_Digest() {
	t := tuplehash.Tuple{
		SampleID:             "doc-000001",
		SourceID:             "commoncrawl/2024-10",
		SourceVersion:        3,
		LogicalContentDigest: sha256.Sum256([]byte("hello")),
		Split:                "train",
		SchemaDigest:         sha256.Sum256([]byte("training.record.schema.v1 example")),
	}
	d, err := t.Digest()
	if err != nil {
		panic(err)
	}
	fmt.Println("sha256:" + hex.EncodeToString(d[:]))
	fmt.Println(tuplehash.Bucket(t.SampleID, tuplehash.DefaultK))
	// Output:
	// sha256:5d2bf89f90f4d005b3791389de7093dcc8b8ff6906c4afad3f358c59f8320479
	// 3114
}

// The unbound root over all 2^k bucket leaves, then bound to the snapshot
// and fences as a release's orderedMemberTupleRoot.
func ExampleBindRoot() {
	acc := tuplehash.NewAccumulator(2)
	for _, id := range []string{"a", "b", "c"} {
		t := tuplehash.Tuple{SampleID: id, Split: "train"}
		if err := acc.Add(&t); err != nil {
			panic(err)
		}
	}
	root := acc.Root()
	bound := tuplehash.BindRoot(root, sha256.Sum256([]byte("snapshot")), 44192, 3908)
	fmt.Println(len(acc.Leaves()), hex.EncodeToString(bound[:4]))
	// Output: 4 00668e2c
}
