#!/usr/bin/env bash
# Headless Chromium for the report's browser test (tests/unit/report/test_report_browser.py): Debian's
# chromium and chromium-driver packages, installed only when missing. Needs root (CI runs as root).
set -euo pipefail

if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then
  echo "chromium: $(chromium --version 2>/dev/null || echo present)"
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "setup_browser.sh: chromium is missing and installing it needs root (apt-get)" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends chromium chromium-driver fonts-dejavu-core
echo "chromium: $(chromium --version)"
