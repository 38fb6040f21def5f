#!/usr/bin/env bash
# The cross-engine study on the lent H200 (no network, no docker, torch 2.11.0 preinstalled):
# vLLM 0.25.1 and SGLang 0.5.17 installed from their kits, `tune start --space h200-engines` with
# NVML telemetry, `tune confirm`, `tune export`. Results: docs/results/h200-engines.md.
#
# Prepare here (a connected machine), once:
#   tune engine kit vllm==0.25.1  --trim --split 50M --out .kits/vllm-0.25.1
#   tune engine kit sglang==0.5.17 --trim --split 50M --out .kits/sglang-0.5.17
#   scripts/wheelhouse.sh --python 3.12 --platform manylinux_2_28_x86_64 --minimal --out .whl
#   tune model tiny ~/.cache/tuner/models/qwen3-14b-shape --shape qwen3-14b --no-weights
#   tune plan --space h200-engines --gpu h200-141gb --samples 0 --save-prior .gpu-state/h200-engines-prior.json
#   (the prior's predictions: the host has no aiconfigurator; carry .gpu-state with the start call)
# A device call carries at most 64 MiB, so the parts travel one per call; each `stage` call copies
# what it carried to /tmp/kits there (kept while the machine stays warm). Then, in order:
#   bash benchmarks/gpu_engines_study.sh stage      # once per carried part (carry: .kits/<kit>/<part>)
#   bash benchmarks/gpu_engines_study.sh start      # install, model, doctor; the study in the background
#   bash benchmarks/gpu_engines_study.sh poll [S]   # wait up to S seconds (default 540), show progress
#   bash benchmarks/gpu_engines_study.sh confirm    # stop the search (SIGTERM), tune confirm in the background
#   bash benchmarks/gpu_engines_study.sh finish     # stop what runs, tune export + logs into $OUT
#   bash benchmarks/gpu_engines_study.sh refusals   # (GPU idle) capture the engines' real refusal logs
# A study that does not fit one stay continues on a later machine: `import` (carry .gpu-state/)
# instead of `start`, then poll/confirm/finish as above (tune import + tune resume).
set -uo pipefail
PHASE="${1:?phase: stage|start|import|poll|confirm|finish|refusals}"
OUT="${OUT:-/tmp/out}"
STATE=/tmp/gpu-study
STUDY=h200-engines
KITS=/tmp/kits
export TUNER_CACHE="$STATE/cache" TUNER_STUDIES_DIR="$STATE/studies" PYTHONUNBUFFERED=1
export PYTHONPATH="$PWD:/tmp/site"   # this checkout's tuner first, then the deps the image lacks
TUNE=(python3 -m tuner)
mkdir -p "$OUT" "$STATE" "$KITS"
stamp() { echo "[$(date -u +%H:%M:%S)] $*"; }
gpu_mem() { nvidia-smi --query-gpu=index,memory.used --format=csv,noheader; }

case "$PHASE" in
stage)
  for kit in .kits/*/; do
    [ -d "$kit" ] || continue
    mkdir -p "$KITS/$(basename "$kit")"
    cp -v "$kit"* "$KITS/$(basename "$kit")/"
  done
  if [ -d .whl ]; then mkdir -p "$KITS/whl" && cp .whl/* "$KITS/whl/"; fi
  du -sh "$KITS"/* 2>/dev/null
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  ;;
start|import)
  # The tuner's own dependencies that the image lacks (hash-pinned manifest), then each engine
  # into a folder of its own: their pins conflict.
  python3 -m pip install -q --no-index --find-links "$KITS/whl" --require-hashes --no-deps \
    --no-compile --no-cache-dir --upgrade --target /tmp/site -r "$KITS/whl/manifest.txt" || exit 1
  for kit in vllm-0.25.1 sglang-0.5.17; do
    [ -d "$TUNER_CACHE/engines/$kit" ] && continue
    stamp "installing $kit"
    bash "$KITS/$kit/install.sh" --target "$TUNER_CACHE/engines/$kit" || exit 1
  done
  "${TUNE[@]}" model tiny "$TUNER_CACHE/models/qwen3-14b-shape" --shape qwen3-14b --no-weights 2>/dev/null || true
  "${TUNE[@]}" doctor --space "$STUDY" | tee "$OUT/doctor.txt"
  if [ "$PHASE" = import ]; then
    "${TUNE[@]}" import .gpu-state/$STUDY.tar.gz || exit 1
    cmd=(resume "$STUDY")
  else
    cmd=(start --space "$STUDY" --study "$STUDY")
    [ -f ".gpu-state/$STUDY-prior.json" ] && cmd+=(--prior-file ".gpu-state/$STUDY-prior.json")
  fi
  stamp "study: tune ${cmd[*]}"
  setsid "${TUNE[@]}" "${cmd[@]}" > "$STATE/study.log" 2>&1 < /dev/null &
  echo $! > "$STATE/study.pid"
  sleep 20; tail -n 5 "$STATE/study.log"
  ;;
poll)
  pid=$(cat "$STATE/study.pid" 2>/dev/null)
  for _ in $(seq 1 $(( ${2:-540} / 10 ))); do kill -0 "$pid" 2>/dev/null || break; sleep 10; done
  tail -n 15 "$STATE/study.log"
  "${TUNE[@]}" status "$STUDY" | tail -n 25
  gpu_mem
  ;;
confirm)
  pid=$(cat "$STATE/study.pid" 2>/dev/null)
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid"   # a background job ignores SIGINT: SIGTERM stops it as Ctrl-C would
    for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
    stamp "search stopped"; gpu_mem
  fi
  setsid "${TUNE[@]}" confirm "$STUDY" --top-k 1 --repeats 1 > "$STATE/confirm.log" 2>&1 < /dev/null &
  echo $! > "$STATE/study.pid"
  sleep 20; tail -n 5 "$STATE/confirm.log"
  ;;
finish)
  pid=$(cat "$STATE/study.pid" 2>/dev/null)
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid"
    for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
    stamp "stopped the running phase"
  fi
  gpu_mem | tee "$OUT/gpu-memory-after.txt"
  "${TUNE[@]}" status "$STUDY" > "$OUT/status.txt" 2>&1
  "${TUNE[@]}" best "$STUDY" > "$OUT/best.txt" 2>&1
  "${TUNE[@]}" export "$STUDY" "$OUT/$STUDY.tar.gz"
  cp "$STATE"/*.log "$STATE/studies/" 2>/dev/null
  tar -czf "$OUT/logs.tar.gz" -C "$STATE/studies" . 2>/dev/null
  cat "$OUT/status.txt" "$OUT/best.txt"
  ;;
refusals)
  # Real GPU refusals from each engine's own log, for tests/data/logs (out of memory, KV cache too
  # small for max_seq_len, a quantization the checkpoint lacks); the logs come back in $OUT.
  python3 -m benchmarks.capture_failure_logs --gpu "${@:2}"
  tar -czf "$OUT/refusal-logs.tar.gz" tests/data/logs/*-h200-*.log 2>/dev/null
  gpu_mem
  ;;
*) echo "unknown phase $PHASE" >&2; exit 2 ;;
esac
