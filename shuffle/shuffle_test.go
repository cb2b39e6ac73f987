package shuffle

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/tuplehash"
)

const testK = 8

// makeRows returns n sorted rows in buckets [0, 2^testK), some sampleIds on
// both sides.
func makeRows(n int) []Row {
	rows := make([]Row, 0, n)
	for i := 0; len(rows) < n; i++ {
		id := fmt.Sprintf("sample-%06d", i)
		for side := Release; side <= Snapshot && len(rows) < n; side++ {
			r := Row{
				Bucket:        tuplehash.Bucket(id, testK),
				Side:          side,
				SampleID:      id,
				SourceID:      fmt.Sprintf("src-%d", i%7),
				SourceVersion: int64(i % 3),
				Split:         []string{"train", "val"}[i%2],
			}
			r.ContentDigest = sha256.Sum256([]byte(id))
			// Most tuples name one schema; a mixed-in few name twelve
			// others, more than a Buffer scans before it keeps a map.
			r.SchemaDigest = sha256.Sum256([]byte("schema"))
			if i%5 == 4 {
				r.SchemaDigest = sha256.Sum256(fmt.Appendf(nil, "schema %d", i%12))
			}
			r.TupleDigest = sha256.Sum256(append([]byte(id), byte(side)))
			rows = append(rows, r)
		}
	}
	Sort(rows)
	return rows
}

func encode(t testing.TB, rows []Row) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := Write(&buf, rows); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func readAll(b []byte, lo, hi uint32) ([]Row, []uint32, error) {
	return readAllCompression(b, Zstd, lo, hi)
}

// readAllCompression reads a whole shuffle file stored with compression c.
func readAllCompression(b []byte, c Compression, lo, hi uint32) ([]Row, []uint32, error) {
	rd, err := NewReaderCompression(bytes.NewReader(b), c, int64(len(b)), "test", testK, lo, hi)
	if err != nil {
		return nil, nil, err
	}
	defer rd.Close()
	var rows []Row
	var buckets []uint32
	for {
		b, rs, err := rd.Next()
		if err == io.EOF {
			return rows, buckets, nil
		}
		if err != nil {
			return rows, buckets, err
		}
		for i := range rs {
			if rs[i].Bucket != b {
				return nil, nil, fmt.Errorf("row of bucket %d returned with bucket %d", rs[i].Bucket, b)
			}
		}
		buckets = append(buckets, b)
		// rs is valid until the next call of Next: keep copies.
		for _, r := range rs {
			r.SampleID = strings.Clone(r.SampleID)
			rows = append(rows, r)
		}
	}
}

func TestRoundTripByBucket(t *testing.T) {
	for _, n := range []int{0, 1, BatchRows - 1, BatchRows, 3*BatchRows + 17} {
		rows := makeRows(n)
		got, buckets, err := readAll(encode(t, rows), 0, 1<<testK)
		if err != nil {
			t.Fatalf("n=%d: %v", n, err)
		}
		if len(got) != len(rows) {
			t.Fatalf("n=%d: read %d rows", n, len(got))
		}
		for i := range rows {
			if got[i] != rows[i] {
				t.Fatalf("n=%d: row %d differs: %+v vs %+v", n, i, got[i], rows[i])
			}
		}
		for i := 1; i < len(buckets); i++ {
			if buckets[i] <= buckets[i-1] {
				t.Fatalf("n=%d: buckets not strictly increasing: %d then %d", n, buckets[i-1], buckets[i])
			}
		}
		distinct := map[uint32]bool{}
		for i := range rows {
			distinct[rows[i].Bucket] = true
		}
		if len(buckets) != len(distinct) {
			t.Fatalf("n=%d: %d bucket groups, want %d", n, len(buckets), len(distinct))
		}
	}
}

// A source that fails to deliver the bytes (a lost S3 connection, a
// silent server, Ctrl-C) is that failure, with its code, wherever in the
// file it happens: nothing showed the file to be corrupt. A bare error (a
// torn local file) is SHUFFLE_CORRUPT as before.
func TestSourceFailureIsNotCorruption(t *testing.T) {
	b := encode(t, makeRows(3*BatchRows+17))
	for _, at := range []int{10, len(b) / 2, len(b) - 1} {
		for _, fail := range []error{errcode.New(errcode.StoreUnavailable, "connection lost"), errcode.New(errcode.Canceled, "canceled"),
			errcode.New(errcode.NoSuchBucket, "bucket deleted"), errcode.New(errcode.StoreDenied, "credentials expired"), errors.New("bare")} {
			want := errcode.Of(fail)
			if want == errcode.Internal {
				want = errcode.ShuffleCorrupt
			}
			src := io.MultiReader(bytes.NewReader(b[:at]), iotest.ErrReader(fail))
			err := func() error {
				rd, err := NewReaderCompression(src, Zstd, int64(len(b)), "test", testK, 0, 1<<testK)
				if err != nil {
					return err
				}
				defer rd.Close()
				for {
					if _, _, err := rd.Next(); err != nil {
						return err
					}
				}
			}()
			if errcode.Of(err) != want {
				t.Errorf("source failing with %q after %d of %d bytes: %s (%v), want %s", fail, at, len(b), errcode.Of(err), err, want)
			}
		}
	}
}

// The bytes must depend only on the rows, not on the machine's parallelism:
// a rerun on another node is compared byte for byte.
func TestDeterministicBytes(t *testing.T) {
	rows := makeRows(2*BatchRows + 5)
	prev := runtime.GOMAXPROCS(1)
	a := encode(t, rows)
	runtime.GOMAXPROCS(4)
	b := encode(t, rows)
	runtime.GOMAXPROCS(prev)
	if !bytes.Equal(a, b) {
		t.Fatal("same rows gave different bytes under different GOMAXPROCS")
	}
	rows2 := makeRows(2*BatchRows + 5)
	rows2[7].SourceVersion++
	if bytes.Equal(a, encode(t, rows2)) {
		t.Fatal("different rows gave the same bytes")
	}
}

func TestWriteRejectsUnsorted(t *testing.T) {
	rows := makeRows(10)
	rows[0], rows[9] = rows[9], rows[0]
	err := Write(io.Discard, rows)
	if errcode.Of(err) != errcode.Internal {
		t.Fatalf("unsorted rows: err = %v", err)
	}
}

func TestReaderRejectsOutOfRange(t *testing.T) {
	rows := makeRows(200)
	_, _, err := readAll(encode(t, rows), 0, rows[len(rows)-1].Bucket)
	var ce *CorruptError
	if !errors.As(err, &ce) || errcode.Of(err) != errcode.ShuffleCorrupt {
		t.Fatalf("out-of-range bucket: err = %v", err)
	}
}

// TestReaderRejectsBadSchemaIndex forges files whose schemaDigest indices
// point outside the file's dictionary: the reader refuses them as corrupt
// rather than index out of range. The same forgery with a valid index
// reads back, so the test exercises the index check, not the forging.
func TestReaderRejectsBadSchemaIndex(t *testing.T) {
	rows := makeRows(10)
	var b Buffer
	for i := range rows {
		b.Append(&rows[i])
	}
	var e Encoder
	e.sort(&b)
	for _, idx := range []int32{0, 1, -1, 1 << 30} {
		d := fileDict{of: make([]int32, len(b.schemas)), bytes: bytes.Clone(b.schemas[0][:])}
		for i := range d.of {
			d.of[i] = idx
		}
		d.values = fixedArray(digestType, 1, d.bytes)
		rec, err := b.gather(&e.batch, &d, e.order)
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		iw := ipc.NewWriter(&out, ipc.WithSchema(Schema))
		if err := iw.Write(rec); err != nil {
			t.Fatal(err)
		}
		if err := iw.Close(); err != nil {
			t.Fatal(err)
		}
		rec.Release()
		d.values.Release()
		got, _, err := readAllCompression(out.Bytes(), None, 0, 1<<testK)
		if idx == 0 {
			if err != nil || len(got) != len(rows) || got[0].SchemaDigest != b.schemas[0] {
				t.Fatalf("index 0: %d rows, err %v", len(got), err)
			}
			continue
		}
		if errcode.Of(err) != errcode.ShuffleCorrupt || !strings.Contains(err.Error(), "schemaDigest") {
			t.Fatalf("index %d: err = %v, want SHUFFLE_CORRUPT naming schemaDigest", idx, err)
		}
	}
}

func TestReaderRejectsWrongBucket(t *testing.T) {
	rows := makeRows(50)
	rows[3].Bucket = (rows[3].Bucket + 1) % (1 << testK)
	Sort(rows)
	_, _, err := readAll(encode(t, rows), 0, 1<<testK)
	if errcode.Of(err) != errcode.ShuffleCorrupt {
		t.Fatalf("bucket not matching sampleId: err = %v", err)
	}
}

// Every truncation and a sweep of single-bit flips either decode to
// something or fail with SHUFFLE_CORRUPT; none panics.
func TestCorruptBytesNeverPanic(t *testing.T) {
	good := encode(t, makeRows(BatchRows+100))
	check := func(name string, b []byte) {
		_, _, err := readAll(b, 0, 1<<testK)
		if err != nil && errcode.Of(err) != errcode.ShuffleCorrupt {
			t.Fatalf("%s: error without SHUFFLE_CORRUPT: %v", name, err)
		}
	}
	for _, n := range []int{0, 1, 8, len(good) / 3, len(good) / 2, len(good) - 1} {
		check(fmt.Sprintf("truncated to %d", n), good[:n])
	}
	step := max(1, len(good)/400)
	for i := 0; i < len(good); i += step {
		b := bytes.Clone(good)
		b[i] ^= 1 << (i % 8)
		check(fmt.Sprintf("bit flip at %d", i), b)
	}
	_, _, err := readAll(good[:len(good)/2], 0, 1<<testK)
	if errcode.Of(err) != errcode.ShuffleCorrupt {
		t.Fatalf("half a file: err = %v", err)
	}
}

func FuzzReader(f *testing.F) {
	f.Add(encode(f, makeRows(0)))
	f.Add(encode(f, makeRows(30)))
	// Plain files too: the fuzzer reads every input both ways.
	plain := func(rows []Row) []byte {
		var b Buffer
		for i := range rows {
			b.Append(&rows[i])
		}
		e := Encoder{Compression: None}
		out, err := e.Encode(&b)
		if err != nil {
			f.Fatal(err)
		}
		return slices.Clone(out)
	}
	f.Add(plain(makeRows(0)))
	f.Add(plain(makeRows(3*BatchRows + 1)))
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, c := range []Compression{Zstd, None} {
			rd, err := NewReaderCompression(bytes.NewReader(b), c, int64(len(b)), "fuzz", testK, 0, 1<<testK)
			for err == nil {
				_, _, err = rd.Next()
			}
			rd.Close()
			if err != io.EOF && errcode.Of(err) != errcode.ShuffleCorrupt {
				t.Fatalf("%s: error without SHUFFLE_CORRUPT: %v", c, err)
			}
			// As a reducer with the leaf index reads: digests of every
			// bucket, rows of every other one.
			rd, err = NewReaderCompression(bytes.NewReader(b), c, int64(len(b)), "fuzz", testK, 0, 1<<testK)
			for k := 0; err == nil; k++ {
				if _, _, _, err = rd.NextDigests(); err == nil && k%2 == 1 {
					_, err = rd.Rows()
				}
			}
			rd.Close()
			if err != io.EOF && errcode.Of(err) != errcode.ShuffleCorrupt {
				t.Fatalf("%s, digests first: error without SHUFFLE_CORRUPT: %v", c, err)
			}
		}
	})
}

func BenchmarkWrite(b *testing.B) {
	rows := makeRows(100_000)
	b.ReportAllocs()
	for b.Loop() {
		if err := Write(io.Discard, rows); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(rows))*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
}

// TestBufferMatchesWrite: rows appended to a Buffer in any order, with
// rows taken back by Truncate, encode to exactly the bytes Write gives
// for the kept rows in shuffle order; and one Encoder reused across
// Buffers gives the same bytes as a fresh one.
func TestBufferMatchesWrite(t *testing.T) {
	var enc Encoder
	for _, n := range []int{0, 1, BatchRows + 3, 5*BatchRows + 1} {
		rows := makeRows(n)
		want := encode(t, rows)
		shuffled := slices.Clone(rows)
		rand.New(rand.NewPCG(uint64(n), 1)).Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		var b Buffer
		for i := range shuffled {
			b.Append(&shuffled[i])
			if i%7 == 3 {
				// A file that fails to decode: its rows are taken back.
				mark := b.Len()
				junk := makeRows(3)
				for k := range junk {
					junk[k].SampleID += "-junk"
					// A schema no kept row names: the file's
					// dictionary must not hold it.
					junk[k].SchemaDigest = sha256.Sum256([]byte("junk schema"))
					b.Append(&junk[k])
				}
				b.Truncate(mark)
			}
		}
		if b.Len() != n {
			t.Fatalf("n=%d: Buffer holds %d rows", n, b.Len())
		}
		for i := range shuffled {
			if got := b.Row(i); got != shuffled[i] {
				t.Fatalf("n=%d: Row(%d) = %+v, want %+v", n, i, got, shuffled[i])
			}
		}
		got, err := enc.Encode(&b)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("n=%d: Buffer encodes %d bytes differing from Write's %d", n, len(got), len(want))
		}
		back, _, err := readAll(got, 0, 1<<testK)
		if err != nil || len(back) != n {
			t.Fatalf("n=%d: read back %d rows, err %v", n, len(back), err)
		}
	}
}

// TestEncodeRanges: one Buffer split by bucket range gives, for each
// range, exactly the file Encode gives for a Buffer of that range's rows,
// empty ranges included; rows beyond the last range are refused.
func TestEncodeRanges(t *testing.T) {
	rows := makeRows(3*BatchRows + 17)
	var all Buffer
	perm := rand.New(rand.NewPCG(7, 7)).Perm(len(rows))
	for _, i := range perm {
		all.Append(&rows[i])
	}
	// Uneven ranges, one of them empty.
	ends := []uint32{3, 3, 100, 101, 1 << testK}
	for _, c := range []Compression{None, Zstd} {
		enc := Encoder{Compression: c}
		var got [][]byte
		var gotRows []int
		err := enc.EncodeRanges(&all, ends, func(r int, b []byte, n int) error {
			if r != len(got) {
				t.Fatalf("write called for range %d, want %d", r, len(got))
			}
			got, gotRows = append(got, bytes.Clone(b)), append(gotRows, n)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		lo := uint32(0)
		for r, hi := range ends {
			var part Buffer
			for i := range rows {
				if rows[i].Bucket >= lo && rows[i].Bucket < hi {
					part.Append(&rows[i])
				}
			}
			want, err := (&Encoder{Compression: c}).Encode(&part)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got[r], want) || gotRows[r] != part.Len() {
				t.Fatalf("%s: range %d [%d, %d): %d bytes, %d rows; Encode of its rows gives %d bytes, %d rows", c, r, lo, hi, len(got[r]), gotRows[r], len(want), part.Len())
			}
			lo = hi
		}
		if gotRows[1] != 0 {
			t.Fatalf("%s: the empty range [3, 3) got %d rows", c, gotRows[1])
		}
	}
	var enc Encoder
	if err := enc.EncodeRanges(&all, []uint32{100}, func(int, []byte, int) error { return nil }); errcode.Of(err) != errcode.Internal {
		t.Fatalf("rows above the last range end: err %v, want INTERNAL", err)
	}
}

// TestCompressionNone: a plain file holds the same rows as a zstd one,
// and a reader told the wrong compression refuses the file as corrupt.
func TestCompressionNone(t *testing.T) {
	rows := makeRows(3*BatchRows + 5)
	var b Buffer
	for i := range rows {
		b.Append(&rows[i])
	}
	zenc, penc := Encoder{Compression: Zstd}, Encoder{Compression: None}
	z, err := zenc.Encode(&b)
	if err != nil {
		t.Fatal(err)
	}
	p, err := penc.Encode(&b)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(z, p) || len(p) <= len(z) {
		t.Fatalf("plain file (%d bytes) is not the larger, uncompressed form of the zstd file (%d bytes)", len(p), len(z))
	}
	read := func(data []byte, c Compression) ([]Row, error) {
		rows, _, err := readAllCompression(data, c, 0, 1<<testK)
		return rows, err
	}
	got, err := read(p, None)
	if err != nil || !slices.Equal(got, rows) {
		t.Fatalf("plain file read back %d rows (err %v), want the %d written", len(got), err, len(rows))
	}
	for _, c := range []struct {
		data []byte
		comp Compression
	}{{p, Zstd}, {z, None}} {
		if _, err := read(c.data, c.comp); errcode.Of(err) != errcode.ShuffleCorrupt {
			t.Fatalf("file read as %s: err = %v, want SHUFFLE_CORRUPT", c.comp, err)
		}
	}
	if _, err := NewReaderCompression(bytes.NewReader(p), "lz4", int64(len(p)), "test", testK, 0, 1<<testK); errcode.Of(err) != errcode.Usage {
		t.Fatalf("unknown compression: err = %v, want USAGE", err)
	}
}

// BenchmarkEncode is a map task writing one partition: rows appended in
// arbitrary order to a reused Buffer, sorted and encoded by a reused
// Encoder, per compression.
func BenchmarkEncode(b *testing.B) {
	rows := makeRows(100_000)
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(rows), func(i, j int) { rows[i], rows[j] = rows[j], rows[i] })
	for _, c := range []Compression{Zstd, None} {
		b.Run(string(c), func(b *testing.B) {
			var buf Buffer
			enc := Encoder{Compression: c}
			var size int
			b.ReportAllocs()
			for b.Loop() {
				buf.Reset()
				for i := range rows {
					buf.Append(&rows[i])
				}
				out, err := enc.Encode(&buf)
				if err != nil {
					b.Fatal(err)
				}
				size = len(out)
			}
			b.ReportMetric(float64(len(rows))*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
			b.ReportMetric(float64(size)/float64(len(rows)), "B/row")
		})
	}
}

// TestEncoderSortOrder checks the Encoder's bucket-counting sort against a
// plain sort by Compare: dense and sparse bucket ranges, sampleIds that
// share long prefixes or are prefixes of one another, duplicates.
func TestEncoderSortOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	ids := []string{"", "a", "ab", "ab\x00", "ab\x00c", "sample-0", "sample-00", "sample-000001", "sample-000002", "sample-1", "zzzzzzzzzzzz"}
	for _, span := range []uint32{1, 16, 1 << 20} {
		for _, n := range []int{1, 2, 50, 3000} {
			rows := make([]Row, n)
			for i := range rows {
				r := &rows[i]
				r.Bucket = uint32(rng.Uint64N(uint64(span))) * 3
				r.SampleID = ids[rng.IntN(len(ids))]
				if rng.IntN(2) == 0 {
					r.SampleID += fmt.Sprint(rng.IntN(40))
				}
				r.Side = Side(rng.IntN(2))
				r.TupleDigest[rng.IntN(32)] = byte(rng.IntN(3))
			}
			var b Buffer
			for i := range rows {
				b.Append(&rows[i])
			}
			var e Encoder
			e.sort(&b)
			want := slices.Clone(rows)
			Sort(want)
			for i, k := range e.order {
				if got := b.Row(k.row); Compare(&got, &want[i]) != 0 {
					t.Fatalf("span %d n %d: position %d holds %+v, want %+v", span, n, i, got, want[i])
				}
			}
		}
	}
}

// TestReaderKeepsLargeBuffersShared: a reader returns to its own small
// row buffer after a large bucket, so hundreds of open readers (one per
// map task at 16M records) do not each keep a large one between buckets.
func TestReaderKeepsLargeBuffersShared(t *testing.T) {
	const k = 2 // four buckets of ~1000 rows each
	var b Buffer
	for i := range 4000 {
		id := fmt.Sprintf("s-%05d", i)
		r := Row{Bucket: tuplehash.Bucket(id, k), SampleID: id, SourceID: "src", Split: "train"}
		// Buckets 1 and 3 keep only a few rows.
		if r.Bucket%2 == 1 && i%200 != 0 {
			continue
		}
		r.TupleDigest = sha256.Sum256([]byte(id))
		b.Append(&r)
	}
	file, err := (&Encoder{Compression: None}).Encode(&b)
	if err != nil {
		t.Fatal(err)
	}
	rd, err := NewReaderCompression(bytes.NewReader(file), None, int64(len(file)), "test", k, 0, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	for want := range uint32(4) {
		bucket, rows, err := rd.Next()
		if err != nil || bucket != want {
			t.Fatalf("Next: bucket %d, err %v; want bucket %d", bucket, err, want)
		}
		if large := len(rows) > keepRows; large != (want%2 == 0) {
			t.Fatalf("bucket %d has %d rows", bucket, len(rows))
		}
		if len(rows) <= keepRows && cap(rd.rows) > keepRows {
			t.Fatalf("bucket %d (%d rows) is held in a %d-row buffer; a reader keeps at most %d between large buckets", bucket, len(rows), cap(rd.rows), keepRows)
		}
	}
}

// TestNextDigests: NextDigests gives a bucket's tuple digests, in file
// order, and whether all its rows are release rows, without making the
// rows; Rows then makes exactly the rows Next gives. Rows without a
// bucket is an INTERNAL error, and a row whose sampleId belongs to
// another bucket passes NextDigests but not Rows.
func TestNextDigests(t *testing.T) {
	rows := makeRows(3*BatchRows + 17)
	// Release rows only in the even buckets, both sides in the odd ones.
	var mixed []Row
	for _, r := range rows {
		if r.Bucket%2 == 1 || r.Side == Release {
			mixed = append(mixed, r)
		}
	}
	file := encode(t, mixed)
	want, err := NewReader(bytes.NewReader(file), "want", testK, 0, 1<<testK)
	if err != nil {
		t.Fatal(err)
	}
	defer want.Close()
	rd, err := NewReader(bytes.NewReader(file), "test", testK, 0, 1<<testK)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	if _, err := rd.Rows(); errcode.Of(err) != errcode.Internal {
		t.Fatalf("Rows before NextDigests: %v, want INTERNAL", err)
	}
	buckets := 0
	for ; ; buckets++ {
		wb, wrows, werr := want.Next()
		b, digests, allRelease, err := rd.NextDigests()
		if werr == io.EOF || err == io.EOF {
			if werr != err {
				t.Fatalf("end: Next %v, NextDigests %v", werr, err)
			}
			break
		}
		if err != nil || werr != nil {
			t.Fatal(err, werr)
		}
		if b != wb || len(digests) != len(wrows) {
			t.Fatalf("bucket %d with %d digests, want bucket %d with %d rows", b, len(digests), wb, len(wrows))
		}
		onlyRelease := true
		for i := range wrows {
			if digests[i] != wrows[i].TupleDigest {
				t.Fatalf("bucket %d digest %d differs from its row's", b, i)
			}
			onlyRelease = onlyRelease && wrows[i].Side == Release
		}
		if allRelease != onlyRelease || allRelease != (b%2 == 0) {
			t.Fatalf("bucket %d: allRelease %v, its rows say %v", b, allRelease, onlyRelease)
		}
		// Only every third bucket's rows are made; the others are skipped.
		if buckets%3 == 0 {
			got, err := rd.Rows()
			if err != nil {
				t.Fatal(err)
			}
			if !slices.EqualFunc(got, wrows, func(a, b Row) bool { return Compare(&a, &b) == 0 && a == b }) {
				t.Fatalf("bucket %d: Rows differ from Next's", b)
			}
		}
	}
	if buckets < 8 {
		t.Fatalf("only %d buckets", buckets)
	}

	// A row moved into another bucket, its sampleId unchanged.
	bad := slices.Clone(mixed)
	moved := (mixed[5].Bucket + 1) % (1 << testK)
	bad[5].Bucket = moved
	Sort(bad)
	rd2, err := NewReader(bytes.NewReader(encode(t, bad)), "bad", testK, 0, 1<<testK)
	if err != nil {
		t.Fatal(err)
	}
	defer rd2.Close()
	for {
		b, _, _, err := rd2.NextDigests()
		if err != nil {
			t.Fatalf("NextDigests: %v; a wrong bucket is for Rows to find", err)
		}
		if b != moved {
			continue
		}
		if _, err := rd2.Rows(); errcode.Of(err) != errcode.ShuffleCorrupt || !strings.Contains(err.Error(), "hashes to bucket") {
			t.Fatalf("Rows of bucket %d: %v, want SHUFFLE_CORRUPT naming the bucket its sampleId hashes to", b, err)
		}
		break
	}
}

// BenchmarkEncoderSort is the Encoder's sort alone on a map task's share
// of one reduce range: 32,768 rows over 1,024 buckets, in map order, with
// sampleIds whose first eight bytes differ (as hashes and UUIDs do).
func BenchmarkEncoderSort(b *testing.B) {
	rows := makeRows(32_768)
	rng := rand.New(rand.NewPCG(5, 6))
	var buf Buffer
	for i := range rows {
		rows[i].Bucket = uint32(rng.IntN(1024))
		rows[i].SampleID = fmt.Sprintf("%016x", rng.Uint64())
		buf.Append(&rows[i])
	}
	var e Encoder
	for b.Loop() {
		e.sort(&buf)
	}
	b.ReportMetric(float64(len(rows))*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
}
