// Package file is the embedded default object store: a directory on a
// local file system. Implementation pending (foundation issue).
package file
