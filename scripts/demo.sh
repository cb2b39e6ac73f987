#!/usr/bin/env bash
# make demo: shardproof's main job on the embedded default (file store):
# synthesize a release, verify it (VERIFIED), then corrupt one byte of one
# shard in a copy of the store and verify again (INVALID, with the evidence).
# Exits 0 only if both verdicts are the expected ones.
set -euo pipefail
bin=$1; dir=$2
rm -rf "$dir"; mkdir -p "$dir"
store=$dir/store; bad=$dir/store-corrupted
echo "== shardproof demo in $dir"

echo "== synthesize 20,000 samples in 8 shards"
"$bin" synth --samples 20000 --shards 8 --seed 42 --store "$store" > "$dir/synth.out" 2> "$dir/synth.log"
cat "$dir/synth.out"
root=$(awk '$1 == "root" {print $2}' "$dir/synth.out")

echo "== verify the release"
status=0
"$bin" verify --store "$store" --root "$root" 2> "$dir/verify.log" || status=$?
if [ "$status" -ne 0 ]; then
	echo "demo: FAILED: clean release gave exit status $status (want 0)" >&2
	cat "$dir/verify.log" >&2
	exit 1
fi

echo "== copy the store and flip one bit in the middle of the third shard's stored bytes"
cp -a "$store" "$bad"
digest=$("$bin" manifest show --store "$store" "$root" | grep -o '"digest":"sha256:[0-9a-f]*"' | sed -n 3p | cut -d: -f3 | tr -d '"')
file=$(ls "$bad/blobs/sha256/$digest/"@* | head -1)
size=$(wc -c < "$file")
off=$((size / 2))
chmod u+w "$file"
old=$(od -An -tu1 -j "$off" -N1 "$file" | tr -d ' ')
printf "$(printf '\\%03o' $((old ^ 4)))" | dd of="$file" bs=1 seek="$off" conv=notrunc status=none
echo "flipped bit 2 of byte $off of $file"

echo "== verify the corrupted copy"
status=0
"$bin" verify --store "$bad" --root "$root" > "$dir/invalid.out" 2> "$dir/invalid.log" || status=$?
cat "$dir/invalid.out"
if [ "$status" -ne 1 ] || ! grep -q '^verdict  INVALID' "$dir/invalid.out" || ! grep -q 'DIGEST_MISMATCH' "$dir/invalid.out"; then
	echo "demo: FAILED: corrupted release gave exit status $status (want 1, INVALID with DIGEST_MISMATCH)" >&2
	cat "$dir/invalid.log" >&2
	exit 1
fi
echo "== demo OK: the clean release is VERIFIED, the corrupted copy INVALID (exit status 1)"

echo
echo "== the gate story: publish, a 4-rank run, alias switch, recovery, fence advance, rollback, a candidate kept out"
"$(dirname "$0")/demo-gate.sh" "$bin" "$dir" "$root"
