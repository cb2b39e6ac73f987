package main

// Documents of docs/FORMATS.md "Documents": compact JSON, fields in
// declaration order, no trailing newline. Shapes from manifest/testdata.

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
)

type SchemaField struct {
	Name     string `json:"name"`
	Type     string `json:"type"`
	Nullable bool   `json:"nullable"`
}

type TupleColumns struct {
	SampleID      string `json:"sampleId"`
	SourceID      string `json:"sourceId"`
	SourceVersion string `json:"sourceVersion"`
	Split         string `json:"split"`
}

type RecordSchemaDoc struct {
	Schema  string        `json:"schema"`
	Fields  []SchemaField `json:"fields"`
	Content string        `json:"content"`
	Tuple   TupleColumns  `json:"tuple"`
	Tokens  string        `json:"tokens"` // always present: "" when there is no tokens column
}

type Build struct {
	Serializer           string `json:"serializer"`
	SerializerVersion    string `json:"serializerVersion"`
	SortSeed             int64  `json:"sortSeed"`
	ShardingFunction     string `json:"shardingFunction"`
	Compression          string `json:"compression"`
	CompressionLevel     int    `json:"compressionLevel"`
	EncryptionKeyVersion string `json:"encryptionKeyVersion"`
	EncryptionAadScheme  string `json:"encryptionAadScheme"`
	MemberPartition      string `json:"memberPartition"`
}

type BucketRange struct {
	Lo int `json:"lo"`
	Hi int `json:"hi"`
}

type Descriptor struct {
	ID              string       `json:"id"`
	MediaType       string       `json:"mediaType"`
	Digest          string       `json:"digest"`
	Size            int64        `json:"size"`
	ObjectVersion   string       `json:"objectVersion"`
	LogicalDigest   string       `json:"logicalDigest"`
	Records         int64        `json:"records"`
	Tokens          int64        `json:"tokens"`
	MemberSetDigest string       `json:"memberSetDigest"`
	Buckets         *BucketRange `json:"buckets,omitempty"`
}

type Totals struct {
	Shards  int64 `json:"shards"`
	Records int64 `json:"records"`
	Tokens  int64 `json:"tokens"`
}

type ReleaseDoc struct {
	Schema                 string       `json:"schema"`
	DatasetSnapshot        string       `json:"datasetSnapshot"`
	TombstoneWatermark     uint64       `json:"tombstoneWatermark"`
	BenchmarkFence         uint64       `json:"benchmarkFence"`
	RecordSchema           string       `json:"recordSchema"`
	Build                  Build        `json:"build"`
	Shards                 []Descriptor `json:"shards"`
	Totals                 Totals       `json:"totals"`
	OrderedMemberTupleRoot string       `json:"orderedMemberTupleRoot"`
}

type SnapshotDoc struct {
	Schema          string       `json:"schema"`
	RecordSchema    string       `json:"recordSchema"`
	MemberPartition string       `json:"memberPartition"`
	Members         []Descriptor `json:"members"`
	Totals          Totals       `json:"totals"`
	TupleRoot       string       `json:"tupleRoot"`
}

// encodeDoc: compact JSON in declaration order, no HTML escaping, no newline.
func encodeDoc(v any) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		panic(err)
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

func sha(s string) string {
	d := sha256.Sum256([]byte(s))
	return "sha256:" + hex.EncodeToString(d[:])
}
