package manifest_test

import (
	"fmt"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
)

func ExampleParseMemberPartition() {
	k, err := manifest.ParseMemberPartition(manifest.DefaultMemberPartition)
	fmt.Println(k, 1<<k, err)
	_, err = manifest.ParseMemberPartition("xxh64/k=012")
	fmt.Println(errcode.Of(err))
	// Output:
	// 12 4096 <nil>
	// BAD_DOCUMENT
}

// Decoding is strict: encoding/json would keep the last "schema"; shardproof
// rejects the document with a stable code.
func ExampleDecodeAny() {
	_, _, err := manifest.DecodeAny([]byte(`{"schema":"training.tombstones.v1","entries":[],"schema":"training.benchmark.v1"}`))
	fmt.Println(err)
	schema, doc, err := manifest.DecodeAny([]byte(`{"schema":"training.tombstones.v1","entries":[{"seq":1,"sampleId":"doc-7"}]}`))
	fmt.Println(schema, doc.(*manifest.FenceLog).Watermark(), err)
	// Output:
	// BAD_DOCUMENT: $.schema: duplicate key
	// training.tombstones.v1 1 <nil>
}
