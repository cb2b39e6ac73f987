package objstore

import (
	"strings"
	"unicode/utf8"
)

// Key limits shared by every implementation, so a key valid in one store is
// valid in all of them.
const (
	MaxKeyLen     = 1024 // bytes
	MaxSegmentLen = 255  // bytes; a file system's name limit
)

// ValidateKey reports whether key may name an object in any Store. A key is
// a slash-separated relative path: non-empty, at most MaxKeyLen bytes, valid
// UTF-8, no leading '/', no empty, "." or ".." segment (so it can never
// escape a root or alias another key), no segment longer than MaxSegmentLen
// or starting with '@' (reserved for implementations' own files), no
// backslash, and no control character (U+0000 to U+001F) or U+FFFE or
// U+FFFF: XML 1.0 cannot carry those, so an S3 listing (ListObjectsV2,
// ListObjectVersions) mangled or dropped such a key, which was then never
// listed nor deleted, and tabs and newlines broke `store ls`. The error
// is a *KeyError (code BAD_KEY).
func ValidateKey(key string) error {
	bad := func(reason string) error { return &KeyError{Key: key, Reason: reason} }
	switch {
	case key == "":
		return bad("empty")
	case len(key) > MaxKeyLen:
		return bad("longer than 1024 bytes")
	case !utf8.ValidString(key):
		return bad("not valid UTF-8")
	case strings.HasPrefix(key, "/"):
		return bad("leading '/'")
	case strings.ContainsRune(key, '\\'):
		return bad("contains a backslash")
	case strings.ContainsFunc(key, badRune):
		return bad("contains a control character, U+FFFE or U+FFFF")
	}
	for seg := range strings.SplitSeq(key, "/") {
		switch {
		case seg == "":
			return bad("empty segment")
		case seg == "." || seg == "..":
			return bad("'.' or '..' segment")
		case seg[0] == '@':
			return bad("segment starts with '@'")
		case len(seg) > MaxSegmentLen:
			return bad("segment longer than 255 bytes")
		}
	}
	return nil
}

// badRune reports a rune no key or prefix may hold: a control character
// (NUL included) or one of the two that XML 1.0 excludes.
func badRune(r rune) bool { return r < 0x20 || r == 0xFFFE || r == 0xFFFF }

// ValidatePrefix reports whether prefix may be given to List: empty, or a
// key prefix that does not start with '/' and holds no '.'/'..'/'@'-leading
// or empty segment before its last '/'. The last, partial segment is only
// checked for forbidden bytes.
func ValidatePrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	i := strings.LastIndexByte(prefix, '/')
	if i < 0 {
		if strings.ContainsRune(prefix, '\\') || strings.ContainsFunc(prefix, badRune) || !utf8.ValidString(prefix) {
			return &KeyError{Key: prefix, Reason: "invalid prefix"}
		}
		return nil
	}
	if err := ValidateKey(prefix[:i]); err != nil {
		return &KeyError{Key: prefix, Reason: "invalid prefix: " + err.(*KeyError).Reason}
	}
	if rest := prefix[i+1:]; strings.ContainsRune(rest, '\\') || strings.ContainsFunc(rest, badRune) || !utf8.ValidString(rest) {
		return &KeyError{Key: prefix, Reason: "invalid prefix"}
	}
	return nil
}
