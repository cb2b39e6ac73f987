package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/shardproof/shardproof/coordinator"
	"github.com/shardproof/shardproof/evidence"
	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/raftgate"
	"github.com/shardproof/shardproof/stage/stagetest"
)

// startSigningGate starts a single-node gate that trusts the verifier
// keys of the file at keys, and waits until it leads.
func startSigningGate(t *testing.T, keys string) (*raftgate.Node, *raftgate.Client) {
	t.Helper()
	trusted, err := evidence.LoadTrusted(keys)
	if err != nil {
		t.Fatal(err)
	}
	cfg := raftgate.TestConfig(t.TempDir(), "gate1")
	cfg.VerifierKeys = trusted
	node := raftgate.StartTestNode(t, cfg)
	g := raftgate.NewClient(node.URL())
	t.Cleanup(g.Close)
	for deadline := time.Now().Add(10 * time.Second); !node.IsLeader(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no leader")
		}
	}
	return node, g
}

var keyIDLine = regexp.MustCompile(`(?m)^key (ed25519:sha256:[0-9a-f]{16})$`)

// keyPair runs keys generate into dir and returns the private and public
// files and the key ID it printed.
func keyPair(t *testing.T, dir, name string) (priv, pub, id string) {
	t.Helper()
	priv, pub = filepath.Join(dir, name+".key"), filepath.Join(dir, name+".pub")
	out, err := cli(t, "keys", "generate", "--private", priv, "--public", pub)
	m := keyIDLine.FindStringSubmatch(out)
	if err != nil || m == nil {
		t.Fatalf("keys generate: %q %v", out, err)
	}
	return priv, pub, m[1]
}

// TestSignedEvidenceCLI: a gate given --verifier-keys takes a report or a
// recheck from publish, gate register, recheck and gate recheck only
// with a signature by a trusted verifier key, made by verify --sign-key
// and stored beside the report, or by --sign-key where it is registered.
// Without one (or with one by another key) each fails with the gate's
// EVIDENCE_UNSIGNED, exit 4, and the gate records no report.
func TestSignedEvidenceCLI(t *testing.T) {
	ctx := context.Background()
	dir, s := tempFileStore(t)
	gen1 := stagetest.Synth(t, s, 400, 2, 1)
	gen2 := stagetest.Synth(t, s, 400, 2, 2)
	gen3 := stagetest.Synth(t, s, 400, 2, 3)
	keys := t.TempDir()
	priv, pub, id := keyPair(t, keys, "verifier")
	otherPriv, _, _ := keyPair(t, keys, "other")
	// Never overwritten.
	_, err := cli(t, "keys", "generate", "--private", priv, "--public", filepath.Join(keys, "new.pub"))
	wantExit(t, err, errcode.Usage, errcode.ExitUsage)

	node, g := startSigningGate(t, pub)
	gate := []string{"--store", dir, "--gate", node.URL()}
	out, err := cli(t, "gate", "status", "--gate", node.URL())
	if err != nil || !strings.Contains(out, "verifier keys: "+id) {
		t.Fatalf("gate status: %q %v; want it to show %s", out, err, id)
	}
	noReport := func(root manifest.Digest, what string) {
		t.Helper()
		r, err := g.Release(ctx, root)
		if errcode.Of(err) == errcode.UnknownRelease {
			return
		}
		if err != nil || !r.Report.IsZero() || r.State != raftgate.ReleaseStaged {
			t.Fatalf("%s: release %+v %v, want none or STAGED without a report", what, r, err)
		}
	}

	// publish verifying itself, without a key: the gate's code, clearly.
	_, err = cli(t, append([]string{"publish", "-q", "--alias", "main", "--root", gen1.Root.String()}, gate...)...)
	wantExit(t, err, errcode.EvidenceUnsigned, errcode.ExitRejected)
	if !strings.Contains(err.Error(), "no verifier signature") || !strings.Contains(err.Error(), id) {
		t.Fatalf("publish without a signature: %v; want it to say a signature by %s is needed", err, id)
	}
	noReport(gen1.Root, "publish without a signature")

	// verify --sign-key stores the signature beside the report; publish
	// --report, holding no key, sends it.
	_, err = cli(t, "verify", "--store", dir, "--root", gen1.Root.String(), "--sign-key", filepath.Join(keys, "missing.key"))
	wantExit(t, err, errcode.Usage, errcode.ExitUsage)
	out, err = cli(t, "verify", "--store", dir, "--root", gen1.Root.String(), "--sign-key", priv)
	m := reportLine.FindStringSubmatch(out)
	if err != nil || m == nil {
		t.Fatalf("verify --sign-key: %q %v", out, err)
	}
	// Each command the gate took signed evidence from names the key
	// that signed it, as gate register does.
	signedBy := func(what, out string) {
		t.Helper()
		if !strings.Contains(out, "verified by "+id) {
			t.Fatalf("%s: %q; want it to say verified by %s", what, out, id)
		}
	}
	out, err = cli(t, append([]string{"publish", "-q", "--alias", "main", "--root", gen1.Root.String(), "--report", m[1]}, gate...)...)
	if err != nil || !strings.Contains(out, "generation 1") {
		t.Fatalf("publish --report of a signed report: %q %v", out, err)
	}
	signedBy("publish --report of a signed report", out)
	// --json says so too, beside the outcome.
	out, err = cli(t, append([]string{"publish", "-q", "--json", "--alias", "other", "--root", gen1.Root.String(), "--report", m[1]}, gate...)...)
	var js struct {
		Published  bool     `json:"published"`
		VerifiedBy []string `json:"verifiedBy"`
	}
	if err != nil || json.Unmarshal([]byte(out), &js) != nil || !js.Published || len(js.VerifiedBy) != 1 || js.VerifiedBy[0] != id {
		t.Fatalf("publish --json of a signed report: %q %v; want published, verifiedBy [%s]", out, err, id)
	}

	// publish --sign-key signs at registration.
	out, err = cli(t, append([]string{"publish", "-q", "--alias", "main", "--root", gen2.Root.String(), "--expect-generation", "1", "--sign-key", priv}, gate...)...)
	if err != nil || !strings.Contains(out, "generation 2") {
		t.Fatalf("publish --sign-key: %q %v", out, err)
	}
	signedBy("publish --sign-key", out)

	// A report signed by a key the gate does not trust.
	out, err = cli(t, "verify", "--store", dir, "--root", gen3.Root.String(), "--sign-key", otherPriv)
	m3 := reportLine.FindStringSubmatch(out)
	if err != nil || m3 == nil {
		t.Fatalf("verify gen3: %q %v", out, err)
	}
	_, err = cli(t, append([]string{"gate", "register", "--report", m3[1]}, gate...)...)
	wantExit(t, err, errcode.EvidenceUnsigned, errcode.ExitRejected)
	noReport(gen3.Root, "gate register of a report signed by another key")
	if out, err := cli(t, append([]string{"gate", "register", "--report", m3[1], "--sign-key", priv}, gate...)...); err != nil || !strings.Contains(out, "VERIFIED") {
		t.Fatalf("gate register --sign-key: %q %v", out, err)
	}

	// A fence advance closes the alias's permit; rechecks need signing
	// too.
	tomb := putFenceLog(t, s, `{"schema":"training.tombstones.v1","entries":[{"seq":4,"sampleId":"gone"}]}`)
	if out, err := cli(t, append([]string{"gate", "fence", "advance", "--tombstones", tomb.String()}, gate...)...); err != nil {
		t.Fatalf("fence advance: %q %v", out, err)
	}
	recheck := append([]string{"recheck", "-q", "--tombstones", tomb.String()}, gate...)
	out, err = cli(t, append(recheck, "--root", gen2.Root.String())...)
	wantExit(t, err, errcode.EvidenceUnsigned, errcode.ExitRejected)
	if r, err := g.Release(ctx, gen2.Root); err != nil || r.TombstoneWatermark != 0 {
		t.Fatalf("an unsigned recheck was recorded: %+v %v", r, err)
	}
	// Its report is stored: gate recheck of it, unsigned, then signed.
	mr := regexp.MustCompile(`report (sha256:[0-9a-f]{64})`).FindStringSubmatch(out)
	if mr == nil {
		t.Fatalf("recheck output names no report: %q", out)
	}
	_, err = cli(t, append([]string{"gate", "recheck", gen2.Root.String(), "--kind", "tombstone", "--report", mr[1]}, gate...)...)
	wantExit(t, err, errcode.EvidenceUnsigned, errcode.ExitRejected)
	out, err = cli(t, append([]string{"gate", "recheck", gen2.Root.String(), "--kind", "tombstone", "--report", mr[1], "--sign-key", priv}, gate...)...)
	if err != nil || !strings.Contains(out, "tombstone 4") {
		t.Fatalf("gate recheck --sign-key: %q %v", out, err)
	}
	signedBy("gate recheck --sign-key", out)
	// recheck --sign-key of gen1 (in the alias's rollback window).
	out, err = cli(t, append(recheck, "--root", gen1.Root.String(), "--sign-key", priv)...)
	if err != nil || !strings.Contains(out, "renewed") {
		t.Fatalf("recheck --sign-key: %q %v", out, err)
	}
	signedBy("recheck --sign-key", out)
	for _, root := range []manifest.Digest{gen1.Root, gen2.Root} {
		if r, err := g.Release(ctx, root); err != nil || r.TombstoneWatermark != 4 {
			t.Fatalf("release %s after signed rechecks: %+v %v", root, r, err)
		}
	}

	// A gate given a keys file that lists no key does not start.
	bad := filepath.Join(keys, "bad")
	os.WriteFile(bad, []byte("# nothing yet\nssh-ed25519 AAAA\n"), 0o644)
	_, err = cli(t, "gate", "serve", "--data", t.TempDir(), "--bootstrap", "--verifier-keys", bad)
	wantExit(t, err, errcode.Usage, errcode.ExitUsage)
}

// olderGate serves a real gate's API as a member on a build before
// evidence signatures does (7bc675e, checked by hand): a command carrying
// "signatures" is refused, BAD_DOCUMENT, HTTP 400, changing nothing;
// everything else reaches the gate. It counts those refusals.
func olderGate(t *testing.T, gateURL string) (string, *atomic.Int64) {
	t.Helper()
	target, err := url.Parse(gateURL)
	if err != nil {
		t.Fatal(err)
	}
	refused := new(atomic.Int64)
	proxy := httputil.NewSingleHostReverseProxy(target)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/v1/commands" {
			b, err := io.ReadAll(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			if bytes.Contains(b, []byte(`"signatures"`)) {
				refused.Add(1)
				var eb raftgate.ErrorBody
				eb.Error.Code, eb.Error.Message = errcode.BadDocument, "BAD_DOCUMENT: command: $.signatures: unknown field"
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusBadRequest)
				json.NewEncoder(w).Encode(eb)
				return
			}
			r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(b)), int64(len(b))
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, refused
}

// TestSignedEvidenceOlderGate: verifiers that sign do not break a gate
// on an older build, which refuses a command carrying signatures: publish
// --report of a signed report, recheck --sign-key and gate register of
// the signed report send none to it (its status lists no verifier keys),
// and each succeeds.
func TestSignedEvidenceOlderGate(t *testing.T) {
	ctx := context.Background()
	dir, s := tempFileStore(t)
	gen1 := stagetest.Synth(t, s, 400, 2, 1)
	priv, _, _ := keyPair(t, t.TempDir(), "verifier")
	node, g := startLeader(t)
	u, refused := olderGate(t, node.URL())
	gate := []string{"--store", dir, "--gate", u}

	out, err := cli(t, "verify", "--store", dir, "--root", gen1.Root.String(), "--sign-key", priv)
	m := reportLine.FindStringSubmatch(out)
	if err != nil || m == nil {
		t.Fatalf("verify --sign-key: %q %v", out, err)
	}
	// A gate that checks no signature names no key.
	if out, err := cli(t, append([]string{"publish", "-q", "--alias", "main", "--root", gen1.Root.String(), "--report", m[1]}, gate...)...); err != nil || !strings.Contains(out, "generation 1") || strings.Contains(out, "verified by") {
		t.Fatalf("publish --report of a signed report to an older gate: %q %v", out, err)
	}
	if out, err := cli(t, append([]string{"gate", "register", "--report", m[1], "--sign-key", priv}, gate...)...); err != nil || !strings.Contains(out, "report "+m[1]) {
		t.Fatalf("gate register --sign-key to an older gate: %q %v", out, err)
	}
	tomb := putFenceLog(t, s, `{"schema":"training.tombstones.v1","entries":[{"seq":4,"sampleId":"gone"}]}`)
	if out, err := cli(t, append([]string{"gate", "fence", "advance", "--tombstones", tomb.String()}, gate...)...); err != nil {
		t.Fatalf("fence advance: %q %v", out, err)
	}
	if out, err := cli(t, append([]string{"recheck", "-q", "--tombstones", tomb.String(), "--root", gen1.Root.String(), "--sign-key", priv}, gate...)...); err != nil || !strings.Contains(out, "renewed") {
		t.Fatalf("recheck --sign-key to an older gate: %q %v", out, err)
	}
	if r, err := g.Release(ctx, gen1.Root); err != nil || r.TombstoneWatermark != 4 {
		t.Fatalf("release after the recheck: %+v %v", r, err)
	}
	if k := refused.Load(); k != 0 {
		t.Fatalf("the older gate was sent %d commands carrying signatures", k)
	}
}

// TestTaskAggregateSignKey: task aggregate --sign-key signs the report it
// makes, as verify --sign-key does, so a report made on a cluster engine
// is registered at a gate that trusts the key with no key at hand; a key
// file that does not load (missing, or not a key) is USAGE before any
// work (no report recorded, the job's files kept). map and reduce take
// no key: one given is USAGE, $SHARDPROOF_SIGN_KEY (inherited) is
// ignored. verify --emit prints the aggregate line with the key.
func TestTaskAggregateSignKey(t *testing.T) {
	r := newRelease(t)
	j := planJob(t, r, 2, 2)
	ref := coordinator.PlanRef{Store: r.dir, Plan: j.PlanDigest}.String()
	keys := t.TempDir()
	priv, pub, id := keyPair(t, keys, "verifier")
	missing := filepath.Join(keys, "missing.key")
	notAKey := filepath.Join(keys, "not.key")
	if err := os.WriteFile(notAKey, []byte("ed25519-private:not base64\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	if res := runCLI(t, cliEnv(), "task", "map", "--plan", ref, "--index", "0", "--sign-key", priv); res.status != errcode.ExitUsage || !strings.Contains(res.stderr, "USAGE") {
		t.Fatalf("task map --sign-key: exit %d: %s; want USAGE", res.status, res.stderr)
	}
	for _, kind := range []string{"map", "reduce"} {
		for i := range 2 {
			if res := runCLI(t, cliEnv("SHARDPROOF_SIGN_KEY="+missing), "task", kind, "--plan", ref, "--index", fmt.Sprint(i)); res.status != 0 {
				t.Fatalf("%s task %d with $SHARDPROOF_SIGN_KEY set: exit %d: %s", kind, i, res.status, res.stderr)
			}
		}
	}
	for _, key := range []string{missing, notAKey} {
		res := runCLI(t, cliEnv(), "task", "aggregate", "--plan", ref, "--sign-key", key)
		if res.status != errcode.ExitUsage || !strings.Contains(res.stderr, "USAGE") || strings.Contains(res.stdout, "report ") {
			t.Fatalf("task aggregate --sign-key %s: exit %d: %s%s; want USAGE and no report", filepath.Base(key), res.status, res.stdout, res.stderr)
		}
		if out, err := j.Finished(t.Context()); err != nil || out != nil {
			t.Fatalf("after task aggregate --sign-key %s: a report is recorded (%v)", filepath.Base(key), err)
		}
		if page, err := r.store.List(t.Context(), "jobs/"+j.PlanDigest.Hex()+"/", "", 1); err != nil || len(page.Objects) == 0 {
			t.Fatalf("task aggregate --sign-key %s removed the job's files (%v)", filepath.Base(key), err)
		}
	}

	node, _ := startSigningGate(t, pub)
	res := runCLI(t, cliEnv(), "task", "aggregate", "--plan", ref, "--sign-key", priv)
	if res.status != 0 || !strings.Contains(res.stdout, "verdict VERIFIED") || !strings.Contains(res.stderr, "signed by "+id) {
		t.Fatalf("task aggregate --sign-key: exit %d: %s%s", res.status, res.stdout, res.stderr)
	}
	d := strings.TrimPrefix(strings.Split(strings.TrimSpace(res.stdout), "\n")[1], "report ")
	// The gate trusts the public key alone, and this register sends what
	// the store holds for the report's evidence, signing nothing.
	if out, err := cli(t, "gate", "register", "--report", d, "--store", r.dir, "--gate", node.URL()); err != nil || !strings.Contains(out, "VERIFIED") {
		t.Fatalf("gate register of the aggregate's report: %q %v", out, err)
	}

	emit := runCLI(t, cliEnv(), "verify", "--executor", "kubernetes", "--emit", t.TempDir(), "--image", "x", "--store", r.dir, "--root", r.res.Root.String(), "--sign-key", priv)
	lines := strings.Split(strings.TrimSpace(emit.stdout), "\n")
	if last := lines[len(lines)-1]; emit.status != 0 || !strings.HasPrefix(last, "shardproof task aggregate ") || !strings.HasSuffix(last, " --sign-key "+shellQuote(priv)) {
		t.Fatalf("verify --emit --sign-key: exit %d, last line %q: %s; want the aggregate line with the key", emit.status, last, emit.stderr)
	}
}

// TestGateServeReloadsVerifierKeysOnSIGHUP: a `gate serve` process sent
// SIGHUP reads its --verifier-keys file again. With the verifier's key
// replaced by another in the file, the report signed by the old key
// (its signature stored beside it, which gate register sends) is refused
// EVIDENCE_UNSIGNED, exit 4, and signed by the new key it is registered;
// gate status lists the new key. A file the reload refuses (no key on a
// line) keeps the keys in effect, and the gate logs why with the code.
// gate register names the key that vouched, as the gate's log does.
// A gate started without --verifier-keys keeps serving on SIGHUP, logs
// that a reload gives it no keys, and still takes unsigned reports.
func TestGateServeReloadsVerifierKeysOnSIGHUP(t *testing.T) {
	if testing.Short() {
		t.Skip("runs gate server processes")
	}
	keys := t.TempDir()
	oldPriv, oldPub, oldID := keyPair(t, keys, "old")
	newPriv, newPub, newID := keyPair(t, keys, "new")
	file := filepath.Join(keys, "verifiers")
	copyFile := func(from string) {
		t.Helper()
		b, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(file, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	copyFile(oldPub)
	storeDir, _, report, _ := storeRelease(t)
	g := startGateProcess(t, t.TempDir(), "--bootstrap", "--verifier-keys", file)
	register := func(extra ...string) gateCLI {
		return runGateCLI(t, append([]string{"gate", "register", "--store", storeDir, "--gate", g.url, "--report", report.String()}, extra...)...)
	}
	// waitLog waits for the gate to log msg after the first from bytes
	// of its stderr, and returns what it logged since.
	waitLog := func(from int, msg string) string {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			if l := g.stderr.String()[from:]; strings.Contains(l, msg) {
				return l
			}
			if time.Now().After(deadline) {
				t.Fatalf("the gate did not log %q after SIGHUP:\n%s", msg, g.stderr.String())
			}
		}
	}
	hup := func(msg string) string {
		t.Helper()
		from := len(g.stderr.String())
		if err := g.proc.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		return waitLog(from, msg)
	}

	register("--sign-key", oldPriv).expect(t, 0, "")

	copyFile(newPub)
	l := hup("verifier keys reloaded")
	if !strings.Contains(l, "added="+newID) || !strings.Contains(l, "removed="+oldID) {
		t.Fatalf("the reload's log line does not name the keys added and removed:\n%s", l)
	}
	if r := runGateCLI(t, "gate", "status", "--gate", g.url).expect(t, 0, ""); !strings.Contains(r.stdout, "verifier keys: "+newID+"\n") {
		t.Fatalf("gate status after the reload: %s; want verifier keys: %s", r.stdout, newID)
	}
	r := register().expect(t, errcode.ExitRejected, errcode.EvidenceUnsigned)
	if !strings.Contains(r.stderr, oldID) || !strings.Contains(r.stderr, "does not trust") {
		t.Fatalf("register of the report signed by the revoked key: %s; want it to name %s as not trusted", r.stderr, oldID)
	}
	// The answer and the gate's log name the key that vouched.
	from := len(g.stderr.String())
	if r := register("--sign-key", newPriv).expect(t, 0, ""); !strings.Contains(r.stdout, "verified by "+newID+"\n") {
		t.Fatalf("gate register signed by the new key: %s; want verified by %s", r.stdout, newID)
	}
	if l := waitLog(from, "trusted verifier keys signed its evidence"); !strings.Contains(l, "type=register") || !strings.Contains(l, "report="+report.String()) || !strings.Contains(l, "verifiedBy="+newID) {
		t.Fatalf("the gate's log of the register: %s; want the report and verifiedBy=%s", l, newID)
	}

	// A file with a line that is no key: the keys in effect stay.
	if err := os.WriteFile(file, []byte("ssh-ed25519 AAAAC3Nza\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if l := hup("verifier keys not reloaded"); !strings.Contains(l, "code=USAGE") || !strings.Contains(l, "line 1") {
		t.Fatalf("the refused reload's log line: %s; want code=USAGE and the line", l)
	}
	if r := runGateCLI(t, "gate", "status", "--gate", g.url).expect(t, 0, ""); !strings.Contains(r.stdout, "verifier keys: "+newID+"\n") {
		t.Fatalf("gate status after a refused reload: %s; want verifier keys: %s kept", r.stdout, newID)
	}
	if r := runGateCLI(t, "gate", "register", "--json", "--store", storeDir, "--gate", g.url, "--report", report.String()).expect(t, 0, ""); !strings.Contains(r.stdout, `"verifiedBy": [
    "`+newID+`"
  ]`) {
		t.Fatalf("gate register --json with the stored signatures: %s; want verifiedBy [%s] alone", r.stdout, newID)
	}
	g.stop()

	// Without --verifier-keys: SIGHUP neither ends the gate nor gives
	// it keys.
	plainDir, _, plainReport, _ := storeRelease(t)
	p := startGateProcess(t, t.TempDir(), "--bootstrap")
	g = p
	if l := hup("verifier keys not reloaded"); !strings.Contains(l, "code=USAGE") || !strings.Contains(l, "requires no verifier signatures") {
		t.Fatalf("SIGHUP to a gate without keys: %s", l)
	}
	if r := runGateCLI(t, "gate", "register", "--store", plainDir, "--gate", p.url, "--report", plainReport.String()).expect(t, 0, ""); strings.Contains(r.stdout, "verified by") {
		t.Fatalf("gate register at a gate without keys: %s; want no signer named", r.stdout)
	}
	p.stop()
}

// TestSignersRecordedCLI: on a cluster of three whose members trust a
// verifier key, a report gate register takes signed and a recheck
// --sign-key records are kept in the gate's state with the key that
// signed them: gate release prints "verified by: KEYID" on the report's
// and the recheck's lines, and gate history on the generation's (--json:
// verifiedBy). They are read the same from another leader, after a
// leadership transfer, and from a gate serve --restore of a gate backup
// (a process without verifier keys). A gate without keys takes the same
// signed report and records no signer.
func TestSignersRecordedCLI(t *testing.T) {
	if testing.Short() {
		t.Skip("runs gate servers")
	}
	dir, s := tempFileStore(t)
	gen1 := stagetest.Synth(t, s, 400, 2, 1)
	priv, pub, id := keyPair(t, t.TempDir(), "verifier")
	trusted, err := evidence.LoadTrusted(pub)
	if err != nil {
		t.Fatal(err)
	}
	c := raftgate.MakeCluster(t, 3, func(cfg *raftgate.Config) { cfg.VerifierKeys = trusted })
	gate := []string{"--store", dir, "--gate", c.URLs()}
	root := gen1.Root.String()

	out, err := cli(t, "verify", "--store", dir, "--root", root, "--sign-key", priv)
	m := reportLine.FindStringSubmatch(out)
	if err != nil || m == nil {
		t.Fatalf("verify --sign-key: %q %v", out, err)
	}
	report := m[1]
	if out, err := cli(t, append([]string{"gate", "register", "--report", report}, gate...)...); err != nil || !strings.Contains(out, "verified by "+id) {
		t.Fatalf("gate register of the signed report: %q %v", out, err)
	}
	if out, err := cli(t, "gate", "publish", "main", root, "--expect", "0", "--gate", c.URLs()); err != nil {
		t.Fatalf("gate publish: %q %v", out, err)
	}
	tomb := putFenceLog(t, s, `{"schema":"training.tombstones.v1","entries":[{"seq":4,"sampleId":"gone"}]}`)
	if out, err := cli(t, append([]string{"gate", "fence", "advance", "--tombstones", tomb.String()}, gate...)...); err != nil {
		t.Fatalf("fence advance: %q %v", out, err)
	}
	if out, err := cli(t, append([]string{"recheck", "-q", "--tombstones", tomb.String(), "--root", root, "--sign-key", priv}, gate...)...); err != nil || !strings.Contains(out, "renewed") {
		t.Fatalf("recheck --sign-key: %q %v", out, err)
	}

	reportSigned := regexp.MustCompile(`(?m)^report ` + report + ` against snapshot sha256:[0-9a-f]{64}: tombstone 4 \(0 hits\), benchmark 0 \(0 hits\), verified by: ` + id + `$`)
	recheckSigned := regexp.MustCompile(`(?m)^recheck tombstone 4: 0 hits, report sha256:[0-9a-f]{64}, \S+Z, verified by: ` + id + `$`)
	historySigned := regexp.MustCompile(`(?m)^\*    1 ` + root + ` publish  \S+Z, verified by: ` + id + `$`)
	// shows checks what gate release and gate history print at url.
	shows := func(where, url string) {
		t.Helper()
		out, err := cli(t, "gate", "release", root, "--gate", url)
		if err != nil || !reportSigned.MatchString(out) || !recheckSigned.MatchString(out) {
			t.Fatalf("gate release at %s: %q %v; want the report's and the recheck's signer %s", where, out, err, id)
		}
		out, err = cli(t, "gate", "release", root, "--json", "--gate", url)
		var rel raftgate.Release
		if err != nil || json.Unmarshal([]byte(out), &rel) != nil || !slices.Equal(rel.VerifiedBy, []string{id}) ||
			len(rel.Rechecks) != 1 || !slices.Equal(rel.Rechecks[0].VerifiedBy, []string{id}) {
			t.Fatalf("gate release --json at %s: %q %v; want verifiedBy [%s] on the release and its recheck", where, out, err, id)
		}
		out, err = cli(t, "gate", "history", "main", "--gate", url)
		if err != nil || !historySigned.MatchString(out) {
			t.Fatalf("gate history at %s: %q %v; want generation 1 verified by %s", where, out, err, id)
		}
		out, err = cli(t, "gate", "history", "main", "--json", "--gate", url)
		var h struct {
			Generation uint64              `json:"generation"`
			VerifiedBy map[string][]string `json:"verifiedBy"`
		}
		if err != nil || json.Unmarshal([]byte(out), &h) != nil || h.Generation != 1 || len(h.VerifiedBy) != 1 || !slices.Equal(h.VerifiedBy[root], []string{id}) {
			t.Fatalf("gate history --json at %s: %q %v; want verifiedBy {%s: [%s]}", where, out, err, root, id)
		}
	}
	shows("the cluster", c.URLs())

	// Another leader.
	old := c.Leader(10 * time.Second)
	for deadline := time.Now().Add(30 * time.Second); c.Leader(10*time.Second) == old; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s still leads", old.ID())
		}
		old.Raft().LeadershipTransfer()
	}
	shows("the new leader", c.Leader(10*time.Second).URL())

	// A backup, and a gate founded on it.
	file := filepath.Join(t.TempDir(), "gate.backup")
	if out, err := cli(t, "gate", "backup", file, "--gate", c.URLs()); err != nil {
		t.Fatalf("gate backup: %q %v", out, err)
	}
	c.Shutdown()
	restored, _ := startGateServe(t, filepath.Join(t.TempDir(), "new"), "--bootstrap", "--restore", file)
	shows("the gate restored from the backup", restored)

	// A gate without keys records none for the same signed report.
	node, _ := startLeader(t)
	plain := []string{"--store", dir, "--gate", node.URL()}
	if out, err := cli(t, append([]string{"gate", "register", "--report", report}, plain...)...); err != nil || strings.Contains(out, "verified by") {
		t.Fatalf("gate register at a gate without keys: %q %v", out, err)
	}
	out, err = cli(t, "gate", "release", root, "--gate", node.URL())
	if err != nil || !strings.Contains(out, "report "+report) || strings.Contains(out, "verified by") {
		t.Fatalf("gate release at a gate without keys: %q %v; want the report and no signer", out, err)
	}
	out, err = cli(t, "gate", "release", root, "--json", "--gate", node.URL())
	if err != nil || strings.Contains(out, "verifiedBy") {
		t.Fatalf("gate release --json at a gate without keys: %q %v; want no verifiedBy", out, err)
	}
}
