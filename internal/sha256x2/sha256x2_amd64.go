//go:build amd64 && !purego

package sha256x2

import "golang.org/x/sys/cpu"

// useSHANI is what crypto/sha256 requires for its SHA-NI code: AVX
// (enabled by the OS), SSE4.1, SSSE3 and the SHA extensions (CPUID leaf
// 7, EBX bit 29).
var useSHANI = cpu.X86.HasAVX && cpu.X86.HasSSE41 && cpu.X86.HasSSSE3 && hasSHA()

func hasSHA() bool {
	if max, _, _, _ := cpuid(0, 0); max < 7 {
		return false
	}
	_, ebx, _, _ := cpuid(7, 0)
	return ebx&(1<<29) != 0
}

func cpuid(leaf, sub uint32) (eax, ebx, ecx, edx uint32)

// block1 hashes n 64-byte blocks at p into s.
//
//go:noescape
func block1(s *[8]uint32, p *byte, n int)

// block2 hashes n blocks at pa into a and n blocks at pb into b.
//
//go:noescape
func block2(a, b *[8]uint32, pa, pb *byte, n int)
