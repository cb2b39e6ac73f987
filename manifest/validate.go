package manifest

import (
	"bytes"
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/shardproof/shardproof/internal/errcode"
)

// DefaultMemberPartition is the bucket function writers use unless told
// otherwise: xxh64 of the sampleId, top 12 bits, 4096 buckets.
const DefaultMemberPartition = "xxh64/k=12"

// MaxMemberPartitionK is the largest k a memberPartition may name.
const MaxMemberPartitionK = 24

// MaxExamples is the most example sampleIds a report keeps per class.
const MaxExamples = 20

// MaxReportFailures and MaxReportFailureBytes bound the failures a report
// lists (ListedFailures); Counts count every failure whatever the list
// holds, and FailuresOmitted says how many it leaves out. A failure takes
// about 460 bytes (its detail at most mapper.MaxFailureDetail), so a
// release of ~146,000 shards that all fail, the night a lifecycle rule
// expired every version, listed them all in a report over
// MaxDocumentSize: DOCUMENT_TOO_LARGE after reading everything, and no
// report. 10,000 failures are about 5 MB, more than anyone reads one by
// one and enough to see which shards and codes a fault spans. The bytes
// bound holds where the count alone would not: a shard id and a detail
// of up to 1,024 bytes each, every byte escaped as \u00XX in JSON, make a
// failure of 12 KB; 16 MiB of them leave the rest of the cap to the
// other sections.
const (
	MaxReportFailures     = 10_000
	MaxReportFailureBytes = 16 << 20
)

// ListedFailures returns how many of failures, sorted in the canonical
// order (CompareFailures), a report lists: the longest prefix of at most
// maxCount failures whose JSON encodings, a comma each, take at most
// maxBytes. The cut depends on the sorted list alone, so a report lists
// the same failures whatever the plan's shape; and a failure it lists is
// also listed by the cut of any subset holding it (nothing sorted before
// it there is missing from the whole), so each task may cut its own.
func ListedFailures(failures []ShardFailure, maxCount, maxBytes int) int {
	var buf bytes.Buffer
	enc := newEncoder(&buf)
	size := 0
	for i := range failures {
		if i >= maxCount {
			return i
		}
		buf.Reset()
		if err := enc.Encode(&failures[i]); err != nil {
			return i
		}
		// Encode's newline stands for the comma between failures.
		if size += buf.Len(); size > maxBytes {
			return i
		}
	}
	return len(failures)
}

// TotalsError reports a declared total that differs from the sum over the
// document's entries.
type TotalsError struct {
	Field    string // "shards", "records" or "tokens"
	Declared int64  // the document's totals.<Field>
	Sum      int64  // computed over its shards or members
}

func (e *TotalsError) Error() string {
	return fmt.Sprintf("totals.%s=%d, sum over entries=%d", e.Field, e.Declared, e.Sum)
}

// ErrorCode implements errcode.Coder.
func (e *TotalsError) ErrorCode() errcode.Code { return errcode.TotalsMismatch }

// ParseMemberPartition parses "xxh64/k=<k>" with k a decimal in
// [1, MaxMemberPartitionK] without sign or leading zeros, so each k has one
// spelling and a release's bytes pin it.
func ParseMemberPartition(s string) (k uint, err error) {
	return parseMemberPartition(s, "memberPartition")
}

func parseMemberPartition(s, path string) (uint, error) {
	ks, ok := strings.CutPrefix(s, "xxh64/k=")
	bad := !ok || ks == "" || len(ks) > 2 || ks[0] == '0'
	for i := 0; !bad && i < len(ks); i++ {
		bad = ks[i] < '0' || ks[i] > '9'
	}
	if !bad {
		n, _ := strconv.Atoi(ks)
		if n >= 1 && n <= MaxMemberPartitionK {
			return uint(n), nil
		}
	}
	return 0, errcode.New(errcode.BadDocument, "%s %q is not xxh64/k=<1..%d>", path, truncate(s), MaxMemberPartitionK)
}

func checkSchema(got, want string) error {
	if got != want {
		return errcode.New(errcode.BadDocument, "schema %q, want %q", truncate(got), want)
	}
	return nil
}

func required(d Digest, path string) error {
	if d.IsZero() {
		return errcode.New(errcode.BadDocument, "%s: missing digest", path)
	}
	return nil
}

func nonNegative(v int64, path string) error {
	if v < 0 {
		return errcode.New(errcode.BadCount, "%s: negative value %d", path, v)
	}
	return nil
}

// MaxNameLen caps shard ids and object versions.
const MaxNameLen = 1024

// checkName accepts a non-empty identifier of at most MaxNameLen bytes
// without control characters: ids and versions end up in logs, reports
// and terminals.
func checkName(s, path string) error {
	if s == "" {
		return errcode.New(errcode.BadDocument, "%s: empty", path)
	}
	if len(s) > MaxNameLen {
		return errcode.New(errcode.BadDocument, "%s: %d bytes, at most %d", path, len(s), MaxNameLen)
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] == 0x7f {
			return errcode.New(errcode.BadDocument, "%s: control character at byte %d", path, i)
		}
	}
	return nil
}

// Validate checks r against training.shard.release.v1.
func (r *Release) Validate() error {
	if err := checkSchema(r.Schema, ReleaseSchema); err != nil {
		return err
	}
	for _, c := range []struct {
		d    Digest
		path string
	}{{r.DatasetSnapshot, "datasetSnapshot"}, {r.RecordSchema, "recordSchema"}, {r.OrderedMemberTupleRoot, "orderedMemberTupleRoot"}} {
		if err := required(c.d, c.path); err != nil {
			return err
		}
	}
	if _, err := parseMemberPartition(r.Build.MemberPartition, "build.memberPartition"); err != nil {
		return err
	}
	if err := validateShards(r.Shards, r.Totals, "shards"); err != nil {
		return err
	}
	for i := range r.Shards {
		if r.Shards[i].Buckets != nil {
			return errcode.New(errcode.BadDocument, "shards[%d].buckets: only snapshot members declare bucket ranges", i)
		}
	}
	return nil
}

// CheckWatermarks reports whether fence documents at watermarks tombstone
// and benchmark (0 for a kind none was checked of) back r's claims. The
// release's tombstoneWatermark says the release holds no sample deleted by
// a tombstone up to that seq, its benchmarkFence no benchmark item up to
// that seq; only a document reaching the claim lets a verification count
// those hits, so a claim above it is WATERMARK_UNCHECKED, never VERIFIED.
// A document beyond the claim is fine: its later entries are checked too.
func (r *Release) CheckWatermarks(tombstone, benchmark uint64) error {
	var short []string
	for _, c := range []struct {
		field, doc     string
		claim, checked uint64
	}{
		{"tombstoneWatermark", "tombstone log", r.TombstoneWatermark, tombstone},
		{"benchmarkFence", "benchmark registry", r.BenchmarkFence, benchmark},
	} {
		switch {
		case c.claim <= c.checked:
		case c.checked == 0:
			short = append(short, fmt.Sprintf("%s %d, but no %s (or an empty one) was checked", c.field, c.claim, c.doc))
		default:
			short = append(short, fmt.Sprintf("%s %d, but the %s checked reaches only %d", c.field, c.claim, c.doc, c.checked))
		}
	}
	if len(short) == 0 {
		return nil
	}
	return errcode.New(errcode.WatermarkUnchecked, "the release claims %s", strings.Join(short, "; and "))
}

// Validate checks s against training.dataset.snapshot.v1.
func (s *Snapshot) Validate() error {
	if err := checkSchema(s.Schema, SnapshotSchema); err != nil {
		return err
	}
	if err := required(s.RecordSchema, "recordSchema"); err != nil {
		return err
	}
	if err := required(s.TupleRoot, "tupleRoot"); err != nil {
		return err
	}
	k, err := ParseMemberPartition(s.MemberPartition)
	if err != nil {
		return err
	}
	if err := validateShards(s.Members, s.Totals, "members"); err != nil {
		return err
	}
	return validateBuckets(s.Members, k)
}

// validateBuckets checks the members' declared bucket ranges: each within
// [0, 2^k) with lo <= hi, and no two sharing a bucket.
func validateBuckets(members []Shard, k uint) error {
	type ranged struct {
		r BucketRange
		i int
	}
	var rs []ranged
	for i := range members {
		b := members[i].Buckets
		if b == nil {
			continue
		}
		if b.Lo > b.Hi || uint64(b.Hi) > 1<<k {
			return errcode.New(errcode.BadDocument, "members[%d].buckets [%d, %d) is not a range within [0, %d)", i, b.Lo, b.Hi, uint64(1)<<k)
		}
		if b.Lo < b.Hi {
			rs = append(rs, ranged{*b, i})
		}
	}
	slices.SortFunc(rs, func(a, b ranged) int { return cmp.Compare(a.r.Lo, b.r.Lo) })
	for j := 1; j < len(rs); j++ {
		if rs[j].r.Lo < rs[j-1].r.Hi {
			return errcode.New(errcode.BadDocument, "members[%d].buckets [%d, %d) overlaps members[%d].buckets [%d, %d)",
				rs[j].i, rs[j].r.Lo, rs[j].r.Hi, rs[j-1].i, rs[j-1].r.Lo, rs[j-1].r.Hi)
		}
	}
	return nil
}

// validateShards checks descriptors and that totals add up over them.
func validateShards(shards []Shard, t Totals, name string) error {
	if len(shards) == 0 {
		return errcode.New(errcode.BadDocument, "%s: empty list", name)
	}
	ids := make(map[string]int, len(shards))
	var records, tokens int64
	for i := range shards {
		sh := &shards[i]
		path := fmt.Sprintf("%s[%d]", name, i)
		if err := checkName(sh.ID, path+".id"); err != nil {
			return err
		}
		if j, dup := ids[sh.ID]; dup {
			return errcode.New(errcode.BadDocument, "%s.id %q repeats %s[%d].id", path, truncate(sh.ID), name, j)
		}
		ids[sh.ID] = i
		if sh.MediaType != ParquetMediaType {
			return errcode.New(errcode.BadDocument, "%s.mediaType %q, want %q", path, truncate(sh.MediaType), ParquetMediaType)
		}
		if err := checkName(sh.ObjectVersion, path+".objectVersion"); err != nil {
			return err
		}
		for _, c := range []struct {
			d     Digest
			field string
		}{{sh.Digest, "digest"}, {sh.LogicalDigest, "logicalDigest"}, {sh.MemberSetDigest, "memberSetDigest"}} {
			if err := required(c.d, path+"."+c.field); err != nil {
				return err
			}
		}
		for _, c := range []struct {
			v     int64
			field string
		}{{sh.Size, "size"}, {sh.Records, "records"}, {sh.Tokens, "tokens"}} {
			if err := nonNegative(c.v, path+"."+c.field); err != nil {
				return err
			}
		}
		// Both are non-negative, so the sums only overflow upward.
		if records > math.MaxInt64-sh.Records || tokens > math.MaxInt64-sh.Tokens {
			return errcode.New(errcode.BadCount, "%s: record or token sum overflows int64", path)
		}
		records += sh.Records
		tokens += sh.Tokens
	}
	for _, c := range []struct {
		v     int64
		field string
	}{{t.Shards, "shards"}, {t.Records, "records"}, {t.Tokens, "tokens"}} {
		if err := nonNegative(c.v, "totals."+c.field); err != nil {
			return err
		}
	}
	if t.Shards != int64(len(shards)) {
		return &TotalsError{Field: "shards", Declared: t.Shards, Sum: int64(len(shards))}
	}
	if t.Records != records {
		return &TotalsError{Field: "records", Declared: t.Records, Sum: records}
	}
	if t.Tokens != tokens {
		return &TotalsError{Field: "tokens", Declared: t.Tokens, Sum: tokens}
	}
	return nil
}

// Validate checks l against training.tombstones.v1 or training.benchmark.v1:
// seq starts at 1 or above and strictly increases, and each entry names
// exactly one of sampleId and contentDigest.
func (l *FenceLog) Validate() error {
	if l.Schema != TombstonesSchema && l.Schema != BenchmarkSchema {
		return errcode.New(errcode.BadDocument, "schema %q, want %q or %q", truncate(l.Schema), TombstonesSchema, BenchmarkSchema)
	}
	var prev uint64
	for i, e := range l.Entries {
		if e.Seq <= prev {
			return errcode.New(errcode.BadDocument, "entries[%d].seq=%d, want > %d (seq starts at 1 and strictly increases)", i, e.Seq, prev)
		}
		prev = e.Seq
		if (e.SampleID == "") == e.ContentDigest.IsZero() {
			return errcode.New(errcode.BadDocument, "entries[%d]: want exactly one of sampleId and contentDigest", i)
		}
	}
	return nil
}

// Arrow type names a record schema may use.
var fieldTypes = []string{"utf8", "binary", "int64", "int32", "float64", "bool"}

// Validate checks s against training.record.schema.v1.
func (s *RecordSchema) Validate() error {
	if err := checkSchema(s.Schema, RecordSchemaSchema); err != nil {
		return err
	}
	if len(s.Fields) == 0 {
		return errcode.New(errcode.BadDocument, "fields: empty list")
	}
	byName := make(map[string]*Field, len(s.Fields))
	for i := range s.Fields {
		f := &s.Fields[i]
		if f.Name == "" {
			return errcode.New(errcode.BadDocument, "fields[%d].name: empty", i)
		}
		if _, dup := byName[f.Name]; dup {
			return errcode.New(errcode.BadDocument, "fields[%d].name %q repeats an earlier field", i, truncate(f.Name))
		}
		if !slices.Contains(fieldTypes, f.Type) {
			return errcode.New(errcode.BadDocument, "fields[%d].type %q, want one of %s", i, truncate(f.Type), strings.Join(fieldTypes, ", "))
		}
		byName[f.Name] = f
	}
	column := func(role, name string, types ...string) error {
		f := byName[name]
		switch {
		case f == nil:
			return errcode.New(errcode.BadDocument, "%s names %q, which is not a field", role, truncate(name))
		case !slices.Contains(types, f.Type):
			return errcode.New(errcode.BadDocument, "%s field %q has type %s, want %s", role, truncate(name), f.Type, strings.Join(types, " or "))
		case f.Nullable:
			return errcode.New(errcode.BadDocument, "%s field %q must not be nullable", role, truncate(name))
		}
		return nil
	}
	// An empty content is the snapshot member-file schema
	// (internal/canon.SnapshotMemberSchema): its rows carry the content
	// digest itself, so no column's bytes are content.
	if s.Content != "" {
		if err := column("content", s.Content, "utf8", "binary"); err != nil {
			return err
		}
	}
	for _, c := range []struct{ role, name, typ string }{
		{"tuple.sampleId", s.Tuple.SampleID, "utf8"},
		{"tuple.sourceId", s.Tuple.SourceID, "utf8"},
		{"tuple.sourceVersion", s.Tuple.SourceVersion, "int64"},
		{"tuple.split", s.Tuple.Split, "utf8"},
	} {
		if err := column(c.role, c.name, c.typ); err != nil {
			return err
		}
	}
	if s.Tokens != "" {
		if f := byName[s.Tokens]; f == nil || f.Type != "int64" {
			return errcode.New(errcode.BadDocument, "tokens names %q, which is not an int64 field", truncate(s.Tokens))
		}
	}
	return nil
}

// Digest returns the record schema digest: sha256 of s's canonical encoding.
func (s *RecordSchema) Digest() (Digest, error) {
	b, err := EncodeRecordSchema(s)
	if err != nil {
		return Digest{}, err
	}
	return Sum(b), nil
}

// Validate checks r against training.shard.verification.v1. The verdict
// must follow from the counts: VERIFIED exactly when Counts.Failed is false.
func (r *Report) Validate() error {
	if err := checkSchema(r.Schema, ReportSchema); err != nil {
		return err
	}
	if err := required(r.Root, "root"); err != nil {
		return err
	}
	if err := required(r.DatasetSnapshot, "datasetSnapshot"); err != nil {
		return err
	}
	if err := r.Counts.validate(); err != nil {
		return err
	}
	if r.Verdict != Verified && r.Verdict != Invalid {
		return errcode.New(errcode.BadDocument, "verdict %q, want %s or %s", truncate(r.Verdict), Verified, Invalid)
	}
	if (r.Verdict == Invalid) != r.Counts.Failed() {
		return errcode.New(errcode.BadDocument, "verdict %s contradicts the counts (a failure count is non-zero: %v)", r.Verdict, r.Counts.Failed())
	}
	for class, ids := range r.Examples {
		count, ok := exampleCounter[errcode.Code(class)]
		if !ok {
			return errcode.New(errcode.BadDocument, "examples: %q is not a member-level failure code", truncate(class))
		}
		if len(ids) > MaxExamples {
			return errcode.New(errcode.BadDocument, "examples.%s: %d sampleIds, at most %d", class, len(ids), MaxExamples)
		}
		if n := count(&r.Counts); int64(len(ids)) > n {
			return errcode.New(errcode.BadCount, "examples.%s lists %d sampleIds, but its count is %d", class, len(ids), n)
		}
		for i := 1; i < len(ids); i++ {
			if ids[i-1] >= ids[i] {
				return errcode.New(errcode.BadDocument, "examples.%s: sampleIds not sorted and unique at [%d]", class, i)
			}
		}
	}
	if err := nonNegative(r.FailuresOmitted, "failuresOmitted"); err != nil {
		return err
	}
	// The listed and the omitted make the number of failures that
	// manifest show and the summaries print.
	if r.FailuresOmitted > math.MaxInt64-int64(len(r.Failures)) {
		return errcode.New(errcode.BadCount, "failuresOmitted=%d beside %d failures listed: more failures than an int64 counts", r.FailuresOmitted, len(r.Failures))
	}
	if r.FailuresOmitted > 0 && r.Verdict != Invalid {
		return errcode.New(errcode.BadDocument, "failuresOmitted=%d in a %s report", r.FailuresOmitted, r.Verdict)
	}
	// Reports that list every failure may list any number (builds before
	// the bound wrote them); one that leaves some out was cut at it.
	if r.FailuresOmitted > 0 && len(r.Failures) > MaxReportFailures {
		return errcode.New(errcode.BadDocument, "%d failures listed and %d omitted: a report that omits failures lists at most %d", len(r.Failures), r.FailuresOmitted, MaxReportFailures)
	}
	for i, f := range r.Failures {
		path := fmt.Sprintf("failures[%d]", i)
		if f.Shard == "" {
			return errcode.New(errcode.BadDocument, "%s.shard: empty", path)
		}
		if f.Side != "release" && f.Side != "snapshot" {
			return errcode.New(errcode.BadDocument, "%s.side %q, want release or snapshot", path, truncate(f.Side))
		}
		if !errcode.Known(errcode.Code(f.Code)) {
			return errcode.New(errcode.BadDocument, "%s.code %q is not an error code", path, truncate(f.Code))
		}
		if i > 0 && CompareFailures(&r.Failures[i-1], &r.Failures[i]) > 0 {
			return errcode.New(errcode.BadDocument, "%s: failures not sorted by side, shard, code, detail", path)
		}
	}
	st := r.Stats
	if err := nonNegative(st.StoredBytes, "stats.storedBytes"); err != nil {
		return err
	}
	if err := nonNegative(st.LogicalBytes, "stats.logicalBytes"); err != nil {
		return err
	}
	if st.DecompressionRatio < 0 || math.IsNaN(st.DecompressionRatio) || math.IsInf(st.DecompressionRatio, 0) {
		return errcode.New(errcode.BadCount, "stats.decompressionRatio=%v", st.DecompressionRatio)
	}
	ex := r.Execution
	for _, c := range []struct {
		v     float64
		field string
	}{
		{float64(ex.MapTasks), "mapTasks"}, {float64(ex.Reducers), "reducers"}, {float64(ex.ShuffleBytes), "shuffleBytes"},
		{float64(ex.MergedFiles), "mergedFiles"}, {float64(ex.MergedBytes), "mergedBytes"},
		{ex.Seconds, "seconds"}, {ex.RecordsPerSecond, "recordsPerSecond"}, {ex.StoredMBPerSec, "storedMBPerSecond"},
		{ex.Stages.Read, "stages.read"}, {ex.Stages.StorageDigest, "stages.storageDigest"}, {ex.Stages.Decode, "stages.decode"},
		{ex.Stages.ContentDigest, "stages.contentDigest"}, {ex.Stages.Tuples, "stages.tuples"},
		{ex.Stages.ShuffleWrite, "stages.shuffleWrite"}, {ex.Stages.Reduce, "stages.reduce"}, {ex.Stages.Aggregate, "stages.aggregate"},
	} {
		if c.v < 0 || math.IsNaN(c.v) || math.IsInf(c.v, 0) {
			return errcode.New(errcode.BadCount, "execution.%s=%v", c.field, c.v)
		}
	}
	return nil
}

// exampleCounter maps each member-level failure class that may have
// example sampleIds to its counter; each example is a distinct sampleId
// counted there, so a class never lists more examples than its count.
var exampleCounter = map[errcode.Code]func(*Counts) int64{
	errcode.MissingMember:       func(c *Counts) int64 { return c.Missing },
	errcode.ExtraMember:         func(c *Counts) int64 { return c.Extra },
	errcode.DuplicateMember:     func(c *Counts) int64 { return c.Duplicate },
	errcode.ContentSubstitution: func(c *Counts) int64 { return c.ContentSubstitution },
	errcode.SourceVersionChange: func(c *Counts) int64 { return c.SourceVersionChange },
	errcode.SourceIDChange:      func(c *Counts) int64 { return c.SourceIDChange },
	errcode.SplitConflict:       func(c *Counts) int64 { return c.SplitConflict },
	errcode.SchemaMix:           func(c *Counts) int64 { return c.SchemaMix },
	errcode.TombstoneHit:        func(c *Counts) int64 { return c.TombstoneHits },
	errcode.BenchmarkHit:        func(c *Counts) int64 { return c.BenchmarkHits },
}

// CompareFailures is the canonical order of Report.Failures (side, shard,
// code, detail), so two verifications of the same inputs list them
// identically; a report in another order is BAD_DOCUMENT.
func CompareFailures(a, b *ShardFailure) int {
	return cmp.Or(cmp.Compare(a.Side, b.Side), cmp.Compare(a.Shard, b.Shard), cmp.Compare(a.Code, b.Code), cmp.Compare(a.Detail, b.Detail))
}

// Validate checks that every count is non-negative (BAD_DOCUMENT).
func (c *Counts) Validate() error { return c.validate() }

// IsExampleClass reports whether a report keeps examples for code: the
// member-level failure codes.
func IsExampleClass(code string) bool {
	_, ok := exampleCounter[errcode.Code(code)]
	return ok
}

func (c *Counts) validate() error {
	for _, f := range []struct {
		v    int64
		name string
	}{
		{c.Shards, "shards"}, {c.ShardsVerified, "shardsVerified"}, {c.Records, "records"}, {c.SnapshotRecords, "snapshotRecords"},
		{c.DigestFailures, "digestFailures"}, {c.SizeMismatches, "sizeMismatches"}, {c.VersionMissing, "versionMissing"},
		{c.LogicalMismatches, "logicalMismatches"}, {c.CountMismatches, "countMismatches"}, {c.DecodeErrors, "decodeErrors"},
		{c.SchemaMismatches, "schemaMismatches"}, {c.TupleRootMismatches, "tupleRootMismatches"}, {c.Missing, "missing"},
		{c.Extra, "extra"}, {c.Duplicate, "duplicate"}, {c.ContentSubstitution, "contentSubstitution"},
		{c.SourceVersionChange, "sourceVersionChange"}, {c.SourceIDChange, "sourceIdChange"}, {c.SplitConflict, "splitConflict"},
		{c.SchemaMix, "schemaMix"}, {c.TombstoneHits, "tombstoneHits"}, {c.BenchmarkHits, "benchmarkHits"},
	} {
		if err := nonNegative(f.v, "counts."+f.name); err != nil {
			return err
		}
	}
	if c.ShardsVerified > c.Shards {
		return errcode.New(errcode.BadCount, "counts.shardsVerified=%d exceeds counts.shards=%d", c.ShardsVerified, c.Shards)
	}
	return nil
}
