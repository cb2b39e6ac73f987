package manifest

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"

	"github.com/shardproof/shardproof/internal/errcode"
)

func TestParseDigest(t *testing.T) {
	sum := sha256.Sum256([]byte("abc"))
	good := "sha256:" + hex.EncodeToString(sum[:])
	d, err := ParseDigest(good)
	if err != nil || d != Digest(sum) || d.String() != good || d.Hex() != good[7:] {
		t.Fatalf("ParseDigest(%q) = %v, %v", good, d, err)
	}
	if d.BlobKey() != "blobs/sha256/"+good[7:] {
		t.Fatalf("BlobKey = %q", d.BlobKey())
	}
	for _, bad := range []string{
		"", "sha256:", good[7:], "SHA256:" + good[7:], strings.ToUpper(good), good[:70] + "A" + good[71:],
		good[:len(good)-1], good + "0", good[:70] + "g" + good[71:], "sha512:" + good[7:], " " + good, good + "\n",
		"sha256:" + strings.Repeat("0", 63) + "\x00", "sha256:" + strings.Repeat("é", 32),
	} {
		if _, err := ParseDigest(bad); errcode.Of(err) != errcode.BadDigest {
			t.Errorf("ParseDigest(%q): %v, want BAD_DIGEST", bad, err)
		}
	}
	var viaJSON struct{ D Digest }
	if err := json.Unmarshal([]byte(`{"D":"`+good+`"}`), &viaJSON); err != nil || viaJSON.D != d {
		t.Fatalf("UnmarshalJSON: %v", err)
	}
	// The escaped spelling of the same string decodes through the slow path.
	escaped := `{"D":"\u0073ha256:` + good[7:] + `"}`
	if err := json.Unmarshal([]byte(escaped), &viaJSON); err != nil || viaJSON.D != d {
		t.Fatalf("UnmarshalJSON with an escape: %v", err)
	}
	for _, bad := range []string{`{"D":1}`, `{"D":"` + strings.ToUpper(good) + `"}`} {
		if err := json.Unmarshal([]byte(bad), &viaJSON); errcode.Of(err) != errcode.BadDigest {
			t.Errorf("UnmarshalJSON(%s): %v, want BAD_DIGEST", bad, err)
		}
	}
}

// FuzzParseDigest: a string is accepted exactly when it is the canonical
// String() of the digest it parses to.
func FuzzParseDigest(f *testing.F) {
	f.Add(Sum(nil).String())
	f.Add(strings.ToUpper(Sum(nil).String()))
	f.Add("sha256:xyz")
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseDigest(s)
		if err != nil {
			if errcode.Of(err) != errcode.BadDigest {
				t.Fatalf("code %s", errcode.Of(err))
			}
			if len(s) == 71 && strings.HasPrefix(s, "sha256:") {
				if _, herr := hex.DecodeString(s[7:]); herr == nil && strings.ToLower(s) == s {
					t.Fatalf("rejected canonical %q", s)
				}
			}
			return
		}
		if d.String() != s {
			t.Fatalf("accepted %q, canonical form %q", s, d.String())
		}
	})
}
