"""A space's config as a performance model sees it: the bridge from (space, engine, knobs, hardware)
to an estimator's request, and the candidate configs a prior predicts.

The workload's lengths: a random dataset has them; for ShareGPT the model is given the mix the
motivating study's run moved (about 220 prompt and 200 output tokens per request: 419k tokens for 1000
prompts, from its ShareGPT run at https://docs.gpustack.ai/latest/performance-lab/qwen3-14b/a100),
or the workload's fixed output length when it sets one. At rate inf the client keeps every prompt
in flight, so the prompt count caps the batch.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tuner.configs.checkpoint import checkpoint_for
from tuner.engines.hardware import Hardware, profile_key
from tuner.engines.model_config import shape_dir
from tuner.engines.spec import load_engine
from tuner.estimate import Estimate, EstimateRequest, Estimator
from tuner.space import Scalar, Space, Workload

SHAREGPT_MIX = (220, 200)  # input, output tokens per request of a ShareGPT run (see above)


def lengths(w: Workload) -> tuple[int, int]:
    if w.dataset == "random":
        return max(1, w.random_input_len + w.random_prefix_len), max(1, w.random_output_len)
    return SHAREGPT_MIX[0], w.sharegpt_output_len or SHAREGPT_MIX[1]


def request(space: Space, engine: str, knobs: Mapping[str, Scalar], hardware: Hardware,
            engine_version: str | None = None) -> EstimateRequest:
    w = space.all_workloads()[0]
    input_len, output_len = lengths(w)
    concurrency = w.max_concurrency or (w.num_prompts if math.isinf(w.request_rate) else None)
    quant = knobs.get("quantization")
    checkpoint = (_local(checkpoint_for(load_engine(engine), space.model, quant))
                  if quant not in (None, "none") else None)
    # A knob at the engine's documented default runs as if it were not set: the model assumes the
    # engine's defaults, and need not know knobs it does not model at their default.
    params = space.engines[engine].params
    knobs = {k: v for k, v in knobs.items() if not (k in params and params[k].default == v)}
    return EstimateRequest(engine=engine, knobs=knobs, model=_local(space.model.resolved_path()),
                           checkpoint=checkpoint, input_len=input_len, output_len=output_len,
                           gpu=profile_key(hardware) or hardware.name, engine_version=engine_version,
                           max_concurrency=concurrency)


def _local(model: str) -> str:
    """The model as a folder with a config.json: itself, or the shipped shape of a hub id."""
    if Path(model).is_dir():
        return model
    return shape_dir(model) or model


def predict(estimator: Estimator, space: Space, engine: str, knobs: Mapping[str, Scalar],
            hardware: Hardware) -> Estimate:
    """The estimator's answer for one config (``unsupported`` says why there is no number)."""
    return estimator.estimate(request(space, engine, knobs, hardware))


def objective_value(est: Estimate, metric: str) -> float | None:
    """The estimate of the space's objective metric, where the estimator predicts it."""
    if not est.predicted:
        return None
    value: Any = {"total_token_throughput": est.total_tok_s, "output_throughput": est.output_tok_s,
                  "mean_ttft_ms": est.ttft_ms, "mean_tpot_ms": est.tpot_ms}.get(metric)
    return None if value is None else float(value)
