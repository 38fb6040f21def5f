"""Is the space's model there? Checked before a study is created (`tune start`'s preflight, `tune
doctor`) and by `tune plan`, so a typo in ``model.path`` is one error naming the key and the path,
not a study of trials the engine refused one by one.

A Hugging Face id (``Qwen/Qwen3-14B``, or a bare legacy name like ``gpt2``) is the engine's to fetch
and is left alone, except that a config.json already in the local hub cache must be readable. A path
that looks local (absolute, ``./``, ``../``, ``~``, a ``$VAR``, or more than one ``/``) must be a
folder holding a config.json (or a single ``.gguf`` file, which vLLM and SGLang load).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Literal

from tuner.engines.model_config import read_model_config
from tuner.errors import InputError
from tuner.paths import expand
from tuner.space.model import Space

_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?$")
Problem = Literal["missing", "file", "no-config", "bad-config"]


@dataclass(frozen=True)
class ModelPath:
    key: str                 # the space key: model.path, model.variants.NAME, model.tokenizer
    path: str                # expanded
    hub: bool                # a Hugging Face id: the engine fetches it
    problem: Problem | None  # None: usable (or the engine's to judge)
    message: str             # names the key and the path


def is_hub_id(raw: str) -> bool:
    """Not a local path, and shaped like a hub id (one ``Org/Name``, or a bare legacy name)."""
    path = expand(raw)
    return not os.path.exists(path) and not (
        "$" in raw or raw.startswith(("/", "~", ".")) or not _HUB_ID.match(raw))


def model_paths(space: Space) -> list[ModelPath]:
    """model.path, each model.variants entry and model.tokenizer, each judged."""
    entries = [("model.path", space.model.path, True)]
    entries += [(f"model.variants.{k}", v, True) for k, v in space.model.variants.items()]
    if space.model.tokenizer:
        entries.append(("model.tokenizer", space.model.tokenizer, False))
    return [_judge(key, raw, is_model) for key, raw, is_model in entries]


def model_path_problems(space: Space) -> list[str]:
    """One line per unusable path; a list rather than an exception, because `tune plan --gpu`
    plans for another host, where the model may well be, and only warns."""
    return [m.message for m in model_paths(space) if m.problem]


def _judge(key: str, raw: str, is_model: bool) -> ModelPath:
    path = expand(raw)
    shown = raw if path == raw else f"{raw} (= {path})"

    def found(problem: Problem | None, what: str) -> ModelPath:
        return ModelPath(key, path, hub, problem, f"{key}: {shown}: {what}")

    hub = is_hub_id(raw)
    if not hub:
        if not os.path.exists(path):
            hint = (" (a local model folder with a config.json, or a Hugging Face id like "
                    "Qwen/Qwen3-14B)") if is_model else ""
            return found("missing", f"no such directory{hint}")
        if os.path.isfile(path):
            if is_model and path.endswith(".gguf"):
                return found(None, "a GGUF file")
            return found("file", "is a file, not a folder")
        if is_model and not os.path.isfile(os.path.join(path, "config.json")):
            return found("no-config", "holds no config.json (not a Hugging Face model folder)")
    if is_model:
        try:  # a local config.json, or a hub id's in the local cache: it must be UTF-8 JSON
            read_model_config(path)
        except InputError as exc:
            return ModelPath(key, path, hub, "bad-config", f"{key}: {exc}")
    return found(None, "a Hugging Face id, fetched by the engine" if hub else "a local folder")
