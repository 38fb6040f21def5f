"""The wheel carries the engine knowledge: installed (not editable) into a fresh venv, `tune plan`
works from an empty folder, outside any checkout."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

from tests.helpers import REPO


def test_wheel_plans_a_bundled_space_from_an_empty_folder(tmp_path):
    dist = tmp_path / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q",
                    "-w", str(dist), str(REPO)], check=True, capture_output=True, timeout=300)
    wheel = next(dist.glob("tuner-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    for data in ("tuner/engines/specs/vllm.yaml", "tuner/engines/specs/hardware/gpus.yaml",
                 "tuner/engines/specs/runtimes/container.yaml", "tuner/space/bundled/a100-throughput.yaml",
                 "tuner/bench/samples/sharegpt_small.json", "tuner/py.typed"):
        assert data in names, f"{data} is not in the wheel"

    venv = tmp_path / "fresh"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    target = Path(subprocess.run([str(venv / "bin" / "python"), "-c",
                                  "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                 capture_output=True, text=True, check=True).stdout.strip())
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target),
                    str(wheel)], check=True, capture_output=True, timeout=300)
    empty = tmp_path / "empty"
    empty.mkdir()
    # The dependencies come from the test venv's site-packages; tuner itself only from the wheel
    # (the editable install's .pth is not processed for a PYTHONPATH entry).
    env = {**os.environ, "PYTHONPATH": sysconfig.get_paths()["purelib"], "TUNER_CACHE": str(tmp_path)}
    where = subprocess.run([str(venv / "bin" / "python"), "-c", "import tuner; print(tuner.__file__)"],
                           cwd=empty, env=env, capture_output=True, text=True, check=True).stdout
    assert where.startswith(str(target)), where
    out = subprocess.run([str(venv / "bin" / "python"), "-m", "tuner", "plan", "--space",
                          "a100-throughput", "--gpu", "a100-sxm-80gb", "--samples", "1"],
                         cwd=empty, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    for engine in ("vLLM", "SGLang", "TensorRT-LLM"):
        assert engine in out.stdout
    assert "unknown space" not in out.stdout + out.stderr
