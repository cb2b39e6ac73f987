package coordinator

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/shardproof/shardproof/internal/canon"
	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/objstore"
	"github.com/shardproof/shardproof/reducer"
	"github.com/shardproof/shardproof/shuffle"
	"github.com/shardproof/shardproof/snapindex"
	"github.com/shardproof/shardproof/stage"
	"github.com/shardproof/shardproof/stage/stagetest"
	"github.com/shardproof/shardproof/tuplehash"
)

// The differential test generates small random releases and snapshots,
// verifies them through Verify (the local executor, as the CLI runs it)
// with random plan shapes, and compares every diff count, the example
// sampleIds, both tuple roots and the verdict with an oracle that knows
// nothing of buckets, partitions, shuffle files, member layouts or the
// leaf index: a Go map from sampleId to the tuples of each side.
//
// A case draws: k from 1 to 14 (tiny k puts most ids in one bucket);
// sampleIds empty, long (to 70 KB), multi-byte, with NUL or tab,
// differing from another only in case, a trailing byte or character,
// or chosen to share another's bucket; now and then bucket sizes at the
// member layout's edges (0, 1, 255-257, 1,023-1,025 rows); a snapshot
// that is a multiset (a tuple twice, one sampleId with two tuples);
// a release that is the snapshot exactly, differs by one fault, or by
// many (dropped, repeated within and across shards, content changed by
// one byte, split, sourceVersion or sourceId changed, a duplicate that
// is also a content change, an id replaced by a near-identical one,
// extras); 1 to 40 shards, a shard of no rows; 1 to 6 member files,
// empty ones included, declaring bucket ranges and sorted or neither,
// row groups of 7 to 8,192 rows, with or without the leaf index;
// tombstone and benchmark entries by sampleId and by content; and a
// plan of up to 6 map tasks and 8 reducers (or the defaults),
// parallelism 1 to 3, merge fan-in 2 or 3, members mapped or read whole,
// zstd or plain shuffle.
//
// SHARDPROOF_DIFF_CASES sets the number of cases (default 12, a few
// seconds); SHARDPROOF_DIFF_SEED the first seed, to replay a failure.

// diffCase is one generated release and snapshot with the plan to
// verify them by.
type diffCase struct {
	seed uint64
	k    uint
	// snap are the snapshot's tuples (a multiset), rel the release's
	// rows by shard.
	snap []tuplehash.Tuple
	rel  [][]stage.Row
	// members is the number of member files; declare says whether they
	// declare bucket ranges, index whether the leaf index is stored.
	members        int
	declare, index bool
	memberRowGroup int64
	tombs, benches []manifest.FenceEntry
	plan           PlanOptions
}

func (c *diffCase) String() string {
	rows := 0
	for _, sh := range c.rel {
		rows += len(sh)
	}
	return fmt.Sprintf("seed %d: k=%d, %d snapshot tuples in %d members (declared %v, index %v, row groups of %d), %d release rows in %d shards, plan maps=%d reducers=%d parallelism=%d fanIn=%d mapMembers=%v readAll=%v compression=%q",
		c.seed, c.k, len(c.snap), c.members, c.declare, c.index, c.memberRowGroup, rows, len(c.rel),
		c.plan.MapTasks, c.plan.Reducers, c.plan.Parallelism, c.plan.ReduceFanIn, c.plan.MapMembers, c.plan.ReadAllMembers, c.plan.ShuffleCompression)
}

// idGen makes sampleIds of the shapes the format allows and a verifier
// might get wrong: empty, long, multi-byte, with NUL and control bytes,
// differing from another only in case or in a trailing byte, and ids
// that land in a given bucket.
type idGen struct {
	r    *rand.Rand
	k    uint
	used map[string]bool
	n    int
}

func (g *idGen) fresh(id string) bool {
	if g.used[id] {
		return false
	}
	g.used[id] = true
	return true
}

// next returns a new id, related to earlier ones with some probability.
func (g *idGen) next(earlier []string) string {
	for {
		g.n++
		var id string
		switch p := g.r.IntN(100); {
		case p < 3:
			id = ""
		case p < 8:
			n := 200 + g.r.IntN(3000)
			if g.r.IntN(20) == 0 {
				// Longer than a member page's 32 KiB.
				n = 70000
			}
			id = strings.Repeat(string(rune('a'+g.r.IntN(26))), n) + strconv.Itoa(g.n)
		case p < 13:
			id = []string{"ünï-", "日本-", "a\x00b-", "tab\t", "e\u0301-", "\U0001F600"}[g.r.IntN(6)] + strconv.Itoa(g.n)
		case p < 30 && len(earlier) > 0:
			e := earlier[g.r.IntN(len(earlier))]
			switch g.r.IntN(5) {
			case 0:
				id = swapCase(e)
			case 1:
				id = e + "\x00"
			case 2:
				id = e + " "
			case 3:
				// Its last character off (not a byte: an id is UTF-8).
				_, n := utf8.DecodeLastRuneInString(e)
				id = e[:len(e)-n]
			default:
				id = e + "0"
			}
		case p < 45 && len(earlier) > 0:
			id = g.sameBucket(tuplehash.Bucket(earlier[g.r.IntN(len(earlier))], g.k))
		default:
			id = fmt.Sprintf("s-%d", g.n)
		}
		if g.fresh(id) {
			return id
		}
	}
}

// sameBucket returns an unused id in bucket b.
func (g *idGen) sameBucket(b uint32) string {
	for i := 0; ; i++ {
		id := fmt.Sprintf("c%d-%d", g.n, i)
		if tuplehash.Bucket(id, g.k) == b && !g.used[id] {
			return id
		}
	}
}

func swapCase(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z':
			return r - 'a' + 'A'
		case r >= 'A' && r <= 'Z':
			return r - 'A' + 'a'
		}
		return r
	}, s)
}

// genCase draws a case from seed.
func genCase(seed uint64, sd manifest.Digest) *diffCase {
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	c := &diffCase{seed: seed}
	c.k = []uint{1, 2, 3, 5, 8, 12, 12, 12, 14}[r.IntN(9)]
	g := &idGen{r: r, k: c.k, used: map[string]bool{}}
	n := r.IntN(300)
	if r.IntN(8) == 0 {
		// Buckets longer than a member page (1,024 rows) and row group.
		n = 1500 + r.IntN(1500)
	}
	splits := []string{"train", "val", "test", "Train", "train\x00"}
	var ids []string
	if r.IntN(8) == 0 {
		// Buckets of sizes at the member layout's edges: a read window
		// widens runs shorter than 256 rows to the 1,024-row windows
		// holding them, and a member page holds about 1,024 rows.
		c.k = 2 + uint(r.IntN(2))
		g.k = c.k
		for b := range uint32(1) << c.k {
			size := []int{0, 1, 255, 256, 257, 1023, 1024, 1025}[r.IntN(8)]
			for range size {
				id := g.sameBucket(b)
				g.used[id] = true
				g.n++
				ids = append(ids, id)
			}
		}
	} else {
		for range n {
			ids = append(ids, g.next(ids))
		}
	}
	var base []stage.Row
	for _, id := range ids {
		base = append(base, stage.Row{
			SampleID: id, SourceID: fmt.Sprintf("src-%d", r.IntN(3)), SourceVersion: int64(r.IntN(3)),
			Split: splits[r.IntN(3)], Lang: "en", Text: fmt.Sprintf("text %d %d", r.Uint64(), len(id)), Tokens: int64(r.IntN(100)),
		})
	}
	// The snapshot is a multiset: now and then a tuple twice, or one
	// sampleId with two tuples.
	snapRows := slices.Clone(base)
	if r.IntN(6) == 0 && len(base) > 0 {
		for range 1 + r.IntN(3) {
			x := base[r.IntN(len(base))]
			if r.IntN(2) == 0 {
				x.Text += "'"
			}
			snapRows = append(snapRows, x)
		}
	}
	for _, row := range snapRows {
		c.snap = append(c.snap, rowTuple(row, sd))
	}

	// The release: each snapshot row kept, dropped, repeated, changed.
	// One case in six is the snapshot exactly (VERIFIED), one in six
	// differs from it by one fault.
	var rel []stage.Row
	mode, faultAt := r.IntN(6), -1
	if mode == 1 && len(snapRows) > 0 {
		faultAt = r.IntN(len(snapRows))
	}
	for i, row := range snapRows {
		p := 28 + r.IntN(72)
		switch {
		case mode > 1:
			p = r.IntN(100)
		case i == faultAt:
			p = r.IntN(28)
		}
		switch {
		case p < 6:
		case p < 11:
			for range 2 + r.IntN(2) {
				rel = append(rel, row)
			}
		case p < 15:
			x := row
			x.Text = flipLastByte(x.Text)
			rel = append(rel, x)
		case p < 18:
			x := row
			x.Split = splits[r.IntN(len(splits))]
			rel = append(rel, x)
		case p < 20:
			x := row
			x.SourceVersion++
			rel = append(rel, x)
		case p < 22:
			x := row
			x.SourceID += "'"
			rel = append(rel, x)
		case p < 24:
			// A duplicate that is also a content change.
			x := row
			x.Text += "!"
			rel = append(rel, row, x)
		case p < 26:
			// A content change of every copy, and one copy more.
			x := row
			x.Text += "?"
			rel = append(rel, x, x)
		case p < 28:
			// The sample under a near-identical id.
			x := row
			x.SampleID = g.next([]string{row.SampleID})
			rel = append(rel, x)
		default:
			rel = append(rel, row)
		}
	}
	extras := r.IntN(6)
	if mode < 2 {
		extras = 0
		if mode == 1 && faultAt < 0 {
			extras = 1
		}
	}
	for range extras {
		id := g.next(ids)
		rel = append(rel, stage.Row{SampleID: id, SourceID: "src-x", Split: "train", Lang: "en", Text: "extra " + id})
	}
	shards := 1 + r.IntN(8)
	if r.IntN(10) == 0 {
		shards = 20 + r.IntN(20)
	}
	c.rel = make([][]stage.Row, shards)
	for _, row := range rel {
		i := r.IntN(shards)
		c.rel[i] = append(c.rel[i], row)
	}
	if r.IntN(5) == 0 {
		// A shard of no rows, which the format allows.
		c.rel = slices.Insert(c.rel, r.IntN(len(c.rel)+1), nil)
	}

	c.members = 1 + r.IntN(6)
	c.declare = r.IntN(5) > 0
	c.index = r.IntN(4) > 0 && c.k <= 20
	c.memberRowGroup = []int64{0, 7, 64, 1000, 1024, 2048}[r.IntN(6)]

	// Fences by sampleId and by content, hitting and missing; they hit
	// nothing when the release is to be the snapshot or one fault off.
	for _, fl := range []*[]manifest.FenceEntry{&c.tombs, &c.benches} {
		if r.IntN(3) > 0 {
			continue
		}
		for seq := range uint64(1 + r.IntN(4)) {
			seq++
			e := manifest.FenceEntry{Seq: seq}
			var row stage.Row
			if mode > 1 && len(rel) > 0 && r.IntN(4) > 0 {
				row = rel[r.IntN(len(rel))]
			} else {
				row = stage.Row{SampleID: "absent-" + strconv.Itoa(int(seq)), Text: "absent"}
			}
			if r.IntN(2) == 0 {
				e.SampleID = row.SampleID
				if e.SampleID == "" {
					e.SampleID = "absent"
				}
			} else {
				e.ContentDigest = sha256.Sum256([]byte(row.Text))
			}
			*fl = append(*fl, e)
		}
	}

	c.plan = PlanOptions{
		MapTasks:       r.IntN(7),
		Reducers:       r.IntN(9),
		Parallelism:    1 + r.IntN(3),
		MapMembers:     r.IntN(5) == 0,
		ReadAllMembers: r.IntN(5) == 0,
		ReduceFanIn:    []int{0, 0, 2, 3}[r.IntN(4)],
		Tool:           "shardproof test",
	}
	if r.IntN(4) == 0 {
		c.plan.ShuffleCompression = shuffle.Zstd
	}
	return c
}

func flipLastByte(s string) string {
	b := []byte(s)
	b[len(b)-1] ^= 1
	return string(b)
}

func rowTuple(row stage.Row, sd manifest.Digest) tuplehash.Tuple {
	return tuplehash.Tuple{
		SampleID: row.SampleID, SourceID: row.SourceID, SourceVersion: row.SourceVersion,
		LogicalContentDigest: sha256.Sum256([]byte(row.Text)), Split: row.Split, SchemaDigest: sd,
	}
}

// writeCase stores c's snapshot and release and returns the root and
// the release document.
func writeCase(t *testing.T, s objstore.Store, c *diffCase, sd manifest.Digest) (manifest.Digest, *manifest.Release) {
	t.Helper()
	ctx := context.Background()
	partition := fmt.Sprintf("xxh64/k=%d", c.k)

	// Members in bucket order, each sorted by (bucket, sampleId, tuple
	// digest), as stage writes them, cut at random bucket boundaries
	// (a member may hold no tuples).
	type mt struct {
		t      tuplehash.Tuple
		d      [32]byte
		bucket uint32
	}
	ts := make([]mt, len(c.snap))
	acc := tuplehash.NewAccumulator(c.k)
	for i, tu := range c.snap {
		d, err := tu.Digest()
		if err != nil {
			t.Fatal(err)
		}
		ts[i] = mt{tu, d, tuplehash.Bucket(tu.SampleID, c.k)}
		if err := acc.Add(&c.snap[i]); err != nil {
			t.Fatal(err)
		}
	}
	slices.SortFunc(ts, func(a, b mt) int {
		return cmp.Or(cmp.Compare(a.bucket, b.bucket), cmp.Compare(a.t.SampleID, b.t.SampleID), bytes.Compare(a.d[:], b.d[:]))
	})
	r := rand.New(rand.NewPCG(c.seed, 0xc075))
	nb := uint32(1) << c.k
	cuts := []uint32{0, nb}
	for range c.members - 1 {
		cuts = append(cuts, uint32(r.IntN(int(nb)+1)))
	}
	slices.Sort(cuts)
	ms := canon.SnapshotMemberSchema()
	as, err := canon.ArrowSchema(ms)
	if err != nil {
		t.Fatal(err)
	}
	snap := &manifest.Snapshot{Schema: manifest.SnapshotSchema, RecordSchema: sd, MemberPartition: partition}
	// Undeclared members may hold any tuples in any order: they are
	// mapped like shards.
	parts := make([][]mt, c.members)
	for i := range ts {
		j := 0
		if c.declare {
			for ts[i].bucket >= cuts[j+1] {
				j++
			}
		} else {
			j = r.IntN(c.members)
		}
		parts[j] = append(parts[j], ts[i])
	}
	if !c.declare {
		for _, p := range parts {
			r.Shuffle(len(p), func(a, b int) { p[a], p[b] = p[b], p[a] })
		}
	}
	for j, part := range parts {
		lo, hi := cuts[j], cuts[j+1]
		b := array.NewRecordBuilder(memory.DefaultAllocator, as)
		var buckets []uint32
		for _, x := range part {
			b.Field(0).(*array.StringBuilder).Append(x.t.SampleID)
			b.Field(1).(*array.StringBuilder).Append(x.t.SourceID)
			b.Field(2).(*array.Int64Builder).Append(x.t.SourceVersion)
			b.Field(3).(*array.StringBuilder).Append(x.t.Split)
			b.Field(4).(*array.BinaryBuilder).Append(x.t.LogicalContentDigest[:])
			buckets = append(buckets, x.bucket)
		}
		rec := b.NewRecordBatch()
		b.Release()
		po := stage.ParquetOptions{RowGroupRows: c.memberRowGroup}
		var data []byte
		var err error
		if c.declare {
			data, err = stage.EncodeMemberParquet(rec, ms, po, buckets)
		} else {
			data, err = stage.EncodeParquet(rec, ms, po)
		}
		if err != nil {
			t.Fatal(err)
		}
		desc, err := stage.Describe(rec, ms, sd, nil)
		rec.Release()
		if err != nil {
			t.Fatal(err)
		}
		d, v, _, err := objstore.PutBlob(ctx, s, data)
		if err != nil {
			t.Fatal(err)
		}
		desc.ID, desc.Digest, desc.Size, desc.ObjectVersion = stage.MemberID(j, c.members), d, int64(len(data)), string(v)
		if c.declare {
			desc.Buckets = &manifest.BucketRange{Lo: lo, Hi: hi}
		}
		snap.Members = append(snap.Members, desc)
	}
	leaves := acc.Leaves()
	snap.TupleRoot = manifest.Digest(tuplehash.MerkleRoot(leaves))
	snap.Totals = stage.TotalsOf(snap.Members)
	snapDigest := putDoc(t, s, snap)
	if c.index {
		if _, err := snapindex.Put(ctx, s, snapDigest, c.k, leaves); err != nil {
			t.Fatal(err)
		}
	}

	// Release shards, each a valid file; the manifest's root is that of
	// the release's own tuples, as an honest writer of a wrong release
	// would write it.
	res := stage.Result{RecordSchema: sd, Schema: stage.DefaultSchema()}
	relAcc := tuplehash.NewAccumulator(c.k)
	rel := &manifest.Release{
		Schema: manifest.ReleaseSchema, DatasetSnapshot: snapDigest, RecordSchema: sd,
		Build: manifest.Build{
			Serializer: stage.Serializer, SerializerVersion: stage.SerializerVersion, ShardingFunction: stage.ShardingFunction,
			Compression: "zstd", CompressionLevel: 3, EncryptionKeyVersion: "none", EncryptionAADScheme: "none", MemberPartition: partition,
		},
	}
	for i, rows := range c.rel {
		rel.Shards = append(rel.Shards, stagetest.WriteRows(t, s, res, stage.ShardID(i, len(c.rel)), rows))
		for _, row := range rows {
			tu := rowTuple(row, sd)
			if err := relAcc.Add(&tu); err != nil {
				t.Fatal(err)
			}
		}
	}
	rel.Totals = stage.TotalsOf(rel.Shards)
	rel.OrderedMemberTupleRoot = tuplehash.BindRoot(relAcc.Root(), snapDigest, 0, 0)
	return putDoc(t, s, rel), rel
}

// oracle computes the counts and examples DESIGN.md's diff gives, from
// the tuples alone: per sampleId, snapshot count against release count
// gives missing, extra or duplicate; equal counts whose tuples differ
// count each field whose values differ once, and a change no single
// field shows as a content substitution.
func oracle(c *diffCase, sd manifest.Digest) (manifest.Counts, map[string][]string) {
	type sides struct{ rel, snap []tuplehash.Tuple }
	by := map[string]*sides{}
	get := func(id string) *sides {
		if by[id] == nil {
			by[id] = &sides{}
		}
		return by[id]
	}
	var counts manifest.Counts
	examples := map[string][]string{}
	ex := func(code errcode.Code, id string) {
		examples[string(code)] = append(examples[string(code)], id)
	}
	hit := func(es []manifest.FenceEntry, tu *tuplehash.Tuple) bool {
		for _, e := range es {
			if e.SampleID != "" && e.SampleID == tu.SampleID || e.SampleID == "" && [32]byte(e.ContentDigest) == tu.LogicalContentDigest {
				return true
			}
		}
		return false
	}
	counts.Shards = int64(len(c.rel))
	counts.ShardsVerified = counts.Shards
	for _, rows := range c.rel {
		for _, row := range rows {
			tu := rowTuple(row, sd)
			get(tu.SampleID).rel = append(get(tu.SampleID).rel, tu)
			counts.Records++
			if hit(c.tombs, &tu) {
				counts.TombstoneHits++
				ex(errcode.TombstoneHit, tu.SampleID)
			}
			if hit(c.benches, &tu) {
				counts.BenchmarkHits++
				ex(errcode.BenchmarkHit, tu.SampleID)
			}
		}
	}
	for _, tu := range c.snap {
		get(tu.SampleID).snap = append(get(tu.SampleID).snap, tu)
		counts.SnapshotRecords++
	}
	for id, sd := range by {
		r, s := int64(len(sd.rel)), int64(len(sd.snap))
		switch {
		case s == 0:
			counts.Extra += r
			ex(errcode.ExtraMember, id)
		case r < s:
			counts.Missing += s - r
			ex(errcode.MissingMember, id)
		case r > s:
			counts.Duplicate += r - s
			ex(errcode.DuplicateMember, id)
		default:
			field := func(f func(*tuplehash.Tuple) string) bool {
				a, b := make([]string, 0, r), make([]string, 0, s)
				for i := range sd.rel {
					a = append(a, f(&sd.rel[i]))
					b = append(b, f(&sd.snap[i]))
				}
				slices.Sort(a)
				slices.Sort(b)
				return !slices.Equal(a, b)
			}
			whole := field(func(t *tuplehash.Tuple) string { b, _ := t.Encode(); return string(b) })
			if !whole {
				continue
			}
			found := false
			for _, f := range []struct {
				n    *int64
				code errcode.Code
				f    func(*tuplehash.Tuple) string
			}{
				{&counts.ContentSubstitution, errcode.ContentSubstitution, func(t *tuplehash.Tuple) string { return string(t.LogicalContentDigest[:]) }},
				{&counts.SourceVersionChange, errcode.SourceVersionChange, func(t *tuplehash.Tuple) string { return fmt.Sprintf("%020d", uint64(t.SourceVersion)^1<<63) }},
				{&counts.SourceIDChange, errcode.SourceIDChange, func(t *tuplehash.Tuple) string { return t.SourceID }},
				{&counts.SplitConflict, errcode.SplitConflict, func(t *tuplehash.Tuple) string { return t.Split }},
				{&counts.SchemaMix, errcode.SchemaMix, func(t *tuplehash.Tuple) string { return string(t.SchemaDigest[:]) }},
			} {
				if field(f.f) {
					*f.n++
					ex(f.code, id)
					found = true
				}
			}
			if !found {
				counts.ContentSubstitution++
				ex(errcode.ContentSubstitution, id)
			}
		}
	}
	for code, ids := range examples {
		slices.Sort(ids)
		ids = slices.Compact(ids)
		examples[code] = ids[:min(len(ids), reducer.MaxExamples)]
	}
	return counts, examples
}

// oracleRoots returns the unbound tuple roots of the release and the
// snapshot.
func oracleRoots(t *testing.T, c *diffCase, sd manifest.Digest) (rel, snap [32]byte) {
	a, b := tuplehash.NewAccumulator(c.k), tuplehash.NewAccumulator(c.k)
	for _, rows := range c.rel {
		for _, row := range rows {
			tu := rowTuple(row, sd)
			if err := a.Add(&tu); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i := range c.snap {
		if err := b.Add(&c.snap[i]); err != nil {
			t.Fatal(err)
		}
	}
	return a.Root(), b.Root()
}

func TestDifferentialAgainstOracle(t *testing.T) {
	cases, first := 12, uint64(1)
	if v := os.Getenv("SHARDPROOF_DIFF_CASES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("SHARDPROOF_DIFF_CASES=%q: want a positive number", v)
		}
		cases = n
	}
	if v := os.Getenv("SHARDPROOF_DIFF_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("SHARDPROOF_DIFF_SEED=%q: want a number", v)
		}
		first = n
	}
	s := stagetest.Store(t)
	sd := putDoc(t, s, stage.DefaultSchema())
	for seed := first; seed < first+uint64(cases); seed++ {
		c := genCase(seed, sd)
		checkCase(t, s, c, sd)
		if t.Failed() {
			t.Fatalf("replay with SHARDPROOF_DIFF_SEED=%d SHARDPROOF_DIFF_CASES=1", seed)
		}
	}
}

// checkCase verifies c and compares the report with the oracle's.
func checkCase(t *testing.T, s objstore.Store, c *diffCase, sd manifest.Digest) {
	t.Helper()
	o := c.plan
	o.Root, _ = writeCase(t, s, c, sd)
	if len(c.tombs) > 0 {
		o.Tombstones = putFenceLog(t, s, manifest.TombstonesSchema, c.tombs...)
	}
	if len(c.benches) > 0 {
		o.Benchmark = putFenceLog(t, s, manifest.BenchmarkSchema, c.benches...)
	}
	out, err := Verify(context.Background(), s, Options{PlanOptions: o})
	if err != nil {
		t.Errorf("%v: verify: %v", c, err)
		return
	}
	rep := out.Report
	want, wantEx := oracle(c, sd)
	if rep.Counts != want {
		t.Errorf("%v:\ncounts\n got %+v\nwant %+v", c, rep.Counts, want)
	}
	if len(rep.Failures) != 0 {
		t.Errorf("%v: failures %+v", c, rep.Failures)
	}
	for code, ids := range rep.Examples {
		if len(ids) == 0 {
			delete(rep.Examples, code)
		}
	}
	if !mapsEqual(rep.Examples, wantEx) {
		t.Errorf("%v:\nexamples\n got %q\nwant %q", c, rep.Examples, wantEx)
	}
	relRoot, snapRoot := oracleRoots(t, c, sd)
	if rep.ReleaseTupleRoot != relRoot || rep.SnapshotTupleRoot != snapRoot {
		t.Errorf("%v: roots %x/%x, oracle %x/%x", c, rep.ReleaseTupleRoot, rep.SnapshotTupleRoot, relRoot, snapRoot)
	}
	verdict := manifest.Verified
	if want.Failed() {
		verdict = manifest.Invalid
	}
	if rep.Verdict != verdict {
		t.Errorf("%v: verdict %s, oracle %s", c, rep.Verdict, verdict)
	}
	// What verify --json prints (manifest.Encode of the report), by the
	// names a reader of the JSON looks for.
	b, err := manifest.Encode(rep)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Verdict string           `json:"verdict"`
		Counts  map[string]int64 `json:"counts"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	for name, n := range map[string]int64{
		"missing": want.Missing, "extra": want.Extra, "duplicate": want.Duplicate,
		"contentSubstitution": want.ContentSubstitution, "splitConflict": want.SplitConflict,
		"sourceVersionChange": want.SourceVersionChange, "sourceIdChange": want.SourceIDChange,
		"records": want.Records, "snapshotRecords": want.SnapshotRecords,
		"tombstoneHits": want.TombstoneHits, "benchmarkHits": want.BenchmarkHits,
	} {
		if got, ok := doc.Counts[name]; !ok || got != n {
			t.Errorf("%v: stored report counts.%s = %d (present %v), oracle %d", c, name, got, ok, n)
		}
	}
	if doc.Verdict != string(verdict) {
		t.Errorf("%v: stored report verdict %q, oracle %q", c, doc.Verdict, verdict)
	}
}

func mapsEqual(a, b map[string][]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !slices.Equal(v, b[k]) {
			return false
		}
	}
	return true
}

// A release of no shards is not a release the format allows (an empty
// list): verify refuses it as a bad document before planning, whatever
// its snapshot, instead of diffing nothing against the snapshot.
func TestReleaseOfNoShardsRefused(t *testing.T) {
	s := stagetest.Store(t)
	sd := putDoc(t, s, stage.DefaultSchema())
	c := &diffCase{seed: 1, k: 12, rel: [][]stage.Row{nil}, members: 1, declare: true}
	_, rel := writeCase(t, s, c, sd)
	rel.Shards, rel.Totals = []manifest.Shard{}, manifest.Totals{}
	// manifest.Encode refuses it too: the bytes are written by hand.
	b, err := json.Marshal(rel)
	if err != nil {
		t.Fatal(err)
	}
	root, _, _, err := objstore.PutBlob(context.Background(), s, b)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Verify(context.Background(), s, Options{PlanOptions: PlanOptions{Root: root, Tool: "shardproof test"}})
	if errcode.Of(err) != errcode.BadDocument || !strings.Contains(err.Error(), "shards: empty list") {
		t.Fatalf("verify of a release of no shards: %v, want BAD_DOCUMENT naming the empty list", err)
	}
}
