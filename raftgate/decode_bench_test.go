package raftgate

import (
	"fmt"
	"testing"

	"github.com/shardproof/shardproof/manifest"
)

// BenchmarkDecodeCommand measures DecodeCommand, which the API and every
// member's Apply run on each command: an attestation of a rank of 1,000
// shards, and a publish.
func BenchmarkDecodeCommand(b *testing.B) {
	for _, c := range []Command{
		&Publish{Header: Header{Now: 1_700_000_000_000}, Alias: "main", Root: dig("r1"), ExpectedGeneration: 7},
		&Attest{Header: Header{Now: 1_700_000_000_000}, Run: "run-1", Rank: 3, Root: dig("r1"), Shards: shardsOf("r1", 1000)},
	} {
		doc, err := EncodeCommand(c)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("%s/%dB", commandType(c), len(doc)), func(b *testing.B) {
			b.SetBytes(int64(len(doc)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := DecodeCommand(doc); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkDecodeBackup measures DecodeBackup on the state fullState
// builds, its release's shards grown to 10,000.
func BenchmarkDecodeBackup(b *testing.B) {
	f := NewFSM()
	root := dig("r1")
	for _, c := range []Command{
		&Register{Root: root, Shards: shardsOf("r1", 10_000), Report: &ReportSummary{Digest: dig("report/r1"), Verdict: manifest.Verified, DatasetSnapshot: dig("snap")}},
		&Publish{Alias: "main", Root: root},
		&CreateRun{Run: "live", Alias: "main", WorldSize: 2},
		&Join{ID: "n1", RaftAddr: "127.0.0.1:1", HTTPAddr: "127.0.0.1:2"},
	} {
		if r := f.ApplyCommand(c); r.Err != nil {
			b.Fatalf("%T: %v", c, r.Err)
		}
	}
	doc, err := f.Encode()
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(doc)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeBackup(doc); err != nil {
			b.Fatal(err)
		}
	}
}
