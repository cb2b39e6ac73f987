package coordinator

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/mapper"
	"github.com/shardproof/shardproof/objstore"
	"github.com/shardproof/shardproof/shuffle"
)

// A plan is untrusted input to every task process: one that leaves an
// input out, lists one twice, points outside the manifests or leaves a gap
// in the bucket space is rejected before any task runs.
func TestOpenRejectsInconsistentPlans(t *testing.T) {
	s, res := synth(t)
	ctx := context.Background()
	good, pd, err := NewPlan(ctx, s, PlanOptions{Root: res.Root, MapTasks: 3, Reducers: 4, Nonce: "n"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Open(ctx, s, pd); err != nil {
		t.Fatal(err)
	}
	for name, edit := range map[string]func(p *Plan){
		"input missing":       func(p *Plan) { p.MapTasks[0] = p.MapTasks[0][1:] },
		"input twice":         func(p *Plan) { p.MapTasks[1] = append(p.MapTasks[1], p.MapTasks[0][0]) },
		"index out of range":  func(p *Plan) { p.MapTasks[0][0].Index = 1 << 20 },
		"bad side":            func(p *Plan) { p.MapTasks[0][0].Side = 2 },
		"bucket gap":          func(p *Plan) { p.Reducers[1].Lo++ },
		"short range":         func(p *Plan) { p.Reducers[3].Hi-- },
		"k differs":           func(p *Plan) { p.K = 11 },
		"schema":              func(p *Plan) { p.Schema = "training.verify.plan.v0" },
		"batch rows < 0":      func(p *Plan) { p.ShuffleBatchRows = -1 },
		"batch rows too many": func(p *Plan) { p.ShuffleBatchRows = shuffle.MaxBatchRows + 1 },
		"member mapped and reduced": func(p *Plan) {
			p.MapTasks[0] = append(p.MapTasks[0], Input{Side: 1, Index: p.Reducers[0].Members[0]})
		},
		"member missing": func(p *Plan) { p.Reducers[0].Members = p.Reducers[0].Members[1:] },
		"member twice":   func(p *Plan) { p.Reducers[1].Members = append(p.Reducers[1].Members, p.Reducers[0].Members[0]) },
		"member outside its reducer": func(p *Plan) {
			last := len(p.Reducers) - 1
			p.Reducers[last].Members = append([]int{p.Reducers[0].Members[0]}, p.Reducers[last].Members...)
			p.Reducers[0].Members = p.Reducers[0].Members[1:]
		},
		"members out of order": func(p *Plan) {
			// Reducers 0 and 1 made one, reading their members in reverse.
			p.Reducers[0].Hi = p.Reducers[1].Hi
			p.Reducers[0].Members = append(slices.Clone(p.Reducers[1].Members), p.Reducers[0].Members...)
			p.Reducers = slices.Delete(p.Reducers, 1, 2)
		},
	} {
		p := *good
		p.MapTasks = make([][]Input, len(good.MapTasks))
		for i := range good.MapTasks {
			p.MapTasks[i] = append([]Input(nil), good.MapTasks[i]...)
		}
		p.Reducers = append([]BucketRange(nil), good.Reducers...)
		for i := range p.Reducers {
			p.Reducers[i].Members = slices.Clone(p.Reducers[i].Members)
		}
		edit(&p)
		d := putDoc(t, s, &p)
		if _, err := Open(ctx, s, d); errcode.Of(err) != errcode.BadDocument {
			t.Errorf("%s: Open err = %v, want BAD_DOCUMENT", name, err)
		}
	}
	// The good plan's bytes with a stray ']' or '}' after them: stored
	// under their own digest, they are no plan.
	b, err := manifest.Encode(good)
	if err != nil {
		t.Fatal(err)
	}
	for _, tail := range []string{"]", "}", " ]"} {
		d, _, _, err := objstore.PutBlob(ctx, s, append(bytes.Clone(b), tail...))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Open(ctx, s, d); errcode.Of(err) != errcode.BadDocument {
			t.Errorf("plan with %q after it: Open err = %v, want BAD_DOCUMENT", tail, err)
		}
	}
	// The good plan's bytes with a key twice, of which encoding/json
	// keeps the last and another reader the first, or a key in another
	// case, which encoding/json takes for the field: they are no plan
	// (they decoded as the good one, under a digest of their own).
	for _, c := range []struct{ name, old, new string }{
		{"nonce twice", `"nonce":`, `"nonce":"other","nonce":`},
		{"reducers twice", `"reducers":`, `"reducers":[],"reducers":`},
		{"mapTasks in another case", `"mapTasks":`, `"MapTasks":`},
		{"input side in another case", `"side":`, `"Side":`},
		{"members twice", `"members":`, `"members":[],"members":`},
		// null, which encoding/json takes for absent: no leaf index.
		{"snapshotLeaves null", string(regexp.MustCompile(`"snapshotLeaves":\{[^}]*\}`).Find(b)), `"snapshotLeaves":null`},
	} {
		forged := bytes.Replace(b, []byte(c.old), []byte(c.new), 1)
		if c.old == "" || bytes.Equal(forged, b) {
			t.Fatalf("%s: %q not in %.300s", c.name, c.old, b)
		}
		d, _, _, err := objstore.PutBlob(ctx, s, forged)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Open(ctx, s, d); errcode.Of(err) != errcode.BadDocument {
			t.Errorf("plan with %s: Open err = %v, want BAD_DOCUMENT", c.name, err)
		}
	}
}

// Planning is deterministic given a nonce, and a new nonce (the default)
// makes a new job.
func TestPlanDigest(t *testing.T) {
	s, res := synth(t)
	ctx := context.Background()
	o := PlanOptions{Root: res.Root, MapTasks: 2, Reducers: 2, Nonce: "x"}
	_, a, err := NewPlan(ctx, s, o)
	if err != nil {
		t.Fatal(err)
	}
	_, b, err := NewPlan(ctx, s, o)
	if err != nil || a != b {
		t.Fatalf("same options: plans %s and %s (err %v)", a, b, err)
	}
	o.Nonce = ""
	_, c, err := NewPlan(ctx, s, o)
	if err != nil || c == a {
		t.Fatalf("fresh nonce: plan %s (first %s), err %v", c, a, err)
	}
	p, _, err := NewPlan(ctx, s, PlanOptions{Root: res.Root, MapTasks: 1000, Reducers: 1 << 20, MapMembers: true})
	if err != nil {
		t.Fatal(err)
	}
	if inputs := len(res.Release.Shards) + len(res.SnapshotDoc.Members); len(p.MapTasks) != inputs || len(p.Reducers) != 1<<p.K {
		t.Fatalf("caps: %d map tasks for %d inputs, %d reducers for k=%d", len(p.MapTasks), inputs, len(p.Reducers), p.K)
	}
}

// Members that declare bucket ranges go to the reducer whose range holds
// them, cuts fall only between members, and map tasks take the rest.
func TestPlanMembersInReducers(t *testing.T) {
	s, res := synth(t)
	ctx := context.Background()
	members := res.SnapshotDoc.Members
	if len(members) < 3 {
		t.Fatalf("fixture has %d members; the test needs 3 or more", len(members))
	}
	for _, r := range []int{1, 2, 3, 4, 1 << 20} {
		p, _, err := NewPlan(ctx, s, PlanOptions{Root: res.Root, MapTasks: 1000, Reducers: r, Nonce: "n"})
		if err != nil {
			t.Fatal(err)
		}
		if err := p.validate(len(res.Release.Shards), members); err != nil {
			t.Fatalf("r=%d: %v", r, err)
		}
		for _, task := range p.MapTasks {
			for _, in := range task {
				if in.Side != 0 {
					t.Fatalf("r=%d: map task holds member %d", r, in.Index)
				}
			}
		}
		if got := len(p.MapTasks); got != len(res.Release.Shards) {
			t.Fatalf("r=%d: %d map tasks for %d release shards", r, got, len(res.Release.Shards))
		}
		seen := 0
		for _, br := range p.Reducers {
			for _, i := range br.Members {
				b := members[i].Buckets
				if b.Lo < br.Lo || b.Hi > br.Hi {
					t.Fatalf("r=%d: member %d [%d, %d) in reducer [%d, %d)", r, i, b.Lo, b.Hi, br.Lo, br.Hi)
				}
				seen++
			}
		}
		if seen != len(members) {
			t.Fatalf("r=%d: reducers read %d of %d members", r, seen, len(members))
		}
		// As many reducers as asked for, but never more than members:
		// a cut inside a member moves to its nearer end.
		if want := min(r, len(members)); len(p.Reducers) != want {
			t.Fatalf("r=%d: %d reducers, want %d", r, len(p.Reducers), want)
		}
	}
	// Told to map members, or given more cores than members (the reduce
	// phase would leave cores idle), the planner maps them.
	for _, o := range []PlanOptions{
		{Root: res.Root, Reducers: 4, MapMembers: true, Nonce: "n"},
		{Root: res.Root, Parallelism: len(members) + 1, Nonce: "n"},
	} {
		p, _, err := NewPlan(ctx, s, o)
		if err != nil {
			t.Fatal(err)
		}
		for _, br := range p.Reducers {
			if len(br.Members) > 0 {
				t.Fatalf("%+v: reducer [%d, %d) reads members %v", o, br.Lo, br.Hi, br.Members)
			}
		}
		if want := min(o.Reducers, 1<<p.K); o.Reducers > 0 && len(p.Reducers) != want {
			t.Fatalf("%+v: %d reducers, want %d", o, len(p.Reducers), want)
		}
		if len(p.Reducers) < 4 {
			t.Fatalf("%+v: %d reducers", o, len(p.Reducers))
		}
	}
}

// A snapshot whose members declare no bucket ranges (written before
// serializer version 2) is verified by mapping its members, with the same
// result.
func TestPlanUndeclaredMembersAreMapped(t *testing.T) {
	s, res := synth(t)
	ctx := context.Background()
	snap := *res.SnapshotDoc
	snap.Members = slices.Clone(snap.Members)
	for i := range snap.Members {
		snap.Members[i].Buckets = nil
	}
	sd := putDoc(t, s, &snap)
	p, _, err := NewPlan(ctx, s, PlanOptions{Root: res.Root, Snapshot: sd, Reducers: 3, Nonce: "n"})
	if err != nil {
		t.Fatal(err)
	}
	mapped := 0
	for _, task := range p.MapTasks {
		for _, in := range task {
			if in.Side == 1 {
				mapped++
			}
		}
	}
	if mapped != len(snap.Members) || len(p.Reducers) != 3 {
		t.Fatalf("%d of %d members mapped, %d reducers", mapped, len(snap.Members), len(p.Reducers))
	}
	for _, br := range p.Reducers {
		if len(br.Members) > 0 {
			t.Fatalf("reducer [%d, %d) reads undeclared members %v", br.Lo, br.Hi, br.Members)
		}
	}
	r := verify(t, s, PlanOptions{Root: res.Root, Snapshot: sd})
	if want := clean(res); r.Counts != want || r.SnapshotTupleRoot != res.SnapshotDoc.TupleRoot {
		t.Fatalf("counts %+v (want %+v), snapshot root %s", r.Counts, want, r.SnapshotTupleRoot)
	}
}

// Cuts never fall inside a member's declared range, also when an empty
// range sits inside another member's and when members leave gaps.
func TestReducerRangesRespectMembers(t *testing.T) {
	br := func(lo, hi uint32) *manifest.BucketRange { return &manifest.BucketRange{Lo: lo, Hi: hi} }
	members := []manifest.Shard{
		{Buckets: br(0, 100)},
		{Buckets: br(50, 50)}, // empty, inside member 0's range
		{Buckets: br(130, 250)},
		{},                      // no declaration: mapped
		{Buckets: br(256, 256)}, // empty, at the end of the space
	}
	ranged := rangedMembers(members)
	if !slices.Equal(ranged, []int{0, 1, 2, 4}) {
		t.Fatalf("ranged %v", ranged)
	}
	for r := 1; r <= 256; r++ {
		rs := reducerRanges(256, r, members, ranged)
		if rs[0].Lo != 0 || rs[len(rs)-1].Hi != 256 || len(rs) > r {
			t.Fatalf("r=%d: %+v", r, rs)
		}
		where := map[int]int{}
		for j, x := range rs {
			if j > 0 && x.Lo != rs[j-1].Hi {
				t.Fatalf("r=%d: gap or overlap %+v", r, rs)
			}
			for _, i := range x.Members {
				where[i] = j
				if b := members[i].Buckets; b.Lo < x.Lo || b.Hi > x.Hi {
					t.Fatalf("r=%d: member %d [%d, %d) in reducer [%d, %d)", r, i, b.Lo, b.Hi, x.Lo, x.Hi)
				}
			}
		}
		if len(where) != 4 || where[1] != where[0] || where[4] != len(rs)-1 {
			t.Fatalf("r=%d: members placed %v in %+v", r, where, rs)
		}
		p := &Plan{Schema: PlanSchema, K: 8, MapTasks: [][]Input{{{Side: 1, Index: 3}}}, Reducers: rs}
		if err := p.validate(0, members); err != nil {
			t.Fatalf("r=%d: %v", r, err)
		}
	}
}

// The default map task count takes about MapTaskTuples tuples per task,
// at least two per worker, a whole number of waves, and no more than the
// inputs.
func TestDefaultMapTasks(t *testing.T) {
	for _, c := range []struct {
		n       int
		records int64
		p, want int
	}{
		{122, 4_000_100, 2, 32}, // 31 by size: a last wave of one
		{30, 1_000_000, 2, 8},
		{488, 16_000_000, 2, 124},
		{488, 16_000_000, 8, 128},
		{10, 100, 4, 8},
		{3, 100, 4, 3},
		{1, 5, 1, 1},
		{122, 4_000_100, 0, 31},
	} {
		if got := DefaultMapTasks(c.n, c.records, c.p); got != c.want {
			t.Errorf("DefaultMapTasks(%d, %d, %d) = %d, want %d", c.n, c.records, c.p, got, c.want)
		}
	}
}

// mapTaskFit counts enough for the largest commit record a map task of
// that many inputs can write: every input's result at its largest, with
// the longest id and the codes of the most failures a file's result
// holds (eight: it counted four, and such a record of 19,024 inputs was
// 68,285,833 bytes), failures listed up to the bytes bound, the longest
// outputs. Such a record still encodes within manifest.MaxDocumentSize.
func TestMapTaskFitHoldsTheLargestRecord(t *testing.T) {
	const reducers = 256
	id := strings.Repeat(`"\`, manifest.MaxNameLen/2)
	rel := &manifest.Release{Shards: []manifest.Shard{{ID: id}}}
	fit, each := mapTaskFit(reducers, []Input{{Side: 0, Index: 0}}, rel, &manifest.Snapshot{})
	if fit < 1 || each < 2*manifest.MaxNameLen {
		t.Fatalf("fit %d, %d bytes an input", fit, each)
	}
	var sum manifest.Digest
	for i := range sum {
		sum[i] = 0xab
	}
	code := string(errcode.FooterCorrupt)
	for c := range failureCounter {
		if len(c) > len(code) {
			code = c
		}
	}
	// The most failures a file's result holds: its size and digest, its
	// schema (its records still decoded), its logical digest, and its
	// counts (records, tokens, member set, and for a snapshot member
	// with declared buckets, tuples outside them).
	worst := []string{string(errcode.SizeMismatch), string(errcode.DigestMismatch), string(errcode.SchemaMismatch), string(errcode.LogicalMismatch),
		string(errcode.CountMismatch), string(errcode.CountMismatch), string(errcode.CountMismatch), string(errcode.CountMismatch)}
	mc := MapCommit{Schema: MapCommitSchema, Plan: sum, Task: math.MaxInt64}
	for k := range fit {
		mc.Results = append(mc.Results, mapper.Result{Side: mapper.SideSnapshot, Index: math.MaxInt64 - k, ShardID: id,
			Records: math.MaxInt64, Tokens: math.MaxInt64, LogicalDigest: sum, MemberSetDigest: sum, StorageDigest: sum,
			StoredBytes: math.MaxInt64, LogicalBytes: math.MaxInt64, FailuresOmitted: worst})
	}
	// The failures the record lists, as many bytes of them as cutResults
	// keeps: details of quotes, each escaped.
	var failures []manifest.ShardFailure
	for n := 0; ; {
		f := manifest.ShardFailure{Shard: id, Side: "snapshot", Code: code, Detail: strings.Repeat(`"`, mapper.MaxFailureDetail)}
		b, err := json.Marshal(f)
		if err != nil {
			t.Fatal(err)
		}
		if n += len(b) + 1; n > listedFailureBytes {
			break
		}
		failures = append(failures, f)
	}
	mc.Results[0].Failures = failures
	for r := range reducers {
		mc.Outputs = append(mc.Outputs, Output{Key: jobPrefix(sum) + fmt.Sprintf("map/%d/r%d.arrow", math.MaxInt32, r), Version: objstore.Version(strings.Repeat("v", maxVersionBytes)),
			Digest: sum, XXH64: strings.Repeat("f", 16), Size: math.MaxInt64, Rows: math.MaxInt64})
	}
	b, err := manifest.Encode(&mc)
	if err != nil {
		t.Fatalf("a record of %d inputs (%d bytes each counted): %v", fit, each, err)
	}
	if len(b) > manifest.MaxDocumentSize {
		t.Fatalf("a record of %d inputs is %d bytes", fit, len(b))
	}
}
