//go:build !unix

package trainer

// entryOpenFlags: the Lstat before the open is the only guard here.
const entryOpenFlags = 0
