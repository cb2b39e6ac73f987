package coordinator

import (
	"bytes"
	"context"
	"strconv"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/objstore"
)

// PlanReportSchema identifies a plan's report record
// (index/plans/<plan hex>/report.v1, or report.v1.<n>: see PlanReport).
const PlanReportSchema = "training.verify.plan-report.v1"

// PlanReport is the record an aggregation leaves of the report it stored
// for a plan, the aggregate task's commit record: a job whose files are
// deleted (or being deleted) is still known to have finished, and a
// resume of its plan, or an aggregate run again, gives that report
// instead of running the job anew. It is not under jobs/, so it outlives
// the job's files (and with verify --scratch it stays in the store, with
// the plan and the report).
//
// A plan has one, at PlanReportKey(pd), unless that one is not valid
// (damaged bytes, another plan's, a report not there): the aggregation
// that finds so records its report at the next key, n = 1, 2, …, each by
// conditional create, so that of aggregations racing over the invalid
// record exactly one records its report and the others return it; the
// invalid one is left as it is. The plan's record is the valid one of
// highest n.
type PlanReport struct {
	Schema string          `json:"schema"`
	Plan   manifest.Digest `json:"plan"`
	Report manifest.Digest `json:"report"`
}

// MaxPlanReports bounds a plan's report records: report.v1 and
// report.v1.<n> for n below it. Each past the first is written only when every one
// before it was found not valid, so a plan that has them all has had
// MaxPlanReports records damaged: its aggregation then fails
// BAD_DOCUMENT, and a resume runs the job again each time.
const MaxPlanReports = 16

// PlanReportKey is where plan pd's first report record is:
// index/plans/<plan hex>/report.v1 (see PlanReport).
func PlanReportKey(pd manifest.Digest) string { return planReportKey(pd, 0) }

// planReportKey is where plan pd's report record n is: report.v1 for
// n = 0, report.v1.<n> after.
func planReportKey(pd manifest.Digest, n int) string {
	key := "index/plans/" + pd.Hex() + "/report.v1"
	if n > 0 {
		key += "." + strconv.Itoa(n)
	}
	return key
}

// Finished returns the outcome of the job's run that stored a report, from
// the plan's report record (the valid one of highest n: see PlanReport),
// with Reused set; nil when there is none. A record that does not
// decode, or names a report that is not there or is not this plan's, is
// logged and taken for none: when none is valid the job then runs again
// and its aggregation records its own report at the next key.
func (j *Job) Finished(ctx context.Context) (*Outcome, error) {
	out, _, err := j.finished(ctx, true)
	return out, err
}

// finished is Finished, returning too the number of report records the
// plan has (planReportKey(pd, n) exists for n below it), and logging why
// a record is taken for none only when warn is set (a second look within
// one run says it once).
func (j *Job) finished(ctx context.Context, warn bool) (*Outcome, int, error) {
	n := 0
	for ; n < MaxPlanReports; n++ {
		key := planReportKey(j.PlanDigest, n)
		if _, err := j.Store.Head(ctx, key, ""); objstore.IsNotExist(err) {
			break
		} else if err != nil {
			return nil, 0, wrap(err, "%s", key)
		}
	}
	for k := n - 1; k >= 0; k-- {
		out, err := j.planReport(ctx, planReportKey(j.PlanDigest, k), warn)
		if err != nil || out != nil {
			return out, n, err
		}
	}
	return nil, n, nil
}

// planReport returns the outcome the plan's report record at key names,
// nil when the record is not valid (or gone), logged when warn is set.
func (j *Job) planReport(ctx context.Context, key string, warn bool) (*Outcome, error) {
	log := func(msg string, args ...any) {
		if warn {
			j.log().Warn(msg, args...)
		}
	}
	var rec PlanReport
	found, err := readRecord(ctx, j.Store, key, &rec)
	if err != nil && (objstore.IsNotExist(err) || errcode.Of(err) == errcode.ShuffleCorrupt || errcode.Of(err) == errcode.DocumentTooLarge) {
		log("plan report record unreadable; it is taken for none", "key", key, "code", string(errcode.Of(err)), "err", err)
		return nil, nil
	}
	if err != nil || !found {
		return nil, err
	}
	if rec.Schema != PlanReportSchema || rec.Plan != j.PlanDigest {
		log("plan report record names another plan; it is taken for none", "key", key, "schema", rec.Schema, "recordPlan", rec.Plan.String())
		return nil, nil
	}
	b, _, err := objstore.ReadBlob(ctx, j.Store, rec.Report, manifest.MaxDocumentSize)
	if err != nil {
		if objstore.IsNotExist(err) || errcode.Of(err) == errcode.DigestMismatch || errcode.Of(err) == errcode.DocumentTooLarge {
			log("the report the plan's record names cannot be read; the record is taken for none", "key", key, "report", rec.Report.String(), "code", string(errcode.Of(err)), "err", err)
			return nil, nil
		}
		return nil, wrap(err, "report %s of plan %s", rec.Report, j.PlanDigest)
	}
	rep, err := manifest.DecodeReport(b)
	if err == nil && (rep.Execution.Plan != j.PlanDigest || rep.Root != j.Plan.Root || rep.DatasetSnapshot != j.Plan.Snapshot ||
		rep.Tombstones != j.Plan.Tombstones || rep.Benchmark != j.Plan.Benchmark) {
		err = errcode.New(errcode.BadDocument, "report of plan %s, root %s, snapshot %s, fences %s %s: not this plan's",
			rep.Execution.Plan, rep.Root, rep.DatasetSnapshot, rep.Tombstones, rep.Benchmark)
	}
	if err != nil {
		log("the report the plan's record names is not this plan's; the record is taken for none", "key", key, "report", rec.Report.String(), "code", string(errcode.Of(err)), "err", err)
		return nil, nil
	}
	return &Outcome{Plan: j.PlanDigest, Report: rep, ReportDigest: rec.Report, Reused: true}, nil
}

// recordReport records d as the plan's report (see PlanReport), by
// conditional create of its first record, or, when the records there
// are none of them valid, of the next. When an aggregation of the same
// plan recorded its report first (two aggregate tasks at once, or two
// that found the same invalid record), that one is returned, so every
// run of a plan ends with the same report; nil otherwise.
func (j *Job) recordReport(ctx context.Context, d manifest.Digest) (*Outcome, error) {
	b, err := manifest.Encode(&PlanReport{Schema: PlanReportSchema, Plan: j.PlanDigest, Report: d})
	if err != nil {
		return nil, err
	}
	put := func(key string) error {
		_, err := j.Store.Put(ctx, key, bytes.NewReader(b), objstore.PutOptions{IfNoneMatch: true, Size: int64(len(b)), SHA256: manifest.Sum(b)})
		return err
	}
	// The plan's first record, the one a plan nearly always has, is
	// created without a look first.
	key := planReportKey(j.PlanDigest, 0)
	err = put(key)
	// Each create refused finds a record at a key one past those the
	// look before it found, but for records deleted meanwhile: no more
	// than MaxPlanReports looks are taken.
	for looks := 0; objstore.IsPrecondition(err) && looks < MaxPlanReports; looks++ {
		prev, n, ferr := j.finished(ctx, false)
		if ferr != nil || prev != nil {
			if prev != nil && prev.ReportDigest != d {
				j.log().Info("another aggregation of this plan recorded its report first; that report is the plan's", "report", prev.ReportDigest.String(), "alsoStored", d.String())
			}
			return prev, ferr
		}
		if n >= MaxPlanReports {
			return nil, errcode.New(errcode.BadDocument, "record the report %s of plan %s: its %d report records, %s to %s, are none of them valid; the report is stored, and verify --root plans anew",
				d, j.PlanDigest, n, planReportKey(j.PlanDigest, 0), planReportKey(j.PlanDigest, n-1))
		}
		key = planReportKey(j.PlanDigest, n)
		if err = put(key); err == nil {
			j.log().Info("plan report recorded at a new key: the records before it are not valid, and are left as they are", "key", key, "report", d.String())
		}
	}
	if err != nil {
		return nil, wrap(err, "record the report of plan %s at %s", j.PlanDigest, key)
	}
	return nil, nil
}
