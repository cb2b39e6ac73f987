package manifest

import (
	"fmt"
	"strings"
	"testing"
)

// failuresOf returns n DIGEST_MISMATCH failures of distinct release
// shards, in the canonical order.
func failuresOf(n int) []ShardFailure {
	fs := make([]ShardFailure, n)
	for i := range fs {
		fs[i] = ShardFailure{Shard: fmt.Sprintf("shard-%06d", i), Side: "release", Code: "DIGEST_MISMATCH", Detail: "descriptor digest=sha256:…, bytes read=sha256:…"}
	}
	return fs
}

// A report that lists every failure decodes whatever their number, as
// builds before the bound wrote them: without failuresOmitted, more than
// MaxReportFailures failures are no fault. Its bytes have no
// failuresOmitted key, so such a report is stored as before (the golden
// reportInvalid.json pins that).
func TestReportOfEveryFailureDecodes(t *testing.T) {
	r := validReport(true)
	r.Failures = failuresOf(MaxReportFailures + 5)
	r.Counts.DigestFailures = int64(len(r.Failures))
	r.Counts.Shards, r.Counts.ShardsVerified = int64(len(r.Failures)), 0
	b := mustEncode(t, r)
	if strings.Contains(string(b), "failuresOmitted") {
		t.Fatalf("a report omitting nothing has a failuresOmitted key")
	}
	got, err := DecodeReport(b)
	if err != nil {
		t.Fatalf("a report listing %d failures and omitting none: %v", len(r.Failures), err)
	}
	if len(got.Failures) != MaxReportFailures+5 || got.FailuresOmitted != 0 {
		t.Fatalf("decoded %d failures, %d omitted", len(got.Failures), got.FailuresOmitted)
	}
}

// ListedFailures keeps the first failures up to the count and up to the
// bytes of their JSON encodings, whichever comes first; a cut at a
// subset keeps every failure the whole list's cut keeps.
func TestListedFailures(t *testing.T) {
	fs := failuresOf(50)
	one := len(mustEncode(t, fs[0])) + 1 // a comma each
	for _, c := range []struct {
		count, bytes, want int
	}{
		{100, 1 << 20, 50},
		{10, 1 << 20, 10},
		{0, 1 << 20, 0},
		{100, 7 * one, 7},
		{100, 7*one - 1, 6},
		{5, 7 * one, 5},
		{100, one - 1, 0},
	} {
		if got := ListedFailures(fs, c.count, c.bytes); got != c.want {
			t.Errorf("ListedFailures(50 failures, %d, %d) = %d, want %d", c.count, c.bytes, got, c.want)
		}
	}
	// Escaped characters count as encoded: a detail of control
	// characters takes six bytes each.
	ctl := []ShardFailure{{Shard: "s", Side: "release", Code: "DIGEST_MISMATCH", Detail: strings.Repeat("\x01", 100)}}
	if n := ListedFailures(ctl, 10, 600); n != 0 {
		t.Errorf("a failure of 100 escaped control characters fits 600 bytes")
	}
	// The cut of every other failure keeps those of the first 10 the
	// whole list's cut keeps.
	var odd []ShardFailure
	for i := 1; i < len(fs); i += 2 {
		odd = append(odd, fs[i])
	}
	if n := ListedFailures(odd, 10, 1<<20); n != 10 || odd[4] != fs[9] {
		t.Errorf("subset cut keeps %d", n)
	}
}
