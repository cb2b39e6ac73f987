package raftgate

import (
	"bytes"
	"crypto/ed25519"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/shardproof/shardproof/evidence"
	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
)

func pubOf(k ed25519.PrivateKey) ed25519.PublicKey { return k.Public().(ed25519.PublicKey) }

// writeKeys writes a verifier keys file listing keys' public keys.
func writeKeys(t *testing.T, path string, keys ...ed25519.PrivateKey) {
	t.Helper()
	var b strings.Builder
	b.WriteString("# verifiers\n")
	for _, k := range keys {
		b.WriteString(evidence.FormatPublicKey(pubOf(k)) + "\n")
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestVerifierKeysReload: a node started on a verifier keys file
// (Config.VerifierKeysFile, read by Start) reads it again on
// ReloadVerifierKeys: a key taken out of the file no longer signs
// (EVIDENCE_UNSIGNED), one put in does, Status lists the new key IDs,
// and the log names the IDs added and removed, never a key's text. A
// file that is missing, holds a line that is no public key (a private
// key among them), or lists none is USAGE: the keys in effect stay,
// Status still lists them, and the log says so with the code. A node
// without keys gains none by a reload, and still takes unsigned
// evidence; one given keys without a file keeps them.
func TestVerifierKeysReload(t *testing.T) {
	old, fresh, spare := newKey(t), newKey(t), newKey(t)
	file := filepath.Join(t.TempDir(), "verifiers")
	writeKeys(t, file, old)
	logs := &syncBuf{}
	cfg := TestConfig(t.TempDir(), "n1")
	cfg.VerifierKeysFile = file
	cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
	n := StartTestNode(t, cfg)
	waitLeader(t, n)
	ctx := ctxT(t, time.Minute)
	cl := NewClient(n.URL())
	t.Cleanup(cl.Close)
	ids := func() []string {
		t.Helper()
		st, err := cl.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return st.VerifierKeys
	}
	register := func(label string, keys ...ed25519.PrivateKey) error {
		t.Helper()
		_, err := cl.Register(ctx, signedRegister(label, manifest.Verified, 1, keys...))
		return err
	}
	oldID, freshID, spareID := evidence.KeyID(pubOf(old)), evidence.KeyID(pubOf(fresh)), evidence.KeyID(pubOf(spare))

	if got := ids(); !slices.Equal(got, []string{oldID}) {
		t.Fatalf("status verifier keys %v, want [%s] (read from the file by Start)", got, oldID)
	}
	if err := register("a", old); err != nil {
		t.Fatalf("register signed by the key in the file: %v", err)
	}
	if err := register("b", fresh); errcode.Of(err) != errcode.EvidenceUnsigned {
		t.Fatalf("register signed by a key not yet in the file: %v, want EVIDENCE_UNSIGNED", err)
	}

	// The old key revoked, a new one added.
	writeKeys(t, file, fresh)
	added, removed, err := n.ReloadVerifierKeys()
	if err != nil || !slices.Equal(added, []string{freshID}) || !slices.Equal(removed, []string{oldID}) {
		t.Fatalf("reload: added %v, removed %v, %v; want added [%s], removed [%s]", added, removed, err, freshID, oldID)
	}
	if got := ids(); !slices.Equal(got, []string{freshID}) {
		t.Fatalf("status verifier keys after the reload %v, want [%s]", got, freshID)
	}
	if err := register("c", old); errcode.Of(err) != errcode.EvidenceUnsigned {
		t.Fatalf("register signed by the revoked key: %v, want EVIDENCE_UNSIGNED", err)
	}
	if err := register("b", fresh); err != nil {
		t.Fatalf("register signed by the added key: %v", err)
	}
	if l := logs.String(); !strings.Contains(l, `msg="verifier keys reloaded" node=n1 added=`+freshID+" removed="+oldID) {
		t.Fatalf("the log does not name the keys added and removed:\n%s", l)
	}

	// Files the reload refuses: the keys in effect stay.
	two := filepath.Join(t.TempDir(), "two")
	writeKeys(t, two, fresh, spare)
	private := evidence.FormatPrivateKey(spare)
	for name, content := range map[string]*string{
		"missing":       nil,
		"empty":         ptr(""),
		"comments only": ptr("# every key revoked\n\n"),
		"not a key":     ptr(evidence.FormatPublicKey(pubOf(fresh)) + "\nssh-ed25519 AAAAC3Nza\n"),
		"a private key": ptr(evidence.FormatPublicKey(pubOf(fresh)) + "\n" + private + "\n"),
	} {
		if content == nil {
			os.Remove(file)
		} else if err := os.WriteFile(file, []byte(*content), 0o644); err != nil {
			t.Fatal(err)
		}
		before := len(logs.String())
		added, removed, err := n.ReloadVerifierKeys()
		if errcode.Of(err) != errcode.Usage || added != nil || removed != nil {
			t.Errorf("reload of a file %s: added %v, removed %v, %v; want USAGE and no change", name, added, removed, err)
		}
		if got := ids(); !slices.Equal(got, []string{freshID}) {
			t.Errorf("status verifier keys after a reload of a file %s: %v, want [%s] kept", name, got, freshID)
		}
		if err := register("d", old); errcode.Of(err) != errcode.EvidenceUnsigned {
			t.Errorf("after a reload of a file %s, register signed by the revoked key: %v, want EVIDENCE_UNSIGNED", name, err)
		}
		if l := logs.String()[before:]; !strings.Contains(l, `msg="verifier keys not reloaded; the keys in effect stay"`) || !strings.Contains(l, "code=USAGE") || !strings.Contains(l, "verifierKeys="+freshID) {
			t.Errorf("reload of a file %s: the log does not say the keys stay, with the code:\n%s", name, l)
		}
	}
	if err := register("e", spare); errcode.Of(err) != errcode.EvidenceUnsigned {
		t.Fatalf("register signed by a key only refused files listed: %v, want EVIDENCE_UNSIGNED", err)
	}
	if l := logs.String(); strings.Contains(l, strings.TrimPrefix(private, evidence.PrivatePrefix)) || strings.Contains(l, evidence.FormatPublicKey(pubOf(fresh))) {
		t.Fatalf("the log holds a key's text:\n%s", l)
	}
	// A good file again: two keys, nothing removed.
	os.Rename(two, file)
	if added, removed, err := n.ReloadVerifierKeys(); err != nil || !slices.Equal(added, []string{spareID}) || removed != nil {
		t.Fatalf("reload of two keys: added %v, removed %v, %v; want added [%s]", added, removed, err, spareID)
	}
	if err := register("e", spare); err != nil {
		t.Fatalf("register signed by the key added second: %v", err)
	}

	// A node without keys gains none: it still requires no signature.
	plainLogs := &syncBuf{}
	pcfg := TestConfig(t.TempDir(), "plain")
	pcfg.Logger = slog.New(slog.NewTextHandler(plainLogs, nil))
	plain := StartTestNode(t, pcfg)
	waitLeader(t, plain)
	if _, _, err := plain.ReloadVerifierKeys(); errcode.Of(err) != errcode.Usage {
		t.Fatalf("reload on a node without keys: %v, want USAGE", err)
	}
	if !strings.Contains(plainLogs.String(), "code=USAGE") || !strings.Contains(plainLogs.String(), "requires no verifier signatures") {
		t.Fatalf("reload on a node without keys: the log does not say why:\n%s", plainLogs.String())
	}
	pc := NewClient(plain.URL())
	t.Cleanup(pc.Close)
	if _, err := pc.Register(ctx, signedRegister("unsigned", manifest.Verified, 1)); err != nil {
		t.Fatalf("unsigned register on a node without keys after a reload: %v", err)
	}

	// Keys given without a file are kept.
	trusted := trustedKeys(t, old)
	kcfg := TestConfig(t.TempDir(), "given")
	kcfg.VerifierKeys = trusted
	given := StartTestNode(t, kcfg)
	if _, _, err := given.ReloadVerifierKeys(); errcode.Of(err) != errcode.Usage {
		t.Fatalf("reload of keys given without a file: %v, want USAGE", err)
	}
	if got := given.trusted.Load().IDs(); !slices.Equal(got, []string{oldID}) {
		t.Fatalf("keys given without a file after a reload: %v, want [%s]", got, oldID)
	}
}

func ptr(s string) *string { return &s }

// TestVerifierKeysReloadIsWhole: checks running while the file is
// reloaded again and again, between a set of one key and a set of that
// key and another, each see one whole set: evidence signed by the key
// both sets hold is always admitted, and unsigned evidence always
// refused EVIDENCE_UNSIGNED. A reload that emptied the set in effect
// before filling it, or dropped it for a moment, would admit unsigned
// evidence or refuse the signed.
func TestVerifierKeysReloadIsWhole(t *testing.T) {
	both, other := newKey(t), newKey(t)
	dir := t.TempDir()
	one, two, file := filepath.Join(dir, "one"), filepath.Join(dir, "two"), filepath.Join(dir, "verifiers")
	writeKeys(t, one, both)
	writeKeys(t, two, both, other)
	writeKeys(t, file, both)
	cfg := TestConfig(t.TempDir(), "n1")
	cfg.VerifierKeysFile = file
	n := NewNode(cfg)
	// The check needs no Raft: Start reads the file, the node need not
	// lead.
	if err := n.Start(ctxT(t, time.Minute)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Shutdown() })
	signed, unsigned := signedRegister("r", manifest.Verified, 1, both), signedRegister("r", manifest.Verified, 1)

	const reloads, checks = 200, 4
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var bad sync.Map
	for range checks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := n.checkEvidence(signed); err != nil {
					bad.Store("signed: "+err.Error(), true)
				}
				if _, err := n.checkEvidence(unsigned); errcode.Of(err) != errcode.EvidenceUnsigned {
					bad.Store("unsigned: "+errString(err), true)
				}
			}
		}()
	}
	for i := range reloads {
		src := one
		if i%2 == 0 {
			src = two
		}
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		// Replaced by a rename, as an operator's editor or config
		// management does, so the reload never reads half a file.
		tmp := file + ".tmp"
		if err := os.WriteFile(tmp, b, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, file); err != nil {
			t.Fatal(err)
		}
		if _, _, err := n.ReloadVerifierKeys(); err != nil {
			t.Fatalf("reload %d: %v", i, err)
		}
	}
	close(stop)
	wg.Wait()
	bad.Range(func(k, _ any) bool {
		t.Errorf("a check during the reloads: %s", k)
		return true
	})
}

func errString(err error) string {
	if err == nil {
		return "admitted"
	}
	return err.Error()
}

// TestSignersInTheAnswerAndTheLog: the answer to a register of a report
// or a recheck at a gate with verifier keys names the trusted keys that
// signed its evidence (RecheckResult.VerifiedBy: sorted, never an
// untrusted key's), through a follower too, and so does the leader's
// log line of the command; a recheck with hits, recorded and refused,
// names them in its refusal's result. At cluster version 7 the log
// entries name them too (never a signature), and every replica's state
// records them with the report and the recheck; a staging register and
// a gate without keys answer and record none.
func TestSignersInTheAnswerAndTheLog(t *testing.T) {
	a, b, intruder := newKey(t), newKey(t), newKey(t)
	trusted := trustedKeys(t, a, b)
	logs := &syncBuf{}
	c := MakeCluster(t, 2, func(cfg *Config) {
		cfg.VerifierKeys = trusted
		cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
	})
	leader := c.Leader(10 * time.Second)
	follower := followerOf(c, leader)
	ctx := ctxT(t, time.Minute)
	cl := NewClient(follower.URL())
	t.Cleanup(cl.Close)
	aID, bID := evidence.KeyID(pubOf(a)), evidence.KeyID(pubOf(b))
	both := []string{aID, bID}
	slices.Sort(both)

	if r, err := cl.Register(ctx, &Register{Root: dig("staged"), Shards: shardsOf("staged", 2)}); err != nil || r.VerifiedBy != nil {
		t.Fatalf("staging register: %v, verified by %v; want none", err, r.VerifiedBy)
	}
	one := signedRegister("one", manifest.Verified, 1, intruder, a)
	if r, err := cl.Register(ctx, one); err != nil || !slices.Equal(r.VerifiedBy, []string{aID}) {
		t.Fatalf("register signed by a and an untrusted key: %v, verified by %v; want [%s]", err, r.VerifiedBy, aID)
	}
	if r, err := cl.Register(ctx, signedRegister("two", manifest.Verified, 1, b, a)); err != nil || !slices.Equal(r.VerifiedBy, both) {
		t.Fatalf("register signed by b and a: %v, verified by %v; want %v", err, r.VerifiedBy, both)
	}
	if r, err := cl.Recheck(ctx, signedRecheck(&RecheckCmd{Root: dig("one"), Kind: FenceTombstone, Value: 3, Report: dig("re/one")}, b)); err != nil || !slices.Equal(r.VerifiedBy, []string{bID}) {
		t.Fatalf("recheck signed by b: %v, verified by %v; want [%s]", err, r.VerifiedBy, bID)
	}
	hits := signedRecheck(&RecheckCmd{Root: dig("two"), Kind: FenceTombstone, Value: 4, Report: dig("re/two"), Hits: 2}, a)
	if r, err := cl.Recheck(ctx, hits); errcode.Of(err) != errcode.TombstoneHit || r.Release.State != ReleaseInvalid || !slices.Equal(r.VerifiedBy, []string{aID}) {
		t.Fatalf("recheck with hits signed by a: %v, %+v; want TOMBSTONE_HIT, INVALID, verified by [%s]", err, r, aID)
	}

	l := logs.String()
	for _, want := range []string{
		"node=" + leader.ID() + " type=register root=" + dig("one").String() + " report=" + dig("report/one").String() + " verifiedBy=" + aID,
		"node=" + leader.ID() + " type=register root=" + dig("two").String() + " report=" + dig("report/two").String() + " verifiedBy=" + strings.Join(both, ","),
		"node=" + leader.ID() + " type=recheck root=" + dig("one").String() + " report=" + dig("re/one").String() + " verifiedBy=" + bID,
		"node=" + leader.ID() + " type=recheck root=" + dig("two").String() + " report=" + dig("re/two").String() + " verifiedBy=" + aID + " code=TOMBSTONE_HIT",
	} {
		if !strings.Contains(l, `msg="command applied; trusted verifier keys signed its evidence" `+want) {
			t.Errorf("the leader's log has no line %q:\n%s", want, l)
		}
	}
	if strings.Contains(l, evidence.KeyID(pubOf(intruder))) {
		t.Errorf("the log names the untrusted key:\n%s", l)
	}

	// Every replica's state records them; the log entries name them,
	// and hold no signature.
	waitApplied(t, c.Nodes)
	for _, n := range c.Nodes {
		var got map[string][]string
		n.FSM().Read(func(s *State) {
			got = map[string][]string{}
			for _, label := range []string{"staged", "one", "two"} {
				rel := s.Releases[dig(label).String()]
				got[label] = rel.VerifiedBy
				for _, rc := range rel.Rechecks {
					got[label+" recheck"] = rc.VerifiedBy
				}
			}
		})
		want := map[string][]string{"staged": nil, "one": {aID}, "one recheck": {bID}, "two": both, "two recheck": {aID}}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s's state records signers %v, want %v", n.ID(), got, want)
		}
		first, _ := n.store.FirstIndex()
		last, _ := n.store.LastIndex()
		named := 0
		for i := first; i <= last; i++ {
			var e raft.Log
			if err := n.store.GetLog(i, &e); err != nil || e.Type != raft.LogCommand {
				continue
			}
			if bytes.Contains(e.Data, []byte(`"signatures"`)) || bytes.Contains(e.Data, []byte(evidence.KeyID(pubOf(intruder)))) {
				t.Fatalf("%s's log entry %d holds a signature or an untrusted key: %.300s", n.ID(), i, e.Data)
			}
			if bytes.Contains(e.Data, []byte(`"verifiedBy"`)) {
				named++
			}
		}
		if named != 4 {
			t.Fatalf("%s's log names signers in %d entries, want the 4 signed commands", n.ID(), named)
		}
	}

	// A gate without keys answers no signers, signed or not.
	plain := StartTestNode(t, TestConfig(t.TempDir(), "plain"))
	waitLeader(t, plain)
	body, err := EncodeCommand(signedRegister("plain", manifest.Verified, 1, a))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post(plain.URL()+"/v1/commands", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || bytes.Contains(raw, []byte("verifiedBy")) {
		t.Fatalf("signed register at a gate without keys: HTTP %d %s; want 200 naming no signer", resp.StatusCode, raw)
	}
	if st := stateBytes(t, plain); bytes.Contains(st, []byte("verifiedBy")) {
		t.Fatalf("a gate without keys records a signer: %.300s", st)
	}
}
