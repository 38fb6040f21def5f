"""Service-level objectives: reading a metric from a benchmark result and checking bounds."""

from __future__ import annotations

from tuner.errors import HarnessError


FAILED_PCT = "failed_pct"


def metric_value(metrics: dict, name: str) -> float | None:
    """A benchmark metric, or ``failed_pct``: the share of requests that failed."""
    if name == FAILED_PCT:
        total = metrics.get("completed", 0) + metrics.get("failed", 0)
        return 100.0 * metrics.get("failed", 0) / total if total else 100.0
    value = metrics.get(name)
    return None if value is None else float(value)


def slack(metrics: dict, slos: dict[str, float]) -> dict[str, float]:
    """Measured minus bound for each SLO (an upper bound); <= 0 means met. A metric the benchmark
    did not report is the tuner's fault (the space names only known metrics), never a pass."""
    out = {}
    for name, bound in slos.items():
        value = metric_value(metrics, name)
        if value is None:
            raise HarnessError(f"SLO on metric {name!r}, which the benchmark result does not have")
        out[name] = value - bound
    return out


def worst_slack(per_workload: list[dict], slos: dict[str, float]) -> dict[str, float]:
    """Each SLO's slack on the workload where it is worst."""
    slacks = [slack(m, slos) for m in per_workload]
    return {name: max(s[name] for s in slacks) for name in slos}


def met(metrics: dict, slos: dict[str, float]) -> bool:
    return all(v <= 0 for v in slack(metrics, slos).values())
