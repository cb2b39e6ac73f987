package raftgate

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
)

// stateTables are the maps of pointers a gate state holds.
var stateTables = []string{"releases", "aliases", "permits", "runs", "prunedRuns", "nodes"}

// pointerTables returns the JSON names of State's maps of pointers, and
// which of them hold a nil entry in s.
func pointerTables(s *State) (tables, withNil []string) {
	v := reflect.ValueOf(s).Elem()
	for i := range v.NumField() {
		f := v.Type().Field(i)
		if f.Type.Kind() != reflect.Map || f.Type.Elem().Kind() != reflect.Pointer {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		tables = append(tables, name)
		for it := v.Field(i).MapRange(); it.Next(); {
			if it.Value().IsNil() {
				withNil = append(withNil, name)
				break
			}
		}
	}
	return tables, withNil
}

// fullState is the state of a gate with an entry in every map of
// pointers (stateTables).
func fullState(t *testing.T) []byte {
	t.Helper()
	f := NewFSM()
	root, report := dig("r1"), dig("report/r1")
	for _, c := range []Command{
		&Register{Root: root, Shards: shardsOf("r1", 2), Report: &ReportSummary{Digest: report, Verdict: manifest.Verified, DatasetSnapshot: dig("snap")}},
		&Publish{Alias: "main", Root: root},
		&CreateRun{Run: "gone", Alias: "main", WorldSize: 1},
		&CancelRun{Header: Header{Now: 1}, Run: "gone"},
		&Prune{Header: Header{Now: 1_000_000}, OlderThanMs: 1},
		&CreateRun{Run: "live", Alias: "main", WorldSize: 2},
		&Join{ID: "n1", RaftAddr: "127.0.0.1:1", HTTPAddr: "127.0.0.1:2"},
	} {
		if r := f.ApplyCommand(c); r.Err != nil {
			t.Fatalf("%T: %v", c, r.Err)
		}
	}
	b, err := f.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// withNullEntry returns state with the first entry of table set to null.
func withNullEntry(t *testing.T, state []byte, table string) []byte {
	t.Helper()
	var top map[string]json.RawMessage
	if err := json.Unmarshal(state, &top); err != nil {
		t.Fatal(err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(top[table], &m); err != nil || len(m) == 0 {
		t.Fatalf("table %s of the state: %v, %d entries", table, err, len(m))
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	m[keys[0]] = json.RawMessage("null")
	var err error
	if top[table], err = json.Marshal(m); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(top)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A state with a null entry in any of its maps of pointers ("nodes":
// {"x":null}) is no gate state: a gate never writes one, and code that
// reads the state takes every entry for one (GET /v1/status dereferenced
// a null node and panicked). DecodeState, and so a backup (Config.Restore)
// and a snapshot Raft restores (FSM.Restore), refuse it with BAD_DOCUMENT
// and change nothing. The nodes table was the one Validate did not check:
// such a snapshot restored.
func TestStateRefusesNullEntries(t *testing.T) {
	full := fullState(t)
	s, err := DecodeBackup(full)
	if err != nil {
		t.Fatalf("the state the edits start from: %v", err)
	}
	if tables, _ := pointerTables(s); !slices.Equal(slices.Sorted(slices.Values(tables)), slices.Sorted(slices.Values(stateTables))) {
		t.Fatalf("State's maps of pointers are %v; the test edits %v", tables, stateTables)
	}
	for _, table := range stateTables {
		b := withNullEntry(t, full, table)
		if _, err := DecodeState(b); errcode.Of(err) != errcode.BadDocument {
			t.Errorf("%s: DecodeState: %v, want BAD_DOCUMENT", table, err)
		}
		f := NewFSM()
		if err := f.Restore(io.NopCloser(bytes.NewReader(full))); err != nil {
			t.Fatal(err)
		}
		if err := f.Restore(io.NopCloser(bytes.NewReader(b))); errcode.Of(err) != errcode.BadDocument {
			t.Errorf("%s: FSM.Restore: %v, want BAD_DOCUMENT", table, err)
		}
		if got, _ := f.Encode(); !bytes.Equal(got, full) {
			t.Errorf("%s: the refused restore changed the state:\nbefore %s\nafter  %s", table, full, got)
		}
		cfg := TestConfig(t.TempDir(), "n1")
		cfg.Restore = b
		n := NewNode(cfg)
		if err := n.Start(ctxT(t, 10*time.Second)); errcode.Of(err) != errcode.BadDocument {
			n.Shutdown()
			t.Errorf("%s: restore of a backup: %v, want BAD_DOCUMENT", table, err)
		}
	}
}

// A member whose newest snapshot holds a null node (a crafted or damaged
// snapshot file) does not start: it halts at the snapshot, BAD_DOCUMENT
// inside GATE_HALTED, as at any snapshot it cannot decode. It started and
// answered GET /v1/status with a panic.
func TestStartHaltsAtSnapshotWithNullNode(t *testing.T) {
	ctx := ctxT(t, time.Minute)
	cfg := TestConfig(t.TempDir(), "gate1")
	n := StartTestNode(t, cfg)
	waitLeader(t, n)
	stopOnSnapshot(t, n, withNullEntry(t, fullState(t), "nodes"))
	c := cfg
	c.Bootstrap = false
	n = NewNode(c)
	err := n.Start(ctx)
	if err == nil {
		if _, serr := NewClient(n.URL()).Status(ctx); serr != nil {
			t.Logf("status of the started member: %v", serr)
		}
		n.Shutdown()
	}
	var h *HaltError
	if !errors.As(err, &h) || !h.Snapshot || errcode.Of(h.Err) != errcode.BadDocument {
		t.Fatalf("start on a snapshot with a null node: %v, want GATE_HALTED at a snapshot, BAD_DOCUMENT", err)
	}
}
