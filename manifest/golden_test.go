package manifest

import (
	"bytes"
	"errors"
	"flag"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// -update writes missing golden documents; existing ones are frozen.
var update = flag.Bool("update", false, "write missing golden files in testdata/")

// TestGoldenDocuments pins the stored bytes of one document of each kind.
// Field order, JSON names, number and digest spelling are all part of a
// document's digest: reordering a struct field in types.go would change
// every root digest, so it must fail here first.
func TestGoldenDocuments(t *testing.T) {
	for _, c := range docCases() {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join("testdata", c.name+".json")
			enc := mustEncode(t, c.doc)
			if *update {
				if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
					if err := os.MkdirAll("testdata", 0o755); err != nil {
						t.Fatal(err)
					}
					if err := os.WriteFile(path, enc, 0o644); err != nil {
						t.Fatal(err)
					}
				}
			}
			golden, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(enc, golden) {
				t.Fatalf("encoding of the %s fixture changed:\n got %s\nwant %s", c.name, enc, golden)
			}
			v, err := c.decode(golden)
			if err != nil {
				t.Fatalf("golden %s does not decode: %v", path, err)
			}
			if !reflect.DeepEqual(v, c.doc) {
				t.Fatalf("golden %s decodes to another value", path)
			}
		})
	}
}

// TestGoldenRecordSchemaDigest pins the record schema digest of the
// fixture: sha256 of testdata/recordSchema.json.
func TestGoldenRecordSchemaDigest(t *testing.T) {
	const want = "sha256:0f4e471e1fca3feed40fb5b3b1531c24875022ccde906de56cf73b3c51542132"
	d, err := validRecordSchema().Digest()
	if err != nil {
		t.Fatal(err)
	}
	golden, err := os.ReadFile("testdata/recordSchema.json")
	if err != nil {
		t.Fatal(err)
	}
	if d != Sum(golden) || d.String() != want {
		t.Fatalf("record schema digest %s, golden file hashes to %s, pinned %s", d, Sum(golden), want)
	}
}
