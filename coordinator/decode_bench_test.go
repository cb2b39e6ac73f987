package coordinator

import (
	"fmt"
	"testing"

	"github.com/shardproof/shardproof/manifest"
)

// BenchmarkDecodeCommitRecord measures decodeStrict on a map commit
// record, which every reduce task reads once per map task (7,630 times
// at a billion records): a real record of commitFuzzSetup's run, its
// results and outputs repeated to 20 inputs and 64 reducers.
func BenchmarkDecodeCommitRecord(b *testing.B) {
	commitFuzzSetup(b)
	var mc MapCommit
	if err := decodeStrict(commitFuzzBody[0], &mc); err != nil {
		b.Fatal(err)
	}
	for len(mc.Results) < 20 {
		mc.Results = append(mc.Results, mc.Results...)
	}
	for len(mc.Outputs) < 64 {
		mc.Outputs = append(mc.Outputs, mc.Outputs...)
	}
	mc.Results, mc.Outputs = mc.Results[:20], mc.Outputs[:64]
	for _, c := range []struct {
		name string
		v    any
	}{{"real", nil}, {"20x64", &mc}} {
		doc := commitFuzzBody[0]
		if c.v != nil {
			var err error
			if doc, err = manifest.Encode(c.v); err != nil {
				b.Fatal(err)
			}
		}
		b.Run(fmt.Sprintf("%s/%dB", c.name, len(doc)), func(b *testing.B) {
			b.SetBytes(int64(len(doc)))
			b.ReportAllocs()
			for b.Loop() {
				var got MapCommit
				if err := decodeStrict(doc, &got); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
