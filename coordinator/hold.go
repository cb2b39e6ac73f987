package coordinator

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/internal/procid"
	"github.com/shardproof/shardproof/internal/verifyread"
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/objstore"
)

// HoldSchema identifies a job's hold records (jobs/<plan>/hold/<n>).
const HoldSchema = "training.verify.hold.v1"

// What a hold is taken for.
const (
	// HoldRun runs the job's tasks and aggregates them (verify, verify
	// --resume, publish, recheck), or aggregates them alone (task
	// aggregate).
	HoldRun = "run"
	// HoldRemove deletes the job's files (verify once its report is
	// stored, task aggregate, store prune-jobs).
	HoldRemove = "remove"
)

// HoldRenewInterval is how often a holder writes a new version of its
// hold record, and HoldStaleAfter how long a holder whose process cannot
// be looked up (another machine, no /proc) is taken to live after its
// last renewal, by the store's clock (see lookHolder). A holder that has
// not renewed its record for HoldStaleAfter less one HoldRenewInterval,
// by its own clock, gives the job up (see holdExpiry).
var (
	HoldRenewInterval = time.Minute
	HoldStaleAfter    = 5 * time.Minute
)

// maxHoldRecord bounds the bytes of a hold record read back, and
// maxHoldGeneration the generations taken for one.
const (
	maxHoldRecord     = 64 << 10
	maxHoldGeneration = 1 << 30
)

// HoldRecord is a job's hold record: which process holds the job, and
// for what. Generation n is at jobs/<plan>/hold/<n>; the highest one is
// the current holder.
type HoldRecord struct {
	Schema     string          `json:"schema"`
	Plan       manifest.Digest `json:"plan"`
	Generation int             `json:"generation"`
	Purpose    string          `json:"purpose"`
	// Command is the shardproof command that holds it ("shardproof
	// verify"), for people.
	Command string    `json:"command"`
	Process procid.ID `json:"process"`
	// Started is when the hold was taken (RFC 3339, UTC).
	Started string `json:"started"`
	// Released is set in the last version a holder writes when it lets
	// the job go without deleting it (a run that stopped or finished).
	Released bool `json:"released,omitempty"`
	// Nonce is random, one per attempt to take the job (hex): a process
	// whose conditional create of the record went through but whose
	// answer was lost (the SDK's retry then fails its precondition) finds
	// the record and knows it as its own. Empty in records written before
	// it existed.
	Nonce string `json:"nonce,omitempty"`
}

// JobInUseError is a job held by another live process: a second
// `verify --resume` of one plan, or a resume while `store prune-jobs`
// deletes the job, is refused at once rather than failing midway when
// the other one deletes the files under it.
type JobInUseError struct {
	Plan   manifest.Digest
	Holder HoldRecord
	// Renewed is when the holder last wrote its record, and Age how
	// long before this process looked, both by the store's clock
	// (Age is zero when Local or TakenOver).
	Renewed time.Time
	Age     time.Duration
	// Local: the holder's process was looked up on this machine and runs.
	Local bool
	// TakenOver: this process held the job and another took it over
	// (this one had stopped renewing its hold for HoldStaleAfter, or it
	// was taken for dead by hand: verify --resume --take-over).
	TakenOver bool
	// Estimated: Age is by this machine's clock, not the store's (a
	// look that wrote nothing: HolderReadOnly).
	Estimated bool
	// Unreadable is why the holder's record could not be read (a newer
	// build's, or damaged), nil when it was: Holder then holds only
	// Plan and Generation, and the holder is judged by its record's age
	// alone, as one on another machine.
	Unreadable error
}

func (e *JobInUseError) Error() string {
	h := &e.Holder
	who := fmt.Sprintf("%q (pid %d on host %s, %s since %s", h.Command, h.Process.PID, h.Process.Host, h.Purpose, h.Started)
	if e.Unreadable != nil && !e.TakenOver {
		who = fmt.Sprintf("a process whose hold record could not be read (generation %d: %v; a newer shardproof's record, or a damaged one", h.Generation, e.Unreadable)
	}
	if e.TakenOver {
		if h.Schema == "" {
			who = "another process" // its record did not decode
		} else {
			who += ")"
		}
		return fmt.Sprintf("plan %s: this process stopped renewing its hold on the job, or was taken for dead (verify --resume --take-over), and %s took it over: it finishes the job", e.Plan, who)
	}
	if e.Local {
		who += ", running on this machine)"
	} else {
		clock := "the store's clock"
		if e.Estimated {
			clock = "this machine's clock, which may disagree with the store's"
		}
		whose := "a holder on another machine"
		if e.Unreadable != nil {
			whose = "a holder whose record cannot be read"
		}
		who += fmt.Sprintf(", hold renewed %s ago by %s; %s is taken for dead %s after its last renewal)",
			e.Age.Round(time.Second), clock, whose, HoldStaleAfter)
	}
	next := "wait for it to end: `verify --resume` of the plan then prints the report it stored (or goes on from where it stopped)"
	if h.Purpose == HoldRemove {
		next = "it deletes the job's files; `verify --resume` of the plan then prints the report stored for it, or runs the job again"
	}
	if !e.Local {
		next += fmt.Sprintf("; if it is known to be dead (its machine is down), `verify --resume %s --take-over` takes the job at once", e.Plan)
	}
	return fmt.Sprintf("plan %s: its job is held by %s; %s", e.Plan, who, next)
}

// ErrorCode implements errcode.Coder.
func (e *JobInUseError) ErrorCode() errcode.Code { return errcode.JobInUse }

// Hold is this process's hold on a job: while it lasts, no other process
// runs the job or deletes its files (each takes a hold first, and one
// that finds a live holder is refused with JOB_IN_USE). It is renewed
// every HoldRenewInterval until it is released (Release) or the job is
// deleted (RemoveJob).
type Hold struct {
	store objstore.Store
	plan  manifest.Digest
	rec   HoldRecord
	// Previous is the record of the holder this one follows (it ended,
	// or its process is gone), nil when the job had none.
	Previous *HoldRecord
	// displaced is the holder a take-over (TakeOver) took the job from,
	// nil when Previous had released it or there was none.
	displaced *Displaced

	ctx    context.Context
	cancel context.CancelCauseFunc
	stop   chan struct{}
	done   chan struct{}
	once   sync.Once
	// wmu orders the writes of the record (renewals, setPurpose), so
	// that its latest version says what this process does.
	wmu sync.Mutex
	mu  sync.Mutex
	// lost is why this process no longer holds the job: a
	// *JobInUseError when another took it over, STORE_UNAVAILABLE when
	// it could not renew its record in time.
	lost error
	// cutWrite: end cut a write of the record in flight, which the
	// store may still finish later (a server that had the request).
	// Set by renew before done closes; read after end.
	cutWrite bool
}

func holdPrefix(pd manifest.Digest) string { return jobPrefix(pd) + "hold/" }

func holdKey(pd manifest.Digest, gen int) string { return holdPrefix(pd) + strconv.Itoa(gen) }

// holdClockKey is the object a process writes to read the store's clock
// (see storeNow): under hold/, deleted with the job's hold records, and
// naming no generation.
func holdClockKey(pd manifest.Digest) string { return holdPrefix(pd) + "clock" }

// currentHolder returns the job's newest hold record and when it was last
// written, or nil when the job has none. gen is the highest generation
// present, even when its record was deleted since the listing or does
// not decode (then rec is nil; the latter is logged).
func currentHolder(ctx context.Context, s objstore.Store, pd manifest.Digest) (rec *HoldRecord, gen int, info objstore.ObjectInfo, err error) {
	rec, gen, info, unreadable, err := readHolder(ctx, s, pd)
	if unreadable != nil {
		slog.Warn("job hold record unreadable", "key", info.Key, "version", string(info.Version), "err", unreadable)
	}
	return rec, gen, info, err
}

// readHolder is currentHolder returning why the record of generation gen
// could not be read (it does not decode, or names another schema, plan or
// generation) as unreadable, instead of logging it.
func readHolder(ctx context.Context, s objstore.Store, pd manifest.Digest) (rec *HoldRecord, gen int, info objstore.ObjectInfo, unreadable, err error) {
	prefix := holdPrefix(pd)
	after := ""
	for {
		page, err := s.List(ctx, prefix, after, 1000)
		if err != nil {
			return nil, 0, info, nil, err
		}
		for _, o := range page.Objects {
			// Generations count holders: a number past maxHoldGeneration
			// was written by no shardproof (and n+1 must not wrap).
			n, err := strconv.Atoi(strings.TrimPrefix(o.Key, prefix))
			if err != nil || n <= 0 || n > maxHoldGeneration || strconv.Itoa(n) != strings.TrimPrefix(o.Key, prefix) {
				continue
			}
			if n > gen {
				gen, info = n, o
			}
		}
		if page.Next == "" {
			break
		}
		after = page.Next
	}
	if gen == 0 {
		return nil, 0, info, nil, nil
	}
	rc, err := s.Get(ctx, info.Key, info.Version)
	if objstore.IsNotExist(err) {
		// Deleted since the listing: the job is being removed, or was.
		return nil, gen, info, nil, nil
	}
	if err != nil {
		return nil, 0, info, nil, err
	}
	defer rc.Close()
	b, err := verifyread.ReadAll(rc, maxHoldRecord)
	var r HoldRecord
	if err == nil {
		err = decodeStrict(b, &r)
	}
	if err == nil && (r.Schema != HoldSchema || r.Plan != pd || r.Generation != gen) {
		// The schema is cut: a record's bytes are bounded, not short.
		err = fmt.Errorf("schema %.40q, plan %s, generation %d do not match", r.Schema, r.Plan, r.Generation)
	}
	if err != nil {
		return nil, gen, info, err, nil
	}
	return &r, gen, info, nil, nil
}

// storeNow returns the store's time now: the modification time it gives
// an object written now (pd's hold/clock, a new version each time). The
// age of a hold record is judged against it, not against this machine's
// clock: S3 times objects by its own clock (versitygw by its host's),
// and a machine whose clock ran minutes ahead of it took a live holder
// for gone.
func storeNow(ctx context.Context, s objstore.Store, pd manifest.Digest) (time.Time, error) {
	now, err := probeClock(ctx, s, holdClockKey(pd))
	if err != nil {
		return time.Time{}, wrap(err, "plan %s", pd)
	}
	return now, nil
}

// probeClock writes a new, empty version of key and returns the
// modification time the store gave it: the store's clock now.
func probeClock(ctx context.Context, s objstore.Store, key string) (time.Time, error) {
	v, err := s.Put(ctx, key, bytes.NewReader(nil), objstore.PutOptions{})
	if err != nil {
		return time.Time{}, wrap(err, "read the store's clock")
	}
	info, err := s.Head(ctx, key, v)
	if err != nil {
		return time.Time{}, wrap(err, "read the store's clock")
	}
	if info.Modified.IsZero() {
		return time.Time{}, errcode.New(errcode.IO, "read the store's clock: %s has no modification time", key)
	}
	return info.Modified, nil
}

// holderState is what a look at a job's hold found: its current record
// (see currentHolder) and whether that holder may still run.
type holderState struct {
	rec  *HoldRecord
	gen  int
	info objstore.ObjectInfo
	// unreadable is why the record of generation gen could not be read
	// (rec is nil): its holder is judged by the record's age.
	unreadable error
	// alive: the holder may still run; local: that was looked up on
	// this machine (/proc); age: how old its record was, by the store's
	// clock, when not local.
	alive, local bool
	age          time.Duration
	// estimated: age is by this machine's clock (a read-only look).
	estimated bool
}

// inUse is the JOB_IN_USE error naming st's holder.
func (st *holderState) inUse(pd manifest.Digest) *JobInUseError {
	return &JobInUseError{Plan: pd, Holder: st.holder(pd), Renewed: st.info.Modified, Age: st.age, Local: st.local, Estimated: st.estimated,
		Unreadable: st.unreadable}
}

// holder is st's record, or, when it could not be read, one naming only
// its plan and generation.
func (st *holderState) holder(pd manifest.Digest) HoldRecord {
	if st.rec == nil {
		return HoldRecord{Plan: pd, Generation: st.gen}
	}
	return *st.rec
}

// lookHolder reads plan pd's current holder and judges whether it may
// still run. A holder that released the job does not; one whose process
// this machine can look up (/proc) runs if that process does; any other
// (another machine, PID namespace or user) runs until its record is
// HoldStaleAfter old by the store's clock: the time between its last
// version and a probe written just now (storeNow), neither of which this
// machine's clock times. The probe is written before the record is read
// (again): a renewal that lands before that read is seen, and one that
// has not landed by then cannot, since its holder stops (holdExpiry) a
// renewal interval before others may take it for gone.
//
// A record that cannot be read (a newer build's, with a field this one
// does not know, or damaged) names no process to look up: its holder is
// judged by the record's age too, so a newer build's live holder is not
// taken over beside it while the machines that run verify are upgraded
// one by one.
//
// With readOnly, nothing is written: the record's age is judged against
// this machine's clock instead (estimated, as a dry run may be).
func lookHolder(ctx context.Context, s objstore.Store, pd manifest.Digest, readOnly bool) (holderState, error) {
	var now time.Time
	for {
		rec, gen, info, unreadable, err := readHolder(ctx, s, pd)
		if err != nil {
			return holderState{}, err
		}
		st := holderState{rec: rec, gen: gen, info: info, unreadable: unreadable}
		if unreadable != nil && (readOnly || !now.IsZero()) {
			slog.Warn("job hold record unreadable; its holder is taken to live until the record is HoldStaleAfter old", "key", info.Key,
				"version", string(info.Version), "holdStaleAfter", HoldStaleAfter.String(), "err", unreadable)
		}
		if (rec == nil && unreadable == nil) || (rec != nil && rec.Released) {
			return st, nil
		}
		if rec != nil {
			if alive, known := rec.Process.Alive(); known {
				st.alive, st.local = alive, true
				return st, nil
			}
		}
		if readOnly {
			st.age = time.Since(info.Modified)
			st.alive, st.estimated = st.age < HoldStaleAfter, true
			return st, nil
		}
		if now.IsZero() {
			if now, err = storeNow(ctx, s, pd); err != nil {
				return holderState{}, err
			}
			continue
		}
		st.age = now.Sub(info.Modified)
		st.alive = st.age < HoldStaleAfter
		return st, nil
	}
}

// Holder returns the live holder of plan pd's job, if any, as the error
// Acquire would give, without taking the job. Judging a holder on
// another machine writes the job's clock probe (see lookHolder).
func Holder(ctx context.Context, s objstore.Store, pd manifest.Digest) (*JobInUseError, error) {
	return holder(ctx, s, pd, false)
}

// HolderReadOnly is Holder writing nothing (store prune-jobs --dry-run):
// a holder on another machine is judged by this machine's clock, so a
// clock that disagrees with the store's makes the answer an estimate
// (JobInUseError.Estimated).
func HolderReadOnly(ctx context.Context, s objstore.Store, pd manifest.Digest) (*JobInUseError, error) {
	return holder(ctx, s, pd, true)
}

func holder(ctx context.Context, s objstore.Store, pd manifest.Digest, readOnly bool) (*JobInUseError, error) {
	st, err := lookHolder(ctx, s, pd, readOnly)
	if err != nil {
		return nil, err
	}
	if st.alive {
		return st.inUse(pd), nil
	}
	return nil, nil
}

// commandName is how a hold record names this process's command: the
// executable and the subcommand words before the first flag.
func commandName() string {
	words := []string{filepath.Base(os.Args[0])}
	for _, a := range os.Args[1:min(len(os.Args), 3)] {
		if strings.HasPrefix(a, "-") {
			break
		}
		words = append(words, a)
	}
	return strings.Join(words, " ")
}

// Acquire takes plan pd's job for purpose (HoldRun or HoldRemove). A job
// whose current holder lives is JOB_IN_USE (*JobInUseError, naming it);
// one whose holder released it or is gone (its process no longer runs,
// or, on another machine or with a record that cannot be read, it has not
// renewed its hold for HoldStaleAfter by the store's clock) is taken over. Taking is a conditional create of the
// next generation's record, so of any number of processes at once
// exactly one wins. Each attempt's record carries a nonce of its own: a
// create that went through but whose answer was lost (a retry of it
// then fails its precondition) is known by it as this attempt's, not
// another holder's. The hold is renewed until Release.
func Acquire(ctx context.Context, s objstore.Store, pd manifest.Digest, purpose string) (*Hold, error) {
	h, _, err := acquire(ctx, s, pd, purpose, false)
	return h, err
}

// Displaced is a holder TakeOver took a job from.
type Displaced struct {
	Holder HoldRecord
	// Renewed is when it last wrote its record, and Age how long before
	// the take-over, both by the store's clock (Age is zero when Local).
	Renewed time.Time
	Age     time.Duration
	// Live: without TakeOver the job would have been JOB_IN_USE (the
	// holder, on another machine, had renewed its record within
	// HoldStaleAfter). Local: its process was looked up on this machine,
	// and was gone.
	Live, Local bool
	// Unreadable is why its record could not be read, nil when it was:
	// Holder then holds only Plan and Generation (see JobInUseError).
	Unreadable error
}

// TakeOver takes plan pd's job from its holder at once and releases it,
// for the run that follows (verify --resume --take-over): an operator
// who knows the holder is dead (its machine crashed) need not wait
// HoldStaleAfter for its record to age. A holder this machine looks up
// and finds running (/proc) is still JOB_IN_USE, and so is one that took
// the job after TakeOver looked (it won the race for the next
// generation): only the holder found is taken from. The record it leaves
// says "remove" when the holder it displaced was deleting the job's
// files, so that the next holder deletes the rest. It returns the holder
// displaced, nil when the job had none or its holder had released it. A
// holder that is gone already (Displaced.Live false) is only named:
// nothing is written, and the next Acquire takes the job from it as it
// would anyway; a job with no record (a plan mistyped, or whose job was
// removed) gains none. A holder that did in fact still run finds the
// later generation at its next renewal and stops with JOB_IN_USE; until
// then, up to HoldRenewInterval, it runs beside the next holder.
func TakeOver(ctx context.Context, s objstore.Store, pd manifest.Digest) (*Displaced, error) {
	h, d, err := acquire(ctx, s, pd, HoldRun, true)
	if err != nil || h == nil {
		return d, err
	}
	if d != nil {
		p := &d.Holder
		attrs := []any{"plan", pd.String(), "generation", h.rec.Generation,
			"previousCommand", p.Command, "previousPid", p.Process.PID, "previousHost", p.Process.Host, "previousPurpose", p.Purpose,
			"previousStarted", p.Started, "previousRenewed", d.Renewed.UTC().Format(time.RFC3339), "previousAge", d.Age.Round(time.Second).String(),
			"previousLive", d.Live}
		if d.Unreadable != nil {
			attrs = append(attrs, "previousUnreadable", d.Unreadable)
		}
		slog.Warn("job taken over by hand from its holder", attrs...)
	}
	if err := h.release(); err != nil {
		return nil, wrap(err, "plan %s: release the job taken over", pd)
	}
	return d, nil
}

// acquire is Acquire; with takeOver (TakeOver), the live holder found at
// the first look, when it is not a running process of this machine, is
// taken over too, and a removal it displaces is carried on in the record
// written; a holder that is not live is returned as displaced, with no
// hold taken and nothing written.
func acquire(ctx context.Context, s objstore.Store, pd manifest.Digest, purpose string, takeOver bool) (*Hold, *Displaced, error) {
	var (
		tried   *Hold // the last attempt, its create refused by its precondition
		refused error
		written time.Time
		// taking is the generation of the holder the first look found,
		// the only one a take-over displaces: a process that took the
		// job since (this one lost the race for the next generation)
		// has just started it.
		taking = -1
	)
	for attempt := 0; ; attempt++ {
		st, err := lookHolder(ctx, s, pd, false)
		if err != nil {
			return nil, nil, wrap(err, "plan %s: read the job's hold", pd)
		}
		rec, gen := st.rec, st.gen
		if tried != nil && rec != nil && gen == tried.rec.Generation && rec.Nonce == tried.rec.Nonce {
			slog.Warn("job hold taken, though the answer to its create was lost", "plan", pd.String(), "generation", gen)
			return tried.start(ctx, written), tried.displaced, nil
		}
		if attempt == 0 {
			taking = gen
		}
		if st.alive && (st.local || !takeOver || gen != taking) {
			return nil, nil, st.inUse(pd)
		}
		if takeOver && !st.alive {
			// Nothing to take by hand: the next Acquire takes the job
			// from a holder that is gone, and a job with no record
			// gets none.
			if (rec == nil && st.unreadable == nil) || (rec != nil && rec.Released) {
				return nil, nil, nil
			}
			return nil, &Displaced{Holder: st.holder(pd), Renewed: st.info.Modified, Age: st.age, Local: st.local, Unreadable: st.unreadable}, nil
		}
		if attempt > 8 {
			return nil, nil, wrap(refused, "plan %s: take the job's hold", pd)
		}
		var nonce [16]byte
		rand.Read(nonce[:])
		h := &Hold{store: s, plan: pd, Previous: rec, rec: HoldRecord{
			Schema: HoldSchema, Plan: pd, Generation: gen + 1, Purpose: purpose,
			Command: commandName(), Process: procid.Self(), Started: time.Now().UTC().Format(time.RFC3339),
			Nonce: hex.EncodeToString(nonce[:]),
		}}
		if takeOver {
			// The holder lives (see above), on another machine. One
			// whose record could not be read is displaced as a run:
			// its purpose is unknown, as it is to a take-over once
			// the record is stale.
			if rec != nil && rec.Purpose == HoldRemove {
				h.rec.Purpose = HoldRemove
			}
			h.displaced = &Displaced{Holder: st.holder(pd), Renewed: st.info.Modified, Age: st.age, Live: true, Unreadable: st.unreadable}
		}
		b, err := h.body()
		if err != nil {
			return nil, nil, err
		}
		written = time.Now()
		_, err = s.Put(ctx, holdKey(pd, gen+1), bytes.NewReader(b), objstore.PutOptions{IfNoneMatch: true, Size: int64(len(b))})
		if objstore.IsPrecondition(err) {
			// Another process took this generation, or this attempt did
			// and the answer was lost: look again.
			tried, refused = h, err
			continue
		}
		if err != nil {
			return nil, nil, wrap(err, "plan %s: take the job's hold", pd)
		}
		return h.start(ctx, written), h.displaced, nil
	}
}

// start begins the renewals of a hold whose record was created by a write
// that began at written.
func (h *Hold) start(ctx context.Context, written time.Time) *Hold {
	if p := h.Previous; p != nil && !p.Released && h.displaced == nil {
		slog.Info("job taken over from a holder that is gone", "plan", h.plan.String(), "previousPid", p.Process.PID,
			"previousHost", p.Process.Host, "previousPurpose", p.Purpose, "generation", p.Generation)
	}
	h.ctx, h.cancel = context.WithCancelCause(ctx)
	h.stop, h.done = make(chan struct{}), make(chan struct{})
	go h.renew(written)
	return h
}

// body encodes the hold record; once the renewals run, only with wmu held.
func (h *Hold) body() ([]byte, error) {
	b, err := json.Marshal(&h.rec)
	if err != nil {
		return nil, errcode.Wrap(errcode.Internal, err, "encode hold record")
	}
	return b, nil
}

// Context is the context Acquire was given, canceled when the hold is lost:
// another process took the job over, or this one could not renew its
// record in time (see Lost).
func (h *Hold) Context() context.Context { return h.ctx }

// Lost returns why the hold is lost, or nil: JOB_IN_USE when another
// process took the job over, STORE_UNAVAILABLE when this one could not
// renew its record before another machine could take it for gone.
func (h *Hold) Lost() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lost
}

// holdExpiry is how long after it began its last write of its record that
// went through a holder gives the job up, by its own monotonic clock: a
// process on another machine takes it for gone once the store's clock
// has run HoldStaleAfter past that write (its version is timed no
// earlier than the write began), and the holder must have stopped by
// then, whatever a renewal that hangs does. No two clocks are compared,
// so they may disagree by any amount; the margin, one renewal interval,
// covers the time the holder takes to stop and clocks that run at
// slightly different rates.
func holdExpiry() time.Duration {
	if d := HoldStaleAfter - HoldRenewInterval; d > 0 {
		return d
	}
	return HoldStaleAfter / 2
}

// holdWallCheck is how often a holder compares the wall clock with its
// last renewal (see renew), and holdWallNow its wall clock (without a
// monotonic reading; tests move it).
var (
	holdWallCheck = 5 * time.Second
	holdWallNow   = func() time.Time { return time.Now().Round(0) }
)

// lose records err as why the hold is lost and ends its context.
func (h *Hold) lose(err error) {
	h.mu.Lock()
	h.lost = err
	h.mu.Unlock()
	h.cancel(err)
}

// renew writes a new version of the hold record every HoldRenewInterval
// (its time is what a process on another machine judges it by), and
// gives the job up when a later generation appeared, or its record is
// gone (this process had stopped renewing long enough to be taken for
// dead, and the job was taken over or deleted), or when no renewal has
// gone through for holdExpiry since written (the start of the last one
// that did): a process on another machine may then take the job over,
// and this one must not go on running it or deleting its files beside
// that one.
//
// The expiry is timed by the monotonic clock and, checked every
// holdWallCheck (during a renewal too), by the wall clock, whichever has
// run further: Linux's monotonic clock stops while the machine is
// suspended (a laptop's lid, a VM paused by its host), and a holder
// waking up minutes later would go on working as though no time had
// passed while another machine had taken the job over.
func (h *Hold) renew(written time.Time) {
	defer close(h.done)
	t := time.NewTicker(HoldRenewInterval)
	defer t.Stop()
	expire := time.NewTimer(time.Until(written.Add(holdExpiry())))
	defer expire.Stop()
	wall := time.NewTicker(holdWallCheck)
	defer wall.Stop()
	key := holdKey(h.plan, h.rec.Generation)
	var failed error
	for {
		select {
		case <-h.stop:
			return
		case <-h.ctx.Done():
			return
		case <-expire.C:
			h.expired(failed)
			return
		case <-wall.C:
			if wallExpired(written) {
				h.expired(failed)
				return
			}
			continue
		case <-t.C:
		}
		deadline := written.Add(holdExpiry())
		if !time.Now().Before(deadline) || wallExpired(written) {
			h.expired(failed)
			return
		}
		// Bounded by the deadline: a renewal that hangs (a silent
		// server) must not keep this process working past it. And by
		// the wall clock: a machine suspended while it hung wakes with
		// that deadline, on the monotonic clock, still minutes ahead.
		ctx, cancel := context.WithDeadline(h.ctx, deadline)
		bounded := make(chan struct{})
		go func() {
			defer close(bounded)
			cancelAtWallExpiry(ctx, cancel, written, h.stop)
		}()
		start := time.Now()
		var taken *JobInUseError
		if err := h.check(ctx); errors.As(err, &taken) {
			cancel()
			<-bounded
			slog.Error("job hold lost: another process took the job over", "plan", h.plan.String(), "code", string(errcode.JobInUse), "err", taken)
			h.lose(taken)
			return
		}
		err := h.write(ctx)
		cancel()
		<-bounded
		select {
		case <-h.stop:
			// Released or removed meanwhile: the renewal in flight
			// was cut (see cancelAtWallExpiry). A write that failed
			// may still be stored after the caller's (see release).
			h.cutWrite = err != nil
			return
		default:
		}
		if wallExpired(written) {
			// Whether or not this renewal went through, another
			// machine may have taken the job while this one slept.
			h.expired(failed)
			return
		}
		switch {
		case err == nil:
			written = start
			expire.Reset(time.Until(written.Add(holdExpiry())))
		case h.ctx.Err() == nil:
			failed = err
			slog.Warn("job hold not renewed; a process on another machine may take this job for abandoned", "key", key, "code", string(errcode.Of(err)), "err", err)
		}
	}
}

// wallExpired reports whether the wall clock shows holdExpiry since
// written (see renew).
func wallExpired(written time.Time) bool {
	return holdWallNow().Sub(written.Round(0)) >= holdExpiry()
}

// cancelAtWallExpiry calls cancel once the wall clock shows holdExpiry
// since written, looking every holdWallCheck until ctx ends, or at once
// when stop closes: a Release or a removal must not wait, up to
// holdExpiry, for a renewal that hangs on a silent store.
func cancelAtWallExpiry(ctx context.Context, cancel context.CancelFunc, written time.Time, stop <-chan struct{}) {
	t := time.NewTicker(holdWallCheck)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-stop:
			cancel()
			return
		case <-t.C:
			if wallExpired(written) {
				cancel()
				return
			}
		}
	}
}

// check returns JOB_IN_USE (TakenOver) when the job's current record is
// not this hold's: a later generation's, none (it was deleted), or, at
// this hold's generation, another attempt's (its nonce: a released
// record this hold creates at the next generation, see release, may
// meet a take-over's there).
func (h *Hold) check(ctx context.Context) error {
	rec, gen, info, err := currentHolder(ctx, h.store, h.plan)
	if err != nil {
		return wrap(err, "plan %s: read the job's hold", h.plan)
	}
	if gen == h.rec.Generation && (rec == nil || rec.Nonce == h.rec.Nonce) {
		return nil
	}
	e := &JobInUseError{Plan: h.plan, Renewed: info.Modified, TakenOver: true}
	if rec != nil {
		e.Holder = *rec
	}
	return e
}

// write stores a new version of the hold record.
func (h *Hold) write(ctx context.Context) error {
	h.wmu.Lock()
	defer h.wmu.Unlock()
	b, err := h.body()
	if err != nil {
		return err
	}
	_, err = h.store.Put(ctx, holdKey(h.plan, h.rec.Generation), bytes.NewReader(b), objstore.PutOptions{Size: int64(len(b))})
	return err
}

// setPurpose makes the hold record say purpose p from now on, and writes
// it, so that whoever takes the job after this process learns what it was
// doing: a run that deletes what a removal left says HoldRemove while it
// does (see Job.hold).
func (h *Hold) setPurpose(ctx context.Context, p string) error {
	h.wmu.Lock()
	h.rec.Purpose = p
	h.wmu.Unlock()
	return h.write(ctx)
}

// expired gives the job up: no renewal went through for holdExpiry (the
// last failure is err, nil when none was seen: this process was not
// running).
func (h *Hold) expired(err error) {
	msg := fmt.Sprintf("plan %s: this process could not renew its hold on the job for %s, and a process on another machine may take the job over %s after its last renewal: it stops (verify --resume of the plan goes on from where it stopped)",
		h.plan, holdExpiry(), HoldStaleAfter)
	e := errcode.New(errcode.StoreUnavailable, "%s", msg)
	if err != nil {
		e = errcode.Wrap(errcode.StoreUnavailable, err, "%s", msg)
	}
	slog.Error("job hold given up", "plan", h.plan.String(), "code", string(errcode.StoreUnavailable), "err", e)
	h.lose(e)
}

// end stops the renewals; it reports whether the hold is still this
// process's.
func (h *Hold) end() bool {
	h.once.Do(func() { close(h.stop); <-h.done })
	return h.Lost() == nil
}

// Release lets the job go without deleting it: the record's last version
// says so, and the next process to take the job need not wait for this
// one to be found gone. Failing to write it is logged: a holder that is
// gone is taken over anyway.
func (h *Hold) Release() {
	// A hold that is lost said why when it was lost.
	if err := h.release(); err != nil && h.Lost() == nil {
		slog.Warn("job hold not released; the next process to take the job finds this one gone first", "plan", h.plan.String(), "code", string(errcode.Of(err)), "err", err)
	}
}

// release is Release, returning why the hold was lost, or the failure to
// write the record.
func (h *Hold) release() error {
	defer h.cancel(context.Canceled)
	if !h.end() {
		return h.Lost()
	}
	h.rec.Released = true
	opts := objstore.PutOptions{}
	if h.cutWrite {
		// The cut renewal may be stored after a released version of
		// this generation's record and undo it: the job would look
		// held until the record went stale. The released record takes
		// the next generation instead, which only a process taking the
		// job over can have taken first.
		h.rec.Generation++
		opts.IfNoneMatch = true
	}
	b, err := h.body()
	if err != nil {
		return err
	}
	opts.Size = int64(len(b))
	ctx, cancel := context.WithTimeout(context.WithoutCancel(h.ctx), 30*time.Second)
	defer cancel()
	_, err = h.store.Put(ctx, holdKey(h.plan, h.rec.Generation), bytes.NewReader(b), opts)
	return err
}

// unfinishedRemoval reports whether the holder this hold follows was
// deleting the job and did not finish (it failed or was killed): the
// job's files are then partly gone, and none of them can be trusted.
func (h *Hold) unfinishedRemoval() bool {
	return h.Previous != nil && h.Previous.Purpose == HoldRemove
}

// removeAllButHold deletes every directory of pd's job but hold/: what
// removeTaskFiles leaves (merge files of reduce attempts that were
// killed) and any directory a later version adds. The deletion of the
// job's prefix that follows goes in listing order on S3, and hold/ sorts
// before merge/: only the hold records and the lease, a single key that
// no run reads, are left for it.
func removeAllButHold(ctx context.Context, s objstore.Store, d objstore.Deleter, pd manifest.Digest) error {
	prefix := jobPrefix(pd)
	after, last := "", ""
	for {
		page, err := s.List(ctx, prefix, after, 1000)
		if err != nil {
			return wrap(err, "remove job %s", pd)
		}
		for _, o := range page.Objects {
			dir, _, ok := strings.Cut(strings.TrimPrefix(o.Key, prefix), "/")
			if !ok || dir == "hold" || dir == last {
				continue
			}
			last = dir
			if err := d.DeletePrefix(ctx, prefix+dir+"/"); err != nil {
				return wrap(err, "remove job %s", pd)
			}
		}
		if page.Next == "" {
			return nil
		}
		after = page.Next
	}
}

// removeTaskFiles deletes the job's task files, reduce commit records
// first and then the map tasks' files, so an interrupted removal never
// leaves a reduce commit naming deleted inputs.
func removeTaskFiles(ctx context.Context, d objstore.Deleter, pd manifest.Digest) error {
	for _, p := range []string{jobPrefix(pd) + "reduce/", jobPrefix(pd) + "map/"} {
		if err := d.DeletePrefix(ctx, p); err != nil {
			return wrap(err, "remove job %s", pd)
		}
	}
	return nil
}
