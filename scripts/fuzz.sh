#!/usr/bin/env bash
# Runs every Go fuzz target in the module for the given time each, and
# reports every failing target at the end (a failure's reproducer is left
# in the package's testdata/fuzz/ for `go test` to replay).
set -uo pipefail
t=${1:-30s}
# Go minimizes every new interesting input for up to 60 s by default, and
# runs no new inputs meanwhile: FuzzDecodeSnapshot sat at 0 execs/s from
# its 12th second to the end of a 40 s run (151k executions). With 5 s it
# ran 662k. FUZZMINIMIZETIME overrides it.
m=${FUZZMINIMIZETIME:-5s}
failed=()
for pkg in $(go list ./...); do
  dir=$(go list -f '{{.Dir}}' "$pkg")
  for f in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/func //'); do
    echo "== $pkg $f"
    go test -run='^$' -fuzz="^$f\$" -fuzztime="$t" -fuzzminimizetime="$m" "$pkg" || failed+=("$pkg $f")
  done
done
if [ ${#failed[@]} -gt 0 ]; then
  printf 'fuzz: failed: %s\n' "${failed[@]}" >&2
  exit 1
fi
