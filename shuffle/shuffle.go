package shuffle

import (
	"bytes"
	"cmp"
	"slices"
	"strconv"

	"github.com/apache/arrow-go/v18/arrow"
)

// Side says which document a tuple came from. The values equal mapper.Side.
type Side uint8

// Sides.
const (
	Release  Side = 0
	Snapshot Side = 1
)

// String returns "release" or "snapshot", as ShardFailure.Side spells it.
func (s Side) String() string {
	switch s {
	case Release:
		return "release"
	case Snapshot:
		return "snapshot"
	}
	return "side(" + strconv.Itoa(int(s)) + ")"
}

// Compression is how a shuffle file's Arrow IPC stream is stored. A plan
// names one for all its files.
type Compression string

// Compressions. The empty value is Zstd, the default, so plans written
// before the choice existed keep their meaning.
const (
	// Zstd compresses the whole stream into one zstd frame (64 KiB
	// window, checksum): for shuffles that cross a network.
	Zstd Compression = "zstd"
	// None stores the stream as is: about 1.8 times the bytes (two
	// thirds of a row is random digests), no decoder state per open
	// file, less CPU. For shuffles that stay on one machine.
	None Compression = "none"
)

// Valid reports whether c names a compression ("" is Zstd).
func (c Compression) Valid() bool { return c == "" || c == Zstd || c == None }

// Checksum is what a shuffle file's bytes are checked with, from the map
// task that wrote them (its commit record) to the reducer that reads
// them. A plan names one for all its files.
type Checksum string

// Checksums. The empty value is SHA256, the default, so plans written
// before the choice existed keep their meaning.
const (
	// SHA256 is for shuffles that cross machines or processes (the
	// process, Slurm and Kubernetes executors): a file another process
	// wrote is checked as any stored object is.
	SHA256 Checksum = "sha256"
	// XXH64 is for shuffles one process writes and reads back within
	// seconds (the local executor): it catches a damaged or truncated
	// file, and costs a twentieth of sha256's CPU, which was a tenth of
	// a local verification's.
	XXH64 Checksum = "xxh64"
)

// Valid reports whether c names a checksum ("" is SHA256).
func (c Checksum) Valid() bool { return c == "" || c == SHA256 || c == XXH64 }

// Row is one tuple in transit from a map task to a reducer: the tuple's
// fields, its bucket, the side it came from and its tuple digest.
type Row struct {
	Bucket        uint32
	Side          Side
	SampleID      string
	SourceID      string
	SourceVersion int64
	ContentDigest [32]byte
	Split         string
	SchemaDigest  [32]byte
	TupleDigest   [32]byte
}

// Compare orders rows by (bucket, sampleId, side, tupleDigest): the order of
// every shuffle file and of a reducer's merged bucket.
func Compare(a, b *Row) int {
	if c := cmp.Compare(a.Bucket, b.Bucket); c != 0 {
		return c
	}
	if c := cmp.Compare(a.SampleID, b.SampleID); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Side, b.Side); c != 0 {
		return c
	}
	return bytes.Compare(a.TupleDigest[:], b.TupleDigest[:])
}

// Sort sorts rows into shuffle order.
func Sort(rows []Row) {
	slices.SortFunc(rows, func(a, b Row) int { return Compare(&a, &b) })
}

// Column names of the Arrow schema, in order.
const (
	ColBucket        = "bucket"
	ColSide          = "side"
	ColSampleID      = "sampleId"
	ColSourceID      = "sourceId"
	ColSourceVersion = "sourceVersion"
	ColContentDigest = "contentDigest"
	ColSplit         = "split"
	ColSchemaDigest  = "schemaDigest"
	ColTupleDigest   = "tupleDigest"
)

var digestType = &arrow.FixedSizeBinaryType{ByteWidth: 32}

// schemaDictType is the schemaDigest column's type: a file's rows name
// one or two distinct digests, so each is stored once, in the file's
// dictionary (ascending), and a row holds its index.
var schemaDictType = &arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int32, ValueType: digestType}

// Schema is the Arrow schema of a shuffle file. Every column is non-null.
var Schema = arrow.NewSchema([]arrow.Field{
	{Name: ColBucket, Type: arrow.PrimitiveTypes.Uint32},
	{Name: ColSide, Type: arrow.PrimitiveTypes.Uint8},
	{Name: ColSampleID, Type: arrow.BinaryTypes.String},
	{Name: ColSourceID, Type: arrow.BinaryTypes.String},
	{Name: ColSourceVersion, Type: arrow.PrimitiveTypes.Int64},
	{Name: ColContentDigest, Type: digestType},
	{Name: ColSplit, Type: arrow.BinaryTypes.String},
	{Name: ColSchemaDigest, Type: schemaDictType},
	{Name: ColTupleDigest, Type: digestType},
}, nil)
