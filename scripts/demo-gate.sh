#!/usr/bin/env bash
# The gate story of `make demo`: publish, a 4-rank run, an alias switch, a
# replacement worker, a fence advance, rollback and a candidate kept out.
# Usage: demo-gate.sh BIN DIR [ROOT]: DIR/store is the file store; ROOT is
# generation 1 (default: a small synthetic release). DEMO_GATE_PORT picks
# the loopback port of the demo's single-node gate (default 7490).
set -euo pipefail
bin=$1; dir=$2; r1=${3:-}
store=$dir/store
port=${DEMO_GATE_PORT:-7490}
export SHARDPROOF_GATE=http://127.0.0.1:$port
mkdir -p "$dir"

say() { printf '\n== %s\n' "$*"; }
# expect STATUS CMD…: run CMD, show its output, and fail the demo unless it
# exits with STATUS.
expect() {
	local want=$1; shift
	set +e; "$@"; local got=$?; set -e
	if [ "$got" != "$want" ]; then
		echo "demo: expected exit $want, got $got: $*" >&2
		exit 1
	fi
	[ "$want" = 0 ] || echo "   (exit $got, as expected)"
}
field() { sed -n "s/^$1 //p"; }

pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
}
trap cleanup EXIT

say "two releases (synth is idempotent: same seed, same root)"
if [ -z "$r1" ]; then
	r1=$("$bin" synth --samples 4000 --shards 8 --seed 1 --store "$store" 2>/dev/null | field root)
fi
r2=$("$bin" synth --samples 4000 --shards 8 --seed 2 --store "$store" 2>/dev/null | field root)
echo "generation 1 candidate $r1"
echo "generation 2 candidate $r2"

say "start a single-node gate on 127.0.0.1:$port"
# The demo must talk to its own gate: one already on these ports (another
# demo, a real gate) would take its commands, and the demo would report
# what that gate did.
for p in "$port" "$((port + 1))" "$((port + 2))"; do
	if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
		echo "demo: 127.0.0.1:$p is already in use; stop what listens there or pick other ports with DEMO_GATE_PORT=N (N, N+1 and N+2 are used)" >&2
		exit 1
	fi
done
"$bin" gate serve --bootstrap --data "$dir/gate" --http-addr "127.0.0.1:$port" --raft-addr "127.0.0.1:$((port + 1))" \
	>"$dir/gate.log" 2>&1 &
gate=$!
pids+=($gate)
for _ in $(seq 100); do
	if ! kill -0 "$gate" 2>/dev/null; then
		echo "demo: the gate exited; its log:" >&2
		tail -5 "$dir/gate.log" >&2
		exit 1
	fi
	case $("$bin" gate status --retry 200ms 2>/dev/null) in *Leader,*) break ;; esac
	sleep 0.1
done
"$bin" gate status

say "publish generation 1: verify, register, CAS the alias"
"$bin" publish -q --store "$store" --alias pretrain-main --root "$r1"

say "create run r1 with 4 ranks: the alias is resolved exactly once"
"$bin" run create r1 --alias pretrain-main --world-size 4 --barrier-timeout 2m

say "4 workers verify their shards into local caches, attest, wait at the barrier"
# Ranks 0-2 are init containers; rank 0 hands its file list to the trainer.
for k in 0 1 2; do
	"$bin" worker -q --store "$store" --run r1 --rank $k --cache "$dir/cache$k" --once \
		--ready-file "$dir/ready$k.json" >"$dir/worker$k.out" 2>&1 &
	pids+=($!)
done
# Rank 3 is a sidecar serving /readyz and /metrics.
"$bin" worker -q --store "$store" --run r1 --rank 3 --cache "$dir/cache3" --listen "127.0.0.1:$((port + 2))" \
	--poll 200ms >"$dir/worker3.out" 2>&1 &
sidecar=$!
pids+=($sidecar)
"$bin" run wait r1 --timeout 60s
wait "${pids[@]:1:3}"
cat "$dir"/worker[0-2].out
echo "rank 0's trainer reads:"
grep '"path"' "$dir/ready0.json"
readyz() {
	if command -v curl >/dev/null; then
		curl -s "http://127.0.0.1:$((port + 2))/readyz" || true
	fi
}
readyz

say "publish generation 2 (the CAS expects generation 1)"
"$bin" publish -q --store "$store" --alias pretrain-main --root "$r2" --expect-generation 1
say "a second publisher still expecting generation 1 loses"
expect 4 "$bin" publish -q --store "$store" --alias pretrain-main --root "$r1" --expect-generation 1

say "rank 1 dies; its replacement, started after the switch, reads the run's root (generation 1)"
"$bin" run reassign r1 --world-size 4 --reset 1
out=$("$bin" worker -q --store "$store" --run r1 --rank 1 --cache "$dir/cache1-replacement" --once)
echo "$out"
case $out in *"root=$r1"*) ;; *) echo "demo: replacement did not read generation 1" >&2; exit 1 ;; esac

say "a tombstone log deletes a sample of generation 2; the fence advances and closes permits"
printf '{"schema":"training.tombstones.v1","entries":[{"seq":1,"sampleId":"gdpr-erased-0"},{"seq":5,"sampleId":"syn2-1"}]}' >"$dir/tombstones.json"
tomb=sha256:$(sha256sum "$dir/tombstones.json" | cut -d' ' -f1)
"$bin" store put --store "$store" "blobs/sha256/${tomb#sha256:}" "$dir/tombstones.json" >/dev/null
"$bin" gate fence advance --store "$store" --tombstones "$tomb"
sleep 0.5
readyz
expect 4 "$bin" run checkpoint r1 --step 1 --root "$r1"

say "recheck every closed root from its snapshot's member files: generation 1 has no hits (permits renewed), generation 2 has one (INVALID)"
expect 1 "$bin" recheck -q --members --store "$store" --closed --tombstones "$tomb"
sleep 0.5
readyz
"$bin" run checkpoint r1 --step 1 --root "$r1"

say "rollback to generation 1 (retained, passes the fences); back to generation 2 is refused"
"$bin" gate rollback pretrain-main "$r1" --expect 2
expect 4 "$bin" gate rollback pretrain-main "$r2" --expect 3

say "injected fault: a candidate whose shard version holds another shard's bytes stays out"
r3=$("$bin" synth --samples 4000 --shards 8 --seed 3 --tombstone-watermark 5 --store "$store" 2>/dev/null | field root)
"$bin" store get --store "$store" "blobs/sha256/${r3#sha256:}" >"$dir/r3.json"
d0=$(grep -o '"digest":"sha256:[0-9a-f]*"' "$dir/r3.json" | sed -n 1p | cut -d'"' -f4)
d1=$(grep -o '"digest":"sha256:[0-9a-f]*"' "$dir/r3.json" | sed -n 2p | cut -d'"' -f4)
"$bin" store get --store "$store" "blobs/sha256/${d1#sha256:}" >"$dir/swapped.bin"
v=$("$bin" store put --store "$store" --overwrite "blobs/sha256/${d0#sha256:}" "$dir/swapped.bin")
sed "s/\(\"digest\":\"$d0\",\"size\":[0-9]*,\"objectVersion\":\"\)[^\"]*\"/\1$v\"/" "$dir/r3.json" >"$dir/bad.json"
bad=sha256:$(sha256sum "$dir/bad.json" | cut -d' ' -f1)
"$bin" store put --store "$store" "blobs/sha256/${bad#sha256:}" "$dir/bad.json" >/dev/null
expect 1 "$bin" publish -q --store "$store" --alias pretrain-main --root "$bad" --tombstones "$tomb" --expect-generation 3
"$bin" gate history pretrain-main

say "the sidecar exits with the run's code once the run is cancelled"
"$bin" run cancel r1 --reason "demo over"
set +e; wait "$sidecar"; status=$?; set -e
tail -1 "$dir/worker3.out"
echo "sidecar exit status $status"
[ "$status" = 4 ] || { echo "demo: sidecar exit $status, want 4 (RUN_FAILED)" >&2; exit 1; }
say "gate story done"
