"""The hardware a study runs on (detected) or is planned for (a named profile).

Rules need only a few facts: compute capability, memory per GPU, GPU count and name, CPU flags.
Detection reuses the NVML query of ``fingerprint`` so the device key stored with each trial and the
one rules and learned infeasibility use are the same string. Profiles in
``engines/hardware/gpus.yaml`` let ``tune plan --gpu NAME`` plan for a GPU you are not on;
``NAME-xN`` is N of them in one host (``h200-141gb-x2``), so multi-GPU rules can be planned too.

The GPU count is what a launch from this process can use: NVML sees every GPU of the host whatever
CUDA_VISIBLE_DEVICES says, but the engine sees only the visible ones, and a worker pinned to one GPU
must not plan a tensor-parallel launch over two.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, replace
from functools import cache
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from tuner import fingerprint
from tuner.errors import InputError
from tuner.paths import ENGINES_DIR
from tuner.yaml_io import load_yaml, parse_model

PROFILES_FILE = ENGINES_DIR / "hardware" / "gpus.yaml"


@dataclass(frozen=True)
class Hardware:
    name: str                          # profile name, or the detected GPU's name
    kind: Literal["gpu", "cpu"]
    device_key: str                    # sm80, sm90, cpu-avx2: what capability failures depend on
    gpu_name: str | None = None        # as NVML reports it ("NVIDIA A100-SXM4-80GB")
    compute_capability: str | None = None  # "8.0"
    memory_mib: int | None = None      # per GPU
    count: int = 0                     # GPUs
    driver: str | None = None
    cpu_flags: tuple[str, ...] = ()
    source: Literal["detected", "profile"] = "detected"

    @property
    def sm(self) -> int | None:
        """Compute capability as one number (8.9 → 89), the form engine sources compare against."""
        if not self.compute_capability:
            return None
        major, _, minor = self.compute_capability.partition(".")
        return int(major) * 10 + int(minor or 0)

    def describe(self) -> str:
        if self.kind == "cpu":
            return f"{self.name} (CPU{', ' + '+'.join(self.cpu_flags) if self.cpu_flags else ''})"
        mem = f", {self.memory_mib / 1024:.0f} GiB" if self.memory_mib else ""
        count = f"{self.count} × " if self.count > 1 else ""
        return f"{count}{self.gpu_name or self.name} (SM {self.compute_capability}{mem})"


def detect() -> Hardware:
    """This machine: its GPUs through NVML, or a CPU profile when there is no NVIDIA driver."""
    gpus = fingerprint.gpus()
    flags = tuple(f for f in fingerprint._cpu_flags().split("+") if f)
    if not gpus:
        return Hardware(name="cpu", kind="cpu", device_key=fingerprint.device_key(),
                        cpu_flags=flags)
    first = gpus[0]
    return Hardware(name=first["name"], kind="gpu", device_key=fingerprint.device_key(),
                    gpu_name=first["name"], compute_capability=first["compute_capability"],
                    memory_mib=int(first["memory_mib"]),
                    count=visible_count(len(gpus), os.environ.get("CUDA_VISIBLE_DEVICES")),
                    driver=first["driver"], cpu_flags=flags)


def visible_count(host_gpus: int, visible_devices: str | None) -> int:
    """GPUs a CUDA process here can use: the entries of CUDA_VISIBLE_DEVICES (indices, UUIDs),
    at most the host's; unset means all of them, and an empty value none."""
    if visible_devices is None:
        return host_gpus
    return min(host_gpus, len([d for d in visible_devices.split(",") if d.strip()]))


class _Profile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["gpu", "cpu"] = "gpu"
    gpu_name: str | None = None
    compute_capability: str | None = Field(None, pattern=r"^\d+\.\d+$")
    memory_mib: int | None = Field(None, gt=0)
    count: int = Field(1, ge=0)
    cpu_flags: list[str] = []
    note: str = ""

    @model_validator(mode="after")
    def _complete(self) -> "_Profile":
        if self.kind == "gpu" and not (self.gpu_name and self.compute_capability and self.memory_mib):
            raise ValueError("a gpu profile needs gpu_name, compute_capability and memory_mib")
        return self


@cache
def _profiles() -> dict[str, _Profile]:
    data, lines = load_yaml(PROFILES_FILE, "GPU profiles file")
    if not isinstance(data, dict):
        raise InputError(f"{PROFILES_FILE}: expected a mapping of profile names")
    return {name: parse_model(_Profile, body, f"{PROFILES_FILE}: {name}", lines)
            for name, body in data.items()}


def profile_names() -> list[str]:
    return list(_profiles())


_COUNT_SUFFIX = re.compile(r"^(?P<base>.+)-x(?P<count>[1-9][0-9]*)$")


def profile(name: str) -> Hardware:
    """A named profile (``a100-sxm-80gb``, ``cpu``...), or ``NAME-xN`` for N of its GPUs in one
    host, for planning hardware you are not on. The name stays the base profile's: performance
    models key on it."""
    profiles = _profiles()
    m = _COUNT_SUFFIX.match(name)
    if name not in profiles and m and m["base"] in profiles and profiles[m["base"]].kind == "gpu":
        return replace(profile(m["base"]), count=int(m["count"]))
    if name not in profiles:
        raise InputError(f"unknown GPU profile {name!r}; known: {', '.join(profiles)}, each GPU "
                         f"one also as NAME-xN for N GPUs (add one to {PROFILES_FILE})")
    p = profiles[name]
    if p.kind == "cpu":
        flags = tuple(p.cpu_flags)
        key = "cpu-" + "+".join(flags) if flags else "cpu"
        return Hardware(name=name, kind="cpu", device_key=key, cpu_flags=flags, source="profile")
    return Hardware(name=name, kind="gpu", device_key="sm" + p.compute_capability.replace(".", ""),
                    gpu_name=p.gpu_name, compute_capability=p.compute_capability,
                    memory_mib=p.memory_mib, count=p.count, source="profile")


def resolve(gpu: str | None) -> Hardware:
    """``--gpu NAME`` when given, else this machine."""
    return profile(gpu) if gpu else detect()


def profile_key(hw: Hardware) -> str | None:
    """The profile name of this hardware: its own for a profile, the profile whose NVML name
    matches for a detected GPU; None for a GPU no profile names (performance models key on it)."""
    if hw.source == "profile":
        return hw.name
    return next((name for name, p in _profiles().items()
                 if p.kind == hw.kind == "gpu" and p.gpu_name == hw.gpu_name), None)
