package stage

import (
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/internal/scratchdir"
	"github.com/shardproof/shardproof/tuplehash"
)

// memberSpill holds the snapshot's tuples on disk between the release
// shards that produce them and the member files that hold them: one
// append-only file per member, which the shard workers add to as they
// finish, so staging holds one member's tuples at a time rather than every
// tuple of the release. A member file's tuples are read back and sorted
// when it is written; the order they were added in does not matter.
type memberSpill struct {
	dir    string
	held   *scratchdir.Dir
	schema [32]byte // every tuple's schemaDigest (not stored per tuple)
	member []uint32 // bucket → member index
	mu     sync.Mutex
	bufs   [][]byte // per member, flushed to its file when full
	bufCap int
	files  int64 // bytes written, for the log
}

// spillBufferBytes bounds the buffers of all members together.
const spillBufferBytes = 32 << 20

func newMemberSpill(tempDir string, members int, schema [32]byte) (*memberSpill, error) {
	held, err := scratchdir.New(tempDir, MembersTempPrefix)
	if err != nil {
		return nil, errcode.Wrap(errcode.IO, err, "member spill directory")
	}
	sp := &memberSpill{dir: held.Path, held: held, schema: schema, member: memberOfBucket(members), bufs: make([][]byte, members)}
	sp.bufCap = max(4<<10, min(256<<10, spillBufferBytes/members))
	return sp, nil
}

// memberOfBucket maps each bucket to the member of m whose range
// (memberRange) holds it.
func memberOfBucket(m int) []uint32 {
	member := make([]uint32, 1<<tuplehash.DefaultK)
	for j := range m {
		lo, hi := memberRange(j, m)
		for b := lo; b < hi; b++ {
			member[b] = uint32(j)
		}
	}
	return member
}

func (sp *memberSpill) path(j int) string { return filepath.Join(sp.dir, fmt.Sprintf("m%05d", j)) }

// close removes the spill files.
func (sp *memberSpill) close() { sp.held.Remove() }

// add appends the tuples of one release shard.
func (sp *memberSpill) add(ts []memberTuple) error {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	for i := range ts {
		t := &ts[i]
		if t.t.SchemaDigest != sp.schema {
			return errcode.New(errcode.Internal, "stage: tuple of %x among tuples of schema %x", t.t.SchemaDigest, sp.schema)
		}
		j := sp.member[t.bucket]
		sp.bufs[j] = appendSpilled(sp.bufs[j], t)
		if len(sp.bufs[j]) >= sp.bufCap {
			if err := sp.flush(int(j)); err != nil {
				return err
			}
		}
	}
	return nil
}

// flush appends member j's buffer to its file. The caller holds sp.mu.
func (sp *memberSpill) flush(j int) error {
	if len(sp.bufs[j]) == 0 {
		return nil
	}
	f, err := os.OpenFile(sp.path(j), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err == nil {
		_, err = f.Write(sp.bufs[j])
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		return errcode.Wrap(errcode.IO, err, "member spill")
	}
	sp.files += int64(len(sp.bufs[j]))
	sp.bufs[j] = sp.bufs[j][:0]
	return nil
}

// read returns member j's tuples (in no particular order), appended to
// buf, and lets its buffer go.
func (sp *memberSpill) read(j int, buf []memberTuple) ([]memberTuple, error) {
	sp.mu.Lock()
	err := sp.flush(j)
	sp.bufs[j] = nil
	sp.mu.Unlock()
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(sp.path(j))
	if err != nil && !os.IsNotExist(err) {
		return nil, errcode.Wrap(errcode.IO, err, "member spill")
	}
	os.Remove(sp.path(j))
	for len(b) > 0 {
		var t memberTuple
		if b, err = readSpilled(b, &t); err != nil {
			return nil, err
		}
		t.t.SchemaDigest = sp.schema
		buf = append(buf, t)
	}
	return buf, nil
}

// A spilled tuple: u32 bucket, tuple digest, content digest, i64
// sourceVersion, then sampleId, sourceId and split, each u32
// length-prefixed. Little-endian; the files live only as long as staging.
const spilledFixed = 4 + 32 + 32 + 8

func appendSpilled(b []byte, t *memberTuple) []byte {
	b = binary.LittleEndian.AppendUint32(b, t.bucket)
	b = append(b, t.digest[:]...)
	b = append(b, t.t.LogicalContentDigest[:]...)
	b = binary.LittleEndian.AppendUint64(b, uint64(t.t.SourceVersion))
	for _, s := range [...]string{t.t.SampleID, t.t.SourceID, t.t.Split} {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(s)))
		b = append(b, s...)
	}
	return b
}

func readSpilled(b []byte, t *memberTuple) ([]byte, error) {
	short := errcode.Wrap(errcode.IO, io.ErrUnexpectedEOF, "member spill: truncated tuple")
	if len(b) < spilledFixed {
		return nil, short
	}
	t.bucket = binary.LittleEndian.Uint32(b)
	copy(t.digest[:], b[4:])
	copy(t.t.LogicalContentDigest[:], b[36:])
	t.t.SourceVersion = int64(binary.LittleEndian.Uint64(b[68:]))
	b = b[spilledFixed:]
	for _, s := range [...]*string{&t.t.SampleID, &t.t.SourceID, &t.t.Split} {
		if len(b) < 4 {
			return nil, short
		}
		n := binary.LittleEndian.Uint32(b)
		if uint64(len(b)-4) < uint64(n) {
			return nil, short
		}
		*s = string(b[4 : 4+n])
		b = b[4+n:]
	}
	return b, nil
}
