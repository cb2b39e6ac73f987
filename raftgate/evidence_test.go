package raftgate

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	neturl "net/url"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/shardproof/shardproof/evidence"
	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
)

// signedRegister is a register of a report of label's release, signed by
// each key (none: unsigned).
func signedRegister(label, verdict string, tw uint64, keys ...ed25519.PrivateKey) *Register {
	r := &Register{Root: dig(label), Shards: shardsOf(label, 2), Report: &ReportSummary{
		Digest: dig("report/" + label), Verdict: verdict, DatasetSnapshot: dig("snap"), TombstoneWatermark: tw,
	}}
	if verdict == manifest.Invalid {
		r.Report.TombstoneHits = 1
	}
	for _, k := range keys {
		r.Signatures = append(r.Signatures, evidence.Sign(k, r.Evidence().Message()))
	}
	return r
}

func signedRecheck(c *RecheckCmd, keys ...ed25519.PrivateKey) *RecheckCmd {
	for _, k := range keys {
		c.Signatures = append(c.Signatures, evidence.Sign(k, c.Evidence().Message()))
	}
	return c
}

// trustedKeys is the trusted set of keys' public keys.
func trustedKeys(t *testing.T, keys ...ed25519.PrivateKey) *evidence.Trusted {
	t.Helper()
	var pubs []ed25519.PublicKey
	for _, k := range keys {
		pubs = append(pubs, k.Public().(ed25519.PublicKey))
	}
	trusted, err := evidence.NewTrusted(pubs...)
	if err != nil {
		t.Fatal(err)
	}
	return trusted
}

func newKey(t *testing.T) ed25519.PrivateKey {
	t.Helper()
	_, k, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// TestEvidenceNeedsATrustedSignature runs a 3-node cluster whose members
// trust one verifier key, through a follower (which checks, then forwards
// to the leader, which checks again): a register of a report and a
// recheck signed by it are applied; unsigned ones, ones signed by another
// key, and signed ones whose fields were changed (the verdict, the root,
// a watermark, the hits) are refused with EVIDENCE_UNSIGNED or
// EVIDENCE_SIGNATURE_INVALID (HTTP 403) and change nothing. A register
// without a report needs no signature; the signatures are never logged.
func TestEvidenceNeedsATrustedSignature(t *testing.T) {
	verifier, intruder := newKey(t), newKey(t)
	trusted := trustedKeys(t, verifier)
	c := MakeCluster(t, 3, func(cfg *Config) { cfg.VerifierKeys = trusted })
	leader := c.Leader(10 * time.Second)
	follower := followerOf(c, leader)
	ctx := ctxT(t, time.Minute)
	cl := NewClient(follower.URL())
	t.Cleanup(cl.Close)

	st, err := cl.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.VerifierKeys) != 1 || st.VerifierKeys[0] != evidence.KeyID(verifier.Public().(ed25519.PublicKey)) {
		t.Fatalf("status verifier keys %v, want [%s]", st.VerifierKeys, evidence.KeyID(verifier.Public().(ed25519.PublicKey)))
	}

	// Staging needs no signature; a signed report is applied.
	if _, err := cl.Register(ctx, &Register{Root: dig("staged"), Shards: shardsOf("staged", 2)}); err != nil {
		t.Fatalf("register without a report: %v", err)
	}
	res, err := cl.Register(ctx, signedRegister("good", manifest.Verified, 5, verifier))
	if err != nil || res.Release.State != ReleaseVerified {
		t.Fatalf("signed register: %v, %+v", err, res)
	}
	// Signed beside an untrusted key's signature: still admitted.
	if _, err := cl.Register(ctx, signedRegister("good2", manifest.Verified, 5, intruder, verifier)); err != nil {
		t.Fatalf("register signed by the verifier and another key: %v", err)
	}
	rc := signedRecheck(&RecheckCmd{Root: dig("good"), Kind: FenceTombstone, Value: 7, Report: dig("recheck/good")}, verifier)
	if r, err := cl.Recheck(ctx, rc); err != nil || r.Release.TombstoneWatermark != 7 {
		t.Fatalf("signed recheck: %v, %+v", err, r)
	}

	waitApplied(t, c.Nodes)
	before := stateBytes(t, leader)

	invalid := signedRegister("bad", manifest.Invalid, 5, verifier)
	forgedVerdict := signedRegister("bad", manifest.Verified, 5)
	forgedVerdict.Signatures = invalid.Signatures
	otherRoot := signedRegister("bad", manifest.Verified, 5)
	otherRoot.Signatures = signedRegister("good", manifest.Verified, 5, verifier).Signatures
	higher := signedRegister("good", manifest.Verified, 9)
	higher.Signatures = signedRegister("good", manifest.Verified, 5, verifier).Signatures
	otherShards := signedRegister("bad", manifest.Verified, 5, verifier)
	otherShards.Shards = shardsOf("else", 2)
	malformed := signedRegister("bad", manifest.Verified, 5)
	malformed.Signatures = []evidence.Signature{{Key: evidence.FormatPublicKey(verifier.Public().(ed25519.PublicKey)), Sig: "bm90IGEgc2lnbmF0dXJl"}}
	badKey := signedRegister("bad", manifest.Verified, 5)
	badKey.Signatures = []evidence.Signature{{Key: "ed25519:short", Sig: invalid.Signatures[0].Sig}}

	rcHits := signedRecheck(&RecheckCmd{Root: dig("good"), Kind: FenceTombstone, Value: 9, Report: dig("recheck/good2"), Hits: 3}, verifier)
	rcHits.Hits = 0
	rcValue := signedRecheck(&RecheckCmd{Root: dig("good"), Kind: FenceTombstone, Value: 9, Report: dig("recheck/good2")}, verifier)
	rcValue.Value = 90
	rcKind := signedRecheck(&RecheckCmd{Root: dig("good"), Kind: FenceTombstone, Value: 9, Report: dig("recheck/good2")}, verifier)
	rcKind.Kind = FenceBenchmark
	// A report's signature never stands for a recheck.
	rcReportSig := &RecheckCmd{Root: dig("good"), Kind: FenceTombstone, Value: 9, Report: dig("report/good"), Signatures: signedRegister("good", manifest.Verified, 5, verifier).Signatures}

	for _, cse := range []struct {
		name string
		cmd  Command
		want errcode.Code
	}{
		{"unsigned register", signedRegister("bad", manifest.Verified, 5), errcode.EvidenceUnsigned},
		{"untrusted register", signedRegister("bad", manifest.Verified, 5, intruder), errcode.EvidenceUnsigned},
		{"verdict INVALID to VERIFIED", forgedVerdict, errcode.EvidenceSignatureInvalid},
		{"another root", otherRoot, errcode.EvidenceSignatureInvalid},
		{"a higher watermark", higher, errcode.EvidenceSignatureInvalid},
		{"other shards", otherShards, errcode.EvidenceSignatureInvalid},
		{"signature not 64 bytes", malformed, errcode.EvidenceSignatureInvalid},
		{"key malformed", badKey, errcode.EvidenceSignatureInvalid},
		{"too many signatures", signedRegister("bad", manifest.Verified, 5, repeatKey(verifier, evidence.MaxSignatures+1)...), errcode.BadInput},
		{"unsigned recheck", &RecheckCmd{Root: dig("good"), Kind: FenceTombstone, Value: 9, Report: dig("recheck/good2")}, errcode.EvidenceUnsigned},
		{"untrusted recheck", signedRecheck(&RecheckCmd{Root: dig("good"), Kind: FenceTombstone, Value: 9, Report: dig("recheck/good2")}, intruder), errcode.EvidenceUnsigned},
		{"recheck hits 3 to 0", rcHits, errcode.EvidenceSignatureInvalid},
		{"recheck value", rcValue, errcode.EvidenceSignatureInvalid},
		{"recheck kind", rcKind, errcode.EvidenceSignatureInvalid},
		{"recheck with a report's signature", rcReportSig, errcode.EvidenceSignatureInvalid},
	} {
		for _, n := range []*Node{follower, leader} {
			body, err := EncodeCommand(cse.cmd)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := http.Post(n.URL()+"/v1/commands", "application/json", bytes.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			var eb ErrorBody
			json.NewDecoder(resp.Body).Decode(&eb)
			resp.Body.Close()
			if eb.Error.Code != cse.want {
				t.Errorf("%s via %s: HTTP %d %s %q, want %s", cse.name, n.ID(), resp.StatusCode, eb.Error.Code, eb.Error.Message, cse.want)
			}
			if want := httpStatus(cse.want); resp.StatusCode != want {
				t.Errorf("%s via %s: HTTP %d, want %d", cse.name, n.ID(), resp.StatusCode, want)
			}
		}
	}
	if httpStatus(errcode.EvidenceUnsigned) != http.StatusForbidden || httpStatus(errcode.EvidenceSignatureInvalid) != http.StatusForbidden {
		t.Error("evidence refusals are not HTTP 403")
	}
	if errcode.EvidenceUnsigned.Exit() != errcode.ExitRejected || errcode.EvidenceSignatureInvalid.Exit() != errcode.ExitRejected {
		t.Error("evidence refusals do not exit 4 (rejected)")
	}
	waitApplied(t, c.Nodes)
	if after := stateBytes(t, leader); !bytes.Equal(before, after) {
		t.Fatal("refused commands changed the state")
	}

	// The log holds the commands as builds before signatures wrote them.
	first, _ := leader.store.FirstIndex()
	last, _ := leader.store.LastIndex()
	var registers int
	for i := first; i <= last; i++ {
		var l raft.Log
		if err := leader.store.GetLog(i, &l); err != nil || l.Type != raft.LogCommand {
			continue
		}
		if bytes.Contains(l.Data, []byte(`"signatures"`)) {
			t.Fatalf("log entry %d holds signatures: %.200s", i, l.Data)
		}
		if bytes.Contains(l.Data, []byte(`"type":"register"`)) {
			registers++
		}
	}
	if registers < 3 {
		t.Fatalf("%d register entries in the leader's log, want 3", registers)
	}
}

// TestEvidenceGateWithoutKeys: a gate given no verifier keys admits
// registers and rechecks signed or not, as before, and ignores what
// signatures they carry, malformed ones included.
func TestEvidenceGateWithoutKeys(t *testing.T) {
	n := StartTestNode(t, TestConfig(t.TempDir(), "n1"))
	waitLeader(t, n)
	ctx := ctxT(t, time.Minute)
	cl := NewClient(n.URL())
	t.Cleanup(cl.Close)
	if _, err := cl.Register(ctx, signedRegister("plain", manifest.Verified, 1)); err != nil {
		t.Fatalf("unsigned register: %v", err)
	}
	junk := signedRegister("junk", manifest.Verified, 1)
	junk.Signatures = []evidence.Signature{{Key: "nonsense", Sig: "!"}}
	if _, err := cl.Register(ctx, junk); err != nil {
		t.Fatalf("register with a malformed signature: %v", err)
	}
	if _, err := cl.Recheck(ctx, &RecheckCmd{Root: dig("plain"), Kind: FenceTombstone, Value: 2, Report: dig("r")}); err != nil {
		t.Fatalf("unsigned recheck: %v", err)
	}
	st, err := cl.Status(ctx)
	if err != nil || len(st.VerifierKeys) != 0 {
		t.Fatalf("status of a gate without keys: %v, verifier keys %v", err, st.VerifierKeys)
	}
	resp, err := http.Get(n.URL() + "/v1/status")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if strings.Contains(string(b), "verifierKeys") {
		t.Fatalf("status of a gate without keys names verifierKeys: %s", b)
	}
}

func repeatKey(k ed25519.PrivateKey, n int) []ed25519.PrivateKey {
	out := make([]ed25519.PrivateKey, n)
	for i := range out {
		out[i] = k
	}
	return out
}

// TestEvidenceSignaturesDecodeStrictly: signatures that are not a list
// of {key, sig} strings are BAD_DOCUMENT, as any malformed command is.
func TestEvidenceSignaturesDecodeStrictly(t *testing.T) {
	base := `{"type":"recheck","now":0,"root":"` + dig("r").String() + `","kind":"tombstone","value":1,"report":"` + dig("p").String() + `","hits":0`
	if c, err := DecodeCommand([]byte(base + `,"signatures":[{"key":"ed25519:x","sig":"y"}]}`)); err != nil || len(c.(*RecheckCmd).Signatures) != 1 {
		t.Fatalf("a well-formed signatures list: %v", err)
	}
	for _, bad := range []string{
		`,"signatures":"x"}`,
		`,"signatures":{"key":"a","sig":"b"}}`,
		`,"signatures":[null]}`,
		`,"signatures":[{"key":1,"sig":"b"}]}`,
		`,"signatures":[{"key":"a","sig":"b","by":"c"}]}`,
		`,"signatures":[{"key":"a","Key":"b"}]}`,
		`,"signatures":[{"key":null,"sig":"b"}]}`,
	} {
		if _, err := DecodeCommand([]byte(base + bad)); errcode.Of(err) != errcode.BadDocument {
			t.Errorf("recheck with %s: %v, want BAD_DOCUMENT", bad, err)
		}
	}
}

// olderBuild decorates a real node's API as a member on a build before
// evidence signatures answers: a command that carries "signatures" is an
// unknown field to its strict decoder (BAD_DOCUMENT, nothing changed);
// everything else reaches the node. It counts the commands that carried
// them.
func olderBuild(t *testing.T, n *Node) (url string, carried *atomic.Int64) {
	t.Helper()
	carried = new(atomic.Int64)
	target, err := neturl.Parse(n.URL())
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/v1/commands" {
			b, err := io.ReadAll(r.Body)
			if err != nil {
				t.Error(err)
				return
			}
			if bytes.Contains(b, []byte(`"signatures"`)) {
				carried.Add(1)
				writeError(w, errcode.New(errcode.BadDocument, `json: unknown field "signatures"`), nil)
				return
			}
			r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(b)), int64(len(b))
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, carried
}

// TestEvidenceSentOnlyToGatesThatAsk: a client sends a register's or a
// recheck's signatures only to a gate whose status lists verifier keys,
// so signing verifiers do not break gates without keys nor members on a
// build older than the field (which refuse a command carrying it,
// BAD_DOCUMENT): a signed register and recheck sent to such a member are
// applied, and no command it receives carries signatures. A gate with
// keys still gets them (TestEvidenceNeedsATrustedSignature).
func TestEvidenceSentOnlyToGatesThatAsk(t *testing.T) {
	verifier := newKey(t)
	n := StartTestNode(t, TestConfig(t.TempDir(), "n1"))
	waitLeader(t, n)
	u, carried := olderBuild(t, n)
	ctx := ctxT(t, time.Minute)
	cl := NewClient(u)
	t.Cleanup(cl.Close)

	reg := signedRegister("old", manifest.Verified, 3, verifier)
	if res, err := cl.Register(ctx, reg); err != nil || res.Release.State != ReleaseVerified {
		t.Fatalf("signed register at a member without keys on an older build: %v, %+v", err, res)
	}
	if len(reg.Signatures) != 1 {
		t.Fatalf("the caller's register lost its signatures: %+v", reg.Signatures)
	}
	rc := signedRecheck(&RecheckCmd{Root: dig("old"), Kind: FenceTombstone, Value: 5, Report: dig("recheck/old")}, verifier)
	if r, err := cl.Recheck(ctx, rc); err != nil || r.Release.TombstoneWatermark != 5 {
		t.Fatalf("signed recheck at a member without keys on an older build: %v, %+v", err, r)
	}
	if k := carried.Load(); k != 0 {
		t.Fatalf("%d commands carried signatures to a member that lists no verifier keys", k)
	}
}

// TestEvidenceSignaturesFollowARefusal: a member without verifier keys
// whose leader has them (members given different key files, as while
// keys are rolled out member by member) answers a bare register or
// recheck EVIDENCE_UNSIGNED from the leader; the client, which withheld
// the signatures because the member's status lists no keys, sends them
// once more, and the command is applied.
func TestEvidenceSignaturesFollowARefusal(t *testing.T) {
	verifier := newKey(t)
	trusted := trustedKeys(t, verifier)
	c := MakeCluster(t, 2, func(cfg *Config) {
		if cfg.ID == "node1" {
			cfg.VerifierKeys = trusted
		}
	})
	keyed, bare := c.Nodes[0], c.Nodes[1]
	for deadline := time.Now().Add(20 * time.Second); c.Leader(10*time.Second) != keyed; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("node1 never led")
		}
		if l := c.Leader(10 * time.Second); l != keyed {
			l.Raft().LeadershipTransferToServer(raft.ServerID(keyed.ID()), raft.ServerAddress(keyed.RaftAddr()))
		}
	}
	ctx := ctxT(t, time.Minute)
	cl := NewClient(bare.URL())
	t.Cleanup(cl.Close)
	if st, err := cl.Status(ctx); err != nil || len(st.VerifierKeys) != 0 {
		t.Fatalf("status of node2: %v, %v; want no verifier keys", err, st)
	}
	if res, err := cl.Register(ctx, signedRegister("mixed", manifest.Verified, 3, verifier)); err != nil || res.Release.State != ReleaseVerified {
		t.Fatalf("signed register through a member without keys to a leader with them: %v, %+v", err, res)
	}
	rc := signedRecheck(&RecheckCmd{Root: dig("mixed"), Kind: FenceTombstone, Value: 5, Report: dig("recheck/mixed")}, verifier)
	if r, err := cl.Recheck(ctx, rc); err != nil || r.Release.TombstoneWatermark != 5 {
		t.Fatalf("signed recheck through a member without keys to a leader with them: %v, %+v", err, r)
	}
	// Unsigned, the leader's refusal stands.
	if _, err := cl.Register(ctx, signedRegister("unsigned", manifest.Verified, 3)); errcode.Of(err) != errcode.EvidenceUnsigned {
		t.Fatalf("unsigned register: %v, want EVIDENCE_UNSIGNED", err)
	}
}

// TestEvidenceCoversEveryField: every field of a register (its report
// summary's included) and of a recheck that Apply reads, that is every
// field but the header, the signatures and the signers (VerifiedBy: the
// leader's record of its check, which a request may not carry), changes
// the signed message: a field added to these commands without a place in
// the evidence encoding fails here, instead of being left for a token
// holder to set unsigned.
func TestEvidenceCoversEveryField(t *testing.T) {
	msg := func(c Command) []byte {
		switch c := c.(type) {
		case *Register:
			return c.Evidence().Message()
		case *RecheckCmd:
			return c.Evidence().Message()
		}
		t.Fatalf("%T", c)
		return nil
	}
	// set gives v, a zero field, a value other than zero.
	set := func(v reflect.Value) bool {
		switch v.Kind() {
		case reflect.String:
			v.SetString("x")
		case reflect.Uint64:
			v.SetUint(1)
		case reflect.Int64:
			v.SetInt(1)
		case reflect.Array: // a digest
			v.Index(0).SetUint(1)
		case reflect.Slice: // shards
			v.Set(reflect.Append(v, reflect.ValueOf(dig("shard"))))
		default:
			return false
		}
		return true
	}
	check := func(name string, fresh func() (Command, reflect.Value)) {
		_, v := fresh()
		for i := 0; i < v.NumField(); i++ {
			f := v.Type().Field(i)
			if f.Name == "Header" || f.Name == "Signatures" || f.Name == "VerifiedBy" || f.Name == "Report" {
				continue
			}
			c, w := fresh()
			before := msg(c)
			if !set(w.Field(i)) {
				t.Fatalf("%s.%s: a field of kind %s the test cannot set", name, f.Name, f.Type.Kind())
			}
			if bytes.Equal(before, msg(c)) {
				t.Errorf("%s.%s is not covered by the signed evidence", name, f.Name)
			}
		}
	}
	check("Register", func() (Command, reflect.Value) {
		c := &Register{Report: &ReportSummary{}}
		return c, reflect.ValueOf(c).Elem()
	})
	check("ReportSummary", func() (Command, reflect.Value) {
		c := &Register{Report: &ReportSummary{}}
		return c, reflect.ValueOf(c.Report).Elem()
	})
	check("RecheckCmd", func() (Command, reflect.Value) {
		c := &RecheckCmd{}
		return c, reflect.ValueOf(c).Elem()
	})
}

// TestRefusalCodeIsTheSameOnEveryMember: a command that breaks more
// than one rule gets the same code from a follower (which checks before
// it forwards) as from the leader, since every member checks in one
// order: the command's fields and caps (checkProposal), then its
// evidence signatures (checkEvidence), then what Apply decides on the
// state. A follower checking the evidence first would answer a register
// with no report digest, unsigned, EVIDENCE_UNSIGNED where the leader
// answers BAD_INPUT; one leaving the evidence to the leader would answer
// a signed recheck of an unknown release as the leader does, but an
// unsigned one too.
func TestRefusalCodeIsTheSameOnEveryMember(t *testing.T) {
	verifier, intruder := newKey(t), newKey(t)
	trusted := trustedKeys(t, verifier)
	c := MakeCluster(t, 2, func(cfg *Config) { cfg.VerifierKeys = trusted })
	leader := c.Leader(10 * time.Second)
	follower := followerOf(c, leader)
	ctx := ctxT(t, time.Minute)
	cl := NewClient(leader.URL())
	t.Cleanup(cl.Close)
	if _, err := cl.Register(ctx, signedRegister("known", manifest.Verified, 1, verifier)); err != nil {
		t.Fatal(err)
	}
	waitApplied(t, c.Nodes)
	before := stateBytes(t, leader)

	noDigest := func(keys ...ed25519.PrivateKey) *Register {
		r := signedRegister("nodigest", manifest.Verified, 1)
		r.Report.Digest = manifest.Digest{}
		for _, k := range keys {
			r.Signatures = append(r.Signatures, evidence.Sign(k, r.Evidence().Message()))
		}
		return r
	}
	otherShards := signedRegister("known", manifest.Verified, 1)
	otherShards.Shards = shardsOf("else", 2)
	forged := signedRegister("known", manifest.Verified, 1)
	forged.Shards = shardsOf("else", 2)
	forged.Signatures = signedRegister("known", manifest.Verified, 1, verifier).Signatures
	signedOther := signedRegister("known", manifest.Verified, 1)
	signedOther.Shards = shardsOf("else", 2)
	signedOther.Signatures = []evidence.Signature{evidence.Sign(verifier, signedOther.Evidence().Message())}
	for _, cse := range []struct {
		name string
		cmd  Command
		want errcode.Code
	}{
		{"register, no report digest, unsigned", noDigest(), errcode.BadInput},
		{"register, no report digest, by an untrusted key", noDigest(intruder), errcode.BadInput},
		{"register, no report digest, signed", noDigest(verifier), errcode.BadInput},
		{"recheck naming no report, unsigned", &RecheckCmd{Root: dig("known"), Kind: FenceTombstone, Value: 2}, errcode.BadInput},
		{"recheck of an unknown release, unsigned", &RecheckCmd{Root: dig("unknown"), Kind: FenceTombstone, Value: 2, Report: dig("r")}, errcode.EvidenceUnsigned},
		{"recheck of an unknown release, signed", signedRecheck(&RecheckCmd{Root: dig("unknown"), Kind: FenceTombstone, Value: 2, Report: dig("r")}, verifier), errcode.UnknownRelease},
		{"register with other shards, unsigned", otherShards, errcode.EvidenceUnsigned},
		{"register with other shards, signature of the registered ones", forged, errcode.EvidenceSignatureInvalid},
		{"register with other shards, signed", signedOther, errcode.AlreadyExists},
		{"createRun named out of bounds", &CreateRun{Run: "../x", Alias: "a", WorldSize: 1}, errcode.BadInput},
		{"setClusterVersion", &SetClusterVersion{Version: 1}, errcode.BadInput},
	} {
		body, err := EncodeCommand(cse.cmd)
		if err != nil {
			t.Fatal(err)
		}
		var got [2]errcode.Code
		for i, n := range []*Node{follower, leader} {
			resp, err := http.Post(n.URL()+"/v1/commands", "application/json", bytes.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			var eb ErrorBody
			json.NewDecoder(resp.Body).Decode(&eb)
			resp.Body.Close()
			got[i] = eb.Error.Code
		}
		if got[0] != cse.want || got[1] != cse.want {
			t.Errorf("%s: follower %s, leader %s; want %s from both", cse.name, got[0], got[1], cse.want)
		}
	}
	waitApplied(t, c.Nodes)
	if after := stateBytes(t, leader); !bytes.Equal(before, after) {
		t.Fatal("refused commands changed the state")
	}
}
