"""What a measurement depends on besides the config: hardware, driver, engine and tuner versions.

Stored with every trial so results from different machines are never silently mixed.
"""

from __future__ import annotations

import hashlib
import platform
import re
import subprocess
from functools import cache
from pathlib import Path

from tuner import __version__
from tuner.paths import REPO_ROOT


@cache
def gpus() -> list[dict]:
    """GPUs seen through NVML; empty when there is no NVIDIA driver (CPU machines)."""
    try:
        import pynvml
        pynvml.nvmlInit()
    except Exception:
        return []
    try:
        out = []
        driver = pynvml.nvmlSystemGetDriverVersion()
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(h)
            name = pynvml.nvmlDeviceGetName(h)
            out.append({
                "index": i,
                "name": name.decode() if isinstance(name, bytes) else name,
                "compute_capability": f"{major}.{minor}",
                "memory_mib": pynvml.nvmlDeviceGetMemoryInfo(h).total // (1 << 20),
                "driver": driver.decode() if isinstance(driver, bytes) else driver,
            })
        return out
    finally:
        pynvml.nvmlShutdown()


@cache
def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


@cache
def _cpu_flags() -> str:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return ""
    flags = re.search(r"^flags\s*:\s*(.*)$", text, re.M)
    have = set(flags.group(1).split()) if flags else set()
    return "+".join(f for f in ("avx2", "avx512f", "amx_tile") if f in have)


def device_key() -> str:
    """The hardware identity that capability failures generalise over (``sm90``, ``cpu-avx2``)."""
    g = gpus()
    if g:
        return "sm" + g[0]["compute_capability"].replace(".", "")
    return "cpu-" + (_cpu_flags() or platform.machine())


@cache
def git_sha() -> str | None:
    try:
        return subprocess.run(["git", "-C", str(REPO_ROOT), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, timeout=5).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def model_revision(model_path: str) -> str | None:
    """A content hash of config.json: random-weight models have no other revision."""
    cfg = Path(model_path) / "config.json"
    try:
        return hashlib.sha256(cfg.read_bytes()).hexdigest()[:12]
    except OSError:
        return None


def environment() -> dict:
    g = gpus()
    return {
        "host": platform.node(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu": cpu_model(),
        "cpu_count": __import__("os").cpu_count(),
        "gpus": g,
        "gpu": g[0]["name"] if g else None,
        "compute_capability": g[0]["compute_capability"] if g else None,
        "driver": g[0]["driver"] if g else None,
        "device": device_key(),
        "tuner_version": __version__,
        "tuner_git": git_sha(),
    }


def engine_version(pattern: str, log_text: str) -> str | None:
    if not pattern:
        return None
    m = re.search(pattern, log_text)
    return m.group(1) if m else None
