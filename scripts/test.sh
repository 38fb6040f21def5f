#!/usr/bin/env bash
# Set up (project venv, both CPU engines, tiny model, Chromium, a Docker daemon and compose) and run
# every test, real engines and containers included. TUNER_SKIP_CONTAINERS=1 runs without docker:
# the container tests and compose checks then skip; otherwise no daemon or compose fails the run.
set -uo pipefail
cd "$(dirname "$0")/.."
# The apt side (headless Chromium for the report test, the Docker packages) is installed beside
# the pip side (scripts/setup.sh): they share no lock, and neither needs the other. apt's output is
# printed once both are done.
apt_log="$(mktemp)"
(
  scripts/setup_browser.sh || exit 1
  if [ "${TUNER_SKIP_CONTAINERS:-}" != 1 ]; then
    . scripts/docker_daemon.sh
    docker_install
  fi
) >"$apt_log" 2>&1 &
apt_pid=$!
setup_rc=0
scripts/setup.sh || setup_rc=$?
apt_rc=0
wait "$apt_pid" || apt_rc=$?
cat "$apt_log"
rm -f "$apt_log"
[ "$setup_rc" -eq 0 ] && [ "$apt_rc" -eq 0 ] || exit 1
if [ "${TUNER_SKIP_CONTAINERS:-}" = 1 ]; then
  echo "docker: TUNER_SKIP_CONTAINERS=1: no daemon or compose set up; the container tests and" \
       "compose checks skip"
else
  . scripts/docker_daemon.sh   # a daemon and compose for the container tests, started here if needed
  trap docker_stop EXIT
  trap "exit 130" INT
  trap "exit 143" TERM   # so that EXIT runs docker_stop on Ctrl-C and on a CI timeout too
  if ! docker_start; then
    echo "test.sh: the container tests and compose checks need the daemon and compose above;" \
         "fix that, or run with TUNER_SKIP_CONTAINERS=1 to skip them" >&2
    exit 1
  fi
  export TUNER_REQUIRE_CONTAINERS=1   # a daemon or compose gone missing fails those tests too
fi
export TUNER_REQUIRE_ENGINES=1   # a missing engine fails the engine tests instead of skipping them
# --durations=25: the 25 slowest, where the run's time goes.
pytest() { .venv/bin/python -m pytest -ra --durations=25 "$@"; }
if [ $# -gt 0 ]; then   # the tests named, as pytest runs them
  pytest "$@"
  rc=$?
  if [ $rc -eq 5 ]; then echo "no tests were collected"; exit 0; fi
  exit $rc
fi
# Every test in two runs. The unit tests on every core (pytest-xdist): one process leaves the
# other cores idle while a test waits on a resolver, a subprocess or a socket. Then the engine
# tests one at a time: each engine launch wants every core, and some compare throughputs.
pytest -m "not engine" -n auto
unit_rc=$?
pytest -m engine
engine_rc=$?
for rc in $unit_rc $engine_rc; do
  [ $rc -eq 0 ] || [ $rc -eq 5 ] || exit $rc
done
exit 0
