package raftgate

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/shardproof/shardproof/internal/errcode"
)

// GET /v1/permits/{id} answers one permit, through a follower too, and an
// unknown ID is UNKNOWN_PERMIT; against a gate that predates it, the
// client reads the list and picks the permit.
func TestPermitByID(t *testing.T) {
	ctx := ctxT(t, time.Minute)
	c := MakeCluster(t, 3)
	leader := c.Leader(10 * time.Second)
	cl := c.Client()
	root := registerVerified(t, ctx, cl, "r1", 2, 0, 0)
	pub, err := cl.Publish(ctx, "main", root, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range c.Nodes {
		nc := NewClient(n.URL())
		defer nc.Close()
		p, err := nc.Permit(ctx, pub.Permit)
		if err != nil || p.ID != pub.Permit || p.Root != root || p.State != PermitOpen {
			t.Fatalf("permit %s via %s (leader %v): %+v %v", pub.Permit, n.ID(), n == leader, p, err)
		}
	}
	if _, err := cl.Permit(ctx, "p-999"); errcode.Of(err) != errcode.UnknownPermit {
		t.Fatalf("unknown permit: %v, want UNKNOWN_PERMIT", err)
	}

	list, err := cl.Permits(ctx)
	if err != nil {
		t.Fatal(err)
	}
	old := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/permits" {
			http.NotFound(w, r)
			return
		}
		json.NewEncoder(w).Encode(list)
	}))
	defer old.Close()
	oc := NewClient(old.URL)
	defer oc.Close()
	if p, err := oc.Permit(ctx, pub.Permit); err != nil || p.ID != pub.Permit || p.Root != root {
		t.Fatalf("permit from a gate without GET /v1/permits/{id}: %+v %v", p, err)
	}
	if _, err := oc.Permit(ctx, "p-999"); errcode.Of(err) != errcode.UnknownPermit {
		t.Fatalf("unknown permit from an older gate: %v, want UNKNOWN_PERMIT", err)
	}

	// An answer listing a null permit is no gate's: refused, not a panic
	// in whoever reads the list.
	broken := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/permits" {
			http.NotFound(w, r)
			return
		}
		w.Write([]byte(`[null]`))
	}))
	defer broken.Close()
	bc := NewClient(broken.URL)
	defer bc.Close()
	if p, err := bc.Permit(ctx, pub.Permit); errcode.Of(err) != errcode.BadDocument {
		t.Fatalf("permit from an answer listing null: %+v %v, want BAD_DOCUMENT", p, err)
	}
	if ps, err := bc.Permits(ctx); errcode.Of(err) != errcode.BadDocument || ps != nil {
		t.Fatalf("permits answer listing null: %v %v, want BAD_DOCUMENT", ps, err)
	}
}
