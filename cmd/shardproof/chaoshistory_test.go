//go:build unix

package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/shardproof/shardproof/internal/errcode"
)

// chaosRecord is one operation of a chaos history as written to
// SHARDPROOF_CHAOS_DIR, so a history porcupine found Illegal, or could not
// decide in its time, can be checked again without running the cluster
// (TestGateChaosReplay).
type chaosRecord struct {
	Client      int          `json:"client"`
	Call        int64        `json:"call"`
	Return      int64        `json:"return"`
	Kind        string       `json:"kind"`
	Alias       int          `json:"alias,omitempty"`
	Root        int          `json:"root,omitempty"`
	Expect      uint64       `json:"expect,omitempty"`
	Retain      int          `json:"retain,omitempty"`
	Fence       int          `json:"fence,omitempty"`
	Value       uint64       `json:"value,omitempty"`
	Retried     bool         `json:"retried,omitempty"`
	Run         int          `json:"run,omitempty"`
	Rank        int          `json:"rank,omitempty"`
	Prev        int          `json:"prev,omitempty"`
	World       int          `json:"world,omitempty"`
	Stray       bool         `json:"stray,omitempty"`
	Short       bool         `json:"short,omitempty"`
	Hits        bool         `json:"hits,omitempty"`
	Invalid     bool         `json:"invalid,omitempty"`
	CallMs      int64        `json:"callMs"`
	RetMs       int64        `json:"retMs"`
	Unknown     bool         `json:"unknown,omitempty"`
	Code        errcode.Code `json:"code,omitempty"`
	Gen         uint64       `json:"gen,omitempty"`
	OutRoot     int          `json:"outRoot,omitempty"`
	Fences      [2]uint64    `json:"fences"`
	State       byte         `json:"state,omitempty"`
	Epoch       uint64       `json:"epoch,omitempty"`
	OutWorld    int          `json:"outWorld,omitempty"`
	Attested    int          `json:"attested,omitempty"`
	Open        bool         `json:"open,omitempty"`
	Step        int64        `json:"step,omitempty"`
	Checkpoints int64        `json:"checkpoints,omitempty"`
}

func toRecord(o porcupine.Operation) chaosRecord {
	in, out := o.Input.(modelOp), o.Output.(modelOut)
	return chaosRecord{
		Client: o.ClientId, Call: o.Call, Return: o.Return,
		Kind: in.kind, Alias: in.alias, Root: in.root, Expect: in.expect, Retain: in.retain, Fence: in.fence, Value: in.value,
		Retried: in.retried, Run: in.run, Rank: in.rank, Prev: in.prev, World: in.world, Stray: in.stray, Short: in.short,
		Hits: in.hits, Invalid: in.invalid, CallMs: in.callMs, RetMs: in.retMs,
		Unknown: out.unknown, Code: out.code, Gen: out.gen, OutRoot: out.root, Fences: out.fences, State: out.state,
		Epoch: out.epoch, OutWorld: out.world, Attested: out.attested, Open: out.open, Step: out.step, Checkpoints: out.ckpts,
	}
}

func (r chaosRecord) operation() porcupine.Operation {
	in := modelOp{kind: r.Kind, alias: r.Alias, root: r.Root, expect: r.Expect, retain: r.Retain, fence: r.Fence, value: r.Value,
		retried: r.Retried, run: r.Run, rank: r.Rank, prev: r.Prev, world: r.World, stray: r.Stray, short: r.Short,
		hits: r.Hits, invalid: r.Invalid, callMs: r.CallMs, retMs: r.RetMs}
	out := modelOut{unknown: r.Unknown, code: r.Code, gen: r.Gen, root: r.OutRoot, fences: r.Fences, state: r.State,
		epoch: r.Epoch, world: r.OutWorld, attested: r.Attested, open: r.Open, step: r.Step, ckpts: r.Checkpoints}
	return porcupine.Operation{ClientId: r.Client, Input: in, Call: r.Call, Output: out, Return: r.Return}
}

// writeHistory writes ops as JSON to path.
func writeHistory(path string, ops []porcupine.Operation) error {
	recs := make([]chaosRecord, len(ops))
	for i, o := range ops {
		recs[i] = toRecord(o)
	}
	b, err := json.Marshal(recs)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

func readHistory(path string) ([]porcupine.Operation, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var recs []chaosRecord
	if err := json.Unmarshal(b, &recs); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	ops := make([]porcupine.Operation, len(recs))
	for i, r := range recs {
		ops[i] = r.operation()
	}
	return ops, nil
}

// historyShape says what makes a history hard for porcupine: operations
// with an unknown outcome (each may or may not have taken effect, so the
// set of states the search carries can double with every one open at
// once), those that never got an answer (open to the end of the history),
// and the most operations open at one instant.
type historyShape struct {
	ops, unknown, neverAnswered int
	maxOpen, maxOpenUnknown     int
	longestUnknown              time.Duration
}

func shapeOf(ops []porcupine.Operation) historyShape {
	var s historyShape
	s.ops = len(ops)
	type ev struct {
		t       int64
		d       int // +1 call, -1 return
		unknown bool
	}
	var evs []ev
	for _, o := range ops {
		u := o.Output.(modelOut).unknown
		if u {
			s.unknown++
			if o.Return == math.MaxInt64 {
				s.neverAnswered++
			} else {
				s.longestUnknown = max(s.longestUnknown, time.Duration(o.Return-o.Call))
			}
		}
		evs = append(evs, ev{o.Call, 1, u}, ev{o.Return, -1, u})
	}
	// Calls before returns at the same instant: porcupine's intervals are
	// closed.
	slices.SortFunc(evs, func(a, b ev) int {
		if a.t != b.t {
			if a.t < b.t {
				return -1
			}
			return 1
		}
		return b.d - a.d
	})
	open, openU := 0, 0
	for _, e := range evs {
		open += e.d
		if e.unknown {
			openU += e.d
		}
		s.maxOpen, s.maxOpenUnknown = max(s.maxOpen, open), max(s.maxOpenUnknown, openU)
	}
	return s
}

func (s historyShape) String() string {
	return fmt.Sprintf("%d operations, %d with an unknown outcome (%d never answered, the longest otherwise open %s), at most %d open at once (%d of them unknown)",
		s.ops, s.unknown, s.neverAnswered, s.longestUnknown.Round(time.Millisecond), s.maxOpen, s.maxOpenUnknown)
}

// TestGateChaosReplay checks a history TestGateChaos wrote (the file named
// by SHARDPROOF_CHAOS_REPLAY) again, with the chaos test's model.
func TestGateChaosReplay(t *testing.T) {
	path := os.Getenv("SHARDPROOF_CHAOS_REPLAY")
	if path == "" {
		t.Skip("SHARDPROOF_CHAOS_REPLAY names no history")
	}
	ops, err := readHistory(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("history: %s", shapeOf(ops))
	ops = collapseRetries(ops)
	t.Logf("with each command's unknown attempts one operation: %s", shapeOf(ops))
	model := gatePorcupine(chaosRoots, chaosPool, len(chaosAliases))
	start := time.Now()
	res := porcupine.CheckOperationsTimeout(model, ops, 5*time.Minute)
	t.Logf("porcupine: %s in %s", res, time.Since(start).Round(time.Millisecond))
	if os.Getenv("SHARDPROOF_CHAOS_REPLAY_VERBOSE") != "" {
		start = time.Now()
		res, _ := porcupine.CheckOperationsVerbose(model, ops, 5*time.Minute)
		t.Logf("porcupine, verbose: %s in %s", res, time.Since(start).Round(time.Millisecond))
	}
	if res != porcupine.Ok {
		t.Fatalf("history of %d operations is %s", len(ops), res)
	}
}

// collapseRetries returns ops with the attempts of one command whose
// outcome is unknown (a client's INDETERMINATE answers, retried until a
// definite one) made one operation: the first attempt's, from its call
// (and callMs) to the answer they share. The gate answers a repeat of an
// applied command as a no-op, so k such attempts reach the states one
// does, the first taking effect within the first's span, which holds the
// others'; as k operations, open together, they multiplied porcupine's
// search (57 unknown attempts open at once under load left a 3-minute
// history Unknown after 5 minutes of checking). The definite attempt
// stays an operation of its own.
func collapseRetries(ops []porcupine.Operation) []porcupine.Operation {
	type attempts struct {
		client int
		ret    int64
		op     modelOp
	}
	first := map[attempts]int{}
	out := make([]porcupine.Operation, 0, len(ops))
	for _, o := range ops {
		in, res := o.Input.(modelOp), o.Output.(modelOut)
		if !res.unknown {
			out = append(out, o)
			continue
		}
		key := in
		key.retried, key.callMs, key.retMs = false, 0, 0
		k := attempts{o.ClientId, o.Return, key}
		i, ok := first[k]
		if !ok {
			first[k] = len(out)
			out = append(out, o)
			continue
		}
		p := &out[i]
		pin := p.Input.(modelOp)
		if o.Call < p.Call {
			p.Call = o.Call
		}
		pin.callMs, pin.retMs = min(pin.callMs, in.callMs), max(pin.retMs, in.retMs)
		p.Input = pin
	}
	return out
}
