package coordinator

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"strings"
	"time"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/objstore"
)

// PruneOptions are store prune-jobs's settings.
type PruneOptions struct {
	// OlderThan: a job whose newest object is older than this, by the
	// store's clock, is deleted.
	OlderThan time.Duration
	// DryRun deletes nothing and writes nothing, not even the object
	// the store's clock is read by: ages, and holders on other
	// machines, are judged by this machine's clock instead.
	DryRun bool
}

// What PruneJobs did with a job.
const (
	PruneKept        = "kept"
	PruneDeleted     = "deleted"
	PruneWouldDelete = "would delete"
)

// PrunedJob is what PruneJobs found of one job and did with it.
type PrunedJob struct {
	JobScratch
	// Action is PruneKept, PruneDeleted or PruneWouldDelete.
	Action string
	// Age is how old the job's newest object was when the prune began,
	// by the store's clock; by this machine's on a dry run (Estimated),
	// where it is negative when the store's clock runs ahead.
	Age       time.Duration
	Estimated bool
	// InUse is the live holder that kept the job, nil when none did.
	InUse *JobInUseError
}

// pruneClockPrefix is where PruneJobs writes the object it reads the
// store's clock by: under jobs/, in the store that holds the jobs (a
// store of its own with objstore.Routed), in a directory named by no
// plan digest, so that ListJobs takes it for no job and no removal
// deletes it; one directory per prune, a random name, so that prunes
// run at once do not delete each other's. Each prune deletes its own at
// once, and any left by a prune killed before it could, once
// pruneClockStale old.
const pruneClockPrefix = JobsPrefix + "clock/"

// pruneClockStale is how old, by the store's clock, another prune's
// clock probe must be to be taken for left behind: a prune deletes its
// own a request after it wrote it.
const pruneClockStale = time.Hour

// PruneJobs deletes the scratch of every job in s whose newest object is
// older than o.OlderThan by the store's clock (RemoveJob; a job a live
// process holds is kept), and calls found for each job, in plan order,
// once it is dealt with; an error from found stops the prune. Ages are
// judged against one probe object written once, before any job is
// deleted, under jobs/clock/ (see pruneClockPrefix), and deleted again:
// a machine whose clock ran ahead of the store's deleted jobs younger
// than o.OlderThan, and one whose clock ran behind kept old ones. A dry
// run writes nothing, and judges by this machine's clock (see
// PruneOptions.DryRun), which it logs.
func PruneJobs(ctx context.Context, s objstore.Store, o PruneOptions, found func(PrunedJob) error) error {
	if o.OlderThan < 0 {
		return errcode.New(errcode.Usage, "prune jobs older than %s: the age must not be negative", o.OlderThan)
	}
	jobs, err := ListJobs(ctx, s)
	if err != nil {
		return err
	}
	if len(jobs) == 0 {
		return nil
	}
	var now time.Time
	if o.DryRun {
		now = time.Now()
		var ahead time.Duration
		for _, j := range jobs {
			ahead = max(ahead, j.Newest.Sub(now))
		}
		attrs := []any{"olderThan", o.OlderThan.String()}
		if ahead > 0 {
			// Written by the store's clock, in this machine's future.
			attrs = append(attrs, "storeAheadAtLeast", ahead.Round(time.Second).String())
		}
		slog.Warn("prune-jobs --dry-run judges the jobs' ages by this machine's clock, which may disagree with the store's: a prune without --dry-run reads the store's clock, and may keep or delete other jobs", attrs...)
	} else {
		d, ok := s.(objstore.Deleter)
		if !ok {
			return errcode.New(errcode.Usage, "store %T cannot delete; remove the jobs under %s by hand", s, JobsPrefix)
		}
		if now, err = pruneNow(ctx, s, d); err != nil {
			return err
		}
	}
	for _, j := range jobs {
		pj := PrunedJob{JobScratch: j, Action: PruneKept, Age: now.Sub(j.Newest), Estimated: o.DryRun}
		switch {
		case pj.Age <= o.OlderThan:
		case o.DryRun:
			pj.Action = PruneWouldDelete
			// Writes nothing, so a holder on another machine is
			// judged by this machine's clock too.
			if pj.InUse, err = HolderReadOnly(ctx, s, j.Plan); err != nil {
				return err
			} else if pj.InUse != nil {
				pj.Action = PruneKept
			}
		default:
			err := RemoveJob(ctx, s, j.Plan)
			if err != nil && !errors.As(err, &pj.InUse) {
				return err
			}
			if pj.InUse == nil {
				pj.Action = PruneDeleted
			}
		}
		if err := found(pj); err != nil {
			return err
		}
	}
	return nil
}

// pruneNow returns the store's time now (see probeClock), by a probe it
// deletes again, and any that another prune left behind.
func pruneNow(ctx context.Context, s objstore.Store, d objstore.Deleter) (time.Time, error) {
	var nonce [8]byte
	rand.Read(nonce[:])
	dir := pruneClockPrefix + hex.EncodeToString(nonce[:]) + "/"
	now, err := probeClock(ctx, s, dir+"probe")
	if err != nil {
		return time.Time{}, wrap(err, "prune jobs")
	}
	if err := d.DeletePrefix(ctx, dir); err != nil {
		return time.Time{}, wrap(err, "prune jobs: delete the clock probe %s", dir)
	}
	after := ""
	for {
		page, err := s.List(ctx, pruneClockPrefix, after, 1000)
		if err != nil {
			return time.Time{}, wrap(err, "prune jobs: list the clock probes under %s", pruneClockPrefix)
		}
		for _, o := range page.Objects {
			name, _, ok := strings.Cut(strings.TrimPrefix(o.Key, pruneClockPrefix), "/")
			if !ok || now.Sub(o.Modified) < pruneClockStale {
				continue
			}
			if err := d.DeletePrefix(ctx, pruneClockPrefix+name+"/"); err != nil {
				return time.Time{}, wrap(err, "prune jobs: delete the clock probe %s", pruneClockPrefix+name+"/")
			}
		}
		if page.Next == "" {
			return now, nil
		}
		after = page.Next
	}
}
