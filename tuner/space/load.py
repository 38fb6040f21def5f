"""Find and load a space: a bundled one by name, one of the user's (./search_spaces/), or a YAML path."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tuner.engines.spec import load_engine
from tuner.errors import InputError
from tuner.paths import SPACES_DIR, user_spaces_dir
from tuner.space.model import Container, Space
from tuner.yaml_io import load_model, parse_model


def available_spaces() -> list[str]:
    """Names a user can pass to ``--space``: their own (./search_spaces/) and the bundled ones."""
    return sorted({p.stem for d in (user_spaces_dir(), SPACES_DIR) if d.is_dir()
                   for p in d.glob("*.yaml")})


def load_space(name_or_path: str) -> Space:
    """Load a named space (the user's own first, then the bundled one) or a YAML path; unknown names
    list the available ones."""
    path = Path(name_or_path).expanduser()
    if not (path.suffix in (".yaml", ".yml") or path.exists()):
        found = [d / f"{name_or_path}.yaml" for d in (user_spaces_dir(), SPACES_DIR)
                 if (d / f"{name_or_path}.yaml").is_file()]
        if not found:
            raise InputError(
                f"unknown space {name_or_path!r}; available: {', '.join(available_spaces())} "
                "(or pass a path to a YAML file)")
        path = found[0]
    return load_model(Space, path, "space file")


def space_from_dict(data: dict[str, Any], source: str = "stored space") -> Space:
    return parse_model(Space, data, source)


def overridden(space: Space, images: list[str], commands: list[str]) -> Space:
    """The space with engines moved to another image (``ENGINE=IMAGE``) or to a host binary
    (``ENGINE=PATH``, which drops the container): the command line's one-line change of version."""
    engines = dict(space.engines)
    for flag, items in (("--engine-image", images), ("--engine-command", commands)):
        for item in items:
            engine, sep, value = item.partition("=")
            if not sep or not value:
                raise InputError(f"{flag} {item!r}: expected ENGINE=VALUE")
            if engine not in engines:
                raise InputError(f"{flag} {item!r}: the space has no engine {engine!r}; its engines: "
                                 f"{', '.join(engines)}")
            choice = engines[engine]
            if flag == "--engine-image":
                container = (choice.container.model_copy(update={"image": value})
                             if choice.container else Container(image=value))
                engines[engine] = choice.model_copy(update={"container": container})
            else:
                engines[engine] = choice.model_copy(update={"container": None,
                                                            "command": [value, *(choice.command or load_engine(engine).command)[1:]]})
    return space_from_dict({**space.model_dump(mode="json"),
                            "engines": {k: v.model_dump(mode="json") for k, v in engines.items()}},
                           "the space with --engine-image/--engine-command")
