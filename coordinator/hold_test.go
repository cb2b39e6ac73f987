package coordinator

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/internal/procid"
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/objstore"
	"github.com/shardproof/shardproof/objstore/faults"
	_ "github.com/shardproof/shardproof/objstore/s3"
	"github.com/shardproof/shardproof/objstore/s3/s3test"
	"github.com/shardproof/shardproof/stage/stagetest"
)

// planOnly stores a plan of res's release and returns its digest.
func planOnly(t *testing.T, s objstore.Store, root manifest.Digest, nonce string) manifest.Digest {
	t.Helper()
	_, pd, err := NewPlan(t.Context(), s, PlanOptions{Root: root, MapTasks: 3, Reducers: 2, Tool: "shardproof test", Nonce: nonce})
	if err != nil {
		t.Fatal(err)
	}
	return pd
}

// putHold writes generation gen of pd's hold record as process p.
func putHold(t *testing.T, s objstore.Store, pd manifest.Digest, gen int, purpose string, p procid.ID) {
	t.Helper()
	putHoldBytes(t, s, pd, gen, purpose, p, func(b []byte) []byte { return b })
}

// putHoldBytes is putHold writing edit of the record's bytes.
func putHoldBytes(t *testing.T, s objstore.Store, pd manifest.Digest, gen int, purpose string, p procid.ID, edit func([]byte) []byte) {
	t.Helper()
	b, err := json.Marshal(&HoldRecord{Schema: HoldSchema, Plan: pd, Generation: gen, Purpose: purpose,
		Command: "shardproof verify", Process: p, Started: time.Now().UTC().Format(time.RFC3339)})
	if err != nil {
		t.Fatal(err)
	}
	b = edit(b)
	if _, err := s.Put(t.Context(), holdKey(pd, gen), bytes.NewReader(b), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
}

// A job has one holder at a time: while this process holds it, a second
// hold, a run and a removal are JOB_IN_USE naming this process, and
// nothing of the job is touched; once released it is taken again, and of
// many processes (here goroutines) taking it at once exactly one wins.
func TestHoldOneHolderAtATime(t *testing.T) {
	s, res := synth(t)
	ctx := t.Context()
	pd := planOnly(t, s, res.Root, "hold")
	h, err := Acquire(ctx, s, pd, HoldRun)
	if err != nil {
		t.Fatal(err)
	}
	var inUse *JobInUseError
	_, err = Acquire(ctx, s, pd, HoldRun)
	if !errors.As(err, &inUse) || errcode.Of(err) != errcode.JobInUse || inUse.Holder.Process.PID != os.Getpid() ||
		inUse.Holder.Purpose != HoldRun || !strings.Contains(err.Error(), fmt.Sprintf("pid %d on host", os.Getpid())) {
		t.Fatalf("second hold: %v, want JOB_IN_USE naming this process", err)
	}
	if runtime.GOOS == "linux" && (!inUse.Local || !strings.Contains(err.Error(), "running on this machine")) {
		t.Errorf("the holder was not looked up on this machine: %v", err)
	}
	if _, err := Run(ctx, s, pd, 2, nil); errcode.Of(err) != errcode.JobInUse {
		t.Fatalf("run of a held job: %v, want JOB_IN_USE", err)
	}
	if n := jobKeys(t, s, pd, "map/"); n != 0 {
		t.Fatalf("a refused run wrote %d map keys", n)
	}
	if _, err := Verify(ctx, s, Options{PlanOptions: PlanOptions{Root: res.Root, Tool: "shardproof test"}}); err != nil {
		t.Fatalf("a verification of another plan: %v", err)
	}
	if err := RemoveJob(ctx, s, pd); errcode.Of(err) != errcode.JobInUse || jobKeys(t, s, pd, "hold/") != 1 {
		t.Fatalf("removal of a held job: %v, %d hold keys left", err, jobKeys(t, s, pd, "hold/"))
	}
	if held, err := Holder(ctx, s, pd); err != nil || held == nil || held.Holder.Generation != 1 {
		t.Fatalf("Holder = %+v, %v", held, err)
	}
	h.Release()
	if held, err := Holder(ctx, s, pd); err != nil || held != nil {
		t.Fatalf("Holder after release = %+v, %v", held, err)
	}

	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		won  []*Hold
		errs []error
	)
	for range 8 {
		wg.Go(func() {
			h, err := Acquire(ctx, s, pd, HoldRemove)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
			} else {
				won = append(won, h)
			}
		})
	}
	wg.Wait()
	if len(won) != 1 {
		t.Fatalf("%d of 8 concurrent holds won: %v", len(won), errs)
	}
	for _, err := range errs {
		if errcode.Of(err) != errcode.JobInUse {
			t.Fatalf("a losing hold: %v, want JOB_IN_USE", err)
		}
	}
	if p := won[0].Previous; p == nil || !p.Released || p.Generation != 1 || won[0].rec.Generation != 2 {
		t.Fatalf("the winner follows %+v as generation %d", p, won[0].rec.Generation)
	}
	// A resume while prune-jobs deletes the job.
	if _, err := Run(ctx, s, pd, 2, nil); errcode.Of(err) != errcode.JobInUse || !strings.Contains(err.Error(), "remove since") ||
		!strings.Contains(err.Error(), "it deletes the job's files") {
		t.Fatalf("run of a job being deleted: %v", err)
	}
	won[0].Release()
}

// A holder that is gone is taken over: at once when its process was on
// this machine and no longer runs (kill -9), and on another machine only
// once it has not renewed its hold for HoldStaleAfter.
func TestHoldOfGoneProcess(t *testing.T) {
	s, res := synth(t)
	ctx := t.Context()
	pd := planOnly(t, s, res.Root, "gone")
	if runtime.GOOS == "linux" {
		child := exec.Command(os.Args[0], "-test.run=^$")
		if err := child.Run(); err != nil {
			t.Fatal(err)
		}
		dead := procid.Self()
		dead.PID = child.Process.Pid
		putHold(t, s, pd, 1, HoldRun, dead)
		h, err := Acquire(ctx, s, pd, HoldRun)
		if err != nil {
			t.Fatalf("a dead holder on this machine: %v, want the job taken over", err)
		}
		if h.Previous == nil || h.Previous.Process.PID != dead.PID || h.rec.Generation != 2 {
			t.Fatalf("took over from %+v as generation %d", h.Previous, h.rec.Generation)
		}
		h.Release()
	}
	putHold(t, s, pd, 3, HoldRun, farHolder)
	_, err := Acquire(ctx, s, pd, HoldRun)
	var inUse *JobInUseError
	if !errors.As(err, &inUse) || inUse.Local || inUse.Holder.Process.Host != "elsewhere" ||
		!strings.Contains(err.Error(), "pid 4242 on host elsewhere") || !strings.Contains(err.Error(), "renewed") {
		t.Fatalf("a holder on another machine renewed just now: %v, want JOB_IN_USE naming it", err)
	}
	// Its last renewal ages past HoldStaleAfter.
	ageHold(t, s, pd, 3)
	h, err := Acquire(ctx, s, pd, HoldRun)
	if err != nil || h.Previous.Process.Host != "elsewhere" || h.rec.Generation != 4 {
		t.Fatalf("a holder silent for longer than HoldStaleAfter: %v, want the job taken over", err)
	}
	h.Release()
	// A record that does not decode is judged by its age alone (see
	// TestHoldRecordDecodedStrictly).
	if _, err := s.Put(ctx, holdKey(pd, 5), strings.NewReader("{not json"), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	ageHold(t, s, pd, 5)
	if h, err = Acquire(ctx, s, pd, HoldRun); err != nil || h.rec.Generation != 6 {
		t.Fatalf("after an unreadable record HoldStaleAfter old: %v", err)
	}
	h.Release()
	// Nor is a generation no holder could have reached (its successor
	// would not fit an int).
	putHold(t, s, pd, 1<<62, HoldRun, farHolder)
	if h, err = Acquire(ctx, s, pd, HoldRun); err != nil || h.rec.Generation != 7 {
		t.Fatalf("after a generation of 2^62: %v", err)
	}
	h.Release()
}

// ageHold makes every version of generation gen of pd's hold record, in
// the file store s, HoldStaleAfter and a minute old: its holder stopped
// renewing it that long ago.
func ageHold(t *testing.T, s objstore.Store, pd manifest.Digest, gen int) {
	t.Helper()
	old := time.Now().Add(-HoldStaleAfter - time.Minute)
	dir := filepath.Join(s.(fmt.Stringer).String(), holdKey(pd, gen))
	versions, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range versions {
		if err := os.Chtimes(filepath.Join(dir, v.Name()), old, old); err != nil {
			t.Fatal(err)
		}
	}
}

// A hold record with a key twice, of which encoding/json keeps the last
// and another reader the first, with a key in another case, which
// encoding/json takes for the field, or with a field this build does not
// know (a newer build's, during a rolling upgrade) does not decode: its
// holder is judged by the record's age alone, as one on another machine.
// While the record is fresh the job is JOB_IN_USE, saying that the
// record could not be read and why (not an empty command, PID and host);
// once it is HoldStaleAfter old the job is taken over. (An unreadable
// record was taken for a holder that is gone at once: a newer build's
// live holder was taken over, and two processes ran the job.)
func TestHoldRecordDecodedStrictly(t *testing.T) {
	s, res := synth(t)
	ctx := t.Context()
	pd := planOnly(t, s, res.Root, "hold strict")
	putHold(t, s, pd, 1, HoldRun, farHolder)
	var inUse *JobInUseError
	if _, err := Acquire(ctx, s, pd, HoldRun); !errors.As(err, &inUse) {
		t.Fatalf("a holder on another machine renewed just now: %v, want JOB_IN_USE", err)
	}
	gen := 2
	for _, c := range []struct{ name, old, new, why string }{
		{"process twice", `"process":`, `"process":{"host":"gone","pid":1},"process":`, "$.process: duplicate key"},
		{"process in another case", `"process":`, `"Process":`, "$.Process: unknown field"},
		{"pid in another case", `"pid":`, `"PID":`, "$.process.PID: unknown field"},
		{"a newer build's field", `"process":`, `"lease":"7","process":`, "$.lease: unknown field"},
	} {
		putHoldBytes(t, s, pd, gen, HoldRun, farHolder, func(b []byte) []byte {
			forged := bytes.Replace(b, []byte(c.old), []byte(c.new), 1)
			if bytes.Equal(forged, b) {
				t.Fatalf("%q not in %s", c.old, b)
			}
			return forged
		})
		_, err := Acquire(ctx, s, pd, HoldRun)
		if !errors.As(err, &inUse) || inUse.Unreadable == nil || inUse.Local || inUse.Holder.Generation != gen ||
			inUse.Age < 0 || inUse.Age >= HoldStaleAfter {
			t.Fatalf("%s, renewed just now: %v, want JOB_IN_USE for a record that could not be read", c.name, err)
		}
		msg := err.Error()
		if !strings.Contains(msg, fmt.Sprintf("hold record could not be read (generation %d: ", gen)) || !strings.Contains(msg, c.why) ||
			!strings.Contains(msg, "taken for dead") || !strings.Contains(msg, "--take-over") || strings.Contains(msg, "pid 0") {
			t.Fatalf("%s: JOB_IN_USE does not say the record could not be read, and why: %s", c.name, msg)
		}
		if held, err := HolderReadOnly(ctx, s, pd); err != nil || held == nil || held.Unreadable == nil || !held.Estimated {
			t.Fatalf("%s: HolderReadOnly = %+v, %v; want the holder, estimated", c.name, held, err)
		}
		ageHold(t, s, pd, gen)
		if held, err := HolderReadOnly(ctx, s, pd); err != nil || held != nil {
			t.Fatalf("%s, HoldStaleAfter old: HolderReadOnly = %+v, %v; want none", c.name, held, err)
		}
		h, err := Acquire(ctx, s, pd, HoldRun)
		if err != nil || h.rec.Generation != gen+1 || h.Previous != nil {
			t.Fatalf("%s, HoldStaleAfter old: %v, want the job taken as generation %d", c.name, err, gen+1)
		}
		h.Release()
		gen += 2
	}
}

// verify --resume --take-over takes a job at once from a holder whose
// record could not be read and was renewed just now, as from a live
// holder on another machine, and names it by that; once the record is
// HoldStaleAfter old, the holder is named as gone and nothing is written.
func TestTakeOverUnreadableHolder(t *testing.T) {
	s := stagetest.Store(t)
	ctx := t.Context()
	pd := manifest.Sum([]byte("plan whose holder's record cannot be read, taken over by hand"))
	newer := func(b []byte) []byte {
		return bytes.Replace(b, []byte(`"process":`), []byte(`"lease":"7","process":`), 1)
	}
	putHoldBytes(t, s, pd, 1, HoldRemove, farHolder, newer)
	d, err := TakeOver(ctx, s, pd)
	if err != nil || d == nil || !d.Live || d.Unreadable == nil || d.Holder.Generation != 1 || d.Age < 0 || d.Age >= HoldStaleAfter {
		t.Fatalf("TakeOver of a live holder whose record cannot be read = %+v, %v", d, err)
	}
	h, err := Acquire(ctx, s, pd, HoldRun)
	if err != nil {
		t.Fatalf("after TakeOver: %v", err)
	}
	if p := h.Previous; p == nil || p.Generation != 2 || !p.Released {
		t.Fatalf("after TakeOver the next holder follows %+v", p)
	}
	h.Release()

	putHoldBytes(t, s, pd, 4, HoldRun, farHolder, newer)
	ageHold(t, s, pd, 4)
	n := jobKeys(t, s, pd, "hold/")
	d, err = TakeOver(ctx, s, pd)
	if err != nil || d == nil || d.Live || d.Unreadable == nil || d.Holder.Generation != 4 || d.Age < HoldStaleAfter {
		t.Fatalf("TakeOver of a stale holder whose record cannot be read = %+v, %v", d, err)
	}
	if got := jobKeys(t, s, pd, "hold/"); got != n {
		t.Fatalf("TakeOver of a holder that is gone left %d hold keys, was %d", got, n)
	}
}

// A holder renews its record; when another process takes the job over
// anyway (this one was taken for gone), the holder's context ends with
// JOB_IN_USE and it writes nothing more.
func TestHoldTakenOver(t *testing.T) {
	s, res := synth(t)
	ctx := t.Context()
	pd := planOnly(t, s, res.Root, "taken")
	defer func(d time.Duration) { HoldRenewInterval = d }(HoldRenewInterval)
	HoldRenewInterval = 10 * time.Millisecond
	h, err := Acquire(ctx, s, pd, HoldRun)
	if err != nil {
		t.Fatal(err)
	}
	versions := func(gen int) []objstore.ObjectInfo {
		vs, err := s.(objstore.VersionLister).Versions(ctx, holdKey(pd, gen), 100)
		if err != nil {
			t.Fatal(err)
		}
		return vs
	}
	for deadline := time.Now().Add(time.Minute); len(versions(1)) < 3; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the hold was not renewed")
		}
	}
	putHold(t, s, pd, 2, HoldRun, procid.ID{Host: "elsewhere", PID: 7, Machine: "another-boot/pid:[1]"})
	select {
	case <-h.Context().Done():
	case <-time.After(time.Minute):
		t.Fatal("the hold's context did not end when another process took the job")
	}
	var inUse *JobInUseError
	if err := h.Lost(); !errors.As(err, &inUse) || !inUse.TakenOver || inUse.Holder.Process.Host != "elsewhere" ||
		errcode.Of(err) != errcode.JobInUse || !strings.Contains(err.Error(), "took it over") {
		t.Fatalf("Lost() = %v", err)
	}
	n := len(versions(1))
	h.Release()
	if got := len(versions(1)); got != n {
		t.Fatalf("a lost hold wrote %d more versions of its record", got-n)
	}
}

// A removal that did not finish (it failed, or was killed) leaves task
// files that cannot be trusted, a map commit naming a shuffle file that
// is gone among them: the next run deletes what is left and runs the job
// from the start, to the report an undisturbed run gives.
func TestRunAfterUnfinishedRemoval(t *testing.T) {
	s, res := faulty(t)
	ctx := t.Context()
	pd := planOnly(t, s, res.Root, "half-removed")
	j, err := Open(ctx, s, pd)
	if err != nil {
		t.Fatal(err)
	}
	for i := range j.Plan.MapTasks {
		if _, err := j.Map(ctx, i, nil); err != nil {
			t.Fatal(err)
		}
	}
	kill := errors.New("killed")
	broken := &faults.ErrorOnce{Store: s, Method: faults.DeletePrefix, Err: kill,
		Match: func(p string) bool { return strings.HasSuffix(p, "/map/") }}
	if err := RemoveJob(ctx, broken, pd); !errors.Is(err, kill) {
		t.Fatalf("RemoveJob: %v, want the injected failure", err)
	}
	// The removal had reached map task 0: its commit record stays, one
	// of its shuffle files is gone.
	if err := s.(objstore.Deleter).DeletePrefix(ctx, j.mapOutputKey(0, 0)+"/"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Head(ctx, j.mapCommitKey(0), ""); err != nil {
		t.Fatal(err)
	}
	out, err := Run(ctx, s, pd, 2, nil)
	if err != nil {
		t.Fatalf("run after an unfinished removal: %v", err)
	}
	fresh := verify(t, s, PlanOptions{Root: res.Root, MapTasks: 3, Reducers: 2})
	if out.Reused || !bytes.Equal(withoutExecution(t, out.Report), withoutExecution(t, fresh)) {
		t.Fatal("the report after an unfinished removal differs from an undisturbed run's")
	}
	if err := RemoveJob(ctx, s, pd); err != nil || jobKeys(t, s, pd, "") != 0 {
		t.Fatalf("RemoveJob: %v, %d keys left", err, jobKeys(t, s, pd, ""))
	}
}

// FuzzHoldRecord gives a job's hold record arbitrary bytes, as anyone
// who can write the store could: looking for the job's holder must never
// panic, and an error carries a catalogued code other than INTERNAL.
func FuzzHoldRecord(f *testing.F) {
	s := stagetest.Store(f)
	res := stagetest.Synth(f, s, 200, 2, 3)
	ctx := context.Background()
	_, pd, err := NewPlan(ctx, s, PlanOptions{Root: res.Root, Tool: "fuzz", Nonce: "fuzz"})
	if err != nil {
		f.Fatal(err)
	}
	hold, err := json.Marshal(&HoldRecord{Schema: HoldSchema, Plan: pd, Generation: 1, Purpose: HoldRun,
		Command: "shardproof verify", Process: procid.Self(), Started: "2026-01-01T00:00:00Z"})
	if err != nil {
		f.Fatal(err)
	}
	if _, err := s.Put(ctx, holdKey(pd, 1), bytes.NewReader(hold), objstore.PutOptions{}); err != nil {
		f.Fatal(err)
	}
	f.Add(hold)
	f.Add(bytes.Replace(hold, []byte(`"pid":`), []byte(`"pid":-`), 1))
	f.Add(bytes.Replace(hold, []byte(`"generation":1`), []byte(`"generation":2`), 1))
	f.Add([]byte(`{"schema":"training.verify.hold.v1","released":true}`))
	f.Add(bytes.Replace(hold, []byte(`"started":`), []byte(`"nonce":"00112233445566778899aabbccddeeff","started":`), 1))
	// Hostile or damaged process names on this machine: a PID that is
	// any process (start unknown), one no pid_t holds (cut to 32 bits
	// it is -1, every process), past pid_max, a start that overflows,
	// no process at all.
	self := procid.Self()
	for _, p := range []string{
		fmt.Sprintf(`{"host":"x","pid":1,"machine":%q}`, self.Machine),
		fmt.Sprintf(`{"host":"x","pid":4294967295,"machine":%q,"start":1}`, self.Machine),
		fmt.Sprintf(`{"host":"x","pid":9223372036854775807,"machine":%q,"start":1}`, self.Machine),
		fmt.Sprintf(`{"host":"x","pid":4194305,"machine":%q,"start":1}`, self.Machine),
		fmt.Sprintf(`{"host":"x","pid":%d,"machine":%q,"start":18446744073709551616}`, self.PID, self.Machine),
		`null`,
		`{"host":"\u0000\n","pid":7,"machine":"","start":0}`,
	} {
		i := bytes.Index(hold, []byte(`"process":`))
		j := bytes.Index(hold, []byte(`,"started"`))
		f.Add(append(append(append([]byte{}, hold[:i]...), `"process":`+p...), hold[j:]...))
	}
	f.Add(bytes.Replace(hold, []byte(`"purpose":"run"`), []byte(`"purpose":"remove"`), 1))
	f.Add(bytes.Replace(hold, []byte(`"started":"2026-01-01T00:00:00Z"`), []byte(`"started":"`+strings.Repeat("\\u202e", 1000)+`"`), 1))
	f.Fuzz(func(t *testing.T, b []byte) {
		inUse, err := Holder(ctx, &bodyOf{Store: s, key: holdKey(pd, 1), body: b}, pd)
		checkCoded(t, "Holder", err, b)
		if inUse != nil && (inUse.Error() == "" || errcode.Of(inUse) != errcode.JobInUse) {
			t.Fatalf("holder %+v: %v", inUse.Holder, inUse)
		}
	})
}

// holdOutage is a store whose Puts of hold records stop reaching it once
// down is set (the store unreachable for the holder alone): each fails at
// once, or with hang, waits for its context as a silent server would.
// Every other call passes through.
type holdOutage struct {
	objstore.Store
	hang bool
	down atomic.Bool
	// hung counts the Puts waiting for their context (with hang).
	hung atomic.Int64

	mu     sync.Mutex
	lastOK time.Time // when the last hold Put that was stored began
}

func (o *holdOutage) Put(ctx context.Context, key string, body io.Reader, opts objstore.PutOptions) (objstore.Version, error) {
	if !strings.Contains(key, "/hold/") {
		return o.Store.Put(ctx, key, body, opts)
	}
	if o.down.Load() {
		if o.hang {
			o.hung.Add(1)
			<-ctx.Done()
			return "", errcode.Wrap(errcode.Canceled, ctx.Err(), "put %s", key)
		}
		return "", errcode.New(errcode.StoreUnavailable, "put %s: the store is unreachable", key)
	}
	start := time.Now()
	v, err := o.Store.Put(ctx, key, body, opts)
	if err == nil {
		o.mu.Lock()
		o.lastOK = start
		o.mu.Unlock()
	}
	return v, err
}

func (o *holdOutage) last() time.Time {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.lastOK
}

// A holder whose renewals stop reaching the store (they fail, or hang on
// a silent server) gives the job up before a process on another machine
// may take it for gone (HoldStaleAfter after its last renewal): its
// context ends with STORE_UNAVAILABLE, so it stops running the job or
// deleting its files rather than go on beside the process that takes it
// over. Release returns even while a renewal hangs. The hold runs in a
// synctest bubble, on a clock that moves only when every goroutine in it
// waits: the margin under test is one renewal interval (250 ms here), and
// on the real clock a timer or a test goroutine woken late on a loaded
// machine used up to 210 ms of it.
func TestHoldGivenUpWhenNotRenewed(t *testing.T) {
	s, res := synth(t)
	defer func(r, st time.Duration) { HoldRenewInterval, HoldStaleAfter = r, st }(HoldRenewInterval, HoldStaleAfter)
	HoldRenewInterval, HoldStaleAfter = 250*time.Millisecond, 1500*time.Millisecond
	for _, hang := range []bool{false, true} {
		t.Run(fmt.Sprintf("hang=%v", hang), func(t *testing.T) {
			pd := planOnly(t, s, res.Root, fmt.Sprintf("outage-%v", hang))
			synctest.Test(t, func(t *testing.T) {
				o := &holdOutage{Store: s, hang: hang}
				h, err := Acquire(t.Context(), o, pd, HoldRun)
				if err != nil {
					t.Fatal(err)
				}
				time.Sleep(2 * HoldRenewInterval)
				o.down.Store(true)
				select {
				case <-h.Context().Done():
				case <-time.After(10 * HoldStaleAfter):
					t.Fatalf("a holder whose renewals do not reach the store kept the job %s after its last renewal (others take it over after %s)",
						time.Since(o.last()), HoldStaleAfter)
				}
				if since := time.Since(o.last()); since >= HoldStaleAfter {
					t.Errorf("the holder gave the job up %s after its last renewal, not before %s", since, HoldStaleAfter)
				}
				if err := h.Lost(); errcode.Of(err) != errcode.StoreUnavailable || context.Cause(h.Context()) != err {
					t.Fatalf("Lost() = %v (cause %v), want STORE_UNAVAILABLE", err, context.Cause(h.Context()))
				}
				released := make(chan struct{})
				go func() { h.Release(); close(released) }()
				select {
				case <-released:
				case <-time.After(time.Minute):
					t.Fatal("Release of a given-up hold did not return")
				}
			})
		})
	}
}

// A holder whose record was deleted under it (the job removed by a
// process that took it for gone) learns it at its next renewal: its
// context ends with JOB_IN_USE, and it does not write its record back
// into the deleted job.
func TestHoldRecordDeleted(t *testing.T) {
	s, res := synth(t)
	ctx := t.Context()
	pd := planOnly(t, s, res.Root, "deleted")
	defer func(d time.Duration) { HoldRenewInterval = d }(HoldRenewInterval)
	HoldRenewInterval = 10 * time.Millisecond
	h, err := Acquire(ctx, s, pd, HoldRun)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release()
	if err := s.(objstore.Deleter).DeletePrefix(ctx, jobPrefix(pd)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-h.Context().Done():
	case <-time.After(time.Minute):
		t.Fatal("the holder of a deleted job went on")
	}
	if err := h.Lost(); errcode.Of(err) != errcode.JobInUse {
		t.Fatalf("Lost() = %v, want JOB_IN_USE", err)
	}
	h.Release()
	if n := jobKeys(t, s, pd, ""); n != 0 {
		t.Fatalf("the holder wrote %d keys into the deleted job", n)
	}
}

// A run that takes a job whose removal did not finish, and fails (or is
// killed) while it deletes what is left, leaves its record saying so: the
// run after it deletes the rest too, rather than reuse a map commit whose
// shuffle file is gone (NOT_FOUND on every resume).
func TestRunAfterFailedCleanupOfUnfinishedRemoval(t *testing.T) {
	s, res := faulty(t)
	ctx := t.Context()
	pd := planOnly(t, s, res.Root, "cleanup-failed")
	j, err := Open(ctx, s, pd)
	if err != nil {
		t.Fatal(err)
	}
	for i := range j.Plan.MapTasks {
		if _, err := j.Map(ctx, i, nil); err != nil {
			t.Fatal(err)
		}
	}
	kill := errors.New("killed")
	mapFiles := func(p string) bool { return strings.HasSuffix(p, "/map/") }
	if err := RemoveJob(ctx, &faults.ErrorOnce{Store: s, Method: faults.DeletePrefix, Err: kill, Match: mapFiles}, pd); !errors.Is(err, kill) {
		t.Fatalf("RemoveJob: %v, want the injected failure", err)
	}
	// The removal had reached map task 0: its commit record stays, one
	// of its shuffle files is gone.
	if err := s.(objstore.Deleter).DeletePrefix(ctx, j.mapOutputKey(0, 0)+"/"); err != nil {
		t.Fatal(err)
	}
	// The next run fails while it deletes the rest.
	lost := errcode.New(errcode.StoreUnavailable, "connection lost")
	if _, err := Run(ctx, &faults.ErrorOnce{Store: s, Method: faults.DeletePrefix, Err: lost, Match: mapFiles}, pd, 2, nil); !errors.Is(err, lost) {
		t.Fatalf("run whose cleanup fails: %v, want the injected failure", err)
	}
	if _, err := s.Head(ctx, j.mapCommitKey(0), ""); err != nil {
		t.Fatal(err)
	}
	out, err := Run(ctx, s, pd, 2, nil)
	if err != nil {
		t.Fatalf("run after a failed cleanup of an unfinished removal: %v", err)
	}
	fresh := verify(t, s, PlanOptions{Root: res.Root, MapTasks: 3, Reducers: 2})
	if out.Reused || !bytes.Equal(withoutExecution(t, out.Report), withoutExecution(t, fresh)) {
		t.Fatal("the report differs from an undisturbed run's")
	}
}

// The answer to the hold's own conditional create is lost (the
// connection dropped after the store wrote the record) and the SDK's
// retry meets that record: a precondition failure. The process then finds
// a live holder naming itself; the record carries the nonce of its own
// attempt, so it holds the job, rather than refusing it with JOB_IN_USE
// naming its own PID. Another holder of this process, with a nonce of
// its own, is still refused. On the file store and on S3 (versitygw).
func TestHoldCreateAnswerLost(t *testing.T) {
	for name, open := range holdStores {
		t.Run(name, func(t *testing.T) {
			s := open(t)
			ctx := t.Context()
			pd := manifest.Sum([]byte("plan whose hold create loses its answer"))
			lost := &faults.LostAnswer{Store: s, Match: func(k string) bool { return strings.HasPrefix(k, holdPrefix(pd)) },
				Err: fmt.Errorf("put %s, retried: %w", holdKey(pd, 1), objstore.ErrPreconditionFailed)}
			h, err := Acquire(ctx, lost, pd, HoldRun)
			if err != nil {
				t.Fatalf("a hold whose create lost its answer: %v, want it held", err)
			}
			if !lost.Fired() || h.rec.Generation != 1 || h.Previous != nil || jobKeys(t, s, pd, "hold/") != 1 {
				t.Fatalf("fired %v, generation %d, previous %+v, %d hold keys", lost.Fired(), h.rec.Generation, h.Previous, jobKeys(t, s, pd, "hold/"))
			}
			var inUse *JobInUseError
			if _, err := Acquire(ctx, s, pd, HoldRun); !errors.As(err, &inUse) || inUse.Holder.Nonce != h.rec.Nonce {
				t.Fatalf("a second hold of this process: %v, want JOB_IN_USE naming the first", err)
			}
			h.Release()
			if held, err := Holder(ctx, s, pd); err != nil || held != nil {
				t.Fatalf("Holder after release = %+v, %v", held, err)
			}
			// A record of this process with another nonce is another
			// attempt's: the lost answer on a later generation is still
			// told from it.
			lost = &faults.LostAnswer{Store: s, Match: func(k string) bool { return k == holdKey(pd, 2) },
				Err: fmt.Errorf("put %s, retried: %w", holdKey(pd, 2), objstore.ErrPreconditionFailed)}
			h, err = Acquire(ctx, lost, pd, HoldRemove)
			if err != nil || h.rec.Generation != 2 || h.Previous == nil || !h.Previous.Released {
				t.Fatalf("the next hold, its answer lost: %v", err)
			}
			h.Release()
		})
	}
}

// farHolder is a process on another machine (another boot), which this
// one cannot look up: whether it lives is judged by its record's age.
var farHolder = procid.ID{Host: "elsewhere", PID: 4242, Machine: "another-boot/pid:[1]", Start: 1}

// holdStores opens a new empty store of each kind: a file store and an S3
// bucket on the test gateway.
var holdStores = map[string]func(t *testing.T) objstore.Store{
	"file": func(t *testing.T) objstore.Store { return stagetest.Store(t) },
	"s3": func(t *testing.T) objstore.Store {
		s, err := objstore.Open(t.Context(), s3test.Start(t))
		if err != nil {
			t.Fatal(err)
		}
		return s
	},
}

// A removal deletes the job's hold records after every other directory of
// the job, whatever order the store deletes a prefix in (on S3, listing
// order: hold/ before merge/): a removal killed before its last step
// leaves the hold records, saying "remove", and nothing else but the
// lease, so the next process to take the job knows it was being deleted.
func TestRemoveJobDeletesHoldLast(t *testing.T) {
	for name, open := range holdStores {
		t.Run(name, func(t *testing.T) {
			s := open(t)
			ctx := t.Context()
			pd := manifest.Sum([]byte("plan whose removal is killed before its last step"))
			for _, k := range []string{"map/0/commit.json", "map/0/r0.arrow", "reduce/0/commit.json",
				"merge/0/00112233aabbccdd/0/0.arrow", "merge/1/8899aabbccddeeff/1/3.arrow", LeaseKey} {
				if _, err := s.Put(ctx, jobPrefix(pd)+k, strings.NewReader(k), objstore.PutOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			kill := errors.New("killed")
			broken := &faults.ErrorOnce{Store: s, Method: faults.DeletePrefix, Err: kill,
				Match: func(p string) bool { return p == jobPrefix(pd) }}
			if err := RemoveJob(ctx, broken, pd); !errors.Is(err, kill) {
				t.Fatalf("RemoveJob: %v, want the injected failure", err)
			}
			page, err := s.List(ctx, jobPrefix(pd), "", 1000)
			if err != nil {
				t.Fatal(err)
			}
			var left []string
			for _, o := range page.Objects {
				if k := strings.TrimPrefix(o.Key, jobPrefix(pd)); !strings.HasPrefix(k, "hold/") && k != LeaseKey {
					left = append(left, k)
				}
			}
			if len(left) != 0 || jobKeys(t, s, pd, "hold/") != 1 {
				t.Fatalf("before the hold records go, %v are left beside %d hold records", left, jobKeys(t, s, pd, "hold/"))
			}
			rec, _, _, err := currentHolder(ctx, s, pd)
			if err != nil || rec == nil || rec.Purpose != HoldRemove {
				t.Fatalf("the hold record left: %+v, %v; want one saying remove", rec, err)
			}
		})
	}
}

// Whether a holder on another machine is gone is judged by the store's
// clock alone (the age of its record against an object written now),
// never by this machine's: S3 times objects by its own clock. Through a
// store whose clock runs 10 minutes behind this machine's (a holder's
// record looked 10 minutes old at once, and a live holder was taken
// over) or ahead of it (a dead holder looked renewed for 10 more
// minutes), a holder that has just renewed is JOB_IN_USE, and one whose
// record has aged HoldStaleAfter by the store's clock is taken over. On
// the file store and on S3 (versitygw).
func TestHoldUnderClockSkew(t *testing.T) {
	for name, open := range holdStores {
		for _, shift := range []time.Duration{-10 * time.Minute, 10 * time.Minute} {
			t.Run(fmt.Sprintf("%s %v", name, shift), func(t *testing.T) {
				real := open(t)
				s := &faults.ClockSkew{Store: real, Shift: shift}
				ctx := t.Context()
				pd := manifest.Sum([]byte("plan held under clock skew " + shift.String()))
				putHold(t, real, pd, 1, HoldRun, farHolder)
				var inUse *JobInUseError
				if _, err := Acquire(ctx, s, pd, HoldRun); !errors.As(err, &inUse) || inUse.Local || inUse.Holder.Process.Host != "elsewhere" ||
					inUse.Age < 0 || inUse.Age >= HoldStaleAfter {
					t.Fatalf("a holder on another machine that renewed just now: %v, want JOB_IN_USE naming it", err)
				}
				if held, err := Holder(ctx, s, pd); err != nil || held == nil || held.Holder.Generation != 1 {
					t.Fatalf("Holder = %+v, %v; want the live holder", held, err)
				}
				if n := jobKeys(t, real, pd, "hold/"); n != 2 {
					t.Fatalf("%d keys under hold/, want the record and the clock probe", n)
				}
				// The probe is no activity of the job's.
				rec, err := real.Head(ctx, holdKey(pd, 1), "")
				if err != nil {
					t.Fatal(err)
				}
				if jobs, err := ListJobs(ctx, real); err != nil || len(jobs) != 1 || !jobs[0].Newest.Equal(rec.Modified) {
					t.Fatalf("ListJobs = %+v, %v; want the job, newest at its hold record's %v", jobs, err, rec.Modified)
				}

				// The holder dies: its record ages past HoldStaleAfter
				// by the store's clock.
				defer func(d time.Duration) { HoldStaleAfter = d }(HoldStaleAfter)
				HoldStaleAfter = 2 * time.Second
				putHold(t, real, pd, 2, HoldRun, farHolder)
				for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
					h, err := Acquire(ctx, s, pd, HoldRun)
					if err == nil {
						if h.Previous == nil || h.Previous.Generation != 2 || h.rec.Generation != 3 {
							t.Fatalf("took over from %+v as generation %d", h.Previous, h.rec.Generation)
						}
						h.Release()
						break
					}
					if !errors.As(err, &inUse) || inUse.Age >= HoldStaleAfter {
						t.Fatalf("a holder whose record is %v old by the store's clock: %v", inUse.Age, err)
					}
					if time.Now().After(deadline) {
						t.Fatalf("a holder silent for a minute by the store's clock was not taken over: %v", err)
					}
				}
			})
		}
	}
}

// TakeOver takes a job from a holder on another machine that renewed
// just now (an operator knows its machine crashed) and releases it for
// the next holder, carrying on a removal it displaces; a holder running
// on this machine is still JOB_IN_USE, and nothing is written.
func TestTakeOver(t *testing.T) {
	s := stagetest.Store(t)
	ctx := t.Context()
	pd := manifest.Sum([]byte("plan taken over by hand"))
	if d, err := TakeOver(ctx, s, pd); err != nil || d != nil {
		t.Fatalf("TakeOver of a job with no holder = %+v, %v", d, err)
	}
	for _, c := range []struct {
		gen     int
		purpose string
	}{{1, HoldRun}, {4, HoldRemove}} {
		gen, purpose := c.gen, c.purpose
		putHold(t, s, pd, gen, purpose, farHolder)
		if _, err := Acquire(ctx, s, pd, HoldRun); errcode.Of(err) != errcode.JobInUse {
			t.Fatalf("a holder on another machine that renewed just now: %v, want JOB_IN_USE", err)
		}
		d, err := TakeOver(ctx, s, pd)
		if err != nil || d == nil || !d.Live || d.Local || d.Holder.Generation != gen || d.Holder.Process.Host != "elsewhere" ||
			d.Age < 0 || d.Age >= HoldStaleAfter || d.Renewed.IsZero() {
			t.Fatalf("TakeOver of a live %s holder = %+v, %v", purpose, d, err)
		}
		h, err := Acquire(ctx, s, pd, HoldRun)
		if err != nil {
			t.Fatalf("after TakeOver: %v", err)
		}
		if p := h.Previous; p == nil || p.Generation != gen+1 || !p.Released || p.Purpose != purpose || h.unfinishedRemoval() != (purpose == HoldRemove) {
			t.Fatalf("after TakeOver of a %s holder the next holder follows %+v", purpose, p)
		}
		h.Release()
	}
	if runtime.GOOS != "linux" {
		return
	}
	h, err := Acquire(ctx, s, pd, HoldRun)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release()
	n := jobKeys(t, s, pd, "hold/")
	var inUse *JobInUseError
	if d, err := TakeOver(ctx, s, pd); !errors.As(err, &inUse) || !inUse.Local || d != nil || inUse.Holder.Generation != h.rec.Generation {
		t.Fatalf("TakeOver from a holder running on this machine = %+v, %v; want JOB_IN_USE naming it", d, err)
	}
	if got := jobKeys(t, s, pd, "hold/"); got != n || h.Lost() != nil {
		t.Fatalf("a refused TakeOver left %d hold keys, was %d; the holder lost its hold: %v", got, n, h.Lost())
	}
}

// rivalTake is a store on which another machine's process takes plan
// pd's job (its record at generation gen) just before the first
// conditional create of that generation reaches the store: a resume
// elsewhere that wins the race for the next generation.
type rivalTake struct {
	objstore.Store
	t     *testing.T
	pd    manifest.Digest
	gen   int
	rival procid.ID
	done  atomic.Bool
}

func (r *rivalTake) Put(ctx context.Context, key string, body io.Reader, opts objstore.PutOptions) (objstore.Version, error) {
	if key == holdKey(r.pd, r.gen) && opts.IfNoneMatch && !r.done.Swap(true) {
		putHold(r.t, r.Store, r.pd, r.gen, HoldRun, r.rival)
	}
	return r.Store.Put(ctx, key, body, opts)
}

// TakeOver takes the job from the holder it found, and only from it: a
// holder that took the job meanwhile (another machine's resume won the
// race for the next generation) has just started and is JOB_IN_USE, as
// it would be for any resume; it is not taken over too, which would run
// the job in two places.
func TestTakeOverLosesRace(t *testing.T) {
	s := stagetest.Store(t)
	ctx := t.Context()
	pd := manifest.Sum([]byte("plan taken over by hand while another takes it"))
	dead := procid.ID{Host: "crashed", PID: 4242, Machine: "another-boot/pid:[1]", Start: 1}
	rival := procid.ID{Host: "elsewhere", PID: 777, Machine: "a-third-boot/pid:[1]", Start: 1}
	putHold(t, s, pd, 1, HoldRun, dead)
	racing := &rivalTake{Store: s, t: t, pd: pd, gen: 2, rival: rival}
	var inUse *JobInUseError
	d, err := TakeOver(ctx, racing, pd)
	if !racing.done.Load() {
		t.Fatal("the rival's take was not injected")
	}
	if !errors.As(err, &inUse) || d != nil || inUse.Holder.Generation != 2 || inUse.Holder.Process.Host != "elsewhere" {
		t.Fatalf("TakeOver that lost the race to a new holder = %+v, %v; want JOB_IN_USE naming the new holder", d, err)
	}
	if n := jobKeys(t, s, pd, "hold/"); n != 3 { // generations 1 and 2, and the clock probe
		t.Fatalf("%d keys under hold/, want the two records and the clock probe: the new holder was taken over", n)
	}
}

// TakeOver writes nothing when there is no live holder to take the job
// from: a job with no record (none yet, finished and removed, or a plan
// mistyped) gains none, and a holder that released the job or is gone
// is left for the next Acquire, which takes the job from it as it would
// anyway (carrying on a removal it did not finish).
func TestTakeOverWritesNothingWithoutLiveHolder(t *testing.T) {
	s := stagetest.Store(t)
	ctx := t.Context()
	pd := manifest.Sum([]byte("plan with no live holder to take over"))
	if d, err := TakeOver(ctx, s, pd); err != nil || d != nil {
		t.Fatalf("TakeOver of a job with no holder = %+v, %v", d, err)
	}
	if page, err := s.List(ctx, jobPrefix(pd), "", 10); err != nil || len(page.Objects) != 0 {
		t.Fatalf("TakeOver of a job with no holder left %+v, %v", page.Objects, err)
	}
	// A process of this machine that has ended: this one's PID, started
	// at another time.
	gone := procid.Self()
	gone.Start++
	if alive, known := gone.Alive(); alive || !known {
		t.Skipf("this machine cannot look processes up (%+v)", gone)
	}
	putHold(t, s, pd, 1, HoldRemove, gone)
	d, err := TakeOver(ctx, s, pd)
	if err != nil || d == nil || d.Live || !d.Local || d.Holder.Generation != 1 {
		t.Fatalf("TakeOver of a holder that is gone = %+v, %v; want it named, not live", d, err)
	}
	if _, err := s.Head(ctx, holdKey(pd, 2), ""); !objstore.IsNotExist(err) {
		t.Fatalf("TakeOver of a holder that is gone wrote generation 2: %v", err)
	}
	h, err := Acquire(ctx, s, pd, HoldRun)
	if err != nil {
		t.Fatal(err)
	}
	if p := h.Previous; p == nil || p.Generation != 1 || !h.unfinishedRemoval() {
		t.Fatalf("the next holder follows %+v, want the removal that is gone", p)
	}
	h.Release()
	if d, err := TakeOver(ctx, s, pd); err != nil || d != nil {
		t.Fatalf("TakeOver of a released job = %+v, %v", d, err)
	}
	if _, err := s.Head(ctx, holdKey(pd, 3), ""); !objstore.IsNotExist(err) {
		t.Fatalf("TakeOver of a released job wrote generation 3: %v", err)
	}
}

// takenWhileRemoving is a store on which plan pd's job is taken over by
// another machine's process (its record at generation gen) while a
// removal deletes the job's map files: a take-over by hand (verify
// --resume --take-over) of a removal that still ran, which learns of it
// only at its next renewal.
type takenWhileRemoving struct {
	objstore.Store
	t     *testing.T
	pd    manifest.Digest
	gen   int
	other procid.ID
}

func (r *takenWhileRemoving) DeletePrefix(ctx context.Context, prefix string) error {
	if prefix == jobPrefix(r.pd)+"map/" {
		putHold(r.t, r.Store, r.pd, r.gen, HoldRun, r.other)
	}
	return r.Store.(objstore.Deleter).DeletePrefix(ctx, prefix)
}

// A removal whose job was taken over before its last step (by hand,
// before its next renewal could tell it) does not delete the hold
// records: they are the new holder's too, and a job without them is
// taken by the next process that looks, beside the one running it. It
// stops with JOB_IN_USE naming the new holder.
func TestRemoveJobTakenOverKeepsHold(t *testing.T) {
	s := stagetest.Store(t)
	ctx := t.Context()
	pd := manifest.Sum([]byte("plan whose removal is taken over by hand"))
	for _, k := range []string{"map/0/commit.json", "reduce/0/commit.json"} {
		if _, err := s.Put(ctx, jobPrefix(pd)+k, strings.NewReader(k), objstore.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var inUse *JobInUseError
	err := RemoveJob(ctx, &takenWhileRemoving{Store: s, t: t, pd: pd, gen: 2, other: farHolder}, pd)
	if !errors.As(err, &inUse) || !inUse.TakenOver || inUse.Holder.Generation != 2 || inUse.Holder.Process.Host != "elsewhere" {
		t.Fatalf("RemoveJob taken over before its last step: %v, want JOB_IN_USE naming the new holder", err)
	}
	if _, err := s.Head(ctx, holdKey(pd, 2), ""); err != nil {
		t.Fatalf("the new holder's record: %v", err)
	}
}

// A holder whose machine was suspended (its monotonic clock, and with it
// every timer, stood still while the wall clock ran on) gives the job up
// once it wakes and sees, by the wall clock, that its last renewal is
// older than it may be: another machine may have taken the job over
// meanwhile.
func TestHoldGivenUpAfterSuspend(t *testing.T) {
	s, res := synth(t)
	defer func(c time.Duration, now func() time.Time) { holdWallCheck, holdWallNow = c, now }(holdWallCheck, holdWallNow)
	holdWallCheck = 10 * time.Millisecond
	var slept atomic.Int64
	holdWallNow = func() time.Time { return time.Now().Round(0).Add(time.Duration(slept.Load())) }
	h, err := Acquire(t.Context(), s, planOnly(t, s, res.Root, "suspend"), HoldRun)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release()
	time.Sleep(5 * holdWallCheck)
	if err := h.Lost(); err != nil {
		t.Fatalf("hold lost before any suspend: %v", err)
	}
	slept.Store(int64(HoldStaleAfter)) // the machine slept 5 minutes
	select {
	case <-h.Context().Done():
	case <-time.After(time.Minute):
		t.Fatal("a holder woken from a 5-minute suspend kept the job")
	}
	if err := h.Lost(); errcode.Of(err) != errcode.StoreUnavailable {
		t.Fatalf("Lost() = %v, want STORE_UNAVAILABLE", err)
	}
}

// A holder suspended while a renewal hung on a silent server (the
// renewal's deadline is on the monotonic clock, which stood still during
// the suspend) gives the job up once it wakes and its wall clock shows
// the last renewal too old, not when the renewal's deadline passes
// minutes later: the wall clock bounds the renewal too.
func TestHoldGivenUpAfterSuspendDuringRenewal(t *testing.T) {
	s, res := synth(t)
	defer func(c time.Duration, now func() time.Time, r time.Duration) {
		holdWallCheck, holdWallNow, HoldRenewInterval = c, now, r
	}(holdWallCheck, holdWallNow, HoldRenewInterval)
	holdWallCheck, HoldRenewInterval = 10*time.Millisecond, 50*time.Millisecond
	var slept atomic.Int64
	holdWallNow = func() time.Time { return time.Now().Round(0).Add(time.Duration(slept.Load())) }
	o := &holdOutage{Store: s, hang: true}
	ctx, cancel := context.WithCancel(t.Context())
	h, err := Acquire(ctx, o, planOnly(t, s, res.Root, "suspend-renewing"), HoldRun)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release()
	defer o.down.Store(false)
	defer cancel() // first: a renewal still hanging ends with it
	o.down.Store(true)
	for deadline := time.Now().Add(time.Minute); o.hung.Load() == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no renewal began")
		}
	}
	slept.Store(int64(HoldStaleAfter)) // the machine slept 5 minutes during the renewal
	select {
	case <-h.Context().Done():
	case <-time.After(time.Minute):
		t.Fatalf("a holder woken from a 5-minute suspend during a renewal kept the job (its renewal's deadline is %s after its last renewal)", holdExpiry())
	}
	if err := h.Lost(); errcode.Of(err) != errcode.StoreUnavailable {
		t.Fatalf("Lost() = %v, want STORE_UNAVAILABLE", err)
	}
}

// Release does not wait for a renewal that hangs on a silent store (up
// to holdExpiry, minutes): it cuts it, and writes the released record
// once the store answers again. A verify that had finished waited up to
// 4 minutes at its end.
func TestReleaseCutsHungRenewal(t *testing.T) {
	s, res := synth(t)
	ctx := t.Context()
	defer func(r, st time.Duration) { HoldRenewInterval, HoldStaleAfter = r, st }(HoldRenewInterval, HoldStaleAfter)
	HoldRenewInterval, HoldStaleAfter = 50*time.Millisecond, 10*time.Minute
	o := &holdOutage{Store: s, hang: true}
	pd := planOnly(t, s, res.Root, "release-hung")
	h, err := Acquire(ctx, o, pd, HoldRun)
	if err != nil {
		t.Fatal(err)
	}
	o.down.Store(true)
	for deadline := time.Now().Add(time.Minute); o.hung.Load() == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no renewal hung")
		}
	}
	o.down.Store(false) // the hung renewal stays hung; new requests go through
	released := make(chan struct{})
	go func() { h.Release(); close(released) }()
	select {
	case <-released:
	case <-time.After(time.Minute):
		t.Fatalf("Release waited for a hung renewal (it ends %s after the last renewal)", holdExpiry())
	}
	rec, _, _, err := currentHolder(ctx, s, pd)
	if err != nil || rec == nil || !rec.Released {
		t.Fatalf("after Release: record %+v (%v), want it released", rec, err)
	}
}

// holdRecordKey selects a job's hold records, not its clock probe.
func holdRecordKey(key string) bool {
	return strings.Contains(key, "/hold/") && !strings.HasSuffix(key, "/clock")
}

// waitHeld waits for a renewal that LatePut holds back.
func waitHeld(t *testing.T, held <-chan struct{}) {
	t.Helper()
	select {
	case <-held:
	case <-time.After(time.Minute):
		t.Fatal("no renewal hung")
	}
}

// A renewal that Release cut may still be stored after Release wrote its
// released record (the server had it): the job must stay released, not
// look held again by this process until its record goes stale.
func TestReleasedRecordOutlivesCutRenewal(t *testing.T) {
	s, res := synth(t)
	ctx := t.Context()
	defer func(r, st time.Duration) { HoldRenewInterval, HoldStaleAfter = r, st }(HoldRenewInterval, HoldStaleAfter)
	HoldRenewInterval, HoldStaleAfter = 50*time.Millisecond, 10*time.Minute
	o := &faults.LatePut{Store: s, Match: holdRecordKey}
	pd := planOnly(t, s, res.Root, "release-late")
	h, err := Acquire(ctx, o, pd, HoldRun)
	if err != nil {
		t.Fatal(err)
	}
	waitHeld(t, o.Arm())
	h.Release()
	// The cut renewal, stored after the released record.
	if landed, err := o.Land(ctx); !landed || err != nil {
		t.Fatalf("Land = %v, %v", landed, err)
	}
	rec, _, _, err := currentHolder(ctx, s, pd)
	if err != nil || rec == nil || !rec.Released {
		t.Fatalf("after Release and the cut renewal's late write: record %+v (%v), want it released", rec, err)
	}
	if inUse, err := Holder(ctx, s, pd); err != nil || inUse != nil {
		t.Fatalf("Holder after Release = %v, %v; want none", inUse, err)
	}
	h2, err := Acquire(ctx, s, pd, HoldRun)
	if err != nil {
		t.Fatalf("Acquire after Release: %v", err)
	}
	h2.Release()
}

// renewalHeldWhileRemoving holds back the next renewal of a removal's
// hold record (LatePut) when the removal begins to delete the job's
// files, and lets the removal go on only once that renewal hangs: the
// removal then ends with it in flight.
type renewalHeldWhileRemoving struct {
	*faults.LatePut
	t    *testing.T
	once sync.Once
}

func (r *renewalHeldWhileRemoving) DeletePrefix(ctx context.Context, prefix string) error {
	r.once.Do(func() { waitHeld(r.t, r.Arm()) })
	return r.LatePut.DeletePrefix(ctx, prefix)
}

// A renewal that a removal cut at its end may still be stored after the
// removal deleted the job (the server had it): it must not leave the
// deleted job looking held by the removal, which the next process (on
// another machine) waited 5 minutes for before taking it for an
// unfinished removal. The removal leaves a released record at the next
// generation instead, above the late one.
func TestRemoveJobOutlivesCutRenewal(t *testing.T) {
	s := stagetest.Store(t)
	ctx := t.Context()
	defer func(r, st time.Duration) { HoldRenewInterval, HoldStaleAfter = r, st }(HoldRenewInterval, HoldStaleAfter)
	HoldRenewInterval, HoldStaleAfter = 50*time.Millisecond, 10*time.Minute
	pd := manifest.Sum([]byte("plan whose removal cuts a renewal that lands late"))
	for _, k := range []string{"map/0/commit.json", "map/0/r0.arrow", "reduce/0/commit.json", LeaseKey} {
		if _, err := s.Put(ctx, jobPrefix(pd)+k, strings.NewReader(k), objstore.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	o := &faults.LatePut{Store: s, Match: holdRecordKey}
	if err := RemoveJob(ctx, &renewalHeldWhileRemoving{LatePut: o, t: t}, pd); err != nil {
		t.Fatalf("RemoveJob: %v", err)
	}
	// The cut renewal, stored after the removal.
	if landed, err := o.Land(ctx); !landed || err != nil {
		t.Fatalf("Land = %v, %v", landed, err)
	}
	if n := jobKeys(t, s, pd, "map/") + jobKeys(t, s, pd, "reduce/"); n != 0 {
		t.Fatalf("the removal left %d task files", n)
	}
	rec, gen, _, err := currentHolder(ctx, s, pd)
	if err != nil || rec == nil || !rec.Released || rec.Purpose != HoldRemove || gen != 2 {
		t.Fatalf("after the removal and its cut renewal's late write: record %+v of generation %d (%v), want a released removal at generation 2", rec, gen, err)
	}
	if inUse, err := Holder(ctx, s, pd); err != nil || inUse != nil {
		t.Fatalf("Holder after the removal = %v, %v; want none", inUse, err)
	}
	h, err := Acquire(ctx, s, pd, HoldRun)
	if err != nil {
		t.Fatalf("Acquire after the removal: %v", err)
	}
	if !h.unfinishedRemoval() {
		t.Fatalf("the next holder follows %+v; want it to delete what is left", h.Previous)
	}
	h.Release()
}

// releaseRace decorates the store of a removal whose renewal is cut at
// its end (renewalHeldWhileRemoving): the conditional create of its
// released record at the next generation meets, with rival, a record a
// take-over by hand created there first, or otherwise goes through and
// answers the precondition failure an SDK's retry of it gets.
type releaseRace struct {
	*renewalHeldWhileRemoving
	pd    manifest.Digest
	rival bool
}

func (r *releaseRace) Put(ctx context.Context, key string, body io.Reader, opts objstore.PutOptions) (objstore.Version, error) {
	if !opts.IfNoneMatch || key != holdKey(r.pd, 2) {
		return r.renewalHeldWhileRemoving.Put(ctx, key, body, opts)
	}
	if r.rival {
		putHold(r.t, r.LatePut.Store, r.pd, 2, HoldRun, procid.ID{Host: "elsewhere", PID: 4242, Machine: "another-boot/pid:[1]"})
		return r.renewalHeldWhileRemoving.Put(ctx, key, body, opts)
	}
	if _, err := r.renewalHeldWhileRemoving.Put(ctx, key, body, opts); err != nil {
		return "", err
	}
	return "", fmt.Errorf("put %s, sent again: %w", key, objstore.ErrPreconditionFailed)
}

// A removal that keeps its hold records, released at the next
// generation, because its end cut a renewal: a process that took that
// generation first (verify --resume --take-over) holds the job, and the
// removal is JOB_IN_USE naming it, as when the take-over came before the
// removal's last look (store prune-jobs prints the job as kept and goes
// on); the removal's own create, whose answer was lost, is its release.
// Both were the precondition failure of the create, which stopped a
// prune-jobs: the removal compared the record it found with the
// generation it had raised for its release.
func TestRemoveJobReleaseMeetsTakeOver(t *testing.T) {
	s := stagetest.Store(t)
	ctx := t.Context()
	defer func(r, st time.Duration) { HoldRenewInterval, HoldStaleAfter = r, st }(HoldRenewInterval, HoldStaleAfter)
	HoldRenewInterval, HoldStaleAfter = 50*time.Millisecond, 10*time.Minute
	for _, rival := range []bool{true, false} {
		pd := manifest.Sum(fmt.Appendf(nil, "plan whose removal's release meets a take-over: %v", rival))
		for _, k := range []string{"map/0/commit.json", "reduce/0/commit.json", LeaseKey} {
			if _, err := s.Put(ctx, jobPrefix(pd)+k, strings.NewReader(k), objstore.PutOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		o := &faults.LatePut{Store: s, Match: holdRecordKey}
		err := RemoveJob(ctx, &releaseRace{renewalHeldWhileRemoving: &renewalHeldWhileRemoving{LatePut: o, t: t}, pd: pd, rival: rival}, pd)
		rec, gen, _, herr := currentHolder(ctx, s, pd)
		if herr != nil || rec == nil || gen != 2 {
			t.Fatalf("rival %v: record %+v of generation %d (%v)", rival, rec, gen, herr)
		}
		if rival {
			var inUse *JobInUseError
			if !errors.As(err, &inUse) || !inUse.TakenOver || inUse.Holder.Process.PID != 4242 {
				t.Fatalf("RemoveJob whose released record's generation another process took: %v, want JOB_IN_USE naming it", err)
			}
			if rec.Released || rec.Process.PID != 4242 {
				t.Fatalf("the taker's record: %+v", rec)
			}
			continue
		}
		if err != nil {
			t.Fatalf("RemoveJob whose release's answer was lost: %v", err)
		}
		if !rec.Released || rec.Purpose != HoldRemove {
			t.Fatalf("the removal's record: %+v, want its released removal", rec)
		}
	}
}
