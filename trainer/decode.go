package trainer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"sync"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/mapper"
	"github.com/shardproof/shardproof/objstore"
)

// DecodeVerifier returns a ShardVerifier that decodes each cached shard
// with the verifier's own mapper (footer and column-chunk bounds, Arrow
// schema against the manifest's recordSchema, logical digest, records,
// tokens, memberSetDigest), reading the cache entry rather than the
// store. Record schema documents are read from s by digest, once each.
// Every failure of the shard is reported; the error's code is the first
// one's.
func DecodeVerifier(s objstore.Store) ShardVerifier {
	var (
		mu      sync.Mutex
		schemas = map[manifest.Digest]*manifest.RecordSchema{}
	)
	schemaOf := func(ctx context.Context, d manifest.Digest) (*manifest.RecordSchema, error) {
		mu.Lock()
		defer mu.Unlock()
		if rs := schemas[d]; rs != nil {
			return rs, nil
		}
		b, _, err := objstore.ReadBlob(ctx, s, d, manifest.MaxDocumentSize)
		if err != nil {
			return nil, fmt.Errorf("record schema %s: %w", d, err)
		}
		rs, err := manifest.DecodeRecordSchema(b)
		if err != nil {
			return nil, fmt.Errorf("record schema %s: %w", d, err)
		}
		schemas[d] = rs
		return rs, nil
	}
	return func(ctx context.Context, path string, rel *manifest.Release, desc manifest.Shard) error {
		rs, err := schemaOf(ctx, rel.RecordSchema)
		if err != nil {
			return err
		}
		o := mapper.Options{Store: &entryStore{path: path, desc: desc}, Schema: rs, SchemaDigest: rel.RecordSchema}
		res, err := mapper.MapShard(ctx, o, mapper.Input{Side: mapper.SideRelease, Desc: desc}, func(*mapper.Tuple) error { return nil })
		if err != nil {
			return err
		}
		if len(res.Failures) > 0 {
			msgs := make([]string, len(res.Failures))
			for i, f := range res.Failures {
				msgs[i] = f.Code + ": " + f.Detail
			}
			return errcode.New(errcode.Code(res.Failures[0].Code), "%s", strings.Join(msgs, "; "))
		}
		if !res.Decoded {
			return errcode.New(errcode.DecodeError, "%s did not decode", desc.ID)
		}
		return nil
	}
}

// entryStore presents one cache entry as the only object of a read-only
// store, at the key and version the descriptor names, so the mapper reads
// the cached bytes through its usual path.
type entryStore struct {
	path string
	desc manifest.Shard
}

var errReadOnly = errcode.New(errcode.Internal, "cache entry store is read-only")

func (e *entryStore) match(key string, v objstore.Version) bool {
	return key == e.desc.Digest.BlobKey() && (v == "" || string(v) == e.desc.ObjectVersion)
}

func (e *entryStore) Put(context.Context, string, io.Reader, objstore.PutOptions) (objstore.Version, error) {
	return "", errReadOnly
}

func (e *entryStore) Get(_ context.Context, key string, v objstore.Version) (io.ReadCloser, error) {
	if !e.match(key, v) {
		return nil, objstore.ErrNotExist
	}
	// As Cache.check opens it: an entry replaced since it was hashed by a
	// link (out of the cache) or a FIFO (whose open waits for a writer,
	// deaf to ctx) fails here, and the worker verifies it again.
	f, err := os.OpenFile(e.path, os.O_RDONLY|entryOpenFlags, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, objstore.ErrNotExist
	}
	if err != nil {
		return nil, errcode.Wrap(errcode.IO, err, "cache entry %s", e.path)
	}
	return f, nil
}

func (e *entryStore) Head(_ context.Context, key string, v objstore.Version) (objstore.ObjectInfo, error) {
	if !e.match(key, v) {
		return objstore.ObjectInfo{}, objstore.ErrNotExist
	}
	st, err := os.Lstat(e.path)
	if errors.Is(err, fs.ErrNotExist) {
		return objstore.ObjectInfo{}, objstore.ErrNotExist
	}
	if err != nil {
		return objstore.ObjectInfo{}, errcode.Wrap(errcode.IO, err, "cache entry %s", e.path)
	}
	if !st.Mode().IsRegular() {
		return objstore.ObjectInfo{}, errcode.New(errcode.IO, "cache entry %s: not a regular file (%s)", e.path, st.Mode().Type())
	}
	return objstore.ObjectInfo{Key: key, Version: objstore.Version(e.desc.ObjectVersion), Size: st.Size(), Modified: st.ModTime()}, nil
}

func (e *entryStore) List(context.Context, string, string, int) (objstore.ListPage, error) {
	return objstore.ListPage{}, errReadOnly
}
