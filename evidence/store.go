package evidence

import "crypto/ed25519"

// storePrefix holds the signature documents: one directory per signed
// message, one key per signer. No other key starts with it, and no key
// is a path-prefix of another (DEVIATIONS "Store keys").
const storePrefix = "index/evidence/"

// StoreKey is where the signature by pub of msg is kept:
// index/evidence/<hex of sha256(msg)>/<hex of sha256(pub)>.
func StoreKey(msg []byte, pub ed25519.PublicKey) string {
	return StoreDir(msg) + keyHex(pub)
}

// StoreDir is the directory of msg's signature documents, ending in "/".
// Package evstore reads and writes them: this package stays free of the
// object store, as the gate that imports it must (raftgate's
// TestImportGraph).
func StoreDir(msg []byte) string {
	return storePrefix + MessageDigest(msg).Hex() + "/"
}
