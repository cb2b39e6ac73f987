// Package mapper is the map side of verify: it turns one shard (or one
// snapshot member file) into verified figures and canonical tuples.
//
// MapShard reads exactly the descriptor's object version, hashes every
// byte, checks the Parquet footer (its Thrift counts and lengths against
// its bytes, its schema tree and estimated decode cost, internal/pqfooter,
// before arrow-go decodes it), every column chunk's bounds, page offsets
// and page index against the bytes actually read, and each page's
// declared sizes against its chunk's (internal/pagelimit), compares the
// Arrow schema with the record schema, decodes the records under recover
// in the calling goroutine, and
// recomputes with internal/canon — the code the writer used — the logical
// digest, records, tokens, memberSetDigest and tuples. Data problems are
// collected as manifest.ShardFailure values with stable codes and
// evidence; only operational problems (store unreachable, canceled) are
// returned as errors. MapShard emits a shard's tuples only after the whole
// shard decoded, so a half-decoded shard never reaches the reducers.
// MapShardStream, which verify's map tasks use, emits them as row groups
// decode, without holding them, and leaves that rule to its caller: the
// map task takes back the tuples of a file that did not decode (see
// shuffle.Buffer.Truncate).
package mapper
