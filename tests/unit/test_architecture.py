"""The import-layer contract (pyproject's [tool.importlinter]) holds, and it catches a planted cycle
and a planted typer import: the contract can fail."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO

LINT = Path(sys.executable).parent / "lint-imports"


def _lint(root: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(LINT), "--no-cache"], cwd=root, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(root)}, timeout=300)


def _copy(tmp_path: Path) -> Path:
    root = tmp_path / "tree"
    shutil.copytree(REPO / "tuner", root / "tuner", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", root)
    return root


def test_the_tree_keeps_the_contract():
    out = _lint(REPO)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "0 broken" in out.stdout


@pytest.mark.parametrize(("module", "line", "expect"), [
    ("engines/spec.py", "import tuner.cli  # planted", "tuner.engines.spec -> tuner.cli"),
    ("study/driver.py", "import typer  # planted", "tuner.study.driver -> typer"),
])
def test_a_planted_violation_breaks_it(tmp_path, module, line, expect):
    root = _copy(tmp_path)
    with open(root / "tuner" / module, "a") as f:
        f.write(f"\n{line}\n")
    out = _lint(root)
    assert out.returncode != 0
    assert expect in out.stdout, out.stdout
