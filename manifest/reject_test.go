package manifest

import (
	"bytes"
	"math"
	"strings"
	"testing"

	"github.com/shardproof/shardproof/internal/errcode"
)

// TestRejectStruct builds documents that are well-formed JSON but violate
// the document rules, and checks the stable code of each rejection.
func TestRejectStruct(t *testing.T) {
	type tc struct {
		name   string
		mutate func(*Release)
		want   errcode.Code
	}
	release := []tc{
		{"wrong schema", func(r *Release) { r.Schema = SnapshotSchema }, errcode.BadDocument},
		{"schema v2", func(r *Release) { r.Schema = "training.shard.release.v2" }, errcode.BadDocument},
		{"missing datasetSnapshot", func(r *Release) { r.DatasetSnapshot = Digest{} }, errcode.BadDocument},
		{"missing recordSchema", func(r *Release) { r.RecordSchema = Digest{} }, errcode.BadDocument},
		{"missing root", func(r *Release) { r.OrderedMemberTupleRoot = Digest{} }, errcode.BadDocument},
		{"missing shard digest", func(r *Release) { r.Shards[1].Digest = Digest{} }, errcode.BadDocument},
		{"missing logicalDigest", func(r *Release) { r.Shards[2].LogicalDigest = Digest{} }, errcode.BadDocument},
		{"missing memberSetDigest", func(r *Release) { r.Shards[0].MemberSetDigest = Digest{} }, errcode.BadDocument},
		{"no shards", func(r *Release) { r.Shards = nil; r.Totals = Totals{} }, errcode.BadDocument},
		{"empty shards", func(r *Release) { r.Shards = []Shard{}; r.Totals = Totals{} }, errcode.BadDocument},
		{"duplicate shard id", func(r *Release) { r.Shards[2].ID = r.Shards[0].ID }, errcode.BadDocument},
		{"buckets on a release shard", func(r *Release) { r.Shards[1].Buckets = &BucketRange{Lo: 0, Hi: 1} }, errcode.BadDocument},
		{"empty shard id", func(r *Release) { r.Shards[1].ID = "" }, errcode.BadDocument},
		{"bad mediaType", func(r *Release) { r.Shards[1].MediaType = "application/octet-stream" }, errcode.BadDocument},
		{"empty mediaType", func(r *Release) { r.Shards[1].MediaType = "" }, errcode.BadDocument},
		{"empty objectVersion", func(r *Release) { r.Shards[0].ObjectVersion = "" }, errcode.BadDocument},
		{"objectVersion with a newline", func(r *Release) { r.Shards[0].ObjectVersion = "v1\nforged log line" }, errcode.BadDocument},
		{"shard id with an escape sequence", func(r *Release) { r.Shards[0].ID = "shard\x1b[2J" }, errcode.BadDocument},
		{"shard id too long", func(r *Release) { r.Shards[0].ID = strings.Repeat("s", MaxNameLen+1) }, errcode.BadDocument},
		{"no memberPartition", func(r *Release) { r.Build.MemberPartition = "" }, errcode.BadDocument},
		{"memberPartition k=0", func(r *Release) { r.Build.MemberPartition = "xxh64/k=0" }, errcode.BadDocument},
		{"memberPartition k=25", func(r *Release) { r.Build.MemberPartition = "xxh64/k=25" }, errcode.BadDocument},
		{"memberPartition sha", func(r *Release) { r.Build.MemberPartition = "sha256/k=12" }, errcode.BadDocument},
		{"negative size", func(r *Release) { r.Shards[1].Size = -1 }, errcode.BadCount},
		{"negative records", func(r *Release) { r.Shards[1].Records = -5; r.Totals.Records -= 10005 }, errcode.BadCount},
		{"negative tokens", func(r *Release) { r.Shards[0].Tokens = -1 }, errcode.BadCount},
		{"negative totals", func(r *Release) { r.Totals.Tokens = -1 }, errcode.BadCount},
		{"records overflow", func(r *Release) {
			r.Shards[0].Records = 1 << 62
			r.Shards[1].Records = 1 << 62
			r.Shards[2].Records = 1 << 62
		}, errcode.BadCount},
		{"totals.shards", func(r *Release) { r.Totals.Shards = 480 }, errcode.TotalsMismatch},
		{"totals.records", func(r *Release) { r.Totals.Records++ }, errcode.TotalsMismatch},
		{"totals.tokens", func(r *Release) { r.Totals.Tokens-- }, errcode.TotalsMismatch},
		{"shard dropped, totals kept", func(r *Release) { r.Shards = r.Shards[:2] }, errcode.TotalsMismatch},
	}
	for _, c := range release {
		t.Run("release/"+c.name, func(t *testing.T) {
			r := validRelease()
			c.mutate(r)
			checkRejected(t, encodeUnchecked(t, r), func(b []byte) error { _, err := DecodeRelease(b); return err }, c.want)
			if _, err := EncodeRelease(r); errcode.Of(err) != c.want {
				t.Errorf("EncodeRelease: %v, want %s", err, c.want)
			}
		})
	}

	snapshot := []struct {
		name   string
		mutate func(*Snapshot)
		want   errcode.Code
	}{
		{"wrong schema", func(s *Snapshot) { s.Schema = ReleaseSchema }, errcode.BadDocument},
		{"missing tupleRoot", func(s *Snapshot) { s.TupleRoot = Digest{} }, errcode.BadDocument},
		{"missing recordSchema", func(s *Snapshot) { s.RecordSchema = Digest{} }, errcode.BadDocument},
		{"bad memberPartition", func(s *Snapshot) { s.MemberPartition = "xxh64/k=012" }, errcode.BadDocument},
		{"no members", func(s *Snapshot) { s.Members = nil; s.Totals = Totals{} }, errcode.BadDocument},
		{"duplicate member id", func(s *Snapshot) { s.Members[1].ID = s.Members[0].ID }, errcode.BadDocument},
		{"negative size", func(s *Snapshot) { s.Members[1].Size = -1 }, errcode.BadCount},
		{"totals.records", func(s *Snapshot) { s.Totals.Records = 1 }, errcode.TotalsMismatch},
		{"buckets lo > hi", func(s *Snapshot) { s.Members[0].Buckets = &BucketRange{Lo: 5, Hi: 4} }, errcode.BadDocument},
		{"buckets beyond 2^k", func(s *Snapshot) { s.Members[1].Buckets = &BucketRange{Lo: 1 << 15, Hi: 1<<16 + 1} }, errcode.BadDocument},
		{"buckets overlap", func(s *Snapshot) {
			s.Members[0].Buckets = &BucketRange{Lo: 10, Hi: 20}
			s.Members[1].Buckets = &BucketRange{Lo: 0, Hi: 11}
		}, errcode.BadDocument},
	}
	for _, c := range snapshot {
		t.Run("snapshot/"+c.name, func(t *testing.T) {
			s := validSnapshot()
			c.mutate(s)
			checkRejected(t, encodeUnchecked(t, s), func(b []byte) error { _, err := DecodeSnapshot(b); return err }, c.want)
		})
	}

	fence := []struct {
		name   string
		mutate func(*FenceLog)
		want   errcode.Code
	}{
		{"wrong schema", func(l *FenceLog) { l.Schema = ReportSchema }, errcode.BadDocument},
		{"seq 0", func(l *FenceLog) { l.Entries[0].Seq = 0 }, errcode.BadDocument},
		{"seq repeats", func(l *FenceLog) { l.Entries[1].Seq = 1 }, errcode.BadDocument},
		{"seq decreases", func(l *FenceLog) { l.Entries[2].Seq = 2; l.Entries[1].Seq = 3 }, errcode.BadDocument},
		{"both sampleId and digest", func(l *FenceLog) { l.Entries[1].SampleID = "doc-2" }, errcode.BadDocument},
		{"neither sampleId nor digest", func(l *FenceLog) { l.Entries[0].SampleID = "" }, errcode.BadDocument},
	}
	for _, c := range fence {
		t.Run("fence/"+c.name, func(t *testing.T) {
			l := validFenceLog(TombstonesSchema)
			c.mutate(l)
			checkRejected(t, encodeUnchecked(t, l), func(b []byte) error { _, err := DecodeFenceLog(b, TombstonesSchema); return err }, c.want)
		})
	}

	schema := []struct {
		name   string
		mutate func(*RecordSchema)
	}{
		{"wrong schema", func(s *RecordSchema) { s.Schema = "training.record.schema.v0" }},
		{"no fields", func(s *RecordSchema) { s.Fields = nil }},
		{"empty field name", func(s *RecordSchema) { s.Fields[7].Name = "" }},
		{"duplicate field name", func(s *RecordSchema) { s.Fields[7].Name = "score" }},
		{"unknown type", func(s *RecordSchema) { s.Fields[6].Type = "float32" }},
		{"type case", func(s *RecordSchema) { s.Fields[6].Type = "Float64" }},
		{"content missing field", func(s *RecordSchema) { s.Content = "body" }},
		{"content nullable", func(s *RecordSchema) { s.Content = "raw" }},
		{"content int64", func(s *RecordSchema) { s.Content = "source_version" }},
		{"tuple.sampleId missing", func(s *RecordSchema) { s.Tuple.SampleID = "" }},
		{"tuple.sampleId int32", func(s *RecordSchema) { s.Tuple.SampleID = "lang_id" }},
		{"tuple.sourceId binary", func(s *RecordSchema) { s.Tuple.SourceID = "raw" }},
		{"tuple.sourceVersion int32", func(s *RecordSchema) { s.Tuple.SourceVersion = "lang_id" }},
		{"tuple.split nullable", func(s *RecordSchema) { s.Fields[3].Nullable = true }},
		{"tuple.sourceVersion nullable", func(s *RecordSchema) { s.Fields[2].Nullable = true }},
		{"tokens utf8", func(s *RecordSchema) { s.Tokens = "text" }},
		{"tokens missing", func(s *RecordSchema) { s.Tokens = "n" }},
	}
	for _, c := range schema {
		t.Run("recordSchema/"+c.name, func(t *testing.T) {
			s := validRecordSchema()
			c.mutate(s)
			checkRejected(t, encodeUnchecked(t, s), func(b []byte) error { _, err := DecodeRecordSchema(b); return err }, errcode.BadDocument)
		})
	}

	report := []struct {
		name   string
		mutate func(*Report)
		want   errcode.Code
	}{
		{"wrong schema", func(r *Report) { r.Schema = ReleaseSchema }, errcode.BadDocument},
		{"missing root", func(r *Report) { r.Root = Digest{} }, errcode.BadDocument},
		{"missing snapshot", func(r *Report) { r.DatasetSnapshot = Digest{} }, errcode.BadDocument},
		{"verdict other", func(r *Report) { r.Verdict = "OK" }, errcode.BadDocument},
		{"verdict lower case", func(r *Report) { r.Verdict = "verified" }, errcode.BadDocument},
		{"VERIFIED with a failure", func(r *Report) { r.Counts.TombstoneHits = 1 }, errcode.BadDocument},
		{"VERIFIED with a schema mix", func(r *Report) { r.Counts.SchemaMix = 1 }, errcode.BadDocument},
		{"INVALID without failure", func(r *Report) { r.Verdict = Invalid }, errcode.BadDocument},
		{"negative count", func(r *Report) { r.Counts.Missing = -1; r.Verdict = Invalid }, errcode.BadCount},
		{"negative count hides", func(r *Report) { r.Counts.Missing = -1 }, errcode.BadCount},
		{"verified > shards", func(r *Report) { r.Counts.ShardsVerified = 4 }, errcode.BadCount},
		{"21 examples", func(r *Report) {
			r.Verdict, r.Counts.Missing = Invalid, 21
			r.Examples = map[string][]string{"MISSING_MEMBER": strings.Split("a b c d e f g h i j k l m n o p q r s t u", " ")}
		}, errcode.BadDocument},
		{"examples unsorted", func(r *Report) {
			r.Verdict, r.Counts.Missing = Invalid, 2
			r.Examples = map[string][]string{"MISSING_MEMBER": {"b", "a"}}
		}, errcode.BadDocument},
		{"examples unknown class", func(r *Report) {
			r.Verdict, r.Counts.Missing = Invalid, 1
			r.Examples = map[string][]string{"MISSING": {"a"}}
		}, errcode.BadDocument},
		{"examples of a shard-level code", func(r *Report) {
			r.Verdict, r.Counts.DigestFailures = Invalid, 1
			r.Examples = map[string][]string{"DIGEST_MISMATCH": {"a"}}
		}, errcode.BadDocument},
		{"more examples than the count", func(r *Report) {
			r.Verdict, r.Counts.Missing = Invalid, 1
			r.Examples = map[string][]string{"MISSING_MEMBER": {"a", "b"}}
		}, errcode.BadCount},
		{"examples of a zero count", func(r *Report) {
			r.Verdict, r.Counts.Missing = Invalid, 1
			r.Examples = map[string][]string{"MISSING_MEMBER": {"a"}, "TOMBSTONE_HIT": {"b"}}
		}, errcode.BadCount},
		{"failure bad side", func(r *Report) {
			r.Verdict, r.Counts.DigestFailures = Invalid, 1
			r.Failures = []ShardFailure{{Shard: "s", Side: "both", Code: "DIGEST_MISMATCH"}}
		}, errcode.BadDocument},
		{"failure unknown code", func(r *Report) {
			r.Verdict, r.Counts.DigestFailures = Invalid, 1
			r.Failures = []ShardFailure{{Shard: "s", Side: "release", Code: "BROKEN"}}
		}, errcode.BadDocument},
		{"failures unsorted by shard", func(r *Report) {
			r.Verdict, r.Counts.DigestFailures = Invalid, 2
			r.Failures = []ShardFailure{{Shard: "s2", Side: "release", Code: "DIGEST_MISMATCH"}, {Shard: "s1", Side: "release", Code: "DIGEST_MISMATCH"}}
		}, errcode.BadDocument},
		{"failures unsorted by side", func(r *Report) {
			r.Verdict, r.Counts.DigestFailures = Invalid, 2
			r.Failures = []ShardFailure{{Shard: "a", Side: "snapshot", Code: "DIGEST_MISMATCH"}, {Shard: "b", Side: "release", Code: "DIGEST_MISMATCH"}}
		}, errcode.BadDocument},
		{"negative failures omitted", func(r *Report) {
			r.Verdict, r.Counts.DigestFailures = Invalid, 1
			r.FailuresOmitted = -1
		}, errcode.BadCount},
		{"failures omitted past an int64", func(r *Report) {
			r.Verdict, r.Counts.DigestFailures = Invalid, 1
			r.Failures = failuresOf(1)
			r.FailuresOmitted = math.MaxInt64
		}, errcode.BadCount},
		{"failures omitted from a VERIFIED report", func(r *Report) { r.FailuresOmitted = 1 }, errcode.BadDocument},
		{"failures omitted after more than the bound", func(r *Report) {
			r.Verdict, r.Counts.DigestFailures = Invalid, MaxReportFailures+2
			r.Failures = failuresOf(MaxReportFailures + 1)
			r.FailuresOmitted = 1
		}, errcode.BadDocument},
		{"negative stored bytes", func(r *Report) { r.Stats.StoredBytes = -1 }, errcode.BadCount},
		{"negative ratio", func(r *Report) { r.Stats.DecompressionRatio = -0.5 }, errcode.BadCount},
		{"negative seconds", func(r *Report) { r.Execution.Seconds = -1 }, errcode.BadCount},
		{"negative merged files", func(r *Report) { r.Execution.MergedFiles = -1 }, errcode.BadCount},
		{"negative merged bytes", func(r *Report) { r.Execution.MergedBytes = -1 }, errcode.BadCount},
	}
	for _, c := range report {
		t.Run("report/"+c.name, func(t *testing.T) {
			r := validReport(false)
			c.mutate(r)
			checkRejected(t, encodeUnchecked(t, r), func(b []byte) error { _, err := DecodeReport(b); return err }, c.want)
		})
	}
}

func checkRejected(t *testing.T, b []byte, decode func([]byte) error, want errcode.Code) {
	t.Helper()
	err := decode(b)
	if got := errcode.Of(err); got != want {
		t.Errorf("decode: code %q (%v), want %s", got, err, want)
	}
	if _, _, err := DecodeAny(b); errcode.Of(err) != want {
		t.Errorf("DecodeAny: %v, want %s", err, want)
	}
}

// TestRejectBytes edits the bytes of valid documents: JSON-level faults
// that encoding/json alone would accept or misreport.
func TestRejectBytes(t *testing.T) {
	release := string(mustEncode(t, validRelease()))
	report := string(mustEncode(t, validReport(true)))
	fence := string(mustEncode(t, validFenceLog(TombstonesSchema)))
	schema := string(mustEncode(t, validRecordSchema()))
	sub := func(doc, old, new string) string {
		if !strings.Contains(doc, old) {
			t.Fatalf("fixture lacks %q", old)
		}
		return strings.Replace(doc, old, new, 1)
	}
	d0 := validRelease().Shards[0].Digest.String()
	cases := []struct {
		name string
		doc  string
		want errcode.Code
	}{
		{"duplicate top-level key", sub(release, `"benchmarkFence":3908,`, `"benchmarkFence":3908,"benchmarkFence":1,`), errcode.BadDocument},
		{"duplicate schema first", `{"schema":"` + ReleaseSchema + `",` + release[1:], errcode.BadDocument},
		{"duplicate key by escape", sub(release, `"benchmarkFence":3908,`, `"benchmarkFence":3908,"benchmark\u0046ence":1,`), errcode.BadDocument},
		{"duplicate key in build", sub(release, `"sortSeed":7,`, `"sortSeed":7,"sortSeed":8,`), errcode.BadDocument},
		{"duplicate key in a shard", sub(release, `"records":10000,`, `"records":10000,"records":10000,`), errcode.BadDocument},
		{"duplicate key in totals", sub(release, `"totals":{"shards":3,`, `"totals":{"shards":3,"shards":3,`), errcode.BadDocument},
		{"duplicate key in a map", sub(report, `"examples":{"MISSING_MEMBER":["doc-7","doc-9"]`, `"examples":{"MISSING_MEMBER":["doc-7","doc-9"],"MISSING_MEMBER":[]`), errcode.BadDocument},
		{"duplicate key in a fence entry", sub(fence, `{"seq":1,`, `{"seq":1,"seq":1,`), errcode.BadDocument},
		{"duplicate key in tuple map", sub(schema, `"tuple":{"sampleId":"sample_id",`, `"tuple":{"sampleId":"sample_id","sampleId":"x",`), errcode.BadDocument},
		{"unknown top-level field", sub(release, `{"schema"`, `{"extra":1,"schema"`), errcode.BadDocument},
		{"unknown shard field", sub(release, `"records":10000,`, `"records":10000,"note":"x",`), errcode.BadDocument},
		{"unknown field in build", sub(release, `"sortSeed":7,`, `"sortSeed":7,"seed":7,`), errcode.BadDocument},
		{"key in other case", sub(release, `"benchmarkFence"`, `"BenchmarkFence"`), errcode.BadDocument},
		{"null digest", sub(release, `"recordSchema":"`+validRelease().RecordSchema.String()+`"`, `"recordSchema":null`), errcode.BadDigest},
		{"null string", sub(release, `"objectVersion":"gen-9021"`, `"objectVersion":null`), errcode.BadDocument},
		{"null number", sub(release, `"size":8388192,`, `"size":null,`), errcode.BadDocument},
		{"null object", sub(release, `"build":{`, `"build":null,"x":{`), errcode.BadDocument},
		{"string for number", sub(release, `"size":8388192,`, `"size":"8388192",`), errcode.BadDocument},
		{"float for integer", sub(release, `"size":8388192,`, `"size":8388192.0,`), errcode.BadDocument},
		{"exponent for integer", sub(release, `"size":8388192,`, `"size":8e6,`), errcode.BadDocument},
		{"int64 overflow", sub(release, `"size":8388192,`, `"size":9223372036854775808,`), errcode.BadDocument},
		{"negative uint", sub(release, `"tombstoneWatermark":44192`, `"tombstoneWatermark":-1`), errcode.BadCount},
		{"negative size", sub(release, `"size":8388192,`, `"size":-8388192,`), errcode.BadCount},
		{"object for string", sub(release, `"objectVersion":"gen-9021"`, `"objectVersion":{"a":[[[]]]}`), errcode.BadDocument},
		{"array for object", sub(release, `"totals":{`, `"totals":[],"x":{`), errcode.BadDocument},
		{"digest upper case", sub(release, d0, strings.ToUpper(d0)), errcode.BadDigest},
		{"digest sha512", sub(release, d0, "sha512:"+d0[7:]), errcode.BadDigest},
		{"digest short", sub(release, d0, d0[:70]), errcode.BadDigest},
		{"digest not hex", sub(release, d0, d0[:70]+"zz"), errcode.BadDigest},
		{"digest number", sub(release, `"`+d0+`"`, `12`), errcode.BadDigest},
		{"trailing data", release + `{}`, errcode.BadDocument},
		{"trailing garbage", release + `x`, errcode.BadDocument},
		{"two documents", release + " " + release, errcode.BadDocument},
		{"truncated", release[:len(release)-1], errcode.BadDocument},
		{"empty", ``, errcode.BadDocument},
		{"array", `[` + release + `]`, errcode.BadDocument},
		{"lone high surrogate", sub(release, `"gen-9021"`, `"gen-\ud800"`), errcode.BadDocument},
		{"lone low surrogate", sub(release, `"gen-9021"`, `"gen-\udc00x"`), errcode.BadDocument},
		{"high surrogate then text", sub(release, `"gen-9021"`, `"gen-\ud83dxxxxxx"`), errcode.BadDocument},
		{"two high surrogates", sub(release, `"gen-9021"`, `"gen-\ud83d\ud83d"`), errcode.BadDocument},
		{"invalid UTF-8", sub(release, `"gen-9021"`, "\"gen-\xff\""), errcode.BadDocument},
		{"nesting bomb in a value", sub(release, `"objectVersion":"gen-9021"`, `"objectVersion":`+strings.Repeat("[", 100000)), errcode.BadDocument},
		{"nesting bomb top-level", strings.Repeat("[", 1<<20), errcode.BadDocument},
		{"nesting bomb in a map", sub(report, `"MISSING_MEMBER":["doc-7","doc-9"]`, `"MISSING_MEMBER":[`+strings.Repeat("{", 100000)), errcode.BadDocument},
		{"schema not a string", sub(release, `"schema":"`+ReleaseSchema+`"`, `"schema":1`), errcode.BadDocument},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := []byte(c.doc)
			var decode func([]byte) error
			switch {
			case strings.Contains(c.doc, ReportSchema):
				decode = func(b []byte) error { _, err := DecodeReport(b); return err }
			case strings.Contains(c.doc, TombstonesSchema):
				decode = func(b []byte) error { _, err := DecodeFenceLog(b, TombstonesSchema); return err }
			case strings.Contains(c.doc, RecordSchemaSchema):
				decode = func(b []byte) error { _, err := DecodeRecordSchema(b); return err }
			default:
				decode = func(b []byte) error { _, err := DecodeRelease(b); return err }
			}
			err := decode(b)
			if got := errcode.Of(err); got != c.want {
				t.Fatalf("code %q (%v), want %s", got, err, c.want)
			}
			// The message names where, never the whole document.
			if len(err.Error()) > 400 {
				t.Fatalf("error message is %d bytes long", len(err.Error()))
			}
		})
	}
}

func TestDocumentTooLarge(t *testing.T) {
	big := bytes.Repeat([]byte(" "), MaxDocumentSize+1)
	copy(big, mustEncode(t, validRelease()))
	if _, err := DecodeRelease(big); errcode.Of(err) != errcode.DocumentTooLarge {
		t.Fatalf("DecodeRelease of %d bytes: %v", len(big), err)
	}
	if _, _, err := DecodeAny(big); errcode.Of(err) != errcode.DocumentTooLarge {
		t.Fatalf("DecodeAny of %d bytes: %v", len(big), err)
	}
	// Exactly at the cap is allowed: trailing whitespace is not data.
	atCap := big[:MaxDocumentSize]
	if _, err := DecodeRelease(atCap); err != nil {
		t.Fatalf("DecodeRelease at the cap: %v", err)
	}
}

func TestDecodeAnyUnknownSchema(t *testing.T) {
	for _, doc := range []string{`{"schema":"training.other.v1"}`, `{"a":1}`, `[]`, `{"shards":[],"schema":"x.v1"}`, `{"a":{"b":[1,{"c":null}]},"schema":"` + ReleaseSchema + `"}`} {
		if _, _, err := DecodeAny([]byte(doc)); errcode.Of(err) != errcode.BadDocument {
			t.Errorf("DecodeAny(%s): %v, want BAD_DOCUMENT", doc, err)
		}
	}
	// The schema field need not come first.
	b := mustEncode(t, validFenceLog(BenchmarkSchema))
	moved := strings.Replace(string(b), `"schema":"`+BenchmarkSchema+`",`, ``, 1)
	moved = moved[:len(moved)-1] + `,"schema":"` + BenchmarkSchema + `"}`
	if schema, _, err := DecodeAny([]byte(moved)); err != nil || schema != BenchmarkSchema {
		t.Fatalf("DecodeAny with schema last: %q %v", schema, err)
	}
}
