package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/shardproof/shardproof/coordinator"
	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/internal/procid"
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/objstore"
	"github.com/shardproof/shardproof/objstore/file"
	"github.com/shardproof/shardproof/objstore/s3/s3test"
)

// storeRun runs `shardproof args…` in-process with stdin and returns stdout.
func storeRun(t *testing.T, stdin io.Reader, args ...string) (string, error) {
	t.Helper()
	storeFlags.version, storeFlags.overwrite = "", false
	pruneFlags.olderThan, pruneFlags.dryRun = 24*time.Hour, false
	out, _, err := runInProcess(t, stdin, args...)
	return string(out), err
}

func TestStoreCLI(t *testing.T) {
	dir := t.TempDir()
	url := "file://" + dir
	src := filepath.Join(t.TempDir(), "in.bin")
	payload := []byte("binary\x00\xff payload\n")
	os.WriteFile(src, payload, 0o644)

	out, err := storeRun(t, nil, "store", "put", "--store", url, "docs/a", src)
	if err != nil || out != "v1\n" {
		t.Fatalf("put: %q, %v", out, err)
	}
	// Conditional create is the default: a second put is refused, exit 4.
	_, err = storeRun(t, strings.NewReader("other"), "store", "put", "--store", url, "docs/a", "-")
	if errcode.Of(err) != errcode.PreconditionFailed || exitStatus(err) != errcode.ExitRejected {
		t.Fatalf("second put: code %s exit %d (%v), want PRECONDITION_FAILED / 4", errcode.Of(err), exitStatus(err), err)
	}
	out, err = storeRun(t, strings.NewReader("second"), "store", "put", "--store", url, "--overwrite", "docs/a")
	if err != nil || out != "v2\n" {
		t.Fatalf("put --overwrite: %q, %v", out, err)
	}
	out, err = storeRun(t, nil, "store", "get", "--store", url, "docs/a", "--version", "v1")
	if err != nil || out != string(payload) {
		t.Fatalf("get --version v1: %q, %v", out, err)
	}
	out, err = storeRun(t, nil, "store", "get", "--store", url, "docs/a")
	if err != nil || out != "second" {
		t.Fatalf("get latest: %q, %v", out, err)
	}
	// More keys than one internal page, written directly in the file
	// store's documented layout (a Put each would spend seconds in fsync).
	for i := range 1203 {
		kdir := filepath.Join(dir, fmt.Sprintf("many/%04d", i))
		os.MkdirAll(kdir, 0o755)
		if err := os.WriteFile(filepath.Join(kdir, "@00000000000000000001"), []byte("x"), 0o444); err != nil {
			t.Fatal(err)
		}
	}
	out, err = storeRun(t, nil, "store", "ls", "--store", url, "docs/")
	if err != nil || out != "docs/a\tv2\t6\n" {
		t.Fatalf("ls docs/: %q, %v", out, err)
	}
	out, err = storeRun(t, nil, "store", "ls", "--store", url)
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if err != nil || len(lines) != 1204 || lines[0] != "docs/a\tv2\t6" || lines[1203] != "many/1202\tv1\t1" {
		t.Fatalf("ls: %d lines, first %q, %v", len(lines), lines[0], err)
	}
}

// store prune-jobs deletes the scratch of jobs whose newest object is
// older than --older-than, keeps the rest and keys that are not a job's,
// and with --dry-run deletes nothing.
func TestStorePruneJobsCLI(t *testing.T) {
	r := newRelease(t)
	var plans []string
	for range 2 {
		rep := cliReport(t, runCLI(t, cliEnv(), "verify", "--store", r.dir, "--root", r.res.Root.String(), "--json", "--keep-job"))
		plans = append(plans, rep.Execution.Plan.Hex())
	}
	old, fresh := plans[0], plans[1]
	past := time.Now().Add(-48 * time.Hour)
	err := filepath.WalkDir(filepath.Join(r.dir, "jobs", old), func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Chtimes(p, past, past)
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.store.Put(t.Context(), "jobs/not-a-plan/x", strings.NewReader("x"), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	keys := func(plan string) int {
		page, err := r.store.List(t.Context(), "jobs/"+plan+"/", "", 1000)
		if err != nil {
			t.Fatal(err)
		}
		return len(page.Objects)
	}
	nOld, nFresh := keys(old), keys(fresh)
	if nOld == 0 || nFresh == 0 {
		t.Fatalf("--keep-job kept %d and %d objects", nOld, nFresh)
	}
	out, err := storeRun(t, nil, "store", "prune-jobs", "--store", r.dir, "--dry-run")
	if err != nil || !strings.Contains(out, "would delete\tjobs/"+old+"/\t"+fmt.Sprint(nOld)+" objects") ||
		!strings.Contains(out, "kept\tjobs/"+fresh+"/") || strings.Contains(out, "not-a-plan") {
		t.Fatalf("--dry-run: %q, %v", out, err)
	}
	if keys(old) != nOld {
		t.Fatal("--dry-run deleted")
	}
	out, err = storeRun(t, nil, "store", "prune-jobs", "--store", r.dir)
	if err != nil || !strings.Contains(out, "deleted\tjobs/"+old+"/") || !strings.Contains(out, "kept\tjobs/"+fresh+"/") {
		t.Fatalf("prune-jobs: %q, %v", out, err)
	}
	if keys(old) != 0 || keys(fresh) != nFresh || keys("not-a-plan") != 1 {
		t.Fatalf("after prune-jobs: %d, %d and %d objects", keys(old), keys(fresh), keys("not-a-plan"))
	}
	if _, err := storeRun(t, nil, "store", "prune-jobs", "--store", r.dir, "--older-than", "0s"); err != nil {
		t.Fatal(err)
	}
	if jobs, err := coordinator.ListJobs(t.Context(), r.store); err != nil || len(jobs) != 0 || keys("not-a-plan") != 1 || keys("clock") != 0 {
		t.Fatalf("--older-than 0s left %+v (%v), %d clock probes", jobs, err, keys("clock"))
	}
	_, err = storeRun(t, nil, "store", "prune-jobs", "--store", r.dir, "--older-than=-1h")
	if errcode.Of(err) != errcode.Usage {
		t.Fatalf("negative --older-than: %v", err)
	}
}

// store prune-jobs that deletes no job says so, where it printed
// nothing when the store held no job, which looked the same as a prune
// of the wrong store: a last line counts the jobs kept, also on a dry
// run; a prune that deletes one prints no such line.
func TestStorePruneJobsSaysWhenNothingToPrune(t *testing.T) {
	dir := t.TempDir()
	s, err := file.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	out, err := storeRun(t, nil, "store", "prune-jobs", "--store", dir)
	if want := "nothing to prune: 0 jobs kept, none abandoned for more than 24h0m0s\n"; err != nil || out != want {
		t.Fatalf("prune-jobs of a store without jobs: %q, %v; want %q", out, err, want)
	}
	fresh := manifest.Sum([]byte("a fresh job")).Hex()
	if _, err := s.Put(t.Context(), "jobs/"+fresh+"/map/0/commit.json", strings.NewReader("{}"), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"--older-than", "1h"}, {"--older-than", "1h", "--dry-run"}} {
		out, err = storeRun(t, nil, append([]string{"store", "prune-jobs", "--store", dir}, args...)...)
		lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
		if err != nil || len(lines) != 2 || !strings.HasPrefix(lines[0], "kept\tjobs/"+fresh+"/\t1 objects\t2 bytes\t") ||
			lines[1] != "nothing to prune: 1 job kept, none abandoned for more than 1h0m0s" {
			t.Fatalf("prune-jobs %v keeping one job: %q, %v", args, out, err)
		}
	}
	old := manifest.Sum([]byte("an abandoned job")).Hex()
	if _, err := s.Put(t.Context(), "jobs/"+old+"/map/0/commit.json", strings.NewReader("{}"), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	past := time.Now().Add(-48 * time.Hour)
	err = filepath.WalkDir(filepath.Join(dir, "jobs", old), func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Chtimes(p, past, past)
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args   []string
		action string
	}{{[]string{"--dry-run"}, "would delete"}, {nil, "deleted"}} {
		args := c.args
		out, err = storeRun(t, nil, append([]string{"store", "prune-jobs", "--store", dir}, args...)...)
		if err != nil || !strings.Contains(out, c.action+"\tjobs/"+old+"/") || !strings.Contains(out, "kept\tjobs/"+fresh+"/") || strings.Contains(out, "nothing to prune") {
			t.Fatalf("prune-jobs %v of an abandoned job: %q, %v", args, out, err)
		}
	}
}

func TestStoreCLIErrors(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		code errcode.Code
		exit int
	}{
		{[]string{"store", "get", "--store", dir, "absent"}, errcode.NotFound, errcode.ExitError},
		{[]string{"store", "get", "--store", dir, "absent", "--version", "v7"}, errcode.NotFound, errcode.ExitError},
		{[]string{"store", "put", "--store", dir, "../escape", "-"}, errcode.BadKey, errcode.ExitUsage},
		{[]string{"store", "get", "--store", dir}, errcode.Usage, errcode.ExitUsage},
		{[]string{"store", "ls", "--store", dir, "a", "b"}, errcode.Usage, errcode.ExitUsage},
		{[]string{"store", "put", "--store", dir, "k", filepath.Join(dir, "no-such-file")}, errcode.Usage, errcode.ExitUsage},
		{[]string{"store", "ls", "--store", "/proc/shardproof-no"}, errcode.StoreUnavailable, errcode.ExitError},
		{[]string{"store", "ls", "--store", "nope://x"}, errcode.Usage, errcode.ExitUsage},
	} {
		_, err := storeRun(t, strings.NewReader("x"), tc.args...)
		if errcode.Of(err) != tc.code || exitStatus(err) != tc.exit {
			t.Errorf("%v: code %s exit %d (%v), want %s / %d", tc.args, errcode.Of(err), exitStatus(err), err, tc.code, tc.exit)
		}
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(dir), "escape")); err == nil {
		t.Fatal("a bad key wrote outside the store")
	}
}

// The same commands against a real S3 server (versitygw on loopback).
func TestStoreCLIS3(t *testing.T) {
	url := s3test.Start(t) + "&multipart_threshold=5242880"
	big := bytes.Repeat([]byte("0123456789abcdef"), 400000) // 6.4 MB: multipart
	src := filepath.Join(t.TempDir(), "big.bin")
	os.WriteFile(src, big, 0o644)
	v1, err := storeRun(t, nil, "store", "put", "--store", url, "shards/big", src)
	if err != nil || v1 == "" {
		t.Fatalf("put: %q, %v", v1, err)
	}
	// The same bytes again are the same object; other bytes are refused.
	again, err := storeRun(t, nil, "store", "put", "--store", url, "shards/big", src)
	if err != nil || again != v1 {
		t.Fatalf("second put of the same file: %q, %v; want %q", again, err, v1)
	}
	other := filepath.Join(t.TempDir(), "other.bin")
	os.WriteFile(other, append(big[:len(big)-1:len(big)-1], '!'), 0o644)
	_, err = storeRun(t, nil, "store", "put", "--store", url, "shards/big", other)
	if exitStatus(err) != errcode.ExitRejected {
		t.Fatalf("put of other bytes: %v", err)
	}
	if _, err := storeRun(t, strings.NewReader("small"), "store", "put", "--store", url, "--overwrite", "shards/big"); err != nil {
		t.Fatal(err)
	}
	out, err := storeRun(t, nil, "store", "get", "--store", url, "shards/big", "--version", strings.TrimSpace(v1))
	if err != nil || out != string(big) {
		t.Fatalf("get first version: %d bytes, %v", len(out), err)
	}
	out, err = storeRun(t, nil, "store", "ls", "--store", url, "shards/")
	if err != nil || !strings.HasPrefix(out, "shards/big\t") || !strings.HasSuffix(out, "\t5\n") {
		t.Fatalf("ls: %q, %v", out, err)
	}
}

// A store URL naming a bucket that does not exist fails every command
// that opens it with NO_SUCH_BUCKET, exit 2, naming the bucket, so that
// a script or an engine does not run it again; it was STORE_UNAVAILABLE,
// exit 3. stage, which creates a file store's directory, creates no
// bucket.
func TestStoreS3NoSuchBucket(t *testing.T) {
	pu, _ := url.Parse(s3test.Start(t))
	pu.Host = "sp-no-such-bucket"
	root := "sha256:" + strings.Repeat("1", 64)
	for _, args := range [][]string{
		{"verify", "--store", pu.String(), "--root", root},
		{"store", "ls", "--store", pu.String()},
		{"synth", "--store", pu.String(), "--samples", "20", "--shards", "1"},
	} {
		res := runCLI(t, cliEnv(), args...)
		if res.status != errcode.ExitUsage || !strings.HasPrefix(res.stderr, "shardproof: NO_SUCH_BUCKET: ") || !strings.Contains(res.stderr, "bucket sp-no-such-bucket does not exist") {
			t.Errorf("%s: exit %d, stderr %q; want exit 2, \"shardproof: NO_SUCH_BUCKET: …\" naming the bucket", strings.Join(args[:2], " "), res.status, res.stderr)
		}
	}
	_, err := s3test.Client(s3test.Endpoint()).HeadBucket(t.Context(), &awss3.HeadBucketInput{Bucket: aws.String("sp-no-such-bucket")})
	if err == nil || !strings.Contains(err.Error(), "StatusCode: 404") {
		t.Fatalf("after the commands, head bucket sp-no-such-bucket: %v, want 404 (none created)", err)
	}
}

// With no AWS credentials anywhere (environment, profile, IMDS), a
// command on an S3 store exits 2 with STORE_DENIED saying where to give
// them; it was STORE_UNAVAILABLE, exit 3, which engines retry.
func TestStoreS3NoCredentials(t *testing.T) {
	u := s3test.Start(t)
	res := runCLI(t, cliEnv("AWS_ACCESS_KEY_ID=", "AWS_SECRET_ACCESS_KEY=", "AWS_CONFIG_FILE=", "AWS_SHARED_CREDENTIALS_FILE=",
		"HOME="+t.TempDir(), "AWS_EC2_METADATA_DISABLED=true"), "store", "ls", "--store", u)
	if res.status != errcode.ExitUsage || !strings.HasPrefix(res.stderr, "shardproof: STORE_DENIED: ") ||
		!strings.Contains(res.stderr, "no AWS credentials found") || !strings.Contains(res.stderr, "AWS_ACCESS_KEY_ID") {
		t.Fatalf("store ls without credentials: exit %d, stderr %q; want exit 2, \"shardproof: STORE_DENIED: …\" saying none were found and where to give them", res.status, res.stderr)
	}
}

// A store put whose PutObject answer is lost (a proxy before the gateway
// drops the connection once the gateway has stored the object) is sent
// again by the SDK, whose conditional create then meets the object it
// wrote: put prints that object's version and succeeds, where it said
// PRECONDITION_FAILED, exit 4, for the caller's own bytes. Read from a
// pipe, as `... | shardproof store put KEY` does.
func TestStorePutS3AnswerLost(t *testing.T) {
	raw := s3test.Start(t)
	target, _ := url.Parse(s3test.Endpoint())
	proxy := &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
		r.SetURL(target)
		r.Out.Host = r.In.Host // the request is signed for the proxy's host
	}}
	var puts atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPut || !strings.HasSuffix(r.URL.Path, "/docs/lost") || puts.Add(1) > 1 {
			proxy.ServeHTTP(w, r)
			return
		}
		rec := httptest.NewRecorder()
		proxy.ServeHTTP(rec, r)
		if rec.Code != http.StatusOK {
			t.Errorf("first PUT: %d %s", rec.Code, rec.Body)
		}
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			conn.Close()
		}
	}))
	t.Cleanup(srv.Close)
	pu, _ := url.Parse(raw)
	q := pu.Query()
	q.Set("endpoint", srv.URL)
	pu.RawQuery = q.Encode()

	body := strings.Repeat("the caller's own bytes\n", 1000)
	out, err := storeRun(t, onlyReader{strings.NewReader(body)}, "store", "put", "--store", pu.String(), "docs/lost")
	if err != nil {
		t.Fatalf("put whose answer was lost: code %s exit %d (%v), want success", errcode.Of(err), exitStatus(err), err)
	}
	if n := puts.Load(); n != 2 {
		t.Fatalf("the gateway got %d PUTs of the key, want 2 (the SDK's retry)", n)
	}
	ls, err := storeRun(t, nil, "store", "ls", "--store", raw, "docs/")
	if err != nil || ls != fmt.Sprintf("docs/lost\t%s\t%d\n", strings.TrimSpace(out), len(body)) {
		t.Fatalf("ls: %q, %v; put printed %q", ls, err, out)
	}
}

// onlyReader hides every method of its reader but Read, as a pipe would.
type onlyReader struct{ io.Reader }

// A mistyped --store is STORE_UNAVAILABLE (exit 3) naming the directory,
// for every command that reads a store, and leaves no directory behind;
// before, it opened a new empty store there and verify answered that the
// release manifest was NOT_FOUND. synth, which starts a store, creates it.
func TestStoreMustExist(t *testing.T) {
	base := t.TempDir()
	missing := filepath.Join(base, "stroe")
	root := "sha256:" + strings.Repeat("1", 64)
	for _, args := range [][]string{
		{"verify", "--store", missing, "--root", root},
		{"manifest", "show", "--store", missing, root},
		{"store", "ls", "--store", "file://" + missing},
		{"store", "get", "--store", missing, "docs/a"},
	} {
		_, _, err := runInProcess(t, nil, args...)
		if errcode.Of(err) != errcode.StoreUnavailable || exitStatus(err) != errcode.ExitError || !strings.Contains(err.Error(), missing+": no such directory") {
			t.Errorf("%s: code %s exit %d (%v), want STORE_UNAVAILABLE / 3 naming %s", strings.Join(args[:2], " "), errcode.Of(err), exitStatus(err), err, missing)
		}
		if _, err := os.Stat(missing); !os.IsNotExist(err) {
			t.Fatalf("%s created %s (%v)", strings.Join(args[:2], " "), missing, err)
		}
	}
	// stage creates its store, but bad input changes nothing: no store
	// is left behind, and an existing directory stays.
	garbage := filepath.Join(base, "garbage.parquet")
	os.WriteFile(garbage, []byte("not parquet"), 0o644)
	existing := filepath.Join(base, "existing")
	os.Mkdir(existing, 0o755)
	for _, dir := range []string{missing, existing} {
		_, _, err := runInProcess(t, nil, "stage", "--store", dir, "--shards", "1", garbage)
		if errcode.Of(err) != errcode.BadInput {
			t.Fatalf("stage of a garbage file into %s: %v, want BAD_INPUT", dir, err)
		}
	}
	if _, err := os.Stat(missing); !os.IsNotExist(err) {
		t.Fatalf("a failed stage left the store directory it created: %v", err)
	}
	if ents, err := os.ReadDir(existing); err != nil || len(ents) != 0 {
		t.Fatalf("a failed stage into an existing empty directory: %d entries, %v", len(ents), err)
	}

	created := filepath.Join(base, "new", "store")
	if _, _, err := runInProcess(t, nil, "synth", "--store", created, "--samples", "20", "--shards", "1"); err != nil {
		t.Fatalf("synth into a new directory: %v", err)
	}
	if ents, err := os.ReadDir(filepath.Join(created, "blobs", "sha256")); err != nil || len(ents) == 0 {
		t.Fatalf("synth wrote no blobs into %s: %v", created, err)
	}
}

// store prune-jobs --dry-run writes nothing under jobs/, also when it
// judges a holder on another machine (a real prune writes probes to read
// the store's clock; the dry run judges ages and holders by this
// machine's and says so).
func TestStorePruneJobsDryRunWritesNothing(t *testing.T) {
	r := newRelease(t)
	ctx := t.Context()
	plan := cliReport(t, runCLI(t, cliEnv(), "verify", "--store", r.dir, "--root", r.res.Root.String(), "--json", "--keep-job")).Execution.Plan
	b, err := json.Marshal(&coordinator.HoldRecord{Schema: coordinator.HoldSchema, Plan: plan, Generation: 1000, Purpose: coordinator.HoldRun,
		Command: "shardproof verify", Process: procid.ID{Host: "elsewhere", PID: 4242, Machine: "another-boot/pid:[1]", Start: 1},
		Started: time.Now().UTC().Format(time.RFC3339)})
	if err != nil {
		t.Fatal(err)
	}
	prefix := "jobs/" + plan.Hex() + "/"
	holdKey := prefix + "hold/" + strconv.Itoa(1000)
	if _, err := r.store.Put(ctx, holdKey, bytes.NewReader(b), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	listing := func() []objstore.ObjectInfo {
		page, err := r.store.List(ctx, "jobs/", "", 1000)
		if err != nil {
			t.Fatal(err)
		}
		return page.Objects
	}
	before := listing()
	pruneFlags.olderThan, pruneFlags.dryRun = 24*time.Hour, false
	stdout, stderr, err := runInProcess(t, nil, "store", "prune-jobs", "--store", r.dir, "--older-than", "0s", "--dry-run")
	out := string(stdout)
	if err != nil || !strings.Contains(out, "kept\t"+prefix) || !strings.Contains(out, `in use by "shardproof verify" (pid 4242 on host elsewhere, run), renewed`) ||
		!strings.Contains(out, "ago by this machine's clock") {
		t.Fatalf("--dry-run of a job held on another machine: %q, %v", out, err)
	}
	if !strings.Contains(string(stderr), "judges the jobs' ages by this machine's clock") {
		t.Fatalf("--dry-run did not say its ages are by this machine's clock: %q", stderr)
	}
	if after := listing(); !slices.Equal(after, before) {
		t.Fatalf("--dry-run wrote under jobs/: %d objects before, %d after", len(before), len(after))
	}
	out, err = storeRun(t, nil, "store", "prune-jobs", "--store", r.dir, "--older-than", "0s")
	if err != nil || !strings.Contains(out, "kept\t"+prefix) || !strings.Contains(out, `in use by "shardproof verify" (pid 4242 on host elsewhere, run)`) ||
		strings.Contains(out, "this machine's clock") {
		t.Fatalf("prune-jobs of a job held on another machine: %q, %v", out, err)
	}
}
