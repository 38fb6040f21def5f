"""Max load under SLO: on one launched server, the highest request rate (or concurrency) whose
benchmark still meets the SLOs.

Goodput at one fixed rate below saturation cannot tell configs apart (every config meets it);
the load a config sustains within the SLOs can. The search doubles the load from ``low`` until a
run misses an SLO or ``high`` is reached, then bisects between the last load that met the SLOs
and the first that did not, within a fixed number of benchmark runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from tuner.record.slo import met, slack


@dataclass(frozen=True)
class Probe:
    load: float
    met: bool
    metrics: dict

    def summary(self) -> dict:
        keys = ("request_throughput", "total_token_throughput", "p99_ttft_ms", "mean_tpot_ms",
                "completed", "failed")
        return {"load": self.load, "met": self.met,
                **{k: self.metrics[k] for k in keys if k in self.metrics}}


def find_max_load(measure: Callable[[float], dict], *, low: float, high: float, probes: int,
                  slos: dict[str, float], integer: bool) -> tuple[float, list[Probe]]:
    """Returns the highest load that met every SLO (0 when even ``low`` did not) and the probes."""
    curve: list[Probe] = []
    good = bad = None
    load = low
    while len(curve) < probes:
        metrics = measure(load)
        ok = met(metrics, slos)
        curve.append(Probe(load, ok, metrics))
        if ok:
            good = load
        else:
            bad = load
        if bad is None:
            if load >= high:
                break
            load = min(high, load * 2)
        elif good is None:
            break
        else:
            nxt = (good + bad) / 2
            if integer:
                nxt = int(nxt)
                if nxt <= good:
                    break
            load = nxt
    return (good or 0.0), curve


def describe(curve: list[Probe], slos: dict[str, float]) -> list[dict]:
    return [{**p.summary(), "slack": slack(p.metrics, slos)} for p in curve]
