package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"os"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
)

// level is how far a loop goes through each file; each level includes the
// ones before it.
type level int

const (
	levelRead    level = iota + 1 // read the bytes, sha256 them, compare with the descriptor
	levelDecode                   // + decompress and decode every column into Arrow record batches
	levelContent                  // + sha256 of every release record's content column
)

// loopFile is one input of a loop; content says whether it is a release
// shard (with a text column to content-hash) or a snapshot member file.
type loopFile struct {
	File
	content bool
}

func loopFiles(d *Dataset) []loopFile {
	var fs []loopFile
	for _, f := range d.ReleaseFiles {
		fs = append(fs, loopFile{f, true})
	}
	for _, f := range d.MemberFiles {
		fs = append(fs, loopFile{f, false})
	}
	// Largest first, so the last file started does not hold up the end.
	sort.SliceStable(fs, func(i, j int) bool { return fs[i].Size > fs[j].Size })
	return fs
}

// numWorkers is the loops' parallelism: every core, as verify's local
// executor uses by default.
func numWorkers() int { return runtime.NumCPU() }

// forEachFile runs f over files on numWorkers() goroutines and returns
// the first error.
func forEachFile(ctx context.Context, files []loopFile, f func(context.Context, loopFile) error) error {
	var (
		next     atomic.Int64
		wg       sync.WaitGroup
		once     sync.Once
		firstErr error
	)
	for range min(numWorkers(), len(files)) {
		wg.Go(func() {
			lockThread()
			defer runtime.UnlockOSThread()
			for {
				i := int(next.Add(1)) - 1
				if i >= len(files) || ctx.Err() != nil {
					return
				}
				if err := f(ctx, files[i]); err != nil {
					once.Do(func() { firstErr = err })
					return
				}
			}
		})
	}
	wg.Wait()
	return firstErr
}

// readChecked reads a file whole and checks its sha256 and size against
// the descriptor, as verify checks the storage digest.
func readChecked(f File) ([]byte, error) {
	b, err := os.ReadFile(f.Path)
	if err != nil {
		return nil, errcode.Wrap(errcode.IO, err, "read %s", f.Path)
	}
	if int64(len(b)) != f.Size {
		return nil, errcode.New(errcode.SizeMismatch, "%s: descriptor size=%d, bytes read=%d", f.Path, f.Size, len(b))
	}
	if got := manifest.Digest(sha256.Sum256(b)); got != f.Digest {
		return nil, errcode.New(errcode.DigestMismatch, "%s: descriptor digest=%s, sha256 of bytes read=%s", f.Path, f.Digest, got)
	}
	return b, nil
}

// ladder runs one cumulative level over every file of d and returns the
// records it decoded (0 at levelRead) and, at levelContent, the CPU time
// spent in the content-hashing loops summed over workers (the content
// digest is too cheap next to decoding to show as a difference between
// levels).
func ladder(ctx context.Context, d *Dataset, lv level) (records int64, hashSeconds float64, err error) {
	var n, hashNanos atomic.Int64
	err = forEachFile(ctx, loopFiles(d), func(ctx context.Context, f loopFile) error {
		b, err := readChecked(f.File)
		if err != nil || lv < levelDecode {
			return err
		}
		mem := memory.DefaultAllocator
		pf, err := file.NewParquetReader(bytes.NewReader(b), file.WithReadProps(parquet.NewReaderProperties(mem)))
		if err != nil {
			return errcode.Wrap(errcode.FooterCorrupt, err, "%s", f.Path)
		}
		defer pf.Close()
		fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{BatchSize: 1 << 14}, mem)
		if err != nil {
			return errcode.Wrap(errcode.DecodeError, err, "%s", f.Path)
		}
		rr, err := fr.GetRecordReader(ctx, nil, nil)
		if err != nil {
			return errcode.Wrap(errcode.DecodeError, err, "%s", f.Path)
		}
		defer rr.Release()
		text := -1
		if f.content {
			text = rr.Schema().FieldIndices("text")[0]
		}
		for rr.Next() {
			rec := rr.RecordBatch()
			n.Add(rec.NumRows())
			if lv >= levelContent && text >= 0 {
				t := threadCPU()
				col := rec.Column(text).(*array.String)
				data, offs := col.ValueBytes(), col.ValueOffsets()
				var sink byte
				for i := range col.Len() {
					h := sha256.Sum256(data[offs[i]-offs[0] : offs[i+1]-offs[0]])
					sink ^= h[0]
				}
				keep(sink)
				hashNanos.Add(threadCPU() - t)
			}
		}
		if err := rr.Err(); err != nil {
			return errcode.Wrap(errcode.DecodeError, err, "%s", f.Path)
		}
		return nil
	})
	return n.Load(), float64(hashNanos.Load()) / 1e9, err
}

// ceiling is the fastest loop the harness has for what verify must do at
// the least: read every file, check its storage digest, decompress the one
// column that holds content (text in shards, content_digest in member
// files) with arrow-go's low-level column chunk readers, straight from the
// decompressed pages without building Arrow arrays, and sha256 each
// content value. No tuples, no shuffle, no diff. It returns the records
// read from release shards and from member files.
func ceiling(ctx context.Context, d *Dataset) (release, members int64, err error) {
	var rel, mem atomic.Int64
	err = forEachFile(ctx, loopFiles(d), func(ctx context.Context, f loopFile) error {
		b, err := readChecked(f.File)
		if err != nil {
			return err
		}
		pf, err := file.NewParquetReader(bytes.NewReader(b))
		if err != nil {
			return errcode.Wrap(errcode.FooterCorrupt, err, "%s", f.Path)
		}
		defer pf.Close()
		name := "content_digest"
		if f.content {
			name = "text"
		}
		col := pf.MetaData().Schema.ColumnIndexByName(name)
		if col < 0 {
			return errcode.New(errcode.SchemaMismatch, "%s: no %s column", f.Path, name)
		}
		vals := make([]parquet.ByteArray, 4096)
		var n int64
		for g := range pf.NumRowGroups() {
			cr, err := pf.RowGroup(g).Column(col)
			if err != nil {
				return errcode.Wrap(errcode.DecodeError, err, "%s", f.Path)
			}
			br, ok := cr.(*file.ByteArrayColumnChunkReader)
			if !ok {
				return errcode.New(errcode.SchemaMismatch, "%s: %s is not a byte array column", f.Path, name)
			}
			for br.HasNext() {
				_, k, err := br.ReadBatch(int64(len(vals)), vals, nil, nil)
				if err != nil {
					return errcode.Wrap(errcode.DecodeError, err, "%s", f.Path)
				}
				if f.content {
					var sink byte
					for _, v := range vals[:k] {
						h := sha256.Sum256(v)
						sink ^= h[0]
					}
					keep(sink)
				}
				n += int64(k)
			}
		}
		if f.content {
			rel.Add(n)
		} else {
			mem.Add(n)
		}
		return nil
	})
	return rel.Load(), mem.Load(), err
}

// sinkValue keeps the loops' hashes observable so the compiler cannot
// drop them.
var sinkValue atomic.Uint32

func keep(b byte) { sinkValue.Add(uint32(b)) }
