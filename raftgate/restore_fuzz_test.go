package raftgate

import (
	"bytes"
	"io"
	"testing"
)

// FuzzRestore feeds arbitrary snapshot bytes to FSM.Restore (what a
// follower installs from the leader, or a node reads from its snapshot
// store at start-up). A snapshot that Restore accepts must be a state the
// FSM can keep working on: the scripted commands applied on top never
// panic, keep it valid, and it still round-trips through its encoding.
func FuzzRestore(f *testing.F) {
	fuzzSetup(f)
	f.Add(fuzzBase)
	enc, _ := EncodeState(NewState())
	f.Add(enc)
	f.Fuzz(func(t *testing.T, b []byte) {
		fsm := NewFSM()
		if err := fsm.Restore(io.NopCloser(bytes.NewReader(b))); err != nil {
			return
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
