"""What the engines' container runtimes (docker, podman) say and what the tuner owns in their command
line: data, not code, so the container launch mode learns a new runtime error by a YAML edit."""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict

from tuner.engines.spec import EngineSpec, FailureSignature
from tuner.paths import ENGINES_DIR
from tuner.yaml_io import load_model

if TYPE_CHECKING:
    pass


RUNTIME_FILE = ENGINES_DIR / "runtimes" / "container.yaml"


# `docker run` flags the tuner sets itself, with the reason a space may not set them.
TUNER_SET_FLAGS = {
    "--name": "each trial's container gets its own name",
    "--cidfile": "teardown reads the container id from the trial's directory",
    "--entrypoint": "the engine's command is the entrypoint (set `command:` instead)",
    "-p": "the engine's port is mapped on 127.0.0.1",
    "--publish": "the engine's port is mapped on 127.0.0.1",
    "-d": "the docker run client stays in the foreground to carry the engine's output",
    "--detach": "the docker run client stays in the foreground to carry the engine's output",
    "--gpus": "set `gpus:` instead; the tuner narrows it to the trial's GPUs",
    "--pull": "images are never pulled during a trial: pull them before the study",
}


class _RuntimeFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    failures: list[FailureSignature]


@cache
def runtime_failures() -> tuple[FailureSignature, ...]:
    """Signatures of the runtime's own errors (image missing, port taken), from ``RUNTIME_FILE``."""
    return tuple(load_model(_RuntimeFile, RUNTIME_FILE, "runtime spec").failures)


def with_runtime_failures(spec: EngineSpec) -> EngineSpec:
    """The engine's spec with the runtime's signatures first: docker's errors come before the
    engine runs at all, and are never the config's fault."""
    return spec.model_copy(update={"failures": [*runtime_failures(), *spec.failures]})
