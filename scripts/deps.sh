#!/usr/bin/env bash
# Installs the system packages tests need. Idempotent; a no-op when present.
set -euo pipefail
cd "$(dirname "$0")/.."
need=()
# Real Slurm for the slurm executor's tests (internal/slurmtest starts
# munged, slurmctld and slurmd on loopback with a temp config).
# A C and C++ toolchain for cgo: the cgo zstd codec's test and the bench
# module, which links DuckDB.
for pair in slurmctld:slurmctld slurmd:slurmd sbatch:slurm-client munged:munge gcc:gcc g++:g++; do
  bin=${pair%%:*}; pkg=${pair#*:}
  command -v "$bin" >/dev/null 2>&1 || [ -x "/usr/sbin/$bin" ] || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then echo "deps: need root to install: ${need[*]}" >&2; exit 1; fi
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}"
fi

# The S3 test server (versitygw, pinned in tools/go.mod), built once into the
# Go build cache where objstore/s3/s3test looks for it, so the build (minutes
# on a small machine) happens here rather than inside a test's timeout.
ver=$(sed -n 's/^const VersitygwVersion = "\(.*\)"/\1/p' objstore/s3/s3test/testing.go)
[ -n "$ver" ] || { echo "deps: VersitygwVersion not found in objstore/s3/s3test/testing.go" >&2; exit 1; }
gw="$(go env GOCACHE)/shardproof-versitygw/versitygw-$ver"
if [ -z "${SHARDPROOF_VERSITYGW:-}" ] && [ ! -x "$gw" ]; then
  echo "deps: building versitygw $ver (once) into $gw"
  mkdir -p "$(dirname "$gw")"
  go -C tools build -o "$gw.tmp$$" github.com/versity/versitygw/cmd/versitygw
  mv "$gw.tmp$$" "$gw"
fi
