package raftgate

import (
	"bytes"
	"io"
	"strings"
	"sync"
	"testing"
)

var (
	fuzzBaseOnce sync.Once
	fuzzBase     []byte
	fuzzSeeds    [][]byte
)

// fuzzSetup builds, once, a state with aliases, permits and runs for
// commands to act on, and seeds drawn from a scripted log.
func fuzzSetup(t testing.TB) {
	fuzzBaseOnce.Do(func() {
		log := script(t, 11, 400)
		f := NewFSM()
		for _, e := range log {
			f.ApplyBytes(e)
		}
		fuzzBase, _ = f.Encode()
		fuzzSeeds = log[len(log)-60:]
	})
}

// FuzzApply feeds arbitrary bytes to command decoding and Apply on a
// populated state: it must never panic, the state must stay valid, and the
// state must round-trip through its snapshot encoding.
func FuzzApply(f *testing.F) {
	fuzzSetup(f)
	for _, s := range fuzzSeeds {
		f.Add(s)
	}
	f.Add([]byte(`{"type":"reassign","run":"r1","worldSize":65536,"reset":[-1]}`))
	f.Add([]byte(`{"type":"attest","run":"r1","rank":-1,"root":"sha256:0000000000000000000000000000000000000000000000000000000000000000","shards":null}`))
	f.Add([]byte(`{"type":"createRun","run":"z","alias":"a","worldSize":2,"assignment":[[0,0],[]]}`))
	f.Add([]byte(`{"type":"prune","now":1000000000,"olderThanMs":0}`))
	f.Add([]byte(`{"type":"setClusterVersion","now":1,"version":1}`))
	f.Add([]byte(`{"type":"setClusterVersion","now":1,"version":18446744073709551615}`))
	f.Add([]byte(`{"type":"setClusterVersion","now":1,"version":4,"clusterID":"0123456789abcdef0123456789abcdef"}`))
	f.Add([]byte(`{"type":"setClusterVersion","now":1,"version":3,"clusterID":"0123456789ABCDEF0123456789ABCDEF"}`))
	f.Add([]byte(`{"type":"publish","alias":"a","root":"sha256:0000000000000000000000000000000000000000000000000000000000000000","expectedGeneration":18446744073709551615}`))
	// Commands naming signers (version 7), which the base state's
	// version refuses, and a raise to it.
	for _, e := range readGoldenLog(f, "log-v7.jsonl") {
		f.Add(e)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := DecodeState(fuzzBase)
		if err != nil {
			t.Fatal(err)
		}
		fsm := NewFSM()
		fsm.state = s
		fsm.ApplyBytes(data)
		var enc []byte
		fsm.Read(func(s *State) {
			if err := s.Validate(); err != nil {
				t.Fatalf("state invalid after %q: %v", data, err)
			}
			enc, _ = EncodeState(s)
		})
		back, err := DecodeState(enc)
		if err != nil {
			t.Fatalf("snapshot does not decode after %q: %v", data, err)
		}
		again, _ := EncodeState(back)
		if !bytes.Equal(enc, again) {
			t.Fatalf("snapshot round trip changed bytes after %q", data)
		}
	})
}

// A snapshot whose nextPermit is below a permit it holds is refused: the
// next permit issued would overwrite one that aliases and runs name.
func TestStateRefusesPermitAboveNextPermit(t *testing.T) {
	fuzzSetup(t)
	s, err := DecodeState(fuzzBase)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Permits) == 0 {
		t.Fatal("the base state holds no permits")
	}
	s.NextPermit = 0
	b, err := EncodeState(s)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := DecodeState(b); err == nil || !strings.Contains(err.Error(), "nextPermit") {
		t.Fatalf("state with nextPermit 0 and %d permits: %v, want refused", len(s.Permits), err)
	}
	if err := NewFSM().Restore(io.NopCloser(bytes.NewReader(b))); err == nil {
		t.Fatal("Restore accepted it")
	}
}
