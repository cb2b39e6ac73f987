package faults_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/objstore"
	"github.com/shardproof/shardproof/objstore/faults"
	"github.com/shardproof/shardproof/objstore/file"
	"github.com/shardproof/shardproof/objstore/storetest"
)

func realStore(t *testing.T) objstore.Store {
	t.Helper()
	s, err := file.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func read(t *testing.T, s objstore.Store, key string) []byte {
	t.Helper()
	rc, err := s.Get(t.Context(), key, "")
	if err != nil {
		t.Fatalf("Get(%s): %v", key, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func only(key string) func(string) bool { return func(k string) bool { return k == key } }

func TestBitFlip(t *testing.T) {
	s := realStore(t)
	data := bytes.Repeat([]byte{0x55}, 100000)
	d, v, _, _ := objstore.PutBlob(t.Context(), s, data)
	key := objstore.BlobKey(d)
	s.Put(t.Context(), "other", bytes.NewReader(data), objstore.PutOptions{})
	f := &faults.BitFlip{Store: s, Match: only(key), Offset: 70000, Bit: 3}

	got := read(t, f, key)
	var diff []int
	for i := range got {
		if got[i] != data[i] {
			diff = append(diff, i)
		}
	}
	if len(got) != len(data) || !slices.Equal(diff, []int{70000}) || got[70000] != 0x55^8 {
		t.Fatalf("BitFlip changed bytes %v (len %d), want only byte 70000 bit 3", diff, len(got))
	}
	if !bytes.Equal(read(t, f, "other"), data) {
		t.Fatal("BitFlip touched an unselected key")
	}
	// The verifying reader notices; size still matches.
	r, _ := objstore.GetBlob(t.Context(), f, d, v, int64(len(data)))
	_, err := io.ReadAll(r)
	if errcode.Of(err) != errcode.DigestMismatch {
		t.Fatalf("GetBlob through BitFlip: %v, want DIGEST_MISMATCH", err)
	}
	if info, _ := f.Head(t.Context(), key, ""); info.Size != int64(len(data)) {
		t.Fatalf("Head changed: %+v", info)
	}
}

func TestTruncate(t *testing.T) {
	s := realStore(t)
	data := []byte("0123456789")
	d, v, _, _ := objstore.PutBlob(t.Context(), s, data)
	f := &faults.Truncate{Store: s, N: 4}
	if got := read(t, f, objstore.BlobKey(d)); string(got) != "0123" {
		t.Fatalf("Truncate gave %q", got)
	}
	if info, _ := f.Head(t.Context(), objstore.BlobKey(d), v); info.Size != 10 {
		t.Fatalf("Head changed: %+v", info)
	}
	r, _ := objstore.GetBlob(t.Context(), f, d, v, 10)
	if _, err := io.ReadAll(r); errcode.Of(err) != errcode.SizeMismatch {
		t.Fatalf("GetBlob through Truncate: %v, want SIZE_MISMATCH", err)
	}
}

func TestErrorOnce(t *testing.T) {
	boom := errcode.New(errcode.StoreUnavailable, "injected")
	ctx := t.Context()
	for _, m := range []faults.Method{faults.Put, faults.Get, faults.Head, faults.List} {
		t.Run(string(m), func(t *testing.T) {
			s := realStore(t)
			s.Put(ctx, "k", strings.NewReader("x"), objstore.PutOptions{})
			f := &faults.ErrorOnce{Store: s, Method: m, Err: boom}
			call := map[faults.Method]func() error{
				faults.Put: func() error {
					_, err := f.Put(ctx, "k2", strings.NewReader("y"), objstore.PutOptions{IfNoneMatch: true})
					return err
				},
				faults.Get:  func() error { _, err := f.Get(ctx, "k", ""); return err },
				faults.Head: func() error { _, err := f.Head(ctx, "k", ""); return err },
				faults.List: func() error { _, err := f.List(ctx, "", "", 0); return err },
			}
			// Other methods are not affected, before or after.
			for om, c := range call {
				if om != m && om != faults.Put {
					if err := c(); err != nil {
						t.Fatalf("%s broke unselected %s: %v", m, om, err)
					}
				}
			}
			if f.Fired() {
				t.Fatal("fired before the selected method was called")
			}
			if err := call[m](); !errors.Is(err, boom) {
				t.Fatalf("first %s: %v, want the injected error", m, err)
			}
			if err := call[m](); err != nil {
				t.Fatalf("second %s: %v, want pass-through", m, err)
			}
			if !f.Fired() {
				t.Fatal("Fired() false after firing")
			}
		})
	}
	// A failed Put wrote nothing.
	s := realStore(t)
	f := &faults.ErrorOnce{Store: s, Method: faults.Put, Match: only("sel"), Err: boom}
	if _, err := f.Put(ctx, "unsel", strings.NewReader("x"), objstore.PutOptions{}); err != nil {
		t.Fatalf("unselected key: %v", err)
	}
	if _, err := f.Put(ctx, "sel", strings.NewReader("x"), objstore.PutOptions{}); !errors.Is(err, boom) {
		t.Fatalf("selected key: %v", err)
	}
	if _, err := s.Head(ctx, "sel", ""); !objstore.IsNotExist(err) {
		t.Fatalf("failed Put reached the store: %v", err)
	}
}

// A lost answer stores the Put and fails it once; the retry of a
// conditional create then meets its own object.
func TestLostAnswer(t *testing.T) {
	ctx := t.Context()
	s := realStore(t)
	lost := fmt.Errorf("retried: %w", objstore.ErrPreconditionFailed)
	f := &faults.LostAnswer{Store: s, Match: only("sel"), Err: lost}
	if _, err := f.Put(ctx, "unsel", strings.NewReader("x"), objstore.PutOptions{IfNoneMatch: true}); err != nil || f.Fired() {
		t.Fatalf("unselected key: %v, fired %v", err, f.Fired())
	}
	if _, err := f.Put(ctx, "sel", strings.NewReader("mine"), objstore.PutOptions{IfNoneMatch: true}); !errors.Is(err, lost) || !f.Fired() {
		t.Fatalf("selected key: %v, fired %v", err, f.Fired())
	}
	if got := read(t, s, "sel"); string(got) != "mine" {
		t.Fatalf("the Put whose answer was lost stored %q, want %q", got, "mine")
	}
	// Refused by the store: its own error, not the injected one.
	if _, err := f.Put(ctx, "sel", strings.NewReader("again"), objstore.PutOptions{IfNoneMatch: true}); !objstore.IsPrecondition(err) || errors.Is(err, lost) {
		t.Fatalf("conditional create of an existing key: %v", err)
	}
	if _, err := f.Put(ctx, "sel", strings.NewReader("v2"), objstore.PutOptions{}); err != nil {
		t.Fatalf("a later Put: %v, want pass-through", err)
	}
	if err := f.DeletePrefix(ctx, "sel/"); err != nil {
		t.Fatalf("DeletePrefix: %v", err)
	}
}

func TestStaleList(t *testing.T) {
	s := realStore(t)
	ctx := t.Context()
	for _, k := range []string{"a/1", "a/2", "a/3", "b/1"} {
		s.Put(ctx, k, strings.NewReader(k), objstore.PutOptions{})
	}
	f := &faults.StaleList{Store: s, Omit: only("a/2")}
	if got := storetest.Keys(t, f, "a/", 0); !slices.Equal(got, []string{"a/1", "a/3"}) {
		t.Fatalf("Omit: %v", got)
	}
	if err := f.Freeze(ctx); err != nil {
		t.Fatal(err)
	}
	s.Put(ctx, "a/4", strings.NewReader("late"), objstore.PutOptions{})
	v2, _ := s.Put(ctx, "a/1", strings.NewReader("newer"), objstore.PutOptions{})
	if got := storetest.Keys(t, f, "a/", 1); !slices.Equal(got, []string{"a/1", "a/3"}) {
		t.Fatalf("frozen listing (paged by 1): %v", got)
	}
	page, _ := f.List(ctx, "a/1", "", 0)
	if len(page.Objects) != 1 || page.Objects[0].Version == v2 {
		t.Fatalf("frozen listing shows the new version: %+v", page.Objects)
	}
	// Reads are not stale.
	if got := read(t, f, "a/4"); string(got) != "late" {
		t.Fatalf("Get through StaleList: %q", got)
	}
	if got := storetest.Keys(t, s, "a/", 0); !slices.Equal(got, []string{"a/1", "a/2", "a/3", "a/4"}) {
		t.Fatalf("real store listing: %v", got)
	}
}

// Latency delays Gets of the keys it selects and hides the file store's
// *os.File behind a plain reader; the bytes are the store's.
func TestLatency(t *testing.T) {
	s := realStore(t)
	ctx := t.Context()
	for _, k := range []string{"slow", "fast"} {
		s.Put(ctx, k, strings.NewReader(k+" bytes"), objstore.PutOptions{})
	}
	l := &faults.Latency{Store: s, Delay: 30 * time.Millisecond, Match: only("slow")}
	start := time.Now()
	rc, err := l.Get(ctx, "slow", "")
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 30*time.Millisecond {
		t.Fatalf("Get returned after %v, before the delay", d)
	}
	if _, ok := rc.(*os.File); ok {
		t.Fatal("a delayed body is still the store's *os.File")
	}
	if b, _ := io.ReadAll(rc); string(b) != "slow bytes" {
		t.Fatalf("delayed body %q", b)
	}
	rc.Close()
	rc, err = l.Get(ctx, "fast", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := rc.(*os.File); !ok {
		t.Fatalf("an unselected key's body is %T, want the store's own", rc)
	}
	rc.Close()
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := l.Get(canceled, "slow", ""); errcode.Of(err) != errcode.Canceled {
		t.Fatalf("Get with a canceled context: %v", err)
	}
}

// ClockSkew reports every modification time shifted by its Shift, in
// Head and List alike, and changes nothing else.
func TestClockSkew(t *testing.T) {
	s := realStore(t)
	ctx := t.Context()
	v, err := s.Put(ctx, "dir/k", strings.NewReader("bytes"), objstore.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	real, err := s.Head(ctx, "dir/k", v)
	if err != nil {
		t.Fatal(err)
	}
	for _, shift := range []time.Duration{10 * time.Minute, -10 * time.Minute} {
		c := &faults.ClockSkew{Store: s, Shift: shift}
		info, err := c.Head(ctx, "dir/k", v)
		if err != nil || !info.Modified.Equal(real.Modified.Add(shift)) || info.Version != v || info.Size != real.Size {
			t.Fatalf("shift %v: Head = %+v, %v; want %+v modified %v later", shift, info, err, real, shift)
		}
		page, err := c.List(ctx, "dir/", "", 0)
		if err != nil || len(page.Objects) != 1 || !page.Objects[0].Modified.Equal(real.Modified.Add(shift)) {
			t.Fatalf("shift %v: List = %+v, %v", shift, page, err)
		}
		if b := read(t, c, "dir/k"); string(b) != "bytes" {
			t.Fatalf("shift %v: body %q", shift, b)
		}
	}
}

// LatePut lets Puts through until armed; the next selected Put then
// hangs until its context ends, fails, and is stored only when Land is
// called, over whatever was written meanwhile.
func TestLatePut(t *testing.T) {
	s := realStore(t)
	ctx := t.Context()
	l := &faults.LatePut{Store: s, Match: only("sel")}
	if _, err := l.Put(ctx, "sel", strings.NewReader("before"), objstore.PutOptions{}); err != nil {
		t.Fatalf("Put before Arm: %v", err)
	}
	held := l.Arm()
	if _, err := l.Put(ctx, "unsel", strings.NewReader("x"), objstore.PutOptions{}); err != nil {
		t.Fatalf("unselected key: %v", err)
	}
	cut, cancel := context.WithCancel(ctx)
	failed := make(chan error, 1)
	go func() {
		_, err := l.Put(cut, "sel", strings.NewReader("late"), objstore.PutOptions{})
		failed <- err
	}()
	<-held
	cancel()
	if err := <-failed; errcode.Of(err) != errcode.Canceled {
		t.Fatalf("the held Put: %v, want CANCELED once its context ended", err)
	}
	if got := read(t, s, "sel"); string(got) != "before" {
		t.Fatalf("before Land the key holds %q", got)
	}
	if err := l.DeletePrefix(ctx, "sel/"); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Put(ctx, "sel", strings.NewReader("meanwhile"), objstore.PutOptions{}); err != nil {
		t.Fatalf("a Put after the held one: %v, want pass-through", err)
	}
	if landed, err := l.Land(ctx); !landed || err != nil {
		t.Fatalf("Land = %v, %v", landed, err)
	}
	if got := read(t, s, "sel"); string(got) != "late" {
		t.Fatalf("after Land the key holds %q, want the held Put's bytes", got)
	}
	if landed, err := l.Land(ctx); landed || err != nil {
		t.Fatalf("a second Land = %v, %v; want nothing left", landed, err)
	}
}
