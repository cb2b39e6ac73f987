package coordinator

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"log/slog"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/objstore"
	"github.com/shardproof/shardproof/reducer"
	"github.com/shardproof/shardproof/shuffle"
)

// mergeLevel merges reduce task r's shuffle files, inputs, a group of at
// most fan at a time, into one file per group of the task's own, and
// those again while they are more than fan (a level per pass: above fan²
// map tasks there are two), and returns the last level's files, checked
// as map outputs are (the plan's compression and checksum), and every
// file it wrote. A group's file is stored only once every input of the
// group has been read to its end and matched its checksum, so nothing
// unchecked reaches the final merge. The files live under
// jobs/<plan>/merge/<task>/<attempt>/<level>/, a prefix of this attempt
// alone (an engine may run a task twice at once); a level's files go
// once the next level is written, and cleanup removes the rest.
func (j *Job) mergeLevel(ctx context.Context, r int, inputs []Output, fan int) (final, written []Output, cleanup func(), err error) {
	var nonce [8]byte
	rand.Read(nonce[:])
	prefix := fmt.Sprintf("%smerge/%d/%s/", j.prefix(), r, hex.EncodeToString(nonce[:]))
	remove := func(prefix string) {
		d, ok := j.Store.(objstore.Deleter)
		if !ok {
			return
		}
		// Not ctx: a cancelled task still removes its files.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := d.DeletePrefix(ctx, prefix); err != nil {
			slog.Warn("reduce merge level: files not removed", "prefix", prefix, "code", errcode.Of(err))
		}
	}
	cleanup = func() { remove(prefix) }
	start := time.Now()
	level := inputs
	for l := 0; len(level) > fan; l++ {
		groups := (len(level) + fan - 1) / fan
		batchRows := ShuffleBatchRowsFor(groups)
		next := make([]Output, 0, groups)
		for g := range groups {
			group := level[g*fan : min((g+1)*fan, len(level))]
			out, err := j.mergeGroup(ctx, r, group, fmt.Sprintf("%s%d/%d.arrow", prefix, l, g), batchRows)
			if err != nil {
				return nil, written, cleanup, err
			}
			next = append(next, out)
		}
		if l > 0 {
			remove(fmt.Sprintf("%s%d/", prefix, l-1))
		}
		written = append(written, next...)
		level = next
	}
	j.log().Debug("reduce merge level", "task", r, "inputs", len(inputs), "files", len(written), "seconds", time.Since(start).Seconds())
	return level, written, cleanup, nil
}

// mergeGroup merges one group of shuffle files into key, streaming: the
// rows go from the group's readers through a shuffle.StreamWriter into
// the store's Put, so the task holds one batch of each input and one of
// the output, whatever their sizes.
func (j *Job) mergeGroup(ctx context.Context, r int, group []Output, key string, batchRows int) (Output, error) {
	rng := j.Plan.Reducers[r]
	var (
		sources  []reducer.Source
		verified []io.Reader
	)
	defer func() {
		for _, s := range sources {
			s.(*shuffle.Reader).Close()
		}
	}()
	var closers []io.Closer
	defer func() {
		for _, c := range closers {
			c.Close()
		}
	}()
	bodies, err := j.getAll(ctx, r, group)
	if err != nil {
		return Output{}, err
	}
	for _, rc := range bodies {
		closers = append(closers, rc)
	}
	for k, in := range group {
		vr := in.open(bodies[k])
		rd, err := shuffle.NewReaderCompression(vr, j.Plan.ShuffleCompression, in.Size, in.Key, j.Plan.K, rng.Lo, rng.Hi)
		if err != nil {
			return Output{}, err
		}
		sources = append(sources, rd)
		verified = append(verified, vr)
	}

	var h hash.Hash
	var x *xxhash.Digest
	if j.Plan.ShuffleChecksum == shuffle.XXH64 {
		x = xxhash.New()
		h = x
	} else {
		h = sha256.New()
	}
	out := Output{Key: key}
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := j.writeGroup(ctx, r, io.MultiWriter(pw, h, countWriter{&out.Size}), sources, verified, group, batchRows, &out.Rows)
		pw.CloseWithError(err)
		done <- err
	}()
	// The key is this attempt's alone: one already there is this very
	// upload, whose answer was lost and which the SDK sent again.
	v, _, err := objstore.CreateOrMatch(ctx, j.Store, key, pr, objstore.PutOptions{Ephemeral: j.ephemeralShuffle})
	// A Put that stopped reading (an error) unblocks the writer.
	pr.CloseWithError(errUploadEnded)
	// The writer's own failure (a damaged input, a cancellation) is the
	// cause of the Put's; the Put's is the cause of a writer cut off.
	werr := <-done
	if werr != nil && (err == nil || !errors.Is(werr, errUploadEnded) && errcode.Of(werr) != errcode.IO) {
		return Output{}, werr
	}
	if err != nil {
		return Output{}, wrap(err, "reduce task %d: %s", r, key)
	}
	out.Version = v
	if x != nil {
		out.XXH64 = fmt.Sprintf("%016x", x.Sum64())
	} else {
		out.Digest = manifest.Digest(h.Sum(nil))
	}
	return out, nil
}

// errUploadEnded is what a merge level's writer meets when the Put
// reading its output stopped.
var errUploadEnded = errcode.New(errcode.IO, "reduce merge level: the upload ended before the file")

// writeGroup writes the merged rows of sources to w as one shuffle file,
// then reads every input to its end, so its checksum is checked before
// the file's last bytes are written (a mismatch fails the Put).
func (j *Job) writeGroup(ctx context.Context, r int, w io.Writer, sources []reducer.Source, verified []io.Reader, group []Output, batchRows int, rows *int64) error {
	rng := j.Plan.Reducers[r]
	sw, err := shuffle.NewStreamWriter(w, j.Plan.ShuffleCompression, batchRows)
	if err != nil {
		return err
	}
	err = reducer.Combine(ctx, rng.Lo, rng.Hi, sources, func(rs []shuffle.Row) error {
		for i := range rs {
			if err := sw.Append(&rs[i]); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		sw.Close()
		return wrap(err, "reduce task %d", r)
	}
	for k, vr := range verified {
		if _, err := io.Copy(io.Discard, vr); err != nil {
			sw.Close()
			return j.drainError(err, r, group[k].Key)
		}
	}
	*rows = sw.Rows()
	return sw.Close()
}

// countWriter adds the length of every write to *n.
type countWriter struct{ n *int64 }

func (c countWriter) Write(p []byte) (int, error) {
	*c.n += int64(len(p))
	return len(p), nil
}
