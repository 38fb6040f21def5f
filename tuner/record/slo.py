"""Service-level objectives: reading a metric from a benchmark result and checking bounds."""

from __future__ import annotations


def metric_value(metrics: dict, name: str) -> float | None:
    """A benchmark metric, or ``failed_pct``: the share of requests that failed."""
    if name == "failed_pct":
        total = metrics.get("completed", 0) + metrics.get("failed", 0)
        return 100.0 * metrics.get("failed", 0) / total if total else 100.0
    value = metrics.get(name)
    return None if value is None else float(value)


def slack(metrics: dict, slos: dict[str, float]) -> dict[str, float]:
    """Measured minus bound for each SLO (an upper bound); <= 0 means met. Unknown metric: +inf."""
    out = {}
    for name, bound in slos.items():
        value = metric_value(metrics, name)
        out[name] = float("inf") if value is None else value - bound
    return out


def met(metrics: dict, slos: dict[str, float]) -> bool:
    return all(v <= 0 for v in slack(metrics, slos).values())
