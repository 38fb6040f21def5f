"""The ``docker run`` line of a containerised launch: part of translating a config into a command.

The engine's command becomes the container's entrypoint and listens on 0.0.0.0 inside, on the same
port number the host maps on 127.0.0.1. ``--pull never``: a missing image fails at once instead of
downloading inside a trial's startup timeout."""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tuner.errors import InputError
from tuner.paths import expand

if TYPE_CHECKING:
    from tuner.space import Container


@dataclass(frozen=True)
class ContainerLaunch:
    """The container of one launch: enough to find and remove it again."""

    runtime: str
    image: str
    name: str
    cidfile: str  # the runtime writes the container id here once the container exists


def unique_name(*parts: str) -> str:
    """``tuner-<parts>-<random>``: recognisable in ``docker ps``, never reused by two launches."""
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", "-".join(parts)).strip("-.")
    return f"tuner-{slug}-{secrets.token_hex(3)}"


def gpu_args(gpus: str | None, visible_devices: str | None) -> list[str]:
    """``--gpus`` for the option, narrowed to ``visible_devices`` (CUDA_VISIBLE_DEVICES as the
    engine would have seen it on the host) when a scheduler assigned the trial its GPUs."""
    if gpus is None:
        return []
    if visible_devices is None:
        return ["--gpus", gpus]
    devices = ",".join(d.strip() for d in visible_devices.split(",") if d.strip())
    if not devices:
        return []  # the trial was given no GPU
    return ["--gpus", f'"device={devices}"']  # quoted: --gpus splits an unquoted value on commas


def run_argv(container: Container, engine_argv: list[str], *, name: str, cidfile: str, port: int,
             env_names: list[str], mounts: list[str], visible_devices: str | None) -> list[str]:
    """The ``docker run`` line that runs ``engine_argv`` inside the image.

    ``env_names`` are passed as ``-e NAME``: the runtime copies each value from its own
    environment, so no value (a token) appears in the argv. ``mounts`` are host paths the tuner
    itself puts on the engine's command line (the model, a generated config file): each is mounted
    read-only at the same path.
    """
    argv = [container.runtime, "run", "--pull", "never", "--name", name, "--cidfile", cidfile,
            "-p", f"127.0.0.1:{port}:{port}", *gpu_args(container.gpus, visible_devices)]
    for path in mounts:
        if ":" in path:
            raise InputError(f"cannot mount {path!r} into the container: the path contains ':'")
        argv += ["-v", f"{path}:{path}:ro"]
    for env_name in env_names:
        argv += ["-e", env_name]
    argv += [expand(a) for a in container.args]
    return argv + ["--entrypoint", engine_argv[0], container.image, *engine_argv[1:]]
