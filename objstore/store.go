package objstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/shardproof/shardproof/internal/errcode"
)

// Store is an object store with immutable versions.
//
// Every implementation MUST pass the conformance suite in objstore/storetest.
// The contract:
//   - Put writes the whole body as a new immutable version of key and returns
//     its version id only after the bytes are durable. A Put that returns an
//     error leaves no visible version behind.
//   - Put with PutOptions.IfNoneMatch creates the key only if it has no
//     version at all; otherwise it returns an error satisfying
//     errors.Is(err, ErrPreconditionFailed) and changes nothing. Among any
//     number of concurrent conditional creates of one key exactly one wins.
//   - Get and Head with a non-empty version read exactly that version, never
//     another; with an empty version they read the latest.
//   - A version, once returned by Put, has the same bytes forever.
//   - List returns keys (latest version of each) in ascending byte order,
//     strictly after `after`, at most limit entries (limit <= 0 means an
//     implementation-chosen page size). An empty Next means the listing is
//     complete.
//   - Keys are slash-separated relative paths; see ValidateKey. Callers
//     MUST NOT use a key that is a path-prefix of another key ("a" and
//     "a/b"): posix-backed S3 gateways refuse the second with BAD_KEY, and
//     the conformance suite does not require it (the file store allows it).
type Store interface {
	Put(ctx context.Context, key string, body io.Reader, opts PutOptions) (Version, error)
	Get(ctx context.Context, key string, version Version) (io.ReadCloser, error)
	Head(ctx context.Context, key string, version Version) (ObjectInfo, error)
	List(ctx context.Context, prefix, after string, limit int) (ListPage, error)
}

// Deleter is implemented by stores that can remove keys with every one of
// their versions. shardproof deletes only scratch: the jobs/<plan>/ tree
// of a verification whose report is stored. Content-addressed blobs are
// never deleted.
type Deleter interface {
	// DeletePrefix removes every version of every key under prefix, which
	// must be a valid prefix ending in "/" (so "jobs/a/" never touches
	// "jobs/ab"). A prefix with no keys is not an error. Keys created
	// under prefix while it runs may survive it.
	DeletePrefix(ctx context.Context, prefix string) error
}

// ValidateDeletePrefix checks a DeletePrefix argument.
func ValidateDeletePrefix(prefix string) error {
	if !strings.HasSuffix(prefix, "/") || len(prefix) < 2 {
		return errcode.New(errcode.BadKey, "delete prefix %q: want a non-empty prefix ending in /", prefix)
	}
	if err := ValidateKey(strings.TrimSuffix(prefix, "/")); err != nil {
		return errcode.Wrap(errcode.BadKey, err, "delete prefix %q", prefix)
	}
	return nil
}

// VersionLister is implemented by stores that can list a key's versions:
// ReadBlob uses it to find a blob hidden by a version written on top of it
// out of band.
type VersionLister interface {
	// Versions returns up to limit versions of key, newest first; not
	// deleted ones (an S3 delete marker is no version). A key with none
	// gives an empty list.
	Versions(ctx context.Context, key string, limit int) ([]ObjectInfo, error)
}

// SizeLister is implemented by stores whose List asks for each key's
// latest version apart (S3: ListObjectsV2 names none, and List heads
// every key it lists). ListSizes lists as List does, with each object's
// Key, Size and Modified but no Version: a page per request.
type SizeLister interface {
	ListSizes(ctx context.Context, prefix, after string, limit int) (ListPage, error)
}

// ListSizes is s.ListSizes where s is a SizeLister, else s.List: for
// callers that need no version ids (how much a prefix holds, and since
// when).
func ListSizes(ctx context.Context, s Store, prefix, after string, limit int) (ListPage, error) {
	if sl, ok := s.(SizeLister); ok {
		return sl.ListSizes(ctx, prefix, after, limit)
	}
	return s.List(ctx, prefix, after, limit)
}

// Version is an opaque, immutable version id issued by a Store.
type Version string

// PutOptions modify Put.
type PutOptions struct {
	// IfNoneMatch makes Put a conditional create: it fails with
	// ErrPreconditionFailed if the key already has any version.
	IfNoneMatch bool
	// Size, if > 0, is the body's length: a hint implementations may use to
	// choose an upload strategy (single PUT or multipart). Zero means unknown.
	Size int64
	// SHA256, when non-zero, is the body's sha256; implementations that can
	// have the server check it do so, and every implementation rejects a
	// body whose hash differs (nothing is written).
	SHA256 [32]byte
	// Ephemeral marks scratch data that every reader checks by digest
	// and that can be computed again (a local verification's shuffle
	// files): the file store neither fsyncs it nor the directories that
	// name it, so the kernel may drop it before it reaches the disk. A
	// process that crashes or is stopped leaves it intact; a machine
	// that crashes may not. S3 ignores it.
	Ephemeral bool
}

// ObjectInfo describes one version of an object.
type ObjectInfo struct {
	Key      string
	Version  Version
	Size     int64
	Modified time.Time
}

// ListPage is one page of a listing.
type ListPage struct {
	Objects []ObjectInfo
	// Next, if non-empty, is the `after` argument for the next page.
	Next string
}

// Sentinel conditions. Implementations wrap them so errors.Is works and
// errcode.Of gives the stable code.
var (
	ErrPreconditionFailed = errcode.New(errcode.PreconditionFailed, "object already exists")
	ErrNotExist           = errcode.New(errcode.NotFound, "object or version does not exist")
	ErrBadKey             = errcode.New(errcode.BadKey, "invalid key")
)

// KeyError reports a key that is not allowed, with the reason.
type KeyError struct {
	Key    string
	Reason string
}

func (e *KeyError) Error() string {
	return fmt.Sprintf("key %q: %s", e.Key, e.Reason)
}

// ErrorCode implements errcode.Coder.
func (e *KeyError) ErrorCode() errcode.Code { return errcode.BadKey }

// Is makes errors.Is(err, ErrBadKey) true.
func (e *KeyError) Is(target error) bool { return target == ErrBadKey }

// IsNotExist reports whether err means a key or version is absent.
func IsNotExist(err error) bool { return errors.Is(err, ErrNotExist) }

// IsPrecondition reports whether err is a failed conditional create.
func IsPrecondition(err error) bool { return errors.Is(err, ErrPreconditionFailed) }
