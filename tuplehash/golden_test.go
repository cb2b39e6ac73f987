package tuplehash

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// -update writes a golden file only when it does not exist yet: published
// vectors are frozen, and changing them needs a deliberate delete.
var update = flag.Bool("update", false, "write missing golden files in testdata/")

const (
	vectorsFile = "testdata/vectors.json"
	digestsFile = "testdata/digests.json"
)

// vector is one entry of testdata/vectors.json. Digests use the
// "sha256:<hex>" string form so other implementations can read them.
type vector struct {
	SampleID             string `json:"sampleId"`
	SourceID             string `json:"sourceId"`
	SourceVersion        int64  `json:"sourceVersion"`
	LogicalContentDigest string `json:"logicalContentDigest"`
	Split                string `json:"split"`
	SchemaDigest         string `json:"schemaDigest"`
	EncodingHex          string `json:"encodingHex"`
	TupleDigest          string `json:"tupleDigest"`
	Bucket12             uint32 `json:"bucket12"`
}

func sha(s string) [32]byte { return sha256.Sum256([]byte(s)) }

func dstr(d [32]byte) string { return "sha256:" + hex.EncodeToString(d[:]) }

func parseD(t testing.TB, s string) [32]byte {
	t.Helper()
	var d [32]byte
	h, ok := strings.CutPrefix(s, "sha256:")
	if !ok || len(h) != 64 || strings.ToLower(h) != h {
		t.Fatalf("bad digest string %q in golden file", s)
	}
	if _, err := hex.Decode(d[:], []byte(h)); err != nil {
		t.Fatalf("bad digest string %q: %v", s, err)
	}
	return d
}

// vectorInputs are the tuples the vectors are generated from.
func vectorInputs() []Tuple {
	schema := sha("training.record.schema.v1 example")
	return []Tuple{
		{}, // every field empty or zero
		{SampleID: "doc-000001", SourceID: "commoncrawl/2024-10", SourceVersion: 3, LogicalContentDigest: sha("hello"), Split: "train", SchemaDigest: schema},
		{SampleID: "サンプル-😀", SourceID: "źródło/ü", SourceVersion: 7, LogicalContentDigest: sha("ünïcödé"), Split: "validación", SchemaDigest: schema},
		{SampleID: "long-split", SourceID: "src", SourceVersion: 1, LogicalContentDigest: sha("x"), Split: strings.Repeat("s", MaxSplitLen), SchemaDigest: schema},
		{SampleID: "long-utf8-split", SourceID: "src", SourceVersion: 1, LogicalContentDigest: sha("x"), Split: strings.Repeat("é", 127) + "!", SchemaDigest: schema},
		{SampleID: "neg", SourceID: "src", SourceVersion: -1, LogicalContentDigest: sha("n"), Split: "test", SchemaDigest: schema},
		{SampleID: "min", SourceID: "src", SourceVersion: math.MinInt64, LogicalContentDigest: sha("min"), Split: "test", SchemaDigest: schema},
		{SampleID: "max", SourceID: "src", SourceVersion: math.MaxInt64, LogicalContentDigest: sha("max"), Split: "test", SchemaDigest: schema},
		{SampleID: "ab", SourceID: "c", SourceVersion: 1, LogicalContentDigest: sha("boundary"), Split: "train", SchemaDigest: schema},
		{SampleID: "a", SourceID: "bc", SourceVersion: 1, LogicalContentDigest: sha("boundary"), Split: "train", SchemaDigest: schema},
		{SampleID: "nul\x00inside", SourceID: "\x00", SourceVersion: 0, LogicalContentDigest: sha(""), Split: "\x00", SchemaDigest: schema},
		{SampleID: strings.Repeat("0123456789", 10), SourceID: "long-id (xxh64 32-byte stripes)", SourceVersion: 1 << 40, LogicalContentDigest: sha("long"), Split: "train", SchemaDigest: schema},
	}
}

func makeVector(t testing.TB, tu Tuple) vector {
	enc, err := tu.Encode()
	if err != nil {
		t.Fatal(err)
	}
	d, err := tu.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return vector{
		SampleID: tu.SampleID, SourceID: tu.SourceID, SourceVersion: tu.SourceVersion,
		LogicalContentDigest: dstr(tu.LogicalContentDigest), Split: tu.Split,
		SchemaDigest: dstr(tu.SchemaDigest), EncodingHex: hex.EncodeToString(enc),
		TupleDigest: dstr(d), Bucket12: Bucket(tu.SampleID, DefaultK),
	}
}

// writeGolden writes v to path unless the file already exists.
func writeGolden(t *testing.T, path string, v any) {
	t.Helper()
	if _, err := os.Stat(path); err == nil {
		t.Logf("%s exists and is frozen; not rewriting it (delete it to regenerate)", path)
		return
	} else if !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s", path)
}

func loadVectors(t *testing.T) []vector {
	t.Helper()
	if *update {
		var vs []vector
		for _, tu := range vectorInputs() {
			vs = append(vs, makeVector(t, tu))
		}
		writeGolden(t, vectorsFile, vs)
	}
	b, err := os.ReadFile(vectorsFile)
	if err != nil {
		t.Fatal(err)
	}
	var raw []map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatal(err)
	}
	for i, m := range raw {
		if len(m) != 9 {
			t.Errorf("vector %d has %d keys, want exactly the 9 documented ones", i, len(m))
		}
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var vs []vector
	if err := dec.Decode(&vs); err != nil {
		t.Fatal(err)
	}
	return vs
}

func TestVectors(t *testing.T) {
	vs := loadVectors(t)
	if len(vs) < len(vectorInputs()) {
		t.Fatalf("%s has %d vectors, want at least %d", vectorsFile, len(vs), len(vectorInputs()))
	}
	for i, v := range vs {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			tu := Tuple{
				SampleID: v.SampleID, SourceID: v.SourceID, SourceVersion: v.SourceVersion,
				LogicalContentDigest: parseD(t, v.LogicalContentDigest), Split: v.Split,
				SchemaDigest: parseD(t, v.SchemaDigest),
			}
			want, err := hex.DecodeString(v.EncodingHex)
			if err != nil {
				t.Fatal(err)
			}
			got, err := tu.Encode()
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("package encoding\n got %x\nwant %s", got, v.EncodingHex)
			}
			ref := refEncode(tu.SampleID, tu.SourceID, tu.SourceVersion, tu.LogicalContentDigest, tu.Split, tu.SchemaDigest)
			if !bytes.Equal(ref, want) {
				t.Errorf("reference encoding\n got %x\nwant %s", ref, v.EncodingHex)
			}
			if len(got) != tu.EncodedLen() {
				t.Errorf("EncodedLen = %d, encoding is %d bytes", tu.EncodedLen(), len(got))
			}
			d, err := tu.Digest()
			if err != nil {
				t.Fatal(err)
			}
			if dstr(d) != v.TupleDigest {
				t.Errorf("package digest %s, want %s", dstr(d), v.TupleDigest)
			}
			if rd := sha256.Sum256(ref); dstr(rd) != v.TupleDigest {
				t.Errorf("reference digest %s, want %s", dstr(rd), v.TupleDigest)
			}
			if b := Bucket(tu.SampleID, DefaultK); b != v.Bucket12 {
				t.Errorf("package bucket12 %d, want %d", b, v.Bucket12)
			}
			if b := refBucket(tu.SampleID, DefaultK); b != v.Bucket12 {
				t.Errorf("reference bucket12 %d, want %d", b, v.Bucket12)
			}
			back, err := Decode(want)
			if err != nil {
				t.Fatal(err)
			}
			if back != tu {
				t.Errorf("Decode(encoding) = %+v, want %+v", back, tu)
			}
		})
	}
}

// TestVectorCoverage pins the cases the vector file must contain, so a
// regenerated file cannot silently drop one.
func TestVectorCoverage(t *testing.T) {
	vs := loadVectors(t)
	has := func(pred func(v vector) bool) bool { return slices.ContainsFunc(vs, pred) }
	cases := map[string]func(v vector) bool{
		"empty strings":      func(v vector) bool { return v.SampleID == "" && v.SourceID == "" && v.Split == "" },
		"multi-byte UTF-8":   func(v vector) bool { return len(v.SampleID) > len([]rune(v.SampleID)) },
		"255-byte split":     func(v vector) bool { return len(v.Split) == MaxSplitLen },
		"negative version":   func(v vector) bool { return v.SourceVersion == -1 },
		"min int64 version":  func(v vector) bool { return v.SourceVersion == math.MinInt64 },
		"max int64 version":  func(v vector) bool { return v.SourceVersion == math.MaxInt64 },
		"boundary ab|c":      func(v vector) bool { return v.SampleID == "ab" && v.SourceID == "c" },
		"boundary a|bc":      func(v vector) bool { return v.SampleID == "a" && v.SourceID == "bc" },
		"sampleId >32 bytes": func(v vector) bool { return len(v.SampleID) > 32 },
	}
	for name, pred := range cases {
		if !has(pred) {
			t.Errorf("no vector for %s", name)
		}
	}
	var ab, abc vector
	for _, v := range vs {
		switch {
		case v.SampleID == "ab" && v.SourceID == "c":
			ab = v
		case v.SampleID == "a" && v.SourceID == "bc":
			abc = v
		}
	}
	if ab.EncodingHex == abc.EncodingHex || ab.TupleDigest == abc.TupleDigest {
		t.Errorf("(ab,c) and (a,bc) share an encoding or digest: %s", ab.TupleDigest)
	}
}

func TestXXH64Reference(t *testing.T) {
	// Published XXH64 values (seed 0) from the xxHash reference.
	for in, want := range map[string]uint64{
		"":    0xef46db3751d8e999,
		"a":   0xd24ec4f1a98c6e5b,
		"abc": 0x44bc2cf5ad770999,
	} {
		if got := refXXH64([]byte(in), 0); got != want {
			t.Errorf("refXXH64(%q) = %#x, want %#x", in, got, want)
		}
		if got := Key64(in); got != want {
			t.Errorf("Key64(%q) = %#x, want %#x", in, got, want)
		}
	}
	for _, tu := range vectorInputs() {
		for _, k := range []uint{1, 12, 24, 32} {
			if got, want := Bucket(tu.SampleID, k), refBucket(tu.SampleID, k); got != want {
				t.Errorf("Bucket(%q, %d) = %d, reference %d", tu.SampleID, k, got, want)
			}
		}
	}
}

func TestSplitTooLong(t *testing.T) {
	tu := Tuple{SampleID: "x", Split: strings.Repeat("s", MaxSplitLen+1)}
	if _, err := tu.Encode(); !errors.Is(err, ErrSplitTooLong) {
		t.Fatalf("Encode with a 256-byte split: err = %v, want ErrSplitTooLong", err)
	}
	if _, err := tu.Digest(); !errors.Is(err, ErrSplitTooLong) {
		t.Fatalf("Digest with a 256-byte split: err = %v, want ErrSplitTooLong", err)
	}
}

// digestGolden is testdata/digests.json: the set, leaf, root and binding
// formats over fixed inputs.
type digestGolden struct {
	MemberSet []struct {
		Digests []string `json:"digests"`
		Want    string   `json:"want"`
	} `json:"memberSet"`
	BucketLeaf []struct {
		Bucket  uint32   `json:"bucket"`
		Digests []string `json:"digests"`
		Want    string   `json:"want"`
	} `json:"bucketLeaf"`
	// MerkleRoot[n] is the root over the first n of MerkleLeaves.
	MerkleLeaves []string `json:"merkleLeaves"`
	MerkleRoot   []string `json:"merkleRoot"`
	BindRoot     []struct {
		MerkleRoot         string `json:"merkleRoot"`
		DatasetSnapshot    string `json:"datasetSnapshot"`
		TombstoneWatermark uint64 `json:"tombstoneWatermark"`
		BenchmarkFence     uint64 `json:"benchmarkFence"`
		Want               string `json:"want"`
	} `json:"bindRoot"`
}

func vectorDigests(t testing.TB) [][32]byte {
	var ds [][32]byte
	for _, tu := range vectorInputs() {
		d, err := tu.Digest()
		if err != nil {
			t.Fatal(err)
		}
		ds = append(ds, d)
	}
	return ds
}

func strs(ds [][32]byte) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = dstr(d)
	}
	return out
}

func makeDigestGolden(t testing.TB) digestGolden {
	var g digestGolden
	ds := vectorDigests(t)
	rev := slices.Clone(ds)
	slices.Reverse(rev)
	for _, set := range [][][32]byte{nil, ds[:1], ds, rev} {
		in := strs(set)
		if in == nil {
			in = []string{}
		}
		g.MemberSet = append(g.MemberSet, struct {
			Digests []string `json:"digests"`
			Want    string   `json:"want"`
		}{in, dstr(MemberSetDigest(slices.Clone(set)))})
	}
	for _, c := range []struct {
		b   uint32
		set [][32]byte
	}{{0, nil}, {4095, nil}, {7, ds[:3]}, {1<<32 - 1, rev}} {
		in := strs(c.set)
		if in == nil {
			in = []string{}
		}
		g.BucketLeaf = append(g.BucketLeaf, struct {
			Bucket  uint32   `json:"bucket"`
			Digests []string `json:"digests"`
			Want    string   `json:"want"`
		}{c.b, in, dstr(BucketLeaf(c.b, slices.Clone(c.set)))})
	}
	var leaves [][32]byte
	for i := range 9 {
		leaves = append(leaves, BucketLeaf(uint32(i), ds[i:i+1]))
	}
	g.MerkleLeaves = strs(leaves)
	for n := 0; n <= len(leaves); n++ {
		g.MerkleRoot = append(g.MerkleRoot, dstr(MerkleRoot(leaves[:n])))
	}
	for _, c := range []struct {
		root, snap [32]byte
		tw, bf     uint64
	}{
		{MerkleRoot(nil), [32]byte{}, 0, 0},
		{MerkleRoot(leaves), sha("snapshot"), 44192, 3908},
		{MerkleRoot(leaves[:5]), sha("snapshot"), math.MaxUint64, 1},
	} {
		g.BindRoot = append(g.BindRoot, struct {
			MerkleRoot         string `json:"merkleRoot"`
			DatasetSnapshot    string `json:"datasetSnapshot"`
			TombstoneWatermark uint64 `json:"tombstoneWatermark"`
			BenchmarkFence     uint64 `json:"benchmarkFence"`
			Want               string `json:"want"`
		}{dstr(c.root), dstr(c.snap), c.tw, c.bf, dstr(BindRoot(c.root, c.snap, c.tw, c.bf))})
	}
	return g
}

func parseAll(t testing.TB, ss []string) [][32]byte {
	out := make([][32]byte, len(ss))
	for i, s := range ss {
		out[i] = parseD(t, s)
	}
	return out
}

func TestDigestGolden(t *testing.T) {
	if *update {
		writeGolden(t, digestsFile, makeDigestGolden(t))
	}
	b, err := os.ReadFile(digestsFile)
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var g digestGolden
	if err := dec.Decode(&g); err != nil {
		t.Fatal(err)
	}
	if len(g.MemberSet) == 0 || len(g.BucketLeaf) == 0 || len(g.BindRoot) == 0 || len(g.MerkleRoot) != 10 || len(g.MerkleLeaves) != 9 {
		t.Fatalf("%s is incomplete", digestsFile)
	}
	for i, c := range g.MemberSet {
		in := parseAll(t, c.Digests)
		if got := dstr(refMemberSet(in)); got != c.Want {
			t.Errorf("memberSet[%d]: reference %s, want %s", i, got, c.Want)
		}
		if got := dstr(MemberSetDigest(in)); got != c.Want {
			t.Errorf("memberSet[%d]: package %s, want %s", i, got, c.Want)
		}
	}
	// The same set in two orders must have one digest.
	if g.MemberSet[2].Want != g.MemberSet[3].Want {
		t.Errorf("memberSet depends on order: %s vs %s", g.MemberSet[2].Want, g.MemberSet[3].Want)
	}
	for i, c := range g.BucketLeaf {
		in := parseAll(t, c.Digests)
		if got := dstr(refBucketLeaf(c.Bucket, in)); got != c.Want {
			t.Errorf("bucketLeaf[%d]: reference %s, want %s", i, got, c.Want)
		}
		if got := dstr(BucketLeaf(c.Bucket, in)); got != c.Want {
			t.Errorf("bucketLeaf[%d]: package %s, want %s", i, got, c.Want)
		}
	}
	leaves := parseAll(t, g.MerkleLeaves)
	for n, want := range g.MerkleRoot {
		if got := dstr(refMerkleRoot(leaves[:n])); got != want {
			t.Errorf("merkleRoot(%d leaves): reference %s, want %s", n, got, want)
		}
		if got := dstr(MerkleRoot(leaves[:n])); got != want {
			t.Errorf("merkleRoot(%d leaves): package %s, want %s", n, got, want)
		}
	}
	for i, c := range g.BindRoot {
		root, snap := parseD(t, c.MerkleRoot), parseD(t, c.DatasetSnapshot)
		if got := dstr(refBindRoot(root, snap, c.TombstoneWatermark, c.BenchmarkFence)); got != c.Want {
			t.Errorf("bindRoot[%d]: reference %s, want %s", i, got, c.Want)
		}
		if got := dstr(BindRoot(root, snap, c.TombstoneWatermark, c.BenchmarkFence)); got != c.Want {
			t.Errorf("bindRoot[%d]: package %s, want %s", i, got, c.Want)
		}
	}
}

// TestMerkleRootMatchesReference compares the recursive and the stack form
// beyond the golden sizes, across every power-of-two boundary up to 70.
func TestMerkleRootMatchesReference(t *testing.T) {
	var leaves [][32]byte
	for i := range 70 {
		leaves = append(leaves, sha256.Sum256(binary.BigEndian.AppendUint32(nil, uint32(i))))
	}
	seen := map[[32]byte]int{}
	for n := 0; n <= len(leaves); n++ {
		got, want := MerkleRoot(leaves[:n]), refMerkleRoot(leaves[:n])
		if got != want {
			t.Errorf("MerkleRoot(%d leaves) = %x, reference %x", n, got, want)
		}
		if m, ok := seen[got]; ok {
			t.Errorf("MerkleRoot of %d and %d leaves collide", m, n)
		}
		seen[got] = n
	}
	// Leaves are hashed with the 0x00 prefix and interior nodes with 0x01
	// (RFC 6962 domain separation), so a leaf can never pose as a node.
	h0 := sha256.Sum256(append([]byte{0x00}, leaves[0][:]...))
	h1 := sha256.Sum256(append([]byte{0x00}, leaves[1][:]...))
	if want := sha256.Sum256(append(append([]byte{0x01}, h0[:]...), h1[:]...)); MerkleRoot(leaves[:2]) != want {
		t.Fatalf("root of 2 leaves is not sha256(0x01 || leaf(0) || leaf(1))")
	}
	if h0 != MerkleRoot(leaves[:1]) {
		t.Fatalf("root of 1 leaf is not sha256(0x00 || leaf)")
	}
}
