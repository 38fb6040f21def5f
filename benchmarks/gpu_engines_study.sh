#!/usr/bin/env bash
# A study on the lent H200 (no network, no docker, torch 2.11.0 preinstalled): vLLM 0.25.1 and/or
# SGLang 0.5.17 installed from their kits, `tune start --space $STUDY` with NVML telemetry, the
# engines' real refusals, `tune confirm`, `tune export`. STUDY is a space name: h200-engines (both
# engines, the default), h200-vllm, h200-sglang or h200-sglang-grid. Results: docs/results/h200-engines.md.
#
# Prepare here (a connected machine), once:
#   tune engine kit vllm==0.25.1  --trim --split 50M --out .kits/vllm-0.25.1
#   tune engine kit sglang==0.5.17 --trim --split 50M --out .kits/sglang-0.5.17
#   scripts/wheelhouse.sh --python 3.12 --platform manylinux_2_28_x86_64 --minimal --out .whl
#   tune model tiny ~/.cache/tuner/models/qwen3-14b-shape --shape qwen3-14b --no-weights
#   tune plan --space $STUDY --gpu h200-141gb --samples 0 --save-prior .gpu-state/$STUDY-prior.json
#   (the prior's predictions: the host has no aiconfigurator; .gpu-state/ travels in the tree's carry)
# A device call carries at most 64 MiB, so the kit parts travel one per call, each `stage` call
# copying what it carried to /tmp/kits there (kept while the machine stays warm); only the kits
# staged are installed, so a vLLM-only stay (STUDY=h200-vllm) needs 2 calls, both engines 4.
#   bash benchmarks/gpu_engines_study.sh stage      # once per carried part (carry: .kits/<kit>/<part>, ...)
#   bash benchmarks/gpu_engines_study.sh early      # after the first kit's last part: install it and
#                                                   # capture its refusals in the background while the
#                                                   # next kit's parts travel (the GPU is idle then)
#   bash benchmarks/gpu_engines_study.sh stay [N]   # install, model, doctor; then in the background:
#                                                   # search N launches, confirm (REPEATS, 2), the
#                                                   # refusals not yet kept
#   bash benchmarks/gpu_engines_study.sh poll [S]   # wait up to S seconds (default 540), show progress
#   bash benchmarks/gpu_engines_study.sh finish     # stop what runs (SIGTERM), tune export + logs into $OUT
# The phases `stay` chains can also run one by one: start (or import), confirm, refusals.
# grid: `STUDY=h200-sglang-grid` runs the SGLang grid for the measured replay (issue 22, items 2 and
# 4): stage SGLang's 2 kit parts (the second call with .whl and `stay`); the stay then runs the
# grid's 8 points and the defaults baseline, the refusals, tune confirm. About 17-21 minutes of
# launches (9 at 104-194 s), so pass REPEATS=1 to fit one stay; `finish` brings back the export
# for `benchmarks/replay_measured.py from-study` (docs/search-quality.md 5.9). No prior file.
# A study that does not fit one stay continues on a later machine: `import` (carry .gpu-state/
# with the exported $NAME.tar.gz) instead of `start`, or RESUME=1 with `stay` (tune import + tune
# resume; N is then the new total of finished trials). NAME is the study's name (default: STUDY).
set -uo pipefail
PHASE="${1:?phase: stage|early|stay|start|import|poll|confirm|finish|refusals}"
STUDY="${STUDY:-h200-engines}"
NAME="${NAME:-$STUDY}"
source benchmarks/gpu_host.sh
# Outside the checkout: each device call replaces the checkout, so files written into it are lost.
export TUNER_CAPTURE_DIR="$STATE/refusal-logs"
SELF="$(realpath "$0")"
# SIGTERM to the running phase's session (a background job ignores SIGINT: SIGTERM stops tune as
# Ctrl-C would; its engines have sessions of their own and are torn down by it), then wait for it.
stop_running() {
  local pid; pid=$(cat "$STATE/study.pid" 2>/dev/null)
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 0
  kill -TERM -- "-$pid"
  for _ in $(seq 1 60); do pgrep -g "$pid" > /dev/null || break; sleep 1; done
  stamp "stopped the running phase"; gpu_mem
}

case "$PHASE" in
stage)
  stage_carried
  ;;
start|import)
  install_staged || exit 1
  "${TUNE[@]}" doctor --space "$STUDY" | tee "$OUT/doctor.txt"
  if [ "$PHASE" = import ]; then
    "${TUNE[@]}" import .gpu-state/$NAME.tar.gz || exit 1
    cmd=(resume "$NAME")
  else
    cmd=(start --space "$STUDY" --study "$NAME")
    [ -f ".gpu-state/$STUDY-prior.json" ] && cmd+=(--prior-file ".gpu-state/$STUDY-prior.json")
  fi
  [ -n "${2:-}" ] && cmd+=(-n "$2")
  echo "${cmd[*]}" > "$STATE/study.cmd"
  if [ -n "${STAY:-}" ]; then exit 0; fi   # `stay` runs it itself
  stamp "study: tune ${cmd[*]}"
  setsid "${TUNE[@]}" "${cmd[@]}" > "$STATE/study.log" 2>&1 < /dev/null &
  echo $! > "$STATE/study.pid"
  sleep 20; tail -n 5 "$STATE/study.log"
  ;;
early)
  install_staged || exit 1
  setsid python3 -m benchmarks.capture_failure_logs --gpu > "$STATE/refusals.log" 2>&1 < /dev/null &
  echo $! > "$STATE/refusals.pid"
  sleep 5; tail -n 3 "$STATE/refusals.log"
  ;;
stay)
  # One stay's work after the installs, in the background in a session of its own (`finish` stops
  # it with SIGTERM): the search once the early refusals have freed the GPU, tune confirm (the top
  # config, the model's pick and the defaults, interleaved), then the refusals not kept yet (the
  # capture skips those the early phase kept); `finish` exports. Each step is stamped in
  # $STATE/stay.log.
  STAY=1 bash "$SELF" "$([ -n "${RESUME:-}" ] && echo import || echo start)" "${2:-}" || exit 1
  read -r -a cmd < "$STATE/study.cmd"
  setsid bash -c '
    stamp() { echo "[$(date -u +%H:%M:%S)] $*"; }
    early=$(cat "$4" 2>/dev/null)
    while [ -n "$early" ] && kill -0 "$early" 2>/dev/null; do sleep 2; done
    stamp "search: tune $1"; python3 -m tuner $1
    stamp "confirm"; python3 -m tuner confirm "$2" --top-k 1 --repeats "$3"
    stamp "refusals"; python3 -m benchmarks.capture_failure_logs --gpu
    stamp "stay done"' stay "${cmd[*]}" "$NAME" "${REPEATS:-2}" "$STATE/refusals.pid" \
    > "$STATE/stay.log" 2>&1 < /dev/null &
  echo $! > "$STATE/study.pid"
  sleep 30; tail -n 5 "$STATE/stay.log"
  ;;
poll)
  pid=$(cat "$STATE/study.pid" 2>/dev/null)
  for _ in $(seq 1 $(( ${2:-540} / 10 ))); do kill -0 "$pid" 2>/dev/null || break; sleep 10; done
  tail -n 15 "$STATE/refusals.log" "$STATE/stay.log" "$STATE/study.log" 2>/dev/null | tail -n 24
  "${TUNE[@]}" status "$NAME" | tail -n 25
  gpu_mem
  ;;
confirm)
  stop_running
  setsid "${TUNE[@]}" confirm "$NAME" --top-k 1 --repeats "${REPEATS:-1}" > "$STATE/confirm.log" 2>&1 < /dev/null &
  echo $! > "$STATE/study.pid"
  sleep 20; tail -n 5 "$STATE/confirm.log"
  ;;
finish)
  stop_running
  gpu_mem | tee "$OUT/gpu-memory-after.txt"
  "${TUNE[@]}" status "$NAME" > "$OUT/status.txt" 2>&1
  "${TUNE[@]}" best "$NAME" > "$OUT/best.txt" 2>&1
  "${TUNE[@]}" export "$NAME" "$OUT/$NAME.tar.gz"
  cp "$STATE"/*.log "$STATE/studies/" 2>/dev/null
  [ -d "$TUNER_CAPTURE_DIR" ] && tar -czf "$OUT/refusal-logs.tar.gz" -C "$TUNER_CAPTURE_DIR" .
  tar -czf "$OUT/logs.tar.gz" -C "$STATE/studies" . 2>/dev/null
  cat "$OUT/status.txt" "$OUT/best.txt"
  ;;
refusals)
  # Real GPU refusals from each engine's own log, for tests/data/logs (out of memory, KV cache too
  # small for max_seq_len, a quantization the checkpoint lacks); the logs come back in $OUT.
  python3 -m benchmarks.capture_failure_logs --gpu "${@:2}"
  tar -czf "$OUT/refusal-logs.tar.gz" -C "$TUNER_CAPTURE_DIR" .
  gpu_mem
  ;;
*) echo "unknown phase $PHASE" >&2; exit 2 ;;
esac
