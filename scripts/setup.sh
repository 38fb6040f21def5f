#!/usr/bin/env bash
# Set up everything on a fresh machine, idempotently: the project venv (.venv), the CPU engines in
# their own venvs under ${TUNER_CACHE:-~/.cache/tuner}, and the tiny local Qwen3 model.
# Usage: scripts/setup.sh [engine ...]   (default: vllm transformers lm-eval, as setup_engines.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE="${TUNER_CACHE:-$HOME/.cache/tuner}"
PY="${PYTHON:-python3}"
# The engine venvs go in beside the project venv and the model (nothing here needs them). On any
# exit the engines' install is waited for and its output printed; its failure fails the setup.
engines_log="$(mktemp)"
scripts/setup_engines.sh "$@" >"$engines_log" 2>&1 &
engines_pid=$!
finish() {
  local rc=$? engines_rc=0
  wait "$engines_pid" || engines_rc=$?
  cat "$engines_log"
  rm -f "$engines_log"
  [ "$rc" -ne 0 ] && exit "$rc"
  exit "$engines_rc"
}
trap finish EXIT
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
MODEL="$CACHE/models/tiny-qwen3"
if [ ! -f "$MODEL/tokenizer.json" ]; then
  echo "Building the tiny Qwen3 model (config, locally trained tokenizer, random weights)..."
  rm -rf "$MODEL"
  .venv/bin/tune model tiny "$MODEL"
elif [ ! -f "$MODEL/model.safetensors" ]; then  # built by an older version: add the weights
  .venv/bin/python -c "import sys, pathlib, tuner.tiny_model as m; m.save_random_weights(pathlib.Path(sys.argv[1]))" "$MODEL"
fi
