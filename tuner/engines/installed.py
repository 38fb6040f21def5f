"""An engine installed into a folder of its own (a kit's install.sh, or ``pip install --target``):
the record the installer leaves there, and the command, environment and args that the engine
spec's ``installed:`` data says it needs to run from that folder with no network.

The record, ``<folder>/.tuner-engine.json``, is written by ``tuner/kit/install.sh``:
``{"engine", "package", "version", "python", "kit", "installed"}``; ``python`` is the interpreter
the folder was installed for (its console scripts carry it in their shebang).
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from tuner.engines.spec import EngineSpec, Installed
from tuner.errors import InputError
from tuner.paths import cache_dir

RECORD = ".tuner-engine.json"


@dataclass(frozen=True)
class Record:
    folder: Path
    engine: str
    package: str
    version: str
    python: str


@dataclass(frozen=True)
class FolderLaunch:
    """What a launch from the folder adds to the engine's own argv and environment."""

    command: list[str]
    env: dict[str, str]
    args: list[str]


def read_record(folder: Path) -> Record:
    path = folder / RECORD
    if not folder.is_dir():
        raise InputError(f"engine folder {folder} does not exist: install the engine's kit there "
                         f"(bash KIT/install.sh --target {folder})")
    if not path.exists():
        raise InputError(f"{folder} has no {RECORD}: it was not installed by a kit's install.sh "
                         f"(reinstall into an empty folder: bash KIT/install.sh --target {folder})")
    try:
        doc = json.loads(path.read_text())
        return Record(folder, doc["engine"], doc["package"], doc["version"], doc["python"])
    except (ValueError, KeyError, TypeError) as e:
        raise InputError(f"{path} is not an install record ({e}): reinstall the kit") from None


def _installed(spec: EngineSpec) -> Installed:
    if spec.installed is None:
        raise InputError(f"engine {spec.name!r} has no `installed:` section in its spec: it cannot "
                         f"run from a folder yet (use command: or container:)")
    return spec.installed


def _absent(folder: Path, module: str | None, file: str | None) -> bool:
    if module is not None:
        return not ((folder / module).is_dir() or (folder / f"{module}.py").exists())
    return not (folder / str(file)).exists()


def cuda_home() -> str | None:
    """The CUDA toolkit root: CUDA_HOME if set, else nvcc's on PATH, else /usr/local/cuda."""
    if os.environ.get("CUDA_HOME"):
        return os.environ["CUDA_HOME"]
    nvcc = shutil.which("nvcc")
    if nvcc:
        return str(Path(nvcc).resolve().parent.parent)
    return "/usr/local/cuda" if Path("/usr/local/cuda/bin/nvcc").exists() else None


def folder_launch(spec: EngineSpec, folder: Path) -> FolderLaunch:
    """The engine's command, environment and extra args when it runs from ``folder``."""
    data = _installed(spec)
    if not (folder / RECORD).exists():
        # Planning for a host where the folder is (`tune plan` here): the command as it will read;
        # `tune doctor` and `tune start`'s preflight fail on a folder that is really missing.
        rec, present = Record(folder, spec.name, spec.package or spec.name, "", "python3"), False
    else:
        rec, present = read_record(folder), True
    if rec.engine != spec.name:
        raise InputError(f"{folder} holds {rec.engine} {rec.version}, not {spec.name}")
    subst = {"{folder}": str(folder), "{python}": rec.python}
    command = [_fill(a, subst) for a in data.command]
    env = dict(data.env)
    env["PYTHONPATH"] = str(folder)   # the engine imports from its folder alone, never the tuner's path
    caches = cache_dir() / "engine-caches" / f"{rec.engine}-{rec.version or 'planned'}"
    for name in data.cache_env:
        env[name] = str(caches / name.lower())
    args = list(data.args)
    for fallback in data.when_absent:
        if present and _absent(folder, fallback.module, fallback.file):
            env.update(fallback.env)
            args += fallback.args
    if data.cuda_home:
        home = cuda_home()
        if home is None:
            raise InputError(f"{spec.display_name} compiles kernels with nvcc at first use: no CUDA "
                             f"toolkit found (set CUDA_HOME, or put nvcc on PATH)")
        env["CUDA_HOME"] = home
        env["PATH"] = os.pathsep.join([str(Path(rec.python).parent), f"{home}/bin",
                                       os.environ.get("PATH", "/usr/bin:/bin")])
    return FolderLaunch(command, env, args)


def _fill(arg: str, subst: dict[str, str]) -> str:
    for key, value in subst.items():
        arg = arg.replace(key, value)
    return arg
