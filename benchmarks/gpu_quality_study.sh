#!/usr/bin/env bash
# The quality guardrail on a real GPU, in one run on the lent H200 (no internet there): install the
# carried wheels (scripts/wheelhouse.sh --minimal, or the list in docs/results/h200-quality.md), build
# a random-weight Qwen3-0.6B-shape model and its torchao FP8 variant on the GPU, run
# `tune start --space h200-quality` (transformers serve; quantization {none, bnb_8bit, bnb_4bit, fp8}
# searched with the guardrail on; BF16 is the reference and its repeat measures the probe's noise
# floor), then export the study and collect the logs under $OUT.
#
# Usage there:  bash benchmarks/gpu_quality_study.sh        (the repo is the working dir)
set -uo pipefail
STUDY_S="${STUDY_S:-420}"
OUT="${OUT:-/tmp/out}"
mkdir -p "$OUT"
exec > >(tee "$OUT/run.log") 2>&1
t0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - t0 ))s] $*"; }

python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH="/tmp/site:$PWD"
export TUNER_CACHE=/tmp/tcache TUNER_STUDIES_DIR="$OUT/studies" PYTHONUNBUFFERED=1
TUNE=(python3 -m tuner)
stamp "wheels installed"
LOGS="$OUT/studies/logs"; mkdir -p "$LOGS"
nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv
python3 -c "import transformers, torch, torchao, bitsandbytes; print('transformers', transformers.__version__, 'torch', torch.__version__, 'torchao', torchao.__version__, 'bitsandbytes', bitsandbytes.__version__)"
transformers serve --help > "$LOGS/transformers-serve-help.txt" 2>&1 || true

M="$TUNER_CACHE/models/qwen3-0.6b-random"
"${TUNE[@]}" model tiny "$M" --shape qwen3-0.6b --device cuda --fp8-variant "$M-fp8" || exit 1
du -sh "$M" "$M-fp8"
stamp "models built"

"${TUNE[@]}" plan --space h200-quality --samples 0 > "$LOGS/plan.txt" 2>&1 || true
timeout -s INT "$STUDY_S" "${TUNE[@]}" start --space h200-quality --study h200-quality \
  > "$LOGS/start.log" 2>&1
echo "tune start exited $?"
tail -n 40 "$LOGS/start.log"
stamp "search finished"

"${TUNE[@]}" status h200-quality || true
"${TUNE[@]}" best h200-quality || true
"${TUNE[@]}" report h200-quality --format md --out "$OUT/h200-quality-report.md" || true
"${TUNE[@]}" export h200-quality "$OUT/h200-quality.tar.gz" || true
tar -czf "$OUT/logs.tar.gz" -C "$OUT/studies" . 2>/dev/null || true
rm -rf "$OUT/studies"
stamp "done"
