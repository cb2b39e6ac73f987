// Package file is the embedded default object store: a directory on a local
// file system, opened as "file:///abs/path" or a plain path. Importing it
// registers the "file" scheme with objstore.Open.
//
// Layout under the root directory:
//
//	@tmp/l-<random>               bodies being written; never visible as versions
//	<key>/@<seq, 20 digits>       version <seq> of <key>, e.g. blobs/sha256/ab…/@00000000000000000001
//
// Each key is a directory whose version files are named '@' plus a
// zero-padded sequence number starting at 1; the version id is "v<seq>".
// Because objstore.ValidateKey forbids segments starting with '@', a key's
// versions and another key's directory never collide, so "a" and "a/b"
// coexist.
//
// A Put writes the body to a temp file in @tmp, fsyncs it, then link(2)s it
// to the next sequence number and fsyncs the key's directory (restic
// local.Save); each directory it makes is fsynced in its parent, as is
// the store's own directory when Open makes it, and DeletePrefix fsyncs
// the directory it removed entries from. link fails atomically with EEXIST when the name is taken: a
// conditional create is a link to sequence 1, and an unconditional Put
// retries with the next number. Nothing is ever check-then-write, nothing is
// renamed over an existing name, and a version file is never opened for
// writing after it is linked, so versions are immutable. A crash leaves at
// most a temp file in @tmp, which is never read. A Put holds a lock
// (flock) on its temp file until it has removed its name, so Open removes
// the temp files whose lock is free (a minute after their last write) and
// those older than a day (an older build's, unlocked, or on a file system
// without flock).
//
// All access goes through an os.Root, so neither a key nor a symlink planted
// inside the directory can reach outside it.
//
// List walks the directory tree under the prefix in key order (byte order
// of the whole key, in which "a.b/x" sorts before "a/x"), skips every
// directory whose keys all sort at or before the page's after key, and
// stops once the page is full, so a page reads the directories on the way
// to its first key and those that hold its keys, not every key under the
// prefix: a full listing costs about the number of keys, where it cost
// their square over the page size.
package file
