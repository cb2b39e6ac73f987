//go:build unix

package main

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math"
	"math/bits"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/anishathalye/porcupine"

	"github.com/shardproof/shardproof/internal/errcode"
)

// gateModel is a sequential specification of the part of the gate the
// chaos test drives, written from raftgate's package documentation and
// DESIGN.md rather than from its code: aliases with generations, history
// and a rollback window; releases VERIFIED → PUBLISHED → RETIRED, or
// INVALID for good; the two fences; a run pinning the alias's
// (generation, root), its ranks' attestations and barrier (an attestation
// of another root or shard, or a short barrier timeout passing, fails the
// run for good), reassignments by epoch that may change the world size,
// checkpoint steps admitted only through an open barrier, never
// backwards, and prune deleting failed runs. porcupine checks a recorded
// history against it: a history is linearizable if some order of its
// operations, each placed between its call and its return, is a sequence
// the model accepts.
//
// The chaos cluster runs at the newest command-schema version, and the
// model holds at every version from 1: its attestations carry no epoch
// (version 2 checks one first), and the one register it sees refused,
// NOT_VERIFIED for a VERIFIED report of an INVALID release, answers alike
// at every version, which differ only in whether a pruned release took
// its shard list back, and no operation observes shard lists.
//
// Releases are registered VERIFIED (some before the history starts, more
// during it, as retirement uses them up), root i checked at both fences
// up to chaosWM(i). A recheck with no hits raises a root's watermark of
// one fence; one with a hit makes the release INVALID for good and closes
// its open permits. A permit is bound to its root's watermarks when
// issued; a fence advance past its bound closes it, unless its root was
// already rechecked at or above the new fence (it stays open, re-bound);
// a recheck, or a newer report, of its root reopens it, re-bound, once
// the root satisfies both fences again. The model keeps the permits that can still be observed:
// those of the aliases' current generations and of each client's latest
// run.

// modelOp is one operation's input.
type modelOp struct {
	kind   string // register, recheck, publish, rollback, fence, createRun, readAlias, readFences, attest, reassign, checkpoint, prune
	alias  int    // index into chaosAliases
	root   int    // index into the test's roots
	expect uint64 // expected generation
	retain int    // publish: the rollback window of a new alias
	fence  int    // 0 tombstone, 1 benchmark
	value  uint64 // fence and recheck: the value; checkpoint: the step
	// retried: an attempt after an INDETERMINATE one, with the same
	// arguments. Each attempt is an operation of its own: an
	// indeterminate one has an unknown answer and may or may not have
	// taken effect, and the gate answers a repeat of an applied command
	// as the model's step does (the original result, a no-op).
	retried bool
	// run names a createRun's or attest's run; rank is an attest's rank
	// or the rank a reassign resets; prev is the run a createRun
	// supersedes (its client's previous run, which no later operation
	// names; -1 for none); world is a reassign's new world size.
	run, rank, prev, world int
	// stray: an attest that also names the release's one shard from a
	// rank other than 0, outside its assignment.
	stray bool
	// short: a createRun with a barrier timeout short enough to pass
	// while the test runs.
	short bool
	// hits: a recheck that found a hit.
	hits bool
	// invalid: a register whose report's verdict is INVALID.
	invalid bool
	// callMs and retMs bound, in wall-clock milliseconds, the time the
	// gate stamped the command with if it took effect (math.MaxInt64:
	// no answer came). A run's barrier deadline is its createRun's or
	// last reassignment's stamp plus the timeout.
	callMs, retMs int64
}

// modelOut is one operation's answer. unknown: no attempt of it got a
// definite answer before the history ended (it may or may not have taken
// effect).
type modelOut struct {
	unknown bool
	code    errcode.Code // "" for success
	gen     uint64       // publish, rollback, createRun, readAlias
	root    int          // idem
	fences  [2]uint64    // fence, readFences
	state   byte         // register: the release's state after it
	// attest, reassign, checkpoint: the run's epoch, its attested ranks
	// and whether its barrier is open; checkpoint: its last admitted step
	// and how many steps were admitted.
	epoch    uint64
	world    int
	attested int
	open     bool
	step     int64 // -1 before the first checkpoint
	ckpts    int64
}

// modelAlias is one generation of an alias, linked to the one before: a
// persistent list, so states share their histories.
type modelAlias struct {
	gen    uint64
	root   int
	kind   byte // 'p' publish, 'r' rollback
	retain int
	prev   *modelAlias
}

// entry returns generation g of the alias, or nil.
func (a *modelAlias) entry(g uint64) *modelAlias {
	for ; a != nil; a = a.prev {
		if a.gen == g {
			return a
		}
		if a.gen < g {
			return nil
		}
	}
	return nil
}

// inWindow reports whether root is among the last retain generations.
func (a *modelAlias) inWindow(root int) bool {
	n := a.retain
	for e := a; e != nil && n > 0; e, n = e.prev, n-1 {
		if e.root == root {
			return true
		}
	}
	return false
}

type modelState struct {
	fences  [2]uint64
	rels    string // one letter per root: U unknown, V verified, P published, R retired, I invalid
	aliases []*modelAlias
	// aperms are the permits of the aliases' current generations.
	aperms []modelPermit
	// wms are the roots whose watermarks a recheck raised above
	// chaosWM, sorted by root.
	wms []rootWM
	// runs are the live runs, sorted by id: each client's latest (a
	// createRun names the run it supersedes, which no later operation
	// refers to), so the state stays small and does not depend on the
	// order concurrent runs were created in.
	runs []modelRun
}

// modelPermit is a permit: the watermarks it is bound to, and whether it
// is open. A fence advance past its bound closes it unless its root
// satisfies the new fences; a recheck or a newer report of its root
// reopens it, re-bound, when the root satisfies the fences again.
type modelPermit struct {
	bound [2]uint64
	open  bool
}

// rootWM is a root's (tombstone, benchmark) watermarks.
type rootWM struct {
	root int
	wm   [2]uint64
}

// modelRun is a run: what it pinned, its world size and which of its
// ranks attested. The test's releases have one shard, which every world
// size assigns to rank 0, so a reassignment keeps the attestations of the
// ranks that remain and are not reset.
type modelRun struct {
	id, gen, root int
	world         int
	attested      uint64 // bit per rank
	epoch         uint64
	// reset and resetWorld are the parameters of the reassignment that
	// made epoch (reset -1 before the first): a repeat with the same
	// parameters is its retry.
	reset, resetWorld int
	// failed: an attestation of another root or of a shard outside the
	// rank's assignment failed the run (and released its permit); every
	// later command on it is RUN_FAILED. endHi bounds from above the
	// stamp it failed at: the answer of the operation that failed it or
	// found it failed (math.MaxInt64 if none came).
	failed bool
	endHi  int64
	// pruned: a prune deleted the failed run; its ID answers RUN_PRUNED
	// to every command, createRun included.
	pruned bool
	perm   modelPermit
	// timed: the run's barrier timeout is short. Its deadline lies in
	// [dlLo, dlHi] (wall-clock milliseconds): the stamp of the command
	// that set it is only known to lie between that operation's call and
	// answer. While the barrier is closed, a command that may come after
	// the deadline may find the run failed by the leader's sweep; an
	// attestation that surely comes after it must find it timed out.
	timed      bool
	dlLo, dlHi int64
	// step is the last admitted checkpoint step (-1 before the first),
	// ckpts the number of admissions that raised it.
	step, ckpts int64
}

// summary is what the gate answers about r: its epoch, attested ranks
// and barrier.
func (r modelRun) summary() modelOut {
	n := bits.OnesCount64(r.attested)
	return modelOut{epoch: r.epoch, world: r.world, attested: n, open: n == r.world, step: r.step, ckpts: r.ckpts}
}

func (s modelState) run(id int) (int, bool) {
	return slices.BinarySearchFunc(s.runs, id, func(r modelRun, id int) int { return cmp.Compare(r.id, id) })
}

// liveRun finds the run a command names, as the gate does: UNKNOWN_RUN,
// RUN_PRUNED or RUN_FAILED, or its index.
func (s modelState) liveRun(id int) (int, errcode.Code) {
	i, ok := s.run(id)
	switch {
	case !ok:
		return 0, errcode.UnknownRun
	case s.runs[i].pruned:
		return 0, errcode.RunPruned
	case s.runs[i].failed:
		return 0, errcode.RunFailed
	}
	return i, ""
}

func newModelState(roots, pool, aliases int) modelState {
	return modelState{rels: strings.Repeat("V", roots) + strings.Repeat("U", pool-roots), aliases: make([]*modelAlias, aliases), aperms: make([]modelPermit, aliases)}
}

// satisfies reports whether root's watermarks are at or above both
// fences: it may be published or rolled back to, and the permits bound to
// it are open.
func (s modelState) satisfies(root int) bool {
	w := s.wm(root)
	return w[0] >= s.fences[0] && w[1] >= s.fences[1]
}

// wm is root's (tombstone, benchmark) watermarks: what its reports say,
// raised by rechecks.
func (s modelState) wm(root int) [2]uint64 {
	if i, ok := slices.BinarySearchFunc(s.wms, root, func(r rootWM, root int) int { return cmp.Compare(r.root, root) }); ok {
		return s.wms[i].wm
	}
	return [2]uint64{chaosWM(root), chaosWM(root)}
}

// invalidate is raftgate's invalidate: root is INVALID and every open
// permit bound to it closes.
func (s modelState) invalidate(root int) modelState {
	s = s.withRel(root, 'I')
	s.aperms = slices.Clone(s.aperms)
	for a, al := range s.aliases {
		if al != nil && al.root == root {
			s.aperms[a].open = false
		}
	}
	s.runs = slices.Clone(s.runs)
	for i := range s.runs {
		if s.runs[i].root == root {
			s.runs[i].perm.open = false
		}
	}
	return s
}

// permit is a new open permit bound to root's watermarks.
func (s modelState) permit(root int) modelPermit { return modelPermit{bound: s.wm(root), open: true} }

// renew is raftgate's renew: when root satisfies the fences, the closed
// permits bound to it (of the aliases' current generations and of live
// runs) reopen, re-bound to its watermarks.
func (s modelState) renew(root int) modelState {
	if s.rels[root] == 'I' || !s.satisfies(root) {
		return s
	}
	p := s.permit(root)
	for a, al := range s.aliases {
		if al != nil && al.root == root && !s.aperms[a].open {
			s.aperms = slices.Clone(s.aperms)
			s.aperms[a] = p
		}
	}
	for i, r := range s.runs {
		if r.root == root && !r.failed && !r.perm.open {
			s.runs = slices.Clone(s.runs)
			s.runs[i].perm = p
		}
	}
	return s
}

func (s modelState) withRel(root int, state byte) modelState {
	b := []byte(s.rels)
	b[root] = state
	s.rels = string(b)
	return s
}

// advance is raftgate's advance: a new generation, the root PUBLISHED, and
// the generation that left the window may retire its root.
func (s modelState) advance(a int, kind byte, root, retain int) (modelState, *modelAlias) {
	old := s.aliases[a]
	e := &modelAlias{gen: 1, root: root, kind: kind, retain: retain}
	if old != nil {
		e.gen, e.retain, e.prev = old.gen+1, old.retain, old
	}
	s.aliases = append([]*modelAlias(nil), s.aliases...)
	s.aliases[a] = e
	s.aperms = slices.Clone(s.aperms)
	s.aperms[a] = s.permit(root)
	s = s.withRel(root, 'P')
	if out := e.entry(e.gen - uint64(e.retain)); out != nil && s.rels[out.root] == 'P' {
		kept := false
		for _, al := range s.aliases {
			if al != nil && al.inWindow(out.root) {
				kept = true
			}
		}
		if !kept {
			s = s.withRel(out.root, 'R')
		}
	}
	return s, e
}

// retried is raftgate's idempotence rule for publish and rollback with an
// expected generation the alias has passed.
func retried(al *modelAlias, kind byte, root int, expect uint64) (ok bool, gen uint64, code errcode.Code) {
	h := al.entry(expect + 1)
	if h.root == root && h.kind == kind {
		return true, h.gen, ""
	}
	if h.gen == al.gen {
		return false, 0, errcode.PublishConflict
	}
	return false, 0, errcode.GenerationConflict
}

// step applies op to s and returns the new state and the answer the gate
// must give.
func (s modelState) step(op modelOp) (modelState, modelOut) {
	fail := func(c errcode.Code) (modelState, modelOut) { return s, modelOut{code: c} }
	switch op.kind {
	case "register":
		// Every register of the test carries a report not seen before:
		// an INVALID one makes the release INVALID for good, whatever it
		// was, and closes its permits; with a VERIFIED one a new release
		// becomes VERIFIED and a known one renews its permits.
		if op.invalid {
			s = s.invalidate(op.root)
			return s, modelOut{state: 'I'}
		}
		switch s.rels[op.root] {
		case 'U':
			s = s.withRel(op.root, 'V')
		case 'I':
			return fail(errcode.NotVerified) // a VERIFIED report does not undo INVALID
		default:
			s = s.renew(op.root)
		}
		return s, modelOut{state: s.rels[op.root]}
	case "recheck":
		// A recheck at op.value of fence op.fence. With a hit the
		// release becomes INVALID for good and its open permits close.
		switch {
		case s.rels[op.root] == 'U':
			return fail(errcode.UnknownRelease)
		case op.value < s.fences[op.fence]:
			return fail(errcode.FenceBehind)
		case s.rels[op.root] == 'I':
			return fail(errcode.NotVerified)
		case op.hits:
			return s.invalidate(op.root), modelOut{code: []errcode.Code{errcode.TombstoneHit, errcode.BenchmarkHit}[op.fence]}
		}
		if w := s.wm(op.root); op.value > w[op.fence] {
			w[op.fence] = op.value
			i, ok := slices.BinarySearchFunc(s.wms, op.root, func(r rootWM, root int) int { return cmp.Compare(r.root, root) })
			s.wms = slices.Clone(s.wms)
			if ok {
				s.wms[i].wm = w
			} else {
				s.wms = slices.Insert(s.wms, i, rootWM{op.root, w})
			}
		}
		return s.renew(op.root), modelOut{state: s.rels[op.root]}
	case "publish", "rollback":
		kind := byte('p')
		if op.kind == "rollback" {
			kind = 'r'
		}
		al := s.aliases[op.alias]
		if al == nil {
			if op.kind == "rollback" || op.expect != 0 {
				return fail(errcode.UnknownAlias)
			}
		} else {
			if op.expect < al.gen {
				ok, gen, code := retried(al, kind, op.root, op.expect)
				if !ok {
					return fail(code)
				}
				return s, modelOut{gen: gen, root: op.root}
			}
			if op.expect != al.gen {
				return fail(errcode.GenerationConflict)
			}
		}
		if kind == 'p' {
			switch s.rels[op.root] {
			case 'U':
				return fail(errcode.UnknownRelease)
			case 'R', 'I':
				return fail(errcode.NotVerified)
			}
			if !s.satisfies(op.root) {
				return fail(errcode.FenceBehind)
			}
		} else if op.root == al.root || !al.inWindow(op.root) || s.rels[op.root] != 'P' || !s.satisfies(op.root) {
			return fail(errcode.RollbackIneligible)
		}
		ns, e := s.advance(op.alias, kind, op.root, op.retain)
		return ns, modelOut{gen: e.gen, root: e.root}
	case "fence":
		cur := s.fences[op.fence]
		if op.value < cur {
			return fail(errcode.FenceRegression)
		}
		if op.value > cur {
			// Every open permit bound below the new value closes,
			// unless its root was already rechecked at or above it: it
			// stays open, re-bound to the root's watermarks.
			s.fences[op.fence] = op.value
			pass := func(p *modelPermit, root int) {
				switch {
				case !p.open || p.bound[op.fence] >= op.value:
				case s.rels[root] != 'I' && s.satisfies(root):
					*p = s.permit(root)
				default:
					p.open = false
				}
			}
			s.aperms = slices.Clone(s.aperms)
			for a := range s.aperms {
				if s.aliases[a] != nil {
					pass(&s.aperms[a], s.aliases[a].root)
				}
			}
			s.runs = slices.Clone(s.runs)
			for i := range s.runs {
				pass(&s.runs[i].perm, s.runs[i].root)
			}
		}
		return s, modelOut{fences: s.fences}
	case "createRun", "readAlias":
		if op.kind == "createRun" {
			// The same run again returns what it pinned, or, once
			// pruned, RUN_PRUNED: never a run made anew.
			if i, ok := s.run(op.run); ok {
				if s.runs[i].pruned {
					return fail(errcode.RunPruned)
				}
				return s, modelOut{gen: uint64(s.runs[i].gen), root: s.runs[i].root}
			}
		}
		al := s.aliases[op.alias]
		if al == nil {
			return fail(errcode.UnknownAlias)
		}
		if op.kind == "createRun" {
			if !s.aperms[op.alias].open {
				return fail(errcode.PermitClosed) // the alias generation's permit
			}
			runs := slices.DeleteFunc(slices.Clone(s.runs), func(r modelRun) bool { return r.id == op.prev })
			nr := modelRun{id: op.run, gen: int(al.gen), root: al.root, world: chaosWorld, reset: -1, step: -1, perm: s.permit(al.root), timed: op.short}
			if nr.timed {
				nr.dlLo, nr.dlHi = op.deadline()
			}
			s.runs = append(runs, nr)
			slices.SortFunc(s.runs, func(a, b modelRun) int { return cmp.Compare(a.id, b.id) })
		}
		return s, modelOut{gen: al.gen, root: al.root}
	case "attest":
		// An attestation of the run's root and the rank's assigned
		// shards counts the rank, once; one of another root or with a
		// shard outside the assignment fails the run.
		// In the gate's order from command-schema version 2 (the
		// deadline, in outcomes, then the root, then the rank): a rank
		// outside the run is BAD_INPUT only once its root is the run's.
		i, code := s.liveRun(op.run)
		if code != "" {
			return fail(code)
		}
		failRun := func(code errcode.Code) (modelState, modelOut) {
			s.runs = slices.Clone(s.runs)
			s.runs[i].failed, s.runs[i].perm.open, s.runs[i].endHi = true, false, op.retMs
			return s, modelOut{code: code}
		}
		if op.root != s.runs[i].root {
			return failRun(errcode.RootMismatch)
		}
		if op.rank >= s.runs[i].world {
			return fail(errcode.BadInput)
		}
		if op.stray {
			return failRun(errcode.ShardNotAssigned)
		}
		if s.runs[i].attested&(1<<op.rank) == 0 {
			s.runs = slices.Clone(s.runs)
			s.runs[i].attested |= 1 << op.rank
		}
		return s, s.runs[i].summary()
	case "reassign":
		// Every reassignment of the test sets a world size, resets one
		// rank of it and expects an epoch.
		i, code := s.liveRun(op.run)
		if code != "" {
			return fail(code)
		}
		r := s.runs[i]
		switch {
		case r.epoch == op.expect:
		case r.epoch == op.expect+1 && r.reset == op.rank && r.resetWorld == op.world:
			return s, r.summary() // the retry of the reassignment that made this epoch
		default:
			return fail(errcode.StaleEpoch)
		}
		s.runs = slices.Clone(s.runs)
		r.epoch, r.reset, r.resetWorld, r.world = r.epoch+1, op.rank, op.world, op.world
		r.attested &= 1<<op.world - 1
		r.attested &^= 1 << op.rank
		if r.timed && !r.summary().open {
			// A reassignment that leaves the barrier closed sets a new
			// deadline.
			r.dlLo, r.dlHi = op.deadline()
		}
		s.runs[i] = r
		return s, r.summary()
	case "checkpoint":
		// The run's root, its permit, the barrier and the step, checked
		// in that order.
		i, code := s.liveRun(op.run)
		if code != "" {
			return fail(code)
		}
		r := s.runs[i]
		switch {
		case op.root != r.root:
			return fail(errcode.RootMismatch)
		case !r.perm.open:
			return fail(errcode.PermitClosed)
		case !r.summary().open:
			return fail(errcode.BarrierClosed)
		case int64(op.value) < r.step:
			return fail(errcode.StepRegression)
		case int64(op.value) > r.step:
			s.runs = slices.Clone(s.runs)
			r.step, r.ckpts = int64(op.value), r.ckpts+1
			s.runs[i] = r
		}
		return s, r.summary()
	case "readFences":
		return s, modelOut{fences: s.fences}
	case "prune":
		// prune(olderThan 0) deletes the failed runs, leaving their
		// tombstones; see outcomes.
		s.runs = slices.Clone(s.runs)
		for i := range s.runs {
			s.runs[i].pruned = s.runs[i].failed
		}
		return s, modelOut{}
	}
	panic("gate model: unknown operation " + op.kind)
}

// modelClockSlackMs is a margin on the rules that use the clock. The
// test and the members read the same wall clock (one machine), the test
// before it sends and after the answer, and both truncate to
// milliseconds, so the bounds hold without it; it stays as a margin.
const modelClockSlackMs = 50

// deadline is the window of the barrier deadline op sets: its stamp plus
// the short timeout.
func (op modelOp) deadline() (lo, hi int64) {
	t := chaosShortBarrier.Milliseconds()
	if op.retMs == math.MaxInt64 {
		return op.callMs + t, math.MaxInt64
	}
	return op.callMs + t, op.retMs + t
}

// outcome is one answer the gate may give and the state after it.
type outcome struct {
	s   modelState
	out modelOut
}

// outcomes are the answers the gate may give to op from s. There is one,
// but for two cases. A repeated register whose first attempt took effect
// carries the release's last report, which the gate answers with the
// release as it is, changing nothing (no renewal, and no NOT_VERIFIED for
// an INVALID release). A run with a short barrier timeout whose barrier
// is closed may be past its deadline, by the clock (see modelRun.dlLo):
// the leader's sweep may have failed it before op, or, for an
// attestation or a reassignment, op may find it late; one called after
// the deadline must.
func (s modelState) outcomes(op modelOp) []outcome {
	ns, out := s.step(op)
	all := []outcome{{ns, out}}
	if op.kind == "register" && op.retried && s.rels[op.root] != 'U' {
		return append(all, outcome{s, modelOut{state: s.rels[op.root]}})
	}
	if op.kind == "prune" {
		// The runs it must delete: those that failed at a stamp surely
		// before the prune's (olderThan 0: its cutoff is its stamp). The
		// runs it may delete: the other failed ones (one that failed in
		// the prune's millisecond is not older than it), and those with
		// a short barrier timeout whose closed barrier the leader's sweep
		// may have failed unseen, if the deadline may have passed.
		var must, may []int
		for i, r := range s.runs {
			switch {
			case r.pruned:
			case r.failed && r.endHi != math.MaxInt64 && r.endHi+modelClockSlackMs < op.callMs:
				must = append(must, i)
			case r.failed || r.timed && !r.summary().open && (op.retMs == math.MaxInt64 || op.retMs+modelClockSlackMs > r.dlLo):
				may = append(may, i)
			}
		}
		all = all[:0]
		for del := 0; del < 1<<len(may); del++ {
			ps := s
			ps.runs = slices.Clone(s.runs)
			prune := func(i int) {
				r := &ps.runs[i]
				if !r.failed {
					r.endHi = op.retMs // failed by a sweep before the prune
				}
				r.failed, r.perm.open, r.pruned = true, false, true
			}
			for _, i := range must {
				prune(i)
			}
			for j, i := range may {
				if del&(1<<j) != 0 {
					prune(i)
				}
			}
			all = append(all, outcome{ps, modelOut{}})
		}
		return all
	}
	if op.kind != "attest" && op.kind != "reassign" && op.kind != "checkpoint" {
		return all
	}
	i, ok := s.run(op.run)
	if !ok {
		return all
	}
	r := s.runs[i]
	if !r.timed || r.failed || r.pruned || r.summary().open {
		return all
	}
	// Every command before op in the log was stamped before op was
	// appended, so before its answer: if that comes before the deadline,
	// nothing can have found the run late. If op was called after the
	// deadline, its own stamp is late.
	if op.retMs != math.MaxInt64 && op.retMs+modelClockSlackMs <= r.dlLo {
		return all
	}
	// An attestation, whatever its rank (from command-schema version
	// 2, raftgate's versionEpochFirst), and any reassignment (from
	// version 6, versionReassignTimesOut; the test's cluster runs at
	// the build's version) finds a passed deadline itself and fails the
	// run with BARRIER_TIMEOUT.
	late := op.kind == "attest" || op.kind == "reassign"
	if late && r.dlHi != math.MaxInt64 && op.callMs-modelClockSlackMs > r.dlHi {
		all = all[:0] // the command finds the deadline passed
	}
	swept := s
	swept.runs = slices.Clone(s.runs)
	swept.runs[i].failed, swept.runs[i].perm.open, swept.runs[i].endHi = true, false, op.retMs
	ns, out = swept.step(op)
	all = append(all, outcome{ns, out})
	if late {
		all = append(all, outcome{swept, modelOut{code: errcode.BarrierTimeout}})
	}
	return all
}

// forgetDead drops the raised watermarks of the roots nothing can observe
// them through any more: RETIRED or INVALID, no alias's current root and
// pinned by no run. Two states that differ only there answer every later
// operation alike and reach states that differ only there, so one stands
// for both; kept apart, they did not merge in porcupine's set of possible
// states, and every unknown outcome of a recheck or a register of such a
// root doubled that set for the rest of the history (set sizes in the
// hundreds, merged pairwise at every step: porcupine could not decide a
// 3-minute history in 5 minutes).
//
// Why nothing observes them: a root's watermarks are read only through
// satisfies and permit. Publish refuses a RETIRED or INVALID root before
// it asks satisfies, rollback (which needs PUBLISHED) too, whatever
// satisfies says; renew does nothing for INVALID and, for RETIRED, acts
// only on permits of aliases whose current root it is and of runs that
// pin it, of which there are none; a fence advance re-binds only those
// same permits. And the condition lasts: only publish and rollback make
// a root an alias's current one (and a run pins only that), and neither
// accepts a RETIRED or INVALID root, which never becomes anything else
// but INVALID. The outcomes of recheck and register are letters and
// codes, never watermarks.
func (s modelState) forgetDead() modelState {
	dead := func(root int) bool {
		if c := s.rels[root]; c != 'R' && c != 'I' {
			return false
		}
		for _, al := range s.aliases {
			if al != nil && al.root == root {
				return false
			}
		}
		for _, r := range s.runs {
			if r.root == root {
				return false
			}
		}
		return true
	}
	if !slices.ContainsFunc(s.wms, func(w rootWM) bool { return dead(w.root) }) {
		return s
	}
	s.wms = slices.DeleteFunc(slices.Clone(s.wms), func(w rootWM) bool { return dead(w.root) })
	return s
}

// gatePorcupine is the model for porcupine. An unknown answer may or may
// not have taken effect.
func gatePorcupine(roots, pool, aliases int) porcupine.Model {
	nm := porcupine.NondeterministicModel{
		Init: func() []any { return []any{newModelState(roots, pool, aliases)} },
		Step: func(state, input, output any) []any {
			s, op, out := state.(modelState), input.(modelOp), output.(modelOut)
			var next []any
			add := func(ns modelState) {
				ns = ns.forgetDead()
				for _, n := range next {
					if modelEqual(n.(modelState), ns) {
						return // one branch per distinct state
					}
				}
				next = append(next, ns)
			}
			if out.unknown {
				add(s) // it may not have taken effect
			}
			for _, o := range s.outcomes(op) {
				if out.unknown || o.out == out {
					add(o.s)
				}
			}
			return next
		},
		Equal: func(a, b any) bool { return modelEqual(a.(modelState), b.(modelState)) },
		Hash:  func(a any) uint64 { return modelHash(a.(modelState)) },
		DescribeOperation: func(input, output any) string {
			op, out := input.(modelOp), output.(modelOut)
			return fmt.Sprintf("%s → %s", describeOp(op), describeOut(op, out))
		},
		DescribeState: func(state any) string { return describeState(state.(modelState)) },
	}
	return nm.ToModel()
}

func modelEqual(a, b modelState) bool {
	if a.fences != b.fences || a.rels != b.rels {
		return false
	}
	if !slices.Equal(a.runs, b.runs) || !slices.Equal(a.aperms, b.aperms) || !slices.Equal(a.wms, b.wms) {
		return false
	}
	for i := range a.aliases {
		x, y := a.aliases[i], b.aliases[i]
		for x != y {
			if x == nil || y == nil || x.gen != y.gen || x.root != y.root || x.kind != y.kind || x.retain != y.retain {
				return false
			}
			x, y = x.prev, y.prev
		}
	}
	return true
}

// modelHash is consistent with modelEqual: equal states hash alike.
func modelHash(s modelState) uint64 {
	h := fnv.New64a()
	var b []byte
	b = binary.LittleEndian.AppendUint64(b, s.fences[0])
	b = binary.LittleEndian.AppendUint64(b, s.fences[1])
	b = append(b, s.rels...)
	for _, p := range s.aperms {
		if p.open {
			b = append(b, 1)
		} else {
			b = append(b, 0)
		}
	}
	for _, w := range s.wms {
		b = binary.LittleEndian.AppendUint64(b, uint64(w.root))
		b = binary.LittleEndian.AppendUint64(b, w.wm[0]^w.wm[1]<<32)
	}
	for _, al := range s.aliases {
		if al != nil {
			b = binary.LittleEndian.AppendUint64(b, al.gen)
			b = binary.LittleEndian.AppendUint64(b, uint64(al.root))
		}
	}
	for _, r := range s.runs {
		b = binary.LittleEndian.AppendUint64(b, uint64(r.id))
		b = binary.LittleEndian.AppendUint64(b, r.attested)
		b = binary.LittleEndian.AppendUint64(b, r.epoch)
		b = binary.LittleEndian.AppendUint64(b, uint64(r.step))
		b = binary.LittleEndian.AppendUint64(b, uint64(r.world))
		if r.failed {
			b = append(b, 1)
		}
		if r.perm.open {
			b = append(b, 2)
		}
		if r.pruned {
			b = append(b, 3)
		}
	}
	h.Write(b)
	return h.Sum64()
}

func describeOp(op modelOp) string {
	r := ""
	if op.retried {
		r = " (retried)"
	}
	switch op.kind {
	case "publish", "rollback":
		return fmt.Sprintf("%s(%s, r%d, expect %d)%s", op.kind, chaosAliases[op.alias], op.root, op.expect, r)
	case "fence":
		return fmt.Sprintf("fence(%s, %d)%s", []string{"tombstone", "benchmark"}[op.fence], op.value, r)
	case "createRun", "readAlias":
		short := ""
		if op.short {
			short = ", short barrier timeout"
		}
		return fmt.Sprintf("%s(%s%s)%s", op.kind, chaosAliases[op.alias], short, r)
	case "attest":
		stray := ""
		if op.stray {
			stray = ", a stray shard"
		}
		return fmt.Sprintf("attest(run %d, rank %d, r%d%s)%s", op.run, op.rank, op.root, stray, r)
	case "reassign":
		return fmt.Sprintf("reassign(run %d, world %d, reset %d, expect epoch %d)%s", op.run, op.world, op.rank, op.expect, r)
	case "checkpoint":
		return fmt.Sprintf("checkpoint(run %d, r%d, step %d)%s", op.run, op.root, op.value, r)
	case "register":
		if op.invalid {
			return fmt.Sprintf("register(r%d, INVALID report)%s", op.root, r)
		}
		return fmt.Sprintf("register(r%d)%s", op.root, r)
	case "prune":
		return "prune(older than 0)" + r
	case "recheck":
		hits := "no hits"
		if op.hits {
			hits = "a hit"
		}
		return fmt.Sprintf("recheck(r%d, %s at %d, %s)%s", op.root, []string{"tombstone", "benchmark"}[op.fence], op.value, hits, r)
	}
	return op.kind + "()"
}

func describeOut(op modelOp, out modelOut) string {
	switch {
	case out.unknown:
		return "unknown"
	case out.code != "":
		return string(out.code)
	case op.kind == "fence" || op.kind == "readFences":
		return fmt.Sprintf("tombstone %d, benchmark %d", out.fences[0], out.fences[1])
	case op.kind == "register" || op.kind == "recheck":
		return string(out.state)
	case op.kind == "attest" || op.kind == "reassign" || op.kind == "checkpoint":
		return fmt.Sprintf("epoch %d, %d of %d attested, barrier open %v, step %d after %d checkpoints", out.epoch, out.attested, out.world, out.open, out.step, out.ckpts)
	}
	return fmt.Sprintf("generation %d = r%d", out.gen, out.root)
}

func describeState(s modelState) string {
	var b strings.Builder
	fmt.Fprintf(&b, "fences %v, releases %s", s.fences, strings.TrimRight(s.rels, "U"))
	for i, al := range s.aliases {
		if al != nil {
			fmt.Fprintf(&b, ", %s g%d=r%d", chaosAliases[i], al.gen, al.root)
		}
	}
	return b.String()
}

// The model itself, on small histories written by hand: what it must
// accept and what it must refuse. A checker that accepted everything
// would pass the chaos test whatever the gate did.
func TestGateModel(t *testing.T) {
	pub := func(alias, root int, expect uint64) modelOp {
		return modelOp{kind: "publish", alias: alias, root: root, expect: expect, retain: 2}
	}
	read := modelOp{kind: "readAlias"}
	op := func(client int, in modelOp, out modelOut, call, ret int64) porcupine.Operation {
		// A unit of time is 100 ms: the short barrier timeout is 8.
		in.callMs, in.retMs = call*100, math.MaxInt64
		if ret != math.MaxInt64 {
			in.retMs = ret * 100
		}
		// Runs keep the test's world size unless a case says otherwise.
		switch in.kind {
		case "reassign":
			if in.world == 0 {
				in.world = chaosWorld
			}
			fallthrough
		case "attest", "checkpoint":
			if out.code == "" && !out.unknown && out.world == 0 {
				out.world = chaosWorld
			}
		}
		return porcupine.Operation{ClientId: client, Input: in, Output: out, Call: call, Return: ret}
	}
	type modelCase struct {
		name string
		ok   bool
		h    []porcupine.Operation
	}
	cases := []modelCase{
		{"read after publish sees it", true, []porcupine.Operation{
			op(0, pub(0, 1, 0), modelOut{gen: 1, root: 1}, 0, 10),
			op(1, read, modelOut{gen: 1, root: 1}, 11, 20),
		}},
		{"stale read after an acknowledged publish", false, []porcupine.Operation{
			op(0, pub(0, 1, 0), modelOut{gen: 1, root: 1}, 0, 10),
			op(1, read, modelOut{code: errcode.UnknownAlias}, 11, 20),
		}},
		{"concurrent read may miss it", true, []porcupine.Operation{
			op(0, pub(0, 1, 0), modelOut{gen: 1, root: 1}, 0, 10),
			op(1, read, modelOut{code: errcode.UnknownAlias}, 5, 20),
		}},
		{"two publishes of one generation both succeed", false, []porcupine.Operation{
			op(0, pub(0, 1, 0), modelOut{gen: 1, root: 1}, 0, 10),
			op(1, pub(0, 2, 0), modelOut{gen: 1, root: 2}, 0, 10),
		}},
		{"the loser of a race is PUBLISH_CONFLICT", true, []porcupine.Operation{
			op(0, pub(0, 1, 0), modelOut{gen: 1, root: 1}, 0, 10),
			op(1, pub(0, 2, 0), modelOut{code: errcode.PublishConflict}, 0, 10),
		}},
		{"a retried publish returns the original result", true, []porcupine.Operation{
			op(0, pub(0, 1, 0), modelOut{gen: 1, root: 1}, 0, 10),
			op(1, pub(0, 2, 1), modelOut{gen: 2, root: 2}, 11, 20),
			op(0, pub(0, 1, 0), modelOut{gen: 1, root: 1}, 21, 30),
		}},
		{"a root that left every window is retired", true, []porcupine.Operation{
			op(0, pub(0, 0, 0), modelOut{gen: 1, root: 0}, 0, 1),
			op(0, pub(0, 1, 1), modelOut{gen: 2, root: 1}, 2, 3),
			op(0, pub(0, 2, 2), modelOut{gen: 3, root: 2}, 4, 5),
			op(0, pub(0, 0, 3), modelOut{code: errcode.NotVerified}, 6, 7),
			op(0, modelOp{kind: "register", root: 0}, modelOut{state: 'R'}, 8, 9),
		}},
		{"a fence never moves back", false, []porcupine.Operation{
			op(0, modelOp{kind: "fence", value: 5}, modelOut{fences: [2]uint64{5, 0}}, 0, 10),
			op(1, modelOp{kind: "fence", value: 3}, modelOut{fences: [2]uint64{3, 0}}, 11, 20),
		}},
		{"a repeated advance answers FENCE_REGRESSION once the fence moved past it", true, []porcupine.Operation{
			op(0, modelOp{kind: "fence", value: 5}, modelOut{unknown: true}, 0, 30),
			op(1, modelOp{kind: "readFences"}, modelOut{fences: [2]uint64{5, 0}}, 5, 10),
			op(1, modelOp{kind: "fence", value: 7}, modelOut{fences: [2]uint64{7, 0}}, 11, 20),
			op(0, modelOp{kind: "fence", value: 5, retried: true}, modelOut{code: errcode.FenceRegression}, 25, 30),
		}},
		{"a repeated register answers the state a publication gave the release since", true, []porcupine.Operation{
			op(0, modelOp{kind: "register", root: 3}, modelOut{unknown: true}, 0, 30),
			op(1, pub(0, 3, 0), modelOut{gen: 1, root: 3}, 5, 10),
			op(0, modelOp{kind: "register", root: 3, retried: true}, modelOut{state: 'P'}, 20, 30),
		}},
		{"a register answered once is not retried", false, []porcupine.Operation{
			op(0, modelOp{kind: "register", root: 3}, modelOut{state: 'P'}, 0, 30),
			op(1, pub(0, 3, 0), modelOut{gen: 1, root: 3}, 5, 10),
		}},
		{"a repeated createRun gets the run its first attempt pinned", true, []porcupine.Operation{
			op(0, pub(0, 1, 0), modelOut{gen: 1, root: 1}, 0, 1),
			op(1, modelOp{kind: "createRun", run: 7}, modelOut{unknown: true}, 2, 30),
			op(0, pub(0, 2, 1), modelOut{gen: 2, root: 2}, 10, 11),
			op(1, modelOp{kind: "createRun", run: 7, retried: true}, modelOut{gen: 1, root: 1}, 20, 30),
		}},
		{"a run is pinned once", false, []porcupine.Operation{
			op(0, pub(0, 1, 0), modelOut{gen: 1, root: 1}, 0, 1),
			op(1, modelOp{kind: "createRun", run: 7}, modelOut{gen: 1, root: 1}, 2, 3),
			op(0, pub(0, 2, 1), modelOut{gen: 2, root: 2}, 10, 11),
			op(1, modelOp{kind: "createRun", run: 7, retried: true}, modelOut{gen: 2, root: 2}, 20, 30),
		}},
		{"the barrier opens with the last rank", true, []porcupine.Operation{
			op(0, pub(0, 1, 0), modelOut{gen: 1, root: 1}, 0, 1),
			op(0, modelOp{kind: "createRun", run: 3}, modelOut{gen: 1, root: 1}, 2, 3),
			op(0, modelOp{kind: "attest", run: 3, rank: 1, root: 1}, modelOut{attested: 1, step: -1}, 4, 5),
			op(1, modelOp{kind: "attest", run: 3, rank: 1, root: 1}, modelOut{attested: 1, step: -1}, 6, 7),
			op(1, modelOp{kind: "attest", run: 3, rank: 0, root: 1}, modelOut{attested: 2, open: true, step: -1}, 8, 9),
		}},
		{"an acknowledged attestation is never lost", false, []porcupine.Operation{
			op(0, pub(0, 1, 0), modelOut{gen: 1, root: 1}, 0, 1),
			op(0, modelOp{kind: "createRun", run: 3}, modelOut{gen: 1, root: 1}, 2, 3),
			op(0, modelOp{kind: "attest", run: 3, rank: 1, root: 1}, modelOut{attested: 1, step: -1}, 4, 5),
			op(1, modelOp{kind: "attest", run: 3, rank: 0, root: 1}, modelOut{attested: 1, step: -1}, 8, 9),
		}},
		{"a reassignment sent again after it applied changes nothing", true, []porcupine.Operation{
			op(0, pub(0, 1, 0), modelOut{gen: 1, root: 1}, 0, 1),
			op(0, modelOp{kind: "createRun", run: 3}, modelOut{gen: 1, root: 1}, 2, 3),
			op(0, modelOp{kind: "attest", run: 3, rank: 1, root: 1}, modelOut{attested: 1, step: -1}, 4, 5),
			op(0, modelOp{kind: "reassign", run: 3, rank: 1}, modelOut{unknown: true}, 6, 20),
			op(1, modelOp{kind: "attest", run: 3, rank: 1, root: 1}, modelOut{epoch: 1, attested: 1, step: -1}, 8, 9),
			op(0, modelOp{kind: "reassign", run: 3, rank: 1, retried: true}, modelOut{epoch: 1, attested: 1, step: -1}, 15, 20),
		}},
		{"a second reassignment from one epoch is refused", false, []porcupine.Operation{
			op(0, pub(0, 1, 0), modelOut{gen: 1, root: 1}, 0, 1),
			op(0, modelOp{kind: "createRun", run: 3}, modelOut{gen: 1, root: 1}, 2, 3),
			op(0, modelOp{kind: "reassign", run: 3, rank: 1}, modelOut{epoch: 1, step: -1}, 4, 5),
			op(1, modelOp{kind: "reassign", run: 3, rank: 0}, modelOut{epoch: 2, step: -1}, 6, 7),
		}},
		{"a checkpoint needs the open barrier, the run's root and no step behind", true, []porcupine.Operation{
			op(0, pub(0, 1, 0), modelOut{gen: 1, root: 1}, 0, 1),
			op(0, modelOp{kind: "createRun", run: 3}, modelOut{gen: 1, root: 1}, 2, 3),
			op(0, modelOp{kind: "checkpoint", run: 3, root: 1, value: 1}, modelOut{code: errcode.BarrierClosed}, 4, 5),
			op(0, modelOp{kind: "attest", run: 3, rank: 0, root: 1}, modelOut{attested: 1, step: -1}, 6, 7),
			op(0, modelOp{kind: "attest", run: 3, rank: 1, root: 1}, modelOut{attested: 2, open: true, step: -1}, 8, 9),
			op(0, modelOp{kind: "checkpoint", run: 3, root: 2, value: 1}, modelOut{code: errcode.RootMismatch}, 10, 11),
			op(0, modelOp{kind: "checkpoint", run: 3, root: 1, value: 2}, modelOut{attested: 2, open: true, step: 2, ckpts: 1}, 12, 13),
			op(1, modelOp{kind: "checkpoint", run: 3, root: 1, value: 2}, modelOut{attested: 2, open: true, step: 2, ckpts: 1}, 14, 15),
			op(1, modelOp{kind: "checkpoint", run: 3, root: 1, value: 1}, modelOut{code: errcode.StepRegression}, 16, 17),
			op(0, modelOp{kind: "reassign", run: 3, rank: 1}, modelOut{epoch: 1, attested: 1, step: 2, ckpts: 1}, 18, 19),
			op(0, modelOp{kind: "checkpoint", run: 3, root: 1, value: 3}, modelOut{code: errcode.BarrierClosed}, 20, 21),
		}},
		{"an admitted step is never lost", false, []porcupine.Operation{
			op(0, pub(0, 1, 0), modelOut{gen: 1, root: 1}, 0, 1),
			op(0, modelOp{kind: "createRun", run: 3}, modelOut{gen: 1, root: 1}, 2, 3),
			op(0, modelOp{kind: "attest", run: 3, rank: 0, root: 1}, modelOut{attested: 1, step: -1}, 4, 5),
			op(0, modelOp{kind: "attest", run: 3, rank: 1, root: 1}, modelOut{attested: 2, open: true, step: -1}, 6, 7),
			op(0, modelOp{kind: "checkpoint", run: 3, root: 1, value: 5}, modelOut{attested: 2, open: true, step: 5, ckpts: 1}, 8, 9),
			op(1, modelOp{kind: "checkpoint", run: 3, root: 1, value: 4}, modelOut{attested: 2, open: true, step: 4, ckpts: 2}, 10, 11),
		}},
		{"scale-out closes the barrier, scale-in reopens it, ranks kept", true, []porcupine.Operation{
			op(0, pub(0, 1, 0), modelOut{gen: 1, root: 1}, 0, 1),
			op(0, modelOp{kind: "createRun", run: 3}, modelOut{gen: 1, root: 1}, 2, 3),
			op(0, modelOp{kind: "attest", run: 3, rank: 0, root: 1}, modelOut{attested: 1, step: -1}, 4, 5),
			op(0, modelOp{kind: "attest", run: 3, rank: 1, root: 1}, modelOut{attested: 2, open: true, step: -1}, 6, 7),
			op(0, modelOp{kind: "reassign", run: 3, world: 3, rank: 2}, modelOut{epoch: 1, world: 3, attested: 2, step: -1}, 8, 9),
			op(0, modelOp{kind: "attest", run: 3, rank: 2, root: 1}, modelOut{epoch: 1, world: 3, attested: 3, open: true, step: -1}, 10, 11),
			op(0, modelOp{kind: "reassign", run: 3, world: 3, rank: 2, expect: 1}, modelOut{epoch: 2, world: 3, attested: 2, step: -1}, 12, 13),
			op(0, modelOp{kind: "reassign", run: 3, world: 2, rank: 1, expect: 2}, modelOut{epoch: 3, world: 2, attested: 1, step: -1}, 14, 15),
			op(0, modelOp{kind: "attest", run: 3, rank: 2, root: 1}, modelOut{code: errcode.BadInput}, 16, 17),
		}},
		{"a retried reassignment must repeat the world size", false, []porcupine.Operation{
			op(0, pub(0, 1, 0), modelOut{gen: 1, root: 1}, 0, 1),
			op(0, modelOp{kind: "createRun", run: 3}, modelOut{gen: 1, root: 1}, 2, 3),
			op(0, modelOp{kind: "reassign", run: 3, world: 3, rank: 1}, modelOut{epoch: 1, world: 3, step: -1}, 4, 5),
			op(0, modelOp{kind: "reassign", run: 3, world: 2, rank: 1}, modelOut{epoch: 1, world: 3, step: -1}, 6, 7),
		}},
		{"a wrong attestation fails the run for good", true, []porcupine.Operation{
			op(0, pub(0, 1, 0), modelOut{gen: 1, root: 1}, 0, 1),
			op(0, modelOp{kind: "createRun", run: 3}, modelOut{gen: 1, root: 1}, 2, 3),
			op(0, modelOp{kind: "attest", run: 3, rank: 0, root: 1}, modelOut{attested: 1, step: -1}, 4, 5),
			op(0, modelOp{kind: "attest", run: 3, rank: 1, root: 1, stray: true}, modelOut{code: errcode.ShardNotAssigned}, 6, 7),
			op(0, modelOp{kind: "attest", run: 3, rank: 1, root: 1}, modelOut{code: errcode.RunFailed}, 8, 9),
			op(0, modelOp{kind: "reassign", run: 3, rank: 1}, modelOut{code: errcode.RunFailed}, 10, 11),
			op(0, modelOp{kind: "checkpoint", run: 3, root: 1}, modelOut{code: errcode.RunFailed}, 12, 13),
			op(0, modelOp{kind: "createRun", run: 4, prev: 3}, modelOut{gen: 1, root: 1}, 14, 15),
			op(0, modelOp{kind: "attest", run: 4, rank: 0, root: 2}, modelOut{code: errcode.RootMismatch}, 16, 17),
		}},
		{"a failed run does not come back", false, []porcupine.Operation{
			op(0, pub(0, 1, 0), modelOut{gen: 1, root: 1}, 0, 1),
			op(0, modelOp{kind: "createRun", run: 3}, modelOut{gen: 1, root: 1}, 2, 3),
			op(0, modelOp{kind: "attest", run: 3, rank: 0, root: 2}, modelOut{code: errcode.RootMismatch}, 4, 5),
			op(1, modelOp{kind: "attest", run: 3, rank: 0, root: 1}, modelOut{attested: 1, step: -1}, 6, 7),
		}},
		{"a fence advance closes the permits it passes; behind it nothing publishes", true, []porcupine.Operation{
			op(0, pub(0, 1, 0), modelOut{gen: 1, root: 1}, 0, 1), // root 1 checked at 43
			op(0, modelOp{kind: "createRun", run: 3}, modelOut{gen: 1, root: 1}, 2, 3),
			op(0, modelOp{kind: "attest", run: 3, rank: 0, root: 1}, modelOut{attested: 1, step: -1}, 4, 5),
			op(0, modelOp{kind: "attest", run: 3, rank: 1, root: 1}, modelOut{attested: 2, open: true, step: -1}, 6, 7),
			op(1, modelOp{kind: "fence", value: chaosWM(1) + 1}, modelOut{fences: [2]uint64{chaosWM(1) + 1, 0}}, 8, 9),
			op(0, modelOp{kind: "checkpoint", run: 3, root: 1, value: 1}, modelOut{code: errcode.PermitClosed}, 10, 11),
			op(0, modelOp{kind: "createRun", run: 4, prev: 3}, modelOut{code: errcode.PermitClosed}, 12, 13),
			op(0, pub(0, 1, 1), modelOut{code: errcode.FenceBehind}, 14, 15),
			op(0, pub(0, 2, 1), modelOut{gen: 2, root: 2}, 16, 17), // root 2 checked at 46
			op(0, modelOp{kind: "rollback", root: 1, expect: 2}, modelOut{code: errcode.RollbackIneligible}, 18, 19),
			op(0, modelOp{kind: "createRun", run: 4, prev: 3}, modelOut{gen: 2, root: 2}, 20, 21),
		}},
		{"a recheck with no hits reopens the permits a fence closed", true, []porcupine.Operation{
			op(0, pub(0, 1, 0), modelOut{gen: 1, root: 1}, 0, 1), // root 1 checked at 43
			op(0, modelOp{kind: "createRun", run: 3}, modelOut{gen: 1, root: 1}, 2, 3),
			op(0, modelOp{kind: "attest", run: 3, rank: 0, root: 1}, modelOut{attested: 1, step: -1}, 4, 5),
			op(0, modelOp{kind: "attest", run: 3, rank: 1, root: 1}, modelOut{attested: 2, open: true, step: -1}, 6, 7),
			op(1, modelOp{kind: "fence", value: 44}, modelOut{fences: [2]uint64{44, 0}}, 8, 9),
			op(0, modelOp{kind: "createRun", run: 4, prev: 3}, modelOut{code: errcode.PermitClosed}, 10, 11),
			op(1, modelOp{kind: "recheck", root: 1, value: 43}, modelOut{code: errcode.FenceBehind}, 12, 13),
			op(1, modelOp{kind: "recheck", root: 1, value: 50}, modelOut{state: 'P'}, 14, 15),
			op(0, modelOp{kind: "checkpoint", run: 3, root: 1, value: 1}, modelOut{attested: 2, open: true, step: 1, ckpts: 1}, 16, 17),
			op(0, modelOp{kind: "createRun", run: 4, prev: 3}, modelOut{gen: 1, root: 1}, 18, 19),
			op(1, modelOp{kind: "fence", value: 51}, modelOut{fences: [2]uint64{51, 0}}, 20, 21),
			op(1, modelOp{kind: "register", root: 1}, modelOut{state: 'P'}, 22, 23), // its reports say 43: no renewal
			op(0, modelOp{kind: "createRun", run: 5, prev: 4}, modelOut{code: errcode.PermitClosed}, 24, 25),
			op(0, pub(0, 1, 1), modelOut{code: errcode.FenceBehind}, 26, 27),
		}},
		{"a recheck made before a fence advance keeps the permits open through it", true, []porcupine.Operation{
			op(0, pub(0, 1, 0), modelOut{gen: 1, root: 1}, 0, 1), // root 1 checked at 43
			op(0, modelOp{kind: "createRun", run: 3}, modelOut{gen: 1, root: 1}, 2, 3),
			op(0, modelOp{kind: "attest", run: 3, rank: 0, root: 1}, modelOut{attested: 1, step: -1}, 4, 5),
			op(0, modelOp{kind: "attest", run: 3, rank: 1, root: 1}, modelOut{attested: 2, open: true, step: -1}, 6, 7),
			op(1, modelOp{kind: "recheck", root: 1, value: 50}, modelOut{state: 'P'}, 8, 9),
			op(1, modelOp{kind: "fence", value: 50}, modelOut{fences: [2]uint64{50, 0}}, 10, 11),
			op(0, modelOp{kind: "checkpoint", run: 3, root: 1, value: 1}, modelOut{attested: 2, open: true, step: 1, ckpts: 1}, 12, 13),
			op(0, modelOp{kind: "createRun", run: 4, prev: 3}, modelOut{gen: 1, root: 1}, 14, 15),
			op(1, modelOp{kind: "fence", value: 51}, modelOut{fences: [2]uint64{51, 0}}, 16, 17), // past the recheck
			op(0, modelOp{kind: "createRun", run: 5, prev: 4}, modelOut{code: errcode.PermitClosed}, 18, 19),
		}},
		{"a fence advance past a root's recheck closes its permits", false, []porcupine.Operation{
			op(0, pub(0, 1, 0), modelOut{gen: 1, root: 1}, 0, 1),
			op(1, modelOp{kind: "recheck", root: 1, value: 50}, modelOut{state: 'P'}, 2, 3),
			op(1, modelOp{kind: "fence", value: 51}, modelOut{fences: [2]uint64{51, 0}}, 4, 5),
			op(0, modelOp{kind: "createRun", run: 3}, modelOut{gen: 1, root: 1}, 6, 7),
		}},
		{"a permit a fence closed stays closed without a recheck", false, []porcupine.Operation{
			op(0, pub(0, 1, 0), modelOut{gen: 1, root: 1}, 0, 1),
			op(1, modelOp{kind: "fence", value: 44}, modelOut{fences: [2]uint64{44, 0}}, 2, 3),
			op(1, modelOp{kind: "register", root: 1}, modelOut{state: 'P'}, 4, 5),
			op(0, modelOp{kind: "createRun", run: 3}, modelOut{gen: 1, root: 1}, 6, 7),
		}},
		{"a recheck's renewal holds only for its root", false, []porcupine.Operation{
			op(0, pub(0, 1, 0), modelOut{gen: 1, root: 1}, 0, 1),
			op(1, modelOp{kind: "fence", value: 44}, modelOut{fences: [2]uint64{44, 0}}, 2, 3),
			op(1, modelOp{kind: "recheck", root: 2, value: 60}, modelOut{state: 'V'}, 4, 5),
			op(0, modelOp{kind: "createRun", run: 3}, modelOut{gen: 1, root: 1}, 6, 7),
		}},
		{"a publication that starts after a fence passed its root cannot succeed", false, []porcupine.Operation{
			op(1, modelOp{kind: "fence", value: chaosWM(1) + 1}, modelOut{fences: [2]uint64{chaosWM(1) + 1, 0}}, 0, 1),
			op(0, pub(0, 1, 0), modelOut{gen: 1, root: 1}, 2, 3),
		}},
		{"a concurrent one may", true, []porcupine.Operation{
			op(1, modelOp{kind: "fence", value: chaosWM(1) + 1}, modelOut{fences: [2]uint64{chaosWM(1) + 1, 0}}, 0, 3),
			op(0, pub(0, 1, 0), modelOut{gen: 1, root: 1}, 1, 2),
		}},
		{"a barrier that timed out fails the run for good", true, []porcupine.Operation{
			op(0, pub(0, 1, 0), modelOut{gen: 1, root: 1}, 0, 1),
			op(0, modelOp{kind: "createRun", run: 3, short: true}, modelOut{gen: 1, root: 1}, 2, 3),
			op(0, modelOp{kind: "attest", run: 3, rank: 0, root: 1}, modelOut{attested: 1, step: -1}, 4, 5),
			op(0, modelOp{kind: "attest", run: 3, rank: 1, root: 1}, modelOut{code: errcode.BarrierTimeout}, 16, 17),
			op(0, modelOp{kind: "attest", run: 3, rank: 1, root: 1}, modelOut{code: errcode.RunFailed}, 18, 19),
			op(0, modelOp{kind: "checkpoint", run: 3, root: 1}, modelOut{code: errcode.RunFailed}, 20, 21),
		}},
		{"or the leader's sweep failed it first", true, []porcupine.Operation{
			op(0, pub(0, 1, 0), modelOut{gen: 1, root: 1}, 0, 1),
			op(0, modelOp{kind: "createRun", run: 3, short: true}, modelOut{gen: 1, root: 1}, 2, 3),
			op(0, modelOp{kind: "reassign", run: 3, rank: 1}, modelOut{code: errcode.RunFailed}, 14, 15),
		}},
		{"an attestation that may come after the deadline may find it passed", true, []porcupine.Operation{
			op(0, pub(0, 1, 0), modelOut{gen: 1, root: 1}, 0, 1),
			op(0, modelOp{kind: "createRun", run: 3, short: true}, modelOut{gen: 1, root: 1}, 2, 3),
			op(0, modelOp{kind: "attest", run: 3, rank: 0, root: 1}, modelOut{code: errcode.BarrierTimeout}, 9, 11),
		}},
		{"or not", true, []porcupine.Operation{
			op(0, pub(0, 1, 0), modelOut{gen: 1, root: 1}, 0, 1),
			op(0, modelOp{kind: "createRun", run: 3, short: true}, modelOut{gen: 1, root: 1}, 2, 3),
			op(0, modelOp{kind: "attest", run: 3, rank: 0, root: 1}, modelOut{attested: 1, step: -1}, 9, 11),
		}},
		{"nothing times out before the deadline", false, []porcupine.Operation{
			op(0, pub(0, 1, 0), modelOut{gen: 1, root: 1}, 0, 1),
			op(0, modelOp{kind: "createRun", run: 3, short: true}, modelOut{gen: 1, root: 1}, 2, 3),
			op(0, modelOp{kind: "attest", run: 3, rank: 0, root: 1}, modelOut{code: errcode.BarrierTimeout}, 4, 5),
		}},
		{"the sweep does not fail a run before its deadline", false, []porcupine.Operation{
			op(0, pub(0, 1, 0), modelOut{gen: 1, root: 1}, 0, 1),
			op(0, modelOp{kind: "createRun", run: 3, short: true}, modelOut{gen: 1, root: 1}, 2, 3),
			op(0, modelOp{kind: "reassign", run: 3, rank: 1}, modelOut{code: errcode.RunFailed}, 4, 5),
		}},
		{"an attestation called after the deadline finds it passed", false, []porcupine.Operation{
			op(0, pub(0, 1, 0), modelOut{gen: 1, root: 1}, 0, 1),
			op(0, modelOp{kind: "createRun", run: 3, short: true}, modelOut{gen: 1, root: 1}, 2, 3),
			op(0, modelOp{kind: "attest", run: 3, rank: 0, root: 1}, modelOut{attested: 1, step: -1}, 12, 13),
		}},
		// From command-schema version 2 the gate checks an attestation's
		// deadline and root before its rank: one of a rank outside the
		// run (a client that missed a scale-in) fails it all the same.
		{"an attestation of a rank outside the run and another root fails the run", true, []porcupine.Operation{
			op(0, pub(0, 1, 0), modelOut{gen: 1, root: 1}, 0, 1),
			op(0, modelOp{kind: "createRun", run: 3}, modelOut{gen: 1, root: 1}, 2, 3),
			op(0, modelOp{kind: "attest", run: 3, rank: chaosWorld, root: 2}, modelOut{code: errcode.RootMismatch}, 4, 5),
			op(0, modelOp{kind: "attest", run: 3, rank: 0, root: 1}, modelOut{code: errcode.RunFailed}, 6, 7),
		}},
		{"an attestation of a rank outside the run called after the deadline finds it passed", true, []porcupine.Operation{
			op(0, pub(0, 1, 0), modelOut{gen: 1, root: 1}, 0, 1),
			op(0, modelOp{kind: "createRun", run: 3, short: true}, modelOut{gen: 1, root: 1}, 2, 3),
			op(0, modelOp{kind: "attest", run: 3, rank: chaosWorld, root: 1}, modelOut{code: errcode.BarrierTimeout}, 12, 13),
		}},
		{"and is not BAD_INPUT", false, []porcupine.Operation{
			op(0, pub(0, 1, 0), modelOut{gen: 1, root: 1}, 0, 1),
			op(0, modelOp{kind: "createRun", run: 3, short: true}, modelOut{gen: 1, root: 1}, 2, 3),
			op(0, modelOp{kind: "attest", run: 3, rank: chaosWorld, root: 1}, modelOut{code: errcode.BadInput}, 12, 13),
		}},
		{"a reassignment that leaves the barrier closed moves the deadline", true, []porcupine.Operation{
			op(0, pub(0, 1, 0), modelOut{gen: 1, root: 1}, 0, 1),
			op(0, modelOp{kind: "createRun", run: 3, short: true}, modelOut{gen: 1, root: 1}, 2, 3),
			op(0, modelOp{kind: "reassign", run: 3, rank: 1, expect: 0}, modelOut{epoch: 1, step: -1}, 8, 9),
			op(0, modelOp{kind: "attest", run: 3, rank: 0, root: 1}, modelOut{epoch: 1, attested: 1, step: -1}, 14, 15),
		}},
		{"a reassignment that may come after the deadline may find it passed", true, []porcupine.Operation{
			op(0, pub(0, 1, 0), modelOut{gen: 1, root: 1}, 0, 1),
			op(0, modelOp{kind: "createRun", run: 3, short: true}, modelOut{gen: 1, root: 1}, 2, 3),
			op(0, modelOp{kind: "reassign", run: 3, rank: 1, expect: 0}, modelOut{code: errcode.BarrierTimeout}, 9, 11),
			op(0, modelOp{kind: "reassign", run: 3, rank: 1, expect: 0}, modelOut{code: errcode.RunFailed}, 12, 13),
		}},
		{"a reassignment called after the deadline finds it passed", false, []porcupine.Operation{
			op(0, pub(0, 1, 0), modelOut{gen: 1, root: 1}, 0, 1),
			op(0, modelOp{kind: "createRun", run: 3, short: true}, modelOut{gen: 1, root: 1}, 2, 3),
			op(0, modelOp{kind: "reassign", run: 3, rank: 1, expect: 0}, modelOut{epoch: 1, step: -1}, 12, 13),
		}},
		{"and the new deadline holds", false, []porcupine.Operation{
			op(0, pub(0, 1, 0), modelOut{gen: 1, root: 1}, 0, 1),
			op(0, modelOp{kind: "createRun", run: 3, short: true}, modelOut{gen: 1, root: 1}, 2, 3),
			op(0, modelOp{kind: "reassign", run: 3, rank: 1, expect: 0}, modelOut{epoch: 1, step: -1}, 8, 9),
			op(0, modelOp{kind: "attest", run: 3, rank: 0, root: 1}, modelOut{epoch: 1, attested: 1, step: -1}, 19, 20),
		}},
		{"a timed-out run does not come back", false, []porcupine.Operation{
			op(0, pub(0, 1, 0), modelOut{gen: 1, root: 1}, 0, 1),
			op(0, modelOp{kind: "createRun", run: 3, short: true}, modelOut{gen: 1, root: 1}, 2, 3),
			op(0, modelOp{kind: "attest", run: 3, rank: 0, root: 1}, modelOut{code: errcode.BarrierTimeout}, 14, 15),
			op(0, modelOp{kind: "attest", run: 3, rank: 0, root: 1}, modelOut{attested: 1, step: -1}, 16, 17),
		}},
		{"an open barrier does not time out", false, []porcupine.Operation{
			op(0, pub(0, 1, 0), modelOut{gen: 1, root: 1}, 0, 1),
			op(0, modelOp{kind: "createRun", run: 3, short: true}, modelOut{gen: 1, root: 1}, 2, 3),
			op(0, modelOp{kind: "attest", run: 3, rank: 0, root: 1}, modelOut{attested: 1, step: -1}, 4, 5),
			op(0, modelOp{kind: "attest", run: 3, rank: 1, root: 1}, modelOut{attested: 2, open: true, step: -1}, 6, 7),
			op(0, modelOp{kind: "attest", run: 3, rank: 0, root: 1}, modelOut{code: errcode.RunFailed}, 8, 9),
		}},
		{"a run with the long timeout does not time out", false, []porcupine.Operation{
			op(0, pub(0, 1, 0), modelOut{gen: 1, root: 1}, 0, 1),
			op(0, modelOp{kind: "createRun", run: 3}, modelOut{gen: 1, root: 1}, 2, 3),
			op(0, modelOp{kind: "attest", run: 3, rank: 0, root: 1}, modelOut{code: errcode.BarrierTimeout}, 4, 5),
		}},
		{"a recheck with a hit makes the release INVALID for good and closes its permits", true, []porcupine.Operation{
			op(0, pub(0, 1, 0), modelOut{gen: 1, root: 1}, 0, 1),
			op(0, modelOp{kind: "createRun", run: 3}, modelOut{gen: 1, root: 1}, 2, 3),
			op(0, modelOp{kind: "attest", run: 3, rank: 0, root: 1}, modelOut{attested: 1, step: -1}, 4, 5),
			op(0, modelOp{kind: "attest", run: 3, rank: 1, root: 1}, modelOut{attested: 2, open: true, step: -1}, 6, 7),
			op(1, modelOp{kind: "recheck", root: 1, fence: 1, value: 10, hits: true}, modelOut{code: errcode.BenchmarkHit}, 8, 9),
			op(0, modelOp{kind: "checkpoint", run: 3, root: 1, value: 1}, modelOut{code: errcode.PermitClosed}, 10, 11),
			op(0, modelOp{kind: "createRun", run: 4, prev: 3}, modelOut{code: errcode.PermitClosed}, 12, 13),
			op(1, modelOp{kind: "recheck", root: 1, value: 50}, modelOut{code: errcode.NotVerified}, 14, 15),
			op(1, modelOp{kind: "register", root: 1}, modelOut{code: errcode.NotVerified}, 16, 17),
			op(0, pub(0, 1, 1), modelOut{code: errcode.NotVerified}, 18, 19),
			op(0, pub(0, 2, 1), modelOut{gen: 2, root: 2}, 20, 21),
			op(0, modelOp{kind: "rollback", root: 1, expect: 2}, modelOut{code: errcode.RollbackIneligible}, 22, 23),
		}},
		{"a repeated register may find its report already applied", true, []porcupine.Operation{
			op(0, modelOp{kind: "register", root: 1}, modelOut{unknown: true}, 0, 30),
			op(1, modelOp{kind: "recheck", root: 1, value: 10, hits: true}, modelOut{code: errcode.TombstoneHit}, 5, 6),
			op(0, modelOp{kind: "register", root: 1, retried: true}, modelOut{state: 'I'}, 20, 30),
		}},
		{"an INVALID report makes a published release INVALID and closes its permit", true, []porcupine.Operation{
			op(0, pub(0, 1, 0), modelOut{gen: 1, root: 1}, 0, 1),
			op(1, modelOp{kind: "register", root: 1, invalid: true}, modelOut{state: 'I'}, 2, 3),
			op(0, modelOp{kind: "createRun", run: 3}, modelOut{code: errcode.PermitClosed}, 4, 5),
			op(0, modelOp{kind: "register", root: 1}, modelOut{code: errcode.NotVerified}, 6, 7),
			op(0, pub(0, 1, 1), modelOut{code: errcode.NotVerified}, 8, 9),
		}},
		{"a run on a release an INVALID report names is admitted", false, []porcupine.Operation{
			op(0, pub(0, 1, 0), modelOut{gen: 1, root: 1}, 0, 1),
			op(1, modelOp{kind: "register", root: 1, invalid: true}, modelOut{state: 'I'}, 2, 3),
			op(0, modelOp{kind: "createRun", run: 3}, modelOut{gen: 1, root: 1}, 4, 5),
		}},
		{"an INVALID release is not VERIFIED again", false, []porcupine.Operation{
			op(1, modelOp{kind: "recheck", root: 1, value: 10, hits: true}, modelOut{code: errcode.TombstoneHit}, 0, 1),
			op(0, modelOp{kind: "register", root: 1}, modelOut{state: 'V'}, 2, 3),
		}},
		{"a prune deletes failed runs: their IDs answer RUN_PRUNED, a repeated createRun too", true, []porcupine.Operation{
			op(0, pub(0, 1, 0), modelOut{gen: 1, root: 1}, 0, 1),
			op(0, modelOp{kind: "createRun", run: 3}, modelOut{unknown: true}, 2, 30),
			op(1, modelOp{kind: "attest", run: 3, rank: 0, root: 2}, modelOut{code: errcode.RootMismatch}, 4, 5),
			op(1, modelOp{kind: "prune"}, modelOut{}, 6, 7),
			op(1, modelOp{kind: "attest", run: 3, rank: 0, root: 1}, modelOut{code: errcode.RunPruned}, 8, 9),
			op(1, pub(0, 2, 1), modelOut{gen: 2, root: 2}, 10, 11),
			op(0, modelOp{kind: "createRun", run: 3, retried: true}, modelOut{code: errcode.RunPruned}, 20, 30),
		}},
		{"a createRun repeated after its run was pruned does not resolve the alias again", false, []porcupine.Operation{
			op(0, pub(0, 1, 0), modelOut{gen: 1, root: 1}, 0, 1),
			op(0, modelOp{kind: "createRun", run: 3}, modelOut{unknown: true}, 2, 30),
			op(1, modelOp{kind: "attest", run: 3, rank: 0, root: 2}, modelOut{code: errcode.RootMismatch}, 4, 5),
			op(1, modelOp{kind: "prune"}, modelOut{}, 6, 7),
			op(1, pub(0, 2, 1), modelOut{gen: 2, root: 2}, 10, 11),
			op(0, modelOp{kind: "createRun", run: 3, retried: true}, modelOut{gen: 2, root: 2}, 20, 30),
		}},
		{"a prune after a run failed deletes it", false, []porcupine.Operation{
			op(0, pub(0, 1, 0), modelOut{gen: 1, root: 1}, 0, 1),
			op(0, modelOp{kind: "createRun", run: 3}, modelOut{gen: 1, root: 1}, 2, 3),
			op(1, modelOp{kind: "attest", run: 3, rank: 0, root: 2}, modelOut{code: errcode.RootMismatch}, 4, 5),
			op(1, modelOp{kind: "prune"}, modelOut{}, 6, 7),
			op(1, modelOp{kind: "attest", run: 3, rank: 0, root: 1}, modelOut{code: errcode.RunFailed}, 8, 9),
		}},
		{"a prune concurrent with the failure may keep the run", true, []porcupine.Operation{
			op(0, pub(0, 1, 0), modelOut{gen: 1, root: 1}, 0, 1),
			op(0, modelOp{kind: "createRun", run: 3}, modelOut{gen: 1, root: 1}, 2, 3),
			op(1, modelOp{kind: "attest", run: 3, rank: 0, root: 2}, modelOut{code: errcode.RootMismatch}, 4, 7),
			op(0, modelOp{kind: "prune"}, modelOut{}, 6, 7),
			op(1, modelOp{kind: "attest", run: 3, rank: 0, root: 1}, modelOut{code: errcode.RunFailed}, 8, 9),
		}},
		{"a pruned run's ID is not unknown", false, []porcupine.Operation{
			op(0, pub(0, 1, 0), modelOut{gen: 1, root: 1}, 0, 1),
			op(0, modelOp{kind: "createRun", run: 3}, modelOut{gen: 1, root: 1}, 2, 3),
			op(1, modelOp{kind: "attest", run: 3, rank: 0, root: 2}, modelOut{code: errcode.RootMismatch}, 4, 5),
			op(1, modelOp{kind: "prune"}, modelOut{}, 6, 7),
			op(1, modelOp{kind: "attest", run: 3, rank: 0, root: 1}, modelOut{code: errcode.UnknownRun}, 8, 9),
		}},
		{"a prune keeps live runs", false, []porcupine.Operation{
			op(0, pub(0, 1, 0), modelOut{gen: 1, root: 1}, 0, 1),
			op(0, modelOp{kind: "createRun", run: 3}, modelOut{gen: 1, root: 1}, 2, 3),
			op(1, modelOp{kind: "prune"}, modelOut{}, 6, 7),
			op(1, modelOp{kind: "attest", run: 3, rank: 0, root: 1}, modelOut{code: errcode.RunPruned}, 8, 9),
		}},
		{"a run pins the alias as it was", false, []porcupine.Operation{
			op(0, pub(0, 1, 0), modelOut{gen: 1, root: 1}, 0, 10),
			op(0, pub(0, 2, 1), modelOut{gen: 2, root: 2}, 11, 20),
			op(1, modelOp{kind: "createRun"}, modelOut{gen: 1, root: 1}, 21, 30),
		}},
		{"an unknown outcome may have happened", true, []porcupine.Operation{
			op(0, pub(0, 1, 0), modelOut{unknown: true}, 0, math.MaxInt64),
			op(1, read, modelOut{gen: 1, root: 1}, 11, 20),
		}},
		{"or not", true, []porcupine.Operation{
			op(0, pub(0, 1, 0), modelOut{unknown: true}, 0, math.MaxInt64),
			op(1, read, modelOut{code: errcode.UnknownAlias}, 11, 20),
		}},
	}
	model := gatePorcupine(3, 4, len(chaosAliases))
	// A command retried after INDETERMINATE answers: each attempt an
	// operation, the unknown ones sharing the definite one's answer time.
	retried := func(client int, in modelOp, final modelOut, calls ...int64) []porcupine.Operation {
		var h []porcupine.Operation
		for i, c := range calls {
			out := modelOut{unknown: true}
			if i == len(calls)-1 {
				out = final
			}
			h = append(h, op(client, in, out, c, 10))
			in.retried = true
		}
		return h
	}
	cases = append(cases,
		modelCase{"read after a publish retried twice sees it", true, append(retried(0, pub(0, 1, 0), modelOut{gen: 1, root: 1}, 0, 2, 5),
			op(1, read, modelOut{gen: 1, root: 1}, 11, 20))},
		modelCase{"stale read after a publish retried twice", false, append(retried(0, pub(0, 1, 0), modelOut{gen: 1, root: 1}, 0, 2, 5),
			op(1, read, modelOut{code: errcode.UnknownAlias}, 11, 20))},
		modelCase{"a read during unknown attempts sees the publication", true, append(retried(0, pub(0, 1, 0), modelOut{gen: 1, root: 1}, 0, 2, 5),
			op(1, read, modelOut{gen: 1, root: 1}, 1, 3))},
		modelCase{"a read before any attempt sees the publication", false, append(retried(0, pub(0, 1, 0), modelOut{gen: 1, root: 1}, 4, 6, 8),
			op(1, read, modelOut{gen: 1, root: 1}, 1, 3))},
	)
	for _, c := range cases {
		if got := porcupine.CheckOperations(model, c.h); got != c.ok {
			t.Errorf("%s: linearizable %v, want %v", c.name, got, c.ok)
		}
		// The checker's view, each command's unknown attempts one
		// operation, gives the same verdict.
		if got := porcupine.CheckOperations(model, collapseRetries(c.h)); got != c.ok {
			t.Errorf("%s, unknown attempts collapsed: linearizable %v, want %v", c.name, got, c.ok)
		}
	}
	h := collapseRetries(retried(0, pub(0, 1, 0), modelOut{gen: 1, root: 1}, 2, 4, 6))
	if len(h) != 2 || h[0].Call != 2 || !h[0].Output.(modelOut).unknown || h[0].Input.(modelOp).callMs != 200 || h[1].Call != 6 {
		t.Errorf("three attempts collapsed to %+v; want the first unknown one (call 2, callMs 200) and the definite one", h)
	}
	// A failing history's explanation names the operation that could
	// not be placed.
	_, info := porcupine.CheckOperationsVerbose(model, cases[1].h, 0)
	if got := explainIllegal(info, cases[1].h); !strings.Contains(got, "the first not placed:\n  #1 client 1") {
		t.Errorf("explanation of a stale read:\n%s", got)
	}
}

// An unknown outcome of a recheck of a root no operation can observe any
// more (RETIRED, no alias's current root, pinned by no run) leaves one
// possible state, not two; of a root a run still pins, two. Kept apart,
// such states doubled porcupine's set of possible states with every one
// for the rest of a chaos history.
func TestGateModelForgetsDeadWatermarks(t *testing.T) {
	m := gatePorcupine(3, 8, len(chaosAliases))
	s := newModelState(3, 8, len(chaosAliases))
	s, _ = s.step(modelOp{kind: "publish", alias: 0, root: 0, retain: 1})
	s, _ = s.step(modelOp{kind: "publish", alias: 0, root: 1, expect: 1, retain: 1})
	if s.rels[0] != 'R' {
		t.Fatalf("root 0 after it left alias 0's window of 1: %c, want R", s.rels[0])
	}
	recheck := modelOp{kind: "recheck", root: 0, value: chaosWM(0) + 30}
	states := func(s modelState) int {
		ok, next := m.Step([]any{s}, recheck, modelOut{unknown: true})
		if !ok {
			t.Fatal("the model refused an unknown outcome")
		}
		return len(next.([]any))
	}
	if n := states(s); n != 1 {
		t.Fatalf("an unknown recheck of a retired root nothing pins: %d possible states, want 1", n)
	}
	pinned := s
	pinned.runs = []modelRun{{id: 7, root: 0, world: chaosWorld, reset: -1, step: -1}}
	if n := states(pinned); n != 2 {
		t.Fatalf("an unknown recheck of a retired root a run pins: %d possible states, want 2", n)
	}
	// Where the watermark is still observable the outcome stays open:
	// root 1 is alias 0's current root.
	recheck.root, recheck.value = 1, chaosWM(1)+30
	if n := states(s); n != 2 {
		t.Fatalf("an unknown recheck of an alias's current root: %d possible states, want 2", n)
	}
}

// forgetDead is sound only if no operation can tell a state from the
// same state with its dead watermarks forgotten: from both, every
// operation must have the same outcomes, in answers and (forgotten again)
// in states. Otherwise porcupine would check histories against a model
// that lost state, and could accept one the gate's specification refuses.
// Random walks of every operation kind over a few roots (registers and
// rechecks of retired and invalid ones, rollbacks into and out of the
// window, runs superseded, failed and pruned) compare the two at every
// step; a forgetDead that ignored the runs pinning a root fails here.
func TestGateModelForgetDeadChangesNoAnswer(t *testing.T) {
	const roots, pool, walks, steps = 3, 10, 1000, 200
	forgotten := 0
	for seed := range uint64(walks) {
		rng := rand.New(rand.NewPCG(seed, 7))
		s := newModelState(roots, pool, len(chaosAliases))
		clock := int64(1000)
		runs, lastRun := [2]int{}, [2]int{-1, -1}
		for step := range steps {
			cl, a, root := rng.IntN(2), rng.IntN(len(chaosAliases)), rng.IntN(pool)
			gen := uint64(0)
			if s.aliases[a] != nil {
				gen = s.aliases[a].gen
			}
			var op modelOp
			switch rng.IntN(12) {
			case 0:
				op = modelOp{kind: "register", root: root, invalid: rng.IntN(6) == 0, retried: rng.IntN(4) == 0}
			case 1:
				op = modelOp{kind: "recheck", root: root, fence: rng.IntN(2), value: s.fences[0] + uint64(rng.IntN(40)), hits: rng.IntN(10) == 0}
			case 2, 3:
				if gen > 0 && rng.IntN(3) == 0 {
					gen--
				}
				op = modelOp{kind: "publish", alias: a, root: root, expect: gen, retain: 1 + rng.IntN(2)}
			case 4:
				op = modelOp{kind: "rollback", alias: a, root: root, expect: gen}
			case 5:
				op = modelOp{kind: "fence", fence: rng.IntN(2), value: s.fences[0] + uint64(rng.IntN(15))}
			case 6:
				runs[cl]++
				op = modelOp{kind: "createRun", alias: a, run: cl<<20 | runs[cl], prev: lastRun[cl], short: rng.IntN(3) == 0}
				lastRun[cl] = op.run
			case 7:
				op = modelOp{kind: "attest", run: lastRun[cl], rank: rng.IntN(2), root: root, stray: rng.IntN(10) == 0}
			case 8:
				op = modelOp{kind: "reassign", run: lastRun[cl], world: 2 + rng.IntN(2), rank: rng.IntN(2), expect: uint64(rng.IntN(3))}
			case 9:
				op = modelOp{kind: "checkpoint", run: lastRun[cl], root: root, value: uint64(rng.IntN(5))}
			case 10:
				op = modelOp{kind: "prune"}
			default:
				op = modelOp{kind: "readAlias", alias: a}
			}
			op.callMs = clock
			clock += int64(rng.IntN(600))
			op.retMs = clock
			if rng.IntN(10) == 0 {
				op.retMs = math.MaxInt64
			}
			f := s.forgetDead()
			if len(f.wms) < len(s.wms) {
				forgotten++
			}
			full, lean := s.outcomes(op), f.outcomes(op)
			if len(full) != len(lean) {
				t.Fatalf("walk %d, step %d, %s from %s: %d outcomes, %d with dead watermarks forgotten", seed, step, describeOp(op), describeState(s), len(full), len(lean))
			}
			for i := range full {
				if full[i].out != lean[i].out || !modelEqual(full[i].s.forgetDead(), lean[i].s.forgetDead()) {
					t.Fatalf("walk %d, step %d, %s from %s: outcome %d is %s, with dead watermarks forgotten %s (or the states differ)",
						seed, step, describeOp(op), describeState(s), i, describeOut(op, full[i].out), describeOut(op, lean[i].out))
				}
			}
			s = full[rng.IntN(len(full))].s
		}
	}
	if forgotten < walks {
		t.Fatalf("only %d steps had dead watermarks to forget: the walks test little", forgotten)
	}
}
