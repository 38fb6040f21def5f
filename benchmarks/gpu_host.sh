# Sourced by the scripts that run on the lent GPU host (gpu_engines_study.sh, gpu_campaign.sh):
# the places they share, and the two steps every stay starts with. Run from the checkout's root.
#   stage_carried    one staging call: copy what this device call carried (.kits/<kit>/<files>,
#                    .whl/) to /tmp/kits, where it stays while the machine is warm; a call carries at
#                    most 64 MiB, so a kit's parts come one per call
#   install_staged   the tuner's own dependencies that the image lacks (hash-pinned manifest, once),
#                    then each staged engine kit into a folder of its own (their pins conflict), and
#                    the Qwen3-14B shape the spaces serve
OUT="${OUT:-/tmp/out}"
STATE="${GPU_STATE:-/tmp/gpu-study}"   # GPU_STATE, GPU_KITS, GPU_SITE: elsewhere in the tests
KITS="${GPU_KITS:-/tmp/kits}"
SITE="${GPU_SITE:-/tmp/site}"
export TUNER_CACHE="$STATE/cache" TUNER_STUDIES_DIR="$STATE/studies" PYTHONUNBUFFERED=1
export PYTHONPATH="$PWD:$SITE"   # this checkout's tuner first, then the deps the image lacks
TUNE=(python3 -m tuner)
mkdir -p "$OUT" "$STATE" "$KITS"
stamp() { echo "[$(date -u +%H:%M:%S)] $*"; }
gpu_mem() { nvidia-smi --query-gpu=index,memory.used --format=csv,noheader; }

stage_carried() {
  local kit
  for kit in .kits/*/; do
    [ -d "$kit" ] || continue
    mkdir -p "$KITS/$(basename "$kit")"
    cp -v "$kit"* "$KITS/$(basename "$kit")/"
  done
  if [ -d .whl ]; then mkdir -p "$KITS/whl" && cp .whl/* "$KITS/whl/"; fi
  du -sh "$KITS"/* 2>/dev/null
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
}

install_staged() {
  local kit
  if [ ! -f "$SITE/.done" ]; then
    python3 -m pip install -q --no-index --find-links "$KITS/whl" --require-hashes --no-deps \
      --no-compile --no-cache-dir --upgrade --target "$SITE" -r "$KITS/whl/manifest.txt" || return 1
    touch "$SITE/.done"
  fi
  for kit in vllm-0.25.1 sglang-0.5.17; do
    [ -f "$TUNER_CACHE/engines/$kit/.tuner-engine.json" ] || [ ! -f "$KITS/$kit/install.sh" ] && continue
    stamp "installing $kit"
    bash "$KITS/$kit/install.sh" --target "$TUNER_CACHE/engines/$kit" || return 1
    stamp "installed $kit"
  done
  "${TUNE[@]}" model tiny "$TUNER_CACHE/models/qwen3-14b-shape" --shape qwen3-14b --no-weights \
    > /dev/null 2>&1 || true
}
