"""Is the space's model there? Checked before a study is created, so a typo in ``model.path`` is one
error naming the key and the path, not a study of trials the engine refused one by one.

A Hugging Face id (``Qwen/Qwen3-14B``, or a bare legacy name like ``gpt2``) is the engine's to fetch
and is left alone, except that a config.json already in the local hub cache must be readable. A path
that looks local (absolute, ``./``, ``../``, ``~``, a ``$VAR``, or more than one ``/``) must be a
folder holding a config.json (or a single ``.gguf`` file, which vLLM and SGLang load).
"""

from __future__ import annotations

import os
import re

from tuner.engines.model_config import read_model_config
from tuner.errors import InputError
from tuner.paths import expand
from tuner.space.model import Space

_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?$")


def _looks_local(raw: str) -> bool:
    return "$" in raw or raw.startswith(("/", "~", ".")) or not _HUB_ID.match(raw)


def model_path_problems(space: Space) -> list[str]:
    """One line per unusable path among model.path, model.variants.* and model.tokenizer.

    A list rather than an exception: `tune plan --gpu` plans for another host, where the model may
    well be, and only warns."""
    entries = [("model.path", space.model.path, True)]
    entries += [(f"model.variants.{k}", v, True) for k, v in space.model.variants.items()]
    if space.model.tokenizer:
        entries.append(("model.tokenizer", space.model.tokenizer, False))
    problems = []
    for key, raw, is_model in entries:
        path = expand(raw)
        shown = raw if path == raw else f"{raw} (= {path})"
        if not os.path.exists(path):
            if _looks_local(raw):
                hint = (" (a local model folder with a config.json, or a Hugging Face id like "
                        "Qwen/Qwen3-14B)") if is_model else ""
                problems.append(f"{key}: {shown}: no such directory{hint}")
                continue
        elif os.path.isfile(path):
            if not (is_model and path.endswith(".gguf")):
                problems.append(f"{key}: {shown}: is a file, not a folder")
            continue
        elif is_model and not os.path.isfile(os.path.join(path, "config.json")):
            problems.append(f"{key}: {shown}: holds no config.json (not a Hugging Face model "
                            "folder)")
            continue
        if is_model:
            try:  # a local config.json, or a hub id's in the local cache: it must be UTF-8 JSON
                read_model_config(path)
            except InputError as exc:
                problems.append(f"{key}: {exc}")
    return problems
