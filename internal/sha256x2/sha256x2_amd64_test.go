//go:build amd64 && !purego

package sha256x2

import (
	"crypto/sha256"
	"testing"
)

// TestSum2WithoutSHANI: on a CPU without the SHA extensions Sum2 is
// crypto/sha256 twice.
func TestSum2WithoutSHANI(t *testing.T) {
	defer func(v bool) { useSHANI = v }(useSHANI)
	useSHANI = false
	a, b := []byte("sp.tuple.v1\x00"), make([]byte, 200)
	da, db := Sum2(a, b)
	if da != sha256.Sum256(a) || db != sha256.Sum256(b) {
		t.Fatal("Sum2 without SHA-NI differs from crypto/sha256")
	}
}
