#!/usr/bin/env bash
# Set up (project venv, both CPU engines, tiny model, Chromium, a Docker daemon) and run every test,
# real engines and containers included.
set -uo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh || exit 1
scripts/setup_browser.sh || exit 1   # headless Chromium for the report test
. scripts/docker_daemon.sh           # a daemon for the container tests, started here if none answers
trap docker_stop EXIT
trap "exit 130" INT
trap "exit 143" TERM   # so that EXIT runs docker_stop on Ctrl-C and on a CI timeout too
docker_start
export TUNER_REQUIRE_ENGINES=1   # a missing engine fails the engine tests instead of skipping them
.venv/bin/python -m pytest -ra "$@"
rc=$?
if [ $rc -eq 5 ]; then echo "no tests were collected"; exit 0; fi
exit $rc
