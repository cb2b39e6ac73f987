package coordinator

import (
	"bytes"
	"context"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/objstore"
)

// PlanReportSchema identifies a plan's report record
// (index/plans/<plan hex>/report.v1).
const PlanReportSchema = "training.verify.plan-report.v1"

// PlanReport is the record an aggregation leaves of the report it stored
// for a plan, the aggregate task's commit record: a job whose files are
// deleted (or being deleted) is still known to have finished, and a
// resume of its plan, or an aggregate run again, gives that report
// instead of running the job anew. It is not under jobs/, so it outlives
// the job's files (and with verify --scratch it stays in the store, with
// the plan and the report).
type PlanReport struct {
	Schema string          `json:"schema"`
	Plan   manifest.Digest `json:"plan"`
	Report manifest.Digest `json:"report"`
}

// PlanReportKey is where plan pd's report record is.
func PlanReportKey(pd manifest.Digest) string { return "index/plans/" + pd.Hex() + "/report.v1" }

// Finished returns the outcome of the job's run that stored a report, from
// the plan's report record, with Reused set; nil when there is none. A
// record that does not decode, or names a report that is not there or is
// not this plan's, is logged and taken for none: the job then runs again
// and its aggregation records its own report.
func (j *Job) Finished(ctx context.Context) (*Outcome, error) { return j.finished(ctx, true) }

// finished is Finished, logging why a record is taken for none only when
// warn is set (a second look within one run says it once).
func (j *Job) finished(ctx context.Context, warn bool) (*Outcome, error) {
	key := PlanReportKey(j.PlanDigest)
	log := func(msg string, args ...any) {
		if warn {
			j.log().Warn(msg, args...)
		}
	}
	var rec PlanReport
	found, err := readRecord(ctx, j.Store, key, &rec)
	if err != nil && (objstore.IsNotExist(err) || errcode.Of(err) == errcode.ShuffleCorrupt || errcode.Of(err) == errcode.DocumentTooLarge) {
		log("plan report record unreadable; the job runs as if it had not finished", "key", key, "code", string(errcode.Of(err)), "err", err)
		return nil, nil
	}
	if err != nil || !found {
		return nil, err
	}
	if rec.Schema != PlanReportSchema || rec.Plan != j.PlanDigest {
		log("plan report record names another plan; the job runs as if it had not finished", "key", key, "schema", rec.Schema, "recordPlan", rec.Plan.String())
		return nil, nil
	}
	b, _, err := objstore.ReadBlob(ctx, j.Store, rec.Report, manifest.MaxDocumentSize)
	if err != nil {
		if objstore.IsNotExist(err) || errcode.Of(err) == errcode.DigestMismatch || errcode.Of(err) == errcode.DocumentTooLarge {
			log("the report the plan's record names cannot be read; the job runs as if it had not finished", "report", rec.Report.String(), "code", string(errcode.Of(err)), "err", err)
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
		log("the report the plan's record names is not this plan's; the job runs as if it had not finished", "report", rec.Report.String(), "code", string(errcode.Of(err)), "err", err)
		return nil, nil
	}
	return &Outcome{Plan: j.PlanDigest, Report: rep, ReportDigest: rec.Report, Reused: true}, nil
}

// recordReport records d as the plan's report (see PlanReport). When an
// aggregation of the same plan recorded its report first (two aggregate
// tasks at once), that one is returned, so every run of a plan ends with
// the same report; nil otherwise.
func (j *Job) recordReport(ctx context.Context, d manifest.Digest) (*Outcome, error) {
	b, err := manifest.Encode(&PlanReport{Schema: PlanReportSchema, Plan: j.PlanDigest, Report: d})
	if err != nil {
		return nil, err
	}
	key := PlanReportKey(j.PlanDigest)
	_, err = j.Store.Put(ctx, key, bytes.NewReader(b), objstore.PutOptions{IfNoneMatch: true, Size: int64(len(b)), SHA256: manifest.Sum(b)})
	if !objstore.IsPrecondition(err) {
		return nil, wrap(err, "record the report of plan %s", j.PlanDigest)
	}
	prev, err := j.finished(ctx, false)
	if err != nil || prev != nil {
		if prev != nil && prev.ReportDigest != d {
			j.log().Info("another aggregation of this plan recorded its report first; that report is the plan's", "report", prev.ReportDigest.String(), "alsoStored", d.String())
		}
		return prev, err
	}
	// The record there is not a valid one: a new version replaces it.
	if _, err := j.Store.Put(ctx, key, bytes.NewReader(b), objstore.PutOptions{Size: int64(len(b)), SHA256: manifest.Sum(b)}); err != nil {
		return nil, wrap(err, "record the report of plan %s", j.PlanDigest)
	}
	j.log().Info("plan report record replaced: the one there was not valid", "key", key, "report", d.String())
	return nil, nil
}
