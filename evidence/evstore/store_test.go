package evstore_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/shardproof/shardproof/evidence"
	"github.com/shardproof/shardproof/evidence/evstore"
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/objstore"
	"github.com/shardproof/shardproof/objstore/file"
)

func sum(s string) manifest.Digest { return sha256.Sum256([]byte(s)) }

// testKey is evidence's golden key: the seed 0x00, 0x01, … 0x1f.
func testKey() ed25519.PrivateKey {
	seed := make([]byte, 32)
	for i := range seed {
		seed[i] = byte(i)
	}
	return ed25519.NewKeyFromSeed(seed)
}

func testRecheck() *evidence.Recheck {
	return &evidence.Recheck{Root: sum("release"), Kind: "tombstone", Value: 9, Report: sum("recheck-report"), Hits: 2}
}

// TestStoredSignatures: a signature stored beside its evidence in a real
// file store is loaded for that evidence only; a damaged or forged
// document there is skipped, and signing again changes nothing.
func TestStoredSignatures(t *testing.T) {
	ctx := context.Background()
	s, err := file.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	key := testKey()
	_, other, _ := ed25519.GenerateKey(nil)
	msg := testRecheck().Message()
	if sigs, err := evstore.Load(ctx, s, msg, quiet); err != nil || len(sigs) != 0 {
		t.Fatalf("load before signing: %v, %v", sigs, err)
	}
	want, err := evstore.SignAndStore(ctx, s, key, msg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := evstore.SignAndStore(ctx, s, key, msg); err != nil {
		t.Fatalf("signing again: %v", err)
	}
	if _, err := evstore.SignAndStore(ctx, s, other, msg); err != nil {
		t.Fatal(err)
	}
	sigs, err := evstore.Load(ctx, s, msg, quiet)
	if err != nil || len(sigs) != 2 {
		t.Fatalf("load: %v, %v; want 2 signatures", sigs, err)
	}
	found := false
	for _, g := range sigs {
		found = found || g == want
	}
	if !found {
		t.Fatalf("load %v lacks %v", sigs, want)
	}
	// Other evidence has none.
	changed := testRecheck()
	changed.Hits = 0
	if sigs, err := evstore.Load(ctx, s, changed.Message(), quiet); err != nil || len(sigs) != 0 {
		t.Fatalf("load for other evidence: %v, %v", sigs, err)
	}
	// A signature of other evidence copied under this message's
	// directory, and a document that does not decode, are skipped.
	forged := evidence.Sign(other, changed.Message())
	put := func(k string, b []byte) {
		if _, err := s.Put(ctx, k, bytes.NewReader(b), objstore.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	put(evidence.StoreKey(msg, other.Public().(ed25519.PublicKey)), []byte(`{"schema":"training.evidence.signature.v1","key":"`+forged.Key+`","sig":"`+forged.Sig+`"}`))
	dir := evidence.StoreKey(msg, key.Public().(ed25519.PublicKey))
	dir = dir[:strings.LastIndex(dir, "/")+1]
	put(dir+"junk", []byte(`{"schema":"training.evidence.signature.v1","key":1}`))
	sigs, err = evstore.Load(ctx, s, msg, quiet)
	if err != nil || len(sigs) != 1 || sigs[0] != want {
		t.Fatalf("load with a forged and a damaged document: %v, %v; want only %v", sigs, err, want)
	}
	// A damaged document where the signer's goes gets a new version
	// when it signs again.
	mine := evidence.StoreKey(msg, key.Public().(ed25519.PublicKey))
	put(mine, []byte("{}"))
	if sigs, err := evstore.Load(ctx, s, msg, quiet); err != nil || len(sigs) != 0 {
		t.Fatalf("load with the signer's document damaged: %v, %v", sigs, err)
	}
	if _, err := evstore.SignAndStore(ctx, s, key, msg); err != nil {
		t.Fatal(err)
	}
	if sigs, err := evstore.Load(ctx, s, msg, quiet); err != nil || len(sigs) != 1 || sigs[0] != want {
		t.Fatalf("load after signing over a damaged document: %v, %v; want %v", sigs, err, want)
	}
}
