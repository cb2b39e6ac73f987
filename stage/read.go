package stage

import (
	"bytes"
	"context"
	"io"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/shardproof/shardproof/internal/canon"
	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/objstore"
	"github.com/shardproof/shardproof/tuplehash"
)

// MaxShardBytes bounds ReadFile: shards are read whole into memory.
const MaxShardBytes = 4 << 30

// ReadFile reads exactly the descriptor's version through the verifying
// reader: the bytes must have the descriptor's size and digest.
func ReadFile(ctx context.Context, s objstore.Store, d manifest.Shard) ([]byte, error) {
	if d.Size < 0 || d.Size > MaxShardBytes {
		return nil, errcode.New(errcode.BadCount, "%s: size %d out of range", d.ID, d.Size)
	}
	rc, err := objstore.GetBlob(ctx, s, d.Digest, objstore.Version(d.ObjectVersion), d.Size)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	buf := bytes.NewBuffer(make([]byte, 0, d.Size))
	if _, err := io.Copy(buf, rc); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// DecodeParquet decodes a whole Parquet file into one record batch. It is
// for trusted bytes (the writer's own, tests); the verifier is mapper.
func DecodeParquet(ctx context.Context, data []byte) (arrow.RecordBatch, error) {
	tbl, err := pqarrow.ReadTable(ctx, bytes.NewReader(data), nil, pqarrow.ArrowReadProperties{}, memory.DefaultAllocator)
	if err != nil {
		return nil, errcode.Wrap(errcode.DecodeError, err, "decode parquet")
	}
	defer tbl.Release()
	cols := make([]arrow.Array, tbl.NumCols())
	for i := range cols {
		c, err := array.Concatenate(tbl.Column(i).Data().Chunks(), memory.DefaultAllocator)
		if err != nil {
			return nil, errcode.Wrap(errcode.DecodeError, err, "column %d", i)
		}
		defer c.Release()
		cols[i] = c
	}
	return array.NewRecordBatch(tbl.Schema(), cols, tbl.NumRows()), nil
}

// ReleaseTupleRoot decodes every shard of rel (verified by digest) and
// returns the unbound Merkle root of its tuples.
func ReleaseTupleRoot(ctx context.Context, s objstore.Store, rel *manifest.Release, schema *manifest.RecordSchema) (manifest.Digest, error) {
	acc := tuplehash.NewAccumulator(tuplehash.DefaultK)
	for _, d := range rel.Shards {
		data, err := ReadFile(ctx, s, d)
		if err != nil {
			return manifest.Digest{}, err
		}
		rec, err := DecodeParquet(ctx, data)
		if err != nil {
			return manifest.Digest{}, err
		}
		found := canon.FromArrow(rec.Schema(), schema)
		fd, err := canon.SchemaDigest(found)
		if err != nil {
			return manifest.Digest{}, err
		}
		h, err := canon.NewShardHasher(found, fd, fd)
		if err != nil {
			return manifest.Digest{}, err
		}
		err = h.AddBatch(rec, func(t *tuplehash.Tuple, _ [32]byte) error { return acc.Add(t) })
		rec.Release()
		if err != nil {
			return manifest.Digest{}, err
		}
	}
	return acc.Root(), nil
}
