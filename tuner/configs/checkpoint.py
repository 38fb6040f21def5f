"""Which checkpoint an engine loads for a quantization: a pre-quantized variant of the model, or the base.

Engines that read the quantization from the checkpoint (``prefer_checkpoint`` in the spec) get the
variant's path instead of a flag; the rules read that checkpoint's config.json for their facts.
"""

from __future__ import annotations

from typing import Any

from tuner.engines.spec import EngineSpec
from tuner.paths import expand
from tuner.space import Model


def checkpoint_for(spec: EngineSpec, model: Model, quantization: Any) -> str:
    """The (expanded) model path the engine would load for this quantization."""
    knob = spec.knobs.get("quantization")
    if (knob is not None and knob.prefer_checkpoint and isinstance(quantization, str)
            and quantization in model.variants):
        return expand(model.variants[quantization])
    return model.resolved_path()
