#!/usr/bin/env bash
# The H200 head-to-head of issue 22 (items 2, 5 and 6), across as many stays as it takes: vLLM's own
# tuner (`vllm bench sweep serve` over the h200-vllm-grid space), client fidelity, tune at 25 % and
# 50 % of the grid's launches with and without the prior, each followed by `tune confirm`, and the
# independent judge: the queue of benchmarks/gpu_campaign.py, worked down in the background.
# Results and the commands of each stay: docs/vs-vllm-sweep.md ("GPU (H200)").
#
# Prepare here, once (as for gpu_engines_study.sh):
#   tune engine kit vllm==0.25.1 --trim --split 50M --out .kits/vllm-0.25.1
#   scripts/wheelhouse.sh --python 3.12 --platform manylinux_2_28_x86_64 --minimal --out .whl
#   tune plan --space h200-vllm-grid --gpu h200-141gb --samples 0 \
#       --save-prior .gpu-state/h200-vllm-grid-prior.json
# A device call carries at most 64 MiB and /tmp lasts only while the machine stays warm, so the
# calls of one stay follow each other:
#   bash benchmarks/gpu_campaign.sh stage    # carry: .kits/vllm-0.25.1/vllm-0.25.1.tar.xz.part00
#   bash benchmarks/gpu_campaign.sh stage    # carry: the kit's part01, install.sh, SHA256SUMS
#        # (.whl too passes 64 MiB with the tree since the ninth stay's kit: it goes with start)
#   (the sglang-grid stay stages SGLang's kit in their place: .kits/sglang-0.5.17's part00, then
#   part01 + install.sh + SHA256SUMS + kit.json + manifest.txt with .whl and .gpu-state; without
#   vLLM's folder, start keeps the carried sweep plan)
#   bash benchmarks/gpu_campaign.sh stage && bash benchmarks/gpu_campaign.sh start [STEP ...]
#        # carry: .whl, and .gpu-state (the prior, and from the
#        # second stay on the previous stay's $OUT: campaign.tar.gz, h2h-*.tar.gz); STEPs: only these
#        # (the steps that fit the stay's device time, e.g. `judge fidelity-paced` when SGLang's
#        # kit is not staged), in the queue's order; none: the whole queue
#        # installs, restores the state (tune import for the studies), runs the queue in the background
#        # (.gpu-state too large for one call with the tree: carry some of it with a `stage` call)
#   bash benchmarks/gpu_campaign.sh poll [S] # wait up to S seconds (default 540), show progress,
#        # and return the state so far in $OUT as finish does (copy it here after every poll)
#   bash benchmarks/gpu_campaign.sh finish   # stop the queue (SIGTERM), the state into $OUT:
#        # campaign.tar.gz and tune export of each study
# Back here: copy $OUT's files into .gpu-state for the next stay; read them with
#   python -m benchmarks.gpu_vllm_sweep convert / benchmarks/gpu_head_to_head.py (docs say how).
set -uo pipefail
PHASE="${1:?phase: stage|start|poll|finish}"
source benchmarks/gpu_host.sh
CAMP="$STATE/campaign"
STUDIES=(h2h-prior h2h-noprior h200-sglang-grid)
alive() { pid=$(cat "$STATE/campaign.pid" 2>/dev/null) && kill -0 "$pid" 2>/dev/null; }
# The state into $OUT: the campaign folder and `tune export` of each study. Poll saves it too, while
# the queue runs (a snapshot: gpu_campaign.py says what it keeps), so a stay cut before its finish
# still returns what its last poll saw.
save_state() {
  cp "$STATE/campaign.log" "$CAMP/logs/" 2>/dev/null
  python3 -m benchmarks.gpu_campaign snapshot --state "$CAMP" --out "$OUT/campaign.tar.gz"
  for study in "${STUDIES[@]}"; do
    [ -f "$TUNER_STUDIES_DIR/$study.db" ] && "${TUNE[@]}" export "$study" "$OUT/$study.tar.gz"
  done
}
# The checkout is replaced by every call, so what a call carried in .gpu-state is kept outside it;
# any call of the stay may carry a part of it.
CARRIED="$STATE/carried"
keep_state() { [ -d .gpu-state ] && mkdir -p "$CARRIED" && cp .gpu-state/* "$CARRIED/" 2>/dev/null; true; }

stamp "phase $PHASE"
case "$PHASE" in
stage)
  stage_carried
  keep_state
  ;;
start)
  alive && { echo "the campaign runs already (pid $pid): poll or finish" >&2; exit 2; }
  keep_state
  install_staged || exit 1
  if [ -f "$CARRIED/campaign.tar.gz" ] && [ ! -f "$CAMP/steps.json" ]; then
    tar -xzf "$CARRIED/campaign.tar.gz" -C "$STATE" || exit 1
    stamp "restored the campaign"
  fi
  for study in "${STUDIES[@]}"; do
    if [ -f "$CARRIED/$study.tar.gz" ] && [ ! -f "$TUNER_STUDIES_DIR/$study.db" ]; then
      "${TUNE[@]}" import "$CARRIED/$study.tar.gz" || exit 1
    fi
  done
  mkdir -p "$CAMP"
  [ -f "$CARRIED/h200-vllm-grid-prior.json" ] && cp "$CARRIED/h200-vllm-grid-prior.json" "$CAMP/"
  # The sweep's plan names vLLM's installed folder; a stay without vLLM's kit staged (sglang-grid's)
  # keeps the carried plan, and the steps that launch vLLM fail at their own preflight.
  if [ -f "$TUNER_CACHE/engines/vllm-0.25.1/.tuner-engine.json" ]; then
    python3 -m benchmarks.gpu_vllm_sweep plan --state "$CAMP/vllm-sweep" || exit 1
  else
    stamp "vLLM 0.25.1 not installed: the sweep's plan is kept as carried"
  fi
  prior=(); [ -f "$CAMP/h200-vllm-grid-prior.json" ] && prior=(--prior-file "$CAMP/h200-vllm-grid-prior.json")
  only=("${@:2}"); [ ${#only[@]} -gt 0 ] && only=(--only "${only[@]}")
  setsid python3 -m benchmarks.gpu_campaign run --state "$CAMP" "${prior[@]}" "${only[@]}" \
    >> "$STATE/campaign.log" 2>&1 < /dev/null &
  echo $! > "$STATE/campaign.pid"
  stamp "campaign started (pid $!)"
  sleep 15; python3 -m benchmarks.gpu_campaign status --state "$CAMP"
  ;;
poll)
  for _ in $(seq 1 $(( ${2:-540} / 10 ))); do alive || break; sleep 10; done
  alive && stamp "running" || stamp "the campaign has exited"
  tail -n 4 "$STATE/campaign.log"
  python3 -m benchmarks.gpu_campaign status --state "$CAMP"
  python3 -m benchmarks.gpu_vllm_sweep progress --state "$CAMP/vllm-sweep"
  step=$(grep -o "\] step [a-z0-9-]*" "$STATE/campaign.log" | tail -n 1 | cut -d' ' -f3)   # not "every step done"
  [ -n "$step" ] && tail -n 6 "$CAMP/logs/$step.log"
  gpu_mem
  save_state
  ;;
finish)
  if alive; then
    kill -TERM "$pid"   # the queue passes it to the running step, which stops its engine
    for _ in $(seq 1 150); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
    stamp "campaign stopped"
  fi
  python3 -m benchmarks.gpu_campaign status --state "$CAMP"
  save_state
  # The compile caches stay behind: 448 MiB after the second stay's FP8 launches (34 MiB after the
  # first stay's BF16 ones), more than the calls of a stay can carry; each stay starts cold.
  ls -la "$OUT"
  sleep 5; gpu_mem | tee "$OUT/gpu-memory-after.txt"
  ;;
*) echo "unknown phase $PHASE" >&2; exit 2 ;;
esac
stamp "phase $PHASE done"
