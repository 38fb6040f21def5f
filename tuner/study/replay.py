"""The replay executor: trials answered from a measured grid instead of launched.

The search-quality benchmark (benchmarks/replay.py) compares strategies by running the live driver
(``tuner.study.driver.run``) with this executor: the same sampler, rules, reuse of earlier
measurements, multi-fidelity gate, recorder and stop rules as a real study. A trial draws one
measured launch of its config and one of that launch's full repeats (the measured noise), and is
charged the engine-seconds that launch took (ready + teardown, plus the screen and/or one full
benchmark; a refused config is charged its time to fail). Draws are common random numbers: the k-th
launch of a config in seed s draws the same measured launch whichever strategy asks for it.

A grid of several engines keys its points by ``engine`` too (a knob named ``ENGINE_PARAM``), and a
conditional knob that a config does not have (SGLang's max_num_tokens without chunked prefill) is
None in its key. Each point carries its own costs, so a grid may be simulated (for example from a performance
model's estimates) as well as measured.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tuner.configs.translate import build_plan
from tuner.engines.failures import Failure
from tuner.engines.spec import load_engine
from tuner.files import read_text
from tuner.record import schema
from tuner.space import ENGINE_PARAM
from tuner.study.executors import EXECUTORS, Finished, Hooks
from tuner.study.task import TrialTask
from tuner.trial.runner import TrialOutcome


@dataclass(frozen=True)
class Launch:
    ok: bool
    launch_s: float                      # ready + teardown; a refused config: its time to fail
    screen_value: float | None = None
    screen_s: float = 0.0
    full_values: tuple[float, ...] = ()
    full_s: tuple[float, ...] = ()


@dataclass
class Point:
    params: dict
    launches: list[Launch]

    @property
    def feasible(self) -> bool:
        return any(launch.ok and launch.full_values for launch in self.launches)

    @property
    def values(self) -> list[float]:
        return [v for launch in self.launches if launch.ok for v in launch.full_values]

    @property
    def true_value(self) -> float | None:
        """The mean of every full repeat of every launch: the truth the replay scores against."""
        return statistics.fmean(self.values) if self.feasible else None

    def mean_cost(self, *, screen: bool = False, full: bool = True) -> float:
        costs = []
        for launch in self.launches:
            c = launch.launch_s
            if launch.ok:
                c += (launch.screen_s if screen else 0.0) + (
                    statistics.fmean(launch.full_s) if full and launch.full_s else 0.0)
            costs.append(c)
        return statistics.fmean(costs)


class Grid:
    def __init__(self, knobs: list[str], points: list[Point], direction: str = "maximize",
                 meta: dict | None = None):
        self.knobs = list(knobs)
        self.points = points
        self.direction = direction
        self.meta = meta or {}
        self._index = {self.key(p.params): i for i, p in enumerate(points)}
        if len(self._index) != len(points):
            raise ValueError("grid has duplicate points")
        feasible = [p.true_value for p in points if p.feasible]
        if not feasible:
            raise ValueError("grid has no feasible point")
        self.optimum = max(feasible) if direction == "maximize" else min(feasible)

    def key(self, params: dict) -> tuple:
        """A knob the config does not have (a conditional one) is None."""
        return tuple(params.get(k) for k in self.knobs)

    def index(self, params: dict) -> int:
        try:
            return self._index[self.key(params)]
        except KeyError:
            raise KeyError(f"config {params} was not measured: the replay space must match the "
                           "grid") from None

    def point(self, params: dict) -> Point:
        return self.points[self.index(params)]

    def score(self, params: dict | None) -> float:
        """True value of a config as a fraction of the optimum (0 when nothing is reported)."""
        if params is None:
            return 0.0
        v = self.point(params).true_value
        if v is None:
            return 0.0
        return v / self.optimum if self.direction == "maximize" else self.optimum / v

    @property
    def best_params(self) -> dict:
        return next(p.params for p in self.points if p.feasible and p.true_value == self.optimum)

    def denoised(self) -> "Grid":
        """The same grid without measurement noise: every launch of a config returns its true
        value (and its mean screen), at its mean cost. Separates what the search finds from what
        the noise makes it misreport."""
        points = []
        for p in self.points:
            ok = [launch for launch in p.launches if launch.ok and launch.full_values]
            if not ok:
                cost = statistics.fmean(launch.launch_s for launch in p.launches)
                points.append(Point(dict(p.params), [Launch(False, cost)]))
                continue
            screens = [launch.screen_value for launch in ok if launch.screen_value is not None]
            points.append(Point(dict(p.params), [Launch(
                True, statistics.fmean(launch.launch_s for launch in ok),
                statistics.fmean(screens) if screens else None,
                statistics.fmean(launch.screen_s for launch in ok),
                (p.true_value,),
                (statistics.fmean(s for launch in ok for s in launch.full_s),))]))
        return Grid(self.knobs, points, self.direction, {**self.meta, "noise": "none"})

    @classmethod
    def from_json(cls, data: dict, metric: str = "value") -> "Grid":
        """``metric``: "value" (the space's objective) or another number recorded per benchmark
        by measure_grid.py (e.g. tokens_per_engine_cpu_s)."""
        points = []
        for p in data["points"]:
            launches = []
            for launch in p["launches"]:
                if not launch["ok"]:
                    launches.append(Launch(False, float(launch["time_to_fail_s"])))
                    continue
                t = launch["timings"]
                full = [r for r in launch["full"] if r.get(metric) is not None]
                screen = launch.get("screen") or {}
                launches.append(Launch(
                    True, float(t["ready_s"]) + float(t.get("teardown_s", 0.0)),
                    screen.get(metric), float(screen.get("seconds") or 0.0),
                    tuple(float(r[metric]) for r in full),
                    tuple(float(r["seconds"]) for r in full)))
            if launches:
                points.append(Point(dict(p["params"]), launches))
        meta = dict(data.get("meta", {}))
        if metric != "value":
            meta["objective"] = metric
        return cls(data["knobs"], points, meta.get("direction", "maximize"), meta)

    @classmethod
    def load(cls, path: Path, metric: str = "value") -> "Grid":
        return cls.from_json(json.loads(read_text(Path(path), "replay grid")), metric)


@EXECUTORS.register("replay")
class ReplayExecutor:
    """Answers each trial from ``grid``; ``seconds`` holds the engine-seconds charged per trial."""

    slots = 1

    def __init__(self, handle: Any = None, *, grid: Grid, seed: int) -> None:
        self.grid = grid
        self.seed = seed
        self.seconds: dict[int, float] = {}
        self._occurrences: dict[int, int] = {}
        self._pending: list[TrialTask] = []

    def submit(self, task: TrialTask, hooks: Hooks) -> Any:
        self._pending.append(task)
        return task.number

    def wait(self) -> Finished:
        task = self._pending.pop(0)
        return Finished(task.number, self._outcome(task))

    def _outcome(self, task: TrialTask) -> TrialOutcome:
        space, engine = task.space, task.engine
        idx = self.grid.index({ENGINE_PARAM: engine, **task.knobs})
        occ = self._occurrences.get(idx, 0)
        self._occurrences[idx] = occ + 1
        draw = np.random.default_rng([self.seed, idx, occ])
        point = self.grid.points[idx]
        launch = point.launches[int(draw.integers(len(point.launches)))]
        plan = build_plan(load_engine(engine), space.engines[engine], space.model, task.knobs,
                          port=8000, omit=task.omit)
        outcome = TrialOutcome(plan=plan, log_path=task.trial_dir / "server.log",
                               engine_version=self.grid.meta.get("engine_version"))
        seconds = launch.launch_s
        metric = space.objective.metric
        if not launch.ok:
            outcome.failure = Failure("invalid-config", "refused in the measured grid", "")
        else:
            for w in task.workloads:
                if w.name == schema.SCREEN:
                    seconds += launch.screen_s
                    outcome.workload_metrics[w.name] = {metric: launch.screen_value}
                    if not task.gate({metric: launch.screen_value}):
                        outcome.screened_out = True
                        break
                    continue
                j = int(draw.integers(len(launch.full_values)))
                seconds += launch.full_s[j]
                outcome.workload_metrics[w.name] = {metric: launch.full_values[j]}
        self.seconds[task.number] = seconds
        return outcome

    def cancel(self, keys: list[Any]) -> None:
        self._pending.clear()

    def reap(self) -> list[str]:
        return []

    def close(self) -> None:
        pass
