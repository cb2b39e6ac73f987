// Package canon defines shardproof's canonical record encoding v1 and the
// mapping between a manifest.RecordSchema and an Arrow schema.
//
// It sits between the writer (stage) and the verifier (mapper): both encode
// every record with the same Encoder, so a shard's logical digest depends
// only on its decoded values, never on compression, page layout or row-group
// boundaries. The encoding (DESIGN.md, "Logical digest"):
//
//	canonical record = for each field in schema order:
//	    tag byte (1 utf8, 2 binary, 3 int64, 4 int32, 5 float64, 6 bool)
//	    null marker (0x00 null, 0x01 present)
//	    if present: utf8/binary → u32be len ‖ bytes; int64 → 8 bytes BE;
//	                int32 → 4 bytes BE; float64 → 8 bytes BE IEEE-754 bits;
//	                bool → 1 byte (0 or 1);
//	                the content column → its 32-byte sha256, no length prefix
//	logical digest = sha256("sp.logical.v1\x00" ‖ 32-byte recordSchema digest ‖
//	                        for each record in stored order: u32be len ‖ canonical record)
//
// Content bytes are hashed exactly once: their sha256 is both the value in
// the canonical record and the tuple's logicalContentDigest.
package canon
