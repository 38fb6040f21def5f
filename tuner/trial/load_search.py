"""Max load under SLO: on one launched server, the highest request rate (or concurrency) whose
benchmark still meets the SLOs.

Goodput at one fixed rate below saturation cannot tell configs apart (every config meets it);
the load a config sustains within the SLOs can. The search doubles the load from ``low`` until a
run misses an SLO or ``high`` is reached, then bisects between the last load that met the SLOs
and the first that did not, within a fixed number of benchmark runs.

Over several workloads the load is the highest at which every workload, each at its share, meets
the SLOs: the lowest of the loads each one sustains. One bisection finds it, each probe running
the workloads until one misses (``EveryWorkload``), so no workload is searched above the load
another one already caps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

from tuner.record.slo import met, metric_value, slack


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
                  slos: dict[str, float], integer: bool,
                  keep_going: Callable[[], bool] = lambda: True) -> tuple[float, list[Probe]]:
    """Returns the highest load that met every SLO (0 when even ``low`` did not) and the probes.
    ``keep_going`` is asked before each probe after the first (a server that died answers
    nothing more)."""
    curve: list[Probe] = []
    good = bad = None
    load = low
    while len(curve) < probes and (not curve or keep_going()):
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


def strain(metrics: dict, slos: dict[str, float]) -> float:
    """The largest share of its bound that any SLO's metric uses (above 1: the SLO is missed)."""
    def share(value: float, bound: float) -> float:
        if bound > 0:
            return value / bound
        return math.inf if value > 0 else 0.0

    return max((share(metric_value(metrics, name) or 0.0, bound) for name, bound in slos.items()),
               default=0.0)


@dataclass
class EveryWorkload:
    """A ``measure`` for ``find_max_load`` over several workloads: at a load, each workload runs
    at its share (``scales``) until one misses an SLO; the metrics returned are those of the run
    that decided (the miss, or the last run when all met). The workload nearest its bounds at its
    last run goes first, so a load that breaks usually costs one run. ``runs`` holds every run as
    (workload, probe at the workload's own load)."""

    measures: dict[str, Callable[[float], dict]]
    scales: dict[str, float]
    slos: dict[str, float]
    integer: bool = False
    runs: list[tuple[str, Probe]] = field(default_factory=list)
    _strain: dict[str, float] = field(default_factory=dict)

    def __call__(self, load: float) -> dict:
        # sorted() is stable: untried workloads keep their order, after any that strained.
        order = sorted(self.measures, key=lambda name: -self._strain.get(name, 0.0))
        for name in order:
            share = self.share(name, load)
            metrics = self.measures[name](share)
            ok = met(metrics, self.slos)
            self.runs.append((name, Probe(share, ok, metrics)))
            self._strain[name] = strain(metrics, self.slos)
            if not ok:
                break
        return metrics

    def limiting(self, best: float) -> str:
        """The workload that caps the load: the last one to miss an SLO (the search's misses come
        at ever lower loads), else the one nearest its bounds at ``best``."""
        missed = [name for name, p in self.runs if not p.met]
        if missed:
            return missed[-1]
        at_best = {name: strain(p.metrics, self.slos) for name, p in self.runs
                   if p.load == self.share(name, best)}
        return max(at_best, key=at_best.__getitem__)

    def share(self, name: str, load: float) -> float:
        """A workload's own load at the searched one (a concurrency stays a whole number >= 1)."""
        share = load * self.scales[name]
        return max(1, round(share)) if self.integer else share


def describe(curve: list[Probe], slos: dict[str, float]) -> list[dict]:
    return [{**p.summary(), "slack": slack(p.metrics, slos)} for p in curve]
