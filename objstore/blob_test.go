package objstore_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/objstore"
	"github.com/shardproof/shardproof/objstore/file"
)

func newStore(t *testing.T) objstore.Store {
	t.Helper()
	s, err := file.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestPutBlobIdempotent(t *testing.T) {
	s := newStore(t)
	ctx := t.Context()
	data := []byte("a manifest")
	d, v1, created, err := objstore.PutBlob(ctx, s, data)
	if err != nil || !created {
		t.Fatalf("first PutBlob: created=%v err=%v", created, err)
	}
	if d != sha256.Sum256(data) || objstore.BlobKey(d) != "blobs/sha256/"+hex.EncodeToString(d[:]) {
		t.Fatalf("digest/key wrong: %x %s", d, objstore.BlobKey(d))
	}
	d2, v2, created, err := objstore.PutBlob(ctx, s, data)
	if err != nil || created || v2 != v1 || d2 != d {
		t.Fatalf("second PutBlob: v=%s (first %s) created=%v err=%v", v2, v1, created, err)
	}
	page, _ := s.List(ctx, objstore.BlobPrefix, "", 0)
	if len(page.Objects) != 1 || page.Objects[0].Version != v1 {
		t.Fatalf("staging twice wrote something new: %+v", page.Objects)
	}
	got, v, err := objstore.ReadBlob(ctx, s, d, 1<<20)
	if err != nil || v != v1 || !bytes.Equal(got, data) {
		t.Fatalf("ReadBlob = %q, %s, %v", got, v, err)
	}
}

// A corrupt object already at a blob's key is reported, not accepted.
func TestPutBlobExistingCorrupt(t *testing.T) {
	s := newStore(t)
	ctx := t.Context()
	data := []byte("the real bytes")
	d := sha256.Sum256(data)
	if _, err := s.Put(ctx, objstore.BlobKey(d), strings.NewReader("the fake bytes"), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	_, _, _, err := objstore.PutBlob(ctx, s, data)
	if errcode.Of(err) != errcode.DigestMismatch {
		t.Fatalf("PutBlob over corrupt content: %v, want DIGEST_MISMATCH", err)
	}
	if _, _, err := objstore.ReadBlob(ctx, s, d, 1<<20); errcode.Of(err) != errcode.DigestMismatch {
		t.Fatalf("ReadBlob of corrupt content: %v", err)
	}
}

func TestPutBlobFile(t *testing.T) {
	s := newStore(t)
	ctx := t.Context()
	data := bytes.Repeat([]byte("shard bytes "), 100000)
	path := filepath.Join(t.TempDir(), "shard.parquet")
	os.WriteFile(path, data, 0o644)
	d, size, v, created, err := objstore.PutBlobFile(ctx, s, path)
	if err != nil || !created || size != int64(len(data)) || d != sha256.Sum256(data) {
		t.Fatalf("PutBlobFile: d=%x size=%d created=%v err=%v", d, size, created, err)
	}
	_, _, v2, created, err := objstore.PutBlobFile(ctx, s, path)
	if err != nil || created || v2 != v {
		t.Fatalf("second PutBlobFile: v=%s created=%v err=%v", v2, created, err)
	}
	r, err := objstore.GetBlob(ctx, s, d, v, size)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(r)
	r.Close()
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("GetBlob: %d bytes, %v", len(got), err)
	}
	if _, _, _, _, err := objstore.PutBlobFile(ctx, s, filepath.Join(t.TempDir(), "absent")); errcode.Of(err) != errcode.IO {
		t.Fatalf("absent file: %v", err)
	}
}

func TestGetBlobWrongSize(t *testing.T) {
	s := newStore(t)
	ctx := t.Context()
	d, v, _, _ := objstore.PutBlob(ctx, s, []byte("12345"))
	for _, size := range []int64{4, 6} {
		r, err := objstore.GetBlob(ctx, s, d, v, size)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(r)
		r.Close()
		if errcode.Of(err) != errcode.SizeMismatch || int64(len(got)) > size {
			t.Fatalf("descriptor size %d: %d bytes, %v", size, len(got), err)
		}
	}
	if _, err := objstore.GetBlob(ctx, s, [32]byte{9}, "", 5); !objstore.IsNotExist(err) {
		t.Fatalf("GetBlob of an absent digest: %v", err)
	}
}

func TestReadBlobTooLarge(t *testing.T) {
	s := newStore(t)
	d, _, _, _ := objstore.PutBlob(t.Context(), s, make([]byte, 1000))
	if _, _, err := objstore.ReadBlob(t.Context(), s, d, 999); errcode.Of(err) != errcode.DocumentTooLarge {
		t.Fatalf("ReadBlob over max: %v", err)
	}
}
