// Package reducer is the reduce side of `shardproof verify`: it merges one
// contiguous bucket range across every map task's shuffle file, one bucket
// at a time, and diffs the release's tuples against the snapshot's.
//
// Memory is bounded by the largest bucket (times the number of inputs that
// hold part of it), never by the release.
//
// With the snapshot's leaf index (Options.Snapshot and SnapshotLeaves), a
// bucket whose release tuple digests hash to the indexed leaf holds
// exactly the snapshot's tuples and is counted from its digests alone:
// sources that are DigestSources (shuffle.Reader) give the digests first,
// and their rows are made, merged and diffed only for the buckets that
// differ, or when fences need them.
//
// # How differences are counted
//
// Within a bucket, tuples are grouped by sampleId. With s snapshot tuples
// and r release tuples for one sampleId:
//
//   - s == 0: the sampleId is absent from the snapshot; Extra += r
//     (EXTRA_MEMBER).
//   - r < s: Missing += s - r (MISSING_MEMBER).
//   - r > s > 0: Duplicate += r - s (DUPLICATE_MEMBER).
//   - r == s: if the two multisets of tuple digests are equal, nothing.
//     Otherwise each differing field counts once for the sampleId: the
//     content digest (CONTENT_SUBSTITUTION), sourceVersion
//     (SOURCE_VERSION_CHANGE), sourceId (SOURCE_ID_CHANGE), split
//     (SPLIT_CONFLICT) and schema digest (SCHEMA_MIX), a field "differing"
//     when the sorted multisets of its values on the two sides differ. So a
//     sampleId whose content and split both changed adds one to each of the
//     two counters. If every field's multiset agrees but the tuples do not
//     (values recombined between copies), it counts as one
//     CONTENT_SUBSTITUTION.
//
// When the counts differ (missing, duplicate) the fields are not compared:
// the count difference is the finding.
//
// Tombstone and benchmark hits are counted per release tuple: a tuple hits
// when its sampleId, or its content digest, is in the set. Membership is
// tested in a roaring64 bitmap (over tuplehash.Key64 of the sampleId, or the
// first 8 bytes of the content digest) and every bitmap hit is confirmed
// against an exact hash set, so a 64-bit collision never counts.
//
// Examples per class are the 20 smallest distinct sampleIds, sorted, so the
// examples of a whole verification do not depend on how buckets were split
// among reducers. Every bucket in the range, empty or not, gets one leaf per
// side (tuplehash.BucketLeaf).
package reducer
