#!/usr/bin/env bash
# Runs every Go fuzz target in the module for the given time each, and
# reports every failing target at the end (a failure's reproducer is left
# in the package's testdata/fuzz/ for `go test` to replay).
#
# Each target runs twice: coverage-guided (go test -fuzz), then unguided,
# from a test binary built without coverage instrumentation. Guided, the
# targets that decode Parquet run 1-400 inputs/s (arrow-go, thrift and
# zstd instrumented) and stop while they minimize each new input; unguided,
# the same mutator runs about 5,000/s (FuzzMemberBucket: 150k inputs in 30
# s, against 391 guided in 60 s). FUZZ_UNGUIDED=0 skips the second run.
set -uo pipefail
t=${1:-30s}
# Go minimizes every new interesting input for up to 60 s by default, and
# runs no new inputs meanwhile: FuzzDecodeSnapshot sat at 0 execs/s from
# its 12th second to the end of a 40 s run (151k executions). With 5 s it
# ran 662k. FUZZMINIMIZETIME overrides it.
m=${FUZZMINIMIZETIME:-5s}
unguided=${FUZZ_UNGUIDED:-1}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failed=()
for pkg in $(go list ./...); do
  dir=$(go list -f '{{.Dir}}' "$pkg")
  targets=$(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/func //')
  [ -n "$targets" ] || continue
  bin=
  if [ "$unguided" != 0 ]; then
    bin="$tmp/$(basename "$dir").test"
    go test -c -o "$bin" "$pkg" || { failed+=("$pkg (build)"); continue; }
  fi
  for f in $targets; do
    echo "== $pkg $f"
    go test -run='^$' -fuzz="^$f\$" -fuzztime="$t" -fuzzminimizetime="$m" "$pkg" || failed+=("$pkg $f")
    if [ -n "$bin" ]; then
      echo "== $pkg $f (unguided)"
      # In the package directory, so a failing input lands in its testdata/fuzz/.
      (cd "$dir" && "$bin" -test.run='^$' -test.fuzz="^$f\$" -test.fuzztime="$t" \
        -test.fuzzminimizetime="$m" -test.fuzzcachedir="$tmp/cache" 2>&1 | grep -v '^warning: the test binary was not built with coverage') || failed+=("$pkg $f (unguided)")
    fi
  done
done
if [ ${#failed[@]} -gt 0 ]; then
  printf 'fuzz: failed: %s\n' "${failed[@]}" >&2
  exit 1
fi
