package manifest

// Schema identifiers of the v1 documents. Changing a document's bytes means
// a new identifier.
const (
	ReleaseSchema      = "training.shard.release.v1"
	SnapshotSchema     = "training.dataset.snapshot.v1"
	TombstonesSchema   = "training.tombstones.v1"
	BenchmarkSchema    = "training.benchmark.v1"
	ReportSchema       = "training.shard.verification.v1"
	RecordSchemaSchema = "training.record.schema.v1"

	ParquetMediaType = "application/vnd.apache.parquet"
)

// Release is the release manifest training.shard.release.v1. Its digest
// (the root digest) is sha256 of its exact stored bytes.
type Release struct {
	Schema                 string  `json:"schema"`
	DatasetSnapshot        Digest  `json:"datasetSnapshot"`
	TombstoneWatermark     uint64  `json:"tombstoneWatermark"`
	BenchmarkFence         uint64  `json:"benchmarkFence"`
	RecordSchema           Digest  `json:"recordSchema"`
	Build                  Build   `json:"build"`
	Shards                 []Shard `json:"shards"`
	Totals                 Totals  `json:"totals"`
	OrderedMemberTupleRoot Digest  `json:"orderedMemberTupleRoot"`
}

// Build records how the release was written, so it can be reproduced.
type Build struct {
	Serializer        string `json:"serializer"`
	SerializerVersion string `json:"serializerVersion"`
	SortSeed          uint64 `json:"sortSeed"`
	ShardingFunction  string `json:"shardingFunction"`
	Compression       string `json:"compression"`
	CompressionLevel  int    `json:"compressionLevel"`
	// EncryptionKeyVersion and EncryptionAADScheme are "none" when shards
	// are not encrypted.
	EncryptionKeyVersion string `json:"encryptionKeyVersion"`
	EncryptionAADScheme  string `json:"encryptionAadScheme"`
	MemberPartition      string `json:"memberPartition"`
}

// Shard is a shard descriptor (as in OCI: mediaType, digest, size) plus the
// immutable store version and the decoded figures.
type Shard struct {
	ID              string `json:"id"`
	MediaType       string `json:"mediaType"`
	Digest          Digest `json:"digest"`
	Size            int64  `json:"size"`
	ObjectVersion   string `json:"objectVersion"`
	LogicalDigest   Digest `json:"logicalDigest"`
	Records         int64  `json:"records"`
	Tokens          int64  `json:"tokens"`
	MemberSetDigest Digest `json:"memberSetDigest"`
	// Buckets, on a snapshot member only, declares that every tuple of the
	// file lies in buckets [Lo, Hi). Declared ranges of one snapshot are
	// disjoint, so verify's reducers can read such members themselves
	// instead of shuffling their tuples. Absent on release shards.
	Buckets *BucketRange `json:"buckets,omitempty"`
}

// BucketRange is the half-open bucket range [Lo, Hi).
type BucketRange struct {
	Lo uint32 `json:"lo"`
	Hi uint32 `json:"hi"`
}

// Totals must equal the sums over the document's shards or members.
type Totals struct {
	Shards  int64 `json:"shards"`
	Records int64 `json:"records"`
	Tokens  int64 `json:"tokens"`
}

// Snapshot is the dataset snapshot manifest training.dataset.snapshot.v1:
// the logical membership a release must contain exactly once each, as
// Parquet member files carrying the tuple columns.
type Snapshot struct {
	Schema          string  `json:"schema"`
	RecordSchema    Digest  `json:"recordSchema"`
	MemberPartition string  `json:"memberPartition"`
	Members         []Shard `json:"members"`
	Totals          Totals  `json:"totals"`
	// TupleRoot is the unbound RFC 6962 Merkle root of the member tuples.
	TupleRoot Digest `json:"tupleRoot"`
}

// FenceLog is a tombstone log (training.tombstones.v1) or benchmark
// registry (training.benchmark.v1): append-only entries; the watermark or
// fence is the highest seq.
type FenceLog struct {
	Schema  string       `json:"schema"`
	Entries []FenceEntry `json:"entries"`
}

// FenceEntry names one deleted sample or benchmark item, by sampleId or by
// content digest (exactly one of the two).
type FenceEntry struct {
	Seq           uint64 `json:"seq"`
	SampleID      string `json:"sampleId,omitempty"`
	ContentDigest Digest `json:"contentDigest,omitzero"`
}

// Watermark returns the highest seq in the log (0 when empty).
func (l *FenceLog) Watermark() uint64 {
	var w uint64
	for _, e := range l.Entries {
		w = max(w, e.Seq)
	}
	return w
}

// RecordSchema is the record schema document training.record.schema.v1.
// Its digest (sha256 of its canonical JSON) is the manifest's recordSchema
// and every tuple's schemaDigest.
type RecordSchema struct {
	Schema string  `json:"schema"`
	Fields []Field `json:"fields"`
	// Content names the one column whose bytes are the sample content;
	// its sha256 is the tuple's logicalContentDigest. It is empty only in
	// the snapshot member-file schema, whose rows carry that digest itself.
	Content string   `json:"content"`
	Tuple   TupleMap `json:"tuple"`
	// Tokens names the int64 column holding per-record token counts, or "".
	Tokens string `json:"tokens"`
}

// Field is one column of a record schema, in schema order.
type Field struct {
	Name string `json:"name"`
	// Type is the Arrow type name: "utf8", "binary", "int64", "int32",
	// "float64" or "bool".
	Type     string `json:"type"`
	Nullable bool   `json:"nullable"`
}

// TupleMap names the columns that form the tuple.
type TupleMap struct {
	SampleID      string `json:"sampleId"`
	SourceID      string `json:"sourceId"`
	SourceVersion string `json:"sourceVersion"`
	Split         string `json:"split"`
}

// Report is the verification report training.shard.verification.v1,
// stored content-addressed and bound to the root digest it verifies.
type Report struct {
	Schema             string `json:"schema"`
	Root               Digest `json:"root"`
	DatasetSnapshot    Digest `json:"datasetSnapshot"`
	TombstoneWatermark uint64 `json:"tombstoneWatermark"`
	BenchmarkFence     uint64 `json:"benchmarkFence"`
	// Tombstones and Benchmark are the digests of the fence documents
	// checked, if any.
	Tombstones Digest `json:"tombstones,omitzero"`
	Benchmark  Digest `json:"benchmark,omitzero"`
	Verdict    string `json:"verdict"`
	Counts     Counts `json:"counts"`
	// Examples maps a code (e.g. MISSING_MEMBER) to up to 20 sampleIds,
	// sorted. Never sample text.
	Examples map[string][]string `json:"examples"`
	// Failures lists the shard-level failures, sorted by side, shard id,
	// code, then detail (CompareFailures): every one, or the first of
	// them in that order when there are more than a report lists
	// (ListedFailures).
	Failures []ShardFailure `json:"failures"`
	// FailuresOmitted is how many failures follow those listed and are
	// left out of the list; Counts count them all. It is omitted when 0,
	// so a report that lists every failure is the one builds before the
	// field wrote.
	FailuresOmitted int64 `json:"failuresOmitted,omitempty"`
	// ReleaseTupleRoot and SnapshotTupleRoot are the recomputed unbound
	// Merkle roots; BoundTupleRoot is ReleaseTupleRoot bound as the
	// manifest's orderedMemberTupleRoot must be.
	ReleaseTupleRoot  Digest `json:"releaseTupleRoot"`
	SnapshotTupleRoot Digest `json:"snapshotTupleRoot"`
	BoundTupleRoot    Digest `json:"boundTupleRoot"`
	Stats             Stats  `json:"stats"`
	Tool              string `json:"tool"`
	// Execution is the only part that may differ between two verifications
	// of the same inputs (plan shape, executor, wall-clock figures); the rest
	// of the report is byte-identical whatever M, R and the executor.
	Execution Execution `json:"execution"`
}

// Verdicts.
const (
	Verified = "VERIFIED"
	Invalid  = "INVALID"
)

// Counts are the failure counters of a report. Any non-zero field other
// than ShardsVerified, Records and Tokens makes the verdict INVALID.
type Counts struct {
	Shards              int64 `json:"shards"`
	ShardsVerified      int64 `json:"shardsVerified"`
	Records             int64 `json:"records"`
	SnapshotRecords     int64 `json:"snapshotRecords"`
	DigestFailures      int64 `json:"digestFailures"`
	SizeMismatches      int64 `json:"sizeMismatches"`
	VersionMissing      int64 `json:"versionMissing"`
	LogicalMismatches   int64 `json:"logicalMismatches"`
	CountMismatches     int64 `json:"countMismatches"`
	DecodeErrors        int64 `json:"decodeErrors"`
	SchemaMismatches    int64 `json:"schemaMismatches"`
	TupleRootMismatches int64 `json:"tupleRootMismatches"`
	Missing             int64 `json:"missing"`
	Extra               int64 `json:"extra"`
	Duplicate           int64 `json:"duplicate"`
	ContentSubstitution int64 `json:"contentSubstitution"`
	SourceVersionChange int64 `json:"sourceVersionChange"`
	SourceIDChange      int64 `json:"sourceIdChange"`
	SplitConflict       int64 `json:"splitConflict"`
	SchemaMix           int64 `json:"schemaMix"`
	TombstoneHits       int64 `json:"tombstoneHits"`
	BenchmarkHits       int64 `json:"benchmarkHits"`
}

// Failed reports whether any failure counter is non-zero.
// Each counter is tested on its own: a sum could overflow or cancel out.
func (c *Counts) Failed() bool {
	for _, v := range []int64{
		c.DigestFailures, c.SizeMismatches, c.VersionMissing, c.LogicalMismatches,
		c.CountMismatches, c.DecodeErrors, c.SchemaMismatches, c.TupleRootMismatches,
		c.Missing, c.Extra, c.Duplicate, c.ContentSubstitution, c.SourceVersionChange,
		c.SourceIDChange, c.SplitConflict, c.SchemaMix, c.TombstoneHits, c.BenchmarkHits,
	} {
		if v != 0 {
			return true
		}
	}
	return false
}

// ShardFailure is one shard-level failure with evidence.
type ShardFailure struct {
	Shard  string `json:"shard"`
	Side   string `json:"side"` // "release" or "snapshot"
	Code   string `json:"code"`
	Detail string `json:"detail"`
}

// Stats are deterministic figures of the verified bytes.
type Stats struct {
	StoredBytes  int64 `json:"storedBytes"`
	LogicalBytes int64 `json:"logicalBytes"`
	// DecompressionRatio is LogicalBytes / StoredBytes.
	DecompressionRatio float64 `json:"decompressionRatio"`
}

// Execution describes how a verification ran; it is excluded from
// determinism checks.
type Execution struct {
	Plan         Digest `json:"plan,omitzero"`
	Executor     string `json:"executor"`
	MapTasks     int    `json:"mapTasks"`
	Reducers     int    `json:"reducers"`
	ShuffleBytes int64  `json:"shuffleBytes"`
	// MergedFiles and MergedBytes are what the reduce tasks' merge level
	// wrote (a plan's reduceFanIn below its map tasks): files read twice.
	MergedFiles      int     `json:"mergedFiles,omitempty"`
	MergedBytes      int64   `json:"mergedBytes,omitempty"`
	Seconds          float64 `json:"seconds"`
	RecordsPerSecond float64 `json:"recordsPerSecond"`
	StoredMBPerSec   float64 `json:"storedMBPerSecond"`
	Started          string  `json:"started,omitempty"`
	// SnapshotMembersRead counts the snapshot members decoded whole;
	// SnapshotMembersSkipped those left unread because every bucket they
	// declare matched the snapshot's leaf index (see package snapindex);
	// SnapshotMembersByBucket those of which only the row groups of
	// differing buckets were read, SnapshotBucketsRead buckets in all.
	SnapshotMembersRead     int `json:"snapshotMembersRead,omitempty"`
	SnapshotMembersSkipped  int `json:"snapshotMembersSkipped,omitempty"`
	SnapshotMembersByBucket int `json:"snapshotMembersByBucket,omitempty"`
	SnapshotBucketsRead     int `json:"snapshotBucketsRead,omitempty"`
	// Stages is where the workers spent their time; only the local
	// executor, whose tasks run in the process that writes the report,
	// fills it.
	Stages StageSeconds `json:"stages,omitzero"`
}

// StageSeconds is worker time per stage of a verification, in seconds,
// summed over the workers: with p busy workers the stages add up to about
// p times the wall time, and for CPU-bound work they approximate CPU
// seconds.
type StageSeconds struct {
	// Read is reading shard and member file bytes from the store.
	Read float64 `json:"read"`
	// StorageDigest is sha256 of those bytes.
	StorageDigest float64 `json:"storageDigest"`
	// Decode is Parquet footer checks, page decompression and decoding
	// of every column, the content column included but not its hashing.
	Decode float64 `json:"decode"`
	// ContentDigest is sha256 of each content value.
	ContentDigest float64 `json:"contentDigest"`
	// Tuples is canonical records, logical digests, tuple digests,
	// buckets and appending tuples to the shuffle partitions.
	Tuples float64 `json:"tuples"`
	// ShuffleWrite is sorting, encoding and storing shuffle files and
	// map commit records.
	ShuffleWrite float64 `json:"shuffleWrite"`
	// Reduce is the reduce tasks; Aggregate is building the report.
	Reduce    float64 `json:"reduce"`
	Aggregate float64 `json:"aggregate"`
}
