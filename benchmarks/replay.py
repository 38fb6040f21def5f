"""Compare search strategies by replaying a measured grid (benchmarks/measure_grid.py).

Each strategy runs the live tool's own code: the sampler the study would build
(``tuner.study._sampler``: TPE, GP, random, grid, greedy), the define-by-run ``tuner.space.suggest``
on the replay space, ``TrialRecorder.without_launch`` (configs known to be infeasible, and configs
measured earlier in the study, are answered without a launch), failed launches recorded COMPLETE
with the pessimistic value and ``engine_start = 1`` (``TrialRecorder.refused_values``), and
multi-fidelity exactly as ``tuner.study``/``tuner.recording`` do it: the threshold from
``screen_threshold`` before the trial, the screen reported as step 0, the gate of ``TrialTask``, a
screened-out trial told PRUNED. Instead of launching, a trial draws one measured
launch of its config and one of that launch's full repeats (the measured noise), and is charged
the engine-seconds that launch took (ready + teardown, plus the screen and/or one full benchmark;
a refused config is charged its time to fail).

The config a strategy would report is what ``tune best`` reports (``tuner.results.best_config``:
the feasible config with the best median); it is scored by its TRUE value, the mean of all its
measured full repeats.

    .venv/bin/python benchmarks/replay.py                        # 50 seeds, every strategy, plots
    PYTHONPATH=/tmp/torch-gp .venv/bin/python benchmarks/replay.py   # GP too (needs torch)
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import statistics
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import optuna
from optuna.trial import TrialState

from tuner.errors import InputError
from tuner.record import results, schema
from tuner.space import Fidelity, Space, load_space, suggest
from tuner.study.driver import MAX_PRUNED_IN_A_ROW
from tuner.study.recorder import TrialRecorder
from tuner.study.samplers import (
    GreedySampler,
    _sampler,  # the live study's own pieces
    screen_threshold,
)
from tuner.study.task import TrialTask

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DEFAULT_DATA = HERE / "data" / "grid-vllm-cpu.json"
DEFAULT_SPACE = HERE / "replay-space.yaml"

# name -> (sampler name in the space, multi-fidelity screening on?)
STRATEGIES: dict[str, tuple[str, bool]] = {
    "tpe": ("tpe", False),
    "gp": ("gp", False),
    "random": ("random", False),
    "grid": ("grid", False),
    "greedy": ("greedy", False),
    "tpe-mf": ("tpe", True),
    # What-if, NOT what the live tool does: screening with a 30 % margin instead of the space's
    # (10 % here).
    "tpe-mf-m30": ("tpe", True),
}
MARGIN = {"tpe-mf-m30": 0.3}
WHAT_IF = set(MARGIN)
TOLERANCE = 0.02  # "within 2 % of the grid optimum"


# ---- the measured grid -------------------------------------------------------------------------

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
        return tuple(params[k] for k in self.knobs)

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
        return cls.from_json(json.loads(Path(path).read_text()), metric)


# ---- one replayed study ------------------------------------------------------------------------

@dataclass
class TrialRec:
    number: int           # the Optuna trial number
    params: dict
    state: str            # ok | infeasible | screened-out | rule-pruned (no launch)
    # (a config measured before is answered with that measurement: not a TrialRec, see Run.reused)
    value: float | None   # what the study was told (the drawn full repeat; 0 for a refused config)
    seconds: float        # engine-seconds charged for this trial
    cum_seconds: float
    reported: dict | None  # the config `tune best` would report after this trial
    score: float           # its true value / the optimum


@dataclass
class Run:
    strategy: str
    seed: int
    trials: list[TrialRec] = field(default_factory=list)
    study: optuna.Study | None = field(default=None, repr=False)
    reused: int = 0  # proposals answered with an earlier measurement: free, not in ``trials``

    @property
    def launches(self) -> int:
        return sum(t.state != "rule-pruned" for t in self.trials)

    def launches_by(self, k: int) -> int:
        return sum(t.state != "rule-pruned" for t in self.trials[:k])

    @property
    def seconds(self) -> float:
        return self.trials[-1].cum_seconds if self.trials else 0.0

    @property
    def final(self) -> float:
        return self.trials[-1].score if self.trials else 0.0

    def reach(self, tol: float = TOLERANCE) -> tuple[int | None, float | None]:
        """First trial (1-based, as the budget counts them: rule-pruned trials count, reused
        ones do not) after which the reported config is within ``tol`` of the optimum, and the
        engine-seconds spent by then; (None, None) if never."""
        for i, t in enumerate(self.trials):
            if t.score >= 1 - tol:
                return i + 1, t.cum_seconds
        return None, None

    def reach_launches(self, tol: float = TOLERANCE) -> int | None:
        k, _ = self.reach(tol)
        return None if k is None else self.launches_by(k)

    def score_at_launches(self, n: int) -> float:
        """Score once ``n`` engines have been launched (later rule-pruned trials included)."""
        best = 0.0
        for i, t in enumerate(self.trials):
            if self.launches_by(i + 1) > n:
                break
            best = t.score
        return best

    def score_at_trials(self, k: int) -> float:
        """Score after ``k`` trials (a strategy that stopped earlier keeps its last answer)."""
        if not self.trials or k <= 0:
            return 0.0
        return self.trials[min(k, len(self.trials)) - 1].score

    def score_at_seconds(self, budget: float) -> float:
        done = [t for t in self.trials if t.cum_seconds <= budget]
        return done[-1].score if done else 0.0


def make_study(space: Space, strategy: str, seed: int, n_trials: int) -> optuna.Study:
    """The study the live tool would create for this space with this sampler, seed and budget."""
    sampler_name, _ = STRATEGIES[strategy]
    live_space = space.model_copy(update={
        "sampler": sampler_name, "seed": seed,
        "budget": space.budget.model_copy(update={"n_trials": n_trials})})
    return optuna.create_study(direction=space.objective.direction, sampler=_sampler(live_space),
                               pruner=optuna.pruners.NopPruner())


_RECORDERS: dict[int, TrialRecorder] = {}


def _recorder(space: Space, study: optuna.Study) -> TrialRecorder:
    """The live TrialRecorder (for its pre-launch decisions and refused values), pointed at this
    study."""
    base = _RECORDERS.get(id(space))
    if base is None:
        base = _RECORDERS[id(space)] = TrialRecorder(study, space, "sqlite:///:memory:")
    rec = copy.copy(base)
    rec.study = study
    return rec


def replay(space: Space, grid: Grid, strategy: str, seed: int, n_trials: int, *,
           rules: bool = True) -> Run:
    """One study of ``n_trials`` replayed trials (greedy stops earlier once its ladders are done).

    Trials run through ``study.optimize(objective, n_trials=1)`` one at a time, as
    ``tuner.study.run`` does (the grid sampler, for one, calls ``study.stop()`` from inside it).
    Noise draws are common random numbers: the k-th launch of a config in seed s draws the same
    measured launch and repeat whichever strategy asks for it, so strategies are compared on the
    same luck.

    As the live tool does, a config the study has measured already is not launched again: the
    trial repeats that measurement at no cost and does not count against the budget.
    ``rules``: as the live tool does, a config that a rule of the engine's YAML (or a failure
    learned earlier in the study) says cannot start is told COMPLETE with the pessimistic value
    and engine_start = 1 without a launch, costing nothing but counting as a trial. Off: such
    configs are launched and refused as measured. Either way the study stops after
    MAX_PRUNED_IN_A_ROW trials in a row without a launch.
    """
    _, multi_fidelity = STRATEGIES[strategy]
    fidelity = space.fidelity or Fidelity(screen_prompts=1)
    if strategy in MARGIN:
        fidelity = fidelity.model_copy(update={"margin": MARGIN[strategy]})
    study = make_study(space, strategy, seed, n_trials)
    metric = space.objective.metric
    occurrences: dict[int, int] = {}
    run = Run(strategy, seed, study=study)
    cost: dict[int, tuple[dict, str, float]] = {}
    recorder = _recorder(space, study)
    engine_version = grid.meta.get("engine_version")

    def objective(trial: optuna.Trial) -> float:
        engine, knobs = suggest(trial, space)
        trial.set_user_attr(schema.ARM, "search")
        trial.set_user_attr(schema.ENGINE, engine)
        # tuner.study.prepare: the threshold is computed before the trial runs.
        threshold = (screen_threshold(study, margin=fidelity.margin, n_startup=fidelity.n_startup)
                     if multi_fidelity else None)
        params = {k: knobs[k] for k in grid.knobs}
        idx = grid.index(params)
        point = grid.points[idx]
        # tuner.study.run: known-infeasible and already-measured configs are not launched
        answer = (recorder.without_launch(trial, engine, knobs, frozenset(),
                                          check_rules=space.engines[engine].check_rules)
                  if rules else recorder.reuse(trial, engine))
        if answer is not None:
            state = "reused" if schema.REUSED_FROM in trial.user_attrs else "rule-pruned"
            cost[trial.number] = (params, state, 0.0)
            if answer.state == TrialState.PRUNED:
                raise optuna.TrialPruned()
            return answer.values
        occ = occurrences.get(idx, 0)
        occurrences[idx] = occ + 1
        draw = np.random.default_rng([seed, idx, occ])
        launch = point.launches[int(draw.integers(len(point.launches)))]
        trial.set_user_attr(schema.FEASIBLE, launch.ok)
        trial.set_user_attr(schema.ENGINE_VERSION, engine_version)
        seconds = launch.launch_s
        if not launch.ok:
            # tuner.recording: refused at start -> COMPLETE, pessimistic value, engine_start = 1
            cost[trial.number] = (params, "infeasible", seconds)
            return recorder.refused_values(trial)
        trial.set_constraint("engine_start", 0.0)
        passed = True
        if multi_fidelity:
            seconds += launch.screen_s
            trial.report(float(launch.screen_value), step=0)
            if threshold is not None:  # tuner.study.execute applies the gate only then
                task = TrialTask(trial.number, engine, knobs, frozenset(), Path("."), space,
                                 screen_threshold=threshold)
                passed = task.gate({metric: launch.screen_value})
            trial.set_user_attr(schema.FIDELITY, "full" if passed else "screen")
        if not passed:
            cost[trial.number] = (params, "screened-out", seconds)
            raise optuna.TrialPruned()  # tuner.study.run: recorder returned None
        j = int(draw.integers(len(launch.full_values)))
        cost[trial.number] = (params, "ok", seconds + launch.full_s[j])
        return launch.full_values[j]

    cum = 0.0
    unlaunched_in_a_row = 0
    while len(run.trials) < n_trials:
        # what tuner.study.run does
        if unlaunched_in_a_row >= MAX_PRUNED_IN_A_ROW:
            break
        if isinstance(study.sampler, GreedySampler) and study.sampler.done(study):
            break
        study.optimize(objective, n_trials=1)
        ft = study.trials[-1]
        params, state, seconds = cost[ft.number]
        unlaunched_in_a_row = 0 if schema.launched(ft) else unlaunched_in_a_row + 1
        if state == "reused":
            run.reused += 1
            continue
        cum += seconds
        best = results.best_config(study)
        reported = {k: best.params[k] for k in grid.knobs} if best else None
        value = ft.value if ft.state == TrialState.COMPLETE else None
        run.trials.append(TrialRec(ft.number, params, state, value, seconds, cum, reported,
                                   grid.score(reported)))
    return run


# ---- many seeds, summaries, targets ------------------------------------------------------------

def run_all(space: Space, grid: Grid, strategies: list[str], seeds: int, n_trials: int,
            log=print, rules: bool = True) -> tuple[dict[str, list[Run]], dict[str, str]]:
    runs: dict[str, list[Run]] = {}
    skipped: dict[str, str] = {}
    for name in strategies:
        t0 = time.monotonic()
        try:
            runs[name] = [replay(space, grid, name, seed, n_trials, rules=rules)
                          for seed in range(seeds)]
        except InputError as exc:
            skipped[name] = str(exc)
            log(f"{name}: skipped ({exc})")
            continue
        log(f"{name}: {seeds} seeds in {time.monotonic() - t0:.1f}s")
    return runs, skipped


def _median_censored(xs: list[float | None]) -> float | None:
    """Median where None (never reached) counts as worse than any value; None if >= half never."""
    vals = sorted(math.inf if x is None else x for x in xs)
    n = len(vals)
    m = vals[(n - 1) // 2] if n % 2 else (vals[n // 2 - 1] + vals[n // 2]) / 2
    return None if math.isinf(m) else m


def summarize(runs: dict[str, list[Run]], grid: Grid, *, n_grid: int, budgets_trials: list[int],
              budgets_seconds: list[float]) -> dict:
    out = {}
    for name, rs in runs.items():
        reach = [r.reach() for r in rs]
        k = [x[0] for x in reach]
        s = [x[1] for x in reach]
        out[name] = {
            "seeds": len(rs),
            "reach_rate": sum(x is not None for x in k) / len(rs),
            "reach_trials_median": _median_censored(k),
            "reach_trials_p25_p75": [_q(k, 0.25), _q(k, 0.75)],
            "reach_seconds_median": _median_censored(s),
            "reach_launches_median": _median_censored([r.reach_launches() for r in rs]),
            "reach_by_quarter_grid": sum(x is not None and x <= n_grid / 4 for x in k) / len(rs),
            "launches_mean": statistics.fmean(r.launches for r in rs),
            "seconds_mean": statistics.fmean(r.seconds for r in rs),
            "final_mean": statistics.fmean(r.final for r in rs),
            "final_min": min(r.final for r in rs),
            "at_trials": {str(b): _mean_sd([r.score_at_trials(b) for r in rs]) for b in budgets_trials},
            "at_seconds": {str(round(b)): _mean_sd([r.score_at_seconds(b) for r in rs])
                           for b in budgets_seconds},
            "screened_out_share": (sum(t.state == "screened-out" for r in rs for t in r.trials)
                                   / max(1, sum(len(r.trials) for r in rs))),
            "infeasible_share": (sum(t.state == "infeasible" for r in rs for t in r.trials)
                                 / max(1, sum(len(r.trials) for r in rs))),
            "rule_pruned_share": (sum(t.state == "rule-pruned" for r in rs for t in r.trials)
                                  / max(1, sum(len(r.trials) for r in rs))),
            "trials_mean": statistics.fmean(len(r.trials) for r in rs),
            "reused_mean": statistics.fmean(r.reused for r in rs),
            "duplicate_share": statistics.fmean(
                1 - len({tuple(t.params.values()) for t in r.trials}) / max(1, len(r.trials))
                for r in rs),
            "optimum_launched_share": sum(any(t.params == grid.best_params for t in r.trials)
                                          for r in rs) / len(rs),
            "optimum_screened_out": sum(t.params == grid.best_params and t.state == "screened-out"
                                        for r in rs for t in r.trials),
            "optimum_launches": sum(t.params == grid.best_params for r in rs for t in r.trials),
        }
    return out


def _q(xs: list[float | None], q: float) -> float | None:
    vals = sorted(math.inf if x is None else x for x in xs)
    v = vals[min(len(vals) - 1, int(round(q * (len(vals) - 1))))]
    return None if math.isinf(v) else v


def _mean_sd(xs: list[float]) -> list[float]:
    return [statistics.fmean(xs), statistics.pstdev(xs)]


def targets(summary: dict, runs: dict[str, list[Run]], *, n_grid: int) -> list[dict]:
    """The issue's three targets, each with the numbers behind the verdict."""
    out = []
    quarter = n_grid / 4
    cands = [c for c in ("tpe", "tpe-mf") if c in summary]
    if not cands:
        return out
    best = min(cands, key=lambda c: summary[c]["reach_trials_median"] or math.inf)
    med = summary[best]["reach_trials_median"]
    out.append({
        "target": f"TPE or multi-fidelity reaches within 2% in <= 25% of the grid's trials "
                  f"(<= {quarter:g} of {n_grid})",
        "met": med is not None and med <= quarter,
        "detail": "; ".join(
            f"{c}: median trials {_fmt(summary[c]['reach_trials_median'], 1)}, "
            f"{100 * summary[c]['reach_by_quarter_grid']:.0f}% of seeds by trial {quarter:g}"
            for c in cands),
    })
    if "greedy" in runs:
        g = runs["greedy"]
        # paired by seed: each strategy's answer once it has launched as many engines as greedy
        launches = statistics.fmean(r.launches for r in g)
        g_final = statistics.fmean(r.final for r in g)
        parts, met = [], False
        for c in cands:
            at = statistics.fmean(rc.score_at_launches(rg.launches) for rc, rg in zip(runs[c], g))
            wins = sum(rc.score_at_launches(rg.launches) >= rg.final for rc, rg in zip(runs[c], g))
            diff = np.array([rc.score_at_launches(rg.launches) - rg.final
                             for rc, rg in zip(runs[c], g)]) * 100
            boot = np.random.default_rng(0).choice(diff, (4000, diff.size)).mean(1)
            lo, hi = np.percentile(boot, [2.5, 97.5])
            parts.append(f"{c} after as many launches: {100 * at:.1f}% of optimum, "
                         f"paired difference {diff.mean():+.1f} points (95% CI {lo:+.1f} to "
                         f"{hi:+.1f}), >= greedy in {wins}/{len(g)} seeds")
            met |= at >= g_final
        out.append({
            "target": "matches or beats greedy's final value using no more launches than greedy",
            "met": met,
            "detail": f"greedy: {100 * g_final:.1f}% of optimum after {launches:.1f} launches "
                      f"(mean; {min(r.launches for r in g)}–{max(r.launches for r in g)}); "
                      + "; ".join(parts),
        })
    if "tpe-mf" in summary and "tpe" in summary:
        mf, full = summary["tpe-mf"]["reach_seconds_median"], summary["tpe"]["reach_seconds_median"]
        ratio = mf / full if mf is not None and full else None
        out.append({
            "target": "multi-fidelity needs <= 50% of the engine-seconds of full-fidelity search "
                      "to the same best (within 2%)",
            "met": ratio is not None and ratio <= 0.5,
            "detail": f"median engine-seconds to within 2%: tpe-mf {_fmt(mf)}, tpe {_fmt(full)}"
                      + (f", ratio {ratio:.2f}" if ratio is not None else ""),
        })
    return out


def _fmt(x: float | None, nd: int = 0) -> str:
    return "never" if x is None else f"{x:.{nd}f}"


# ---- report ------------------------------------------------------------------------------------

def p_best(grid: Grid, n_boot: int = 2000, seed: int = 0) -> dict[tuple, float]:
    """How sure the grid optimum is: the share of bootstrap resamples (of each config's repeats)
    in which each config has the best mean."""
    rng = np.random.default_rng(seed)
    feasible = [p for p in grid.points if p.feasible]
    means = np.array([[rng.choice(p.values, len(p.values)).mean() for p in feasible]
                      for _ in range(n_boot)])
    best = means.argmax(1) if grid.direction == "maximize" else means.argmin(1)
    return {grid.key(p.params): float((best == i).mean()) for i, p in enumerate(feasible)}


def grid_table(grid: Grid) -> str:
    rows = ["| " + " | ".join(grid.knobs) + " | true value (mean) | repeats | spread (min–max) "
            "| P(best) | launches | cost full trial (s) |",
            "|" + "---|" * (len(grid.knobs) + 6)]
    ordered = sorted(grid.points, key=lambda p: -(p.true_value or -1))
    pb = p_best(grid)
    for p in ordered:
        vals = p.values
        if p.feasible:
            cells = [f"{p.true_value:.0f} ({100 * grid.score(p.params):.1f}%)", str(len(vals)),
                     f"{min(vals):.0f}–{max(vals):.0f}", f"{pb[grid.key(p.params)]:.2f}"]
        else:
            cells = ["refused", "0", "–", "–"]
        rows.append("| " + " | ".join(str(p.params[k]) for k in grid.knobs) + " | "
                    + " | ".join(cells) + f" | {len(p.launches)} | {p.mean_cost():.1f} |")
    return "\n".join(rows)


def markdown(summary: dict, tgts: list[dict], skipped: dict, *, n_trials: int,
             budgets_trials: list[int], budgets_seconds: list[float]) -> str:
    lines = ["| strategy | seeds | reached within 2% | median trials to 2% (IQR) "
             "| median launches to 2% | median engine-s to 2% | trials / launches (mean) "
             "| final (% of opt.) |",
             "|---|---|---|---|---|---|---|---|"]
    for name, s in summary.items():
        iqr = s["reach_trials_p25_p75"]
        lines.append(
            f"| {name}{' (what-if)' if name in WHAT_IF else ''} | {s['seeds']} | {100 * s['reach_rate']:.0f}% | "
            f"{_fmt(s['reach_trials_median'], 1)} ({_fmt(iqr[0])}–{_fmt(iqr[1])}) | "
            f"{_fmt(s['reach_launches_median'], 1)} | "
            f"{_fmt(s['reach_seconds_median'])} | {s['trials_mean']:.1f} / {s['launches_mean']:.1f} | "
            f"{100 * s['final_mean']:.1f} (worst {100 * s['final_min']:.1f}) |")
    lines += ["", "Where the trials went (shares of all trials), and whether the optimum was ever "
              "launched:", "",
              "| strategy | repeated configs | pruned by a rule (no launch) "
              "| launched and refused | screened out | seeds that launched the optimum "
              "| optimum launches screened out | reused proposals per study (mean; not trials) |",
              "|---|---|---|---|---|---|---|---|"]
    for name, s in summary.items():
        lines.append(f"| {name} | {100 * s['duplicate_share']:.0f}% | "
                     f"{100 * s['rule_pruned_share']:.0f}% | "
                     f"{100 * s['infeasible_share']:.0f}% | {100 * s['screened_out_share']:.0f}% | "
                     f"{100 * s['optimum_launched_share']:.0f}% | "
                     f"{s['optimum_screened_out']}/{s['optimum_launches']} | "
                     f"{s['reused_mean']:.1f} |")
    lines += ["", "Value at equal budget: true value of the reported config, % of optimum, "
              "mean ± sd over seeds.", "",
              "| strategy | " + " | ".join(f"{b} trials" for b in budgets_trials) + " | "
              + " | ".join(f"{b:.0f} engine-s" for b in budgets_seconds) + " |",
              "|---|" + "---|" * (len(budgets_trials) + len(budgets_seconds))]
    for name, s in summary.items():
        cells = [f"{100 * m:.1f} ± {100 * sd:.1f}" for m, sd in s["at_trials"].values()]
        cells += [f"{100 * m:.1f} ± {100 * sd:.1f}" for m, sd in s["at_seconds"].values()]
        lines.append(f"| {name}{' (what-if)' if name in WHAT_IF else ''} | "
                     + " | ".join(cells) + " |")
    lines += ["", "\"never\": half the seeds or more did not get within 2% in the budget. "
              "Targets (live strategies only):", "",
              "| target | verdict | numbers |", "|---|---|---|"]
    for t in tgts:
        lines.append(f"| {t['target']} | {'**met**' if t['met'] else '**missed**'} | {t['detail']} |")
    for name, why in skipped.items():
        lines.append(f"\n{name} was skipped: {why}")
    return "\n".join(lines)


def plot(runs: dict[str, list[Run]], grid: Grid, out_dir: Path, *, prefix: str = "replay",
         n_trials: int, with_grid: bool = True,
         max_seconds: float) -> list[Path]:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    colors = dict(zip(STRATEGIES, plt.rcParams["axes.prop_cycle"].by_key()["color"]))

    # 1. value of the reported config vs trials and vs engine-seconds
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.8))
    ks = np.arange(1, n_trials + 1)
    ts = np.linspace(0, max_seconds, 200)
    for name, rs in runs.items():
        by_k = np.array([[r.score_at_trials(k) for k in ks] for r in rs]) * 100
        by_t = np.array([[r.score_at_seconds(t) for t in ts] for r in rs]) * 100
        for ax, x, ys in ((axes[0], ks, by_k), (axes[1], ts, by_t)):
            ax.plot(x, ys.mean(0), label=name, color=colors.get(name),
                    ls="--" if name in WHAT_IF else "-")
    lo = min(100 * statistics.fmean(r.score_at_trials(1) for r in rs) for rs in runs.values())
    trials_label = "trials (rule-pruned ones launch nothing; reused ones are not counted)"
    for ax, xl in ((axes[0], trials_label), (axes[1], "engine-seconds")):
        ax.axhline(100 * (1 - TOLERANCE), color="k", ls="--", lw=0.8, label="2% of optimum")
        ax.set_xlabel(xl)
        ax.set_ylabel("true value of reported config (% of grid optimum)")
        ax.set_ylim(max(0, lo - 5), 101)
        ax.grid(alpha=0.3)
    axes[0].axvline(n_trials / 4, color="grey", ls=":", lw=0.8)
    axes[0].text(n_trials / 4, axes[0].get_ylim()[0] + 1, " 25% of grid", color="grey", fontsize=8)
    axes[0].legend(fontsize=8, loc="lower right")
    fig.suptitle("Replay: true value of the config each strategy would report, mean over seeds "
                 "(dashed: what-ifs, not the live tool)")
    fig.tight_layout()
    p = out_dir / f"{prefix}-convergence.png"
    fig.savefig(p, dpi=110)
    plt.close(fig)
    paths.append(p)

    # 2. share of seeds within 2 % of the optimum by trials / engine-seconds
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.5))
    for name, rs in runs.items():
        reach = [r.reach() for r in rs]
        frac_k = [sum(k is not None and k <= x for k, _ in reach) / len(rs) for x in ks]
        frac_t = [sum(s is not None and s <= x for _, s in reach) / len(rs) for x in ts]
        ls = "--" if name in WHAT_IF else "-"
        axes[0].step(ks, frac_k, where="post", label=name, color=colors.get(name), ls=ls)
        axes[1].plot(ts, frac_t, label=name, color=colors.get(name), ls=ls)
    axes[0].set_xlabel("trials (rule-pruned ones launch nothing; reused ones are not counted)")
    axes[1].set_xlabel("engine-seconds")
    for ax in axes:
        ax.set_ylabel("share of seeds within 2% of optimum")
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
    axes[0].axvline(n_trials / 4, color="grey", ls=":", lw=0.8)
    axes[0].legend(fontsize=8, loc="lower right")
    fig.suptitle("Replay: how soon each strategy reports a config within 2% of the grid optimum")
    fig.tight_layout()
    p = out_dir / f"{prefix}-reach.png"
    fig.savefig(p, dpi=110)
    plt.close(fig)
    paths.append(p)

    if not with_grid:
        return paths
    # 3. the measured grid itself
    knobs = grid.knobs
    rows = sorted({p.params[knobs[0]] for p in grid.points}, key=_sort_key)
    cols = sorted({(p.params[knobs[1]], p.params[knobs[2]]) for p in grid.points},
                  key=lambda c: (_sort_key(c[1]), _sort_key(c[0])))
    mat = np.full((len(rows), len(cols)), np.nan)
    for p in grid.points:
        i, j = rows.index(p.params[knobs[0]]), cols.index((p.params[knobs[1]], p.params[knobs[2]]))
        if p.feasible:
            mat[i, j] = p.true_value
    fig, ax = plt.subplots(figsize=(1.3 * len(cols) + 2.5, 0.75 * len(rows) + 2))
    cmap = plt.get_cmap("viridis").copy()
    cmap.set_bad("lightgrey")
    im = ax.imshow(np.ma.masked_invalid(mat), cmap=cmap, aspect="auto")
    for p in grid.points:
        i, j = rows.index(p.params[knobs[0]]), cols.index((p.params[knobs[1]], p.params[knobs[2]]))
        vals = p.values
        if p.feasible:
            txt = f"{p.true_value:.0f}\n±{statistics.pstdev(vals):.0f}"
        else:
            txt = "refused"
        ax.text(j, i, txt, ha="center", va="center", fontsize=7,
                color="k" if not p.feasible or p.true_value >= np.nanmean(mat) else "w")
    ax.set_yticks(range(len(rows)), [str(r) for r in rows])
    ax.set_xticks(range(len(cols)), [f"{a}\n{knobs[2][:7]}={b}" for a, b in cols], fontsize=7)
    ax.set_ylabel(knobs[0])
    ax.set_xlabel(knobs[1])
    fig.colorbar(im, ax=ax, label=f"{grid.meta.get('objective', 'value')} (mean of repeats)")
    ax.set_title("Measured grid (mean ± sd of the full repeats)")
    fig.tight_layout()
    p = out_dir / f"{prefix}-grid.png"
    fig.savefig(p, dpi=110)
    plt.close(fig)
    paths.append(p)
    return paths


def _sort_key(v):
    return (0, v) if isinstance(v, (int, float)) and not isinstance(v, bool) else (1, str(v))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=str(DEFAULT_DATA))
    ap.add_argument("--space", default=str(DEFAULT_SPACE))
    ap.add_argument("--seeds", type=int, default=50)
    ap.add_argument("--trials", type=int, default=None, help="budget per study (default: grid size)")
    ap.add_argument("--strategies", default=",".join(STRATEGIES))
    ap.add_argument("--out", default=str(HERE / "data" / "replay-results.json"))
    ap.add_argument("--markdown", default=str(HERE / "data" / "replay-results.md"))
    ap.add_argument("--img-dir", default=str(REPO / "docs" / "img"))
    ap.add_argument("--no-plots", action="store_true")
    ap.add_argument("--save-trials", action="store_true",
                    help="also store every replayed trial in --out (large; the replay is "
                         "deterministic, so it can always be regenerated)")
    ap.add_argument("--metric", default="value",
                    help="which measured number the replay draws: value (the space's objective, "
                         "default) or tokens_per_engine_cpu_s (less moved by machine contention)")
    ap.add_argument("--img-prefix", default="replay", help="plot file names start with this")
    ap.add_argument("--no-rules", action="store_true",
                    help="launch configs the engine's rules know to be infeasible (they fail as "
                         "measured) instead of pruning them before launch as the live tool does")
    ap.add_argument("--noise", choices=("measured", "none"), default="measured",
                    help="none: every launch returns the config's true value (a control)")
    args = ap.parse_args(argv)

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    space = load_space(args.space)
    grid = Grid.load(Path(args.data), args.metric)
    if args.noise == "none":
        grid = grid.denoised()
    n_grid = len(grid.points)
    n_trials = args.trials or n_grid
    strategies = [s.strip() for s in args.strategies.split(",") if s.strip()]
    unknown = set(strategies) - set(STRATEGIES)
    if unknown:
        sys.exit(f"unknown strategies {sorted(unknown)}; choose from {', '.join(STRATEGIES)}")

    runs, skipped = run_all(space, grid, strategies, args.seeds, n_trials,
                            rules=not args.no_rules)
    full_cost = sum(p.mean_cost() for p in grid.points)  # the whole grid at full fidelity
    budgets_trials = sorted({max(1, n_grid // 4), 7, n_grid // 2, n_trials})
    budgets_seconds = [full_cost * f for f in (0.125, 0.25, 0.5)]
    summary = summarize(runs, grid, n_grid=n_grid, budgets_trials=budgets_trials,
                        budgets_seconds=budgets_seconds)
    tgts = targets(summary, runs, n_grid=n_grid)
    md = ["## Measured grid", "",
          f"Optimum {grid.optimum:.0f} ({grid.meta.get('objective', '')}); "
          f"whole grid at full fidelity: {full_cost:.0f} engine-s.", "", grid_table(grid), "",
          "## Replay", "",
          f"{args.seeds} seeds per strategy, {n_trials} trials per study (greedy stops when its "
          f"ladders are done); noise: {args.noise}; metric: {args.metric}; known-infeasible "
          f"configs {'launched' if args.no_rules else 'ruled out before launch (live tool)'}; "
          "configs measured before are not relaunched (live tool).", "",
          markdown(summary, tgts, skipped, n_trials=n_trials, budgets_trials=budgets_trials,
                   budgets_seconds=budgets_seconds)]
    Path(args.markdown).write_text("\n".join(md) + "\n")
    Path(args.out).write_text(json.dumps({
        "data": str(Path(args.data).resolve().relative_to(REPO)) if Path(args.data).resolve()
        .is_relative_to(REPO) else args.data,
        "seeds": args.seeds, "n_trials": n_trials, "optimum": grid.optimum,
        "optimum_params": grid.best_params, "noise": args.noise, "metric": args.metric,
        "rules": not args.no_rules,
        "grid_full_cost_s": full_cost, "summary": summary, "targets": tgts, "skipped": skipped,
        "greedy_first": runs["greedy"][0].trials[0].params if runs.get("greedy") else None,
        "runs": {name: [{"seed": r.seed, "reach": r.reach(), "reach_launches": r.reach_launches(),
                         "final": round(r.final, 4), "reused": r.reused,
                         "launches": r.launches, "seconds": round(r.seconds, 1)} for r in rs]
                 for name, rs in runs.items()},
        **({"trials": {name: [[[list(t.params.values()), t.state, t.value, round(t.seconds, 2),
                                 round(t.score, 4)] for t in r.trials] for r in rs]
                       for name, rs in runs.items()}} if args.save_trials else {}),
    }, indent=1))
    print("\n".join(md))
    if not args.no_plots:
        for p in plot(runs, grid, Path(args.img_dir), prefix=args.img_prefix, n_trials=n_trials,
                      with_grid=args.noise == "measured",
                      max_seconds=max(r.seconds for rs in runs.values() for r in rs)):
            print(f"plot: {p}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
