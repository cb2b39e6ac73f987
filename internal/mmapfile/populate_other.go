//go:build darwin || freebsd || netbsd || openbsd

package mmapfile

const populate = 0
