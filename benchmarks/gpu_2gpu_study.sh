#!/usr/bin/env bash
# Issue 25 on the nvidia-h200-x2 machine (2 x H200, no internet): the space h200x2-vllm (vLLM 0.25.1,
# Qwen3-14B shape, dummy weights, objective total_tokens_per_gpu_hour), run two ways:
#   single   one `tune start` process that sees both GPUs: it can launch tp 2 and dp 2 configs;
#   pair     the same search as two workers on one journal-file study, one per GPU
#            (CUDA_VISIBLE_DEVICES=0 / 1): each sees one GPU, so the rules prune tp x dp = 2 there;
#   confirm  `tune confirm` repeats of the single study's best and of both baselines (needs both
#            GPUs: the tp 2 baseline), for the intervals of `tune best`;
#   all      the three in turn (longer than one 10-minute device command).
# Every phase ends with `tune status`, `tune best`, `tune export` and the study's journal in $OUT, and,
# once both studies exist, benchmarks/time_to_best.py's wall clock to the best value both reached.
#
# A device command runs 10 minutes at most and a machine starts bare, so run one phase per command
# and carry the journals back in: copy the returned *.journal files into .gpu-state/ (listed in
# .git/info/exclude) and name .gpu-state in `carry`; a phase resumes a study whose journal is there.
#
# Prepare here:
#   scripts/wheelhouse.sh --python 3.12 --platform manylinux_2_28_x86_64 --extras serving --minimal --out .whl
#   The vLLM 0.25.1 kit (tune engine kit vllm==0.25.1 --trim --split 50M, staged to /tmp/kits as in
#   benchmarks/gpu_engines_study.sh): $KIT/install.sh
#   --target DIR installs the engine's wheels into DIR (DIR/bin/vllm), as gpu-engines.md describes.
# Usage there:  bash benchmarks/gpu_2gpu_study.sh single|pair|confirm|all [n_trials]   (repo root)
set -uo pipefail
PHASE="${1:?usage: gpu_2gpu_study.sh single|pair|confirm|all [n_trials]}"
N_TRIALS="${2:-12}"
STUDY_S="${STUDY_S:-480}"       # each phase stops cleanly (SIGINT) in time for the export
CONFIRM_S="${CONFIRM_S:-480}"
OUT="${OUT:-/tmp/out}"
STATE="${STATE:-$PWD/.gpu-state}"
KIT="${KIT:-/tmp/kits/vllm-0.25.1}"
SPACE=h200x2-vllm
SINGLE=h200x2-single
PAIR=h200x2-pair
mkdir -p "$OUT"
exec > >(tee -a "$OUT/run-$PHASE.log") 2>&1
t0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - t0 ))s] $*"; }

# NVLink multicast stays off on the lent machines (it can take the host's shared GPUs out of
# service); the space sets the same for the engine, and every process here inherits these.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export NCCL_DEBUG="${NCCL_DEBUG:-WARN}"
echo "NCCL and multicast settings:"; env | grep -E '^(NCCL_|TORCH_SYMM_MEM_|NVSHMEM_)' | sort

python3 -m pip install -q --no-index --find-links .whl --require-hashes --no-deps --no-compile \
  --no-cache-dir --upgrade --target /tmp/site -r .whl/manifest.txt || exit 1
export PYTHONPATH="$PWD:/tmp/site"
export TUNER_CACHE=/tmp/tcache TUNER_STUDIES_DIR=/tmp/studies PYTHONUNBUFFERED=1
export VLLM_CACHE_ROOT=/tmp/vllm-cache   # one torch.compile cache for every trial's launch
TUNE=(python3 -m tuner)
STUDIES=$TUNER_STUDIES_DIR; LOGS="$STUDIES/logs"; mkdir -p "$LOGS"
ENGINE="$TUNER_CACHE/engines/vllm-0.25.1"   # the folder the space names as install:
stamp "tuner installed"

nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv
nvidia-smi topo -m || true
python3 -c 'import torch; print("torch", torch.__version__, "GPUs", torch.cuda.device_count())'
gpus=$(nvidia-smi --list-gpus | wc -l)
if [ "$gpus" -lt 2 ]; then
  echo "this needs the nvidia-h200-x2 machine: $gpus GPU(s) here"; exit 1
fi

bash "$KIT/install.sh" --target "$ENGINE" || { echo "no vLLM kit at $KIT"; exit 1; }
PYTHONPATH="$ENGINE" "$ENGINE/bin/vllm" --version || exit 1
"${TUNE[@]}" model tiny "$TUNER_CACHE/models/qwen3-14b-shape" --shape qwen3-14b || exit 1
stamp "engine and model ready"

"${TUNE[@]}" plan --space "$SPACE" --samples 2 > "$LOGS/plan-2gpu.txt" 2>&1
CUDA_VISIBLE_DEVICES=0 "${TUNE[@]}" plan --space "$SPACE" --samples 2 > "$LOGS/plan-1gpu.txt" 2>&1
grep -A8 "pruned before launch" "$LOGS/plan-2gpu.txt" "$LOGS/plan-1gpu.txt" || true

storage() { echo "journal://$STUDIES/$1.journal"; }
have() {  # have NAME: the study's journal is here, made earlier in this command or carried in
  [ -f "$STUDIES/$1.journal" ] || { [ -f "$STATE/$1.journal" ] && cp "$STATE/$1.journal" "$STUDIES/"; }
}
search_cmd() {  # search_cmd NAME: CMD starts the study, or resumes it when its journal is here
  if have "$1"; then CMD=(resume "$1" --storage "$(storage "$1")")
  else CMD=(start --space "$SPACE" --study "$1" --storage "$(storage "$1")" --n-trials "$N_TRIALS"); fi
}
wrap_up() {  # wrap_up NAME
  local url; url=$(storage "$1")
  "${TUNE[@]}" status "$1" --storage "$url" || true
  "${TUNE[@]}" best "$1" --storage "$url" || true
  "${TUNE[@]}" export "$1" "$OUT/$1.tar.gz" --storage "$url" || true
  cp "$STUDIES/$1.journal" "$OUT/" 2>/dev/null || true
}

run_single() {
  search_cmd "$SINGLE"
  stamp "single: one process, both GPUs visible: ${CMD[*]}"
  timeout -s INT "$STUDY_S" "${TUNE[@]}" "${CMD[@]}" > "$LOGS/single.log" 2>&1
  tail -n 25 "$LOGS/single.log"
  wrap_up "$SINGLE"
}

run_pair() {  # worker 0 creates the study (or resumes it); worker 1 joins it
  local pids=()
  for i in 0 1; do
    if [ "$i" -eq 0 ]; then search_cmd "$PAIR"; else CMD=(resume "$PAIR" --storage "$(storage "$PAIR")"); fi
    stamp "pair: worker $i on GPU $i: ${CMD[*]}"
    CUDA_VISIBLE_DEVICES=$i timeout -s INT "$STUDY_S" "${TUNE[@]}" "${CMD[@]}" \
      > "$LOGS/pair-worker-$i.log" 2>&1 &
    pids+=($!)
    sleep 5  # the first worker creates the study and queues the baselines
  done
  wait "${pids[@]}"  # not a bare `wait`: it would also wait for the `tee` of this script's output
  tail -n 25 "$LOGS"/pair-worker-*.log
  wrap_up "$PAIR"
}

run_confirm() {
  have "$SINGLE" || { echo "no $SINGLE journal: run the single phase first"; return 1; }
  stamp "confirm: repeats of $SINGLE's best and of its baselines, interleaved"
  timeout -s INT "$CONFIRM_S" "${TUNE[@]}" confirm "$SINGLE" --top-k 1 --repeats 1 \
    --storage "$(storage "$SINGLE")" > "$LOGS/confirm.log" 2>&1
  tail -n 25 "$LOGS/confirm.log"
  wrap_up "$SINGLE"
}

case "$PHASE" in
  single) run_single ;;
  pair) run_pair ;;
  confirm) run_confirm ;;
  all) run_single; run_pair; run_confirm ;;
  *) echo "unknown phase $PHASE: single, pair, confirm or all"; exit 2 ;;
esac

if have "$SINGLE" && have "$PAIR"; then
  python3 -m benchmarks.time_to_best "$SINGLE@$(storage "$SINGLE")" "$PAIR@$(storage "$PAIR")" \
    --out "$OUT/time-to-best.json" || true
fi
# $OUT comes back with few files: everything else travels in one archive.
tar -czf "$OUT/logs.tar.gz" -C "$STUDIES" logs 2>/dev/null || true
stamp "done"
