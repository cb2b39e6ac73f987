// Package evidence signs and checks what a verifier vouches for: a
// verification report's summary as the gate registers it, and a fence
// recheck as the gate records it.
//
// A verifier holds an ed25519 private key; the gate holds the public keys
// it trusts (Trusted). A signature covers a domain-separated canonical
// encoding of exactly the fields the gate acts on (Report.Message,
// Recheck.Message; docs/FORMATS.md "Evidence signatures"), so a signature
// made for one report, root or watermark does not verify for another,
// and a report's never verifies as a recheck's. ed25519 is deterministic:
// one key and one message give one signature.
package evidence

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"strings"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
)

// Domain starts every signed message; the version names the encoding.
const Domain = "sp.evidence.v1\x00"

// Kind tags, the first field after Domain.
const (
	KindReport  = "report"
	KindRecheck = "recheck"
)

// Key text forms: a public key is PublicPrefix followed by the standard
// base64 (with padding) of its 32 bytes, a private key PrivatePrefix
// followed by that of its 32-byte seed.
const (
	PublicPrefix  = "ed25519:"
	PrivatePrefix = "ed25519-private:"
)

// MaxSignatures caps the signatures one command carries: each is an
// ed25519 verification the gate runs before it proposes the command.
const MaxSignatures = 16

// Report is what a signature of a registered report covers: the root
// and its shards as the register command names them, and every field of
// the report summary the gate records.
type Report struct {
	Root               manifest.Digest
	Shards             []manifest.Digest
	Digest             manifest.Digest
	Verdict            string
	DatasetSnapshot    manifest.Digest
	TombstoneWatermark uint64
	BenchmarkFence     uint64
	TombstoneHits      int64
	BenchmarkHits      int64
}

// Recheck is what a signature of a fence recheck covers: every field of
// the recheck command.
type Recheck struct {
	Root   manifest.Digest
	Kind   string
	Value  uint64
	Report manifest.Digest
	Hits   int64
}

// encoder writes length-prefixed fields: u64 big-endian length, then the
// bytes.
type encoder struct{ b []byte }

func (e *encoder) bytes(p []byte) {
	e.b = binary.BigEndian.AppendUint64(e.b, uint64(len(p)))
	e.b = append(e.b, p...)
}
func (e *encoder) str(s string) { e.bytes([]byte(s)) }
func (e *encoder) u64(v uint64) { e.bytes(binary.BigEndian.AppendUint64(nil, v)) }
func (e *encoder) i64(v int64)  { e.u64(uint64(v)) }
func (e *encoder) digest(d manifest.Digest) {
	e.bytes(d[:])
}

// Message is the signed encoding of r: Domain, then the fields "report",
// root, ShardsDigest of the shards, report digest, verdict, dataset
// snapshot, tombstone watermark, benchmark fence, tombstone hits and
// benchmark hits, each as a u64 big-endian length and its bytes; digests
// are their 32 bytes, numbers 8 bytes big-endian (hits as two's
// complement). Its size does not grow with the release's.
func (r *Report) Message() []byte {
	e := &encoder{b: make([]byte, 0, len(Domain)+10*8+len(KindReport)+len(r.Verdict)+4*32+4*8)}
	e.b = append(e.b, Domain...)
	e.str(KindReport)
	e.digest(r.Root)
	e.digest(ShardsDigest(r.Shards))
	e.digest(r.Digest)
	e.str(r.Verdict)
	e.digest(r.DatasetSnapshot)
	e.u64(r.TombstoneWatermark)
	e.u64(r.BenchmarkFence)
	e.i64(r.TombstoneHits)
	e.i64(r.BenchmarkHits)
	return e.b
}

// ShardsDigest is the sha256 of the shards' 32-byte digests
// concatenated in order: what a report's signature covers of the shards
// a register names.
func ShardsDigest(shards []manifest.Digest) manifest.Digest {
	h := sha256.New()
	for _, s := range shards {
		h.Write(s[:])
	}
	var d manifest.Digest
	h.Sum(d[:0])
	return d
}

// Message is the signed encoding of r: Domain, then the fields
// "recheck", root, kind, value, report digest and hits, encoded as in
// Report.Message.
func (r *Recheck) Message() []byte {
	e := &encoder{}
	e.b = append(e.b, Domain...)
	e.str(KindRecheck)
	e.digest(r.Root)
	e.str(r.Kind)
	e.u64(r.Value)
	e.digest(r.Report)
	e.i64(r.Hits)
	return e.b
}

// MessageDigest names a message in the store (see StoreKey): its sha256.
func MessageDigest(msg []byte) manifest.Digest { return sha256.Sum256(msg) }

// Signature is one verifier's signature of a message, as commands and the
// store carry it.
type Signature struct {
	// Key is the signer's public key in its text form ("ed25519:…").
	Key string `json:"key"`
	// Sig is the standard base64 of the 64-byte ed25519 signature.
	Sig string `json:"sig"`
}

// Sign signs msg with priv.
func Sign(priv ed25519.PrivateKey, msg []byte) Signature {
	return Signature{Key: FormatPublicKey(priv.Public().(ed25519.PublicKey)), Sig: base64.StdEncoding.EncodeToString(ed25519.Sign(priv, msg))}
}

// Parse returns s's public key and signature bytes, or
// EVIDENCE_SIGNATURE_INVALID for a key or signature that is not in its
// text form.
func (s Signature) Parse() (ed25519.PublicKey, []byte, error) {
	pub, err := ParsePublicKey(s.Key)
	if err != nil {
		return nil, nil, errcode.Wrap(errcode.EvidenceSignatureInvalid, err, "signature key")
	}
	sig, err := base64.StdEncoding.Strict().DecodeString(s.Sig)
	if err != nil || len(sig) != ed25519.SignatureSize {
		return nil, nil, errcode.New(errcode.EvidenceSignatureInvalid, "signature by %s: not the base64 of %d bytes", KeyID(pub), ed25519.SignatureSize)
	}
	return pub, sig, nil
}

// Verify checks s over msg: nil, or EVIDENCE_SIGNATURE_INVALID.
func (s Signature) Verify(msg []byte) error {
	pub, sig, err := s.Parse()
	if err != nil {
		return err
	}
	if !ed25519.Verify(pub, msg, sig) {
		return errcode.New(errcode.EvidenceSignatureInvalid, "signature by %s does not verify over the fields sent", KeyID(pub))
	}
	return nil
}

// FormatPublicKey returns pub's text form, "ed25519:<base64>".
func FormatPublicKey(pub ed25519.PublicKey) string {
	return PublicPrefix + base64.StdEncoding.EncodeToString(pub)
}

// FormatPrivateKey returns priv's text form, "ed25519-private:<base64 of
// the seed>".
func FormatPrivateKey(priv ed25519.PrivateKey) string {
	return PrivatePrefix + base64.StdEncoding.EncodeToString(priv.Seed())
}

// ParsePublicKey parses the text form FormatPublicKey writes; anything
// else is BAD_INPUT.
func ParsePublicKey(s string) (ed25519.PublicKey, error) {
	b64, ok := strings.CutPrefix(s, PublicPrefix)
	if !ok {
		return nil, errcode.New(errcode.BadInput, "public key %q does not start with %s", truncate(s), PublicPrefix)
	}
	b, err := base64.StdEncoding.Strict().DecodeString(b64)
	if err != nil || len(b) != ed25519.PublicKeySize {
		return nil, errcode.New(errcode.BadInput, "public key %q: not the base64 of %d bytes", truncate(s), ed25519.PublicKeySize)
	}
	return ed25519.PublicKey(b), nil
}

// ParsePrivateKey parses the text form FormatPrivateKey writes; anything
// else is BAD_INPUT. The error never holds the key's text.
func ParsePrivateKey(s string) (ed25519.PrivateKey, error) {
	b64, ok := strings.CutPrefix(s, PrivatePrefix)
	if !ok {
		return nil, errcode.New(errcode.BadInput, "private key does not start with %s", PrivatePrefix)
	}
	b, err := base64.StdEncoding.Strict().DecodeString(b64)
	if err != nil || len(b) != ed25519.SeedSize {
		return nil, errcode.New(errcode.BadInput, "private key: not the base64 of a %d-byte seed", ed25519.SeedSize)
	}
	return ed25519.NewKeyFromSeed(b), nil
}

// KeyID is the short name of pub that logs, `keys generate` and `gate
// status` show: "ed25519:sha256:" and the first 16 hex digits of the
// sha256 of the key's 32 bytes.
func KeyID(pub ed25519.PublicKey) string {
	h := sha256.Sum256(pub)
	return keyIDPrefix + hex.EncodeToString(h[:8])
}

const keyIDPrefix = "ed25519:sha256:"

// IsKeyID reports whether s has the form KeyID gives: "ed25519:sha256:"
// and 16 lowercase hex digits. The gate checks the signers its state
// records with it.
func IsKeyID(s string) bool {
	h, ok := strings.CutPrefix(s, keyIDPrefix)
	if !ok || len(h) != 16 {
		return false
	}
	for _, c := range []byte(h) {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// keyHex is the full sha256 of pub in hex: a signature's name in the
// store.
func keyHex(pub ed25519.PublicKey) string {
	h := sha256.Sum256(pub)
	return hex.EncodeToString(h[:])
}

func truncate(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}
