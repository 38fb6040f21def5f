"""Failure classification on real engine logs (captured by scripts/capture_failure_logs.py) and on
the documented texts of failures that cannot be reproduced on a CPU machine."""

import re
from pathlib import Path

import pytest

from tests.helpers import DATA
from tuner.engines.failures import classify_exit, startup_timeout
from tuner.engines.spec import load_engine

LOGS = DATA / "logs"


def expected_class(log: Path) -> str:
    """A captured log is named ENGINE-VERSION-DEVICE-CASE, and a case starts with its class."""
    case = re.sub(r"^[a-z]+-[^-]+-(cpu|h200)-", "", log.stem)
    classes = {f.failure_class for f in load_engine(log.stem.split("-")[0]).failures}
    return max((c for c in classes if case.startswith(c)), key=len)


@pytest.mark.parametrize("log, expected", [
    (p, expected_class(p)) for p in sorted(LOGS.glob("*.log"))
], ids=lambda v: v.stem if isinstance(v, Path) else v)
def test_real_engine_logs(log, expected):
    """Every refusal captured from a real engine (vLLM and SGLang, CPU builds and the H200) gets
    the class its file name says, from that engine's own signatures."""
    failure = classify_exit(load_engine(log.stem.split("-")[0]), log.read_text(), 1)
    assert failure.failure_class == expected
    assert failure.evidence  # the line that explains it, for the user


@pytest.mark.parametrize("text, expected", [
    ("ValueError: Free memory on device (10.2/79.3 GiB) on startup is less than desired GPU memory "
     "utilization (0.9, 71.4 GiB). Decrease GPU memory utilization", "out-of-memory"),
    ("ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` "
     "when initializing the engine.", "kv-cache-too-small"),
    ("ValueError: To serve at least one request with the models's max seq len (40960), (6.25 GiB KV "
     "cache is needed, which is larger than the available KV cache memory (3.1 GiB).",
     "kv-cache-too-small"),
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", "out-of-memory"),
    ("ValueError: The quantization method fp8 is not supported for the current GPU. Minimum "
     "capability: 80. Current capability: 75.", "unsupported-quantization"),
    ("OSError: [Errno 98] Address already in use", "port-in-use"),
    ("ValueError: max_num_batched_tokens (128) must be greater than or equal to max_num_seqs (256).",
     "invalid-config"),
])
def test_documented_vllm_texts(text, expected):
    assert classify_exit(load_engine("vllm"), f"INFO starting\n{text}\nmore\n", 1).failure_class == expected


def test_unknown_death_is_crashed_with_last_error_line():
    log = "INFO loading\nRuntimeError: something odd\n(APIServer) EngineDeadError during shutdown\n"
    failure = classify_exit(load_engine("vllm"), log, -9)
    assert failure.failure_class == "crashed"
    assert failure.evidence == "RuntimeError: something odd"  # shutdown noise is not the cause
    assert "exited with code -9" in failure.reason


def test_hang_without_known_error_is_startup_timeout():
    assert startup_timeout(load_engine("vllm"), 30, "INFO waiting\n").failure_class == "startup-timeout"
