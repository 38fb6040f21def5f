"""Engines inside a container image: the ``docker run`` line, the image check, removal by id.

A space may run an engine from an image (``container:`` under the engine) instead of a host binary.
The engine's command becomes the container's entrypoint and listens on 0.0.0.0 inside, on the same
port number the host maps on 127.0.0.1, so the benchmark client, readiness and port checks are those
of a local engine. The ``docker run`` client stays in the foreground in its own process group: its
output is the container's (the trial log) and its exit is the container's exit, so readiness and
failure classification do not change. The container itself belongs to the daemon, not to that
group: teardown removes it by id, and the orphan registry names it for ``tune resume``.
``--pull never``: a missing image fails at once instead of downloading inside a trial's startup
timeout, and ``inspect_image`` says so before anything is launched. Podman takes the same command
line (untested here).
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tuner.errors import InputError

if TYPE_CHECKING:
    pass

# A runtime slower than this to answer an inspect or a removal is treated as broken.
_TIMEOUT_S = 60


class ContainerError(RuntimeError):
    """The container runtime failed at something teardown needs (removing a container)."""




@dataclass(frozen=True)
class Image:
    """An image as the runtime has it locally: what a trial's fingerprint names."""

    name: str
    id: str
    digests: tuple[str, ...] = ()

    def describe(self) -> str:
        return f"{self.name} (" + ", ".join((f"id {self.id}", *self.digests)) + ")"














def _run(argv: list[str]) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=_TIMEOUT_S,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise ContainerError(f"`{' '.join(argv)}` did not answer within {_TIMEOUT_S} s") from None


def inspect_image(runtime: str, image: str) -> Image:
    """The local image; fails with what to do when the runtime or the image is missing."""
    if shutil.which(runtime) is None:
        raise InputError(f"container runtime {runtime!r} (for image {image!r}) is not on PATH: "
                         "install it, or remove `container:` to run the engine on the host")
    proc = _run([runtime, "image", "inspect", "--format",
                 "{{.Id}}{{range .RepoDigests}} {{.}}{{end}}", image])
    if proc.returncode != 0:
        error = proc.stderr.strip()
        if "no such image" in error.lower() or "image not known" in error.lower():
            raise InputError(f"image {image!r} is not on this machine: pull it first "
                             f"(`{runtime} pull {image}`); trials never pull, so a download "
                             "cannot eat into an engine's startup timeout")
        raise InputError(f"{runtime} cannot inspect image {image!r}: {error}")
    image_id, *digests = proc.stdout.split()
    return Image(image, image_id, tuple(digests))


def read_cid(cidfile: Path) -> str | None:
    try:
        return cidfile.read_text().strip() or None
    except OSError:
        return None


def remove(runtime: str, ref: str) -> None:
    """``rm -f`` a container by id or name; one that is gone already is fine."""
    proc = _run([runtime, "rm", "-f", ref])
    if proc.returncode != 0 and "no such container" not in proc.stderr.lower():
        raise ContainerError(f"`{runtime} rm -f {ref}` failed: {proc.stderr.strip()}; the "
                             "container may still hold its port and GPUs (`tune resume` "
                             "tries again)")


def exists(runtime: str, ref: str) -> bool:
    """Does the container exist? Assumed so when the runtime cannot tell (daemon down), so that
    the registry keeps naming it until it can be removed."""
    try:
        proc = _run([runtime, "container", "inspect", "--format", "{{.Id}}", ref])
    except FileNotFoundError:  # no runtime, no container
        return False
    return proc.returncode == 0 or "no such container" not in proc.stderr.lower()


def main_pid(runtime: str, ref: str) -> int | None:
    """Host pid of the container's first process, the leader of the engine's process group."""
    proc = _run([runtime, "container", "inspect", "--format", "{{.State.Pid}}", ref])
    pid = proc.stdout.strip()
    return int(pid) if proc.returncode == 0 and pid.isdigit() and int(pid) > 0 else None
