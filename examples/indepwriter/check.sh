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
exit $fail
