//go:build cgozstd

package cgozstd

import (
	"bytes"
	"context"
	"sync"
	"testing"

	"github.com/DataDog/zstd"
	"github.com/apache/arrow-go/v18/parquet/compress"

	"github.com/shardproof/shardproof/mapper"
	"github.com/shardproof/shardproof/stage/stagetest"
)

// pureGo is arrow-go's own zstd codec (klauspost/compress): package
// variables are initialised before this package's init replaces it.
var pureGo, _ = compress.GetCodec(compress.Codecs.Zstd)

// page is one compressed Parquet page and its decoded length.
type page struct {
	src []byte
	n   int
}

// recorder decodes with the pure-Go codec and keeps every page it sees,
// and how many arrived with a destination too small to decode into.
type recorder struct {
	compress.Codec
	mu      sync.Mutex
	pages   []page
	noRoom  int
	decoded int
}

func (r *recorder) Decode(dst, src []byte) []byte {
	out := r.Codec.Decode(dst, src)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pages = append(r.pages, page{bytes.Clone(src), len(out)})
	if cap(dst) < len(out) {
		r.noRoom++
	}
	r.decoded += len(out)
	return out
}

// mapRelease maps every shard of a small synthetic release with the codec
// registered at the time and returns the results.
func mapRelease(t testing.TB, samples, shards int) func() []mapper.Result {
	s := stagetest.Store(t)
	res := stagetest.Synth(t, s, samples, shards, 3)
	o := mapper.Options{Store: s, Schema: res.Schema, SchemaDigest: res.RecordSchema}
	return func() []mapper.Result {
		var out []mapper.Result
		for _, d := range res.Release.Shards {
			r, err := mapper.MapShard(context.Background(), o, mapper.Input{Desc: d}, func(*mapper.Tuple) error { return nil })
			if err != nil || !r.Decoded || len(r.Failures) != 0 {
				t.Fatalf("map %s: %v %+v", d.ID, err, r.Failures)
			}
			out = append(out, r)
		}
		return out
	}
}

// recordPages maps a release with the recorder registered.
func recordPages(t testing.TB, samples, shards int) (*recorder, []mapper.Result) {
	mapAll := mapRelease(t, samples, shards)
	rec := &recorder{Codec: pureGo}
	compress.RegisterCodec(compress.Codecs.Zstd, rec)
	defer compress.RegisterCodec(compress.Codecs.Zstd, codec{})
	return rec, mapAll()
}

// The C codec yields the bytes the pure-Go one does, page by page and
// through verify's map path: the same logical and member-set digests.
func TestSameAsPureGo(t *testing.T) {
	if c, _ := compress.GetCodec(compress.Codecs.Zstd); c != (codec{}) {
		t.Fatalf("registered zstd codec is %T, want this package's", c)
	}
	rec, want := recordPages(t, 6000, 2)
	if len(rec.pages) == 0 {
		t.Fatal("no zstd pages decoded")
	}
	for i, p := range rec.pages {
		ref := pureGo.Decode(nil, p.src)
		got, err := codec{}.DecodeWithError(make([]byte, 0, p.n), p.src)
		if err != nil || !bytes.Equal(got, ref) {
			t.Fatalf("page %d: %d bytes, err %v; pure Go gives %d bytes", i, len(got), err, len(ref))
		}
		// No destination, or one too small: the allocating path.
		if got, err := (codec{}).DecodeWithError(make([]byte, 0, p.n/2), p.src); err != nil || !bytes.Equal(got, ref) {
			t.Fatalf("page %d into a short buffer: %d bytes, err %v", i, len(got), err)
		}
	}
	got := mapRelease(t, 6000, 2)()
	for i := range want {
		if got[i].LogicalDigest != want[i].LogicalDigest || got[i].MemberSetDigest != want[i].MemberSetDigest || got[i].Records != want[i].Records {
			t.Fatalf("shard %d: C codec gives %s/%s (%d records), pure Go %s/%s (%d)", i,
				got[i].LogicalDigest, got[i].MemberSetDigest, got[i].Records, want[i].LogicalDigest, want[i].MemberSetDigest, want[i].Records)
		}
	}
	// A corrupt page is an error, not a panic or garbage.
	bad := bytes.Clone(rec.pages[0].src)
	bad[len(bad)/2] ^= 0xff
	if _, err := (codec{}).DecodeWithError(make([]byte, 0, rec.pages[0].n), bad); err == nil {
		t.Fatal("a corrupt page decoded without error")
	}
}

// BenchmarkDecode decompresses the zstd pages of a synthetic release
// (~1 KB text records, level 3, as the bench's) on one goroutine with
// each decoder: MB/s is decoded bytes. It also logs how many pages arrow-go
// handed the codec with a destination too small to decode into.
//
//	CGO_ENABLED=1 go test -tags cgozstd -run '^$' -bench Decode ./internal/cgozstd
func BenchmarkDecode(b *testing.B) {
	rec, _ := recordPages(b, 40000, 2)
	b.Logf("%d pages, %d decoded bytes, %d without room in dst", len(rec.pages), rec.decoded, rec.noRoom)
	dst := make([]byte, 0, 16<<20)
	ctx := zstd.NewCtx()
	for _, c := range []struct {
		name   string
		decode func(dst, src []byte) ([]byte, error)
	}{
		{"pure-go", func(dst, src []byte) ([]byte, error) { return compress.Decode(pureGo, dst, src) }},
		{"cgo", codec{}.DecodeWithError},
		{"cgo-reused-ctx", func(dst, src []byte) ([]byte, error) {
			n, err := ctx.DecompressInto(dst[:cap(dst)], src)
			return dst[:n], err
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(rec.decoded))
			for b.Loop() {
				for _, p := range rec.pages {
					out, err := c.decode(dst[:0], p.src)
					if err != nil || len(out) != p.n {
						b.Fatal(err, len(out), p.n)
					}
				}
			}
		})
	}
}
