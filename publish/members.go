package publish

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/mapper"
	"github.com/shardproof/shardproof/objstore"
	"github.com/shardproof/shardproof/raftgate"
	"github.com/shardproof/shardproof/reducer"
)

// recheckMembers counts the hits of the new fence documents in the member
// files of the snapshot the gate's VERIFIED report binds the root to, and
// stores a recheck report. The report proved that the release holds
// exactly the snapshot's tuples, so the release's hits are the members'
// hits: the member files (the tuple columns only, a fraction of the
// release's bytes, no content to hash) are all it reads. A member that no
// longer reads as its descriptor says fails the recheck with its code.
func recheckMembers(ctx context.Context, s objstore.Store, rel *raftgate.Release, o RecheckOptions) (*manifest.RecheckReport, manifest.Digest, error) {
	start := time.Now()
	if rel.State != raftgate.ReleaseVerified && rel.State != raftgate.ReleasePublished && rel.State != raftgate.ReleaseRetired || rel.Report.IsZero() {
		return nil, manifest.Digest{}, errcode.New(errcode.NotVerified, "release %s is %s at the gate: --members needs the VERIFIED report that binds it to its snapshot", o.Root, rel.State)
	}
	basis, err := loadReport(ctx, s, rel.Report)
	if err != nil {
		return nil, manifest.Digest{}, err
	}
	if basis.Verdict != manifest.Verified || basis.Root != o.Root {
		return nil, manifest.Digest{}, errcode.New(errcode.NotVerified, "report %s the gate holds for %s is %s for root %s", rel.Report, o.Root, basis.Verdict, basis.Root)
	}
	release, err := loadRelease(ctx, s, o.Root)
	if err != nil {
		return nil, manifest.Digest{}, err
	}
	b, _, err := objstore.ReadBlob(ctx, s, basis.DatasetSnapshot, manifest.MaxDocumentSize)
	if err != nil {
		return nil, manifest.Digest{}, fmt.Errorf("snapshot manifest %s: %w", basis.DatasetSnapshot, err)
	}
	snap, err := manifest.DecodeSnapshot(b)
	if err != nil {
		return nil, manifest.Digest{}, fmt.Errorf("snapshot manifest %s: %w", basis.DatasetSnapshot, err)
	}
	if b, _, err = objstore.ReadBlob(ctx, s, release.RecordSchema, manifest.MaxDocumentSize); err != nil {
		return nil, manifest.Digest{}, fmt.Errorf("record schema %s: %w", release.RecordSchema, err)
	}
	schema, err := manifest.DecodeRecordSchema(b)
	if err != nil {
		return nil, manifest.Digest{}, fmt.Errorf("record schema %s: %w", release.RecordSchema, err)
	}
	k, err := manifest.ParseMemberPartition(snap.MemberPartition)
	if err != nil {
		return nil, manifest.Digest{}, err
	}

	doc := &manifest.RecheckReport{
		Schema: manifest.RecheckReportSchema, Root: o.Root, DatasetSnapshot: basis.DatasetSnapshot, Basis: rel.Report,
		Tombstones: o.Tombstones, Benchmark: o.Benchmark, Examples: map[string][]string{},
		Tool: o.Tool, Started: start.UTC().Format(time.RFC3339),
	}
	var sets [2]*reducer.Set
	for i, f := range []struct {
		d         manifest.Digest
		schema    string
		watermark *uint64
	}{{o.Tombstones, manifest.TombstonesSchema, &doc.TombstoneWatermark}, {o.Benchmark, manifest.BenchmarkSchema, &doc.BenchmarkFence}} {
		if f.d.IsZero() {
			continue
		}
		l, err := LoadFenceLog(ctx, s, f.d, f.schema)
		if err != nil {
			return nil, manifest.Digest{}, err
		}
		*f.watermark = l.Watermark()
		sets[i] = reducer.NewSet(l)
	}

	// The members, parallelism at a time; a member's hits count only once
	// every check of it passed.
	type tally struct {
		records  int64
		hits     [2]int64
		examples [2][]string
	}
	mo := mapper.Options{Store: s, Schema: schema, SchemaDigest: snap.RecordSchema, K: k}
	p := o.Parallelism
	if p <= 0 {
		p = runtime.NumCPU()
	}
	var (
		mu    sync.Mutex
		total tally
	)
	eg, ectx := errgroup.WithContext(ctx)
	eg.SetLimit(p)
	for i := range snap.Members {
		eg.Go(func() error {
			var t tally
			res, err := mapper.MapShardStream(ectx, mo, mapper.Input{Side: mapper.SideSnapshot, Index: i, Desc: snap.Members[i]}, func(tu *mapper.Tuple) error {
				for k, set := range sets {
					if set.Hit(tu.SampleID, tu.LogicalContentDigest) {
						t.hits[k]++
						t.examples[k] = keepSmallest(t.examples[k], tu.SampleID)
					}
				}
				return nil
			})
			if err != nil {
				return err
			}
			if len(res.Failures) > 0 {
				f := res.Failures[0]
				return errcode.New(errcode.Code(f.Code), "snapshot member %s no longer reads as the snapshot says (%s); run a full recheck", f.Shard, f.Detail)
			}
			if !res.Decoded {
				return errcode.New(errcode.DecodeError, "snapshot member %s did not decode; run a full recheck", snap.Members[i].ID)
			}
			mu.Lock()
			defer mu.Unlock()
			total.records += res.Records
			for k := range sets {
				total.hits[k] += t.hits[k]
				for _, id := range t.examples[k] {
					total.examples[k] = keepSmallest(total.examples[k], id)
				}
			}
			return nil
		})
	}
	if err := eg.Wait(); err != nil {
		return nil, manifest.Digest{}, err
	}
	if err := ctx.Err(); err != nil {
		return nil, manifest.Digest{}, errcode.Wrap(errcode.Canceled, err, "recheck")
	}
	doc.Members, doc.Records = int64(len(snap.Members)), total.records
	doc.TombstoneHits, doc.BenchmarkHits = total.hits[0], total.hits[1]
	for k, code := range []errcode.Code{errcode.TombstoneHit, errcode.BenchmarkHit} {
		if len(total.examples[k]) > 0 {
			doc.Examples[string(code)] = total.examples[k]
		}
	}
	doc.Seconds = time.Since(start).Seconds()
	b, err = manifest.Encode(doc)
	if err != nil {
		return nil, manifest.Digest{}, err
	}
	d, _, _, err := objstore.PutBlob(ctx, s, b)
	if err != nil {
		return nil, manifest.Digest{}, err
	}
	return doc, d, nil
}

// keepSmallest inserts id into ids, sorted and without repeats, keeping
// the manifest.MaxExamples smallest.
func keepSmallest(ids []string, id string) []string {
	i, found := slices.BinarySearch(ids, id)
	if found || i >= manifest.MaxExamples {
		return ids
	}
	ids = slices.Insert(ids, i, strings.Clone(id)) // id may alias a decoder's memory
	if len(ids) > manifest.MaxExamples {
		ids = ids[:manifest.MaxExamples]
	}
	return ids
}
