"""`tune best` on a real cross-engine H200 study (experiments/h200-2026-12/data/): the study was
stopped while `tune confirm` repeated the best config, after both engines' defaults had been
repeated. The answer is the config a third faster, judged against each engine's defaults."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import run_tune
from tuner.paths import REPO_ROOT

ARCHIVE = REPO_ROOT / "experiments" / "h200-2026-12" / "data" / "h200-engines-prior.tar.gz"


def test_best_is_the_unconfirmed_pick_against_each_engines_defaults(studies: Path) -> None:
    assert run_tune("import", str(ARCHIVE)).returncode == 0
    out = run_tune("best", "h200-engines-prior")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert any(line.startswith("best: trial 2 (model-pick)") and "measured once" in line
               and "tune resume h200-engines-prior" in line for line in lines)
    assert "engine=sglang, quantization=fp8" in out.stdout
    versus = [line.split(":")[0] for line in lines if line.startswith("vs baseline")]
    assert versus == ["vs baseline vllm-defaults", "vs baseline sglang-defaults"]
    assert "is the best config measured" not in out.stdout
