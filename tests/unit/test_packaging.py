"""The wheel carries the top-level data (every file of search_spaces/ and engines/, as tuner/_data/):
installed (not editable) into a fresh venv, `tune plan` works from an empty folder, outside any
checkout."""

from __future__ import annotations

import subprocess
import zipfile

from tests.helpers import REPO, install_wheel, wheel_env


def test_wheel_plans_a_bundled_space_from_an_empty_folder(tmp_path):
    wheel, python, target = install_wheel(tmp_path)
    names = zipfile.ZipFile(wheel).namelist()
    shipped = [f"tuner/_data/{p.relative_to(REPO).as_posix()}"
               for folder in ("search_spaces", "engines") for p in sorted((REPO / folder).rglob("*.yaml"))]
    assert "tuner/_data/engines/hardware/gpus.yaml" in shipped
    for data in (*shipped, "tuner/bench/samples/sharegpt_small.json", "tuner/py.typed", "tuner/kit/install.sh"):
        assert data in names, f"{data} is not in the wheel"
    assert not [n for n in names if n.startswith(("search_spaces/", "engines/", "tests/"))], names

    venv = python.parent.parent
    empty = tmp_path / "empty"
    empty.mkdir()
    env = wheel_env(TUNER_CACHE=str(tmp_path))
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
