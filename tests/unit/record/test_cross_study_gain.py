"""benchmarks/cross_study_gain.py on the real H200 exports: the second stay's confirmed pick against
the defaults repeated in the third stay, as docs/results/h200-engines.md quotes it."""

from __future__ import annotations

import subprocess
import sys

from tuner.paths import REPO_ROOT

RESULTS = REPO_ROOT / "docs" / "results"


def _run(*specs: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "benchmarks.cross_study_gain", *specs], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=300)


def test_a_pick_of_one_stay_against_the_defaults_of_another() -> None:
    out = _run(f"{RESULTS / 'h200-vllm.tar.gz'}:5", f"{RESULTS / 'h200-engines-prior.tar.gz'}:1")
    assert out.returncode == 0, out.stderr
    head, versus = out.stdout.splitlines()
    assert head.startswith("h200-vllm trial 5 (search, n=3)")
    assert "h200-engines-prior trial 1 (sglang-defaults, n=2)" in versus
    assert "(n=3 vs n=2, no interval)" in versus and "CI" not in versus  # 2 runs: no claim


def test_a_config_named_wrong_is_refused_with_exit_2() -> None:
    out = _run(f"{RESULTS / 'h200-vllm.tar.gz'}:99", f"{RESULTS / 'h200-vllm.tar.gz'}:0")
    assert out.returncode == 2 and "trial 99 is no feasible launch" in out.stderr
    assert "Traceback" not in out.stderr
