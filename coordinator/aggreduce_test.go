package coordinator

import (
	"bytes"
	"strings"
	"testing"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/shuffle"
)

// aggregateDecodeJobs returns commitFuzzSetup's job and reduce task 0's
// record, with the plan's sha256, and the same with xxh64: the plan
// checking shuffle files with it, the record's inputs naming an xxh64
// each instead of a digest.
func aggregateDecodeJobs(t testing.TB) (jobs [2]*Job, records [2][]byte) {
	commitFuzzSetup(t)
	j0 := commitFuzzJob
	rc := commitFuzzBody[len(j0.Plan.MapTasks)]
	var x ReduceCommit
	if err := decodeStrict(rc, &x); err != nil {
		t.Fatal(err)
	}
	for k := range x.Inputs {
		x.Inputs[k].Digest, x.Inputs[k].XXH64 = manifest.Digest{}, "0123456789abcdef"
	}
	jx := *j0
	plan := *j0.Plan
	plan.ShuffleChecksum = shuffle.XXH64
	jx.Plan = &plan
	return [2]*Job{j0, &jx}, [2][]byte{rc, must(manifest.Encode(&x))}
}

// checkAggregateDecode checks that the aggregation's decoding of reduce
// task 0's record b (decodeReduceForAggregate) takes what decoding it
// whole and checking it (checkReduceCommit) takes, and gives the same
// record but its inputs, and the sum of their sizes; and refuses what
// that refuses, with the same code.
func checkAggregateDecode(t *testing.T, j *Job, b []byte) {
	t.Helper()
	var whole ReduceCommit
	werr := decodeRecord(b, j.reduceCommitKey(0), &whole, nil)
	if werr == nil {
		werr = j.checkReduceCommit(0, &whole)
	}
	rc, shuffled, err := j.decodeReduceForAggregate(0, b)
	if werr != nil || err != nil {
		if errcode.Of(err) != errcode.Of(werr) || isInternal(err) {
			t.Fatalf("aggregation's decoding: %v; the whole record's: %v\n%q", err, werr, b)
		}
		return
	}
	var sum int64
	for _, o := range whole.Inputs {
		sum += o.Size
	}
	if len(rc.Inputs) != 0 {
		t.Fatalf("aggregation's decoding decoded %d inputs", len(rc.Inputs))
	}
	got := *rc
	got.Inputs, whole.Inputs = nil, nil
	if shuffled != sum || !bytes.Equal(must(manifest.Encode(&got)), must(manifest.Encode(&whole))) {
		t.Fatalf("aggregation's decoding: %+v, shuffle bytes %d; the whole record's %+v, %d\n%q", got, shuffled, whole, sum, b)
	}
}

// The aggregation checks a reduce commit record's inputs where they lie
// in its bytes, without decoding them, in the form Encode writes them,
// and decodes those in any other form: either way it takes and refuses
// what decoding the record whole and checking it does, with the same
// code, and sums the same shuffle bytes.
func TestAggregateDecodesReduceRecordAsWhole(t *testing.T) {
	jobs, records := aggregateDecodeJobs(t)
	for _, c := range aggregateDecodeCases {
		t.Run(c.name, func(t *testing.T) {
			for k, j := range jobs {
				b := records[k]
				edited := []byte(strings.Replace(string(b), c.old, c.new, 1))
				if c.old != "" && bytes.Equal(edited, b) {
					continue // not in this checksum's record
				}
				checkAggregateDecode(t, j, edited)
			}
		})
	}
}

// aggregateDecodeCases edit the second input of a reduce commit record
// (its first occurrence of old, as the record's encoding has it).
var aggregateDecodeCases = []struct{ name, old, new string }{
	{"as written", "", ""},
	{"escaped key", `/map/1/r0.arrow"`, `\/map\/1\/r0.arrow"`},
	{"escaped version", `"version":"v1","digest":"sha256:e`, `"version":"v\u0031","digest":"sha256:e`},
	{"keys in another order", `"size":6336,"rows":44`, `"rows":44,"size":6336`},
	{"whitespace", `,"size":6336`, ` , "size" : 6336 `},
	{"another map task's file", `/map/1/r0.arrow"`, `/map/0/r0.arrow"`},
	{"another reducer's file", `/map/1/r0.arrow"`, `/map/1/r1.arrow"`},
	{"key with a suffix", `/map/1/r0.arrow"`, `/map/1/r0.arrowx"`},
	{"negative size", `"size":6336`, `"size":-6336`},
	{"negative rows", `"rows":44`, `"rows":-44`},
	{"size of 19 digits", `"size":6336`, `"size":1000000000000000000`},
	{"size above int64", `"size":6336`, `"size":10000000000000000000`},
	{"size with a fraction", `"size":6336`, `"size":6336.0`},
	{"size with an exponent", `"size":6336`, `"size":6336e0`},
	{"size with a leading zero", `"size":6336`, `"size":06336`},
	{"size 0", `"size":6336`, `"size":0`},
	{"size as a string", `"size":6336`, `"size":"6336"`},
	{"zero digest", `"digest":"sha256:e90cbb26efc80dab5e2c712b9e2781d538d59ed91e556c50a8739f2c1701dbed"`, `"digest":"sha256:0000000000000000000000000000000000000000000000000000000000000000"`},
	{"digest in upper case", `"digest":"sha256:e90cbb26efc80dab5e2c712b9e2781d538d59ed91e556c50a8739f2c1701dbed"`, `"digest":"sha256:E90CBB26EFC80DAB5E2C712B9E2781D538D59ED91E556C50A8739F2C1701DBED"`},
	{"no digest", `"digest":"sha256:e90cbb26efc80dab5e2c712b9e2781d538d59ed91e556c50a8739f2c1701dbed",`, ``},
	{"digest and xxh64", `"digest":"sha256:e90cbb26efc80dab5e2c712b9e2781d538d59ed91e556c50a8739f2c1701dbed",`, `"digest":"sha256:e90cbb26efc80dab5e2c712b9e2781d538d59ed91e556c50a8739f2c1701dbed","xxh64":"0123456789abcdef",`},
	{"empty xxh64 beside the digest", `"digest":"sha256:e90cbb26efc80dab5e2c712b9e2781d538d59ed91e556c50a8739f2c1701dbed",`, `"digest":"sha256:e90cbb26efc80dab5e2c712b9e2781d538d59ed91e556c50a8739f2c1701dbed","xxh64":"",`},
	{"xxh64 in upper case", `"xxh64":"0123456789abcdef"`, `"xxh64":"0123456789ABCDEF"`},
	{"xxh64 too short", `"xxh64":"0123456789abcdef"`, `"xxh64":"0123456789abcde"`},
	{"xxh64 not hex", `"xxh64":"0123456789abcdef"`, `"xxh64":"0123456789abcdeg"`},
	{"xxh64 escaped", `"xxh64":"0123456789abcdef"`, `"xxh64":"0123456789abcde\u0066"`},
	{"xxh64 with a zero digest", `"xxh64":"0123456789abcdef"`, `"digest":"sha256:0000000000000000000000000000000000000000000000000000000000000000","xxh64":"0123456789abcdef"`},
	{"xxh64 with a digest", `"xxh64":"0123456789abcdef"`, `"digest":"sha256:e90cbb26efc80dab5e2c712b9e2781d538d59ed91e556c50a8739f2c1701dbed","xxh64":"0123456789abcdef"`},
	{"no xxh64", `"xxh64":"0123456789abcdef",`, ``},
	{"key twice", `{"key":"jobs/`, `{"key":"x","key":"jobs/`},
	{"unknown key", `"rows":44`, `"rows":44,"row":1`},
	{"no key", `{"key":"jobs/`, `{"kez":"jobs/`},
	{"an input too many", `"inputs":[{`, `"inputs":[{"key":"x","version":"v1","digest":"sha256:e90cbb26efc80dab5e2c712b9e2781d538d59ed91e556c50a8739f2c1701dbed","size":1,"rows":1},{`},
	{"an input null", `"inputs":[{`, `"inputs":[null,{`},
	{"inputs null", `"inputs":[{`, `"inputs":null,"x":[{`},
	{"inputs twice", `"inputs":[`, `"inputs":[],"inputs":[`},
	{"another task", `"task":0`, `"task":1`},
	{"trailing brace", "\n", "}\n"},
}

// FuzzAggregateReduceRecord holds the aggregation's decoding of a reduce
// commit record to decoding it whole, on any bytes: see
// checkAggregateDecode. which picks the plan's checksum.
func FuzzAggregateReduceRecord(f *testing.F) {
	jobs, records := aggregateDecodeJobs(f)
	for k, b := range records {
		for _, c := range aggregateDecodeCases {
			f.Add(uint8(k), []byte(strings.Replace(string(b), c.old, c.new, 1)))
		}
	}
	f.Fuzz(func(t *testing.T, which uint8, b []byte) {
		checkAggregateDecode(t, jobs[which%2], b)
	})
}
