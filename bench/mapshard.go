package main

import (
	"context"
	"sync/atomic"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/mapper"
	"github.com/shardproof/shardproof/objstore"
)

// docMax bounds the manifests the harness reads back from its own store.
const docMax = 64 << 20

// mapShards runs mapper.MapShard — verify's own map code with its default
// decoder — over every release shard of d on all cores, counting the
// emitted tuples and dropping them: the map phase without the shuffle
// (sort, Arrow IPC files, store puts and commit records). Member files are
// left out: with the snapshot's leaf index verify reads only the buckets
// of them that differ, so mapping them whole would not bound verify's
// work; mapping every release shard does, in every mode.
func mapShards(ctx context.Context, d *Dataset) (int64, error) {
	st, err := objstore.Open(ctx, d.StoreDir)
	if err != nil {
		return 0, err
	}
	b, _, err := objstore.ReadBlob(ctx, st, d.Root, docMax)
	if err != nil {
		return 0, err
	}
	rel, err := manifest.DecodeRelease(b)
	if err != nil {
		return 0, err
	}
	if b, _, err = objstore.ReadBlob(ctx, st, rel.RecordSchema, docMax); err != nil {
		return 0, err
	}
	schema, err := manifest.DecodeRecordSchema(b)
	if err != nil {
		return 0, err
	}
	var ins []mapper.Input
	for i, s := range rel.Shards {
		ins = append(ins, mapper.Input{Side: mapper.SideRelease, Index: i, Desc: s})
	}
	o := mapper.Options{Store: st, Schema: schema, SchemaDigest: rel.RecordSchema}
	var tuples atomic.Int64
	err = pool(ctx, len(ins), numWorkers(), func(ctx context.Context, i int) error {
		var n int64
		res, err := mapper.MapShard(ctx, o, ins[i], func(*mapper.Tuple) error { n++; return nil })
		if err != nil {
			return err
		}
		if len(res.Failures) > 0 {
			f := res.Failures[0]
			return errcode.New(errcode.Internal, "mapper reported %s for %s: %s", f.Code, f.Shard, f.Detail)
		}
		tuples.Add(n)
		return nil
	})
	return tuples.Load(), err
}
