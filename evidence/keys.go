package evidence

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"io"
	"io/fs"
	"os"
	"slices"
	"strings"

	"github.com/shardproof/shardproof/internal/errcode"
)

// maxKeyFile bounds what a key file may hold (a trusted-keys file lists
// some keys and comments).
const maxKeyFile = 1 << 20

// GenerateKeyFiles makes a key pair and writes the private key to
// privPath (mode 0600) and the public key to pubPath (0644), each as one
// line of its text form. Both are created exclusively: an existing file
// is never overwritten (USAGE), and a private file written before the
// public one failed is removed again.
func GenerateKeyFiles(privPath, pubPath string) (ed25519.PublicKey, error) {
	if privPath == "" || pubPath == "" || privPath == pubPath {
		return nil, errcode.New(errcode.Usage, "a key pair takes two distinct files, --private and --public")
	}
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, errcode.Wrap(errcode.Internal, err, "generate key")
	}
	if err := writeExclusive(privPath, FormatPrivateKey(priv)+"\n", 0o600); err != nil {
		return nil, err
	}
	if err := writeExclusive(pubPath, FormatPublicKey(pub)+"\n", 0o644); err != nil {
		os.Remove(privPath)
		return nil, err
	}
	return pub, nil
}

// writeExclusive creates path (never one that exists), writes s and
// syncs it.
func writeExclusive(path, s string, mode fs.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		if errors.Is(err, fs.ErrExist) {
			return errcode.New(errcode.Usage, "%s exists; a key file is never overwritten", path)
		}
		return errcode.Wrap(errcode.Usage, err, "create key file")
	}
	_, err = io.WriteString(f, s)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return errcode.Wrap(errcode.IO, err, "write key file %s", path)
	}
	return nil
}

// readKeyFile reads a small key file: USAGE when it cannot be read or
// is larger than maxKeyFile.
func readKeyFile(path, what string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, errcode.Wrap(errcode.Usage, err, "%s", what)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxKeyFile+1))
	if err != nil {
		return nil, errcode.Wrap(errcode.Usage, err, "read %s %s", what, path)
	}
	if len(b) > maxKeyFile {
		return nil, errcode.New(errcode.Usage, "%s %s is larger than %d bytes", what, path, maxKeyFile)
	}
	return b, nil
}

// LoadPrivateKey reads a private key file GenerateKeyFiles wrote: one
// line "ed25519-private:<base64>". Anything else is USAGE; the error
// never holds the file's bytes.
func LoadPrivateKey(path string) (ed25519.PrivateKey, error) {
	b, err := readKeyFile(path, "signing key file")
	if err != nil {
		return nil, err
	}
	priv, err := ParsePrivateKey(string(bytes.TrimSpace(b)))
	if err != nil {
		return nil, errcode.Wrap(errcode.Usage, err, "signing key file %s", path)
	}
	return priv, nil
}

// Trusted is the set of verifier public keys a gate accepts evidence
// signatures of.
type Trusted struct {
	keys map[string]ed25519.PublicKey // by text form
	ids  []string                     // KeyIDs, sorted
}

// NewTrusted returns the set of keys (at least one).
func NewTrusted(keys ...ed25519.PublicKey) (*Trusted, error) {
	if len(keys) == 0 {
		return nil, errcode.New(errcode.Usage, "no verifier key")
	}
	t := &Trusted{keys: map[string]ed25519.PublicKey{}}
	for _, k := range keys {
		if len(k) != ed25519.PublicKeySize {
			return nil, errcode.New(errcode.Usage, "verifier key of %d bytes, want %d", len(k), ed25519.PublicKeySize)
		}
		s := FormatPublicKey(k)
		if _, dup := t.keys[s]; dup {
			continue
		}
		t.keys[s] = slices.Clone(k)
		t.ids = append(t.ids, KeyID(k))
	}
	slices.Sort(t.ids)
	return t, nil
}

// LoadTrusted reads a verifier keys file: one public key a line in its
// text form ("ed25519:<base64>"), blank lines, and comments from "#" to
// the end of a line. A line that holds anything else, and a file with
// no key, are USAGE, naming the line by its number, never by its text.
func LoadTrusted(path string) (*Trusted, error) {
	b, err := readKeyFile(path, "verifier keys file")
	if err != nil {
		return nil, err
	}
	var keys []ed25519.PublicKey
	for i, line := range strings.Split(string(b), "\n") {
		line, _, _ = strings.Cut(line, "#")
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		k, err := ParsePublicKey(line)
		if err != nil {
			// Never the line's text: a gate logs a reload's error, and
			// a line may be a private key pasted by mistake.
			if strings.HasPrefix(line, PrivatePrefix) {
				return nil, errcode.New(errcode.Usage, "verifier keys file %s, line %d holds a private key: a gate takes public keys (the --public file of `shardproof keys generate`); remove it, and take the key for exposed", path, i+1)
			}
			return nil, errcode.New(errcode.Usage, "verifier keys file %s, line %d is not a public key (\"%s<base64 of %d bytes>\", one a line)", path, i+1, PublicPrefix, ed25519.PublicKeySize)
		}
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return nil, errcode.New(errcode.Usage, "verifier keys file %s lists no key (one \"%s<base64>\" a line, as `shardproof keys generate` writes it)", path, PublicPrefix)
	}
	return NewTrusted(keys...)
}

// IDs returns the KeyIDs of the trusted keys, sorted.
func (t *Trusted) IDs() []string { return slices.Clone(t.ids) }

// Check admits evidence: what names the evidence in errors. sigs must
// hold at most MaxSignatures (BAD_INPUT), each well formed
// (EVIDENCE_SIGNATURE_INVALID), and at least one by a trusted key
// (EVIDENCE_UNSIGNED); every signature by a trusted key must verify over
// msg (EVIDENCE_SIGNATURE_INVALID: the fields were changed after
// signing, or the signature was made for other evidence). Signatures by
// other keys are not verified.
func (t *Trusted) Check(msg []byte, sigs []Signature, what string) error {
	_, err := t.Signers(msg, sigs, what)
	return err
}

// Signers is Check that also says who vouched for the evidence it
// admits: the KeyIDs of the trusted keys whose signatures verified over
// msg, sorted, each once.
func (t *Trusted) Signers(msg []byte, sigs []Signature, what string) ([]string, error) {
	if len(sigs) > MaxSignatures {
		return nil, errcode.New(errcode.BadInput, "%s carries %d signatures, at most %d", what, len(sigs), MaxSignatures)
	}
	var good []string
	var others []string
	for _, s := range sigs {
		pub, sig, err := s.Parse()
		if err != nil {
			return nil, errcode.Wrap(errcode.EvidenceSignatureInvalid, err, "%s", what)
		}
		if _, ok := t.keys[FormatPublicKey(pub)]; !ok {
			others = append(others, KeyID(pub))
			continue
		}
		if !ed25519.Verify(pub, msg, sig) {
			return nil, errcode.New(errcode.EvidenceSignatureInvalid, "%s: the signature by %s does not verify over the fields sent (changed since signed, or made for other evidence)", what, KeyID(pub))
		}
		good = append(good, KeyID(pub))
	}
	if len(good) > 0 {
		slices.Sort(good)
		return slices.Compact(good), nil
	}
	if len(others) > 0 {
		return nil, errcode.New(errcode.EvidenceUnsigned, "%s is signed only by keys this gate does not trust (%s); it trusts %s", what, strings.Join(others, ", "), strings.Join(t.ids, ", "))
	}
	return nil, errcode.New(errcode.EvidenceUnsigned, "%s carries no verifier signature; this gate requires one by %s (verify --sign-key, or --sign-key where it is registered)", what, strings.Join(t.ids, ", "))
}
