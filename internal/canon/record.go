package canon

import (
	"crypto/sha256"
	"encoding/binary"
	"hash"
	"math"
	"slices"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/internal/sha256x2"
	"github.com/shardproof/shardproof/manifest"
)

// AppendNull appends a null field.
func AppendNull(dst []byte, t Tag) []byte { return append(dst, byte(t), 0x00) }

// AppendBytes appends a present utf8 or binary field: u32be len ‖ bytes.
func AppendBytes(dst []byte, t Tag, v []byte) []byte {
	dst = append(dst, byte(t), 0x01)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(v)))
	return append(dst, v...)
}

// AppendString is AppendBytes for a string value, without copying it first.
func AppendString(dst []byte, t Tag, v string) []byte {
	dst = append(dst, byte(t), 0x01)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(v)))
	return append(dst, v...)
}

// AppendContent appends a present content field: its 32-byte sha256.
func AppendContent(dst []byte, t Tag, digest *[32]byte) []byte {
	dst = append(dst, byte(t), 0x01)
	return append(dst, digest[:]...)
}

// AppendInt64 appends a present int64 field.
func AppendInt64(dst []byte, v int64) []byte {
	dst = append(dst, byte(TagInt64), 0x01)
	return binary.BigEndian.AppendUint64(dst, uint64(v))
}

// AppendInt32 appends a present int32 field.
func AppendInt32(dst []byte, v int32) []byte {
	dst = append(dst, byte(TagInt32), 0x01)
	return binary.BigEndian.AppendUint32(dst, uint32(v))
}

// AppendFloat64 appends a present float64 field (IEEE-754 bits, so -0 and
// each NaN payload keep their identity).
func AppendFloat64(dst []byte, v float64) []byte {
	dst = append(dst, byte(TagFloat64), 0x01)
	return binary.BigEndian.AppendUint64(dst, math.Float64bits(v))
}

// AppendBool appends a present bool field.
func AppendBool(dst []byte, v bool) []byte {
	b := byte(0)
	if v {
		b = 1
	}
	return append(dst, byte(TagBool), 0x01, b)
}

// ContentDigest returns the logicalContentDigest of content bytes.
func ContentDigest(b []byte) [32]byte { return sha256.Sum256(b) }

// ContentDigests sets dst[i] to the logicalContentDigest of vals[i],
// two values at a time (sha256x2.SumMany). dst must be at least as long
// as vals.
func ContentDigests[B ~[]byte](dst [][32]byte, vals []B) { sha256x2.SumMany(dst, vals) }

// bytesOf views a string's bytes without copying (the hash never retains them).
func bytesOf(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

// fixedWidth is the decoded width of fixed-size types, for logicalBytes.
var fixedWidth = map[Tag]int64{TagInt64: 8, TagInt32: 4, TagFloat64: 8, TagBool: 1}

type plan struct {
	tag      Tag
	content  bool
	nullable bool
	width    int64 // fixedWidth[tag], looked up once per schema
}

// Encoder encodes rows of decoded columns as canonical records. One
// Encoder serves one goroutine; Encode does not allocate once its buffer
// has grown to the largest record.
type Encoder struct {
	plans   []plan
	content int // index of the content column, or -1
	cols    []typedCol
	buf     []byte
}

// Row is the result of encoding one row. Record is valid until the next
// call to Encode.
type Row struct {
	Record []byte
	// Content is sha256 of the content column's bytes (zero without one).
	Content [32]byte
	// LogicalBytes counts the decoded value bytes: string and binary
	// lengths (content included) plus fixed widths of present values.
	LogicalBytes int64
}

// NewEncoder returns an Encoder for s, which must pass Check (except that
// the member schema has no content column).
func NewEncoder(s *manifest.RecordSchema) (*Encoder, error) {
	e := &Encoder{content: -1, plans: make([]plan, len(s.Fields))}
	for i, f := range s.Fields {
		t, ok := typeTags[f.Type]
		if !ok {
			return nil, errcode.New(errcode.BadDocument, "field %q: unknown type %q", f.Name, f.Type)
		}
		e.plans[i] = plan{tag: t, nullable: f.Nullable, width: fixedWidth[t]}
		if s.Content != "" && f.Name == s.Content {
			if t != TagUTF8 && t != TagBinary {
				return nil, errcode.New(errcode.BadDocument, "content column %q has type %s", f.Name, f.Type)
			}
			e.plans[i].content = true
			e.content = i
		}
	}
	return e, nil
}

// Bind makes the encoder read rec, whose columns must be the schema's
// fields in order with the Arrow types ArrowSchema gives.
func (e *Encoder) Bind(rec arrow.RecordBatch) error {
	return e.BindColumns(Columns(rec))
}

// BindColumns makes the encoder read cols, one per schema field in order.
func (e *Encoder) BindColumns(cols []Column) error {
	if len(cols) != len(e.plans) {
		return errcode.New(errcode.SchemaMismatch, "batch has %d columns, schema %d", len(cols), len(e.plans))
	}
	e.cols = slices.Grow(e.cols[:0], len(cols))[:len(cols)]
	for i, p := range e.plans {
		tc, ok := resolve(cols[i], p.tag, p.content)
		if !ok {
			e.cols = e.cols[:0] // nothing bound
			return errColumn(i, cols[i], p.tag)
		}
		e.cols[i] = tc
	}
	return nil
}

// Encode encodes row i of the bound columns.
func (e *Encoder) Encode(i int) Row {
	var r Row
	b := e.buf[:0]
	for j, p := range e.plans {
		c := &e.cols[j]
		if c.c.IsNull(i) {
			b = AppendNull(b, p.tag)
			continue
		}
		if p.content {
			if c.cc != nil {
				r.Content = *c.cc.Digest(i)
				r.LogicalBytes += int64(c.cc.Len(i))
			} else if p.tag == TagUTF8 {
				v := c.s.Value(i)
				r.Content = sha256.Sum256(bytesOf(v))
				r.LogicalBytes += int64(len(v))
			} else {
				v := c.b.Value(i)
				r.Content = sha256.Sum256(v)
				r.LogicalBytes += int64(len(v))
			}
			b = AppendContent(b, p.tag, &r.Content)
			continue
		}
		switch p.tag {
		case TagUTF8:
			v := c.s.Value(i)
			r.LogicalBytes += int64(len(v))
			b = AppendString(b, p.tag, v)
		case TagBinary:
			v := c.b.Value(i)
			r.LogicalBytes += int64(len(v))
			b = AppendBytes(b, p.tag, v)
		case TagInt64:
			b = AppendInt64(b, c.i64.Value(i))
		case TagInt32:
			b = AppendInt32(b, c.i32.Value(i))
		case TagFloat64:
			b = AppendFloat64(b, c.f64.Value(i))
		case TagBool:
			b = AppendBool(b, c.bo.Value(i))
		}
		r.LogicalBytes += p.width
	}
	e.buf = b
	r.Record = b
	return r
}

const logicalPrefix = "sp.logical.v1\x00"

// LogicalHasher computes a shard's logical digest from its canonical
// records in stored order.
type LogicalHasher struct {
	h hash.Hash
	// buf gathers length-prefixed records, so the digest takes them
	// blocks at a time rather than two short writes per record.
	buf []byte
}

// logicalBuf is the size of a LogicalHasher's record buffer.
const logicalBuf = 16 << 10

// NewLogicalHasher starts a logical digest bound to a recordSchema digest.
func NewLogicalHasher(schemaDigest manifest.Digest) *LogicalHasher {
	l := &LogicalHasher{h: sha256.New(), buf: make([]byte, 0, logicalBuf)}
	l.h.Write([]byte(logicalPrefix))
	l.h.Write(schemaDigest[:])
	return l
}

// Add appends one canonical record.
func (l *LogicalHasher) Add(rec []byte) {
	if len(l.buf)+4+len(rec) > cap(l.buf) {
		l.flush()
		if 4+len(rec) > cap(l.buf) {
			var n [4]byte
			binary.BigEndian.PutUint32(n[:], uint32(len(rec)))
			l.h.Write(n[:])
			l.h.Write(rec)
			return
		}
	}
	l.buf = binary.BigEndian.AppendUint32(l.buf, uint32(len(rec)))
	l.buf = append(l.buf, rec...)
}

func (l *LogicalHasher) flush() {
	l.h.Write(l.buf)
	l.buf = l.buf[:0]
}

// Sum returns the logical digest of the records added so far.
func (l *LogicalHasher) Sum() manifest.Digest {
	l.flush()
	var d manifest.Digest
	l.h.Sum(d[:0])
	return d
}
