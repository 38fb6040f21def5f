"""The HTML report as a person sees it: headless Chromium runs its scripts, renders, screenshots.

Needs Debian's chromium (scripts/setup_browser.sh). The DOM is dumped after the page's scripts ran,
so plotly's SVG being there proves the inlined library worked offline.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.helpers import evaluation_doc, report_study
from tuner.report.render import write_report

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--virtual-time-budget=10000", "--hide-scrollbars"]


@pytest.fixture(scope="module")
def chromium() -> str:
    path = shutil.which("chromium")
    if path:
        return path
    message = "chromium is not installed; run scripts/setup_browser.sh"
    if os.environ.get("TUNER_REQUIRE_ENGINES"):
        pytest.fail(message)
    pytest.skip(message)


def run_chromium(chromium: str, tmp: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([chromium, *FLAGS, f"--user-data-dir={tmp / 'profile'}", *args],
                          capture_output=True, text=True, timeout=180)


def test_report_renders_tables_and_plots_in_chromium(chromium, tmp_path):
    report = write_report(report_study(evaluation=evaluation_doc([5000, 5100, 4900], [6000, 6150, 5900])),
                          tmp_path / "report.html")
    url = report.as_uri()

    dom = run_chromium(chromium, tmp_path, "--dump-dom", url)
    assert dom.returncode == 0, dom.stderr[-2000:]
    html = dom.stdout
    plots = re.findall(r'<div id="(plot-[a-z]+)"[^>]*class="[^"]*plotly-graph-div', html)
    assert {"plot-history", "plot-parallel", "plot-importance"} <= set(plots), plots
    assert html.count('class="main-svg"') >= 3  # drawn by plotly.js, not just placeholders
    workloads = html[html.index('<table class="workloads">'):]
    workloads = workloads[:workloads.index("</table>")]
    assert workloads.count("<tr>") == 1 + 8  # header + 2 workloads x 4 metrics
    assert "short-128-4" in workloads and "+20." in workloads

    shot = tmp_path / "report.png"
    r = run_chromium(chromium, tmp_path, "--window-size=1280,2400", f"--screenshot={shot}", url)
    assert r.returncode == 0, r.stderr[-2000:]
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 50_000  # a blank page is ~10 kB
