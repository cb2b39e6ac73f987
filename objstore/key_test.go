package objstore

import (
	"errors"
	"io/fs"
	"path"
	"path/filepath"
	"strings"
	"testing"
)

func TestValidateKey(t *testing.T) {
	good := []string{"a", "a/b", "blobs/sha256/" + strings.Repeat("f", 64), "a.b", "..a", "a@b", "ünï/cødé", strings.Repeat("k/", 511) + "k",
		"a b/c+d%20e?f#g&h'i\"j<k>", "a\x7fb", "a\u0085b", "a\ufffdb"}
	bad := []string{"", "/a", "a/", "a//b", ".", "..", "../x", "a/../../b", "a/./b", "@tmp", "a/@1", "a\\b", "a\x00", "\xff\xfe",
		"a\x01b", "a\tb", "a/b\n", "a\rb", "a\x1f", "a\ufffeb", "a/\uffff",
		strings.Repeat("k", 256), strings.Repeat("k/", 512) + "k"}
	for _, k := range good {
		if err := ValidateKey(k); err != nil {
			t.Errorf("ValidateKey(%q) = %v, want ok", k, err)
		}
	}
	for _, k := range bad {
		err := ValidateKey(k)
		var ke *KeyError
		if !errors.As(err, &ke) || !errors.Is(err, ErrBadKey) {
			t.Errorf("ValidateKey(%q) = %v, want *KeyError", k, err)
		}
	}
}

func TestValidatePrefix(t *testing.T) {
	for _, p := range []string{"", "a", "a/", "blobs/sha256/ab", "@"} {
		if err := ValidatePrefix(p); err != nil {
			t.Errorf("ValidatePrefix(%q) = %v", p, err)
		}
	}
	for _, p := range []string{"/", "/a", "../", "a//", "a/../b", "\x00", "a\n", "a/b\x01", "a\tb/c", "\uffff"} {
		if err := ValidatePrefix(p); !errors.Is(err, ErrBadKey) {
			t.Errorf("ValidatePrefix(%q) = %v, want BAD_KEY", p, err)
		}
	}
}

// A key ValidateKey accepts is already clean and, joined to any root, stays
// inside it.
func FuzzValidateKey(f *testing.F) {
	for _, s := range []string{"a", "a/b", "../x", "a/../../b", "/abs", "a//b", "@tmp", "a/.", "ü/ß", "a\\b", "\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		if ValidateKey(key) != nil {
			return
		}
		if path.Clean(key) != key || path.IsAbs(key) || !fs.ValidPath(key) {
			t.Fatalf("accepted unclean key %q", key)
		}
		root := "/store/root"
		if j := filepath.Join(root, key); !strings.HasPrefix(j, root+"/") {
			t.Fatalf("accepted key %q escapes to %q", key, j)
		}
		for _, seg := range strings.Split(key, "/") {
			if strings.HasPrefix(seg, "@") {
				t.Fatalf("accepted reserved segment in %q", key)
			}
		}
	})
}
