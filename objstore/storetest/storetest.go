package storetest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/internal/verifyread"
	"github.com/shardproof/shardproof/objstore"
)

// Run runs the conformance suite. open MUST return a new, empty store each
// time it is called (a fresh directory, bucket or prefix).
func Run(t *testing.T, open func(t *testing.T) objstore.Store) {
	for _, tc := range []struct {
		name string
		f    func(t *testing.T, s objstore.Store)
	}{
		{"RoundTrip", testRoundTrip},
		{"ImmutableVersions", testImmutableVersions},
		{"ConditionalCreate", testConditionalCreate},
		{"ConditionalCreateRace", testConditionalCreateRace},
		{"ConditionalCreateSlowBody", testConditionalCreateSlowBody},
		{"CreateOrMatch", testCreateOrMatch},
		{"NotFound", testNotFound},
		{"ListPaging", testListPaging},
		{"ListPrefix", testListPrefix},
		{"OddKeys", testOddKeys},
		{"BadKeys", testBadKeys},
		{"EmptyBody", testEmptyBody},
		{"LargeBody", testLargeBody},
		{"SHA256Option", testSHA256Option},
		{"Canceled", testCanceled},
		{"DeletePrefix", testDeletePrefix},
		{"HiddenBlob", testHiddenBlob},
		{"PrefixKeys", testPrefixKeys},
		{"ListPageBoundary", testListPageBoundary},
		{"ListOddPrefixes", testListOddPrefixes},
		{"ListRandomPages", testListRandomPages},
		{"ConditionalCreateRaceAtCommit", testConditionalCreateRaceAtCommit},
		{"BodyErrorHalfway", testBodyErrorHalfway},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.f(t, open(t)) })
	}
}

// put stores body under key and fails the test on error.
func put(t *testing.T, s objstore.Store, key string, body []byte, opts objstore.PutOptions) objstore.Version {
	t.Helper()
	v, err := s.Put(t.Context(), key, bytes.NewReader(body), opts)
	if err != nil {
		t.Fatalf("Put(%q): %v", key, err)
	}
	if v == "" {
		t.Fatalf("Put(%q) returned an empty version", key)
	}
	return v
}

// Keys lists every key of s under prefix, limit keys per page (0: the
// store's page size), following Next to the end.
func Keys(t testing.TB, s objstore.Store, prefix string, limit int) []string {
	t.Helper()
	var out []string
	after := ""
	for {
		page, err := s.List(context.Background(), prefix, after, limit)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range page.Objects {
			out = append(out, o.Key)
		}
		if page.Next == "" {
			return out
		}
		after = page.Next
	}
}

// get reads key at version v, bounded, and fails the test on error.
func get(t *testing.T, s objstore.Store, key string, v objstore.Version) []byte {
	t.Helper()
	rc, err := s.Get(t.Context(), key, v)
	if err != nil {
		t.Fatalf("Get(%q, %q): %v", key, v, err)
	}
	defer rc.Close()
	data, err := verifyread.ReadAll(rc, 64<<20)
	if err != nil {
		t.Fatalf("Get(%q, %q): read: %v", key, v, err)
	}
	return data
}

func wantCode(t *testing.T, err error, c errcode.Code, what string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: want %s, got success", what, c)
	}
	if got := errcode.Of(err); got != c {
		t.Fatalf("%s: code %s, want %s (%v)", what, got, c, err)
	}
}

func testRoundTrip(t *testing.T, s objstore.Store) {
	body := []byte("the exact bytes\x00\xff\n")
	v := put(t, s, "blobs/one", body, objstore.PutOptions{})
	if got := get(t, s, "blobs/one", v); !bytes.Equal(got, body) {
		t.Fatalf("Get by version = %q, want %q", got, body)
	}
	if got := get(t, s, "blobs/one", ""); !bytes.Equal(got, body) {
		t.Fatalf("Get latest = %q, want %q", got, body)
	}
	for _, hv := range []objstore.Version{v, ""} {
		info, err := s.Head(t.Context(), "blobs/one", hv)
		if err != nil {
			t.Fatalf("Head(%q): %v", hv, err)
		}
		if info.Key != "blobs/one" || info.Version != v || info.Size != int64(len(body)) {
			t.Fatalf("Head(%q) = %+v, want key blobs/one version %s size %d", hv, info, v, len(body))
		}
	}
}

func testImmutableVersions(t *testing.T, s objstore.Store) {
	v1 := put(t, s, "k", []byte("first"), objstore.PutOptions{})
	v2 := put(t, s, "k", []byte("second, longer"), objstore.PutOptions{})
	if v1 == v2 {
		t.Fatalf("two Puts returned the same version %q", v1)
	}
	if got := get(t, s, "k", v1); string(got) != "first" {
		t.Fatalf("Get(v1) = %q", got)
	}
	if got := get(t, s, "k", v2); string(got) != "second, longer" {
		t.Fatalf("Get(v2) = %q", got)
	}
	if got := get(t, s, "k", ""); string(got) != "second, longer" {
		t.Fatalf("Get(latest) = %q", got)
	}
	info, err := s.Head(t.Context(), "k", v1)
	if err != nil || info.Size != 5 || info.Version != v1 {
		t.Fatalf("Head(v1) = %+v, %v", info, err)
	}
	info, err = s.Head(t.Context(), "k", "")
	if err != nil || info.Version != v2 {
		t.Fatalf("Head(latest) = %+v, %v; want version %s", info, err, v2)
	}
}

func testConditionalCreate(t *testing.T, s objstore.Store) {
	v := put(t, s, "c", []byte("winner"), objstore.PutOptions{IfNoneMatch: true})
	_, err := s.Put(t.Context(), "c", strings.NewReader("loser"), objstore.PutOptions{IfNoneMatch: true})
	if !errors.Is(err, objstore.ErrPreconditionFailed) {
		t.Fatalf("second conditional create: %v, want ErrPreconditionFailed", err)
	}
	wantCode(t, err, errcode.PreconditionFailed, "second conditional create")
	if got := get(t, s, "c", ""); string(got) != "winner" {
		t.Fatalf("latest after failed create = %q", got)
	}
	if got := get(t, s, "c", v); string(got) != "winner" {
		t.Fatalf("first version after failed create = %q", got)
	}
	// A key that already has versions from unconditional Puts is taken too.
	put(t, s, "u", []byte("x"), objstore.PutOptions{})
	if _, err := s.Put(t.Context(), "u", strings.NewReader("y"), objstore.PutOptions{IfNoneMatch: true}); !objstore.IsPrecondition(err) {
		t.Fatalf("conditional create over an unconditional version: %v", err)
	}
}

func testConditionalCreateRace(t *testing.T, s objstore.Store) {
	const n = 16
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		winners []int
		vers    []objstore.Version
	)
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			v, err := s.Put(t.Context(), "race", strings.NewReader(fmt.Sprintf("writer %02d", i)), objstore.PutOptions{IfNoneMatch: true})
			switch {
			case err == nil:
				mu.Lock()
				winners = append(winners, i)
				vers = append(vers, v)
				mu.Unlock()
			case !objstore.IsPrecondition(err):
				t.Errorf("writer %d: %v, want ErrPreconditionFailed", i, err)
			}
		})
	}
	close(start)
	wg.Wait()
	if len(winners) != 1 {
		t.Fatalf("%d conditional creates won (%v), want exactly 1", len(winners), winners)
	}
	want := fmt.Sprintf("writer %02d", winners[0])
	if got := get(t, s, "race", ""); string(got) != want {
		t.Fatalf("stored %q, want the winner's %q", got, want)
	}
	if got := get(t, s, "race", vers[0]); string(got) != want {
		t.Fatalf("winner's version holds %q, want %q", got, want)
	}
}

// A conditional create whose body is still streaming when another create
// of the key completes must lose: the check happens when the version is
// committed, not when the upload starts.
func testConditionalCreateSlowBody(t *testing.T, s objstore.Store) {
	pr, pw := io.Pipe()
	slow := make(chan error, 1)
	go func() {
		_, err := s.Put(t.Context(), "slow", pr, objstore.PutOptions{IfNoneMatch: true})
		slow <- err
	}()
	if _, err := pw.Write([]byte("slow writer, first half; ")); err != nil {
		t.Fatal(err)
	}
	v := put(t, s, "slow", []byte("fast writer"), objstore.PutOptions{IfNoneMatch: true})
	pw.Write([]byte("second half"))
	pw.Close()
	if err := <-slow; !objstore.IsPrecondition(err) {
		t.Fatalf("slow conditional create: %v, want ErrPreconditionFailed", err)
	}
	if got := get(t, s, "slow", ""); string(got) != "fast writer" {
		t.Fatalf("stored %q, want the fast writer's bytes", got)
	}
	if got := get(t, s, "slow", v); string(got) != "fast writer" {
		t.Fatalf("fast writer's version holds %q", got)
	}
}

// testCreateOrMatch: a conditional create sent again with the bytes the
// key holds (small, or larger than an S3 part, streamed from a reader
// that cannot be read again) is a match at the key's version, and other
// bytes of the same length, or one byte more or less, stay refused.
func testCreateOrMatch(t *testing.T, s objstore.Store) {
	large := make([]byte, 5<<20+777)
	rand.NewChaCha8([32]byte{3}).Read(large)
	for _, body := range [][]byte{[]byte("small body"), large} {
		key := fmt.Sprintf("com/%d", len(body))
		v := put(t, s, key, body, objstore.PutOptions{IfNoneMatch: true})
		got, created, err := objstore.CreateOrMatch(t.Context(), s, key, struct{ io.Reader }{bytes.NewReader(body)}, objstore.PutOptions{})
		if err != nil || created || got != v {
			t.Fatalf("%s with its own bytes: %q created=%v, %v; want version %s", key, got, created, err, v)
		}
		flipped := bytes.Clone(body)
		flipped[len(flipped)-1] ^= 1
		for name, other := range map[string][]byte{"other bytes": flipped, "shorter": body[:len(body)-1], "longer": append(bytes.Clone(body), 0)} {
			_, _, err := objstore.CreateOrMatch(t.Context(), s, key, struct{ io.Reader }{bytes.NewReader(other)}, objstore.PutOptions{Size: int64(len(other))})
			if !objstore.IsPrecondition(err) {
				t.Fatalf("%s, %s: %v, want PRECONDITION_FAILED", key, name, err)
			}
		}
		if info, err := s.Head(t.Context(), key, ""); err != nil || info.Version != v {
			t.Fatalf("%s after refused creates: %+v, %v; want version %s", key, info, err, v)
		}
	}
}

func testNotFound(t *testing.T, s objstore.Store) {
	ctx := t.Context()
	_, err := s.Get(ctx, "absent", "")
	wantCode(t, err, errcode.NotFound, "Get absent key")
	if !objstore.IsNotExist(err) {
		t.Fatalf("Get absent key: errors.Is(ErrNotExist) false: %v", err)
	}
	_, err = s.Head(ctx, "absent", "")
	wantCode(t, err, errcode.NotFound, "Head absent key")
	v := put(t, s, "present", []byte("x"), objstore.PutOptions{})
	for _, bogus := range []objstore.Version{"v999999", "nonsense", "null"} {
		if bogus == v {
			continue
		}
		_, err = s.Get(ctx, "present", bogus)
		wantCode(t, err, errcode.NotFound, "Get unknown version "+string(bogus))
		_, err = s.Head(ctx, "present", bogus)
		wantCode(t, err, errcode.NotFound, "Head unknown version "+string(bogus))
	}
	// A version of one key is not a version of another.
	_, err = s.Get(ctx, "absent", v)
	wantCode(t, err, errcode.NotFound, "Get another key's version")
}

func testListPaging(t *testing.T, s objstore.Store) {
	var keys []string
	for i := range 23 {
		keys = append(keys, fmt.Sprintf("p/%03d", i))
	}
	// Keys whose byte order differs from a naive directory walk: "p/ab-c"
	// sorts before "p/ab/c" because '-' < '/'.
	keys = append(keys, "p/ab/c", "p/ab-c", "p/ab.d", "p/ab0", "p/ab/d/e")
	for _, i := range rand.Perm(len(keys)) {
		put(t, s, keys[i], []byte(keys[i]), objstore.PutOptions{})
	}
	latest := put(t, s, "p/005", []byte("newer"), objstore.PutOptions{})
	slices.Sort(keys)

	var got []string
	after, pages := "", 0
	for {
		page, err := s.List(t.Context(), "p/", after, 5)
		if err != nil {
			t.Fatalf("List(after %q): %v", after, err)
		}
		pages++
		if len(page.Objects) > 5 {
			t.Fatalf("page of %d objects, limit 5", len(page.Objects))
		}
		for _, o := range page.Objects {
			got = append(got, o.Key)
			want := int64(len(o.Key))
			if o.Key == "p/005" {
				want = 5
				if o.Version != latest {
					t.Fatalf("List gives version %s of p/005, want latest %s", o.Version, latest)
				}
			}
			if o.Size != want {
				t.Fatalf("List: %s size %d, want %d", o.Key, o.Size, want)
			}
		}
		if page.Next == "" {
			break
		}
		if pages > 20 {
			t.Fatal("List does not terminate")
		}
		after = page.Next
	}
	if pages < 3 {
		t.Fatalf("listing took %d pages, want more than 2", pages)
	}
	if !slices.Equal(got, keys) {
		t.Fatalf("List order:\n got %q\nwant %q", got, keys)
	}
	// after in the middle of the key space.
	page, err := s.List(t.Context(), "p/", "p/010", 3)
	if err != nil || len(page.Objects) != 3 || page.Objects[0].Key != "p/011" {
		t.Fatalf("List(after p/010) = %+v, %v", page, err)
	}
}

func testListPrefix(t *testing.T, s objstore.Store) {
	for _, k := range []string{"blobs/sha256/aa1", "blobs/sha256/ab2", "blobs/sha256/ab3", "blobs/x", "jobs/ab", "blobsy"} {
		put(t, s, k, []byte(k), objstore.PutOptions{})
	}
	for _, tc := range []struct {
		prefix string
		want   []string
	}{
		{"blobs/sha256/ab", []string{"blobs/sha256/ab2", "blobs/sha256/ab3"}},
		{"blobs/", []string{"blobs/sha256/aa1", "blobs/sha256/ab2", "blobs/sha256/ab3", "blobs/x"}},
		{"blobs", []string{"blobs/sha256/aa1", "blobs/sha256/ab2", "blobs/sha256/ab3", "blobs/x", "blobsy"}},
		{"", []string{"blobs/sha256/aa1", "blobs/sha256/ab2", "blobs/sha256/ab3", "blobs/x", "blobsy", "jobs/ab"}},
		{"nothing/", nil},
		{"jobs/ab", []string{"jobs/ab"}},
	} {
		page, err := s.List(t.Context(), tc.prefix, "", 100)
		if err != nil {
			t.Fatalf("List(%q): %v", tc.prefix, err)
		}
		var got []string
		for _, o := range page.Objects {
			got = append(got, o.Key)
		}
		if !slices.Equal(got, tc.want) || page.Next != "" {
			t.Fatalf("List(%q) = %q next %q, want %q", tc.prefix, got, page.Next, tc.want)
		}
	}
}

// testOddKeys: keys with bytes that URLs, XML and shells treat
// specially, multi-byte UTF-8 and the longest segment and key
// ValidateKey allows round-trip, list in byte order across pages, and
// are deleted by prefix, on every store.
func testOddKeys(t *testing.T, s objstore.Store) {
	long := "odd/" + strings.Repeat("s", objstore.MaxSegmentLen)
	longest := "odd/" + strings.Repeat("k/", (objstore.MaxKeyLen-len("odd/"))/2-1) + "kk"
	keys := []string{"odd/a b", "odd/100%", "odd/100%25", "odd/a+b", "odd/a?b=c&d", "odd/#frag", "odd/~t", "odd/'q\"", "odd/<x>",
		"odd/ü", "odd/日本語", "odd/\U0001F600", "odd/a*b", "odd/a:b", "odd/a;b", "odd/ab ", "odd/ a", "odd/.x", "odd/x.", "odd/..x",
		long, longest}
	if len(longest) != objstore.MaxKeyLen {
		t.Fatalf("test key is %d bytes, want %d", len(longest), objstore.MaxKeyLen)
	}
	for _, k := range keys {
		if err := objstore.ValidateKey(k); err != nil {
			t.Fatalf("test key: %v", err)
		}
		v := put(t, s, k, []byte(k), objstore.PutOptions{IfNoneMatch: true})
		if got := get(t, s, k, v); string(got) != k {
			t.Fatalf("Get(%q) = %q", k, got)
		}
		if info, err := s.Head(t.Context(), k, ""); err != nil || info.Key != k || info.Version != v || info.Size != int64(len(k)) {
			t.Fatalf("Head(%q) = %+v, %v; want version %s size %d", k, info, err, v, len(k))
		}
	}
	slices.Sort(keys)
	if got := Keys(t, s, "odd/", 3); !slices.Equal(got, keys) {
		t.Fatalf("List(odd/) by 3:\n got %q\nwant %q", got, keys)
	}
	if got := Keys(t, s, "odd/100%", 0); !slices.Equal(got, []string{"odd/100%", "odd/100%25"}) {
		t.Fatalf("List(odd/100%%) = %q", got)
	}
	if got := Keys(t, s, "odd/日", 0); !slices.Equal(got, []string{"odd/日本語"}) {
		t.Fatalf("List(odd/日) = %q", got)
	}
	d, ok := s.(objstore.Deleter)
	if !ok {
		return
	}
	if err := d.DeletePrefix(t.Context(), "odd/"); err != nil {
		t.Fatal(err)
	}
	if got := Keys(t, s, "", 0); len(got) != 0 {
		t.Fatalf("after DeletePrefix(odd/): %q", got)
	}
}

// testDeletePrefix: every real store can delete scratch (objstore.Deleter):
// all versions of the keys under the prefix go, nothing beside it does,
// and a deleted key can be created afresh.
func testDeletePrefix(t *testing.T, s objstore.Store) {
	d, ok := s.(objstore.Deleter)
	if !ok {
		t.Fatalf("%T does not implement objstore.Deleter", s)
	}
	keep := []string{"blobs/k", "jobs/ab", "jobs/b/x"}
	for _, k := range append([]string{"jobs/a/x", "jobs/a/y/z"}, keep...) {
		put(t, s, k, []byte(k), objstore.PutOptions{})
	}
	v1 := put(t, s, "jobs/a/x", []byte("second version"), objstore.PutOptions{})
	v0 := put(t, s, "jobs/a/y/z", []byte("second version"), objstore.PutOptions{})
	if err := d.DeletePrefix(t.Context(), "jobs/a/"); err != nil {
		t.Fatal(err)
	}
	page, err := s.List(t.Context(), "", "", 100)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, o := range page.Objects {
		got = append(got, o.Key)
	}
	if !slices.Equal(got, keep) {
		t.Fatalf("after DeletePrefix(jobs/a/): keys %q, want %q", got, keep)
	}
	for _, k := range keep {
		if b := get(t, s, k, ""); string(b) != k {
			t.Fatalf("%s reads %q after deleting a neighbour", k, b)
		}
	}
	for _, kv := range []struct {
		key string
		v   objstore.Version
	}{{"jobs/a/x", ""}, {"jobs/a/x", v1}, {"jobs/a/y/z", v0}} {
		_, err := s.Get(t.Context(), kv.key, kv.v)
		wantCode(t, err, errcode.NotFound, "get of a deleted version")
	}
	// No version, delete marker or directory is left to block a create.
	put(t, s, "jobs/a/x", []byte("again"), objstore.PutOptions{IfNoneMatch: true})
	if b := get(t, s, "jobs/a/x", ""); string(b) != "again" {
		t.Fatalf("recreated key reads %q", b)
	}
	if err := d.DeletePrefix(t.Context(), "nothing/here/"); err != nil {
		t.Fatalf("DeletePrefix of an empty prefix: %v", err)
	}
	for _, bad := range []string{"", "/", "jobs", "jobs/a", "../jobs/", "/jobs/"} {
		wantCode(t, d.DeletePrefix(t.Context(), bad), errcode.BadKey, "DeletePrefix("+bad+")")
	}
	if b := get(t, s, "jobs/a/x", ""); string(b) != "again" {
		t.Fatalf("a refused DeletePrefix changed the store: jobs/a/x reads %q", b)
	}
}

func testBadKeys(t *testing.T, s objstore.Store) {
	ctx := t.Context()
	for _, k := range []string{"../x", "/abs", "a//b", "a/../../b", "", "a/./b", "a/", "@tmp/x", "a\\b", "a\x00b", "\xff", strings.Repeat("k", 1025),
		// What an S3 listing (XML 1.0) cannot carry: such a key was
		// stored, then never listed, nor ever deleted.
		"a\x01b", "a/b\x1f", "a\ufffeb", "a\nb"} {
		_, err := s.Put(ctx, k, strings.NewReader("x"), objstore.PutOptions{})
		wantCode(t, err, errcode.BadKey, fmt.Sprintf("Put(%q)", k))
		if !errors.Is(err, objstore.ErrBadKey) {
			t.Fatalf("Put(%q): errors.Is(ErrBadKey) false: %v", k, err)
		}
		_, err = s.Get(ctx, k, "")
		wantCode(t, err, errcode.BadKey, fmt.Sprintf("Get(%q)", k))
		_, err = s.Head(ctx, k, "")
		wantCode(t, err, errcode.BadKey, fmt.Sprintf("Head(%q)", k))
	}
	page, err := s.List(ctx, "", "", 100)
	if err != nil || len(page.Objects) != 0 {
		t.Fatalf("after rejected Puts, List = %+v, %v; want empty", page, err)
	}
}

func testEmptyBody(t *testing.T, s objstore.Store) {
	v := put(t, s, "empty", nil, objstore.PutOptions{IfNoneMatch: true, SHA256: sha256.Sum256(nil)})
	if got := get(t, s, "empty", v); len(got) != 0 {
		t.Fatalf("empty object read back %d bytes", len(got))
	}
	info, err := s.Head(t.Context(), "empty", v)
	if err != nil || info.Size != 0 {
		t.Fatalf("Head(empty) = %+v, %v", info, err)
	}
}

func testLargeBody(t *testing.T, s objstore.Store) {
	body := make([]byte, 5<<20+12345)
	r := rand.NewChaCha8([32]byte{7})
	r.Read(body)
	sum := sha256.Sum256(body)
	// Once with a known size, once streamed with size unknown.
	for i, opts := range []objstore.PutOptions{{Size: int64(len(body)), SHA256: sum}, {}} {
		key := fmt.Sprintf("large/%d", i)
		v := put(t, s, key, body, opts)
		rc, err := s.Get(t.Context(), key, v)
		if err != nil {
			t.Fatal(err)
		}
		vr := verifyread.New(rc, key, sum, int64(len(body)))
		if _, err := io.Copy(io.Discard, vr); err != nil {
			t.Fatalf("large body %d read back wrong: %v", i, err)
		}
		vr.Close()
	}
}

func testSHA256Option(t *testing.T, s objstore.Store) {
	body := []byte("content")
	wrong := sha256.Sum256([]byte("other content"))
	_, err := s.Put(t.Context(), "h", bytes.NewReader(body), objstore.PutOptions{IfNoneMatch: true, SHA256: wrong})
	wantCode(t, err, errcode.DigestMismatch, "Put with wrong SHA256")
	_, err = s.Head(t.Context(), "h", "")
	wantCode(t, err, errcode.NotFound, "Head after rejected Put")
	// Nothing was written, so the conditional create is still available.
	v := put(t, s, "h", body, objstore.PutOptions{IfNoneMatch: true, SHA256: sha256.Sum256(body)})
	if got := get(t, s, "h", v); !bytes.Equal(got, body) {
		t.Fatalf("got %q", got)
	}
}

// endlessReader yields zero bytes forever, so only
// cancellation can end a Put reading it.
type endlessReader struct{}

func (endlessReader) Read(p []byte) (int, error) {
	n := min(len(p), 1024)
	clear(p[:n])
	return n, nil
}

func testCanceled(t *testing.T, s objstore.Store) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := s.Put(ctx, "x", strings.NewReader("x"), objstore.PutOptions{}); err == nil {
		t.Fatal("Put with a canceled context succeeded")
	}
	if _, err := s.Get(ctx, "x", ""); err == nil {
		t.Fatal("Get with a canceled context succeeded")
	}
	if _, err := s.List(ctx, "", "", 10); err == nil {
		t.Fatal("List with a canceled context succeeded")
	}
	// Cancel in the middle of an endless upload: it must stop and leave
	// nothing behind.
	ctx, cancel = context.WithCancel(t.Context())
	body := &cancelAfter{r: endlessReader{}, n: 8 << 20, cancel: cancel}
	if _, err := s.Put(ctx, "y", body, objstore.PutOptions{}); err == nil {
		t.Fatal("Put canceled mid-body succeeded")
	}
	_, err := s.Head(t.Context(), "y", "")
	wantCode(t, err, errcode.NotFound, "Head after canceled Put")
}

// cancelAfter calls cancel once n bytes have been read through it.
type cancelAfter struct {
	r      io.Reader
	n      int
	cancel context.CancelFunc
}

func (c *cancelAfter) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n -= n
	if c.n <= 0 {
		c.cancel()
	}
	return n, err
}

// Bench measures Put (conditional create of a fresh key) and Get (read by
// version to EOF) throughput for a body of size bytes.
func Bench(b *testing.B, s objstore.Store, size int) {
	body := make([]byte, size)
	rand.NewChaCha8([32]byte{1}).Read(body)
	b.Run("Put", func(b *testing.B) {
		b.SetBytes(int64(size))
		for i := 0; b.Loop(); i++ {
			if _, err := s.Put(b.Context(), fmt.Sprintf("bench/put/%d", i), bytes.NewReader(body), objstore.PutOptions{IfNoneMatch: true, Size: int64(size)}); err != nil {
				b.Fatal(err)
			}
		}
	})
	v, err := s.Put(b.Context(), "bench/get", bytes.NewReader(body), objstore.PutOptions{})
	if err != nil {
		b.Fatal(err)
	}
	sum := sha256.Sum256(body)
	b.Run("Get", func(b *testing.B) {
		b.SetBytes(int64(size))
		for b.Loop() {
			rc, err := s.Get(b.Context(), "bench/get", v)
			if err != nil {
				b.Fatal(err)
			}
			_, err = io.Copy(io.Discard, verifyread.New(rc, "bench/get", sum, int64(size)))
			rc.Close()
			if err != nil {
				b.Fatal(err)
			}
		}
	})
}

// testHiddenBlob: a store that lists versions lists them newest first,
// and a blob with versions written on top of it out of band (other bytes,
// then an empty object) is still read by ReadBlob, at its own version.
func testHiddenBlob(t *testing.T, s objstore.Store) {
	vl, ok := s.(objstore.VersionLister)
	if !ok {
		t.Skip("the store lists no versions")
	}
	ctx := t.Context()
	doc := []byte(`{"schema":"example"}`)
	d, v1, _, err := objstore.PutBlob(ctx, s, doc)
	if err != nil {
		t.Fatal(err)
	}
	key := objstore.BlobKey(d)
	v2 := put(t, s, key, []byte("other bytes on top"), objstore.PutOptions{})
	v3 := put(t, s, key, nil, objstore.PutOptions{})
	vs, err := vl.Versions(ctx, key, 10)
	if err != nil || len(vs) != 3 || vs[0].Version != v3 || vs[1].Version != v2 || vs[2].Version != v1 || vs[2].Size != int64(len(doc)) {
		t.Fatalf("Versions = %+v, %v; want %s, %s, %s", vs, err, v3, v2, v1)
	}
	if vs, err := vl.Versions(ctx, key, 2); err != nil || len(vs) != 2 || vs[1].Version != v2 {
		t.Fatalf("Versions(limit 2) = %+v, %v", vs, err)
	}
	if vs, err := vl.Versions(ctx, "no/such/key", 10); err != nil || len(vs) != 0 {
		t.Fatalf("Versions of a missing key = %+v, %v; want none", vs, err)
	}
	got, v, err := objstore.ReadBlob(ctx, s, d, 1<<20)
	if err != nil || !bytes.Equal(got, doc) || v != v1 {
		t.Fatalf("ReadBlob under two versions: %q, %s, %v; want the document at %s", got, v, err, v1)
	}
	// No version hashes to the digest: the latest version's error.
	d3 := sha256.Sum256([]byte("a document never stored"))
	put(t, s, objstore.BlobKey(d3), []byte("junk"), objstore.PutOptions{})
	put(t, s, objstore.BlobKey(d3), []byte("more junk"), objstore.PutOptions{})
	if _, _, err := objstore.ReadBlob(ctx, s, d3, 1<<20); errcode.Of(err) != errcode.SizeMismatch && errcode.Of(err) != errcode.DigestMismatch {
		t.Fatalf("ReadBlob of a digest no version has: %v, want a size or digest mismatch", err)
	}
}

// testPrefixKeys: a key that is a path-prefix of another ("a" and
// "a/b"), put in either order. A store either keeps both (the file
// store, whose keys are directories of their versions; AWS S3), each
// read, stated and listed as itself, or refuses the second Put with
// BAD_KEY naming it and keeps the first as it was (an S3 server with a
// POSIX back end, versitygw among them). Either way a directory that
// only leads to a key is no object (NOT_FOUND), and a key that is stored
// is never NOT_FOUND.
func testPrefixKeys(t *testing.T, s objstore.Store) {
	ctx := t.Context()
	for _, order := range [][2]string{{"p/a", "p/a/b"}, {"q/a/b", "q/a"}} {
		first, second := order[0], order[1]
		prefix := first[:2]
		v1 := put(t, s, first, []byte("body of "+first), objstore.PutOptions{})
		v2, err := s.Put(ctx, second, strings.NewReader("body of "+second), objstore.PutOptions{})
		want := []string{first}
		if err == nil {
			want = append(want, second)
			if got := get(t, s, second, v2); string(got) != "body of "+second {
				t.Fatalf("%s after %s: Get = %q", second, first, got)
			}
		} else {
			wantCode(t, err, errcode.BadKey, fmt.Sprintf("Put %s after %s", second, first))
			if !strings.Contains(err.Error(), fmt.Sprintf("%q", second)) {
				t.Fatalf("Put %s after %s: %v does not name the key", second, first, err)
			}
			_, err = s.Head(ctx, second, "")
			wantCode(t, err, errcode.NotFound, fmt.Sprintf("Head %s refused after %s", second, first))
		}
		slices.Sort(want)
		if got := get(t, s, first, v1); string(got) != "body of "+first {
			t.Fatalf("%s after a Put of %s: Get = %q", first, second, got)
		}
		for _, k := range want {
			info, err := s.Head(ctx, k, "")
			if err != nil || info.Key != k || info.Size != int64(len("body of "+k)) {
				t.Fatalf("Head %s (%s then %s): %+v, %v", k, first, second, info, err)
			}
		}
		if got := Keys(t, s, prefix, 0); !slices.Equal(got, want) {
			t.Fatalf("List %s (%s then %s): %q, want %q", prefix, first, second, got, want)
		}
		// "p" and "q" only lead to keys.
		_, err = s.Head(ctx, prefix[:1], "")
		wantCode(t, err, errcode.NotFound, "Head of a directory that leads to keys")
		_, err = s.Get(ctx, prefix[:1], "")
		wantCode(t, err, errcode.NotFound, "Get of a directory that leads to keys")
	}
}

// testListPageBoundary: a listing of exactly a default page (1,000
// keys), then of one key more, gives every key once, in order, whether
// it is read with the store's own page size or with 1,000 a page, and
// keys that differ only past the boundary (one key a prefix of the
// next, a shared 200-byte stem) are neither lost nor repeated by a
// listing that resumes after either. ListSizes lists the same keys,
// sizes and times as List.
func testListPageBoundary(t *testing.T, s objstore.Store) {
	ctx := t.Context()
	stem := "pb/" + strings.Repeat("s", 200) + "/"
	var keys []string
	for i := range 1000 {
		keys = append(keys, fmt.Sprintf("%sk%04d", stem, i))
	}
	putAll := func(ks []string) {
		var wg sync.WaitGroup
		sem := make(chan struct{}, 8)
		for _, k := range ks {
			wg.Go(func() {
				sem <- struct{}{}
				defer func() { <-sem }()
				if _, err := s.Put(ctx, k, strings.NewReader(k), objstore.PutOptions{Ephemeral: true}); err != nil {
					t.Errorf("Put(%q): %v", k, err)
				}
			})
		}
		wg.Wait()
		if t.Failed() {
			t.FailNow()
		}
	}
	putAll(keys)
	check := func(want []string) {
		t.Helper()
		for _, limit := range []int{0, 1000, 999} {
			if got := Keys(t, s, "pb/", limit); !slices.Equal(got, want) {
				t.Fatalf("%d keys listed by %d: %d listed, first difference at %d", len(want), limit, len(got), firstDiff(got, want))
			}
		}
		var sized []objstore.ObjectInfo
		for after := ""; ; {
			page, err := objstore.ListSizes(ctx, s, "pb/", after, 0)
			if err != nil {
				t.Fatal(err)
			}
			sized = append(sized, page.Objects...)
			if page.Next == "" {
				break
			}
			after = page.Next
		}
		if len(sized) != len(want) {
			t.Fatalf("ListSizes: %d objects, want %d", len(sized), len(want))
		}
		for i, o := range sized {
			if o.Key != want[i] || o.Size != int64(len(o.Key)) || o.Modified.IsZero() {
				t.Fatalf("ListSizes: object %d is %+v, want key %q of %d bytes with its time", i, o, want[i], len(want[i]))
			}
		}
	}
	check(keys)
	// The 1,001st key sorts inside the first page; the page boundary
	// moves by one and the last key lands on a second page.
	extra := []string{stem + "k0999x", stem + "k0999+/y", stem + "k0998 "}
	putAll(extra)
	keys = append(keys, extra...)
	slices.Sort(keys)
	check(keys)
	for _, c := range []struct {
		after string
		want  []string
	}{
		{stem + "k0999", []string{stem + "k0999+/y", stem + "k0999x"}},
		{stem + "k0999+", []string{stem + "k0999+/y", stem + "k0999x"}},
		{stem + "k0998", []string{stem + "k0998 ", stem + "k0999", stem + "k0999+/y", stem + "k0999x"}},
		{stem + "k0999x", nil},
		{"pc", nil},
	} {
		page, err := s.List(ctx, "pb/", c.after, 10)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, o := range page.Objects {
			got = append(got, o.Key)
		}
		if !slices.Equal(got, c.want) || page.Next != "" {
			t.Fatalf("List after %q: %q next %q, want %q", c.after, got, page.Next, c.want)
		}
	}
	if page, err := s.List(ctx, "pb/", "pa", 1); err != nil || len(page.Objects) != 1 || page.Objects[0].Key != keys[0] || page.Next != keys[0] {
		t.Fatalf("List after a string before the prefix, by 1: %+v, %v; want %q then more", page, err, keys[0])
	}
}

// firstDiff is the first index where a and b differ.
func firstDiff(a, b []string) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// testListOddPrefixes: prefixes that end inside a segment and hold the
// bytes URLs and XML treat specially list the same keys on every store,
// and a prefix that would leave the store's root, or is not one a key
// could start with, is BAD_KEY on List, DeletePrefix and Versions.
func testListOddPrefixes(t *testing.T, s objstore.Store) {
	ctx := t.Context()
	keys := []string{"o/a b/c", "o/a bc", "o/a+b", "o/a%2Bb", "o/a%20b", "o/a&b", "o/ab", "o/..a", "o/.../x", "o/é/x", "o/e\u0301", "o/e/x"}
	for _, k := range keys {
		put(t, s, k, []byte(k), objstore.PutOptions{})
	}
	for _, c := range []struct {
		prefix string
		want   []string
	}{
		{"o/a ", []string{"o/a b/c", "o/a bc"}},
		{"o/a b/", []string{"o/a b/c"}},
		{"o/a+", []string{"o/a+b"}},
		{"o/a%", []string{"o/a%20b", "o/a%2Bb"}},
		{"o/a%2", []string{"o/a%20b", "o/a%2Bb"}},
		{"o/a&", []string{"o/a&b"}},
		{"o/..", []string{"o/.../x", "o/..a"}},
		{"o/...", []string{"o/.../x"}},
		{"o/é", []string{"o/é/x"}},
		{"o/e", []string{"o/e/x", "o/e\u0301"}},
	} {
		if got := Keys(t, s, c.prefix, 1); !slices.Equal(got, c.want) {
			t.Fatalf("List(%q) = %q, want %q", c.prefix, got, c.want)
		}
	}
	for _, bad := range []string{"/", "/o", "/o/", "../", "../o", "o/../", "o/../o", "o//", "o/./", "./o", "@tmp/", "o\\", "o\x00", "\xff", "o/\xc3"} {
		_, err := s.List(ctx, bad, "", 10)
		wantCode(t, err, errcode.BadKey, fmt.Sprintf("List(%q)", bad))
		if d, ok := s.(objstore.Deleter); ok && strings.HasSuffix(bad, "/") {
			wantCode(t, d.DeletePrefix(ctx, bad), errcode.BadKey, fmt.Sprintf("DeletePrefix(%q)", bad))
		}
		if vl, ok := s.(objstore.VersionLister); ok {
			_, err := vl.Versions(ctx, bad, 10)
			wantCode(t, err, errcode.BadKey, fmt.Sprintf("Versions(%q)", bad))
		}
	}
	slices.Sort(keys)
	if got := Keys(t, s, "", 0); !slices.Equal(got, keys) {
		t.Fatalf("after refused requests: %q, want %q", got, keys)
	}
}

// testListRandomPages: over random key sets whose segments differ in
// '.', '-', '0', ' ', '/', NFC and NFD letters and other non-ASCII (so
// that a key's byte order and its directories' order part: "a" < "a.b" <
// "a.b/x" < "a/x" < "a0"), listing page by page, a random number of keys
// a page, from random after points (keys, keys cut short or extended,
// strings between keys) under random prefixes gives exactly the keys a
// sorted model holds after that point, each once and in order, no page
// longer than asked, and the same keys as one listing of the store's own
// page size. A key that is a path prefix of another may be refused
// (BAD_KEY) and is then left out of the model.
func testListRandomPages(t *testing.T, s objstore.Store) {
	ctx := t.Context()
	segs := []string{"a", "a.b", "a-", "a0", "a b", "0", "-", "-x", ".x", "é", "e\u0301", "e", "日", "z~", "a.b.c", "ab"}
	rng := rand.New(rand.NewPCG(7, 11))
	var model []string
	for len(model) < 120 {
		var k string
		for d := 1 + rng.IntN(3); d > 0; d-- {
			if k != "" {
				k += "/"
			}
			k += segs[rng.IntN(len(segs))]
		}
		if slices.Contains(model, k) {
			continue
		}
		_, err := s.Put(ctx, k, strings.NewReader(k), objstore.PutOptions{})
		if errcode.Of(err) == errcode.BadKey {
			continue
		}
		if err != nil {
			t.Fatalf("Put(%q): %v", k, err)
		}
		model = append(model, k)
	}
	slices.Sort(model)
	if got := Keys(t, s, "", 0); !slices.Equal(got, model) {
		t.Fatalf("List of every key = %q, want %q", got, model)
	}
	// cut returns k cut short at a random rune boundary.
	cut := func(k string) string {
		r := []rune(k)
		return string(r[:rng.IntN(len(r)+1)])
	}
	pick := func() string { return model[rng.IntN(len(model))] }
	for range 20 {
		prefix := ""
		switch rng.IntN(4) {
		case 1:
			prefix = cut(pick())
		case 2:
			prefix = pick() + "/"
		case 3:
			prefix = segs[rng.IntN(len(segs))]
		}
		if objstore.ValidatePrefix(prefix) != nil {
			continue
		}
		for range 5 {
			after := ""
			switch rng.IntN(6) {
			case 1:
				after = pick()
			case 2:
				after = cut(pick())
			case 3:
				after = pick() + []string{".", "/", "0", "-", "/a", "\u00ff"}[rng.IntN(6)]
			case 4:
				after = prefix + cut(segs[rng.IntN(len(segs))])
			case 5:
				after = prefix
			}
			var want []string
			for _, k := range model {
				if strings.HasPrefix(k, prefix) && k > after {
					want = append(want, k)
				}
			}
			limit := []int{1, 2, 3, 7}[rng.IntN(4)]
			var got []string
			for from := after; ; {
				page, err := s.List(ctx, prefix, from, limit)
				if err != nil {
					t.Fatalf("List(%q, after %q, %d): %v", prefix, from, limit, err)
				}
				if len(page.Objects) > limit {
					t.Fatalf("List(%q, after %q, %d) gave %d objects", prefix, from, limit, len(page.Objects))
				}
				for _, o := range page.Objects {
					got = append(got, o.Key)
				}
				if page.Next == "" {
					break
				}
				if page.Next <= from || len(got) > len(model) {
					t.Fatalf("List(%q, after %q, %d): next page after %q", prefix, from, limit, page.Next)
				}
				from = page.Next
			}
			if !slices.Equal(got, want) {
				t.Fatalf("List(%q) after %q, %d a page = %q, want %q", prefix, after, limit, got, want)
			}
			full, err := s.List(ctx, prefix, after, 0)
			if err != nil {
				t.Fatal(err)
			}
			var fullKeys []string
			for _, o := range full.Objects {
				fullKeys = append(fullKeys, o.Key)
			}
			if full.Next != "" || !slices.Equal(fullKeys, got) {
				t.Fatalf("List(%q, after %q) in one page = %q (next %q), page by page %q", prefix, after, fullKeys, full.Next, got)
			}
		}
	}
}

// testConditionalCreateRaceAtCommit: writers whose bodies are all read
// to their last byte before any of them may end (so every fail-fast
// check sees the key absent and the race is decided where the version
// is committed), small and larger than an S3 part: exactly one create
// wins, every other is PRECONDITION_FAILED, and the key holds the
// winner's bytes at the winner's version, its only one.
func testConditionalCreateRaceAtCommit(t *testing.T, s objstore.Store) {
	for _, size := range []int{100, 5<<20 + 100} {
		const n = 4
		key := fmt.Sprintf("race-at-commit/%d", size)
		var (
			mu      sync.Mutex
			winners []int
			vers    []objstore.Version
			arrived sync.WaitGroup
			wg      sync.WaitGroup
		)
		arrived.Add(n)
		bodies := make([][]byte, n)
		for i := range n {
			bodies[i] = bytes.Repeat([]byte{byte('a' + i)}, size)
			wg.Go(func() {
				body := &heldEnd{r: bytes.NewReader(bodies[i][:size-1]), last: bodies[i][size-1:], arrived: &arrived}
				v, err := s.Put(t.Context(), key, body, objstore.PutOptions{IfNoneMatch: true})
				switch {
				case err == nil:
					mu.Lock()
					winners = append(winners, i)
					vers = append(vers, v)
					mu.Unlock()
				case !objstore.IsPrecondition(err):
					t.Errorf("%d bytes, writer %d: %v, want PRECONDITION_FAILED", size, i, err)
				}
				if !body.done {
					// Refused before its last byte: let the others on.
					arrived.Done()
				}
			})
		}
		wg.Wait()
		if t.Failed() {
			t.FailNow()
		}
		if len(winners) != 1 {
			t.Fatalf("%d bytes: %d conditional creates won (%v), want exactly 1", size, len(winners), winners)
		}
		if got := get(t, s, key, ""); !bytes.Equal(got, bodies[winners[0]]) {
			t.Fatalf("%d bytes: the key holds %d bytes not the winner's", size, len(got))
		}
		if info, err := s.Head(t.Context(), key, ""); err != nil || info.Version != vers[0] || info.Size != int64(size) {
			t.Fatalf("%d bytes: latest is %+v, %v; want the winner's version %s", size, info, err, vers[0])
		}
		if vl, ok := s.(objstore.VersionLister); ok {
			if vs, err := vl.Versions(t.Context(), key, 10); err != nil || len(vs) != 1 {
				t.Fatalf("%d bytes: versions %+v, %v; want the winner's alone", size, vs, err)
			}
		}
	}
}

// heldEnd reads r, then waits for every writer's arrival at the same
// point before it gives last and the end.
type heldEnd struct {
	r       io.Reader
	last    []byte
	arrived *sync.WaitGroup
	done    bool
}

func (h *heldEnd) Read(p []byte) (int, error) {
	if n, err := h.r.Read(p); n > 0 || err != io.EOF {
		return n, err
	}
	if !h.done {
		h.done = true
		h.arrived.Done()
		h.arrived.Wait()
	}
	if len(h.last) == 0 {
		return 0, io.EOF
	}
	n := copy(p, h.last)
	h.last = h.last[n:]
	return n, nil
}

// failAfter returns the bytes of r until n of them are read, the last
// of them with err, and err from then on.
type failAfter struct {
	r   io.Reader
	n   int
	err error
}

func (f *failAfter) Read(p []byte) (int, error) {
	if f.n <= 0 {
		return 0, f.err
	}
	n, err := f.r.Read(p[:min(len(p), f.n)])
	if f.n -= n; f.n <= 0 && err == nil {
		err = f.err
	}
	return n, err
}

// testBodyErrorHalfway: a Put whose body fails halfway, small or after
// more than an S3 part, with or without its size given, fails with the
// reader's error and leaves no version: the key is NOT_FOUND, lists
// nothing, and a conditional create of it still wins.
func testBodyErrorHalfway(t *testing.T, s objstore.Store) {
	// io.ErrUnexpectedEOF is what a body cut short says (net/http's
	// response bodies, compress/gzip, io.ReadFull): it is an error, not
	// the body's end.
	for _, broken := range []error{errcode.New(errcode.StoreUnavailable, "the body's source went away"), io.ErrUnexpectedEOF} {
		testBodyError(t, s, broken)
	}
	put(t, s, "halfway/64", []byte("whole"), objstore.PutOptions{IfNoneMatch: true})
}

func testBodyError(t *testing.T, s objstore.Store, broken error) {
	for _, size := range []int{64 << 10, 12 << 20} {
		for _, known := range []bool{false, true} {
			key := fmt.Sprintf("halfway/%d-%v", size, known)
			o := objstore.PutOptions{}
			if known {
				o.Size = int64(size)
			}
			body := &failAfter{r: endlessReader{}, n: size / 2, err: broken}
			_, err := s.Put(t.Context(), key, body, o)
			if !errors.Is(err, broken) {
				t.Fatalf("%s: Put with a body failing halfway with %q: %v, want that error", key, broken, err)
			}
			_, err = s.Head(t.Context(), key, "")
			wantCode(t, err, errcode.NotFound, fmt.Sprintf("%s: Head after a Put whose body failed with %q", key, broken))
			_, err = s.Get(t.Context(), key, "")
			wantCode(t, err, errcode.NotFound, key+": Get after the failed Put")
			if got := Keys(t, s, "halfway/", 0); len(got) != 0 {
				t.Fatalf("%s: listed after the failed Put: %q", key, got)
			}
		}
	}
}
