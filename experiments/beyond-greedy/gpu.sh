#!/usr/bin/env bash
# The GPU side of this experiment, on a host with one GPU, torch preinstalled, no network and no
# container runtime, that runs one command at a time from a copy of the checkout, each bringing at
# most 64 MiB of files, and keeps /tmp between commands that follow closely. Run from the checkout's
# root; README.md beside this file gives the commands in order.
#   stage           keep what this command brought (.kits/<kit>/*, .whl/*, .gpu-state/*) under /tmp
#   start STEP...   install once (the tuner's missing dependencies, each staged engine kit into its
#                   own folder), write the model shapes, import carried studies (else the arms
#                   committed under data/ for this GPU kind), then run the
#                   steps in the background, in order: each is a space beside this file, started
#                   (or resumed, when its study exists) with `tune start`; the step `judge` runs
#                   `tune judge bg-judge greedy=bg-greedy tpe=bg-tpe --no-defaults` (or
#                   $JUDGE_DEFAULTS) on the imported arms; with MINUTES=N the steps end by then,
#                   between trials, and none starts with less than TRIAL_S (360) seconds left
#   poll [S]        wait up to S seconds (default 420) while the steps run; progress; export
#   finish          stop the steps (SIGTERM: the running trial's engine is stopped), export, and
#                   the engines' caches in parts (engine-caches.partNN) for the next host
# Every phase leaves `tune export` of each study in $OUT, so a command cut short still returns data.
set -uo pipefail
PHASE="${1:?phase: stage|start|poll|finish}"
OUT="${OUT:-/tmp/out}"
STATE=/tmp/bg-state KITS=/tmp/bg-state/kits SITE=/tmp/bg-state/site CARRIED=/tmp/bg-state/carried
export TUNER_CACHE="$STATE/cache" TUNER_STUDIES_DIR="$STATE/studies" PYTHONUNBUFFERED=1
export PYTHONPATH="$PWD:$SITE"
HERE=experiments/beyond-greedy
TUNE=(python3 -m tuner)
mkdir -p "$OUT" "$KITS" "$CARRIED" "$TUNER_STUDIES_DIR" "$TUNER_CACHE"
stamp() { echo "[$(date -u +%H:%M:%S)] $*"; }
gpu_kind() { nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1 | grep -o 'H[0-9]00' | tr H h; }
alive() { pid=$(cat "$STATE/queue.pid" 2>/dev/null) && kill -0 "$pid" 2>/dev/null; }
export_all() {
  for db in "$TUNER_STUDIES_DIR"/*.db; do
    [ -f "$db" ] || continue
    study=$(basename "$db" .db)
    "${TUNE[@]}" export "$study" "$OUT/$study.tar.gz" --force >/dev/null 2>&1 || stamp "export of $study failed"
  done
  cp "$STATE/queue.log" "$OUT/" 2>/dev/null
  nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader > "$OUT/gpu.txt"
  # The engines' kernel and compile caches, so that the next host's first launches hit them
  # (SGLang's first prefill CUDA-graph capture compiles Triton kernels for minutes, vLLM's
  # DeepGEMM warm-up for an FP8 checkpoint JIT-compiles for minutes), in 15 MiB parts: a command
  # returns at most 8 files of 16 MiB, so the parts take the places the other files leave. Only
  # once no step runs: compressing them beside a benchmark would take CPU from its client.
  if [ -d "$TUNER_CACHE/engine-caches" ] && ! alive; then
    rm -f "$STATE"/engine-caches.part*
    tar czf - -C "$TUNER_CACHE" engine-caches 2>/dev/null | split -b 15M -d - "$STATE/engine-caches.part"
    parts=("$STATE"/engine-caches.part*)
    room=$(( 8 - $(ls "$OUT" | grep -vc '^engine-caches') ))
    if [ "${#parts[@]}" -le "$room" ]; then cp "${parts[@]}" "$OUT/"
    else stamp "engine caches: ${#parts[@]} parts of 15 MiB, room for $room: not returned"; fi
  fi
  ls -la "$OUT"
}

stamp "phase $PHASE"
case "$PHASE" in
stage)
  for kit in .kits/*/; do
    [ -d "$kit" ] && mkdir -p "$KITS/$(basename "$kit")" && cp "$kit"* "$KITS/$(basename "$kit")/"
  done
  [ -d .whl ] && mkdir -p "$KITS/whl" && cp .whl/* "$KITS/whl/"
  [ -d .gpu-state ] && cp .gpu-state/* "$CARRIED/" 2>/dev/null
  du -sh "$KITS"/* "$CARRIED" 2>/dev/null
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  ;;
start)
  alive && { echo "steps are running already (pid $pid): poll or finish" >&2; exit 2; }
  [ -d .gpu-state ] && cp .gpu-state/* "$CARRIED/" 2>/dev/null
  if [ ! -f "$SITE/.done" ]; then
    python3 -m pip install -q --no-index --find-links "$KITS/whl" --require-hashes --no-deps \
      --no-compile --no-cache-dir --target "$SITE" -r "$KITS/whl/manifest.txt" || exit 1
    touch "$SITE/.done"
  fi
  for kit in "$KITS"/*/; do
    name=$(basename "$kit")
    [ -f "$kit/install.sh" ] && [ ! -f "$TUNER_CACHE/engines/$name/.tuner-engine.json" ] || continue
    stamp "installing $name"
    bash "$kit/install.sh" --target "$TUNER_CACHE/engines/$name" > "$STATE/install-$name.log" 2>&1 \
      || { tail -n 20 "$STATE/install-$name.log"; exit 1; }
  done
  for shape in qwen3-14b qwen3-14b-fp8 qwen3-14b-awq; do
    [ -f "$TUNER_CACHE/models/$shape/config.json" ] || "${TUNE[@]}" model tiny "$TUNER_CACHE/models/$shape" --shape "$shape" &
  done
  # ShareGPT-format chats, enough that a probe offering 128 req/s for 8 s repeats none (a repeated
  # prompt would hit the prefix cache); deterministic for the host's Python.
  [ -f "$TUNER_CACHE/sharegpt-2000.json" ] || python3 scripts/make_sharegpt.py --n 2000 \
    --out "$TUNER_CACHE/sharegpt-2000.json" || exit 1
  wait
  if [ -f "$CARRIED/engine-caches.part00" ] && [ ! -d "$TUNER_CACHE/engine-caches" ]; then
    cat "$CARRIED"/engine-caches.part* | tar xzf - -C "$TUNER_CACHE"
  fi
  for archive in "$CARRIED"/*.tar.gz; do
    [ -f "$archive" ] || continue
    study=$(basename "$archive" .tar.gz)
    [ -f "$TUNER_STUDIES_DIR/$study.db" ] || "${TUNE[@]}" import "$archive" || exit 1
  done
  # The arms as committed for this GPU kind (data/STUDY-h100.tar.gz), where none was carried: a
  # comparison continues on the kind it started on.
  for study in bg-greedy bg-tpe bg-judge; do
    archive="$HERE/data/$study-$(gpu_kind).tar.gz"
    [ -f "$archive" ] && [ ! -f "$TUNER_STUDIES_DIR/$study.db" ] || continue
    "${TUNE[@]}" import "$archive" --name "$study" || exit 1
  done
  steps=("${@:2}")
  [ ${#steps[@]} -gt 0 ] || { echo "name the steps: ${HERE}/*.yaml stems" >&2; exit 2; }
  # MINUTES=N: the steps end by then, between trials (tune's --timeout-s), so that `finish` cuts
  # no trial: the host's time left, less a minute or two for `finish`.
  rm -f "$STATE/deadline"
  [ -n "${MINUTES:-}" ] && echo $(( $(date +%s) + MINUTES * 60 )) > "$STATE/deadline"
  setsid bash "$0" queue "${steps[@]}" >> "$STATE/queue.log" 2>&1 < /dev/null &
  echo $! > "$STATE/queue.pid"
  stamp "steps started (pid $(cat "$STATE/queue.pid")): ${steps[*]}"
  sleep 20; tail -n 5 "$STATE/queue.log"
  ;;
queue)   # start's background part, in a session of its own so that it outlives the command
  trap 'kill -TERM "$child" 2>/dev/null; wait "$child"; exit 143' TERM
  for step in "${@:2}"; do
    limit=()
    if [ -f "$STATE/deadline" ]; then
      left=$(( $(cat "$STATE/deadline") - $(date +%s) ))
      # tune stops a study between trials by its median trial; a study's first trial has no median,
      # so no step starts with less than one trial's time left (316 s measured: 360 with margin)
      [ "$left" -ge "${TRIAL_S:-360}" ] || { stamp "step $step: less than a trial's time left before the deadline"; continue; }
      limit=(--timeout-s "$left")
    fi
    if [ "$step" = judge ]; then   # the arms' picks, 3 launches each: 6 launches fit one host's
                                   # 30 minutes with the engine caches carried; the arms measured
                                   # the engines' defaults once each
      stamp "step judge"
      if [ -f "$TUNER_STUDIES_DIR/bg-judge.db" ]; then verb=(resume bg-judge); else
        # JUDGE_DEFAULTS="--defaults-of vllm" where the arms picked the same config (one entrant)
        verb=(judge bg-judge greedy=bg-greedy tpe=bg-tpe --launches 3 ${JUDGE_DEFAULTS:---no-defaults}); fi
      "${TUNE[@]}" "${verb[@]}" "${limit[@]}" & child=$!
      wait "$child"
      stamp "step judge exited $?"
      continue
    fi
    study=$(sed -n 's/^name: //p' "$HERE/$step.yaml")
    # A space with a prior takes the predictions made for this GPU on the CPU machine.
    prior=("$HERE/data/$study-prior-$(gpu_kind).json")
    [ -f "${prior[0]}" ] && prior=(--prior-file "${prior[0]}") || prior=()
    if [ -f "$TUNER_STUDIES_DIR/$study.db" ]; then verb=(resume "$study"); else verb=(start --space "$HERE/$step.yaml" "${prior[@]}"); fi
    stamp "step $step: tune ${verb[*]}"
    "${TUNE[@]}" "${verb[@]}" "${limit[@]}" & child=$!
    wait "$child"
    stamp "step $step exited $?"
  done
  stamp "every step done"
  ;;
poll)
  for _ in $(seq 1 $(( ${2:-420} / 10 ))); do alive || break; sleep 10; done
  alive && stamp "running" || stamp "the steps have exited"
  tail -n 8 "$STATE/queue.log"
  for db in "$TUNER_STUDIES_DIR"/*.db; do [ -f "$db" ] && "${TUNE[@]}" status "$(basename "$db" .db)" 2>&1 | tail -n 12; done
  export_all
  ;;
finish)
  if alive; then
    kill -TERM "$pid"
    for _ in $(seq 1 120); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
    stamp "steps stopped"
  fi
  tail -n 8 "$STATE/queue.log"
  export_all
  ;;
*) echo "unknown phase $PHASE" >&2; exit 2 ;;
esac
stamp "phase $PHASE done"
