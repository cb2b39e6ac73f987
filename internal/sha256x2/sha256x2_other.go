//go:build !amd64 || purego

package sha256x2

const useSHANI = false

func block1(*[8]uint32, *byte, int)             { panic("sha256x2: no SHA extensions") }
func block2(_, _ *[8]uint32, _, _ *byte, _ int) { panic("sha256x2: no SHA extensions") }
