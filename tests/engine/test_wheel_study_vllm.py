"""`tune start --space cpu-smoke` from the installed wheel in an empty folder: the bundled space and
engine specs come from the wheel's tuner/_data, the engine is the real vLLM CPU server."""

from __future__ import annotations

import subprocess

import pytest

from tests.helpers import install_wheel, wheel_env

pytestmark = pytest.mark.engine


def test_installed_wheel_runs_the_bundled_cpu_study(tmp_path, vllm_bin, tiny_model_path):
    _, python, target = install_wheel(tmp_path)
    empty = tmp_path / "empty"
    empty.mkdir()
    proc = subprocess.run([str(python), "-m", "tuner", "start", "--space", "cpu-smoke", "-n", "1"],
                          cwd=empty, env=wheel_env(), capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "trial 0: ok" in proc.stdout and "best:" in proc.stdout
    assert (empty / "studies" / f"{proc.stdout.split('study ', 1)[1].split()[0]}.db").exists()
    where = subprocess.run([str(python), "-c", "import tuner.paths as p; print(p.SPACES_DIR)"], cwd=empty,
                           env=wheel_env(), capture_output=True, text=True, check=True).stdout
    assert where.startswith(str(target))
