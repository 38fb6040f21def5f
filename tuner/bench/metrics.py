"""Aggregate per-request measurements into vLLM's result fields (``calculate_metrics``, vLLM 0.33).

Kept numerically identical to vLLM (numpy linear percentiles, population std, TPOT over requests
with more than one output token, chunk-based peak throughput) so that a tuned configuration's
numbers mean the same thing as a ``vllm bench serve`` run against it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from tuner.bench.request import RequestOutput

MS = 1000.0
STAT_METRICS = ("ttft", "tpot", "itl", "e2el")
QUEUE_METRICS = ("client_queue_time", "e2el_including_client_queue")


def percentile_key(p: float, metric: str) -> str:
    """``p99_ttft_ms``, ``p99.9_itl_ms``: vLLM's spelling of a percentile field."""
    word = str(int(p)) if int(p) == p else str(p)
    return f"p{word}_{metric}_ms"


def stats(values: Sequence[float], percentiles: Sequence[float]) -> dict[str, float]:
    """mean/median/std/percentiles in ms; an empty list gives zeros, as ``np.mean([] or 0)`` does."""
    arr = values or 0
    out = {
        "mean": float(np.mean(arr)) * MS,
        "median": float(np.median(arr)) * MS,
        "std": float(np.std(arr)) * MS,
    }
    for p in percentiles:
        out[f"p{p}"] = float(np.percentile(arr, p)) * MS
    return out


def calculate_metrics(
    outputs: Sequence[RequestOutput],
    duration: float,
    *,
    count_tokens: Callable[[str], int] | None,
    percentile_metrics: Sequence[str] = ("ttft", "tpot", "itl"),
    percentiles: Sequence[float] = (99.0,),
    goodput: dict[str, float] | None = None,
    max_concurrency: int | None = None,
    request_rate: float = math.inf,
) -> tuple[dict[str, float | int | None], list[int]]:
    """The result dict (vLLM field names and order) and each request's counted output length.

    ``count_tokens`` re-tokenizes generated text when a server sent no usage; without it such a
    request counts as one token, like vLLM with ``--skip-tokenizer-init``.
    """
    actual_output_lens: list[int] = []
    total_input = completed = good = 0
    ttfts: list[float] = []
    tpots: list[float] = []
    all_tpots: list[float] = []
    itls: list[float] = []
    e2els: list[float] = []
    for out in outputs:
        if not out.success:
            actual_output_lens.append(0)
            continue
        out_len = out.output_tokens
        if not out_len:
            out_len = count_tokens(out.generated_text) if count_tokens else 1
        actual_output_lens.append(out_len)
        total_input += out.prompt_len
        tpot = 0.0
        if out_len > 1:
            tpot = (out.latency - out.ttft) / (out_len - 1)
            tpots.append(tpot)
        all_tpots.append(tpot)
        itls.extend(out.itl)
        ttfts.append(out.ttft)
        e2els.append(out.latency)
        completed += 1

    if goodput:
        columns, slos = [], []
        for name, series in (("ttft", ttfts), ("tpot", all_tpots), ("e2el", e2els)):
            if name in goodput:
                columns.append(series)
                slos.append(goodput[name] / MS)
        for values in zip(*columns):
            if all(slo >= v for slo, v in zip(slos, values)):
                good += 1

    peak_tokens, peak_concurrency = _peaks([o for o in outputs if o.success])
    total_output = sum(actual_output_lens)
    result: dict[str, float | int | None] = {
        "duration": duration,
        "completed": completed,
        "failed": len(outputs) - completed,
        "total_input_tokens": total_input,
        "total_output_tokens": total_output,
        "request_throughput": completed / duration,
        "request_goodput": good / duration if goodput else None,
        "output_throughput": total_output / duration,
        "total_token_throughput": (total_input + total_output) / duration,
        "max_output_tokens_per_s": peak_tokens,
        "max_concurrent_requests": peak_concurrency,
    }
    series = {"ttft": ttfts, "tpot": tpots, "itl": itls, "e2el": e2els}
    if max_concurrency is not None:
        ok = [o for o in outputs if o.success]
        series["client_queue_time"] = [o.client_queue_time for o in ok]
        if not math.isinf(request_rate):
            series["e2el_including_client_queue"] = [o.latency + o.client_queue_time for o in ok]
    for name in STAT_METRICS + QUEUE_METRICS:  # vLLM's fixed order, whatever order was asked
        if name not in percentile_metrics or name not in series:
            continue
        s = stats(series[name], percentiles)
        result[f"mean_{name}_ms"] = s["mean"]
        result[f"median_{name}_ms"] = s["median"]
        result[f"std_{name}_ms"] = s["std"]
        for p in percentiles:
            result[percentile_key(p, name)] = s[f"p{p}"]
    return result, actual_output_lens


def _peaks(ok: Sequence[RequestOutput]) -> tuple[float, int]:
    """Busiest one-second bucket of streamed chunks, and most requests in flight in any bucket."""
    if not ok:
        return 0.0, 0
    t0 = min(o.start_time for o in ok)
    t_end = max(o.start_time + o.latency for o in ok)
    n = int(np.ceil(t_end - t0)) + 1
    tokens = np.zeros(n)
    concurrent = np.zeros(n)
    for o in ok:
        t = o.start_time + o.ttft
        times = [t]
        for gap in o.itl:
            t += gap
            times.append(t)
        for t in times:
            bucket = int(t - t0)
            if 0 <= bucket < n:
                tokens[bucket] += 1
        for second in range(int(o.start_time - t0), int(o.start_time + o.latency - t0) + 1):
            concurrent[second] += 1
    return float(np.max(tokens)), int(np.max(concurrent))
