package manifest

import (
	"bytes"
	"math"
	"reflect"
	"testing"

	"github.com/shardproof/shardproof/internal/errcode"
)

func validRecheckReport() *RecheckReport {
	return &RecheckReport{
		Schema: RecheckReportSchema, Root: Sum([]byte("root")), DatasetSnapshot: Sum([]byte("snap")), Basis: Sum([]byte("report")),
		Tombstones: Sum([]byte("tombstones")), TombstoneWatermark: 44, TombstoneHits: 2,
		Members: 4, Records: 1000,
		Examples: map[string][]string{string(errcode.TombstoneHit): {"a", "b"}},
		Tool:     "shardproof test", Seconds: 0.5, Started: "2026-11-29T00:00:00Z",
	}
}

func TestRecheckReportRoundTrip(t *testing.T) {
	r := validRecheckReport()
	b, err := Encode(r)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeRecheckReport(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, r) {
		t.Fatalf("round trip changed the report:\n%+v\n%+v", got, r)
	}
	schema, doc, err := DecodeAny(b)
	if err != nil || schema != RecheckReportSchema {
		t.Fatalf("DecodeAny: %s %v", schema, err)
	}
	if _, ok := doc.(*RecheckReport); !ok {
		t.Fatalf("DecodeAny gave %T", doc)
	}
	if b2, _ := Encode(got); !bytes.Equal(b, b2) {
		t.Fatal("encoding is not stable")
	}
}

func TestRecheckReportRejects(t *testing.T) {
	cases := []struct {
		name string
		edit func(*RecheckReport)
		code errcode.Code
	}{
		{"wrong schema", func(r *RecheckReport) { r.Schema = ReportSchema }, errcode.BadDocument},
		{"no basis", func(r *RecheckReport) { r.Basis = Digest{} }, errcode.BadDocument},
		{"no fence document", func(r *RecheckReport) {
			r.Tombstones, r.TombstoneWatermark, r.TombstoneHits, r.Examples = Digest{}, 0, 0, nil
		}, errcode.BadDocument},
		{"watermark without its document", func(r *RecheckReport) { r.BenchmarkFence = 3 }, errcode.BadDocument},
		{"negative records", func(r *RecheckReport) { r.Records = -1 }, errcode.BadCount},
		{"more hits than records", func(r *RecheckReport) { r.TombstoneHits = 1001 }, errcode.BadCount},
		{"examples of another code", func(r *RecheckReport) { r.Examples["MISSING_MEMBER"] = []string{"a"} }, errcode.BadDocument},
		{"more examples than hits", func(r *RecheckReport) { r.TombstoneHits = 1 }, errcode.BadCount},
		{"examples unsorted", func(r *RecheckReport) { r.Examples[string(errcode.TombstoneHit)] = []string{"b", "a"} }, errcode.BadDocument},
		{"seconds NaN", func(r *RecheckReport) { r.Seconds = math.NaN() }, errcode.BadCount},
	}
	for _, c := range cases {
		r := validRecheckReport()
		c.edit(r)
		if err := r.Validate(); errcode.Of(err) != c.code {
			t.Errorf("%s: %v, want %s", c.name, err, c.code)
		}
	}
	b, _ := Encode(validRecheckReport())
	if _, err := DecodeRecheckReport(append(b[:len(b)-1:len(b)-1], []byte(`,"extra":1}`)...)); errcode.Of(err) != errcode.BadDocument {
		t.Errorf("unknown field: %v", err)
	}
}
