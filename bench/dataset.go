package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/objstore"
	_ "github.com/shardproof/shardproof/objstore/file" // registers the file store
	"github.com/shardproof/shardproof/stage"
)

// datasetVersion changes whenever the way a cached dataset is built
// changes, so stale caches are never reused.
const datasetVersion = "d1"

// Params choose a dataset. Equal Params give the same bytes, so a dataset
// is cached under a key derived from them.
type Params struct {
	Samples int   `json:"samples"`
	Shards  int   `json:"shards"`
	Seed    int64 `json:"seed"`
	// DriftShards is how many release shards carry injected faults, and
	// DriftPerClass how many of each fault class each of them carries.
	DriftShards   int `json:"driftShards"`
	DriftPerClass int `json:"driftPerClass"`
}

// Key names the cache directory of p.
func (p Params) Key() string {
	return fmt.Sprintf("n%d-s%d-seed%d-drift%dx%d-%s-ser%s-syn%s", p.Samples, p.Shards, p.Seed,
		p.DriftShards, p.DriftPerClass, datasetVersion, stage.SerializerVersion, stage.SynthVersion)
}

// File is one Parquet file exported from the store for the tools that read
// plain files (the ceiling loop and DuckDB).
type File struct {
	Path    string          `json:"path"`
	Digest  manifest.Digest `json:"digest"`
	Size    int64           `json:"size"`
	Records int64           `json:"records"`
}

// Dataset is a cached, drifted release and its snapshot, as meta.json
// describes it.
type Dataset struct {
	Params   Params `json:"params"`
	StoreDir string `json:"storeDir"`
	// Root is the drifted release; Snapshot is the synthesized snapshot it
	// is verified against (and its datasetSnapshot).
	Root     manifest.Digest `json:"root"`
	Snapshot manifest.Digest `json:"snapshot"`
	// ReleaseDir and SnapshotDir hold exactly the exported files, named
	// <hex>.parquet, so DuckDB can glob them.
	ReleaseDir   string `json:"releaseDir"`
	SnapshotDir  string `json:"snapshotDir"`
	ReleaseFiles []File `json:"releaseFiles"`
	MemberFiles  []File `json:"memberFiles"`
	// Records and StoredBytes are the release's; SnapshotRecords and
	// MemberStoredBytes the snapshot's.
	Records           int64 `json:"records"`
	StoredBytes       int64 `json:"storedBytes"`
	SnapshotRecords   int64 `json:"snapshotRecords"`
	MemberStoredBytes int64 `json:"memberStoredBytes"`
	// Expected are the diff counts the injected drift must produce.
	Expected DiffCounts `json:"expected"`
	// BuildSeconds is how long synthesis, drift and export took.
	BuildSeconds float64 `json:"buildSeconds"`
}

// DiffCounts are the member-level counts the verify report, the DuckDB
// diff and the injected drift are compared on.
type DiffCounts struct {
	Records             int64 `json:"records"`
	SnapshotRecords     int64 `json:"snapshotRecords"`
	Missing             int64 `json:"missing"`
	Extra               int64 `json:"extra"`
	Duplicate           int64 `json:"duplicate"`
	ContentSubstitution int64 `json:"contentSubstitution"`
	SourceVersionChange int64 `json:"sourceVersionChange"`
	SourceIDChange      int64 `json:"sourceIdChange"`
	SplitConflict       int64 `json:"splitConflict"`
}

// countsOf extracts the compared counts from a verification report.
func countsOf(c *manifest.Counts) DiffCounts {
	return DiffCounts{
		Records: c.Records, SnapshotRecords: c.SnapshotRecords,
		Missing: c.Missing, Extra: c.Extra, Duplicate: c.Duplicate,
		ContentSubstitution: c.ContentSubstitution, SourceVersionChange: c.SourceVersionChange,
		SourceIDChange: c.SourceIDChange, SplitConflict: c.SplitConflict,
	}
}

// loadDataset reads a dataset's meta.json.
func loadDataset(path string) (*Dataset, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, errcode.Wrap(errcode.IO, err, "read dataset meta")
	}
	var d Dataset
	if err := json.Unmarshal(b, &d); err != nil {
		return nil, errcode.Wrap(errcode.BadDocument, err, "dataset meta %s", path)
	}
	return &d, nil
}

// metaPath is where the dataset for p is described once complete.
func metaPath(cacheDir string, p Params) string {
	return filepath.Join(cacheDir, p.Key(), "meta.json")
}

// ensureDataset returns the cached dataset for p, building it first if
// meta.json is absent. meta.json is written last (rename), so an
// interrupted build is redone, never half-used; the store's conditional
// creates make the redo write only what is missing.
func ensureDataset(ctx context.Context, cacheDir string, p Params) (*Dataset, string, error) {
	mp := metaPath(cacheDir, p)
	if d, err := loadDataset(mp); err == nil {
		slog.Info("bench: dataset cached", "key", p.Key(), "root", d.Root.String())
		return d, mp, nil
	}
	dir, err := filepath.Abs(filepath.Join(cacheDir, p.Key()))
	if err != nil {
		return nil, "", errcode.Wrap(errcode.IO, err, "cache dir")
	}
	start := time.Now()
	d := &Dataset{
		Params: p, StoreDir: filepath.Join(dir, "store"),
		ReleaseDir: filepath.Join(dir, "files", "release"), SnapshotDir: filepath.Join(dir, "files", "snapshot"),
	}
	for _, sub := range []string{d.StoreDir, d.ReleaseDir, d.SnapshotDir} {
		if err := os.MkdirAll(sub, 0o755); err != nil {
			return nil, "", errcode.Wrap(errcode.IO, err, "cache dir")
		}
	}
	st, err := objstore.Open(ctx, d.StoreDir)
	if err != nil {
		return nil, "", err
	}
	slog.Info("bench: synthesizing", "samples", p.Samples, "shards", p.Shards, "seed", p.Seed)
	res, err := stage.Synth(ctx, st, stage.SynthOptions{
		Samples: p.Samples, Shards: p.Shards, Seed: p.Seed,
		Options: stage.Options{Workers: runtime.NumCPU()},
	})
	if err != nil {
		return nil, "", err
	}
	slog.Info("bench: synthesized", "root", res.Root.String(), "snapshot", res.Snapshot.String(), "seconds", time.Since(start).Seconds())
	rel, exp, err := drift(ctx, st, res, p)
	if err != nil {
		return nil, "", err
	}
	d.Root, d.Snapshot, d.Expected = rel.root, res.Snapshot, exp
	for _, s := range rel.doc.Shards {
		f, err := export(ctx, st, d.StoreDir, d.ReleaseDir, s)
		if err != nil {
			return nil, "", err
		}
		d.ReleaseFiles = append(d.ReleaseFiles, f)
		d.Records += s.Records
		d.StoredBytes += s.Size
	}
	for _, s := range res.SnapshotDoc.Members {
		f, err := export(ctx, st, d.StoreDir, d.SnapshotDir, s)
		if err != nil {
			return nil, "", err
		}
		d.MemberFiles = append(d.MemberFiles, f)
		d.SnapshotRecords += s.Records
		d.MemberStoredBytes += s.Size
	}
	d.BuildSeconds = time.Since(start).Seconds()
	b, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return nil, "", errcode.Wrap(errcode.Internal, err, "encode dataset meta")
	}
	if err := writeFileAtomic(mp, b); err != nil {
		return nil, "", err
	}
	slog.Info("bench: dataset ready", "key", p.Key(), "root", d.Root.String(), "seconds", d.BuildSeconds)
	return d, mp, nil
}

// export makes shard s available as dir/<hex>.parquet: a hard link to the
// file store's version file when possible (no copy, same page cache), else
// a copy read through the store's verifying blob reader.
func export(ctx context.Context, st objstore.Store, storeDir, dir string, s manifest.Shard) (File, error) {
	f := File{Path: filepath.Join(dir, s.Digest.Hex()+".parquet"), Digest: s.Digest, Size: s.Size, Records: s.Records}
	if fi, err := os.Stat(f.Path); err == nil && fi.Size() == s.Size {
		return f, nil
	}
	// The file store keeps version "v<seq>" of key at <key>/@<seq, 20 digits>.
	if seq, err := strconv.ParseUint(strings.TrimPrefix(s.ObjectVersion, "v"), 10, 64); err == nil {
		src := filepath.Join(storeDir, filepath.FromSlash(s.Digest.BlobKey()), fmt.Sprintf("@%020d", seq))
		if err := os.Link(src, f.Path); err == nil {
			return f, nil
		}
	}
	r, err := objstore.GetBlob(ctx, st, s.Digest, objstore.Version(s.ObjectVersion), s.Size)
	if err != nil {
		return File{}, err
	}
	defer r.Close()
	tmp := f.Path + ".tmp"
	w, err := os.Create(tmp)
	if err != nil {
		return File{}, errcode.Wrap(errcode.IO, err, "export %s", s.ID)
	}
	_, err = io.Copy(w, r)
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, f.Path)
	}
	if err != nil {
		os.Remove(tmp)
		return File{}, errcode.Wrap(errcode.IO, err, "export %s", s.ID)
	}
	return f, nil
}

// writeFileAtomic writes b to path through a temp file and a rename.
func writeFileAtomic(path string, b []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return errcode.Wrap(errcode.IO, err, "write %s", path)
	}
	if err := os.Rename(tmp, path); err != nil {
		return errcode.Wrap(errcode.IO, err, "write %s", path)
	}
	return nil
}
