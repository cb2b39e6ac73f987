package raftgate

import (
	"bytes"
	"io"
	"testing"
)

// FuzzRestore feeds arbitrary snapshot bytes to FSM.Restore (what a
// follower installs from the leader, or a node reads from its snapshot
// store at start-up). A snapshot that Restore accepts must be a state the
// FSM can keep working on: no table holds a null entry, the scripted
// commands applied on top never panic and keep it valid, and it still
// round-trips through its encoding.
func FuzzRestore(f *testing.F) {
	fuzzSetup(f)
	f.Add(fuzzBase)
	enc, _ := EncodeState(NewState())
	f.Add(enc)
	// A null join record: GET /v1/status and the leader's version poll
	// dereference every entry.
	f.Add(bytes.Replace(enc, []byte(`"nodes":{}`), []byte(`"nodes":{"x":null}`), 1))
	// A state with a cluster identity, at the version it needs.
	s := NewState()
	s.ClusterVersion, s.ClusterID = CommandVersion, "0123456789abcdef0123456789abcdef"
	ided, _ := EncodeState(s)
	f.Add(ided)
	// States whose releases and rechecks record signers (version 7),
	// and one from before them.
	for _, name := range []string{"state-v6.json", "state-v7.json"} {
		f.Add(readGolden(f, name))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		fsm := NewFSM()
		if err := fsm.Restore(io.NopCloser(bytes.NewReader(b))); err != nil {
			return
		}
		var withNil []string
		fsm.Read(func(s *State) { _, withNil = pointerTables(s) })
		if len(withNil) > 0 {
			t.Fatalf("restored a state with a null entry in %v", withNil)
		}
		for _, c := range fuzzSeeds {
			fsm.ApplyBytes(c)
			var err error
			fsm.Read(func(s *State) { err = s.Validate() })
			if err != nil {
				t.Fatalf("restored state invalid after %s: %v", c, err)
			}
		}
		out, err := fsm.Encode()
		if err != nil {
			t.Fatal(err)
		}
		back, err := DecodeState(out)
		if err != nil {
			t.Fatalf("state does not decode after restore and apply: %v", err)
		}
		again, _ := EncodeState(back)
		if !bytes.Equal(out, again) {
			t.Fatal("snapshot round trip changed bytes")
		}
	})
}
