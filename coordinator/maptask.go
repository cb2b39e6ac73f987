package coordinator

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/internal/freelist"
	"github.com/shardproof/shardproof/internal/verifyread"
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/mapper"
	"github.com/shardproof/shardproof/objstore"
	"github.com/shardproof/shardproof/shuffle"
)

// MapCommitSchema identifies map commit records.
const MapCommitSchema = "training.verify.map.commit.v1"

// MapCommit is the commit record of a map task: once it exists the task is
// done, and reducers read exactly the outputs it lists.
type MapCommit struct {
	Schema  string          `json:"schema"`
	Plan    manifest.Digest `json:"plan"`
	Task    int             `json:"task"`
	Outputs []Output        `json:"outputs"`
	// Results holds the mapper's figures and failures for each input, in
	// the plan's order.
	Results []mapper.Result `json:"results"`
}

// Output names one committed file by exact version, checksum and size.
// Exactly one of Digest and XXH64 is set, as the plan's shuffleChecksum
// says.
type Output struct {
	Key     string           `json:"key"`
	Version objstore.Version `json:"version"`
	Digest  manifest.Digest  `json:"digest,omitzero"`
	// XXH64 is the file's xxh64 (seed 0), 16 lowercase hex digits.
	XXH64 string `json:"xxh64,omitempty"`
	Size  int64  `json:"size"`
	Rows  int64  `json:"rows"`
}

// open returns a reader of rc checking the output's size and checksum.
func (o Output) open(rc io.ReadCloser) io.ReadCloser {
	if o.XXH64 != "" {
		sum, _ := parseXXH64(o.XXH64) // checkMapCommit parsed it
		return verifyread.NewXXH64(rc, o.Key, sum, o.Size)
	}
	return verifyread.New(rc, o.Key, o.Digest, o.Size)
}

// parseXXH64 parses an Output's XXH64: exactly 16 lowercase hex digits.
func parseXXH64(s string) (uint64, bool) {
	if len(s) != 16 || strings.ToLower(s) != s {
		return 0, false
	}
	v, err := strconv.ParseUint(s, 16, 64)
	return v, err == nil
}

// Map runs map task i: it maps every input of the task, writes one sorted
// shuffle file per reduce range and then the commit record. If the commit
// record already exists, Map returns it without doing anything; if it
// exists but is damaged (SHUFFLE_CORRUPT), Map runs the task again (see
// redoMap). progress, if non-nil, is called after each input.
func (j *Job) Map(ctx context.Context, i int, progress func(mapper.Result)) (*MapCommit, error) {
	if i < 0 || i >= len(j.Plan.MapTasks) {
		return nil, errcode.New(errcode.Usage, "map task %d out of range [0, %d)", i, len(j.Plan.MapTasks))
	}
	var done MapCommit
	found, err := readRecord(ctx, j.Store, j.mapCommitKey(i), &done)
	if err == nil && found {
		err = j.checkMapCommit(i, &done)
	}
	switch {
	case errcode.Of(err) == errcode.ShuffleCorrupt:
		return j.redoMap(ctx, i, -1, err, progress)
	case err != nil:
		return nil, err
	case !found:
		return j.runMap(ctx, i, progress, false)
	}
	if progress != nil {
		for _, r := range done.Results {
			progress(r)
		}
	}
	return &done, nil
}

// runMap maps map task i's inputs and writes its shuffle files, then
// its commit record, with conditional creates; again writes the files
// as new versions instead, and leaves the record to the caller
// (redoMap).
func (j *Job) runMap(ctx context.Context, i int, progress func(mapper.Result), again bool) (*MapCommit, error) {
	set := getParts()
	defer putParts(set)
	set.enc.Compression = j.Plan.ShuffleCompression
	set.enc.BatchRows = j.Plan.ShuffleBatchRows
	buf := set.buf
	nb := uint64(1) << j.Plan.K
	var emitErr error
	var row shuffle.Row
	emit := func(t *mapper.Tuple) error {
		if uint64(t.Bucket) >= nb {
			emitErr = errcode.New(errcode.Internal, "mapper emitted bucket %d for k=%d", t.Bucket, j.Plan.K)
			return emitErr
		}
		row.Bucket, row.SampleID, row.SourceID, row.SourceVersion = t.Bucket, t.SampleID, t.SourceID, t.SourceVersion
		row.ContentDigest, row.Split, row.SchemaDigest, row.TupleDigest = t.LogicalContentDigest, t.Split, t.SchemaDigest, t.Digest
		buf.Append(&row)
		return nil
	}
	var tm *mapper.Timings
	if j.clock != nil {
		tm = &j.clock.Timings
	}
	opts := [2]mapper.Options{
		{Store: j.Store, Schema: j.RecordSchema, SchemaDigest: j.Plan.RecordSchema, K: j.Plan.K, Timings: tm},
		// Member tuples name the record schema their snapshot describes: a
		// snapshot of another schema than the release's diffs as SCHEMA_MIX.
		{Store: j.Store, Schema: j.RecordSchema, SchemaDigest: j.Snapshot.RecordSchema, K: j.Plan.K, Timings: tm},
	}
	commit := &MapCommit{Schema: MapCommitSchema, Plan: j.PlanDigest, Task: i}
	// The descriptors' record counts size the buffer once: growing it
	// append by append copied every column over and over. They are only a
	// hint (a file may hold other counts), bounded by a few map tasks.
	var records int64
	for _, in := range j.Plan.MapTasks[i] {
		records = min(records+min(max(j.desc(in).Records, 0), 4*MapTaskTuples), 4*MapTaskTuples)
	}
	buf.Grow(int(records))
	// Each input is read while the one before it decodes (mapper.Prefetch).
	inputs := j.Plan.MapTasks[i]
	fetch := func(k int) *mapper.Fetch {
		in := inputs[k]
		return mapper.Prefetch(ctx, opts[in.Side], mapper.Input{Side: mapper.Side(in.Side), Index: in.Index, Desc: j.desc(in)}, true)
	}
	var next *mapper.Fetch
	if len(inputs) > 0 {
		next = fetch(0)
	}
	defer func() { next.Release() }()
	for k, in := range inputs {
		desc := j.desc(in)
		row.Side = shuffle.Side(in.Side)
		mark := buf.Len()
		cur := next
		next = nil
		if k+1 < len(inputs) {
			next = fetch(k + 1)
		}
		res, err := mapper.MapFetched(ctx, opts[in.Side], cur, emit)
		if emitErr != nil {
			return nil, emitErr
		}
		if err != nil {
			return nil, wrap(err, "map task %d: %s %s", i, row.Side, desc.ID)
		}
		if !res.Decoded {
			// A file that did not decode contributes no tuples.
			buf.Truncate(mark)
		}
		commit.Results = append(commit.Results, res)
		if progress != nil {
			progress(res)
		}
	}
	start := time.Now()
	defer j.clock.add(&j.clock.shuffleWrite, start)
	ends := make([]uint32, len(j.Plan.Reducers))
	for r, br := range j.Plan.Reducers {
		ends[r] = br.Hi
	}
	err := set.enc.EncodeRanges(buf, ends, func(r int, b []byte, rows int) error {
		out, err := j.putOutput(ctx, j.mapOutputKey(i, r), b, again)
		if err != nil {
			return err
		}
		out.Rows = int64(rows)
		commit.Outputs = append(commit.Outputs, out)
		return nil
	})
	if err != nil {
		return nil, err
	}
	cutResults(commit.Results)
	if again {
		return commit, nil
	}
	b, err := manifest.Encode(commit)
	if err != nil {
		return nil, err
	}
	if _, err := putExact(ctx, j.Store, j.mapCommitKey(i), b); err != nil {
		return nil, err
	}
	j.logMapCommit(i, commit)
	return commit, nil
}

// logMapCommit logs map task i's commit.
func (j *Job) logMapCommit(i int, commit *MapCommit) {
	var failed, failures int
	for k := range commit.Results {
		if n := len(failureCodes(&commit.Results[k])); n > 0 {
			failed, failures = failed+1, failures+n
		}
	}
	if failures > 0 {
		// One line per task: the mapper logs each file's failures at
		// debug only, and the aggregation the first of the report's.
		j.log().Info("map task committed with failures", "task", i, "inputs", len(commit.Results), "failedInputs", failed, "failures", failures)
	} else {
		j.log().Debug("map task committed", "task", i, "inputs", len(commit.Results))
	}
}

// putOutput stores shuffle file key with the plan's checksum: with a
// conditional create (putExact), or as a new version when again (a map
// task run again over damaged outputs: the version there is not to be
// compared with, and the commit record names the new one).
func (j *Job) putOutput(ctx context.Context, key string, b []byte, again bool) (Output, error) {
	out := Output{Key: key, Size: int64(len(b))}
	var err error
	if j.Plan.ShuffleChecksum == shuffle.XXH64 {
		out.XXH64 = fmt.Sprintf("%016x", xxhash.Sum64(b))
	} else {
		out.Digest = manifest.Sum(b)
	}
	switch {
	case again:
		o := objstore.PutOptions{Size: out.Size, SHA256: out.Digest, Ephemeral: j.ephemeralShuffle}
		if o.Ephemeral {
			o.SHA256 = [32]byte{} // as putExactSum
		}
		out.Version, err = j.Store.Put(ctx, key, bytes.NewReader(b), o)
	case out.XXH64 != "":
		o := objstore.PutOptions{IfNoneMatch: true, Size: out.Size, Ephemeral: j.ephemeralShuffle}
		out.Version, err = putExactWith(ctx, j.Store, key, b, o, "xxh64:"+out.XXH64, out.open)
	default:
		out.Version, err = putExactSum(ctx, j.Store, key, b, out.Digest, j.ephemeralShuffle)
	}
	return out, err
}

// partSet is what a map task writes its shuffle files with: one buffer
// for all its tuples and one encoder, which splits them by reduce range.
type partSet struct {
	buf *shuffle.Buffer
	enc *shuffle.Encoder
}

// partSets keeps the buffers of finished map tasks for the next one,
// about one set per core: a map task's tuples are the largest allocation
// of verify.
var partSets = freelist.New[partSet](runtime.GOMAXPROCS(0))

func getParts() partSet {
	if p, ok := partSets.Get(); ok {
		return p
	}
	return partSet{buf: new(shuffle.Buffer), enc: new(shuffle.Encoder)}
}

// dropParts lets the kept buffers go, once no map task is left to run:
// the reduce phase has no use for them.
func dropParts() {
	for {
		if _, ok := partSets.Get(); !ok {
			return
		}
	}
}

func putParts(p partSet) {
	p.buf.Reset()
	partSets.Put(p)
}

func (j *Job) desc(in Input) manifest.Shard {
	if in.Side == 0 {
		return j.Release.Shards[in.Index]
	}
	return j.Snapshot.Members[in.Index]
}

// checkMapCommit checks a commit record read back from the store before
// anything trusts it.
func (j *Job) checkMapCommit(i int, c *MapCommit) error {
	if err := j.checkMapCommitHead(i, c, len(c.Outputs), len(c.Results)); err != nil {
		return err
	}
	for r := range c.Outputs {
		if err := j.checkOutput(i, r, &c.Outputs[r]); err != nil {
			return err
		}
	}
	return j.checkMapResults(i, c)
}

// checkMapResults checks the results of map task i's commit record
// against the plan, and that the figures the report sums of them fit
// (resultsFit).
func (j *Job) checkMapResults(i int, c *MapCommit) error {
	ins := j.Plan.MapTasks[i]
	for k, r := range c.Results {
		if uint8(r.Side) != ins[k].Side || r.Index != ins[k].Index {
			return j.badMapCommit(i, "result %d is (side %d, index %d), plan says (side %d, index %d)", k, r.Side, r.Index, ins[k].Side, ins[k].Index)
		}
		if err := checkResult(&r); err != nil {
			return j.badMapCommit(i, "result %d: %v", k, err)
		}
	}
	if !resultsFit(c.Results) {
		return j.badMapCommit(i, "its results' stored or logical bytes, or buckets read, sum past an int64")
	}
	return nil
}

// checkMapCommitHead checks what a map task's commit record says of
// itself, and its numbers of outputs and results, against the plan.
func (j *Job) checkMapCommitHead(i int, c *MapCommit, outputs, results int) error {
	if c.Schema != MapCommitSchema || c.Plan != j.PlanDigest || c.Task != i {
		return j.badMapCommit(i, "schema %q, plan %s, task %d do not match", c.Schema, c.Plan, c.Task)
	}
	if outputs != len(j.Plan.Reducers) {
		return j.badMapCommit(i, "%d outputs for %d reducers", outputs, len(j.Plan.Reducers))
	}
	if ins := len(j.Plan.MapTasks[i]); results != ins {
		return j.badMapCommit(i, "%d results for %d inputs", results, ins)
	}
	return nil
}

// checkOutput checks output o of map task i's commit record, the shuffle
// file it wrote for reduce task r, against the plan.
func (j *Job) checkOutput(i, r int, o *Output) error {
	if o.Key != j.mapOutputKey(i, r) || o.Size < 0 || o.Rows < 0 {
		return j.badMapCommit(i, "output %d is %q (size %d)", r, o.Key, o.Size)
	}
	if j.Plan.ShuffleChecksum == shuffle.XXH64 {
		if _, ok := parseXXH64(o.XXH64); !ok || !o.Digest.IsZero() {
			return j.badMapCommit(i, "output %d: the plan checks shuffle files with xxh64; the record has xxh64 %.20q and digest %s", r, o.XXH64, o.Digest)
		}
	} else if o.XXH64 != "" || o.Digest.IsZero() {
		return j.badMapCommit(i, "output %d: the plan checks shuffle files with sha256; the record has xxh64 %.20q and digest %s", r, o.XXH64, o.Digest)
	}
	return nil
}

// badMapCommit is SHUFFLE_CORRUPT naming map task i's commit record.
func (j *Job) badMapCommit(i int, format string, args ...any) error {
	return errcode.New(errcode.ShuffleCorrupt, "%s: "+format, append([]any{j.mapCommitKey(i)}, args...)...)
}

// checkResult refuses a file's result no mapper produces: a negative
// figure, or a failure code the report has no counter for.
func checkResult(r *mapper.Result) error {
	if r.Records < 0 || r.Tokens < 0 || r.StoredBytes < 0 || r.LogicalBytes < 0 || r.BucketsRead < 0 {
		return fmt.Errorf("negative figures (records %d, tokens %d, stored %d, logical %d, buckets %d)", r.Records, r.Tokens, r.StoredBytes, r.LogicalBytes, r.BucketsRead)
	}
	for _, code := range failureCodes(r) {
		if failureCounter[code] == nil {
			return fmt.Errorf("failure code %.40q is not a shard-level code", code)
		}
	}
	return nil
}

// failureCodes returns the codes of r's failures, those its commit record
// lists and those it left out.
func failureCodes(r *mapper.Result) []string {
	codes := make([]string, 0, len(r.Failures)+len(r.FailuresOmitted))
	for _, f := range r.Failures {
		codes = append(codes, f.Code)
	}
	return append(codes, r.FailuresOmitted...)
}
