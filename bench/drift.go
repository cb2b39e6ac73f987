package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/shardproof/shardproof/internal/canon"
	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/objstore"
	"github.com/shardproof/shardproof/stage"
	"github.com/shardproof/shardproof/tuplehash"
)

// driftedRelease is the release the benchmark verifies.
type driftedRelease struct {
	root manifest.Digest
	doc  *manifest.Release
}

// drift derives from a synthesized release a second, internally consistent
// release (its descriptors and orderedMemberTupleRoot match its own bytes)
// that differs from the snapshot by a known number of members of each
// class, so that verify and the DuckDB diff have something to count and
// their counts can be checked against the truth, not only against each
// other. p.DriftShards shards, evenly spaced, are rewritten; each loses
// p.DriftPerClass members (MISSING_MEMBER), repeats as many
// (DUPLICATE_MEMBER), gains as many new ones (EXTRA_MEMBER), and changes
// the text, split and sourceVersion of as many others.
func drift(ctx context.Context, st objstore.Store, res stage.Result, p Params) (*driftedRelease, DiffCounts, error) {
	rel := *res.Release
	rel.Shards = append([]manifest.Shard(nil), res.Release.Shards...)
	exp := DiffCounts{}
	if p.DriftShards <= 0 || p.DriftPerClass <= 0 {
		exp.Records, exp.SnapshotRecords = rel.Totals.Records, res.SnapshotDoc.Totals.Records
		return &driftedRelease{root: res.Root, doc: &rel}, exp, nil
	}
	n := min(p.DriftShards, len(rel.Shards))
	acc := tuplehash.NewAccumulator(tuplehash.DefaultK)
	rewritten := map[string]bool{} // sampleIds of the original rewritten shards
	for i := range n {
		idx := i * len(rel.Shards) / n
		orig := rel.Shards[idx]
		rows, err := readRows(ctx, st, orig)
		if err != nil {
			return nil, exp, err
		}
		for _, r := range rows {
			rewritten[r.SampleID] = true
		}
		rows, c, err := injectFaults(rows, idx, p.DriftPerClass)
		if err != nil {
			return nil, exp, fmt.Errorf("drift %s: %w", orig.ID, err)
		}
		addCounts(&exp, c)
		rec := stage.BuildRows(rows)
		data, err := stage.EncodeParquet(rec, res.Schema, stage.ParquetOptions{Codec: rel.Build.Compression, Level: rel.Build.CompressionLevel})
		if err != nil {
			rec.Release()
			return nil, exp, err
		}
		desc, err := stage.Describe(rec, res.Schema, res.RecordSchema, func(t *tuplehash.Tuple, _ [32]byte) error { return acc.Add(t) })
		rec.Release()
		if err != nil {
			return nil, exp, err
		}
		d, v, _, err := objstore.PutBlob(ctx, st, data)
		if err != nil {
			return nil, exp, err
		}
		desc.ID, desc.Digest, desc.Size, desc.ObjectVersion = orig.ID, d, int64(len(data)), string(v)
		rel.Shards[idx] = desc
	}
	// The untouched shards' tuples are exactly the snapshot's tuples of the
	// samples they hold, and the member files are far cheaper to decode
	// than the shards, so the new root is built from those.
	ms := canon.SnapshotMemberSchema()
	for _, m := range res.SnapshotDoc.Members {
		rec, err := decodeFile(ctx, st, m)
		if err != nil {
			return nil, exp, err
		}
		_, err = stage.Describe(rec, ms, res.RecordSchema, func(t *tuplehash.Tuple, _ [32]byte) error {
			if rewritten[t.SampleID] {
				return nil
			}
			return acc.Add(t)
		})
		rec.Release()
		if err != nil {
			return nil, exp, err
		}
	}
	rel.Totals = stage.TotalsOf(rel.Shards)
	rel.OrderedMemberTupleRoot = tuplehash.BindRoot(acc.Root(), rel.DatasetSnapshot, rel.TombstoneWatermark, rel.BenchmarkFence)
	b, err := manifest.Encode(&rel)
	if err != nil {
		return nil, exp, err
	}
	root, _, _, err := objstore.PutBlob(ctx, st, b)
	if err != nil {
		return nil, exp, err
	}
	exp.Records, exp.SnapshotRecords = rel.Totals.Records, res.SnapshotDoc.Totals.Records
	slog.Info("bench: drifted release written", "root", manifest.Digest(root).String(), "shards", n,
		"missing", exp.Missing, "extra", exp.Extra, "duplicate", exp.Duplicate)
	return &driftedRelease{root: root, doc: &rel}, exp, nil
}

// injectFaults applies per fault class `per` faults to rows, each to a
// different original row, and returns the new rows and the counts the
// diff must report. shard makes the extra sampleIds unique per shard.
func injectFaults(rows []stage.Row, shard, per int) ([]stage.Row, DiffCounts, error) {
	const classes = 5 // missing, duplicate, content, split, sourceVersion
	if len(rows) < classes*per {
		return nil, DiffCounts{}, errcode.New(errcode.Usage, "%d rows cannot carry %d faults of each of %d classes", len(rows), per, classes)
	}
	step := len(rows) / (classes * per)
	out := make([]stage.Row, 0, len(rows)+2*per)
	var c DiffCounts
	for i, r := range rows {
		k := -1
		if i%step == 0 && i/step < classes*per {
			k = (i / step) % classes
		}
		switch k {
		case 0: // dropped
			c.Missing++
			continue
		case 1:
			out = append(out, r)
			c.Duplicate++
		case 2:
			r.Text += " (revised)"
			c.ContentSubstitution++
		case 3:
			if r.Split == "train" {
				r.Split = "val"
			} else {
				r.Split = "train"
			}
			c.SplitConflict++
		case 4:
			r.SourceVersion++
			c.SourceVersionChange++
		}
		out = append(out, r)
	}
	for j := range per {
		r := rows[j]
		r.SampleID = fmt.Sprintf("bench-extra-%05d-%05d", shard, j)
		out = append(out, r)
		c.Extra++
	}
	return out, c, nil
}

func addCounts(a *DiffCounts, b DiffCounts) {
	a.Missing += b.Missing
	a.Extra += b.Extra
	a.Duplicate += b.Duplicate
	a.ContentSubstitution += b.ContentSubstitution
	a.SourceVersionChange += b.SourceVersionChange
	a.SourceIDChange += b.SourceIDChange
	a.SplitConflict += b.SplitConflict
}

// decodeFile reads shard s at its exact version through the store's
// verifying reader and decodes it into one record batch.
func decodeFile(ctx context.Context, st objstore.Store, s manifest.Shard) (arrow.RecordBatch, error) {
	data, err := stage.ReadFile(ctx, st, s)
	if err != nil {
		return nil, err
	}
	return stage.DecodeParquet(ctx, data)
}

// readRows decodes a release shard into rows.
func readRows(ctx context.Context, st objstore.Store, s manifest.Shard) ([]stage.Row, error) {
	rec, err := decodeFile(ctx, st, s)
	if err != nil {
		return nil, err
	}
	defer rec.Release()
	return stage.RowsOf(rec)
}
