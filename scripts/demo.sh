#!/usr/bin/env bash
# make demo: shardproof's main job on the embedded default (file store).
set -euo pipefail
bin=$1; dir=$2
rm -rf "$dir"; mkdir -p "$dir"
echo "shardproof demo in $dir"
"$bin" --help | head -5
