package objstore_test

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/objstore"
	"github.com/shardproof/shardproof/objstore/faults"
)

// onlyReader hides every method of its reader but Read, as stdin or a
// pipe would: nothing can be read again.
type onlyReader struct{ io.Reader }

// A conditional create whose answer was lost, and whose retry met the
// object it wrote, is the creation of that object: CreateOrMatch returns
// its version, from a body that can be read once only. A key that holds
// other bytes, longer or shorter ones included, is refused as before.
func TestCreateOrMatch(t *testing.T) {
	s := newStore(t)
	ctx := t.Context()
	lost := fmt.Errorf("the retry's answer: %w", objstore.ErrPreconditionFailed)
	la := &faults.LostAnswer{Store: s, Err: lost}
	body := bytes.Repeat([]byte("mine "), 10000)

	v, created, err := objstore.CreateOrMatch(ctx, la, "k", onlyReader{bytes.NewReader(body)}, objstore.PutOptions{})
	if err != nil || created || !la.Fired() {
		t.Fatalf("create whose answer was lost: %q created=%v fired=%v, %v; want its version", v, created, la.Fired(), err)
	}
	info, err := s.Head(ctx, "k", "")
	if err != nil || info.Version != v || info.Size != int64(len(body)) {
		t.Fatalf("latest %+v, %v; CreateOrMatch returned %q", info, err, v)
	}

	// Run again with the same bytes (the same command twice): the same.
	v2, created, err := objstore.CreateOrMatch(ctx, s, "k", onlyReader{bytes.NewReader(body)}, objstore.PutOptions{Size: int64(len(body))})
	if err != nil || created || v2 != v {
		t.Fatalf("same bytes again: %q created=%v, %v; want %q", v2, created, err, v)
	}
	for name, other := range map[string][]byte{
		"other bytes": bytes.Repeat([]byte("your "), 10000),
		"a prefix":    body[:len(body)-1],
		"longer":      append(append([]byte{}, body...), '!'),
		"empty":       nil,
	} {
		_, _, err := objstore.CreateOrMatch(ctx, s, "k", onlyReader{bytes.NewReader(other)}, objstore.PutOptions{})
		if !objstore.IsPrecondition(err) {
			t.Errorf("%s: %v, want PRECONDITION_FAILED", name, err)
		}
	}
	if info, err := s.Head(ctx, "k", ""); err != nil || info.Version != v {
		t.Fatalf("refused creates changed the key: %+v, %v", info, err)
	}

	v, created, err = objstore.CreateOrMatch(ctx, s, "new", strings.NewReader("x"), objstore.PutOptions{})
	if err != nil || !created || v == "" {
		t.Fatalf("a new key: %q created=%v, %v", v, created, err)
	}
}

// A body that does not hash to the digest its caller gave is refused as
// Put refuses it (DIGEST_MISMATCH), even when the key holds those very
// bytes: the file store refuses a create of an existing key before it
// reads the body, and CreateOrMatch, which then read and matched it,
// returned success for bytes that are not the ones the caller named.
func TestCreateOrMatchChecksGivenDigest(t *testing.T) {
	s := newStore(t)
	ctx := t.Context()
	body := []byte("stored bytes")
	v, err := s.Put(ctx, "k", bytes.NewReader(body), objstore.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	meant := sha256.Sum256([]byte("the bytes the caller meant"))
	_, _, err = objstore.CreateOrMatch(ctx, s, "k", onlyReader{bytes.NewReader(body)}, objstore.PutOptions{SHA256: meant})
	if errcode.Of(err) != errcode.DigestMismatch {
		t.Fatalf("body not hashing to the given digest: %v, want DIGEST_MISMATCH", err)
	}
	got, created, err := objstore.CreateOrMatch(ctx, s, "k", onlyReader{bytes.NewReader(body)}, objstore.PutOptions{SHA256: sha256.Sum256(body)})
	if err != nil || created || got != v {
		t.Fatalf("body hashing to the given digest: %q created=%v, %v; want %q", got, created, err, v)
	}
}
