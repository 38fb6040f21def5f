#!/usr/bin/env bash
# Run tests against the last commit, from a throw-away clone, so edits in the working tree during a
# long real-engine run cannot change the code under test. Usage: scripts/snapshot_test.sh [pytest args]
set -uo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
snap="$(mktemp -d)/snap"
git clone -q "$repo" "$snap"
cd "$snap"
PYTHONPATH="$snap" "$repo/.venv/bin/python" -m pytest -p no:cacheprovider "$@"
rc=$?
rm -rf "$(dirname "$snap")"
exit $rc
