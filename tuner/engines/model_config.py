"""A model's config.json, read one way for everyone: a local checkpoint, or an HF id already in the
local hub cache, with multimodal wrappers (text_config) flattened.

Planning for a model that was never downloaded must still work: the facts are simply unknown then.
A config.json that is there but unreadable (not UTF-8, not JSON, not an object) is the user's to fix,
so it is an InputError naming the file rather than silently unknown facts."""

from __future__ import annotations

import json
import os
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from tuner.errors import InputError
from tuner.files import read_text, write_atomic
from tuner.paths import ENGINES_DIR, cache_dir


@lru_cache(maxsize=64)
def read_model_config(path: str) -> dict[str, Any]:
    """config.json of a local checkpoint, or of an HF id already in the local hub cache; {} if neither."""
    candidates = [Path(path)]
    if not Path(path).exists() and path.count("/") == 1:
        hub = Path(os.environ.get("HF_HUB_CACHE") or Path(os.environ.get(
            "HF_HOME", Path.home() / ".cache" / "huggingface")) / "hub")
        candidates += sorted((hub / f"models--{path.replace('/', '--')}" / "snapshots").glob("*"))
    for d in candidates:
        cfg = d / "config.json"
        if cfg.is_file():
            text = read_text(cfg, "model config")  # its InputError is a ValueError: not caught here
            try:
                data = json.loads(text)
            except (ValueError, RecursionError) as exc:
                raise InputError(f"model config {cfg}: not valid JSON ({exc})") from None
            if not isinstance(data, dict):
                raise InputError(f"model config {cfg}: expected a JSON object, got "
                                 f"{type(data).__name__}")
            if isinstance(data.get("text_config"), dict):  # multimodal wrappers
                data = {**data["text_config"], **data}
            if (d / "hf_quant_config.json").is_file():
                data["_modelopt"] = True
            return data
    return {}


SHAPES_FILE = ENGINES_DIR / "models" / "shapes.yaml"


def _shapes() -> dict[str, dict]:
    return {k: v for k, v in yaml.safe_load(read_text(SHAPES_FILE, "model shapes file")).items()
            if not k.startswith("_")}


def shape_names() -> dict[str, str]:
    """``tune model tiny --shape`` names (``qwen3-14b``, ``qwen3-14b-fp8``) of the published shapes,
    quantized checkpoints included, by hub id."""
    return {hub.split("/")[-1].lower(): hub for hub in _shapes()}


def published_shape(hub_id: str) -> dict:
    """The config.json fields of ``hub_id`` as published (vocabulary, tied embeddings and all)."""
    shape = _shapes().get(hub_id)
    if shape is None:
        raise InputError(f"no published shape for {hub_id!r} in {SHAPES_FILE}")
    return dict(shape)


def shape_dir(model: str) -> str | None:
    """A local folder holding the known config.json shape of hub id ``model`` (written once under
    the cache), for performance models that read a config.json; None when the shape is unknown.
    The rules do not use it: they state facts about the checkpoint that will load, or nothing."""
    shape = _shapes().get(model)
    if shape is None:
        return None
    target = cache_dir() / "model-shapes" / model.replace("/", "--")
    config = target / "config.json"
    text = json.dumps(shape, indent=1, sort_keys=True)
    if not config.is_file() or config.read_bytes() != text.encode():
        write_atomic(config, text)
    return str(target)
