package coordinator

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sort"
	"strings"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/mapper"
	"github.com/shardproof/shardproof/objstore"
	"github.com/shardproof/shardproof/shuffle"
	"github.com/shardproof/shardproof/snapindex"
)

// PlanSchema identifies the plan document format.
const PlanSchema = "training.verify.plan.v1"

// Plan is the content-addressed description of one verification: what is
// verified against what, and how the work is split. Its digest names the
// job; a task is (plan digest, kind, index).
type Plan struct {
	Schema       string          `json:"schema"`
	Root         manifest.Digest `json:"root"`
	Snapshot     manifest.Digest `json:"snapshot"`
	Tombstones   manifest.Digest `json:"tombstones,omitzero"`
	Benchmark    manifest.Digest `json:"benchmark,omitzero"`
	RecordSchema manifest.Digest `json:"recordSchema"`
	K            uint            `json:"k"`
	// MapTasks lists, per map task, the inputs it maps. Together with the
	// reducers' Members they cover every release shard and every snapshot
	// member exactly once.
	MapTasks [][]Input `json:"mapTasks"`
	// Reducers are contiguous bucket ranges covering [0, 2^K) in order.
	Reducers []BucketRange `json:"reducers"`
	Tool     string        `json:"tool"`
	// Nonce makes each verification its own job. Commit records let one
	// run's tasks be retried without redoing finished work, but a new
	// verification must read every byte again (the store may have rotted
	// since), so it must never find an earlier run's commits.
	Nonce string `json:"nonce"`
	// ShuffleCompression is how the shuffle files are stored; empty
	// means zstd.
	ShuffleCompression shuffle.Compression `json:"shuffleCompression,omitempty"`
	// ShuffleChecksum is what the map commit records check the shuffle
	// files with; empty means sha256.
	ShuffleChecksum shuffle.Checksum `json:"shuffleChecksum,omitempty"`
	// ShuffleBatchRows is the number of rows per record batch of the
	// shuffle files (ShuffleBatchRowsFor the map tasks); zero, in plans
	// from before the field, means shuffle.BatchRows.
	ShuffleBatchRows int `json:"shuffleBatchRows,omitempty"`
	// SnapshotLeaves, when set, is the snapshot's bucket-leaf index
	// (package snapindex), checked against its tuple root when planned:
	// reducers then read a snapshot member only for a bucket whose
	// release leaf differs from the indexed one. Set only when reducers
	// read every member themselves.
	SnapshotLeaves *snapindex.Ref `json:"snapshotLeaves,omitempty"`
	// ReduceFanIn is the most shuffle files a reduce task merges at
	// once. A task with more (one per map task) first merges them a
	// group of this many at a time into files of its own, a merge level,
	// so its open files and memory stay bounded however many map tasks
	// the plan has. Zero, in plans from before the field, means no bound.
	ReduceFanIn int `json:"reduceFanIn,omitempty"`
}

// Input names one shard to map: Side 0 is the release manifest's shards,
// Side 1 the snapshot's members; Index is the position in that list.
type Input struct {
	Side  uint8 `json:"side"`
	Index int   `json:"index"`
}

// BucketRange is the half-open bucket range [Lo, Hi) of one reducer.
type BucketRange struct {
	Lo uint32 `json:"lo"`
	Hi uint32 `json:"hi"`
	// Members lists, in bucket order, the snapshot members this reducer
	// reads itself: members whose declared bucket ranges lie inside
	// [Lo, Hi). Their tuples never enter the shuffle.
	Members []int `json:"members,omitempty"`
}

// PlanOptions choose what to verify and how to split the work.
type PlanOptions struct {
	Root manifest.Digest
	// Snapshot defaults to the release manifest's datasetSnapshot.
	Snapshot manifest.Digest
	// Tombstones and Benchmark, when non-zero, name fence documents to
	// check the release against.
	Tombstones, Benchmark manifest.Digest
	// MapTasks and Reducers default to DefaultMapTasks and DefaultReducers
	// of the parallelism; both are capped by the work available.
	MapTasks, Reducers int
	Parallelism        int
	Tool               string
	// Nonce distinguishes this verification from earlier ones of the same
	// inputs; NewPlan draws a random one when it is empty. Set it only to
	// re-create a known plan (tests, a resubmitted job).
	Nonce string
	// ShuffleCompression is how shuffle files are stored (default zstd;
	// Verify, the local executor, picks none).
	ShuffleCompression shuffle.Compression
	// ShuffleChecksum is what shuffle files are checked with (default
	// sha256; Verify, the local executor, picks xxh64).
	ShuffleChecksum shuffle.Checksum
	// MapMembers maps every snapshot member in map tasks, even those whose
	// declared bucket ranges would let reducers read them directly.
	MapMembers bool
	// ReadAllMembers makes reducers read every snapshot member even when
	// the snapshot's leaf index says which buckets match (a full audit
	// of the snapshot's files as well as of the release).
	ReadAllMembers bool
	// ReduceFanIn bounds the shuffle files a reduce task merges at once
	// (Plan.ReduceFanIn); zero means DefaultReduceFanIn.
	ReduceFanIn int
}

// DefaultReduceFanIn is a plan's reduceFanIn unless told otherwise: a
// reduce task merges at most this many shuffle files at once. Up to it
// (about 32M release records with the default map tasks) the files are
// merged directly; beyond it each group's merge costs one more write
// and read of its rows, and a reducer holds a batch of each of at most
// this many files rather than one of each of thousands.
const DefaultReduceFanIn = 256

// MaxReduceFanIn is the largest reduceFanIn a plan may name.
const MaxReduceFanIn = 1 << 20

// ReduceBatchBytes is about how much memory a reduce task gives the record
// batches it holds, one per map task's file, and shuffleRowBytes about
// what a row takes in one (117 bytes at 4M bench records).
const (
	ReduceBatchBytes = 8 << 20
	shuffleRowBytes  = 128
)

// ShuffleBatchRowsFor is the shuffle files' rows per record batch for m
// map tasks: the most, doubling from shuffle.BatchRows up to 1,024, whose
// batches from m files fit ReduceBatchBytes. Each batch costs its reader
// about 30 µs of IPC framing whatever its size, so at 4M records (31 map
// tasks) 1,024-row batches saved a quarter of the shuffle's read and
// write CPU; with hundreds of map tasks (16M records) the batches stay
// small and the reducers' memory flat.
func ShuffleBatchRowsFor(m int) int {
	n := shuffle.BatchRows
	for n < 1024 && 2*n*shuffleRowBytes*max(m, 1) <= ReduceBatchBytes {
		n *= 2
	}
	return n
}

// MapTaskTuples is about how many tuples one map task takes by default. A
// map task holds its tuples until it writes its shuffle files, so this
// bounds a task's memory whatever the release's size; and every reducer
// reads one file per map task at once, so it also sets the reducers'
// fan-in (tuples / MapTaskTuples).
const MapTaskTuples = 1 << 17

// DefaultMapTasks is the map task count for n inputs holding the given
// number of records (release and snapshot together) at parallelism p:
// enough tasks that each takes about MapTaskTuples tuples, at least 2p
// so every worker has work, rounded up to a multiple of p, and at most one
// per input. The rounding keeps the last wave of tasks full: at 4M
// records, 31 tasks on 2 workers left the 31st running alone for a
// third of a second (an execution trace: one core busy, then the reduce
// phase), 32 end together.
func DefaultMapTasks(n int, records int64, p int) int {
	p = max(p, 1)
	m := int(min((records+MapTaskTuples-1)/MapTaskTuples, int64(n)))
	m = max(m, 2*p)
	m = (m + p - 1) / p * p
	return max(1, min(n, m))
}

// DefaultReducers is the reducer count at parallelism p.
func DefaultReducers(p int) int { return max(1, 2*p) }

// NewPlan reads the release, snapshot and fence documents, checks they are
// consistent, and stores the plan. Re-planning the same inputs with the same
// options, nonce included, gives the same plan digest.
func NewPlan(ctx context.Context, s objstore.Store, o PlanOptions) (*Plan, manifest.Digest, error) {
	if o.Nonce == "" {
		o.Nonce = NewNonce()
	}
	rel, err := loadRelease(ctx, s, o.Root)
	if err != nil {
		return nil, manifest.Digest{}, err
	}
	snapDigest := o.Snapshot
	if snapDigest.IsZero() {
		snapDigest = rel.DatasetSnapshot
	}
	snap, err := loadSnapshot(ctx, s, snapDigest)
	if err != nil {
		return nil, manifest.Digest{}, err
	}
	if rs, err := loadRecordSchema(ctx, s, rel.RecordSchema); err != nil {
		return nil, manifest.Digest{}, err
	} else if rs.Content == "" {
		// Only snapshot member files carry content digests instead of
		// content: a release's content digests must be computed from its
		// bytes, or content substitution could not be seen.
		return nil, manifest.Digest{}, errcode.New(errcode.BadDocument, "record schema %s of release %s names no content column", rel.RecordSchema, o.Root)
	}
	k, err := partitionK(rel, snap)
	if err != nil {
		return nil, manifest.Digest{}, err
	}
	var logs [2]*manifest.FenceLog
	for i, f := range []struct {
		d      manifest.Digest
		schema string
	}{{o.Tombstones, manifest.TombstonesSchema}, {o.Benchmark, manifest.BenchmarkSchema}} {
		if !f.d.IsZero() {
			if logs[i], err = loadFenceLog(ctx, s, f.d, f.schema); err != nil {
				return nil, manifest.Digest{}, err
			}
		}
	}
	// Before any byte is read: these documents could not make the
	// release VERIFIED.
	if err := checkClaims(rel, o.Root, logs[0], logs[1]); err != nil {
		return nil, manifest.Digest{}, err
	}
	p := max(1, o.Parallelism)
	r := o.Reducers
	if r <= 0 {
		r = DefaultReducers(p)
	}
	nb := uint64(1) << k
	r = int(min(uint64(r), nb))
	var ranged []int
	if !o.MapMembers {
		ranged = rangedMembers(snap.Members)
		// Cuts between members only: a snapshot of fewer members than
		// cores would leave cores idle in the reduce phase, and then
		// mapping the members is faster.
		if len(reducerRanges(nb, r, snap.Members, ranged)) < min(r, p) {
			ranged = nil
		}
	}
	inReduce := make([]bool, len(snap.Members))
	for _, i := range ranged {
		inReduce[i] = true
	}
	inputs := make([]Input, 0, len(rel.Shards)+len(snap.Members))
	var records int64
	for i := range rel.Shards {
		inputs = append(inputs, Input{Side: 0, Index: i})
		records = min(records+max(rel.Shards[i].Records, 0), math.MaxInt64/2)
	}
	for i := range snap.Members {
		if !inReduce[i] {
			inputs = append(inputs, Input{Side: 1, Index: i})
			records = min(records+max(snap.Members[i].Records, 0), math.MaxInt64/2)
		}
	}
	reducers := reducerRanges(nb, r, snap.Members, ranged)
	m := o.MapTasks
	if m <= 0 {
		m = DefaultMapTasks(len(inputs), records, p)
	}
	m = max(1, min(m, len(inputs)))
	// Before any work: a map task of too many inputs would fail to
	// store its commit record once it mapped them all.
	fit, each := mapTaskFit(len(reducers), inputs, rel, snap)
	if need := (len(inputs) + fit - 1) / fit; m < need {
		if o.MapTasks > 0 {
			return nil, manifest.Digest{}, errcode.New(errcode.Usage, "%d map tasks of %d inputs: a map task's commit record would be over the %d-byte cap after it mapped them all (about %d bytes an input, with %d reducers and room for listed failures: %d inputs a task at most): verify with --map-tasks %d or more",
				m, len(inputs), manifest.MaxDocumentSize, each, len(reducers), fit, need)
		}
		m = need
	}
	plan := &Plan{
		Schema: PlanSchema, Root: o.Root, Snapshot: snapDigest,
		Tombstones: o.Tombstones, Benchmark: o.Benchmark,
		RecordSchema: rel.RecordSchema, K: k, Tool: o.Tool, Nonce: o.Nonce,
		ShuffleCompression: o.ShuffleCompression,
		ShuffleChecksum:    o.ShuffleChecksum,
		ShuffleBatchRows:   ShuffleBatchRowsFor(m),
		MapTasks:           make([][]Input, m),
		ReduceFanIn:        o.ReduceFanIn,
	}
	if plan.ReduceFanIn == 0 {
		plan.ReduceFanIn = DefaultReduceFanIn
	}
	if plan.ReduceFanIn < 2 || plan.ReduceFanIn > MaxReduceFanIn {
		return nil, manifest.Digest{}, errcode.New(errcode.Usage, "reduce fan-in %d outside [2, %d]", plan.ReduceFanIn, MaxReduceFanIn)
	}
	// Round-robin spreads release shards and snapshot members evenly.
	for i, in := range inputs {
		plan.MapTasks[i%m] = append(plan.MapTasks[i%m], in)
	}
	plan.Reducers = reducers
	if len(snap.Members) > 0 && len(ranged) == len(snap.Members) && !o.ReadAllMembers {
		// The index only helps where reducers hold the whole snapshot
		// side of their buckets; a damaged one is ignored, not fatal:
		// the members are still there to read.
		ref, _, found, err := snapindex.Find(ctx, s, snapDigest, k, snap.TupleRoot)
		switch {
		case err != nil && ctx.Err() != nil:
			return nil, manifest.Digest{}, errcode.Wrap(errcode.Canceled, ctx.Err(), "plan")
		case err != nil:
			slog.Warn("snapshot leaf index not used; reducers read every member", "snapshot", snapDigest.String(), "code", string(errcode.Of(err)), "err", err)
		case found:
			plan.SnapshotLeaves = &ref
		}
	}
	b, err := manifest.Encode(plan)
	if err != nil {
		return nil, manifest.Digest{}, err
	}
	d, _, _, err := objstore.PutBlob(ctx, s, b)
	if err != nil {
		return nil, manifest.Digest{}, err
	}
	return plan, d, nil
}

// mapTaskFit returns how many of inputs one map task may hold with its
// commit record sure to fit manifest.MaxDocumentSize, and the bytes it
// counts for each input. It counts every input's result at its largest
// (each figure of 19 digits, its three digests, the longest shard id of
// inputs as JSON escapes it, the codes of omittedPerInput failures the
// record leaves out of its list), the failures the record lists (at
// most listedFailureBytes of them, cutResults), and one output per
// reducer at its largest: a map task stored a record over the cap after
// it mapped every input, and its reduce tasks, and every resume, refused
// it with DOCUMENT_TOO_LARGE (a result takes about 425 bytes: from about
// 158,000 clean shards in one map task). It counts about 680 bytes an
// input with a short shard id: about 74,000 inputs a task.
func mapTaskFit(reducers int, inputs []Input, rel *manifest.Release, snap *manifest.Snapshot) (fit, each int) {
	id := 0
	for _, in := range inputs {
		d := rel.Shards
		if in.Side != 0 {
			d = snap.Members
		}
		id = max(id, jsonStringLen(d[in.Index].ID))
	}
	code := 0
	for c := range failureCounter {
		code = max(code, jsonStringLen(c)+1)
	}
	var sum manifest.Digest
	for i := range sum {
		sum[i] = 0xff
	}
	largest := mapper.Result{Side: mapper.SideSnapshot, Index: math.MaxInt64, Records: math.MaxInt64, Tokens: math.MaxInt64,
		LogicalDigest: sum, MemberSetDigest: sum, StorageDigest: sum, StoredBytes: math.MaxInt64, LogicalBytes: math.MaxInt64,
		FailuresOmitted: []string{""}}
	out := Output{Key: jobPrefix(sum) + fmt.Sprintf("map/%d/r%d.arrow", math.MaxInt32, reducers), Version: objstore.Version(strings.Repeat("v", maxVersionBytes)),
		Digest: sum, XXH64: strings.Repeat("f", 16), Size: math.MaxInt64, Rows: math.MaxInt64}
	head := MapCommit{Schema: MapCommitSchema, Plan: sum, Task: math.MaxInt64}
	lr, err1 := json.Marshal(largest)
	lo, err2 := json.Marshal(out)
	lh, err3 := json.Marshal(head)
	if err := errors.Join(err1, err2, err3); err != nil {
		panic(err) // values of fixed types
	}
	// Each a comma before it; the result's omitted code list holds "".
	each = len(lr) + 1 - 2 + id - 2 + omittedPerInput*code
	room := manifest.MaxDocumentSize - listedFailureBytes - len(lh) - reducers*(len(lo)+1)
	return max(1, room/each), each
}

// omittedPerInput is how many failures of each input mapTaskFit counts
// a map commit record leaving out of its list: the most a file's result
// holds, its size and its digest, its schema (its records are still
// decoded), its logical digest and its counts, one each for records,
// tokens, member set and, for a snapshot member with declared buckets,
// tuples outside them (mapper.MapShardStream).
const omittedPerInput = 8

// maxVersionBytes is the longest object version mapTaskFit counts (S3's
// are 32 bytes, a file store's 20).
const maxVersionBytes = 1024

// jsonStringLen is the length of s as a JSON string, quotes included:
// encoding/json escapes a quote and a backslash with one more byte, and
// U+2028 and U+2029 as \u2028, three more (a manifest's names hold no
// control characters).
func jsonStringLen(s string) int {
	return len(s) + 2 + strings.Count(s, `"`) + strings.Count(s, `\`) + 3*(strings.Count(s, "\u2028")+strings.Count(s, "\u2029"))
}

// rangedMembers returns the snapshot members that declare a bucket range,
// in bucket order (an empty range before a non-empty one at the same lo).
// A validated snapshot's declared ranges are disjoint.
func rangedMembers(members []manifest.Shard) []int {
	var idx []int
	for i := range members {
		if members[i].Buckets != nil {
			idx = append(idx, i)
		}
	}
	slices.SortStableFunc(idx, func(a, b int) int {
		x, y := members[a].Buckets, members[b].Buckets
		return cmp.Or(cmp.Compare(x.Lo, y.Lo), cmp.Compare(x.Hi, y.Hi))
	})
	return idx
}

// reducerRanges splits [0, nb) into at most r contiguous ranges and hands
// each ranged member to the range holding its declared buckets. A cut
// never falls strictly inside a member's range: each cut is the even one
// (j·nb/r) moved to the nearer end of the member straddling it, so fewer
// than r ranges come out only when members are fewer than reducers.
func reducerRanges(nb uint64, r int, members []manifest.Shard, ranged []int) []BucketRange {
	// Non-empty declared ranges are disjoint (an empty one may sit inside
	// another), so among them, sorted, only the last one starting below a
	// cut can straddle it.
	var spans []*manifest.BucketRange
	for _, i := range ranged {
		if b := members[i].Buckets; b.Lo < b.Hi {
			spans = append(spans, b)
		}
	}
	cuts := []uint64{0}
	for j := 1; j < r; j++ {
		c := uint64(j) * nb / uint64(r)
		if k := sort.Search(len(spans), func(x int) bool { return uint64(spans[x].Lo) >= c }) - 1; k >= 0 {
			if b := spans[k]; c < uint64(b.Hi) {
				if c-uint64(b.Lo) <= uint64(b.Hi)-c {
					c = uint64(b.Lo)
				} else {
					c = uint64(b.Hi)
				}
			}
		}
		if c > cuts[len(cuts)-1] && c < nb {
			cuts = append(cuts, c)
		}
	}
	cuts = append(cuts, nb)
	rs := make([]BucketRange, len(cuts)-1)
	for j := range rs {
		rs[j] = BucketRange{Lo: uint32(cuts[j]), Hi: uint32(cuts[j+1])}
	}
	j := 0
	for _, i := range ranged {
		b := members[i].Buckets
		// An empty range at lo belongs with bucket lo (or the last
		// reducer, at the end of the space).
		for j < len(rs)-1 && uint64(b.Lo) >= uint64(rs[j].Hi) {
			j++
		}
		rs[j].Members = append(rs[j].Members, i)
	}
	return rs
}

func partitionK(rel *manifest.Release, snap *manifest.Snapshot) (uint, error) {
	k, err := manifest.ParseMemberPartition(rel.Build.MemberPartition)
	if err != nil {
		return 0, err
	}
	ks, err := manifest.ParseMemberPartition(snap.MemberPartition)
	if err != nil {
		return 0, err
	}
	if k != ks {
		return 0, errcode.New(errcode.BadDocument, "release memberPartition %q differs from the snapshot's %q", rel.Build.MemberPartition, snap.MemberPartition)
	}
	return k, nil
}

// validate checks a plan read back from the store against the documents it
// names, so a task never indexes outside them.
func (p *Plan) validate(shards int, members []manifest.Shard) error {
	bad := func(format string, args ...any) error {
		return errcode.New(errcode.BadDocument, "plan: "+format, args...)
	}
	if p.Schema != PlanSchema {
		return bad("schema %q, want %q", p.Schema, PlanSchema)
	}
	if p.K < 1 || p.K > manifest.MaxMemberPartitionK {
		return bad("k=%d out of range", p.K)
	}
	if !p.ShuffleCompression.Valid() {
		return bad("unknown shuffleCompression %q", p.ShuffleCompression)
	}
	if !p.ShuffleChecksum.Valid() {
		return bad("unknown shuffleChecksum %q", p.ShuffleChecksum)
	}
	if p.ShuffleBatchRows < 0 || p.ShuffleBatchRows > shuffle.MaxBatchRows {
		return bad("shuffleBatchRows %d outside [0, %d]", p.ShuffleBatchRows, shuffle.MaxBatchRows)
	}
	if p.ReduceFanIn != 0 && (p.ReduceFanIn < 2 || p.ReduceFanIn > MaxReduceFanIn) {
		return bad("reduceFanIn %d outside [2, %d]", p.ReduceFanIn, MaxReduceFanIn)
	}
	if len(p.MapTasks) == 0 || len(p.Reducers) == 0 {
		return bad("no map tasks or no reducers")
	}
	seen := [2][]bool{make([]bool, shards), make([]bool, len(members))}
	for _, task := range p.MapTasks {
		for _, in := range task {
			if in.Side > 1 || in.Index < 0 || in.Index >= len(seen[in.Side]) || seen[in.Side][in.Index] {
				return bad("input (side %d, index %d) is out of range or listed twice", in.Side, in.Index)
			}
			seen[in.Side][in.Index] = true
		}
	}
	next := uint32(0)
	for _, r := range p.Reducers {
		if r.Lo != next || r.Hi <= r.Lo {
			return bad("reducer range [%d, %d) does not continue at %d", r.Lo, r.Hi, next)
		}
		next = r.Hi
		lo := r.Lo
		for _, i := range r.Members {
			if i < 0 || i >= len(members) || seen[1][i] {
				return bad("reducer [%d, %d): member %d is out of range or listed twice", r.Lo, r.Hi, i)
			}
			seen[1][i] = true
			// Inside the range and in bucket order; an empty range sits at
			// a bucket of the range, or at the end of the last one.
			b := members[i].Buckets
			if b == nil || b.Lo < lo || b.Hi > r.Hi || b.Lo == r.Hi && uint64(r.Hi) != uint64(1)<<p.K {
				return bad("reducer [%d, %d): member %d does not declare buckets inside the range, after the previous member's", r.Lo, r.Hi, i)
			}
			lo = b.Lo
		}
	}
	for side := range seen {
		if i := slices.Index(seen[side], false); i >= 0 {
			return bad("input (side %d, index %d) is in no map task or reducer", side, i)
		}
	}
	if uint64(next) != 1<<p.K {
		return bad("reducer ranges end at %d, not %d", next, uint64(1)<<p.K)
	}
	if l := p.SnapshotLeaves; l != nil {
		if p.K > snapindex.MaxK || l.Key == "" || l.Version == "" || l.Digest.IsZero() {
			return bad("snapshotLeaves names no exact index version, or k=%d is not indexed", p.K)
		}
		for _, task := range p.MapTasks {
			for _, in := range task {
				if in.Side == 1 {
					return bad("snapshotLeaves with snapshot member %d in a map task: reducers must read every member", in.Index)
				}
			}
		}
	}
	return nil
}
