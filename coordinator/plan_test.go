package coordinator

import (
	"context"
	"testing"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/objstore"
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
		"input missing":      func(p *Plan) { p.MapTasks[0] = p.MapTasks[0][1:] },
		"input twice":        func(p *Plan) { p.MapTasks[1] = append(p.MapTasks[1], p.MapTasks[0][0]) },
		"index out of range": func(p *Plan) { p.MapTasks[0][0].Index = 1 << 20 },
		"bad side":           func(p *Plan) { p.MapTasks[0][0].Side = 2 },
		"bucket gap":         func(p *Plan) { p.Reducers[1].Lo++ },
		"short range":        func(p *Plan) { p.Reducers[3].Hi-- },
		"k differs":          func(p *Plan) { p.K = 11 },
		"schema":             func(p *Plan) { p.Schema = "training.verify.plan.v0" },
	} {
		p := *good
		p.MapTasks = make([][]Input, len(good.MapTasks))
		for i := range good.MapTasks {
			p.MapTasks[i] = append([]Input(nil), good.MapTasks[i]...)
		}
		p.Reducers = append([]BucketRange(nil), good.Reducers...)
		edit(&p)
		b, err := manifest.Encode(&p)
		if err != nil {
			t.Fatal(err)
		}
		d, _, _, err := objstore.PutBlob(ctx, s, b)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Open(ctx, s, d); errcode.Of(err) != errcode.BadDocument {
			t.Errorf("%s: Open err = %v, want BAD_DOCUMENT", name, err)
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
	p, _, err := NewPlan(ctx, s, PlanOptions{Root: res.Root, MapTasks: 1000, Reducers: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if inputs := len(res.Release.Shards) + len(res.SnapshotDoc.Members); len(p.MapTasks) != inputs || len(p.Reducers) != 1<<p.K {
		t.Fatalf("caps: %d map tasks for %d inputs, %d reducers for k=%d", len(p.MapTasks), inputs, len(p.Reducers), p.K)
	}
}
