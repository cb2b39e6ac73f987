package objstore

import (
	"context"
	"io"
	"strings"

	"github.com/shardproof/shardproof/internal/errcode"
)

// Routed is one Store made of two: the keys under Prefix live in Scratch,
// every other key in Main. `verify --scratch` uses it to keep a job's
// shuffle files and task commit records (jobs/) out of the release's store,
// say on a local disk or in a bucket with an expiry rule, while plans,
// reports and everything the job reads stay where they are.
//
// A key is in exactly one of the two stores, so the contract of Store holds
// for the whole: a List whose prefix spans both merges their listings. Main
// keys under Prefix (left there by runs without a scratch) are not seen.
type Routed struct {
	Main, Scratch Store
	// Prefix is a valid delete prefix (non-empty, ending in "/"), e.g. "jobs/".
	Prefix string
}

// NewRouted returns the Store that keeps keys under prefix in scratch and
// the rest in main.
func NewRouted(main, scratch Store, prefix string) (*Routed, error) {
	if err := ValidateDeletePrefix(prefix); err != nil {
		return nil, err
	}
	return &Routed{Main: main, Scratch: scratch, Prefix: prefix}, nil
}

// For returns the store that holds key.
func (r *Routed) For(key string) Store {
	if strings.HasPrefix(key, r.Prefix) {
		return r.Scratch
	}
	return r.Main
}

// String names both stores, for messages.
func (r *Routed) String() string {
	return storeName(r.Main) + " (" + r.Prefix + " in " + storeName(r.Scratch) + ")"
}

func storeName(s Store) string {
	if n, ok := s.(interface{ String() string }); ok {
		return n.String()
	}
	return "store"
}

// Put implements Store.
func (r *Routed) Put(ctx context.Context, key string, body io.Reader, opts PutOptions) (Version, error) {
	return r.For(key).Put(ctx, key, body, opts)
}

// Get implements Store. The body is the owning store's own (a file
// store's *os.File, which the mapper maps), not a wrapper.
func (r *Routed) Get(ctx context.Context, key string, v Version) (io.ReadCloser, error) {
	return r.For(key).Get(ctx, key, v)
}

// Head implements Store.
func (r *Routed) Head(ctx context.Context, key string, v Version) (ObjectInfo, error) {
	return r.For(key).Head(ctx, key, v)
}

// List implements Store: a prefix under Prefix lists Scratch, one outside
// it lists Main, and a shorter one ("", "jo", "jobs") merges Main's keys
// outside Prefix with Scratch's keys under it.
// Versions implements VersionLister when the store key belongs to does.
func (r *Routed) Versions(ctx context.Context, key string, limit int) ([]ObjectInfo, error) {
	if vl, ok := r.For(key).(VersionLister); ok {
		return vl.Versions(ctx, key, limit)
	}
	return nil, nil
}

func (r *Routed) List(ctx context.Context, prefix, after string, limit int) (ListPage, error) {
	switch {
	case strings.HasPrefix(prefix, r.Prefix):
		return r.Scratch.List(ctx, prefix, after, limit)
	case !strings.HasPrefix(r.Prefix, prefix):
		return r.Main.List(ctx, prefix, after, limit)
	}
	if err := ValidatePrefix(prefix); err != nil {
		return ListPage{}, err
	}
	if limit <= 0 {
		limit = 1000
	}
	main, mainMore, err := r.listOwned(ctx, r.Main, prefix, after, limit, false)
	if err != nil {
		return ListPage{}, err
	}
	scratch, scratchMore, err := r.listOwned(ctx, r.Scratch, r.Prefix, after, limit, true)
	if err != nil {
		return ListPage{}, err
	}
	var page ListPage
	for len(page.Objects) < limit && (len(main) > 0 || len(scratch) > 0) {
		if len(scratch) == 0 || (len(main) > 0 && main[0].Key < scratch[0].Key) {
			page.Objects, main = append(page.Objects, main[0]), main[1:]
		} else {
			page.Objects, scratch = append(page.Objects, scratch[0]), scratch[1:]
		}
	}
	if len(main) > 0 || len(scratch) > 0 || mainMore || scratchMore {
		page.Next = page.Objects[len(page.Objects)-1].Key
	}
	return page, nil
}

// listOwned returns up to limit keys of s under prefix after after that s
// owns in r (under r.Prefix when scratch, outside it otherwise), and
// whether s may hold more.
func (r *Routed) listOwned(ctx context.Context, s Store, prefix, after string, limit int, scratch bool) ([]ObjectInfo, bool, error) {
	var out []ObjectInfo
	for {
		page, err := s.List(ctx, prefix, after, limit-len(out))
		if err != nil {
			return nil, false, err
		}
		for _, o := range page.Objects {
			if strings.HasPrefix(o.Key, r.Prefix) == scratch {
				out = append(out, o)
			}
		}
		if page.Next == "" {
			return out, false, nil
		}
		if len(out) == limit {
			return out, true, nil
		}
		after = page.Next
	}
}

// DeletePrefix implements Deleter: the prefix is deleted in the store
// that owns its keys, or in both when it spans them. The stores must
// implement Deleter.
func (r *Routed) DeletePrefix(ctx context.Context, prefix string) error {
	if err := ValidateDeletePrefix(prefix); err != nil {
		return err
	}
	del := func(s Store) error {
		d, ok := s.(Deleter)
		if !ok {
			return errcode.New(errcode.Usage, "store %s cannot delete; remove %s by hand", storeName(s), prefix)
		}
		return d.DeletePrefix(ctx, prefix)
	}
	switch {
	case strings.HasPrefix(prefix, r.Prefix):
		return del(r.Scratch)
	case !strings.HasPrefix(r.Prefix, prefix):
		return del(r.Main)
	}
	// prefix is a parent directory of Prefix ("a/" of "a/jobs/").
	if err := del(r.Scratch); err != nil {
		return err
	}
	return del(r.Main)
}
