#!/usr/bin/env bash
# vLLM's own tuner on the lent H200 (issue 22, items 2 and 6): `vllm bench sweep serve` from the
# installed vLLM 0.25.1 folder over a grid of the h200-vllm space (benchmarks/gpu_vllm_sweep.py),
# resumable across stays, and the client-fidelity check (tune's client and `vllm bench serve`
# alternated on one server). Commands, carry lists and device time: docs/vs-vllm-sweep.md
# ("GPU (H200): how it will run").
#
# Prepare here, once (as for gpu_engines_study.sh): the vLLM kit and the tuner's wheelhouse
#   tune engine kit vllm==0.25.1 --trim --split 50M --out .kits/vllm-0.25.1
#   scripts/wheelhouse.sh --python 3.12 --platform manylinux_2_28_x86_64 --minimal --out .whl
# A device call carries at most 64 MiB, and what a call leaves in /tmp lasts only while the machine
# stays warm, so the calls of one stay follow each other:
#   bash benchmarks/gpu_vllm_sweep.sh stage      # carry: .kits/vllm-0.25.1/vllm-0.25.1.tar.xz.part00
#   bash benchmarks/gpu_vllm_sweep.sh stage      # carry: the rest of .kits/vllm-0.25.1, .whl (this call may go on to start)
#   bash benchmarks/gpu_vllm_sweep.sh start [--axes knob=v1,v2 ...] [--num-runs N]
#        # install, plan, the sweep in the background; a later stay carries .gpu-state/vllm-sweep.tar.gz
#        # and .gpu-state/engine-caches.tar.gz.NN (the previous stay's $OUT: its state and compile
#        # caches) and `start` resumes it
#   bash benchmarks/gpu_vllm_sweep.sh poll [S]   # wait up to S seconds (default 540), show progress
#   bash benchmarks/gpu_vllm_sweep.sh finish     # stop the sweep, its state into $OUT/vllm-sweep.tar.gz
#   bash benchmarks/gpu_vllm_sweep.sh fidelity   # (no sweep running) -> $OUT/fidelity-h200.json
# Back here: python -m benchmarks.gpu_vllm_sweep convert (the state unpacked) -> benchmarks/data.
set -uo pipefail
PHASE="${1:?phase: stage|start|poll|finish|fidelity}"
source benchmarks/gpu_host.sh
SWEEP="$STATE/vllm-sweep"
alive() { pid=$(cat "$STATE/runner.pid" 2>/dev/null) && kill -0 "$pid" 2>/dev/null; }

stamp "phase $PHASE"
case "$PHASE" in
stage)
  stage_carried
  ;;
start)
  alive && { echo "the sweep runs already (pid $pid): poll or finish" >&2; exit 2; }
  install_staged || exit 1
  if [ -f .gpu-state/vllm-sweep.tar.gz ] && [ ! -f "$SWEEP/plan.json" ]; then
    tar -xzf .gpu-state/vllm-sweep.tar.gz -C "$STATE" || exit 1
    stamp "resuming: $(python3 -m benchmarks.gpu_vllm_sweep progress --state "$SWEEP")"
  fi
  if ls .gpu-state/engine-caches.tar.gz.* > /dev/null 2>&1 && [ ! -f "$STATE/.caches-carried" ]; then
    cat .gpu-state/engine-caches.tar.gz.* | tar -xzf - -C "$TUNER_CACHE" \
      && touch "$STATE/.caches-carried" \
      && stamp "the previous stay's compile caches: $(du -sh "$TUNER_CACHE/engine-caches" | cut -f1)"
  fi
  python3 -m benchmarks.gpu_vllm_sweep plan --state "$SWEEP" "${@:2}" || exit 1
  setsid python3 -m benchmarks.gpu_vllm_sweep run --state "$SWEEP" > "$STATE/runner.log" 2>&1 < /dev/null &
  echo $! > "$STATE/runner.pid"
  stamp "sweep started (pid $!)"
  sleep 20; tail -n 3 "$SWEEP/sweep.log"
  ;;
poll)
  for _ in $(seq 1 $(( ${2:-540} / 10 ))); do alive || break; sleep 10; done
  alive && stamp "running" || { stamp "the runner has exited"; tail -n 5 "$STATE/runner.log"; }
  python3 -m benchmarks.gpu_vllm_sweep progress --state "$SWEEP"
  grep -E "\[(BEGIN|END) SERVER\]|Server overrides|RUNNER" "$SWEEP/sweep.log" | tail -n 6 | cut -c1-200
  gpu_mem
  ;;
finish)
  if alive; then
    kill -TERM "$pid"   # the runner kills the sweep and its servers, and records the stop
    for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
    stamp "sweep stopped"
  fi
  python3 -m benchmarks.gpu_vllm_sweep progress --state "$SWEEP"
  tar -czf "$OUT/vllm-sweep.tar.gz" -C "$STATE" vllm-sweep runner.log 2>/dev/null \
    || tar -czf "$OUT/vllm-sweep.tar.gz" -C "$STATE" vllm-sweep
  # The compile caches (torch.compile, Inductor, Triton), so that the next stay's launches start
  # as warm as they would in one long sweep: in parts a returned file may be (16 MiB), 3 at most.
  tar -czf - -C "$TUNER_CACHE" engine-caches | split -b 15M -d -a 2 - "$OUT/engine-caches.tar.gz."
  if [ "$(ls "$OUT"/engine-caches.tar.gz.* | wc -l)" -gt 3 ]; then
    stamp "compile caches $(du -sh "$TUNER_CACHE/engine-caches" | cut -f1): over 3 parts, not kept"
    rm -f "$OUT"/engine-caches.tar.gz.*
  fi
  ls -la "$OUT"
  sleep 5; gpu_mem | tee "$OUT/gpu-memory-after.txt"
  ;;
fidelity)
  alive && { echo "the sweep is running: finish it first (one server at a time on the GPU)" >&2; exit 2; }
  install_staged || exit 1
  python3 -m benchmarks.fidelity --space h200-vllm --workloads space --pairs "${2:-2}" \
    --out "$OUT/fidelity-h200.json" || exit 1
  gpu_mem
  ;;
*) echo "unknown phase $PHASE" >&2; exit 2 ;;
esac
stamp "phase $PHASE done"
