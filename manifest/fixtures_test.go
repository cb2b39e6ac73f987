package manifest

import (
	"fmt"
	"testing"
)

func dg(s string) Digest { return Sum([]byte(s)) }

func validShards(n int) []Shard {
	out := make([]Shard, n)
	for i := range out {
		out[i] = Shard{
			ID:              fmt.Sprintf("shard-%05d-of-%05d", i, n),
			MediaType:       ParquetMediaType,
			Digest:          dg(fmt.Sprint("bytes", i)),
			Size:            8388192 + int64(i),
			ObjectVersion:   fmt.Sprintf("gen-%d", 9021+i),
			LogicalDigest:   dg(fmt.Sprint("logical", i)),
			Records:         10000,
			Tokens:          8194421 + int64(i),
			MemberSetDigest: dg(fmt.Sprint("members", i)),
		}
	}
	return out
}

func totalsOf(shards []Shard) Totals {
	t := Totals{Shards: int64(len(shards))}
	for _, s := range shards {
		t.Records += s.Records
		t.Tokens += s.Tokens
	}
	return t
}

func validRelease() *Release {
	shards := validShards(3)
	return &Release{
		Schema:             ReleaseSchema,
		DatasetSnapshot:    dg("snapshot"),
		TombstoneWatermark: 44192,
		BenchmarkFence:     3908,
		RecordSchema:       dg("record schema"),
		Build: Build{
			Serializer: "shardproof-stage", SerializerVersion: "v1.0.0", SortSeed: 7,
			ShardingFunction: "xxh64-range", Compression: "zstd", CompressionLevel: 3,
			EncryptionKeyVersion: "none", EncryptionAADScheme: "none", MemberPartition: DefaultMemberPartition,
		},
		Shards:                 shards,
		Totals:                 totalsOf(shards),
		OrderedMemberTupleRoot: dg("root"),
	}
}

func validSnapshot() *Snapshot {
	members := validShards(2)
	return &Snapshot{
		Schema:          SnapshotSchema,
		RecordSchema:    dg("member schema"),
		MemberPartition: "xxh64/k=16",
		Members:         members,
		Totals:          totalsOf(members),
		TupleRoot:       dg("tuple root"),
	}
}

// rangedSnapshot declares bucket ranges on its members: adjacent ones,
// an empty one inside another's span, and one member without a range.
func rangedSnapshot() *Snapshot {
	members := validShards(4)
	members[0].Buckets = &BucketRange{Lo: 0, Hi: 10}
	members[1].Buckets = &BucketRange{Lo: 10, Hi: 1 << 16}
	members[2].Buckets = &BucketRange{Lo: 5, Hi: 5}
	s := validSnapshot()
	s.Members, s.Totals = members, totalsOf(members)
	return s
}

func validFenceLog(schema string) *FenceLog {
	return &FenceLog{Schema: schema, Entries: []FenceEntry{
		{Seq: 1, SampleID: "doc-1"},
		{Seq: 2, ContentDigest: dg("eval item")},
		{Seq: 10, SampleID: "ünïcode-é"},
	}}
}

func validRecordSchema() *RecordSchema {
	return &RecordSchema{
		Schema: RecordSchemaSchema,
		Fields: []Field{
			{Name: "sample_id", Type: "utf8"},
			{Name: "source_id", Type: "utf8"},
			{Name: "source_version", Type: "int64"},
			{Name: "split", Type: "utf8"},
			{Name: "text", Type: "utf8"},
			{Name: "n_tokens", Type: "int64", Nullable: true},
			{Name: "score", Type: "float64", Nullable: true},
			{Name: "flag", Type: "bool"},
			{Name: "lang_id", Type: "int32"},
			{Name: "raw", Type: "binary", Nullable: true},
		},
		Content: "text",
		Tuple:   TupleMap{SampleID: "sample_id", SourceID: "source_id", SourceVersion: "source_version", Split: "split"},
		Tokens:  "n_tokens",
	}
}

func validReport(failed bool) *Report {
	r := &Report{
		Schema:             ReportSchema,
		Root:               dg("release bytes"),
		DatasetSnapshot:    dg("snapshot"),
		TombstoneWatermark: 44192,
		BenchmarkFence:     3908,
		Tombstones:         dg("tombstones"),
		Verdict:            Verified,
		Counts:             Counts{Shards: 3, ShardsVerified: 3, Records: 30000, SnapshotRecords: 30000},
		Examples:           map[string][]string{},
		ReleaseTupleRoot:   dg("tuple root"),
		SnapshotTupleRoot:  dg("tuple root"),
		BoundTupleRoot:     dg("root"),
		Stats:              Stats{StoredBytes: 25164578, LogicalBytes: 80000000, DecompressionRatio: 3.179},
		Tool:               "shardproof dev",
		Execution:          Execution{Executor: "local", MapTasks: 2, Reducers: 4, Seconds: 1.5},
	}
	if failed {
		r.Verdict = Invalid
		r.Counts.ShardsVerified = 2
		r.Counts.DigestFailures = 1
		r.Counts.Missing = 2
		r.Examples = map[string][]string{"MISSING_MEMBER": {"doc-7", "doc-9"}}
		r.Counts.TupleRootMismatches = 1
		r.Failures = []ShardFailure{
			{Shard: "shard-00001-of-00003", Side: "release", Code: "DIGEST_MISMATCH", Detail: "descriptor digest=sha256:…, bytes read=sha256:…"},
			{Shard: "tupleRoot", Side: "release", Code: "TUPLE_ROOT_MISMATCH", Detail: "<&> kept as is"},
			{Shard: "a-member", Side: "snapshot", Code: "DIGEST_MISMATCH"},
		}
	}
	return r
}

// omittingReport is an INVALID report whose failure list was cut: it
// lists the first failures and says how many more it leaves out.
func omittingReport() *Report {
	r := validReport(true)
	r.Counts.DigestFailures = 4
	r.Counts.ShardsVerified = 0
	r.Counts.Shards = 4
	r.Failures = r.Failures[:1]
	r.FailuresOmitted = 5
	return r
}

// docCase is one valid document of each kind with its decoder.
type docCase struct {
	name   string
	doc    Validator
	decode func([]byte) (Validator, error)
}

func docCases() []docCase {
	return []docCase{
		{"release", validRelease(), func(b []byte) (Validator, error) { return DecodeRelease(b) }},
		{"snapshot", validSnapshot(), func(b []byte) (Validator, error) { return DecodeSnapshot(b) }},
		{"snapshotBuckets", rangedSnapshot(), func(b []byte) (Validator, error) { return DecodeSnapshot(b) }},
		{"tombstones", validFenceLog(TombstonesSchema), func(b []byte) (Validator, error) { return DecodeFenceLog(b, TombstonesSchema) }},
		{"benchmark", validFenceLog(BenchmarkSchema), func(b []byte) (Validator, error) { return DecodeFenceLog(b, BenchmarkSchema) }},
		{"recordSchema", validRecordSchema(), func(b []byte) (Validator, error) { return DecodeRecordSchema(b) }},
		{"report", validReport(false), func(b []byte) (Validator, error) { return DecodeReport(b) }},
		{"reportInvalid", validReport(true), func(b []byte) (Validator, error) { return DecodeReport(b) }},
		{"reportOmitted", omittingReport(), func(b []byte) (Validator, error) { return DecodeReport(b) }},
	}
}

func mustEncode(t testing.TB, v any) []byte {
	t.Helper()
	b, err := Encode(v)
	if err != nil {
		t.Fatalf("Encode: %v", err)
	}
	return b
}
