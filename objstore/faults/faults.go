package faults

import (
	"bytes"
	"context"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/objstore"
)

// matches reports whether key is selected by match; nil selects every key.
func matches(match func(string) bool, key string) bool { return match == nil || match(key) }

// BitFlip flips bit Bit (0-7) of the byte at Offset in Get bodies of keys
// selected by Match (nil: every key). Bodies shorter than Offset+1 are
// unchanged. Head, List and Put pass through, so the size still matches and
// only the digest can reveal the damage.
type BitFlip struct {
	objstore.Store
	Match  func(key string) bool
	Offset int64
	Bit    uint8
}

// Get returns the wrapped store's body with one bit flipped.
func (b *BitFlip) Get(ctx context.Context, key string, v objstore.Version) (io.ReadCloser, error) {
	rc, err := b.Store.Get(ctx, key, v)
	if err != nil || !matches(b.Match, key) {
		return rc, err
	}
	return &flipReader{rc: rc, at: b.Offset, mask: 1 << (b.Bit & 7)}, nil
}

type flipReader struct {
	rc   io.ReadCloser
	pos  int64
	at   int64
	mask byte
}

func (f *flipReader) Read(p []byte) (int, error) {
	n, err := f.rc.Read(p)
	if f.at >= f.pos && f.at < f.pos+int64(n) {
		p[f.at-f.pos] ^= f.mask
	}
	f.pos += int64(n)
	return n, err
}

func (f *flipReader) Close() error { return f.rc.Close() }

// Truncate makes Get bodies of keys selected by Match (nil: every key) end
// after N bytes, as a torn download would. Head still reports the full size.
type Truncate struct {
	objstore.Store
	Match func(key string) bool
	N     int64
}

// Get returns at most N bytes of the wrapped store's body.
func (t *Truncate) Get(ctx context.Context, key string, v objstore.Version) (io.ReadCloser, error) {
	rc, err := t.Store.Get(ctx, key, v)
	if err != nil || !matches(t.Match, key) {
		return rc, err
	}
	return struct {
		io.Reader
		io.Closer
	}{io.LimitReader(rc, t.N), rc}, nil
}

// BodyError makes Get bodies of keys selected by Match (nil: every key)
// end in Err after their first byte, as a connection lost mid-read would.
type BodyError struct {
	objstore.Store
	Match func(key string) bool
	Err   error
}

// Get returns the wrapped store's body cut by Err after one byte.
func (b *BodyError) Get(ctx context.Context, key string, v objstore.Version) (io.ReadCloser, error) {
	rc, err := b.Store.Get(ctx, key, v)
	if err != nil || !matches(b.Match, key) {
		return rc, err
	}
	return struct {
		io.Reader
		io.Closer
	}{io.MultiReader(io.LimitReader(rc, 1), errReader{b.Err}), rc}, nil
}

// errReader fails every read with err.
type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// Method names one Store method.
type Method string

// The Store methods ErrorOnce can break.
const (
	Put  Method = "Put"
	Get  Method = "Get"
	Head Method = "Head"
	List Method = "List"
	// DeletePrefix is objstore.Deleter's method.
	DeletePrefix Method = "DeletePrefix"
)

// ErrorOnce fails the first call of Method whose key (for List: prefix) is
// selected by Match (nil: every call) with Err, then passes every call
// through: a transient failure that a retry should survive. A failed Put
// does not reach the wrapped store, so nothing is written.
type ErrorOnce struct {
	objstore.Store
	Method Method
	Match  func(key string) bool
	Err    error

	mu    sync.Mutex
	fired bool
}

// Fired reports whether the error has been returned.
func (e *ErrorOnce) Fired() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.fired
}

func (e *ErrorOnce) fire(m Method, key string) bool {
	if m != e.Method || !matches(e.Match, key) {
		return false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.fired {
		return false
	}
	e.fired = true
	return true
}

// Put implements objstore.Store.
func (e *ErrorOnce) Put(ctx context.Context, key string, body io.Reader, opts objstore.PutOptions) (objstore.Version, error) {
	if e.fire(Put, key) {
		return "", e.Err
	}
	return e.Store.Put(ctx, key, body, opts)
}

// Get implements objstore.Store.
func (e *ErrorOnce) Get(ctx context.Context, key string, v objstore.Version) (io.ReadCloser, error) {
	if e.fire(Get, key) {
		return nil, e.Err
	}
	return e.Store.Get(ctx, key, v)
}

// Head implements objstore.Store.
func (e *ErrorOnce) Head(ctx context.Context, key string, v objstore.Version) (objstore.ObjectInfo, error) {
	if e.fire(Head, key) {
		return objstore.ObjectInfo{}, e.Err
	}
	return e.Store.Head(ctx, key, v)
}

// List implements objstore.Store.
func (e *ErrorOnce) List(ctx context.Context, prefix, after string, limit int) (objstore.ListPage, error) {
	if e.fire(List, prefix) {
		return objstore.ListPage{}, e.Err
	}
	return e.Store.List(ctx, prefix, after, limit)
}

// LostAnswer stores the first Put of a key selected by Match (nil: every
// key) in the wrapped store and then fails it with Err, as a Put whose
// answer the network lost: the caller learns nothing of what was
// written. An SDK that retries such a conditional create (PutOptions
// IfNoneMatch) gets a precondition failure from the object it wrote
// itself, so Err is typically one satisfying
// objstore.ErrPreconditionFailed. A Put the wrapped store refuses is
// returned unchanged, and later Puts pass through.
type LostAnswer struct {
	objstore.Store
	Match func(key string) bool
	Err   error

	mu    sync.Mutex
	fired bool
}

// Fired reports whether an answer has been lost.
func (l *LostAnswer) Fired() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.fired
}

// Put implements objstore.Store.
func (l *LostAnswer) Put(ctx context.Context, key string, body io.Reader, opts objstore.PutOptions) (objstore.Version, error) {
	v, err := l.Store.Put(ctx, key, body, opts)
	if err != nil || !matches(l.Match, key) {
		return v, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.fired {
		return v, nil
	}
	l.fired = true
	return "", l.Err
}

// DeletePrefix implements objstore.Deleter, passing through to the
// wrapped store, which must implement it.
func (l *LostAnswer) DeletePrefix(ctx context.Context, prefix string) error {
	d, ok := l.Store.(objstore.Deleter)
	if !ok {
		return errcode.New(errcode.Internal, "faults: %T cannot delete", l.Store)
	}
	return d.DeletePrefix(ctx, prefix)
}

// StaleList serves List from an eventually-consistent view: keys selected
// by Omit are left out, and after Freeze every List answers from the
// listing captured then, so keys written later are missing and their
// versions stale. Put, Get and Head pass through.
type StaleList struct {
	objstore.Store
	Omit func(key string) bool

	mu     sync.Mutex
	frozen []objstore.ObjectInfo // nil until Freeze
}

// Freeze captures the wrapped store's complete current listing; later List
// calls answer from it.
func (s *StaleList) Freeze(ctx context.Context) error {
	var all []objstore.ObjectInfo
	after := ""
	for {
		page, err := s.Store.List(ctx, "", after, 0)
		if err != nil {
			return err
		}
		all = append(all, page.Objects...)
		if page.Next == "" {
			break
		}
		after = page.Next
	}
	s.mu.Lock()
	s.frozen = all
	s.mu.Unlock()
	return nil
}

// List implements objstore.Store with omitted keys and, after Freeze, the
// frozen listing.
func (s *StaleList) List(ctx context.Context, prefix, after string, limit int) (objstore.ListPage, error) {
	s.mu.Lock()
	frozen := s.frozen
	s.mu.Unlock()
	if frozen == nil {
		page, err := s.Store.List(ctx, prefix, after, limit)
		if err != nil {
			return page, err
		}
		page.Objects = slices.DeleteFunc(page.Objects, func(o objstore.ObjectInfo) bool { return s.Omit != nil && s.Omit(o.Key) })
		return page, nil
	}
	if err := objstore.ValidatePrefix(prefix); err != nil {
		return objstore.ListPage{}, err
	}
	if limit <= 0 {
		limit = 1000
	}
	var page objstore.ListPage
	for _, o := range frozen {
		if !strings.HasPrefix(o.Key, prefix) || o.Key <= after || (s.Omit != nil && s.Omit(o.Key)) {
			continue
		}
		if len(page.Objects) == limit {
			page.Next = page.Objects[limit-1].Key
			break
		}
		page.Objects = append(page.Objects, o)
	}
	return page, nil
}

// DeletePrefix implements objstore.Deleter, passing through to the wrapped
// store, which must implement it.
func (e *ErrorOnce) DeletePrefix(ctx context.Context, prefix string) error {
	if e.fire(DeletePrefix, prefix) {
		return e.Err
	}
	d, ok := e.Store.(objstore.Deleter)
	if !ok {
		return errcode.New(errcode.Internal, "faults: %T cannot delete", e.Store)
	}
	return d.DeletePrefix(ctx, prefix)
}

// Latency delays every Get of a key selected by Match (nil: every key) by
// Delay, as a remote store's round trip would, and hands out the body
// behind a plain reader, so a caller reads it as it would an S3 body
// rather than map a local file. Put, Head and List pass through.
type Latency struct {
	objstore.Store
	Match func(key string) bool
	Delay time.Duration
}

// Get implements objstore.Store.
func (l *Latency) Get(ctx context.Context, key string, v objstore.Version) (io.ReadCloser, error) {
	if !matches(l.Match, key) {
		return l.Store.Get(ctx, key, v)
	}
	t := time.NewTimer(l.Delay)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return nil, errcode.Wrap(errcode.Canceled, ctx.Err(), "get %s", key)
	case <-t.C:
	}
	rc, err := l.Store.Get(ctx, key, v)
	if err != nil {
		return rc, err
	}
	return struct {
		io.Reader
		io.Closer
	}{rc, rc}, nil
}

// ClockSkew shifts every modification time the wrapped store reports
// (Head, List) by Shift, as a store whose clock runs Shift ahead of this
// machine's would (behind it, when Shift is negative): S3 times an
// object by its server's clock, not by the writer's. Put, Get and
// DeletePrefix pass through.
type ClockSkew struct {
	objstore.Store
	Shift time.Duration
}

// Head implements objstore.Store.
func (c *ClockSkew) Head(ctx context.Context, key string, v objstore.Version) (objstore.ObjectInfo, error) {
	info, err := c.Store.Head(ctx, key, v)
	if err == nil && !info.Modified.IsZero() {
		info.Modified = info.Modified.Add(c.Shift)
	}
	return info, err
}

// List implements objstore.Store.
func (c *ClockSkew) List(ctx context.Context, prefix, after string, limit int) (objstore.ListPage, error) {
	page, err := c.Store.List(ctx, prefix, after, limit)
	for i := range page.Objects {
		if o := &page.Objects[i]; !o.Modified.IsZero() {
			o.Modified = o.Modified.Add(c.Shift)
		}
	}
	return page, err
}

// DeletePrefix implements objstore.Deleter, passing through to the
// wrapped store, which must implement it.
func (c *ClockSkew) DeletePrefix(ctx context.Context, prefix string) error {
	d, ok := c.Store.(objstore.Deleter)
	if !ok {
		return errcode.New(errcode.Internal, "faults: %T cannot delete", c.Store)
	}
	return d.DeletePrefix(ctx, prefix)
}

// LatePut stores one Put late: the first Put of a key selected by Match
// (nil: every key) after Arm hangs until its caller gives up (its
// context ends) and fails, as a request its client cut does, yet reaches
// the wrapped store when Land is called, after whatever the caller did
// next: a server that had the whole request and finished it after the
// client closed the connection. Other Puts, and Get, Head, List and
// DeletePrefix, pass through.
type LatePut struct {
	objstore.Store
	Match func(key string) bool

	mu    sync.Mutex
	armed bool
	held  chan struct{}
	late  func(context.Context) error
}

// Arm makes the next selected Put late, and returns a channel closed
// once that Put hangs.
func (l *LatePut) Arm() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.armed {
		l.armed, l.held = true, make(chan struct{})
	}
	return l.held
}

// Land stores the Put held back, if there is one, in the wrapped store,
// and reports whether there was.
func (l *LatePut) Land(ctx context.Context) (bool, error) {
	l.mu.Lock()
	late := l.late
	l.late = nil
	l.mu.Unlock()
	if late == nil {
		return false, nil
	}
	return true, late(ctx)
}

// Put implements objstore.Store.
func (l *LatePut) Put(ctx context.Context, key string, body io.Reader, opts objstore.PutOptions) (objstore.Version, error) {
	l.mu.Lock()
	if !l.armed || l.late != nil || !matches(l.Match, key) {
		l.mu.Unlock()
		return l.Store.Put(ctx, key, body, opts)
	}
	b, err := io.ReadAll(body)
	if err != nil {
		l.mu.Unlock()
		return "", err
	}
	l.armed = false
	l.late = func(ctx context.Context) error {
		_, err := l.Store.Put(ctx, key, bytes.NewReader(b), opts)
		return err
	}
	close(l.held)
	l.mu.Unlock()
	<-ctx.Done()
	return "", errcode.Wrap(errcode.Canceled, ctx.Err(), "put %s", key)
}

// DeletePrefix implements objstore.Deleter, passing through to the
// wrapped store, which must implement it.
func (l *LatePut) DeletePrefix(ctx context.Context, prefix string) error {
	d, ok := l.Store.(objstore.Deleter)
	if !ok {
		return errcode.New(errcode.Internal, "faults: %T cannot delete", l.Store)
	}
	return d.DeletePrefix(ctx, prefix)
}
