"""A model's config.json, read one way for everyone: a local checkpoint, or an HF id already in the
local hub cache, with multimodal wrappers (text_config) flattened.

Planning for a model that was never downloaded must still work: the facts are simply unknown then."""

from __future__ import annotations

import json
import os
from functools import lru_cache
from pathlib import Path
from typing import Any


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
