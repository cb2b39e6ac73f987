#!/bin/sh
# Writes a correct release and one release per fault class with indepwriter,
# then runs shardproof's manifest check and verify on each.
# usage: examples/indepwriter/check.sh [SHARDPROOF_BINARY]   (from the repository root)
set -eu
SP=${1:-bin/shardproof}
W=bin/indepwriter
(cd examples/indepwriter && go build -o ../../$W .)
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail=0
for fault in none missing extra duplicate content split sourceversion sourceid; do
	case $fault in
	none) want=VERIFIED ;; missing) want=MISSING_MEMBER ;; extra) want=EXTRA_MEMBER ;;
	duplicate) want=DUPLICATE_MEMBER ;; content) want=CONTENT_SUBSTITUTION ;;
	split) want=SPLIT_CONFLICT ;; sourceversion) want=SOURCE_VERSION_CHANGE ;;
	sourceid) want=SOURCE_ID_CHANGE ;;
	esac
	root=$($W -store "$T/$fault" -fault $fault -out "$T/$fault-docs" | awk '/^root/{print $2}')
	for doc in recordschema snapshot release; do
		"$SP" manifest check "$T/$fault-docs/$doc.json" >/dev/null
	done
	for mode in "" --read-all-members; do
		out=$("$SP" verify --store "$T/$fault" --root "$root" $mode --log-level error 2>&1 || true)
		if echo "$out" | grep -q "verdict  VERIFIED"; then got=VERIFIED; else got=$(echo "$out" | awk '/^  [A-Z_]+ +[0-9]+/{print $1}' | tr '\n' ' '); fi
		case " $got " in *" $want "*) r=ok ;; *) r=FAIL; fail=1 ;; esac
		printf '%-14s %-20s want %-22s got %s  %s\n' "$fault" "${mode:-default}" "$want" "$got" "$r"
	done
done
# A release that claims tombstoneWatermark 7 (bound into its root) is
# refused without a tombstone log that reaches 7, and VERIFIED with one.
root=$($W -store "$T/claims" -tombstone-watermark 7 -out "$T/claims-docs" | awk '/^root/{print $2}')
"$SP" manifest check "$T/claims-docs/release.json" >/dev/null
printf '{"schema":"training.tombstones.v1","entries":[{"seq":7,"sampleId":"elsewhere"}]}' >"$T/tombstones.json"
tomb=$("$SP" manifest put --store "$T/claims" "$T/tombstones.json" --log-level error | awk '{print $2}')
for log in "" "$tomb"; do
	want=WATERMARK_UNCHECKED mode="no log"
	[ -z "$log" ] || want=VERIFIED mode=--tombstones
	out=$("$SP" verify --store "$T/claims" --root "$root" ${log:+--tombstones "$log"} --log-level error 2>&1 || true)
	case $out in *"verdict  VERIFIED"*) got=VERIFIED ;; *"shardproof: WATERMARK_UNCHECKED:"*) got=WATERMARK_UNCHECKED ;; *) got=$(echo "$out" | tail -1) ;; esac
	if [ "$got" = "$want" ]; then r=ok; else r=FAIL; fail=1; fi
	printf '%-14s %-20s want %-22s got %s  %s\n' claims "$mode" "$want" "$got" "$r"
done
exit $fail
