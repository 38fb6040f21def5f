"""A model's config.json, read one way for everyone: a local checkpoint, or an HF id already in the
local hub cache, with multimodal wrappers (text_config) flattened.

Planning for a model that was never downloaded must still work: the facts are simply unknown then."""

from __future__ import annotations

import json
import os
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from tuner.paths import ENGINES_DIR, cache_dir


@lru_cache(maxsize=64)
def read_model_config(path: str) -> dict[str, Any]:
    """config.json of a local checkpoint, or of an HF id already in the local hub cache; {} if neither.

    Planning for a model that was never downloaded must still work: facts are simply unknown then.
    """
    candidates = [Path(path)]
    if not Path(path).exists() and path.count("/") == 1:
        hub = Path(os.environ.get("HF_HUB_CACHE") or Path(os.environ.get(
            "HF_HOME", Path.home() / ".cache" / "huggingface")) / "hub")
        candidates += sorted((hub / f"models--{path.replace('/', '--')}" / "snapshots").glob("*"))
    for d in candidates:
        cfg = d / "config.json"
        if cfg.is_file():
            try:
                data = json.loads(cfg.read_text())
            except (OSError, ValueError):
                return {}
            if not isinstance(data, dict):
                return {}
            if isinstance(data.get("text_config"), dict):  # multimodal wrappers
                data = {**data["text_config"], **data}
            if (d / "hf_quant_config.json").is_file():
                data["_modelopt"] = True
            return data
    return {}


SHAPES_FILE = ENGINES_DIR / "models" / "shapes.yaml"


def shape_dir(model: str) -> str | None:
    """A local folder holding the known config.json shape of hub id ``model`` (written once under
    the cache), for performance models that read a config.json; None when the shape is unknown.
    The rules do not use it: they state facts about the checkpoint that will load, or nothing."""
    shapes = yaml.safe_load(SHAPES_FILE.read_text())
    shape = shapes.get(model)
    if shape is None or model.startswith("_"):
        return None
    target = cache_dir() / "model-shapes" / model.replace("/", "--")
    config = target / "config.json"
    text = json.dumps(shape, indent=1, sort_keys=True)
    if not config.is_file() or config.read_text() != text:
        target.mkdir(parents=True, exist_ok=True)
        tmp = config.with_suffix(".tmp")
        tmp.write_text(text)
        tmp.replace(config)
    return str(target)
