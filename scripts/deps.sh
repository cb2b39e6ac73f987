#!/usr/bin/env bash
# Installs the system packages tests need. Idempotent; a no-op when present.
set -euo pipefail
need=()
# (packages are added here as tests come to need them)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then echo "deps: need root to install: ${need[*]}" >&2; exit 1; fi
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}"
fi
