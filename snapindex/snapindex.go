// Package snapindex stores and loads a snapshot's bucket-leaf index: the
// 2^k bucket leaves whose RFC 6962 Merkle root is the snapshot manifest's
// tupleRoot.
//
// The index lets verify's reducers skip snapshot members. A reducer
// computes each bucket's release leaf anyway; where it equals the
// snapshot's leaf, the bucket's release tuples are exactly the snapshot's
// (same multiset of tuple digests), so every diff count of that bucket is
// zero and the snapshot's tuples are not needed. A member is read only
// when one of its buckets differs. The index needs no trust: it is used
// only when its leaves hash to the snapshot's tupleRoot, and verify's
// aggregate recomputes the snapshot root from the leaves it used and
// compares it with the manifest's again (TUPLE_ROOT_MISMATCH otherwise).
//
// Format (docs/FORMATS.md): "sp.leaves.v1\x00" ‖ 32-byte unbound tuple root ‖
// u8 k ‖ 2^k leaves of 32 bytes in bucket order. It is derived data, not
// content-addressed: it lives at Key(snapshotDigest), and a writer that
// finds no valid index there writes a new version.
package snapindex

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"strings"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/internal/verifyread"
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/objstore"
	"github.com/shardproof/shardproof/tuplehash"
)

const magic = "sp.leaves.v1\x00"

// MaxK is the largest bucket-bit count indexed: 2^20 leaves are 32 MiB.
// Snapshots partitioned finer are verified by reading their members.
const MaxK = 20

// Key is where the index of the snapshot with manifest digest snap lives.
func Key(snap manifest.Digest) string { return "index/snapshots/" + snap.Hex() + "/leaves.v1" }

// Size is the encoded size of an index of 2^k leaves.
func Size(k uint) int64 { return int64(len(magic)) + 32 + 1 + 32<<k }

// Encode returns the index bytes for leaves (2^k of them, bucket order).
func Encode(k uint, leaves [][32]byte) ([]byte, error) {
	if k < 1 || k > MaxK || len(leaves) != 1<<k {
		return nil, errcode.New(errcode.Internal, "snapindex: %d leaves for k=%d", len(leaves), k)
	}
	b := make([]byte, 0, Size(k))
	b = append(b, magic...)
	root := tuplehash.MerkleRoot(leaves)
	b = append(b, root[:]...)
	b = append(b, byte(k))
	for i := range leaves {
		b = append(b, leaves[i][:]...)
	}
	return b, nil
}

// Decode parses index bytes and checks them against the snapshot's
// unbound tuple root and bucket bits: the leaves must hash to root. It
// returns the leaves as one 32·2^k-byte slice, bucket order.
func Decode(b []byte, k uint, root manifest.Digest) ([]byte, error) {
	if k < 1 || k > MaxK {
		return nil, errcode.New(errcode.BadDocument, "snapshot leaf index: k=%d not indexed (at most %d)", k, MaxK)
	}
	if int64(len(b)) != Size(k) {
		return nil, errcode.New(errcode.BadDocument, "snapshot leaf index: %d bytes, want %d for k=%d", len(b), Size(k), k)
	}
	if !bytes.HasPrefix(b, []byte(magic)) {
		return nil, errcode.New(errcode.BadDocument, "snapshot leaf index: no %q header", strings.TrimSuffix(magic, "\x00"))
	}
	p := b[len(magic):]
	if got := p[32]; uint(got) != k {
		return nil, errcode.New(errcode.BadDocument, "snapshot leaf index: k=%d, the snapshot's is %d", got, k)
	}
	if [32]byte(p[:32]) != [32]byte(root) {
		return nil, errcode.New(errcode.BadDocument, "snapshot leaf index: names tuple root %s, the snapshot's is %s", manifest.Digest(p[:32]), root)
	}
	leaves := p[33:]
	ls := make([][32]byte, 1<<k)
	for i := range ls {
		ls[i] = [32]byte(leaves[32*i:])
	}
	if got := tuplehash.MerkleRoot(ls); got != [32]byte(root) {
		return nil, errcode.New(errcode.BadDocument, "snapshot leaf index: leaves hash to %s, the snapshot's tuple root is %s", manifest.Digest(got), root)
	}
	return leaves, nil
}

// Ref names one stored version of an index and its bytes' sha256, as a
// plan records it.
type Ref struct {
	Key     string           `json:"key"`
	Version objstore.Version `json:"version"`
	Digest  manifest.Digest  `json:"digest"`
}

// Find loads the latest index of snapshot snapDigest (tuple root root,
// k bucket bits) and checks it. found is false, with a nil error, when
// there is none; a present but invalid index is an error (BAD_DOCUMENT),
// which callers may log and treat as absent.
func Find(ctx context.Context, s objstore.Store, snapDigest manifest.Digest, k uint, root manifest.Digest) (ref Ref, leaves []byte, found bool, err error) {
	if k < 1 || k > MaxK {
		return Ref{}, nil, false, nil
	}
	key := Key(snapDigest)
	info, err := s.Head(ctx, key, "")
	if objstore.IsNotExist(err) {
		return Ref{}, nil, false, nil
	}
	if err != nil {
		return Ref{}, nil, false, err
	}
	if info.Size != Size(k) {
		return Ref{}, nil, false, errcode.New(errcode.BadDocument, "snapshot leaf index %s version %s: %d bytes, want %d for k=%d", key, info.Version, info.Size, Size(k), k)
	}
	rc, err := s.Get(ctx, key, info.Version)
	if err != nil {
		return Ref{}, nil, false, err
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, Size(k)+1))
	if err != nil {
		// The store's own code (CANCELED on Ctrl-C, STORE_UNAVAILABLE for
		// a lost connection) when it gave one.
		c := errcode.Of(err)
		if c == errcode.Internal {
			c = errcode.IO
		}
		return Ref{}, nil, false, errcode.Wrap(c, err, "read %s", key)
	}
	leaves, err = Decode(b, k, root)
	if err != nil {
		return Ref{}, nil, false, fmt.Errorf("%s version %s: %w", key, info.Version, err)
	}
	return Ref{Key: key, Version: info.Version, Digest: manifest.Sum(b)}, leaves, true, nil
}

// Load reads the exact version ref names, checks its sha256, and decodes
// it as Decode does.
func Load(ctx context.Context, s objstore.Store, ref Ref, k uint, root manifest.Digest) ([]byte, error) {
	rc, err := s.Get(ctx, ref.Key, ref.Version)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	b, err := verifyread.ReadAll(verifyread.New(rc, ref.Key, [32]byte(ref.Digest), Size(k)), Size(k))
	if err != nil {
		return nil, err
	}
	return Decode(b, k, root)
}

// Put stores the index of snapshot snapDigest as a new version of its key.
// leaves must hash to the snapshot's tuple root; Put does not check it.
func Put(ctx context.Context, s objstore.Store, snapDigest manifest.Digest, k uint, leaves [][32]byte) (Ref, error) {
	b, err := Encode(k, leaves)
	if err != nil {
		return Ref{}, err
	}
	sum := sha256.Sum256(b)
	v, err := s.Put(ctx, Key(snapDigest), bytes.NewReader(b), objstore.PutOptions{Size: int64(len(b)), SHA256: sum})
	if err != nil {
		return Ref{}, err
	}
	return Ref{Key: Key(snapDigest), Version: v, Digest: manifest.Digest(sum)}, nil
}
