#!/usr/bin/env bash
# Runs every Go fuzz target in the module for the given time each, and
# reports every failing target at the end (a failure's reproducer is left
# in the package's testdata/fuzz/ for `go test` to replay).
set -uo pipefail
t=${1:-30s}
failed=()
for pkg in $(go list ./...); do
  dir=$(go list -f '{{.Dir}}' "$pkg")
  for f in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/func //'); do
    echo "== $pkg $f"
    go test -run='^$' -fuzz="^$f\$" -fuzztime="$t" "$pkg" || failed+=("$pkg $f")
  done
done
if [ ${#failed[@]} -gt 0 ]; then
  printf 'fuzz: failed: %s\n' "${failed[@]}" >&2
  exit 1
fi
