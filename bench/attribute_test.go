package main

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/pprof/profile"

	"github.com/shardproof/shardproof/internal/errcode"
)

const sp = "github.com/shardproof/shardproof/"

// Stacks as CPU profiles of verify and of the ceiling record them, leaf
// first, and the kind of work each is charged to.
var classifyCases = []struct {
	stack []string
	want  string
}{
	{[]string{"github.com/klauspost/compress/zstd.sequenceDecs_decodeSync_bmi2", "github.com/klauspost/compress/zstd.(*Decoder).DecodeAll", "github.com/apache/arrow-go/v18/parquet/compress.Decode", "github.com/apache/arrow-go/v18/parquet/file.(*serializedPageReader).Next", sp + "mapper.(*contentCol).read", sp + "coordinator.(*Job).Map"},
		"zstd decompression (Parquet pages)"},
	// zstd inside a reducer's member bucket read is still zstd.
	{[]string{"github.com/klauspost/compress/zstd.sequenceDecs_decodeSync_bmi2", "github.com/apache/arrow-go/v18/parquet/compress.Decode", sp + "mapper.(*Member).ReadBucket", sp + "coordinator.(*memberSource).readBucket", sp + "coordinator.(*Job).reduce"},
		"zstd decompression (Parquet pages)"},
	{[]string{sp + "internal/sha256x2.block2", sp + "internal/sha256x2.SumMany[go.shape.[]uint8]", sp + "internal/canon.ContentDigests", sp + "mapper.(*contentCol).read.func1"},
		"content digests (sha256 of every text)"},
	{[]string{sp + "internal/sha256x2.block2", sp + "internal/sha256x2.SumMany[go.shape.[]uint8]", sp + "internal/canon.ContentDigests", "main.ceiling.func1"},
		"content digests (sha256 of every text)"},
	{[]string{"crypto/internal/fips140/sha256.blockSHANI", "crypto/sha256.Sum256", sp + "mapper.hashMapped", sp + "mapper.mapData"},
		"storage digest (sha256 of every file's bytes)"},
	{[]string{"crypto/internal/fips140/sha256.blockSHANI", "crypto/sha256.Sum256", "main.readCheckedInto", "main.ceiling.func1"},
		"storage digest (sha256 of every file's bytes)"},
	// The harness's read without its hash is reading.
	{[]string{"internal/runtime/syscall/linux.Syscall6", "os.(*File).Read", "io.ReadFull", "main.readCheckedInto", "main.ceiling.func1"},
		"reading the files (syscalls, copies)"},
	{[]string{"internal/runtime/syscall/linux.Syscall6", "os.(*File).Read", sp + "mapper.readAll", sp + "mapper.Prefetch.func1"},
		"reading the files (syscalls, copies)"},
	{[]string{sp + "internal/sha256x2.block2", sp + "internal/sha256x2.Sum2", sp + "mapper.(*Member).digest2", sp + "mapper.(*Member).ReadBucket", sp + "coordinator.(*memberSource).readBucket"},
		"snapshot member buckets (reducers' reads)"},
	{[]string{sp + "shuffle.gatherStrings", sp + "shuffle.(*Buffer).gather", sp + "shuffle.(*Encoder).EncodeRanges", sp + "coordinator.(*Job).Map"},
		"shuffle write (tuple buffers, sort, gather, Arrow IPC, store puts)"},
	// Filling the tuple buffer happens inside the canonical loop; it is
	// shuffle work.
	{[]string{"runtime.memmove", sp + "shuffle.(*Buffer).Append", sp + "coordinator.(*Job).Map.func1", sp + "internal/canon.(*ShardHasher).AddColumns"},
		"shuffle write (tuple buffers, sort, gather, Arrow IPC, store puts)"},
	{[]string{"crypto/internal/fips140/sha256.blockSHANI", sp + "tuplehash.BucketLeafInto", sp + "reducer.(*differ).matches", sp + "reducer.Reduce", sp + "coordinator.(*Job).reduce"},
		"reduce (shuffle reads, bucket leaves, diff)"},
	{[]string{sp + "internal/sha256x2.block2", sp + "internal/sha256x2.Sum2", sp + "internal/canon.(*ShardHasher).AddColumns", sp + "mapper.(*decoding).readColumns"},
		"canonical records, logical digest, tuple digests"},
	// Sum2 runs through SumMany: tuple digests are not content digests.
	{[]string{sp + "internal/sha256x2.block2", sp + "internal/sha256x2.SumMany[go.shape.[]uint8]", sp + "internal/sha256x2.Sum2", sp + "internal/canon.(*ShardHasher).AddColumns", sp + "mapper.(*contentCol).read"},
		"canonical records, logical digest, tuple digests"},
	{[]string{"github.com/apache/arrow-go/v18/parquet/internal/encoding.(*PlainByteArrayDecoder).Decode", "github.com/apache/arrow-go/v18/parquet/file.(*ByteArrayColumnChunkReader).ReadBatchInPage", "main.ceiling.func1"},
		"Parquet pages and values (all columns but zstd)"},
	{[]string{"runtime.scanobject", "runtime.gcDrain", "runtime.gcBgMarkWorker"}, compRuntime},
	{[]string{"encoding/json.(*decodeState).object", "main.loadDataset"}, compOther},
	{nil, compOther},
}

func TestClassify(t *testing.T) {
	for _, c := range classifyCases {
		if got := classify(c.stack); got != c.want {
			t.Errorf("classify(%q)\n = %q, want %q", c.stack, got, c.want)
		}
	}
	names := attributionNames()
	for _, c := range classifyCases {
		if !contains(names, c.want) {
			t.Errorf("component %q is not in the table's list %q", c.want, names)
		}
	}
}

// cpuProfile builds a CPU profile whose sample i has stack stacks[i] and
// takes nanos[i] of CPU.
func cpuProfile(stacks [][]string, nanos []int64) *profile.Profile {
	p := &profile.Profile{
		SampleType: []*profile.ValueType{{Type: "samples", Unit: "count"}, {Type: "cpu", Unit: "nanoseconds"}},
		PeriodType: &profile.ValueType{Type: "cpu", Unit: "nanoseconds"},
		Period:     10_000_000,
	}
	funcs := map[string]*profile.Function{}
	for i, st := range stacks {
		s := &profile.Sample{Value: []int64{nanos[i] / 10_000_000, nanos[i]}}
		for _, name := range st {
			fn := funcs[name]
			if fn == nil {
				fn = &profile.Function{ID: uint64(len(funcs) + 1), Name: name, SystemName: name}
				funcs[name] = fn
				p.Function = append(p.Function, fn)
			}
			loc := &profile.Location{ID: uint64(len(p.Location) + 1), Line: []profile.Line{{Function: fn}}}
			p.Location = append(p.Location, loc)
			s.Location = append(s.Location, loc)
		}
		p.Sample = append(p.Sample, s)
	}
	return p
}

func TestAttributeProfile(t *testing.T) {
	var stacks [][]string
	var nanos []int64
	want := map[string]float64{}
	for i, c := range classifyCases {
		n := int64(i+1) * 10_000_000
		stacks, nanos = append(stacks, c.stack), append(nanos, n)
		want[c.want] += float64(n) / 1e9
	}
	p := cpuProfile(stacks, nanos)
	if err := p.CheckValid(); err != nil {
		t.Fatal(err)
	}
	// Through a file, as spbench attribute and the profiled round read it.
	path := filepath.Join(t.TempDir(), "cpu.prof")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Write(f); err != nil {
		t.Fatal(err)
	}
	f.Close()
	got, err := attributeFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("components %v, want %v", got, want)
	}
	for k, v := range want {
		if math.Abs(got[k]-v) > 1e-9 {
			t.Errorf("%s: %.3f s, want %.3f", k, got[k], v)
		}
	}

	// A profile of something else than CPU time is refused.
	p.SampleType = []*profile.ValueType{{Type: "alloc_objects", Unit: "count"}, {Type: "alloc_space", Unit: "bytes"}}
	if _, err := attribute(p); errcode.Of(err) != errcode.Usage {
		t.Fatalf("heap profile: %v (code %s), want %s", err, errcode.Of(err), errcode.Usage)
	}
	bad := filepath.Join(t.TempDir(), "bad.prof")
	os.WriteFile(bad, []byte("not a profile"), 0o644)
	if _, err := attributeFile(bad); errcode.Of(err) != errcode.Usage {
		t.Fatalf("garbage: %v (code %s), want %s", err, errcode.Of(err), errcode.Usage)
	}
}

func TestAttributionMarkdown(t *testing.T) {
	a := &Attribution{Components: attributionNames(),
		Verify:  map[string]float64{"zstd decompression (Parquet pages)": 3.5, "reduce (shuffle reads, bucket leaves, diff)": 0.75},
		Ceiling: map[string]float64{"zstd decompression (Parquet pages)": 3.25},
	}
	md := a.markdown()
	for _, row := range []string{
		"| zstd decompression (Parquet pages) | 3.50 | 3.25 | 0.25 |",
		"| reduce (shuffle reads, bucket leaves, diff) | 0.75 | 0.00 | 0.75 |",
		"| all | **4.25** | **3.25** | **1.00** |",
	} {
		if !strings.Contains(md, row) {
			t.Errorf("markdown lacks %q:\n%s", row, md)
		}
	}
	// Kinds no profile spent time on are left out.
	if strings.Contains(md, "content digests") {
		t.Errorf("markdown lists a kind with no time:\n%s", md)
	}
	r := &Result{Attribution: a}
	if !strings.Contains(r.Markdown(), md) {
		t.Errorf("the run's Markdown lacks the attribution table")
	}
}

// TestRenderAttributesAgain: spbench render re-attributes a run's kept
// profiles (so a rule change reaches it), and leaves a run whose profiles
// are gone as it was.
func TestRenderAttributesAgain(t *testing.T) {
	dir := t.TempDir()
	writeProf := func(name string, stacks [][]string, nanos []int64) string {
		path := filepath.Join(dir, name)
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := cpuProfile(stacks, nanos).Write(f); err != nil {
			t.Fatal(err)
		}
		f.Close()
		return path
	}
	vp := writeProf("verify.prof", [][]string{classifyCases[0].stack, classifyCases[9].stack}, []int64{2e9, 1e9})
	cp := writeProf("ceiling.prof", [][]string{classifyCases[0].stack}, []int64{3e9})
	stale := &Attribution{Components: []string{"old"}, Verify: map[string]float64{"old": 9}, Ceiling: map[string]float64{"old": 9}, Profiles: []string{vp, cp}}
	gone := &Attribution{Components: []string{"old"}, Verify: map[string]float64{"old": 9}, Ceiling: map[string]float64{"old": 9},
		Profiles: []string{filepath.Join(dir, "no.prof"), cp}}
	for _, c := range []struct {
		name string
		a    *Attribution
		want map[string]float64
	}{
		{"kept", stale, map[string]float64{classifyCases[0].want: 2, classifyCases[9].want: 1}},
		{"gone", gone, map[string]float64{"old": 9}},
	} {
		path := filepath.Join(dir, c.name+".json")
		if err := writeOutputs(strings.TrimSuffix(path, ".json"), &Result{Schema: ResultSchema, Attribution: c.a}, "", ""); err != nil {
			t.Fatal(err)
		}
		if err := cmdRender([]string{path}); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var r Result
		if err := json.Unmarshal(b, &r); err != nil {
			t.Fatal(err)
		}
		if r.Attribution == nil || len(r.Attribution.Verify) != len(c.want) {
			t.Fatalf("%s: attribution %+v, want verify %v", c.name, r.Attribution, c.want)
		}
		for k, v := range c.want {
			if math.Abs(r.Attribution.Verify[k]-v) > 1e-9 {
				t.Errorf("%s: verify %s = %v, want %v", c.name, k, r.Attribution.Verify[k], v)
			}
		}
		md, err := os.ReadFile(strings.TrimSuffix(path, ".json") + ".md")
		if err != nil || !strings.Contains(string(md), "verify − ceiling") {
			t.Errorf("%s: rendered Markdown lacks the attribution (err %v)", c.name, err)
		}
	}
}
