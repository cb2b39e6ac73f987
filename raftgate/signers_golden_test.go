package raftgate

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"io"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/shardproof/shardproof/evidence"
	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
)

// Golden vectors of the signers the state records (command-schema
// version 7, versionSigners), frozen once published:
//
//   - testdata/log-v6.jsonl, one command a line, is a log a cluster at
//     version 6 wrote with verifier keys (its registers and rechecks
//     admitted signed, logged without signatures or signers), and
//     testdata/state-v6.json the snapshot a build of version 6 (a907bf2,
//     the commit before version 7) wrote after applying it: both written
//     by that build.
//   - testdata/log-v7.jsonl and testdata/state-v7.json are the same for
//     version 7, with signers, written by the build that added them.
const (
	goldenStateV6Digest = "sha256:65fc1e98ba8d08d90040b3d92b1222bccd3b857728431cf7158ac1691f6d08e0"
	goldenStateV7Digest = "sha256:16bb85fdfbe025fabb8f87eb8110126cc9239de1a7aa7484f3f19d01a6533a9a"
)

// goldenSigners are the key IDs of the two keys log-v7.jsonl names:
// ed25519 keys of the seeds 32 × 0x01 and 32 × 0x02, sorted.
func goldenSigners() (a, b string) {
	a = evidence.KeyID(ed25519.NewKeyFromSeed(bytes.Repeat([]byte{1}, 32)).Public().(ed25519.PublicKey))
	b = evidence.KeyID(ed25519.NewKeyFromSeed(bytes.Repeat([]byte{2}, 32)).Public().(ed25519.PublicKey))
	if b < a {
		a, b = b, a
	}
	return a, b
}

// version7Log is the log of testdata/log-v7.jsonl: a cluster raised to
// version 7 logs the signers its leader checked.
func version7Log(t *testing.T) [][]byte {
	t.Helper()
	var log [][]byte
	now := int64(1_700_000_000_000)
	add := func(c Command) {
		c.header().Now = now
		now += 1000
		b, err := EncodeCommand(c)
		if err != nil {
			t.Fatal(err)
		}
		log = append(log, b)
	}
	a, b := goldenSigners()
	add(&SetClusterVersion{Version: 7, ClusterID: "0123456789abcdef0123456789abcdef"})
	add(&Register{Root: dig("one"), Shards: shardsOf("one", 2), Report: &ReportSummary{
		Digest: dig("report/one"), Verdict: manifest.Verified, DatasetSnapshot: dig("snap"), TombstoneWatermark: 1,
	}, VerifiedBy: []string{a, b}})
	add(&Publish{Alias: "main", Root: dig("one")})
	add(&AdvanceFence{Kind: FenceTombstone, Value: 3, SpareChecked: true})
	add(&RecheckCmd{Root: dig("one"), Kind: FenceTombstone, Value: 3, Report: dig("re/one"), VerifiedBy: []string{a}})
	// A newer report of "one", signed by b alone: the release records
	// b alone.
	add(&Register{Root: dig("one"), Shards: shardsOf("one", 2), Report: &ReportSummary{
		Digest: dig("report/one-2"), Verdict: manifest.Verified, DatasetSnapshot: dig("snap"), TombstoneWatermark: 3,
	}, VerifiedBy: []string{b}})
	// "two" registered unsigned, then the same report again signed by
	// a: the retry fills in the signers it had none of.
	two := &ReportSummary{Digest: dig("report/two"), Verdict: manifest.Verified, DatasetSnapshot: dig("snap"), TombstoneWatermark: 3}
	add(&Register{Root: dig("two"), Shards: shardsOf("two", 2), Report: two})
	add(&Register{Root: dig("two"), Shards: shardsOf("two", 2), Report: two, VerifiedBy: []string{a}})
	add(&RecheckCmd{Root: dig("two"), Kind: FenceTombstone, Value: 3, Report: dig("re/two"), Hits: 2, VerifiedBy: []string{b}})
	add(&Register{Root: dig("bad"), Shards: shardsOf("bad", 1), Report: &ReportSummary{
		Digest: dig("report/bad"), Verdict: manifest.Invalid, DatasetSnapshot: dig("snap"), TombstoneWatermark: 3, TombstoneHits: 1,
	}, VerifiedBy: []string{a}})
	return log
}

// readGoldenLog returns the entries of a testdata log, one a line.
func readGoldenLog(t testing.TB, name string) [][]byte {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Split(bytes.TrimSuffix(b, []byte("\n")), []byte("\n"))
}

func readGolden(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// replayLog applies log as a member applies its entries (indexes from
// 1), failing the test on a refusal but the TOMBSTONE_HIT of a recheck
// with hits (recorded and refused).
func replayLog(t *testing.T, f *FSM, log [][]byte) {
	t.Helper()
	for i, b := range log {
		res, _ := f.Apply(&raft.Log{Type: raft.LogCommand, Index: uint64(i + 1), Data: b}).(*Result)
		if res == nil || res.Err != nil && errcode.Of(res.Err) != errcode.TombstoneHit {
			t.Fatalf("entry %d: %+v", i+1, res)
		}
	}
}

// A log a cluster at version 6 wrote replays on this build to the
// snapshot, byte for byte, a build of version 6 wrote: each entry
// decodes and encodes to its own bytes (a command without signers is
// logged as before), and the state names no signer. That snapshot
// restores here and encodes to the same bytes.
func TestVersion6LogAndSnapshotAsBefore(t *testing.T) {
	log := readGoldenLog(t, "log-v6.jsonl")
	for i, b := range log {
		c, err := DecodeCommand(b)
		if err != nil {
			t.Fatalf("entry %d does not decode: %v", i+1, err)
		}
		again, err := EncodeCommand(c)
		if err != nil || !bytes.Equal(again, b) {
			t.Fatalf("entry %d encodes as %s, %v; version 6 logged %s", i+1, again, err, b)
		}
	}
	want := readGolden(t, "state-v6.json")
	if d := manifest.Sum(want).String(); d != goldenStateV6Digest {
		t.Fatalf("testdata/state-v6.json is %s, was %s", d, goldenStateV6Digest)
	}
	f := NewFSM()
	replayLog(t, f, log)
	got, err := f.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("the version-6 log replays to\n%s\nbuilds of version 6 reached\n%s", got, want)
	}
	if bytes.Contains(got, []byte("verifiedBy")) {
		t.Fatal("a state of version 6 names signers")
	}

	r := NewFSM()
	if err := r.Restore(io.NopCloser(bytes.NewReader(want))); err != nil {
		t.Fatalf("the version-6 snapshot does not restore: %v", err)
	}
	if got, _ := r.Encode(); !bytes.Equal(got, want) {
		t.Fatalf("the version-6 snapshot restored encodes as\n%s", got)
	}
	if _, err := DecodeBackup(want); err != nil {
		t.Fatalf("the version-6 state as a backup: %v", err)
	}
}

// The new form's vectors: version7Log encodes to testdata/log-v7.jsonl
// and replays to testdata/state-v7.json, whose releases and rechecks
// record their signers (a newer report replaces them, a retry of the
// report fills in those of a release that had none), and which restores
// to the same bytes. A build of version 6 meets neither: it halts at the
// raise to 7, at a snapshot of version 7, and, were it to meet one, at
// an entry that names signers (BAD_DOCUMENT, as a build without the
// field decodes it), each time with the state as it was.
func TestVersion7SignersVectors(t *testing.T) {
	log := readGoldenLog(t, "log-v7.jsonl")
	made := version7Log(t)
	if len(made) != len(log) {
		t.Fatalf("version7Log has %d entries, testdata %d", len(made), len(log))
	}
	for i := range log {
		if !bytes.Equal(made[i], log[i]) {
			t.Fatalf("entry %d encodes as\n%s\nthe vector is\n%s", i+1, made[i], log[i])
		}
	}
	want := readGolden(t, "state-v7.json")
	if d := manifest.Sum(want).String(); d != goldenStateV7Digest {
		t.Fatalf("testdata/state-v7.json is %s, was %s", d, goldenStateV7Digest)
	}
	f := NewFSM()
	replayLog(t, f, log)
	if got, _ := f.Encode(); !bytes.Equal(got, want) {
		t.Fatalf("the version-7 log replays to\n%s\nthe vector is\n%s", got, want)
	}
	a, b := goldenSigners()
	f.Read(func(s *State) {
		for _, w := range []struct {
			label         string
			report, first []string
		}{{"one", []string{b}, []string{a}}, {"two", []string{a}, []string{b}}, {"bad", []string{a}, nil}} {
			rel := s.Releases[dig(w.label).String()]
			var first []string
			if len(rel.Rechecks) > 0 {
				first = rel.Rechecks[0].VerifiedBy
			}
			if !slices.Equal(rel.VerifiedBy, w.report) || !slices.Equal(first, w.first) {
				t.Errorf("release %s records signers %v, recheck %v; want %v, %v", w.label, rel.VerifiedBy, first, w.report, w.first)
			}
		}
	})
	r := NewFSM()
	if err := r.Restore(io.NopCloser(bytes.NewReader(want))); err != nil {
		t.Fatalf("the version-7 snapshot does not restore: %v", err)
	}
	if got, _ := r.Encode(); !bytes.Equal(got, want) {
		t.Fatalf("the version-7 snapshot restored encodes as\n%s", got)
	}

	older := func() *FSM {
		o := NewFSM()
		o.version = versionSigners - 1
		return o
	}
	halted := func(what string, o *FSM, err error, index uint64, before []byte) {
		t.Helper()
		var h *HaltError
		if !errors.As(err, &h) || errcode.Of(err) != errcode.GateHalted || h.Index != index {
			t.Fatalf("%s on a build of version %d: %v, want GATE_HALTED at entry %d", what, versionSigners-1, err, index)
		}
		if after, _ := o.Encode(); !bytes.Equal(after, before) {
			t.Fatalf("%s changed the halted build's state", what)
		}
	}
	o := older()
	before, _ := o.Encode()
	res := o.Apply(&raft.Log{Type: raft.LogCommand, Index: 1, Data: log[0]}).(*Result)
	var v *VersionError
	if !errors.As(res.Err, &v) || v.Cluster != versionSigners {
		t.Fatalf("the raise to %d on a build of version %d: %v, want a VersionError", versionSigners, versionSigners-1, res.Err)
	}
	halted("the raise", o, res.Err, 1, before)

	o = older()
	before, _ = o.Encode()
	err := o.Restore(io.NopCloser(bytes.NewReader(want)))
	if !errors.As(err, &v) || v.Cluster != versionSigners {
		t.Fatalf("a snapshot of version %d on a build of version %d: %v, want a VersionError", versionSigners, versionSigners-1, err)
	}
	if _, h := o.Halted(); h == nil || !h.Snapshot {
		t.Fatalf("a snapshot of version %d did not halt a build of version %d", versionSigners, versionSigners-1)
	}
	if after, _ := o.Encode(); !bytes.Equal(after, before) {
		t.Fatal("the refused snapshot changed the state")
	}

	o = older()
	replayLog(t, o, readGoldenLog(t, "log-v6.jsonl")[:1])
	before, _ = o.Encode()
	res = o.Apply(&raft.Log{Type: raft.LogCommand, Index: 2, Data: log[1]}).(*Result)
	if errcode.Of(errors.Unwrap(res.Err)) != errcode.BadDocument {
		t.Fatalf("a register naming signers on a build of version %d: %v, want a halt at BAD_DOCUMENT", versionSigners-1, res.Err)
	}
	halted("a register naming signers", o, res.Err, 2, before)
}

// Apply takes signers only from cluster version 7 and only as a gate
// records them: below it a register or recheck naming some is
// CLUSTER_VERSION, and at it a list that is not sorted key IDs, each
// once, at most 16 (or signers of a register without a report) is
// BAD_INPUT; each changes nothing. A state that holds signers below 7,
// or a list Apply would refuse, is no gate state.
func TestAppliedSignersAreChecked(t *testing.T) {
	a, b := goldenSigners()
	apply := func(f *FSM, c Command) *Result {
		t.Helper()
		c.header().Now = 1_700_000_000_000
		enc, err := EncodeCommand(c)
		if err != nil {
			t.Fatal(err)
		}
		return f.ApplyBytes(enc)
	}
	v6 := NewFSM()
	replayLog(t, v6, readGoldenLog(t, "log-v6.jsonl"))
	before, _ := v6.Encode()
	for _, c := range []Command{
		&Register{Root: dig("new"), Shards: shardsOf("new", 1), Report: &ReportSummary{Digest: dig("report/new"), Verdict: manifest.Verified, DatasetSnapshot: dig("snap"), TombstoneWatermark: 3}, VerifiedBy: []string{a}},
		&RecheckCmd{Root: dig("one"), Kind: FenceTombstone, Value: 4, Report: dig("re/one-4"), VerifiedBy: []string{a}},
	} {
		if res := apply(v6, c); errcode.Of(res.Err) != errcode.ClusterVersion {
			t.Fatalf("%s naming signers at cluster version 6: %v, want CLUSTER_VERSION", commandType(c), res.Err)
		}
	}
	if after, _ := v6.Encode(); !bytes.Equal(after, before) {
		t.Fatal("a refusal at version 6 changed the state")
	}

	v7 := NewFSM()
	replayLog(t, v7, readGoldenLog(t, "log-v7.jsonl"))
	before, _ = v7.Encode()
	many := make([]string, evidence.MaxSignatures+1)
	for i := range many {
		many[i] = evidence.KeyID(ed25519.NewKeyFromSeed(bytes.Repeat([]byte{byte(i + 10)}, 32)).Public().(ed25519.PublicKey))
	}
	slices.Sort(many)
	for _, ids := range [][]string{{b, a}, {a, a}, {"ed25519:sha256:ABCDEF0123456789"}, {"someone"}, many} {
		for _, c := range []Command{
			&Register{Root: dig("new"), Shards: shardsOf("new", 1), Report: &ReportSummary{Digest: dig("report/new"), Verdict: manifest.Verified, DatasetSnapshot: dig("snap"), TombstoneWatermark: 3}, VerifiedBy: ids},
			&RecheckCmd{Root: dig("one"), Kind: FenceTombstone, Value: 4, Report: dig("re/one-4"), VerifiedBy: ids},
		} {
			if res := apply(v7, c); errcode.Of(res.Err) != errcode.BadInput {
				t.Fatalf("%s naming signers %.80q: %v, want BAD_INPUT", commandType(c), ids, res.Err)
			}
		}
	}
	if res := apply(v7, &Register{Root: dig("staged"), Shards: shardsOf("staged", 1), VerifiedBy: []string{a}}); errcode.Of(res.Err) != errcode.BadInput {
		t.Fatalf("a staging register naming signers: %v, want BAD_INPUT", res.Err)
	}
	if after, _ := v7.Encode(); !bytes.Equal(after, before) {
		t.Fatal("a refused list of signers changed the state")
	}

	state := string(readGolden(t, "state-v7.json"))
	for what, bad := range map[string]string{
		"signers at version 6":  strings.Replace(state, `"clusterVersion":7`, `"clusterVersion":6`, 1),
		"unsorted signers":      strings.Replace(state, `"verifiedBy":["`+b+`"]`, `"verifiedBy":["`+b+`","`+a+`"]`, 1),
		"a signer twice":        strings.Replace(state, `"verifiedBy":["`+a+`"]`, `"verifiedBy":["`+a+`","`+a+`"]`, 1),
		"a signer not a key ID": strings.Replace(state, `"verifiedBy":["`+a+`"]`, `"verifiedBy":["ed25519:x"]`, 1),
	} {
		if bad == state {
			t.Fatalf("%s: the vector changed nothing", what)
		}
		if _, err := DecodeState([]byte(bad)); errcode.Of(err) != errcode.BadDocument {
			t.Errorf("a state with %s: %v, want BAD_DOCUMENT", what, err)
		}
	}
}
