package mapper

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"os"
	"path/filepath"
	"runtime/debug"
	"testing"

	"github.com/shardproof/shardproof/internal/mmapfile"
	"github.com/shardproof/shardproof/tuplehash"
)

// mapped returns a mapping of a three-page file that begins and ends with
// Parquet's magic, and the file's path.
func mapped(t *testing.T) (*mmapfile.Mapping, string) {
	t.Helper()
	b := bytes.Repeat([]byte{1}, 3*os.Getpagesize())
	copy(b, "PAR1")
	copy(b[len(b)-4:], "PAR1")
	name := filepath.Join(t.TempDir(), "shard")
	if err := os.WriteFile(name, b, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m, err := mmapfile.Map(f, int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m, name
}

// TestMappedFileShrinking: a shard file that shrinks while mapped makes
// hashing and decoding return errMapFault (an I/O error for the caller)
// instead of killing the process with SIGBUS, and is never reported as
// bytes that fail to decode.
func TestMappedFileShrinking(t *testing.T) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))

	m, name := mapped(t)
	if sum, err := hashMapped(m.Bytes(), m); err != nil || sum != sha256.Sum256(m.Bytes()) {
		t.Fatalf("intact mapping: sum %x, err %v", sum, err)
	}
	if err := os.Truncate(name, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := hashMapped(m.Bytes(), m); !errors.Is(err, errMapFault) {
		t.Fatalf("hashing a shrunk mapping: err %v, want errMapFault", err)
	}

	m, name = mapped(t)
	if err := os.Truncate(name, 0); err != nil {
		t.Fatal(err)
	}
	d := decoding{mapping: m}
	res, err := d.run(context.Background(), m.Bytes(), DecoderColumnReader, func(*tuplehash.Tuple, [32]byte) error { return nil })
	if !errors.Is(err, errMapFault) || res.decoded || len(res.failures) != 0 {
		t.Fatalf("decoding a shrunk mapping: err %v, decoded %v, failures %v; want errMapFault and no failure", err, res.decoded, res.failures)
	}
}
