#!/usr/bin/env bash
# Set up (project venv, both CPU engines, tiny model) and run every test, real engines included.
set -uo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh || exit 1
scripts/setup_browser.sh || exit 1   # headless Chromium for the report test
export TUNER_REQUIRE_ENGINES=1   # a missing engine fails the engine tests instead of skipping them
.venv/bin/python -m pytest -ra "$@"
rc=$?
if [ $rc -eq 5 ]; then echo "no tests were collected"; exit 0; fi
exit $rc
