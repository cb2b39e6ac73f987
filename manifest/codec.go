package manifest

import (
	"bytes"
	"encoding/json"

	"github.com/shardproof/shardproof/internal/errcode"
)

// MaxDocumentSize caps every document shardproof decodes (64 MiB: a release
// of ~200,000 shards).
const MaxDocumentSize = 64 << 20

// Encode returns the deterministic stored bytes of a document: compact JSON,
// fields in declaration order, map keys sorted, no trailing newline.
func Encode(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, errcode.Wrap(errcode.BadDocument, err, "encode")
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

func decodeStrict(b []byte, v any) error {
	if len(b) > MaxDocumentSize {
		return errcode.New(errcode.DocumentTooLarge, "document is %d bytes, cap %d", len(b), MaxDocumentSize)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return errcode.Wrap(errcode.BadDocument, err, "decode")
	}
	if dec.More() {
		return errcode.New(errcode.BadDocument, "trailing data after document")
	}
	return nil
}

// DecodeRelease strictly decodes and validates a release manifest.
func DecodeRelease(b []byte) (*Release, error) {
	var r Release
	if err := decodeStrict(b, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// DecodeSnapshot strictly decodes and validates a snapshot manifest.
func DecodeSnapshot(b []byte) (*Snapshot, error) {
	var s Snapshot
	if err := decodeStrict(b, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// DecodeFenceLog strictly decodes a tombstone log or benchmark registry;
// schema must be TombstonesSchema or BenchmarkSchema.
func DecodeFenceLog(b []byte, schema string) (*FenceLog, error) {
	var l FenceLog
	if err := decodeStrict(b, &l); err != nil {
		return nil, err
	}
	return &l, nil
}

// DecodeRecordSchema strictly decodes and validates a record schema.
func DecodeRecordSchema(b []byte) (*RecordSchema, error) {
	var s RecordSchema
	if err := decodeStrict(b, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// DecodeReport strictly decodes a verification report.
func DecodeReport(b []byte) (*Report, error) {
	var r Report
	if err := decodeStrict(b, &r); err != nil {
		return nil, err
	}
	return &r, nil
}
