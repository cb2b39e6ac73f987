package snapindex

import (
	"bytes"
	"testing"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/tuplehash"
)

// FuzzDecode: arbitrary index bytes (a store object anyone may overwrite)
// never panic, are rejected with BAD_DOCUMENT, and an accepted index is
// exactly what Encode writes for its leaves.
func FuzzDecode(f *testing.F) {
	const k = 3
	leaves := make([][32]byte, 1<<k)
	for i := range leaves {
		leaves[i][0], leaves[i][31] = byte(i), byte(i*7)
	}
	good, err := Encode(k, leaves)
	if err != nil {
		f.Fatal(err)
	}
	root := manifest.Digest(tuplehash.MerkleRoot(leaves))
	f.Add(good, uint8(k))
	f.Add(good[:len(good)-1], uint8(k))
	f.Add(good, uint8(2))
	f.Add(good, uint8(21))
	f.Fuzz(func(t *testing.T, b []byte, kk uint8) {
		got, err := Decode(b, uint(kk), root)
		if err != nil {
			if errcode.Of(err) != errcode.BadDocument {
				t.Fatalf("code %s: %v", errcode.Of(err), err)
			}
			return
		}
		ls := make([][32]byte, len(got)/32)
		for i := range ls {
			ls[i] = [32]byte(got[32*i:])
		}
		again, err := Encode(uint(kk), ls)
		if err != nil || !bytes.Equal(again, b) {
			t.Fatalf("accepted bytes are not the encoding of their leaves: %v", err)
		}
	})
}
