package raftgate

import (
	"bytes"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/shardproof/shardproof/manifest"
)

// cloneHarness is a gate with something in every table of its state: a
// cluster version and identity, fences with a log, releases with reports
// and rechecks, a pruned one, aliases, permits, a run with attestations
// and a checkpoint, a pruned run, a node.
func cloneHarness(t *testing.T) *harness {
	h := newHarness(t)
	h.ok(&SetClusterVersion{Version: CommandVersion, ClusterID: newClusterID()})
	h.ok(&AdvanceFence{Kind: FenceTombstone, Value: 3, Log: dig("log at 3")})
	old := h.verified("old", 4, 3, 0)
	h.ok(&Publish{Alias: "main", Root: old})
	h.ok(&CreateRun{Run: "gone", Alias: "main", WorldSize: 1})
	h.ok(&CancelRun{Run: "gone"})
	root := h.verified("r1", 6, 3, 0)
	h.ok(&Publish{Alias: "main", Root: root, ExpectedGeneration: 1})
	h.ok(&Publish{Alias: "other", Root: root})
	h.ok(&RecheckCmd{Root: root, Kind: FenceTombstone, Value: 3, Report: dig("recheck"), Hits: 0})
	h.ok(&CreateRun{Run: "live", Alias: "main", WorldSize: 3, BarrierTimeoutMs: 30 * 24 * 3600 * 1000})
	h.ok(&Attest{Run: "live", Rank: 0, Root: root, Shards: []manifest.Digest{shardsOf("r1", 6)[0], shardsOf("r1", 6)[3]}})
	h.ok(&Join{ID: "n1", RaftAddr: "127.0.0.1:1", HTTPAddr: "127.0.0.1:2"})
	h.now += 48 * 3600 * 1000
	h.ok(&Prune{OlderThanMs: 3600 * 1000})
	return h
}

// A snapshot is the state when Raft asked for it, whatever Apply does to
// the state while Persist encodes it: the copy Snapshot takes shares
// nothing that Apply writes to (a list Apply appends to or sets an
// element of, a map it adds to, a record it changes), and encodes to the
// bytes of the state it copied.
func TestSnapshotIsTheStateItWasTaken(t *testing.T) {
	h := cloneHarness(t)
	want, err := h.f.Encode()
	if err != nil {
		t.Fatal(err)
	}
	snap, err := h.f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	h.f.Read(func(s *State) {
		if path := sharedMemory(reflect.ValueOf(s), reflect.ValueOf(snap.(*snapshot).s), "$"); path != "" {
			t.Fatalf("the snapshot shares %s with the state", path)
		}
	})
	// Every table changes, in place where Apply changes it so.
	root := dig("r1")
	list := shardsOf("r1", 6)
	h.ok(&Attest{Run: "live", Rank: 1, Root: root, Shards: []manifest.Digest{list[1], list[4]}})
	h.ok(&Attest{Run: "live", Rank: 2, Root: root, Shards: []manifest.Digest{list[2], list[5]}})
	h.ok(&AdmitCheckpoint{Run: "live", Step: 10, Root: root})
	h.ok(&Reassign{Run: "live", WorldSize: 2})
	h.ok(&RecheckCmd{Root: root, Kind: FenceTombstone, Value: 3, Report: dig("recheck 2"), Hits: 0})
	h.ok(&AdvanceFence{Kind: FenceTombstone, Value: 4, Log: dig("log at 4")})
	r2 := h.verified("r2", 3, 4, 0)
	h.ok(&Publish{Alias: "main", Root: r2, ExpectedGeneration: 2})
	h.ok(&Publish{Alias: "other", Root: r2, ExpectedGeneration: 1})
	h.ok(&CancelRun{Run: "live"})
	h.ok(&Join{ID: "n2", RaftAddr: "127.0.0.1:3", HTTPAddr: "127.0.0.1:4"})
	h.now += 48 * 3600 * 1000
	h.ok(&Prune{OlderThanMs: 3600 * 1000})
	if now, _ := h.f.Encode(); bytes.Equal(now, want) {
		t.Fatal("the commands changed nothing")
	}
	sink := &memSink{}
	if err := snap.Persist(sink); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(sink.Bytes(), want) {
		t.Fatalf("the snapshot persisted\n%s\nwhere the state was\n%s", sink.Bytes(), want)
	}
}

// sharedMemory returns the path of the first map, pointer or non-empty
// list a and b share, "" when they share none.
func sharedMemory(a, b reflect.Value, path string) string {
	switch a.Kind() {
	case reflect.Pointer:
		if a.IsNil() || b.IsNil() {
			return ""
		}
		if a.Pointer() == b.Pointer() {
			return path
		}
		return sharedMemory(a.Elem(), b.Elem(), path)
	case reflect.Map:
		if a.IsNil() || b.IsNil() {
			return ""
		}
		if a.Pointer() == b.Pointer() {
			return path
		}
		for it := a.MapRange(); it.Next(); {
			if v := b.MapIndex(it.Key()); v.IsValid() {
				if p := sharedMemory(it.Value(), v, fmt.Sprintf("%s[%v]", path, it.Key())); p != "" {
					return p
				}
			}
		}
	case reflect.Slice:
		if a.Len() > 0 && b.Len() > 0 && a.Pointer() == b.Pointer() {
			return path
		}
		for i := range min(a.Len(), b.Len()) {
			if p := sharedMemory(a.Index(i), b.Index(i), fmt.Sprintf("%s[%d]", path, i)); p != "" {
				return p
			}
		}
	case reflect.Struct:
		for i := range a.NumField() {
			if p := sharedMemory(a.Field(i), b.Field(i), path+"."+a.Type().Field(i).Name); p != "" {
				return p
			}
		}
	}
	return ""
}

// Snapshot copies the state and leaves its encoding to Persist, which
// Raft runs beside later Applies: its work does not grow with the
// shards. Encoding in Snapshot, it allocated three times per shard digest
// (a release of 10,000 shards and a run that attested them, 80,000
// allocations), and held up every Apply behind it for as long: seconds
// at 30 releases of 30,000 shards (BenchmarkReleaseScale).
func TestSnapshotDoesNotEncode(t *testing.T) {
	f := NewFSM()
	const shards, ranks = 10_000, 4
	root := dig("r1")
	list := shardsOf("r1", shards)
	for _, c := range []Command{
		&Register{Root: root, Shards: list, Report: &ReportSummary{Digest: dig("report/r1"), Verdict: manifest.Verified, DatasetSnapshot: dig("snap")}},
		&Publish{Alias: "main", Root: root},
		&CreateRun{Run: "live", Alias: "main", WorldSize: ranks},
	} {
		if r := f.ApplyCommand(c); r.Err != nil {
			t.Fatalf("%T: %v", c, r.Err)
		}
	}
	for r := range ranks {
		var mine []manifest.Digest
		for k := r; k < shards; k += ranks {
			mine = append(mine, list[k])
		}
		if res := f.ApplyCommand(&Attest{Run: "live", Rank: r, Root: root, Shards: mine}); res.Err != nil {
			t.Fatal(res.Err)
		}
	}
	allocs := testing.AllocsPerRun(3, func() {
		if _, err := f.Snapshot(); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 1000 {
		t.Fatalf("Snapshot of a release of %d shards allocates %.0f times", shards, allocs)
	}
}

// Every type the state holds is one cloneState copies apart: numbers,
// strings, booleans, arrays, structs of exported fields, pointers, maps
// and slices of those. A field added of another kind (a chan, a func,
// an interface, which it would share, or a time.Time, a struct with
// unexported pointer fields, on which it panics, in Snapshot, on Raft's
// FSM goroutine) fails here, whether or not a test fills it.
func TestCloneStateCopiesEveryType(t *testing.T) {
	if bad := uncopyable(reflect.TypeFor[State](), "State", map[reflect.Type]bool{}); len(bad) > 0 {
		t.Fatalf("cloneState cannot copy %v", bad)
	}
	// The check sees what it must.
	type inner struct {
		//lint:ignore U1000 read only through reflection, as unexported fields are
		m map[string]int
	}
	type odd struct {
		C  chan int
		F  func()
		I  any
		T  time.Time
		In []inner
		//lint:ignore U1000 read only through reflection, as unexported fields are
		ok int
	}
	want := []string{"odd.C (chan int)", "odd.F (func())", "odd.I (interface {})", "odd.T.loc (unexported *time.Location)", "odd.In[].m (unexported map[string]int)"}
	if bad := uncopyable(reflect.TypeFor[odd](), "odd", map[reflect.Type]bool{}); !reflect.DeepEqual(bad, want) {
		t.Fatalf("uncopyable found %q, want %q", bad, want)
	}
}

// uncopyable returns the paths of what in type t (named path) deepCopy
// cannot copy apart.
func uncopyable(t reflect.Type, path string, seen map[reflect.Type]bool) []string {
	if seen[t] {
		return nil
	}
	seen[t] = true
	defer delete(seen, t)
	switch t.Kind() {
	case reflect.Chan, reflect.Func, reflect.Interface, reflect.UnsafePointer:
		return []string{fmt.Sprintf("%s (%s)", path, t)}
	case reflect.Pointer, reflect.Slice, reflect.Array:
		return uncopyable(t.Elem(), path+"[]", seen)
	case reflect.Map:
		return append(uncopyable(t.Key(), path+"{key}", seen), uncopyable(t.Elem(), path+"[]", seen)...)
	case reflect.Struct:
		var bad []string
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() {
				if hasPointers(f.Type) {
					bad = append(bad, fmt.Sprintf("%s.%s (unexported %s)", path, f.Name, f.Type))
				}
				continue
			}
			bad = append(bad, uncopyable(f.Type, path+"."+f.Name, seen)...)
		}
		return bad
	}
	return nil
}

// A copy of a state holding every field, each map and list nil, empty
// or full at every depth, is equal to it (nil where it was nil, empty
// where it was empty), shares nothing with it and encodes to its bytes
// (omitempty and omitzero fields alike). The state is filled by
// reflection, so a field added is filled too.
func TestCloneStateOfEveryField(t *testing.T) {
	for mode, marks := range map[fillMode][]string{fillNil: {`"releases":null`}, fillEmpty: {`"releases":{}`}, fillFull: {`null`, `[]`, `"shards":[`}} {
		s := new(State)
		fillValue(reflect.ValueOf(s).Elem(), mode, new(int))
		want, err := EncodeState(s)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range marks {
			if !bytes.Contains(want, []byte(m)) {
				t.Fatalf("no %s in the filled state %s", m, want)
			}
		}
		c := cloneState(s)
		if !reflect.DeepEqual(c, s) {
			t.Fatalf("the copy of %s differs from it", want)
		}
		if path := sharedMemory(reflect.ValueOf(s), reflect.ValueOf(c), "$"); path != "" {
			t.Fatalf("the copy shares %s with the state", path)
		}
		got, err := EncodeState(c)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("the copy encodes to\n%s\nthe state to\n%s", got, want)
		}
		// Changed in place, the state leaves the copy as it was.
		fillValue(reflect.ValueOf(s).Elem(), fillFull, new(int))
		if again, _ := EncodeState(c); !bytes.Equal(again, want) {
			t.Fatal("filling the state again changed its copy")
		}
	}
}

type fillMode int

const (
	fillNil fillMode = iota
	fillEmpty
	fillFull
)

// fillValue sets v and everything under it: a pointer is nil at
// fillNil, a map or list nil at fillNil, empty at fillEmpty and, at
// fillFull, of three entries, whose own maps and lists are nil, empty
// and full in turn; numbers, strings and booleans take values from n,
// never zero, so no omitempty field is left out.
func fillValue(v reflect.Value, mode fillMode, n *int) {
	next := func() int { *n++; return *n }
	switch v.Kind() {
	case reflect.Pointer:
		if mode == fillNil {
			v.SetZero()
			return
		}
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		}
		fillValue(v.Elem(), mode, n)
	case reflect.Slice:
		switch mode {
		case fillNil:
			v.SetZero()
		case fillEmpty:
			v.Set(reflect.MakeSlice(v.Type(), 0, 0))
		default:
			if v.Len() != 3 {
				v.Set(reflect.MakeSlice(v.Type(), 3, 3))
			}
			for k := range 3 {
				fillValue(v.Index(k), fillMode(k), n)
			}
		}
	case reflect.Map:
		switch mode {
		case fillNil:
			v.SetZero()
		case fillEmpty:
			v.Set(reflect.MakeMap(v.Type()))
		default:
			if v.IsNil() {
				v.Set(reflect.MakeMap(v.Type()))
			}
			for k := range 3 {
				key := reflect.New(v.Type().Key()).Elem()
				fillValue(key, fillFull, &[]int{k}[0])
				e := reflect.New(v.Type().Elem()).Elem()
				if old := v.MapIndex(key); old.IsValid() {
					e.Set(old)
				}
				fillValue(e, fillMode(k), n)
				v.SetMapIndex(key, e)
			}
		}
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fillValue(v.Field(i), mode, n)
			}
		}
	case reflect.Array:
		for k := range v.Len() {
			fillValue(v.Index(k), mode, n)
		}
	case reflect.String:
		v.SetString(fmt.Sprintf("s%d", next()))
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(int64(next() % 100))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(uint64(next()%100 + 1))
	default:
		panic(fmt.Sprintf("fillValue: %s", v.Type()))
	}
}
