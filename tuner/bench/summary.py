"""The text block ``vllm bench serve`` prints after a run, reproduced line for line.

People compare runs by eye and by grepping logs for these exact labels; keeping vLLM's layout means
existing habits and scripts work on the tuner's output too.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from tuner.bench.metrics import QUEUE_METRICS, STAT_METRICS, percentile_key

_HEADERS = {
    "ttft": ("TTFT", "Time to First Token"),
    "tpot": ("TPOT", "Time per Output Token (excl. 1st token)"),
    "itl": ("ITL", "Inter-token Latency"),
    "e2el": ("E2EL", "End-to-end Latency"),
    "client_queue_time": ("Client Queue Time", "Client-side Queueing"),
    "e2el_including_client_queue": ("E2EL incl. Client Queue", "Queue-inclusive End-to-end Latency"),
}


def format_summary(
    metrics: Mapping[str, object],
    *,
    max_concurrency: int | None,
    request_rate: float,
    percentile_metrics: Sequence[str],
    percentiles: Sequence[float],
) -> str:
    """The "Serving Benchmark Result" block for ``metrics`` (a BenchResult.metrics dict)."""
    lines = ["{s:{c}^{n}}".format(s=" Serving Benchmark Result ", n=50, c="=")]

    def row(label: str, value: object, fmt: str = "") -> None:
        lines.append(("{:<40} {:<10" + fmt + "}").format(label, value))

    row("Successful requests:", metrics["completed"])
    row("Failed requests:", metrics["failed"])
    if max_concurrency is not None:
        row("Maximum request concurrency:", max_concurrency)
    if request_rate != math.inf:
        row("Request rate configured (RPS):", request_rate, ".2f")
    row("Benchmark duration (s):", metrics["duration"], ".2f")
    row("Total input tokens:", metrics["total_input_tokens"])
    row("Total generated tokens:", metrics["total_output_tokens"])
    row("Request throughput (req/s):", metrics["request_throughput"], ".2f")
    if metrics.get("request_goodput") is not None:
        row("Request goodput (req/s):", metrics["request_goodput"], ".2f")
    row("Output token throughput (tok/s):", metrics["output_throughput"], ".2f")
    row("Peak output token throughput (tok/s):", metrics["max_output_tokens_per_s"], ".2f")
    row("Peak concurrent requests:", metrics["max_concurrent_requests"], ".2f")
    row("Total token throughput (tok/s):", metrics["total_token_throughput"], ".2f")
    for name in STAT_METRICS + QUEUE_METRICS:
        if name not in percentile_metrics or f"mean_{name}_ms" not in metrics:
            continue
        short, header = _HEADERS[name]
        lines.append("{s:{c}^{n}}".format(s=header, n=50, c="-"))
        row(f"Mean {short} (ms):", metrics[f"mean_{name}_ms"], ".2f")
        row(f"Median {short} (ms):", metrics[f"median_{name}_ms"], ".2f")
        for p in percentiles:
            word = percentile_key(p, name).split("_", 1)[0][1:]
            row(f"P{word} {short} (ms):", metrics[percentile_key(p, name)], ".2f")
    lines.append("=" * 50)
    return "\n".join(lines)
