package objstore

import (
	"context"
	"net/url"
	"strings"
	"sync"

	"github.com/shardproof/shardproof/internal/errcode"
)

// Opener opens a Store for a URL of its scheme. create says whether a
// store that does not exist yet may be created (a file store's directory);
// without it, a missing store is STORE_UNAVAILABLE.
type Opener func(ctx context.Context, u *url.URL, create bool) (Store, error)

var (
	openersMu sync.RWMutex
	openers   = map[string]Opener{}
)

// Register makes an implementation available to Open for a URL scheme.
// Implementations call it from init; the scheme "file" also serves plain
// paths.
func Register(scheme string, o Opener) {
	openersMu.Lock()
	defer openersMu.Unlock()
	openers[scheme] = o
}

// Open opens the existing store named by rawURL: "file:///path", a plain
// path, or "s3://bucket/prefix". The implementation's package must be
// imported. A file store's directory must exist.
func Open(ctx context.Context, rawURL string) (Store, error) {
	return open(ctx, rawURL, false)
}

// Create is Open for a writer that may start a store: a file store's
// directory is created if missing. An S3 bucket is never created.
func Create(ctx context.Context, rawURL string) (Store, error) {
	return open(ctx, rawURL, true)
}

func open(ctx context.Context, rawURL string, create bool) (Store, error) {
	if rawURL == "" {
		return nil, errcode.New(errcode.Usage, "no store given (use --store URL or a path, or set $SHARDPROOF_STORE)")
	}
	u := &url.URL{Scheme: "file", Path: rawURL}
	if strings.Contains(rawURL, "://") {
		var err error
		if u, err = url.Parse(rawURL); err != nil {
			return nil, errcode.Wrap(errcode.Usage, err, "store URL %q", rawURL)
		}
	} else if scheme, ok := schemeTypo(rawURL); ok {
		// "s3:/bucket/x" or "file:/data" would otherwise be a relative
		// directory named "s3:" or "file:": created by synth and stage,
		// and STORE_UNAVAILABLE (not a URL error) for everything else.
		want := scheme + "://…"
		if scheme == "file" {
			want = "file:///abs/path"
		}
		return nil, errcode.New(errcode.Usage, "store %q: scheme %q without \"//\" (want %s); for a directory of that name, write ./%s", rawURL, scheme, want, rawURL)
	}
	openersMu.RLock()
	o := openers[u.Scheme]
	openersMu.RUnlock()
	if o == nil {
		return nil, errcode.New(errcode.Usage, "store URL %q: unknown scheme %q", rawURL, u.Scheme)
	}
	return o(ctx, u, create)
}

// schemeTypo reports whether a store argument without "://" starts with
// the name of a registered scheme and a colon ("s3:/bucket", "file:/x"):
// a URL with a slash missing, not a directory anyone means.
func schemeTypo(rawURL string) (string, bool) {
	i := strings.IndexByte(rawURL, ':')
	if i <= 0 {
		return "", false
	}
	scheme := strings.ToLower(rawURL[:i])
	openersMu.RLock()
	_, known := openers[scheme]
	openersMu.RUnlock()
	return scheme, known
}
