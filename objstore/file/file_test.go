package file_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/objstore"
	"github.com/shardproof/shardproof/objstore/file"
	"github.com/shardproof/shardproof/objstore/storetest"
)

func openTemp(t *testing.T) (*file.Store, string) {
	t.Helper()
	dir := t.TempDir()
	s, err := file.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, dir
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) objstore.Store {
		s, _ := openTemp(t)
		return s
	})
}

func TestOpenURLs(t *testing.T) {
	dir := t.TempDir()
	ctx := t.Context()
	for _, u := range []string{dir, "file://" + dir, "file://localhost" + dir} {
		s, err := objstore.Open(ctx, u)
		if err != nil {
			t.Fatalf("Open(%q): %v", u, err)
		}
		if _, err := s.Put(ctx, "k", strings.NewReader(u), objstore.PutOptions{}); err != nil {
			t.Fatalf("Put via %q: %v", u, err)
		}
	}
	s, _ := objstore.Open(ctx, dir)
	info, err := s.Head(ctx, "k", "")
	if err != nil || info.Version != "v3" {
		t.Fatalf("three Puts through three URLs of one directory: %+v, %v", info, err)
	}
	if _, err := objstore.Open(ctx, "file://otherhost/x"); errcode.Of(err) != errcode.Usage {
		t.Fatalf("remote host: %v", err)
	}
}

func TestOpenUnavailable(t *testing.T) {
	f := filepath.Join(t.TempDir(), "plainfile")
	os.WriteFile(f, []byte("x"), 0o644)
	for _, p := range []string{f, filepath.Join(f, "sub"), "/proc/shardproof-cannot-create"} {
		if _, err := file.Open(p); errcode.Of(err) != errcode.StoreUnavailable {
			t.Fatalf("Open(%q) = %v, want STORE_UNAVAILABLE", p, err)
		}
	}
}

// The documented layout, so the directory can be inspected and backed up.
func TestLayout(t *testing.T) {
	s, dir := openTemp(t)
	ctx := t.Context()
	s.Put(ctx, "blobs/k", strings.NewReader("one"), objstore.PutOptions{})
	s.Put(ctx, "blobs/k", strings.NewReader("two"), objstore.PutOptions{})
	for name, want := range map[string]string{
		"blobs/k/@00000000000000000001": "one",
		"blobs/k/@00000000000000000002": "two",
	} {
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || string(got) != want {
			t.Fatalf("%s = %q, %v; want %q", name, got, err, want)
		}
	}
	tmp, _ := os.ReadDir(filepath.Join(dir, "@tmp"))
	if len(tmp) != 0 {
		t.Fatalf("temp files left after successful Puts: %v", tmp)
	}
}

// A crash after the temp file is written but before the link leaves a temp
// file that is never visible as a version.
func TestCrashLeftoverInvisible(t *testing.T) {
	s, dir := openTemp(t)
	ctx := t.Context()
	os.WriteFile(filepath.Join(dir, "@tmp", "deadbeef"), []byte("half-written"), 0o444)
	os.MkdirAll(filepath.Join(dir, "k"), 0o755) // mkdir done, link not
	if _, err := s.Head(ctx, "k", ""); !objstore.IsNotExist(err) {
		t.Fatalf("Head of a never-linked key: %v", err)
	}
	page, err := s.List(ctx, "", "", 0)
	if err != nil || len(page.Objects) != 0 {
		t.Fatalf("List = %+v, %v; want nothing", page, err)
	}
	if _, err := s.Put(ctx, "k", strings.NewReader("real"), objstore.PutOptions{IfNoneMatch: true}); err != nil {
		t.Fatalf("conditional create after a crashed attempt: %v", err)
	}
}

// A failed SHA256 check or canceled Put leaves no temp file behind either,
// whether the body streams or is bytes in memory.
func TestFailedPutCleansTemp(t *testing.T) {
	s, dir := openTemp(t)
	canceled, cancel := context.WithCancel(t.Context())
	cancel()
	for _, c := range []struct {
		name string
		ctx  context.Context
		body io.Reader
		o    objstore.PutOptions
		code errcode.Code
	}{
		{"stream, wrong digest", t.Context(), strings.NewReader("x"), objstore.PutOptions{SHA256: [32]byte{1}}, errcode.DigestMismatch},
		{"bytes, wrong digest", t.Context(), bytes.NewReader([]byte("x")), objstore.PutOptions{SHA256: [32]byte{1}}, errcode.DigestMismatch},
		{"bytes, canceled", canceled, bytes.NewReader([]byte("x")), objstore.PutOptions{}, errcode.Canceled},
	} {
		_, err := s.Put(c.ctx, "k", c.body, c.o)
		if errcode.Of(err) != c.code {
			t.Fatalf("%s: Put: %v, want %s", c.name, err, c.code)
		}
		if tmp, _ := os.ReadDir(filepath.Join(dir, "@tmp")); len(tmp) != 0 {
			t.Fatalf("%s: temp files left: %v", c.name, tmp)
		}
		if _, err := s.Head(t.Context(), "k", ""); !objstore.IsNotExist(err) {
			t.Fatalf("%s: Head after the failed Put: %v", c.name, err)
		}
	}
	data := bytes.Repeat([]byte("shuffle "), 1<<17)
	sum := sha256.Sum256(data)
	if _, err := s.Put(t.Context(), "k", bytes.NewReader(data), objstore.PutOptions{SHA256: sum}); err != nil {
		t.Fatalf("bytes, right digest: %v", err)
	}
	rc, err := s.Get(t.Context(), "k", "")
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if got, err := io.ReadAll(rc); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read back %d bytes of %d: %v", len(got), len(data), err)
	}
}

// Symlinks planted inside the root cannot reach outside it.
func TestSymlinkEscape(t *testing.T) {
	s, dir := openTemp(t)
	ctx := t.Context()
	outside := t.TempDir()
	os.MkdirAll(filepath.Join(outside, "secret"), 0o755)
	os.WriteFile(filepath.Join(outside, "secret", "@00000000000000000001"), []byte("secret"), 0o644)
	if err := os.Symlink(outside, filepath.Join(dir, "evil")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, "evil/secret", ""); err == nil {
		t.Fatal("Get followed a symlink out of the root")
	}
	if _, err := s.Put(ctx, "evil/new", strings.NewReader("x"), objstore.PutOptions{}); err == nil {
		t.Fatal("Put followed a symlink out of the root")
	}
	if _, err := os.Stat(filepath.Join(outside, "new")); err == nil {
		t.Fatal("Put wrote outside the root")
	}
	page, err := s.List(ctx, "", "", 0)
	if err != nil || len(page.Objects) != 0 {
		t.Fatalf("List = %+v, %v; want nothing", page, err)
	}
}

// Versions are immutable on disk: read-only files, and a reader opened on
// v1 keeps seeing v1's bytes while newer versions are written.
func TestReaderStable(t *testing.T) {
	s, dir := openTemp(t)
	ctx := t.Context()
	v1, _ := s.Put(ctx, "k", strings.NewReader("version one"), objstore.PutOptions{})
	rc, err := s.Get(ctx, "k", v1)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	for range 3 {
		s.Put(ctx, "k", strings.NewReader("later"), objstore.PutOptions{})
	}
	got, _ := io.ReadAll(rc)
	if string(got) != "version one" {
		t.Fatalf("reader of v1 saw %q", got)
	}
	fi, err := os.Stat(filepath.Join(dir, "k", "@00000000000000000001"))
	if err != nil || fi.Mode().Perm()&0o222 != 0 {
		t.Fatalf("version file mode %v, %v; want read-only", fi.Mode(), err)
	}
}

// Two Store values on one directory (two processes) share versions and the
// conditional create.
func TestTwoHandles(t *testing.T) {
	dir := t.TempDir()
	a, _ := file.Open(dir)
	b, _ := file.Open(dir)
	ctx := context.Background()
	if _, err := a.Put(ctx, "k", strings.NewReader("a"), objstore.PutOptions{IfNoneMatch: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Put(ctx, "k", strings.NewReader("b"), objstore.PutOptions{IfNoneMatch: true}); !objstore.IsPrecondition(err) {
		t.Fatalf("second handle's conditional create: %v", err)
	}
	var keys []string
	page, _ := b.List(ctx, "", "", 0)
	for _, o := range page.Objects {
		keys = append(keys, o.Key)
	}
	if !slices.Equal(keys, []string{"k"}) {
		t.Fatalf("keys %v", keys)
	}
	rc, _ := b.Get(ctx, "k", "")
	got, _ := io.ReadAll(rc)
	rc.Close()
	if !bytes.Equal(got, []byte("a")) {
		t.Fatalf("got %q", got)
	}
}

// The file store, unlike posix-backed S3, lets a key and a key under it
// coexist.
func TestNestedKeys(t *testing.T) {
	s, _ := openTemp(t)
	ctx := t.Context()
	va, err := s.Put(ctx, "a", strings.NewReader("key a"), objstore.PutOptions{IfNoneMatch: true})
	if err != nil {
		t.Fatal(err)
	}
	vab, err := s.Put(ctx, "a/b", strings.NewReader("key a/b"), objstore.PutOptions{IfNoneMatch: true})
	if err != nil {
		t.Fatal(err)
	}
	for key, v := range map[string]objstore.Version{"a": va, "a/b": vab} {
		rc, err := s.Get(ctx, key, v)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(rc)
		rc.Close()
		if string(got) != "key "+key {
			t.Fatalf("%s = %q", key, got)
		}
	}
	if _, err := s.Get(ctx, "a/b/c", ""); !objstore.IsNotExist(err) {
		t.Fatalf("Get a/b/c: %v", err)
	}
	page, _ := s.List(ctx, "", "", 0)
	if len(page.Objects) != 2 || page.Objects[0].Key != "a" || page.Objects[1].Key != "a/b" {
		t.Fatalf("List: %+v", page.Objects)
	}
	// "a" is not under "a/": deleting the prefix keeps it (it took it
	// with "a/b", the whole directory).
	if err := s.DeletePrefix(ctx, "a/"); err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, s, "a"); got != "key a" {
		t.Fatalf("a after DeletePrefix(a/) = %q", got)
	}
	if _, err := s.Head(ctx, "a/b", ""); !objstore.IsNotExist(err) {
		t.Fatalf("Head a/b after DeletePrefix(a/): %v", err)
	}
	if got := storetest.Keys(t, s, "", 0); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("after DeletePrefix(a/): keys %q, want [a]", got)
	}
}

func BenchmarkStore(b *testing.B) {
	s, err := file.Open(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	storetest.Bench(b, s, 32<<20)
}

// Temp files a crashed Put left behind are removed by the next Open once
// they are older than TempMaxAge; younger ones (a Put that may still be
// running in another process) are kept.
func TestOpenSweepsStaleTemp(t *testing.T) {
	_, dir := openTemp(t)
	// The temp directory exists once a Put has run.
	if err := os.MkdirAll(filepath.Join(dir, "@tmp"), 0o755); err != nil {
		t.Fatal(err)
	}
	stale, fresh := filepath.Join(dir, "@tmp", "stale"), filepath.Join(dir, "@tmp", "fresh")
	for _, f := range []string{stale, fresh} {
		if err := os.WriteFile(f, []byte("half-written"), 0o444); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-file.TempMaxAge - time.Hour)
	if err := os.Chtimes(stale, old, old); err != nil {
		t.Fatal(err)
	}
	s, err := file.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := os.Stat(stale); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("stale temp file still there after Open: %v", err)
	}
	if _, err := os.Stat(fresh); err != nil {
		t.Fatalf("fresh temp file removed: %v", err)
	}
}

// TestOpenExisting: a command that reads a store opens it with
// objstore.Open, which must not turn a mistyped path into a new, empty
// store (every lookup NOT_FOUND, a directory left behind), nor write into
// an existing directory merely by opening it; objstore.Create, for the
// commands that start a store, makes the directory.
func TestOpenExisting(t *testing.T) {
	ctx := t.Context()
	base := t.TempDir()
	missing := filepath.Join(base, "typo", "store")
	for _, u := range []string{missing, "file://" + missing} {
		if _, err := objstore.Open(ctx, u); errcode.Of(err) != errcode.StoreUnavailable || !strings.Contains(err.Error(), "no such directory") {
			t.Fatalf("Open(%q) = %v, want STORE_UNAVAILABLE naming the missing directory", u, err)
		}
	}
	if _, err := os.Stat(filepath.Join(base, "typo")); !os.IsNotExist(err) {
		t.Fatalf("Open of a missing store created %s: %v", filepath.Join(base, "typo"), err)
	}
	f := filepath.Join(base, "plainfile")
	os.WriteFile(f, []byte("x"), 0o644)
	if _, err := file.OpenExisting(f); errcode.Of(err) != errcode.StoreUnavailable {
		t.Fatalf("OpenExisting(plain file) = %v, want STORE_UNAVAILABLE", err)
	}

	empty := filepath.Join(base, "empty")
	os.Mkdir(empty, 0o755)
	s, err := objstore.Open(ctx, empty)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Head(ctx, "k", ""); !objstore.IsNotExist(err) {
		t.Fatalf("Head in an empty store: %v, want NOT_FOUND", err)
	}
	if ents, _ := os.ReadDir(empty); len(ents) != 0 {
		t.Fatalf("opening and reading wrote %d entries into the directory (first %q)", len(ents), ents[0].Name())
	}
	// The first Put makes the temp directory it needs.
	if _, err := s.Put(ctx, "a/k", strings.NewReader("v"), objstore.PutOptions{IfNoneMatch: true}); err != nil {
		t.Fatalf("first Put into an opened empty directory: %v", err)
	}
	if got := readAll(t, s, "a/k"); got != "v" {
		t.Fatalf("read back %q", got)
	}

	created := filepath.Join(base, "new", "store")
	c, err := objstore.Create(ctx, created)
	if err != nil {
		t.Fatalf("Create(%q): %v", created, err)
	}
	if _, err := c.Put(ctx, "k", strings.NewReader("w"), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if s, err := objstore.Open(ctx, created); err != nil || readAll(t, s, "k") != "w" {
		t.Fatalf("Open of the created store: %v", err)
	}
	// RemoveIfUnused takes back only a directory Open made and nothing
	// was written to.
	if c.(*file.Store).RemoveIfUnused() {
		t.Fatal("RemoveIfUnused removed a store holding an object")
	}
	if s.(*file.Store).RemoveIfUnused() {
		t.Fatal("RemoveIfUnused removed a directory Open did not create")
	}
	fresh, err := file.Open(filepath.Join(base, "fresh"))
	if err != nil {
		t.Fatal(err)
	}
	if !fresh.RemoveIfUnused() {
		t.Fatal("RemoveIfUnused kept an unused directory Open created")
	}
	if _, err := os.Stat(filepath.Join(base, "fresh")); !os.IsNotExist(err) {
		t.Fatalf("after RemoveIfUnused: %v", err)
	}
}

func readAll(t *testing.T, s objstore.Store, key string) string {
	t.Helper()
	rc, err := s.Get(t.Context(), key, "")
	if err != nil {
		t.Fatalf("Get %s: %v", key, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("read %s: %v", key, err)
	}
	return string(b)
}

// An ephemeral Put (not synced to disk) is otherwise an ordinary Put: the
// same layout, conditional create, digest check, and no temp file left.
func TestEphemeralPut(t *testing.T) {
	s, dir := openTemp(t)
	ctx := t.Context()
	eph := objstore.PutOptions{Ephemeral: true, IfNoneMatch: true}
	v, err := s.Put(ctx, "jobs/p/map/0/r0.arrow", strings.NewReader("tuples"), eph)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(dir, "jobs/p/map/0/r0.arrow/@00000000000000000001"))
	if err != nil || string(got) != "tuples" || v != "v1" {
		t.Fatalf("ephemeral version %s holds %q, %v", v, got, err)
	}
	if _, err := s.Put(ctx, "jobs/p/map/0/r0.arrow", strings.NewReader("other"), eph); !objstore.IsPrecondition(err) {
		t.Fatalf("second conditional ephemeral put: %v, want a precondition failure", err)
	}
	bad := eph
	bad.SHA256 = [32]byte{1}
	if _, err := s.Put(ctx, "jobs/p/map/0/r1.arrow", strings.NewReader("tuples"), bad); errcode.Of(err) == errcode.Internal || err == nil {
		t.Fatalf("ephemeral put with a wrong digest: %v", err)
	}
	if _, err := s.Head(ctx, "jobs/p/map/0/r1.arrow", ""); !objstore.IsNotExist(err) {
		t.Fatalf("a refused ephemeral put left a version: %v", err)
	}
	if tmp, _ := os.ReadDir(filepath.Join(dir, "@tmp")); len(tmp) != 0 {
		t.Fatalf("temp files left: %v", tmp)
	}
}

// Jobs written and deleted side by side: DeletePrefix removes the
// ancestors it leaves empty, "jobs/" among them, which another writer may
// have just found and not yet made its own directory in. Put makes its
// directories again then, rather than fail with an I/O error (119 of
// 6,000 Puts did, two writers at a time).
func TestPutBesideDeletePrefix(t *testing.T) {
	s, err := file.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for w := range 2 {
		wg.Go(func() {
			for i := range 800 {
				p := fmt.Sprintf("jobs/%d-%d/", w, i)
				if _, err := s.Put(ctx, p+"map/0/commit.json", strings.NewReader("x"), objstore.PutOptions{IfNoneMatch: true, Ephemeral: true}); err != nil {
					errs <- err
					return
				}
				if err := s.DeletePrefix(ctx, p); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// A listing beside a DeletePrefix (store prune-jobs or ls-jobs listing
// jobs/ while a verification deletes its merge levels or its job) skips
// the directories removed under it, and still lists every key nothing
// deletes; it failed with an I/O error naming the vanished directory
// (about 1 listing in 100).
func TestListBesideDeletePrefix(t *testing.T) {
	s, _ := openTemp(t)
	ctx := t.Context()
	keep := []string{"jobs/keep/a", "jobs/keep/z/z"}
	for _, k := range keep {
		if _, err := s.Put(ctx, k, strings.NewReader(k), objstore.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan error, 1)
	go func() {
		for i := range 100 {
			p := fmt.Sprintf("jobs/%d/", i)
			for j := range 4 {
				if _, err := s.Put(ctx, fmt.Sprintf("%smerge/%d/x", p, j), strings.NewReader("x"), objstore.PutOptions{Ephemeral: true}); err != nil {
					done <- err
					return
				}
			}
			if err := s.DeletePrefix(ctx, p); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	for listings := 0; ; listings++ {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%d listings beside the deletions", listings)
			return
		default:
		}
		page, err := s.List(ctx, "jobs/", "", 0)
		if err != nil {
			t.Fatalf("listing %d: %v", listings, err)
		}
		var got []string
		for _, o := range page.Objects {
			if strings.HasPrefix(o.Key, "jobs/keep/") {
				got = append(got, o.Key)
			}
		}
		if !slices.Equal(got, keep) {
			t.Fatalf("listing %d: kept keys %q, want %q", listings, got, keep)
		}
	}
}

// killedPutEnv names the store directory a child test process Puts into
// until it is killed (TestKilledPutTempIsSwept).
const killedPutEnv = "SHARDPROOF_TEST_KILLED_PUT_STORE"

// stallAfter yields n zero bytes, then blocks forever: a body whose
// upload a kill ends midway.
type stallAfter struct{ n int }

func (s *stallAfter) Read(p []byte) (int, error) {
	if s.n == 0 {
		// Not select {}: a child test binary has no -test.timeout timer,
		// so a process whose every goroutine blocks dies of "all
		// goroutines are asleep", and its lock with it. A sleep is a
		// timer; the parent kills the child long before it ends.
		time.Sleep(time.Hour)
	}
	k := min(len(p), s.n)
	clear(p[:k])
	s.n -= k
	return k, nil
}

// A Put killed mid-body (kill -9, the OOM killer) leaves its temp file,
// which the next Open removed only once a day old: a retry loop of
// killed uploads filled the disk with them meanwhile. Its lock is free,
// so the next Open removes it once TempSettle old, and keeps the temp
// files of Puts still running, whatever their age, in another process
// or in its own (which then completes).
func TestKilledPutTempIsSwept(t *testing.T) {
	const size = 4 << 20
	if dir := os.Getenv(killedPutEnv); dir != "" {
		s, err := file.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		s.Put(context.Background(), "big", &stallAfter{n: size}, objstore.PutOptions{IfNoneMatch: true})
		t.Fatal("the stalled Put returned")
	}
	dir := t.TempDir()
	tmpFiles := func() map[string]int64 {
		out := map[string]int64{}
		es, _ := os.ReadDir(filepath.Join(dir, "@tmp"))
		for _, e := range es {
			if fi, err := e.Info(); err == nil {
				out[e.Name()] = fi.Size()
			}
		}
		return out
	}
	// Two processes each write size bytes of a Put, then stall.
	var temps []string
	var children []*exec.Cmd
	for range 2 {
		child := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestKilledPutTempIsSwept$")
		child.Env = append(os.Environ(), killedPutEnv+"="+dir)
		if err := child.Start(); err != nil {
			t.Fatal(err)
		}
		children = append(children, child)
		defer func() { child.Process.Kill(); child.Wait() }()
		for deadline := time.Now().Add(time.Minute); len(temps) < len(children); time.Sleep(5 * time.Millisecond) {
			for name, n := range tmpFiles() {
				if n == size && !slices.Contains(temps, name) {
					temps = append(temps, name)
				}
			}
			if time.Now().After(deadline) {
				t.Fatal("the child wrote no temp file")
			}
		}
	}
	killed, other := temps[0], temps[1]
	children[0].Process.Kill()
	children[0].Wait()

	// And a Put of this process.
	pr, pw := io.Pipe()
	defer pw.Close()
	live := make(chan error, 1)
	s, err := file.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	go func() {
		_, err := s.Put(t.Context(), "live", pr, objstore.PutOptions{IfNoneMatch: true})
		live <- err
	}()
	// Once the Put has read these bytes, its temp file exists.
	if _, err := pw.Write([]byte("first half, ")); err != nil {
		t.Fatal(err)
	}
	var own string
	for name := range tmpFiles() {
		if !slices.Contains(temps, name) {
			own = name
		}
	}
	if own == "" {
		t.Fatal("the running Put has no temp file")
	}
	old := time.Now().Add(-file.TempSettle - time.Minute)
	for _, name := range []string{killed, other, own} {
		if err := os.Chtimes(filepath.Join(dir, "@tmp", name), old, old); err != nil {
			t.Fatal(err)
		}
	}
	again, err := file.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	left := tmpFiles()
	if _, ok := left[killed]; ok {
		t.Fatalf("the killed Put's temp file %s, %s old, is still there after Open", killed, file.TempSettle+time.Minute)
	}
	for _, name := range []string{other, own} {
		if _, ok := left[name]; !ok {
			t.Fatalf("Open removed the temp file %s of a Put still running", name)
		}
	}
	if _, err := again.Head(t.Context(), "big", ""); !objstore.IsNotExist(err) {
		t.Fatalf("Head of the stalled Puts' key: %v, want NOT_FOUND", err)
	}
	pw.Write([]byte("second half"))
	pw.Close()
	if err := <-live; err != nil {
		t.Fatalf("the running Put, after the sweep: %v", err)
	}
	if got := readAll(t, again, "live"); got != "first half, second half" {
		t.Fatalf("live = %q", got)
	}
}

// BenchmarkPutSmall: durable Puts of documents (4 KiB) at new keys of one
// directory, as a release's blobs and a job's commit records are written:
// the cost of a Put is its fsyncs, the body's and its directories'.
func BenchmarkPutSmall(b *testing.B) {
	s, err := file.Open(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	body := bytes.Repeat([]byte("d"), 4096)
	for i := 0; b.Loop(); i++ {
		if _, err := s.Put(b.Context(), fmt.Sprintf("blobs/sha256/%064d", i), bytes.NewReader(body), objstore.PutOptions{IfNoneMatch: true}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDeleteJob: DeletePrefix of a small job's scratch (8 ephemeral
// files), as verify removes its job once the report is stored.
func BenchmarkDeleteJob(b *testing.B) {
	s, err := file.Open(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ctx := b.Context()
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		p := fmt.Sprintf("jobs/%d/", i)
		for f := range 8 {
			if _, err := s.Put(ctx, fmt.Sprintf("%smap/%d/r0.arrow", p, f), strings.NewReader("x"), objstore.PutOptions{Ephemeral: true}); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
		if err := s.DeletePrefix(ctx, p); err != nil {
			b.Fatal(err)
		}
	}
}

// TestDurableDirectories: every entry an acknowledged write adds or
// removes is fsynced in the directory that holds it: the store's own
// directory in its parent when Open makes it (synth, stage and --scratch
// create a store: the store, with every object in it, could be lost to a
// crash after a stage that had reported success), each directory a Put
// makes in its parent, the version in the key's directory, and what
// DeletePrefix removes in the directory it removed it from (removals
// were not synced, so a crash could bring back a job's reduce commit
// records whose map inputs stayed deleted). An ephemeral Put syncs
// nothing.
func TestDurableDirectories(t *testing.T) {
	synced, restore := file.WatchDirSyncs()
	defer restore()
	base := t.TempDir()
	dir := filepath.Join(base, "new", "store")
	s, err := file.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := t.Context()
	check := func(what string, want ...string) {
		t.Helper()
		got := synced()
		for _, w := range want {
			if !slices.Contains(got, w) {
				t.Errorf("%s: %s not fsynced; fsynced %q", what, w, got)
			}
		}
		if len(want) == 0 && len(got) > 0 {
			t.Errorf("%s: fsynced %q, want nothing", what, got)
		}
	}
	check("Open of a new store", base, filepath.Join(base, "new"))
	if _, err := file.Open(dir); err != nil {
		t.Fatal(err)
	}
	check("Open of an existing store")

	put := func(key string, o objstore.PutOptions) {
		t.Helper()
		if _, err := s.Put(ctx, key, strings.NewReader(key), o); err != nil {
			t.Fatal(err)
		}
	}
	put("a/b/k", objstore.PutOptions{IfNoneMatch: true})
	check("first Put of a/b/k", dir, filepath.Join(dir, "a"), filepath.Join(dir, "a/b"), filepath.Join(dir, "a/b/k"))
	put("a/b/k", objstore.PutOptions{})
	check("second version of a/b/k", filepath.Join(dir, "a/b/k"))
	put("a/b/j", objstore.PutOptions{})
	check("Put of a/b/j", filepath.Join(dir, "a/b"), filepath.Join(dir, "a/b/j"))
	put("a/e/x", objstore.PutOptions{Ephemeral: true})
	check("ephemeral Put")

	d := objstore.Deleter(s)
	if err := d.DeletePrefix(ctx, "a/b/"); err != nil {
		t.Fatal(err)
	}
	check("DeletePrefix(a/b/)", filepath.Join(dir, "a"))
	if err := d.DeletePrefix(ctx, "a/b/"); err != nil {
		t.Fatal(err)
	}
	check("DeletePrefix of a prefix already deleted")
	put("a/e", objstore.PutOptions{})
	synced()
	if err := d.DeletePrefix(ctx, "a/e/"); err != nil {
		t.Fatal(err)
	}
	check("DeletePrefix(a/e/) beside key a/e", filepath.Join(dir, "a/e"))
	if err := d.DeletePrefix(ctx, "a/"); err != nil {
		t.Fatal(err)
	}
	check("DeletePrefix(a/), the last keys", dir)
	if ents, err := os.ReadDir(dir); err != nil || slices.ContainsFunc(ents, func(e fs.DirEntry) bool { return e.Name() == "a" }) {
		t.Fatalf("after DeletePrefix(a/): %v, %v", ents, err)
	}
}
