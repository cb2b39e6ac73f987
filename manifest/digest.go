package manifest

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/shardproof/shardproof/internal/errcode"
)

// Digest is a sha256 digest. Its string form is "sha256:" followed by 64
// lowercase hex digits; parsing rejects anything else.
type Digest [32]byte

const digestPrefix = "sha256:"

// Sum returns the Digest of b.
func Sum(b []byte) Digest { return sha256.Sum256(b) }

// ParseDigest parses the strict string form.
func ParseDigest(s string) (Digest, error) {
	var d Digest
	if len(s) != len(digestPrefix)+64 || s[:len(digestPrefix)] != digestPrefix {
		return d, errcode.New(errcode.BadDigest, "%q is not sha256:<64 lowercase hex>", truncate(s))
	}
	h := s[len(digestPrefix):]
	for i := range d {
		hi, ok1 := lowerHex(h[2*i])
		lo, ok2 := lowerHex(h[2*i+1])
		if !ok1 || !ok2 {
			return Digest{}, errcode.New(errcode.BadDigest, "%q is not sha256:<64 lowercase hex>", truncate(s))
		}
		d[i] = hi<<4 | lo
	}
	return d, nil
}

// lowerHex decodes one lowercase hex digit; upper case is not canonical.
func lowerHex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}

// MustParseDigest is ParseDigest for constants in tests; it panics on error.
func MustParseDigest(s string) Digest {
	d, err := ParseDigest(s)
	if err != nil {
		panic(err)
	}
	return d
}

func truncate(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}

// String returns "sha256:<hex>".
func (d Digest) String() string { return digestPrefix + hex.EncodeToString(d[:]) }

// Hex returns the 64 hex digits without the algorithm prefix.
func (d Digest) Hex() string { return hex.EncodeToString(d[:]) }

// IsZero reports whether d is the zero value (no digest).
func (d Digest) IsZero() bool { return d == Digest{} }

// MarshalText implements encoding.TextMarshaler.
func (d Digest) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler with strict parsing.
func (d *Digest) UnmarshalText(b []byte) error {
	p, err := ParseDigest(string(b))
	if err != nil {
		return err
	}
	*d = p
	return nil
}

// UnmarshalJSON rejects anything but a JSON string in the strict form.
func (d *Digest) UnmarshalJSON(b []byte) error {
	// Fast path for the form Encode writes: a quoted string without escapes.
	if len(b) >= 2 && b[0] == '"' && b[len(b)-1] == '"' && bytes.IndexByte(b, '\\') < 0 {
		return d.UnmarshalText(b[1 : len(b)-1])
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return errcode.New(errcode.BadDigest, "digest must be a JSON string")
	}
	return d.UnmarshalText([]byte(s))
}

// BlobKey returns the store key of content-addressed bytes with digest d.
func (d Digest) BlobKey() string { return "blobs/sha256/" + d.Hex() }

// Format implements fmt.Formatter so %v and %s print the string form.
func (d Digest) Format(f fmt.State, verb rune) { fmt.Fprint(f, d.String()) }
