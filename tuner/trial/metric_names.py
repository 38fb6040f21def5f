"""The metric names a trial records, which a space's objective and SLOs may name.

A name the results never hold would only show after a launch, as a harness error on every trial:
on a GPU, three launches spent before the study stops. So the space is checked against these names
before the study is made.
"""

from __future__ import annotations

import difflib
from functools import cache

from tuner.bench import BenchConfig
from tuner.bench.metrics import calculate_metrics
from tuner.errors import InputError
from tuner.record.per_gpu import per_gpu
from tuner.record.slo import FAILED_PCT
from tuner.space import Space
from tuner.trial.telemetry import derived


@cache
def recorded_metrics() -> frozenset[str]:
    """The benchmark's fields with the client settings a trial uses, the telemetry figures merged
    into them, the per-GPU view, and the share of failed requests."""
    client = BenchConfig(base_url="", model="", tokenizer="")
    bench, _ = calculate_metrics([], 1.0, count_tokens=None, percentile_metrics=client.percentile_metrics,
                                 percentiles=client.metric_percentiles)
    names = {name for name, value in bench.items() if value is not None}  # goodput: not measured
    return frozenset(names | set(derived({}, 0)) | set(per_gpu({"total_token_throughput": 1.0}, 1))
                     | {FAILED_PCT})


def check_metrics(space: Space) -> None:
    """An InputError naming the first objective or SLO key that names no recorded metric."""
    objective = space.objective
    named = [(f"objective.slos.{name}", name) for name in objective.slos]
    if objective.max_load is None:
        named += ([(f"objective.metrics[{i}].metric", t.metric) for i, t in enumerate(objective.metrics)]
                  or [("objective.metric", objective.metric)])
    known = recorded_metrics()
    for key, name in named:
        if name not in known:
            close = difflib.get_close_matches(name, known, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise InputError(f"space {space.name}: {key}: {name!r} is not a metric a trial records{hint} "
                             f"(known: {', '.join(sorted(known))})")
