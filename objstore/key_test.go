package objstore

import (
	"errors"
	"strings"
	"testing"
)

func TestValidateKey(t *testing.T) {
	good := []string{"a", "a/b", "blobs/sha256/" + strings.Repeat("f", 64), "a.b", "..a", "a@b", "ünï/cødé", strings.Repeat("k/", 511) + "k"}
	bad := []string{"", "/a", "a/", "a//b", ".", "..", "../x", "a/../../b", "a/./b", "@tmp", "a/@1", "a\\b", "a\x00", "\xff\xfe",
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
	for _, p := range []string{"/", "/a", "../", "a//", "a/../b", "\x00"} {
		if err := ValidatePrefix(p); !errors.Is(err, ErrBadKey) {
			t.Errorf("ValidatePrefix(%q) = %v, want BAD_KEY", p, err)
		}
	}
}
