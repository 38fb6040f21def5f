#!/usr/bin/env bash
# The main job on the embedded default: a real study of the vLLM CPU engine on the tiny model,
# stored in SQLite under studies/, then the best config with its serve command.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh vllm
exec .venv/bin/tune start --space cpu-smoke "$@"
