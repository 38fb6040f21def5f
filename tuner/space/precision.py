"""A config's numeric precision: the knobs that change the numbers a model computes.

The quality guardrail (docs/search.md#quality-guardrail) compares a config's answers with those of
the reference precision, and skips configs that compute with that same precision. Precision is the
abstract knobs ``dtype``, ``quantization`` and ``kv_cache_dtype`` (the same names on every engine),
each at the value it has when a config leaves it unset; ``auto`` resolves to the checkpoint's own
dtype (config.json), so "BF16" and "auto on a BF16 checkpoint" are one precision.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tuner.engines.model_config import read_model_config

# knob → its value when a config does not set it
PRECISION_KNOBS = {"dtype": "auto", "quantization": "none", "kv_cache_dtype": "auto"}


def _spelled(value: Any) -> str:
    return "none" if value is None else str(value).lower()


def precision_of(engine: str, knobs: Mapping[str, Any], model_path: str) -> dict[str, str]:
    """The engine and each precision knob's effective value for a launched config (``knobs``
    holds what the launch sets; anything else is at its unset value)."""
    cfg = read_model_config(model_path)
    checkpoint = cfg.get("torch_dtype") or cfg.get("dtype")
    out = {"engine": engine}
    for name, unset in PRECISION_KNOBS.items():
        out[name] = _spelled(knobs.get(name, unset))
    if out["dtype"] == "auto" and checkpoint:
        out["dtype"] = _spelled(checkpoint)
    if out["kv_cache_dtype"] == "auto":
        out["kv_cache_dtype"] = out["dtype"]
    return out

