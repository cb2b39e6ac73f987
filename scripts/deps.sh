#!/usr/bin/env bash
# Installs the system packages tests need. Idempotent; a no-op when present.
set -euo pipefail
need=()
# Real Slurm for the slurm executor's tests (internal/slurmtest starts
# munged, slurmctld and slurmd on loopback with a temp config).
for pair in slurmctld:slurmctld slurmd:slurmd sbatch:slurm-client munged:munge; do
  bin=${pair%%:*}; pkg=${pair#*:}
  command -v "$bin" >/dev/null 2>&1 || [ -x "/usr/sbin/$bin" ] || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then echo "deps: need root to install: ${need[*]}" >&2; exit 1; fi
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}"
fi
