"""A deployment in one format (registry: format name -> renderer)."""

from __future__ import annotations

from collections.abc import Callable

from tuner.deploy import command, compose, kubernetes
from tuner.deploy.deployment import Deployment
from tuner.registry import Registry

FORMATS: Registry[Callable[[Deployment], str]] = Registry("deploy format")
FORMATS.register("command")(command.render_command)
FORMATS.register("compose")(compose.render_compose)
FORMATS.register("kubernetes")(kubernetes.render_kubernetes)


def render(d: Deployment, fmt: str) -> str:
    return FORMATS.get(fmt)(d)
