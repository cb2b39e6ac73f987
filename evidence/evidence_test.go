package evidence_test

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shardproof/shardproof/evidence"
	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
)

func sum(s string) manifest.Digest { return sha256.Sum256([]byte(s)) }

// goldenKey is the key of the vectors: the seed 0x00, 0x01, … 0x1f.
func goldenKey() ed25519.PrivateKey {
	seed := make([]byte, 32)
	for i := range seed {
		seed[i] = byte(i)
	}
	return ed25519.NewKeyFromSeed(seed)
}

func goldenReport() *evidence.Report {
	return &evidence.Report{
		Root: sum("release"), Shards: []manifest.Digest{sum("shard-0"), sum("shard-1")},
		Digest: sum("report"), Verdict: manifest.Verified, DatasetSnapshot: sum("snapshot"),
		TombstoneWatermark: 7, BenchmarkFence: 3,
	}
}

func goldenRecheck() *evidence.Recheck {
	return &evidence.Recheck{Root: sum("release"), Kind: "tombstone", Value: 9, Report: sum("recheck-report"), Hits: 2}
}

// TestGoldenVectors pins the encoding and the signatures docs/FORMATS.md
// ("Evidence signatures") gives. The values were computed from that text
// by an independent implementation (Python, struct.pack and the
// cryptography package's Ed25519), not by this package.
func TestGoldenVectors(t *testing.T) {
	key := goldenKey()
	pub := key.Public().(ed25519.PublicKey)
	if got, want := evidence.FormatPrivateKey(key), "ed25519-private:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="; got != want {
		t.Errorf("private key text %s, want %s", got, want)
	}
	if got, want := evidence.FormatPublicKey(pub), "ed25519:A6EHv/POEL4dcN0Y50vAmWfk1jCbpQ1fHdyGZBJVMbg="; got != want {
		t.Errorf("public key text %s, want %s", got, want)
	}
	if got, want := evidence.KeyID(pub), "ed25519:sha256:56475aa75463474c"; got != want {
		t.Errorf("key ID %s, want %s", got, want)
	}

	rep := goldenReport().Message()
	if len(rep) != 269 {
		t.Errorf("report message is %d bytes, want 269", len(rep))
	}
	if got, want := evidence.MessageDigest(rep).Hex(), "4fc42070c4a03f6e531f7c39e8cedeaa936bee38c5e5219f303127663e18697f"; got != want {
		t.Errorf("report message sha256 %s, want %s", got, want)
	}
	if got, want := evidence.Sign(key, rep).Sig, "eRToZ/hlQYKtfL0KZKdpleVHJCbNYdxzWuKGOAqG2+J63vLOnSEyuvcCblerWG8ZAFcdjYtKdhMQn22DZ0IDDA=="; got != want {
		t.Errorf("report signature %s, want %s", got, want)
	}

	rec := goldenRecheck().Message()
	const recHex = "73702e65766964656e63652e763100" + // "sp.evidence.v1\x00"
		"0000000000000007" + "7265636865636b" + // "recheck"
		"0000000000000020" + "a4d451ec23463726f72c43d64c710968f6b602cd653b4de8adee1b556240a829" + // root
		"0000000000000009" + "746f6d6273746f6e65" + // "tombstone"
		"0000000000000008" + "0000000000000009" + // value 9
		"0000000000000020" + "1e2be85e0cdb6f3e3ff3a76620a672d93c1886631c21a7b92556191ca3d456bb" + // report
		"0000000000000008" + "0000000000000002" // hits 2
	if got := hex.EncodeToString(rec); got != recHex {
		t.Errorf("recheck message\n got %s\nwant %s", got, recHex)
	}
	if got, want := evidence.Sign(key, rec).Sig, "xbbW7d2g/zLyurf7FEg/i/Uh6jR9udh3kEhGJcgeduhCXXyNHxdCnthiE6tFnyjiEg8neJmarN0FxR8UJ1vYBA=="; got != want {
		t.Errorf("recheck signature %s, want %s", got, want)
	}
	if got, want := evidence.StoreKey(rec, pub), "index/evidence/e39841967a6e3cd812df8447d399d11ceeccb3362e49f18756a7b4f7c9c941bc/56475aa75463474c0285df5dbf2bcab73da651358839e9b77481b2eab107708c"; got != want {
		t.Errorf("store key %s, want %s", got, want)
	}
}

// TestEveryFieldIsSigned: a signature made for the golden evidence does
// not verify once any one field changes, nor as the other kind's.
func TestEveryFieldIsSigned(t *testing.T) {
	key := goldenKey()
	sig := evidence.Sign(key, goldenReport().Message())
	for name, change := range map[string]func(r *evidence.Report){
		"root":      func(r *evidence.Report) { r.Root = sum("other") },
		"shards":    func(r *evidence.Report) { r.Shards = r.Shards[:1] },
		"shard":     func(r *evidence.Report) { r.Shards[1] = sum("other") },
		"order":     func(r *evidence.Report) { r.Shards[0], r.Shards[1] = r.Shards[1], r.Shards[0] },
		"digest":    func(r *evidence.Report) { r.Digest = sum("other") },
		"verdict":   func(r *evidence.Report) { r.Verdict = manifest.Invalid },
		"snapshot":  func(r *evidence.Report) { r.DatasetSnapshot = sum("other") },
		"tombstone": func(r *evidence.Report) { r.TombstoneWatermark++ },
		"benchmark": func(r *evidence.Report) { r.BenchmarkFence++ },
		"tHits":     func(r *evidence.Report) { r.TombstoneHits = -1 },
		"bHits":     func(r *evidence.Report) { r.BenchmarkHits = 1 },
	} {
		r := goldenReport()
		change(r)
		if err := sig.Verify(r.Message()); errcode.Of(err) != errcode.EvidenceSignatureInvalid {
			t.Errorf("report with %s changed: %v, want EVIDENCE_SIGNATURE_INVALID", name, err)
		}
	}
	rsig := evidence.Sign(key, goldenRecheck().Message())
	for name, change := range map[string]func(r *evidence.Recheck){
		"root":   func(r *evidence.Recheck) { r.Root = sum("other") },
		"kind":   func(r *evidence.Recheck) { r.Kind = "benchmark" },
		"value":  func(r *evidence.Recheck) { r.Value++ },
		"report": func(r *evidence.Recheck) { r.Report = sum("other") },
		"hits":   func(r *evidence.Recheck) { r.Hits = 0 },
	} {
		r := goldenRecheck()
		change(r)
		if err := rsig.Verify(r.Message()); errcode.Of(err) != errcode.EvidenceSignatureInvalid {
			t.Errorf("recheck with %s changed: %v, want EVIDENCE_SIGNATURE_INVALID", name, err)
		}
	}
	// A field's bytes cannot slide into its neighbour: "ab"+"c" and
	// "a"+"bc" differ once length-prefixed.
	a := &evidence.Recheck{Kind: "tomb", Value: 1}
	if err := evidence.Sign(key, a.Message()).Verify((&evidence.Recheck{Kind: "tom", Value: 1}).Message()); err == nil {
		t.Error("kinds of different lengths give one message")
	}
	if err := sig.Verify(goldenRecheck().Message()); err == nil {
		t.Error("a report's signature verifies over a recheck")
	}
}

func TestTrustedCheck(t *testing.T) {
	key := goldenKey()
	_, other, _ := ed25519.GenerateKey(nil)
	trusted, err := evidence.NewTrusted(key.Public().(ed25519.PublicKey))
	if err != nil {
		t.Fatal(err)
	}
	msg := goldenRecheck().Message()
	good := evidence.Sign(key, msg)
	foreign := evidence.Sign(other, msg)
	changed := goldenRecheck()
	changed.Hits = 0
	for _, c := range []struct {
		name string
		msg  []byte
		sigs []evidence.Signature
		want errcode.Code
	}{
		{"signed", msg, []evidence.Signature{good}, ""},
		{"signed beside a foreign key", msg, []evidence.Signature{foreign, good}, ""},
		{"unsigned", msg, nil, errcode.EvidenceUnsigned},
		{"foreign key only", msg, []evidence.Signature{foreign}, errcode.EvidenceUnsigned},
		{"field changed", changed.Message(), []evidence.Signature{good}, errcode.EvidenceSignatureInvalid},
		{"field changed, foreign key", changed.Message(), []evidence.Signature{foreign}, errcode.EvidenceUnsigned},
		{"sig not base64", msg, []evidence.Signature{{Key: good.Key, Sig: "!!"}}, errcode.EvidenceSignatureInvalid},
		{"sig short", msg, []evidence.Signature{{Key: good.Key, Sig: base64.StdEncoding.EncodeToString(make([]byte, 63))}}, errcode.EvidenceSignatureInvalid},
		{"sig empty", msg, []evidence.Signature{{Key: good.Key}}, errcode.EvidenceSignatureInvalid},
		{"key no prefix", msg, []evidence.Signature{{Key: strings.TrimPrefix(good.Key, "ed25519:"), Sig: good.Sig}}, errcode.EvidenceSignatureInvalid},
		{"key short", msg, []evidence.Signature{{Key: "ed25519:AAAA", Sig: good.Sig}}, errcode.EvidenceSignatureInvalid},
		{"key empty", msg, []evidence.Signature{{Sig: good.Sig}}, errcode.EvidenceSignatureInvalid},
		{"too many", msg, slices17(good), errcode.BadInput},
	} {
		err := trusted.Check(c.msg, c.sigs, "recheck")
		if errcode.Of(err) != c.want && !(c.want == "" && err == nil) {
			t.Errorf("%s: %v, want %s", c.name, err, c.want)
		}
	}
}

// TestTrustedSigners: Signers names the trusted keys whose signatures
// verified, sorted and each once, and never a key the set does not
// trust; it refuses what Check refuses, naming no signer.
func TestTrustedSigners(t *testing.T) {
	a, b := goldenKey(), ed25519.NewKeyFromSeed(bytes.Repeat([]byte{7}, 32))
	_, other, _ := ed25519.GenerateKey(nil)
	pa, pb := a.Public().(ed25519.PublicKey), b.Public().(ed25519.PublicKey)
	trusted, err := evidence.NewTrusted(pa, pb)
	if err != nil {
		t.Fatal(err)
	}
	msg := goldenReport().Message()
	ids := []string{evidence.KeyID(pa), evidence.KeyID(pb)}
	if ids[0] > ids[1] {
		ids[0], ids[1] = ids[1], ids[0]
	}
	for _, c := range []struct {
		name string
		sigs []evidence.Signature
		want []string
	}{
		{"one key", []evidence.Signature{evidence.Sign(a, msg)}, []string{evidence.KeyID(pa)}},
		{"beside a foreign key", []evidence.Signature{evidence.Sign(other, msg), evidence.Sign(b, msg)}, []string{evidence.KeyID(pb)}},
		{"both, twice each, either order", []evidence.Signature{evidence.Sign(b, msg), evidence.Sign(a, msg), evidence.Sign(b, msg), evidence.Sign(a, msg)}, ids},
	} {
		got, err := trusted.Signers(msg, c.sigs, "report")
		if err != nil || strings.Join(got, ",") != strings.Join(c.want, ",") {
			t.Errorf("%s: signers %v, %v; want %v", c.name, got, err, c.want)
		}
	}
	if got, err := trusted.Signers(msg, []evidence.Signature{evidence.Sign(other, msg)}, "report"); errcode.Of(err) != errcode.EvidenceUnsigned || got != nil {
		t.Errorf("foreign key only: signers %v, %v; want none and EVIDENCE_UNSIGNED", got, err)
	}
	if got, err := trusted.Signers(goldenRecheck().Message(), []evidence.Signature{evidence.Sign(a, msg)}, "recheck"); errcode.Of(err) != errcode.EvidenceSignatureInvalid || got != nil {
		t.Errorf("a report's signature over a recheck: signers %v, %v; want none and EVIDENCE_SIGNATURE_INVALID", got, err)
	}
}

func slices17(s evidence.Signature) []evidence.Signature {
	out := make([]evidence.Signature, evidence.MaxSignatures+1)
	for i := range out {
		out[i] = s
	}
	return out
}

func TestKeyFiles(t *testing.T) {
	dir := t.TempDir()
	priv, pub := filepath.Join(dir, "v.key"), filepath.Join(dir, "v.pub")
	pk, err := evidence.GenerateKeyFiles(priv, pub)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(priv); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("private key file: %v, mode %v; want 0600", err, fi.Mode())
	}
	key, err := evidence.LoadPrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	if !key.Public().(ed25519.PublicKey).Equal(pk) {
		t.Fatal("the private key loaded is not the pair's")
	}
	before, _ := os.ReadFile(priv)
	if _, err := evidence.GenerateKeyFiles(priv, filepath.Join(dir, "w.pub")); errcode.Of(err) != errcode.Usage {
		t.Fatalf("generate over an existing private key file: %v, want USAGE", err)
	}
	if _, err := evidence.GenerateKeyFiles(filepath.Join(dir, "w.key"), pub); errcode.Of(err) != errcode.Usage {
		t.Fatalf("generate over an existing public key file: %v, want USAGE", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "w.key")); !os.IsNotExist(err) {
		t.Fatalf("a private key file was left behind by a refused generate: %v", err)
	}
	if after, _ := os.ReadFile(priv); !bytes.Equal(before, after) {
		t.Fatal("a key file was overwritten")
	}
	// The public file is a line of a trusted-keys file.
	pubText, _ := os.ReadFile(pub)
	keys := filepath.Join(dir, "verifiers")
	os.WriteFile(keys, []byte("# verifiers\n\n"+strings.TrimSpace(string(pubText))+"  # nightly verifier\n"), 0o644)
	tr, err := evidence.LoadTrusted(keys)
	if err != nil {
		t.Fatal(err)
	}
	if ids := tr.IDs(); len(ids) != 1 || ids[0] != evidence.KeyID(pk) {
		t.Fatalf("trusted IDs %v, want [%s]", ids, evidence.KeyID(pk))
	}

	for name, text := range map[string]string{
		"empty":        "",
		"comments":     "# none\n",
		"private":      evidence.FormatPrivateKey(key) + "\n",
		"bad base64":   "ed25519:not-base64\n",
		"short":        "ed25519:AAAA\n",
		"other scheme": "ssh-ed25519 AAAAC3Nza\n",
		"two per line": string(pubText[:len(pubText)-1]) + " " + string(pubText),
	} {
		p := filepath.Join(dir, "bad-"+strings.ReplaceAll(name, " ", "-"))
		os.WriteFile(p, []byte(text), 0o644)
		if _, err := evidence.LoadTrusted(p); errcode.Of(err) != errcode.Usage {
			t.Errorf("verifier keys file %s: %v, want USAGE", name, err)
		} else if line := strings.TrimSpace(text); line != "" && !strings.HasPrefix(line, "#") && strings.Contains(err.Error(), line[8:]) {
			// A gate logs a reload's error: never a line's text.
			t.Errorf("verifier keys file %s: the error shows the line: %v", name, err)
		}
		if name == "private" {
			continue
		}
		if _, err := evidence.LoadPrivateKey(p); errcode.Of(err) != errcode.Usage {
			t.Errorf("signing key file %s: %v, want USAGE", name, err)
		} else if strings.Contains(err.Error(), "AAEC") {
			t.Errorf("signing key file %s: the error shows the file's bytes: %v", name, err)
		}
	}
	if _, err := evidence.LoadTrusted(filepath.Join(dir, "missing")); errcode.Of(err) != errcode.Usage {
		t.Errorf("missing verifier keys file: %v, want USAGE", err)
	}
}

// BenchmarkCheckLargeRegister is what the gate spends admitting the
// register of a release of 200,000 shards (6.4 MB of shard digests,
// hashed into a 269-byte message): encoding and one signature check.
func BenchmarkCheckLargeRegister(b *testing.B) {
	key := goldenKey()
	r := goldenReport()
	r.Shards = make([]manifest.Digest, 200_000)
	for i := range r.Shards {
		r.Shards[i] = sum(string(rune(i)))
	}
	tr, _ := evidence.NewTrusted(key.Public().(ed25519.PublicKey))
	sigs := []evidence.Signature{evidence.Sign(key, r.Message())}
	b.ResetTimer()
	for b.Loop() {
		if err := tr.Check(r.Message(), sigs, "register"); err != nil {
			b.Fatal(err)
		}
	}
}

// IsKeyID takes what KeyID gives and nothing else: the gate's state
// records signers by it.
func TestIsKeyID(t *testing.T) {
	if id := evidence.KeyID(goldenKey().Public().(ed25519.PublicKey)); !evidence.IsKeyID(id) {
		t.Fatalf("IsKeyID(%s) false", id)
	}
	for _, s := range []string{"", "ed25519:sha256:", "ed25519:sha256:56475aa75463474", "ed25519:sha256:56475aa75463474c0",
		"ed25519:sha256:56475AA75463474C", "ed25519:sha256:56475aa75463474g", "ED25519:sha256:56475aa75463474c",
		"ed25519:A6EHv/POEL4dcN0Y50vAmWfk1jCbpQ1fHdyGZBJVMbg=", " ed25519:sha256:56475aa75463474c"} {
		if evidence.IsKeyID(s) {
			t.Errorf("IsKeyID(%q) true", s)
		}
	}
}
