#!/usr/bin/env bash
# One staging call on the lent GPU host: copy what this device call carried (.kits/<kit>/<files>,
# .whl/) to /tmp/kits, where it stays while the machine is warm, and say what is there so far. A call
# carries at most 64 MiB, so a kit's parts come one per call; the GPU scripts' `stage` phase is this.
set -uo pipefail
KITS="${KITS:-/tmp/kits}"
mkdir -p "$KITS"
for kit in .kits/*/; do
  [ -d "$kit" ] || continue
  mkdir -p "$KITS/$(basename "$kit")"
  cp -v "$kit"* "$KITS/$(basename "$kit")/"
done
if [ -d .whl ]; then mkdir -p "$KITS/whl" && cp .whl/* "$KITS/whl/"; fi
du -sh "$KITS"/* 2>/dev/null
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
