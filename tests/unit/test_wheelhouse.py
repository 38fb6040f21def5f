"""scripts/wheelhouse.sh: its arguments, and a dry run for the H200 image (Python 3.12, manylinux
2.28) whose manifest is checked line by line. The dry run resolves against the package index (the
network this project's CI has: PyPI), and downloads nothing."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.tags import Tag, compatible_tags, cpython_tags
from packaging.utils import canonicalize_name, parse_wheel_filename

from tests.helpers import REPO

SCRIPT = REPO / "scripts" / "wheelhouse.sh"
LINE = re.compile(r"^(?P<name>[A-Za-z0-9._-]+)==(?P<version>\S+) --hash=sha256:(?P<sha>[0-9a-f]{64})"
                  r"  # (?P<file>\S+\.whl)$")


def _run(*args: str, timeout: float = 60, python: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHON"}
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=timeout, env={**env, **({"PYTHON": python} if python else {})})


@pytest.mark.parametrize("args, words", [
    (("--python", "3.12", "--platform", "manylinux_2_28_x86_64"), "Usage: scripts/wheelhouse.sh"),
    (("--python", "312", "--platform", "x", "--out", "o"), "--python takes X.Y, got 312"),
    (("--bogus",), "unknown argument --bogus"),
    (("--python", "3.99", "--platform", "x", "--out", "o"), "needs a Python 3.99 to resolve for it"),
])
def test_bad_arguments_exit_2_with_the_usage(args, words):
    r = _run(*args, python=sys.executable)
    assert r.returncode == 2 and words in r.stdout + r.stderr


def _index_reachable() -> bool:
    try:
        socket.create_connection(("pypi.org", 443), timeout=5).close()
        return True
    except OSError:
        return False


def _h200_tags() -> set[Tag]:
    platforms = [f"manylinux_2_{m}_x86_64" for m in range(28, 4, -1)] + [
        "manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64"]
    return set(cpython_tags((3, 12), platforms=platforms)) | set(
        compatible_tags((3, 12), platforms=platforms))


@pytest.mark.skipif(not _index_reachable(), reason="the package index is not reachable from here")
def test_dry_run_manifest_for_the_h200_image(tmp_path):
    out = tmp_path / "wheels"
    r = _run("--python", "3.12", "--platform", "manylinux_2_28_x86_64", "--extras", "serving",
             "--minimal", "--dry-run", "--out", str(out), timeout=600)
    if "needs a Python 3.12" in r.stderr:
        pytest.skip(r.stderr.strip())
    assert r.returncode == 0, r.stdout + r.stderr
    assert [p.name for p in out.iterdir()] == ["manifest.txt"]  # a dry run downloads nothing
    lines = (out / "manifest.txt").read_text().splitlines()
    header = [line for line in lines if line.startswith("#")]
    assert header[0] == ("# tuner wheelhouse: cp312 manylinux_2_28_x86_64, profile minimal (without "
                         "engines/hosts/h200-cuda-image.txt), extras 'serving'")
    assert "--no-index --find-links DIR --require-hashes --no-deps" in header[2]
    rows = [LINE.match(line) for line in lines if not line.startswith("#")]
    assert all(rows), [line for line, m in zip(lines[3:], rows) if not m]
    assert header[1].startswith(f"# {len(rows)} wheels, dry run")
    pins = {canonicalize_name(m["name"]): m["version"] for m in rows}
    allowed = _h200_tags()
    for m in rows:  # every wheel installs on the image: cp312 or abi3 or pure, glibc <= 2.28
        name, version, _, tags = parse_wheel_filename(m["file"])
        assert name == canonicalize_name(m["name"]) and str(version) == m["version"]
        assert tags & allowed, m["file"]
    # The transformers-serve extras at the versions that worked there, the tuner and its own
    # dependencies the image lacks ...
    assert {k: pins.get(k) for k in ("fastapi", "starlette", "uvicorn", "pydantic", "openai")} == {
        "fastapi": "0.120.4", "starlette": "0.49.3", "uvicorn": "0.54.0", "pydantic": "2.14.4",
        "openai": "1.109.1"}
    assert {"tuner", "optuna", "sqlalchemy", "orjson"} <= set(pins)
    # ... and neither plotly (HTML reports are rendered where the study is imported) nor anything
    # the image already has.
    assert "plotly" not in pins
    image = Path(REPO / "engines" / "hosts" / "h200-cuda-image.txt").read_text().splitlines()
    have = {canonicalize_name(line.split("==")[0]) for line in image if not line.startswith("#")}
    assert {"torch", "transformers", "numpy", "httpx", "tokenizers"} <= have
    assert not have & set(pins)
