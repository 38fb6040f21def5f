"""Engine kits: an engine's wheels for an offline host whose Python packages are fixed (torch
preinstalled, no network, perhaps no container runtime), resolved against that host's package
list, packed in parts a size-limited transfer can carry, and installed there by the kit's own
script into a folder of their own (engines' pins conflict: each gets its folder)."""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from tuner.engines.spec import EngineSpec, available_engines, load_engine
from tuner.errors import InputError
from tuner.files import nearest_existing
from tuner.kit.pack import build, parse_size, write_plan
from tuner.kit.resolve import Resolution, host_packages, kit_lock, platform_tags, resolve
from tuner.paths import cache_dir

__all__ = ["KitResult", "make_kit", "parse_size"]


@dataclass(frozen=True)
class KitResult:
    engine: str
    resolution: Resolution
    parts: tuple[Path, ...]   # empty for a dry run


def engine_for(requirement: str) -> EngineSpec:
    """The engine whose spec's ``kit.package`` the requirement names (``vllm==0.25.1`` → vllm)."""
    try:
        name = canonicalize_name(Requirement(requirement).name)
    except InvalidRequirement as e:
        raise InputError(f"{requirement!r} is not a requirement such as vllm==0.25.1: {e}") from None
    if "==" not in requirement:
        raise InputError(f"{requirement!r}: pin the engine's version (e.g. {name}==X.Y.Z): a kit is for one release")
    for engine in available_engines():
        spec = load_engine(engine)
        if spec.kit is not None and canonicalize_name(spec.kit.package) == name:
            return spec
    known = [load_engine(e).kit.package for e in available_engines() if load_engine(e).kit]
    raise InputError(f"no engine spec has a kit for {name!r}; known: {', '.join(known)}")


def resolver_python(version: str, given: str | None) -> str:
    """pip judges markers and Requires-Python by the interpreter that runs it: resolving for a
    Python 3.12 host takes a Python 3.12 here."""
    if given:
        exe = shutil.which(given)
        if exe is None:
            path = Path(given)
            why = ("is not a command on PATH" if os.sep not in given else "is a folder" if path.is_dir()
                   else "is not executable" if path.exists() else "does not exist")
            raise InputError(f"--resolver-python {given} {why}; it must be a Python {version}")
        found = _python_version(exe)
        if found != version:
            what = f"is Python {found}" if found else "does not run as a Python"
            raise InputError(f"--resolver-python {given} {what}; it must be a Python {version}")
        return exe
    candidates = [f"python{version}", *sorted(
        str(p) for p in (Path.home() / ".pyenv" / "versions").glob(f"{version}*/bin/python{version}"))]
    for c in candidates:
        exe = shutil.which(c)
        if exe is not None and _python_version(exe) == version:
            return exe
    raise InputError(f"resolving for a Python {version} host needs a Python {version} here "
                     f"(python{version} on PATH, or --resolver-python PATH)")


def _python_version(exe: str) -> str | None:
    """The X.Y version of the Python at ``exe``, or None when it does not run as one (another
    program, or a pyenv shim of a version not selected here)."""
    import subprocess

    try:
        out = subprocess.run([exe, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                             capture_output=True, text=True, check=False, stdin=subprocess.DEVNULL,
                             timeout=60).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out if re.fullmatch(r"\d+\.\d+", out) else None


def _check_out(out: Path) -> None:
    """Refuse an ``--out`` that cannot become a folder now, not after the long resolve."""
    base = nearest_existing(out)
    if not base.is_dir():
        where = "" if base == out.absolute() else f": {base}"
        raise InputError(f"--out {out}{where} is a file, not a folder")


def make_kit(requirement: str, out: Path, *, host_file: Path, python_version: str = "3.12",
             platform: str = "manylinux_2_39_x86_64", split: int | None = None, trim: bool = False,
             dry_run: bool = False, python: str | None = None, lock_file: Path | None = None) -> KitResult:
    spec = engine_for(requirement)
    assert spec.kit is not None
    _check_out(out)
    lock = kit_lock(lock_file) if lock_file is not None else None
    res = resolve(spec.kit, requirement, host_packages(host_file),
                  python=resolver_python(python_version, python), python_version=python_version,
                  platforms=platform_tags(platform), host_file=str(host_file), lock=lock)
    if dry_run:
        write_plan(out, spec.name, res)
        return KitResult(spec.name, res, ())
    parts = build(out, spec.name, spec.kit, res, cache=cache_dir() / "kit-downloads", split=split, trim=trim)
    return KitResult(spec.name, res, tuple(parts))
