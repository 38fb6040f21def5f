"""The wheel carries the top-level data (every file of search_spaces/ and engines/, as tuner/_data/):
installed (not editable) into a fresh venv, `tune plan` works from an empty folder, outside any
checkout."""

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
    shipped = [f"tuner/_data/{p.relative_to(REPO).as_posix()}"
               for folder in ("search_spaces", "engines") for p in sorted((REPO / folder).rglob("*.yaml"))]
    assert "tuner/_data/engines/hardware/gpus.yaml" in shipped
    for data in (*shipped, "tuner/bench/samples/sharegpt_small.json", "tuner/py.typed"):
        assert data in names, f"{data} is not in the wheel"
    assert not [n for n in names if n.startswith(("search_spaces/", "engines/", "tests/"))], names

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
    spaces = subprocess.run([str(venv / "bin" / "python"), "-c",
                             "from tuner.space.load import available_spaces; print(available_spaces())"],
                            cwd=empty, env=env, capture_output=True, text=True, check=True).stdout
    assert spaces.strip() == str(sorted(p.stem for p in (REPO / "search_spaces").glob("*.yaml")))
    out = subprocess.run([str(venv / "bin" / "python"), "-m", "tuner", "plan", "--space",
                          "a100-throughput", "--gpu", "a100-sxm-80gb", "--samples", "1"],
                         cwd=empty, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    for engine in ("vLLM", "SGLang", "TensorRT-LLM"):
        assert engine in out.stdout
    assert "unknown space" not in out.stdout + out.stderr
