#!/usr/bin/env bash
# A whole GPU study in one run on the lent H200 machine (no internet there): install the carried
# wheels, build a random-weight Qwen3-8B-shape model on the GPU, run `tune start --space
# h200-transformers` with NVML telemetry, then export the study and collect logs under $OUT.
#
# With 2 GPUs (nvidia-h200-x2) it runs one worker per GPU on a shared journal-file study, so two
# trials run at once on real GPUs (Ray's wheel is larger than what can be carried to the machine).
#
# Prepare here (the machine has no internet; about 19 MiB, under the 64 MiB a call carries):
#   scripts/wheelhouse.sh --python 3.12 --platform manylinux_2_28_x86_64 --extras serving --minimal --out .whl
# Usage there:  bash benchmarks/gpu_study.sh [n_trials]        (the repo is the working dir)
set -uo pipefail
N_TRIALS="${1:-8}"
STUDY_S="${STUDY_S:-280}"     # the search, then the repeats: each phase stops cleanly (SIGINT) in time
CONFIRM_S="${CONFIRM_S:-150}"
OUT="${OUT:-/tmp/out}"
mkdir -p "$OUT"
exec > >(tee "$OUT/run.log") 2>&1
t0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - t0 ))s] $*"; }

# The wheelhouse's manifest pins every wheel by sha256; the image has the rest (torch, transformers, ...).
python3 -m pip install -q --no-index --find-links .whl --require-hashes --no-deps --no-compile \
  --no-cache-dir --upgrade --target /tmp/site -r .whl/manifest.txt || exit 1
export PYTHONPATH="/tmp/site:$PWD"
export TUNER_CACHE=/tmp/tcache TUNER_STUDIES_DIR="$OUT/studies" PYTHONUNBUFFERED=1
TUNE=(python3 -m tuner)
stamp "wheels installed"
LOGS="$OUT/studies/logs"; mkdir -p "$LOGS"
nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv
transformers serve --help > "$LOGS/transformers-serve-help.txt" 2>&1 || true
python3 -c "import transformers, torch; print('transformers', transformers.__version__, 'torch', torch.__version__)"

"${TUNE[@]}" model tiny "$TUNER_CACHE/models/qwen3-8b-random" --shape qwen3-8b --weights --device cuda || exit 1
du -sh "$TUNER_CACHE/models/qwen3-8b-random"
stamp "model built"

python3 benchmarks/nvml_probe.py > "$OUT/nvml-probe.json" 2> "$LOGS/nvml-probe.err" || true
stamp "NVML probe done"

# Keep only the fixed args this transformers version knows (flags differ between 5.x releases).
SPACE="$OUT/studies/h200-transformers.yaml"
python3 - "$LOGS/transformers-serve-help.txt" "$SPACE" <<'PY'
import sys, yaml
help_text = open(sys.argv[1]).read()
space = yaml.safe_load(open("search_spaces/h200-transformers.yaml"))
engine = space["engines"]["transformers"]
args, kept = engine["fixed_args"], []
i = 0
while i < len(args):
    takes_value = i + 1 < len(args) and not args[i + 1].startswith("--")
    if args[i] in help_text:
        kept += args[i:i + 1 + takes_value]
    else:
        print(f"dropping {args[i]}: not in this version's `transformers serve --help`")
    i += 1 + takes_value
engine["fixed_args"] = kept
yaml.safe_dump(space, open(sys.argv[2], "w"), sort_keys=False)
PY

gpus=$(nvidia-smi --list-gpus | wc -l)
if [ "$gpus" -ge 2 ]; then
  storage="journal://$OUT/studies/h200-transformers.journal"
else
  storage="sqlite:///$OUT/studies/h200-transformers.db"
fi
# One worker per GPU on one study (a journal file is safe for several processes; SQLite is not).
workers() {  # workers SECONDS FIRST-COMMAND... ; the others join with `tune resume`
  local seconds=$1 pids=(); shift
  for i in $(seq 0 $((gpus - 1))); do
    if [ "$i" -eq 0 ]; then cmd=("$@"); else cmd=(resume h200-transformers --storage "$storage"); fi
    CUDA_VISIBLE_DEVICES=$i timeout -s INT "$seconds" "${TUNE[@]}" "${cmd[@]}" \
      > "$LOGS/$1-worker-$i.log" 2>&1 &
    pids+=($!)
    sleep 5  # the first worker creates the study / queues the repeats
  done
  wait "${pids[@]}"  # not a bare `wait`: it would also wait for the `tee` of this script's output
  tail -n 25 "$LOGS/$1"-worker-*.log
}
workers "$STUDY_S" start --space "$SPACE" --study h200-transformers --storage "$storage" \
  --n-trials "$N_TRIALS"
stamp "search finished"
workers "$CONFIRM_S" confirm h200-transformers --top-k 1 --repeats 1 --storage "$storage"
stamp "study finished"

"${TUNE[@]}" status h200-transformers --storage "$storage" || true
"${TUNE[@]}" best h200-transformers --storage "$storage" || true
"${TUNE[@]}" export h200-transformers "$OUT/h200-transformers.tar.gz" --storage "$storage" || true
# $OUT comes back with few files: everything else travels in one archive.
tar -czf "$OUT/logs.tar.gz" -C "$OUT/studies" . 2>/dev/null || true
rm -rf "$OUT/studies"
stamp "done"
