#!/usr/bin/env bash
# Set up everything on a fresh machine, idempotently: the project venv (.venv), the CPU engines in
# their own venvs under ${TUNER_CACHE:-~/.cache/tuner}, and the tiny local Qwen3 model.
# Usage: scripts/setup.sh [engine ...]   (default engines: vllm transformers)
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE="${TUNER_CACHE:-$HOME/.cache/tuner}"
PY="${PYTHON:-python3}"
if [ ! -x .venv/bin/tune ] || [ pyproject.toml -nt .venv/.tuner-installed ]; then
  echo "Installing the tuner into .venv..."
  "$PY" -m venv .venv
  .venv/bin/pip install -q -e '.[test,dashboard,postgres,ray,estimate]' 2>&1 | grep -v "^WARNING: Location" || true
  # Ray ships a console script named `tune` too; reinstalling ours last makes `tune` this tool.
  .venv/bin/pip install -q --no-deps --force-reinstall -e . 2>&1 | grep -v "^WARNING: Location" || true
  # (grep without -q: -q would close the pipe early, and pipefail would count tune's SIGPIPE)
  .venv/bin/tune --help | grep "Find the fastest way" >/dev/null || { echo "tune console script is not tuner's" >&2; exit 1; }
  touch .venv/.tuner-installed
fi
scripts/setup_engines.sh "$@"
MODEL="$CACHE/models/tiny-qwen3"
if [ ! -f "$MODEL/tokenizer.json" ]; then
  echo "Building the tiny Qwen3 model (config, locally trained tokenizer, random weights)..."
  rm -rf "$MODEL"
  .venv/bin/tune model tiny "$MODEL"
elif [ ! -f "$MODEL/model.safetensors" ]; then  # built by an older version: add the weights
  .venv/bin/python -c "import sys, pathlib, tuner.tiny_model as m; m.save_random_weights(pathlib.Path(sys.argv[1]))" "$MODEL"
fi
