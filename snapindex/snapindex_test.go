package snapindex

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"testing"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/objstore"
	"github.com/shardproof/shardproof/objstore/faults"
	"github.com/shardproof/shardproof/objstore/file"
	"github.com/shardproof/shardproof/tuplehash"
)

func testLeaves(k uint) [][32]byte {
	ls := make([][32]byte, 1<<k)
	for i := range ls {
		ls[i] = sha256.Sum256(fmt.Appendf(nil, "leaf %d", i))
	}
	return ls
}

func TestEncodeDecode(t *testing.T) {
	const k = 4
	ls := testLeaves(k)
	root := manifest.Digest(tuplehash.MerkleRoot(ls))
	b, err := Encode(k, ls)
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(b)) != Size(k) {
		t.Fatalf("encoded %d bytes, Size says %d", len(b), Size(k))
	}
	got, err := Decode(b, k, root)
	if err != nil {
		t.Fatal(err)
	}
	for i := range ls {
		if !bytes.Equal(got[32*i:32*i+32], ls[i][:]) {
			t.Fatalf("leaf %d differs", i)
		}
	}
	for name, c := range map[string]struct {
		b    []byte
		k    uint
		root manifest.Digest
	}{
		"other k":      {b, k + 1, root},
		"other root":   {b, k, manifest.Sum([]byte("x"))},
		"short":        {b[:len(b)-1], k, root},
		"long":         {append(bytes.Clone(b), 0), k, root},
		"bad magic":    {append([]byte("sp.leaves.v2\x00"), b[13:]...), k, root},
		"leaf flipped": {flip(b, len(b)-1), k, root},
		"header k":     {flip(b, 13+32), k, root},
		"k beyond max": {b, MaxK + 1, root},
		"empty":        {nil, k, root},
		"header root":  {flip(b, 13), k, root},
	} {
		if _, err := Decode(c.b, c.k, c.root); errcode.Of(err) != errcode.BadDocument {
			t.Errorf("%s: %v, want BAD_DOCUMENT", name, err)
		}
	}
	if _, err := Encode(k, ls[1:]); err == nil {
		t.Error("Encode took 2^k-1 leaves")
	}
}

func flip(b []byte, i int) []byte {
	c := bytes.Clone(b)
	c[i] ^= 0x10
	return c
}

// Find, Put and Load against the file store: no index is not an error,
// Load takes the exact version and refuses changed bytes, and a damaged
// latest version is reported, not used.
func TestStoreRoundTrip(t *testing.T) {
	ctx := t.Context()
	s, err := file.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	const k = 3
	ls := testLeaves(k)
	root := manifest.Digest(tuplehash.MerkleRoot(ls))
	snap := manifest.Sum([]byte("snapshot"))
	if _, _, found, err := Find(ctx, s, snap, k, root); found || err != nil {
		t.Fatalf("empty store: found %v, %v", found, err)
	}
	ref, err := Put(ctx, s, snap, k, ls)
	if err != nil {
		t.Fatal(err)
	}
	got, _, found, err := Find(ctx, s, snap, k, root)
	if err != nil || !found || got != ref {
		t.Fatalf("Find: %+v %v %v, want %+v", got, found, err, ref)
	}
	if _, err := Load(ctx, s, ref, k, root); err != nil {
		t.Fatal(err)
	}
	b, _ := Encode(k, ls)
	b[len(b)-1] ^= 1
	if _, err := s.Put(ctx, Key(snap), bytes.NewReader(b), objstore.PutOptions{Size: int64(len(b))}); err != nil {
		t.Fatal(err)
	}
	if _, _, found, err := Find(ctx, s, snap, k, root); found || errcode.Of(err) != errcode.BadDocument {
		t.Fatalf("damaged latest version: found %v, %v; want BAD_DOCUMENT", found, err)
	}
	// The plan's exact version still loads.
	if _, err := Load(ctx, s, ref, k, root); err != nil {
		t.Fatalf("Load of the planned version: %v", err)
	}
	bad := ref
	bad.Digest = manifest.Sum([]byte("other bytes"))
	if _, err := Load(ctx, s, bad, k, root); err == nil {
		t.Fatal("Load accepted bytes whose sha256 differs from the plan's")
	}
}

// A read of the index that fails keeps the store's code (CANCELED on
// Ctrl-C, STORE_UNAVAILABLE for a lost S3 connection), where every
// failure was IO; a bare one is IO.
func TestFindReadFailureKeepsCode(t *testing.T) {
	ctx := t.Context()
	fs, err := file.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	const k = 3
	ls := testLeaves(k)
	root := manifest.Digest(tuplehash.MerkleRoot(ls))
	snap := manifest.Sum([]byte("snapshot"))
	if _, err := Put(ctx, fs, snap, k, ls); err != nil {
		t.Fatal(err)
	}
	for _, fail := range []error{errcode.New(errcode.Canceled, "canceled"), errcode.New(errcode.StoreUnavailable, "lost"), errors.New("bare")} {
		want := errcode.Of(fail)
		if want == errcode.Internal {
			want = errcode.IO
		}
		if _, _, _, err := Find(ctx, &faults.BodyError{Store: fs, Err: fail}, snap, k, root); errcode.Of(err) != want {
			t.Errorf("Find whose read fails with %q: %s (%v), want %s", fail, errcode.Of(err), err, want)
		}
	}
}
