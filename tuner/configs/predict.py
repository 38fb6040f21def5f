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
            engine_version: str | None = None, *, workload: Workload | None = None,
            concurrency: int | None = None) -> EstimateRequest:
    """The estimator's question for one config on ``workload`` (the space's first by default);
    ``concurrency`` overrides the requests in flight the workload would keep."""
    w = workload or space.all_workloads()[0]
    input_len, output_len = lengths(w)
    if concurrency is None:
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


# Requests in flight the max-load prediction tries: the model predicts fixed batches.
CONCURRENCY_LADDER = (1, 2, 4, 8, 16, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024)


def predict_objective(estimator: Estimator, space: Space, engine: str, knobs: Mapping[str, Scalar],
                      hardware: Hardware) -> tuple[Estimate, float | None]:
    """The estimator's answer for one config and its prediction of the space's objective (None
    where it has none: the estimate's ``unsupported`` or first note says why)."""
    if space.objective.max_load is None:
        est = predict(estimator, space, engine, knobs, hardware)
        return est, objective_value(est, space.objective.metric)
    return _max_load(estimator, space, engine, knobs, hardware)


def _max_load(estimator: Estimator, space: Space, engine: str, knobs: Mapping[str, Scalar],
              hardware: Hardware) -> tuple[Estimate, float | None]:
    """The load a config sustains within the SLOs, as a fixed-batch model can tell it: per
    workload the largest batch on ``CONCURRENCY_LADDER`` whose predicted TTFT and TPOT meet the
    SLOs, turned into a request rate by Little's law (requests in flight / seconds per request:
    a server that keeps that batch busy completes it every request's latency); the lowest over
    the workloads after each one's ``load_scale``, as the measurement aggregates them. SLOs on
    metrics the model does not predict (failed requests) are not checked."""
    ml = space.objective.max_load
    assert ml is not None
    sustained: list[tuple[float, Estimate]] = []
    for w in space.all_workloads():
        output_len = lengths(w)[1]

        def ask(c: int, w: Workload = w) -> Estimate:
            return estimator.estimate(request(space, engine, knobs, hardware, workload=w, concurrency=c))

        # Predicted latency grows with the batch: bisect the ladder for the largest batch within
        # the SLOs (a handful of model calls instead of one per rung).
        first = ask(CONCURRENCY_LADDER[0])
        if not first.predicted or not _within(first, space.objective.slos, output_len):
            why = first.unsupported or (first.notes[0] if not first.predicted and first.notes
                                        else f"even one request breaks the SLOs on {w.name}")
            return Estimate.cannot(why, first.source, first.notes), None
        good, bad, est = 0, len(CONCURRENCY_LADDER), first
        while bad - good > 1:
            mid = (good + bad) // 2
            probe = ask(CONCURRENCY_LADDER[mid])
            if probe.predicted and _within(probe, space.objective.slos, output_len):
                good, est = mid, probe
            else:
                bad = mid
        c = CONCURRENCY_LADDER[good]
        batch = min(c, est.batch or c)  # the engine's caps (max_num_seqs, KV cache) bind first
        load = float(batch) if ml.knob == "max_concurrency" else batch / _request_seconds(est, output_len)
        sustained.append((load / w.load_scale, est))
    value, est = min(sustained, key=lambda vs: vs[0])
    return est, value


def _request_seconds(est: Estimate, output_len: int) -> float:
    assert est.ttft_ms is not None and est.tpot_ms is not None
    return (est.ttft_ms + max(0, output_len - 1) * est.tpot_ms) / 1000


def _within(est: Estimate, slos: Mapping[str, float], output_len: int) -> bool:
    """Every SLO on a latency the model predicts is met (any statistic of TTFT, TPOT or ITL, and
    end-to-end latency)."""
    for name, bound in slos.items():
        if "ttft" in name:
            value = est.ttft_ms
        elif "tpot" in name or "itl" in name:
            value = est.tpot_ms
        elif "e2el" in name:
            value = None if est.ttft_ms is None or est.tpot_ms is None \
                else _request_seconds(est, output_len) * 1000
        else:
            continue
        if value is None or value > bound:
            return False
    return True


def objective_value(est: Estimate, metric: str) -> float | None:
    """The estimate of the space's objective metric, where the estimator predicts it."""
    if not est.predicted:
        return None
    value: Any = {"total_token_throughput": est.total_tok_s, "output_throughput": est.output_tok_s,
                  "mean_ttft_ms": est.ttft_ms, "mean_tpot_ms": est.tpot_ms}.get(metric)
    return None if value is None else float(value)
