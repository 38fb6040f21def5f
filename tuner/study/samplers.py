"""Search strategies: Optuna samplers by name, the greedy one-knob-at-a-time procedure that manual
tuning follows (as a control to beat), and the multi-fidelity margin pruner.

Every strategy is an Optuna sampler, so the live study and the replay benchmark
(benchmarks/replay.py) run the very same code.
"""

from __future__ import annotations

import importlib.util
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import optuna
import psutil
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    IntDistribution,
)
from optuna.trial import FrozenTrial, TrialState

from tuner.errors import InputError
from tuner.record import schema
from tuner.record.schema import launched
from tuner.registry import Registry
from tuner.space.model import Space
from tuner.space.suggest import ENGINE_PARAM, grid_values
from tuner.study.prior import Prediction, PriorSampler


@dataclass(frozen=True)
class SamplerSpec:
    """What a sampler factory may use: this process's seed and the space's budget, the engines'
    documented defaults (greedy starts there), the finite grid of every param (None when a param is
    continuous), and the space's own seed (``study_seed``), the same in every process of a study
    where ``seed`` is a worker's own: what numbers the grid's points must not differ between the
    workers and the resumed runs that share the study."""

    seed: int | None
    defaults: dict[str, Any]
    grid: dict[str, list] | None
    multi_objective: bool
    n_trials: int | None
    study_seed: int | None = None
    # Each engine's own documented defaults, where a space searches several engines: one knob
    # name can default differently per engine (SGLang's memory fraction is not vLLM's).
    engine_defaults: dict[str, dict[str, Any]] = field(default_factory=dict)
    # Each engine's knobs: those without a documented default are the engine's own choice until
    # a procedure that starts at the defaults (greedy) reaches them.
    engine_knobs: dict[str, list[str]] = field(default_factory=dict)


SAMPLERS: Registry[Callable[[SamplerSpec], optuna.samplers.BaseSampler]] = Registry("sampler")


def startup_trials(n_trials: int | None) -> int:
    """How many random trials TPE takes before it models the results: a quarter of the budget,
    3 to 10.

    Optuna's fixed 10 turns a study of 10 trials or fewer (cpu-smoke has 6) into random search,
    and spends 10 of 24 trials of a small grid on it. Fewer than 3 gives TPE too little to split
    into good and bad configs. Without a budget, Optuna's 10.
    """
    return 10 if n_trials is None else max(3, min(10, n_trials // 4))


@SAMPLERS.register("tpe")
def _tpe(s: SamplerSpec) -> optuna.samplers.BaseSampler:
    # Optuna 5 defaults otherwise: multivariate + constant liar for one objective.
    return optuna.samplers.TPESampler(seed=s.seed, n_startup_trials=startup_trials(s.n_trials))


@SAMPLERS.register("random")
def _random(s: SamplerSpec) -> optuna.samplers.BaseSampler:
    return optuna.samplers.RandomSampler(seed=s.seed)


@SAMPLERS.register("gp")
def _gp(s: SamplerSpec) -> optuna.samplers.BaseSampler:
    if importlib.util.find_spec("torch") is None:  # Optuna 5's GPSampler needs it
        raise InputError("sampler 'gp' needs PyTorch (pip install torch); use 'tpe' or install it")
    return optuna.samplers.GPSampler(seed=s.seed)


class _GridSampler(optuna.samplers.GridSampler):
    """Optuna's grid, told that it is exhausted by the driver's stop rule (``done``) instead of
    calling ``study.stop()``, which only works inside ``study.optimize``."""

    def after_trial(self, study, trial, state, values) -> None:  # noqa: ANN001 - Optuna's signature
        pass

    def done(self, study: optuna.Study) -> bool:
        """Every grid point has started (Optuna's ``is_exhausted`` waits for running ones to
        finish, and meanwhile proposes them again to a driver that runs several at once)."""
        started = {t.system_attrs["grid_id"] for t in study.get_trials(
            deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED, TrialState.RUNNING))
            if "grid_id" in t.system_attrs}
        return len(started) >= len(self._all_grids)


@SAMPLERS.register("grid")
def _grid(s: SamplerSpec) -> optuna.samplers.BaseSampler:
    if not s.grid:
        raise InputError("sampler 'grid' needs every param to have a finite grid "
                         "(categorical/bool params, or int params with step)")
    # Optuna numbers the points by its seeded shuffle and finds the unvisited ones by number: a
    # worker's own seed would renumber them, re-propose measured points and skip unmeasured ones
    # (seen on a grid study resumed on another H200 host). The order is the study's; only the
    # choice among the unvisited points is the worker's own.
    sampler = _GridSampler(s.grid, seed=s.study_seed)
    if s.seed != s.study_seed:
        sampler.reseed_rng()
    return sampler


@SAMPLERS.register("greedy")
def _greedy(s: SamplerSpec) -> optuna.samplers.BaseSampler:
    if s.multi_objective:
        raise InputError("sampler 'greedy' needs a single objective")
    return GreedySampler(s.defaults, seed=s.seed, engine_defaults=s.engine_defaults,
                         engine_knobs=s.engine_knobs)


def left_to_engine(sampler: optuna.samplers.BaseSampler, study: optuna.Study,
                   number: int) -> list[str]:
    """Knobs the sampler leaves to the engine in trial ``number`` (launched without their flag):
    greedy's, for knobs it has not reached that have no documented default."""
    ask = getattr(sampler, "left_to_engine", None)
    return ask(study, number) if ask else []


def make_sampler(name: str, spec: SamplerSpec) -> optuna.samplers.BaseSampler:
    return SAMPLERS.get(name)(spec)


def exhausted(sampler: optuna.samplers.BaseSampler, study: optuna.Study) -> bool:
    """A sampler with nothing left to propose (the grid is measured, greedy has walked its ladders)
    says so through ``done``; the driver stops there."""
    done = getattr(sampler, "done", None)
    return bool(done and done(study))


def ladder(dist: BaseDistribution, points: int = 4) -> list:
    """The values a one-knob-at-a-time tuner tries for a knob: every choice, or a geometric (log)
    or even spread over a numeric range, ends included."""
    if isinstance(dist, CategoricalDistribution):
        return list(dist.choices)
    low, high = dist.low, dist.high
    if isinstance(dist, IntDistribution):
        if dist.log:
            raw = [low * (high / low) ** (i / (points - 1)) for i in range(points)]
        else:
            raw = [low + (high - low) * i / (points - 1) for i in range(points)]
        step = dist.step or 1
        return sorted({int(low + round((v - low) / step) * step) for v in raw})
    if dist.log:
        return [low * (high / low) ** (i / (points - 1)) for i in range(points)]
    return [low + (high - low) * i / (points - 1) for i in range(points)]


_TRIED = (TrialState.COMPLETE, TrialState.RUNNING, TrialState.PRUNED)


class GreedySampler(optuna.samplers.BaseSampler):
    """The manual procedure of the motivating study: defaults first, then one knob at a time
    through its ladder, keeping the best value of each knob before moving on. With several
    engines the engine is the first knob, and each engine is tried at its own defaults
    (``engine_defaults``), as a person compares engines before tuning the fastest.

    Stateless: the next config is derived from the finished trials, so it resumes and replays
    deterministically. Params the procedure has not reached stay at their defaults; one without a
    documented default (``engine_knobs`` names it, ``engine_defaults`` does not) is left to the
    engine (``left_to_engine``: launched without its flag), as a person who has not touched it
    would. Once every knob's ladder is done it keeps proposing the incumbent (callers stop at
    their budget).
    """

    def __init__(self, defaults: dict[str, Any], *, seed: int | None = None,
                 engine_defaults: dict[str, dict[str, Any]] | None = None,
                 engine_knobs: dict[str, list[str]] | None = None):
        self.defaults = dict(defaults)
        self.engine_defaults = dict(engine_defaults or {})
        self._undocumented = {engine: [k for k in knobs if k not in self.engine_defaults.get(engine, {})]
                              for engine, knobs in (engine_knobs or {}).items()}
        self._sole_engine = next(iter(self._undocumented)) if len(self._undocumented) == 1 else None
        self._fallback = optuna.samplers.RandomSampler(seed=seed)
        self._plans: dict[int, dict[str, Any]] = {}

    def infer_relative_search_space(self, study, trial):
        return {}

    def sample_relative(self, study, trial, search_space):
        return {}

    def sample_independent(self, study: optuna.Study, trial: FrozenTrial, param_name: str,
                           param_distribution: BaseDistribution) -> Any:
        plan = self._plan(study, trial.number)
        if param_name in plan and plan[param_name] is not _LEFT and param_distribution._contains(
                param_distribution.to_internal_repr(plan[param_name])):
            return plan[param_name]
        if param_name in self.defaults:
            return self.defaults[param_name]
        return self._fallback.sample_independent(study, trial, param_name, param_distribution)

    def left_to_engine(self, study: optuna.Study, number: int) -> list[str]:
        """The knobs trial ``number`` leaves to its engine (see the class docstring)."""
        return [k for k, v in self._plan(study, number).items() if v is _LEFT]

    def done(self, study: optuna.Study) -> bool:
        """Every knob's ladder has been measured: the procedure would only repeat itself."""
        tried = [_as_run(t) for t in study.get_trials(deepcopy=False, states=_TRIED)]
        return bool(tried) and _seen(self._next(study, -1), tried)

    def _plan(self, study: optuna.Study, number: int) -> dict[str, Any]:
        if number not in self._plans:
            self._plans[number] = self._next(study, number)
        return self._plans[number]

    def _next(self, study: optuna.Study, number: int) -> dict[str, Any]:
        history = [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
                   if t.number != number]
        # Screened-out configs (PRUNED) count as tried too: proposing them again would loop on a
        # ladder step that cannot win. Rule-pruned ones are COMPLETE and infeasible.
        running = [_as_run(t) for t in study.get_trials(
            deepcopy=False, states=(TrialState.RUNNING, TrialState.PRUNED)) if t.number != number]
        distributions = _distributions(study)
        measured = [(t, _as_run(t)) for t in history]
        tried = [run for _, run in measured] + running
        incumbent = self._at_defaults(dict(self.defaults))
        if incumbent and not _seen(incumbent, tried):
            return incumbent
        maximize = study.direction == optuna.study.StudyDirection.MAXIMIZE
        for name, dist in distributions.items():
            if name == ENGINE_PARAM:
                candidates = [self._at_defaults({**incumbent, name: v}) for v in ladder(dist)]
            else:
                candidates = [{**incumbent, name: v} for v in ladder(dist)]
            pending = [c for c in candidates if not _seen(c, tried)]
            if pending:
                return pending[0]
            scored = [(t.value, run) for t, run in measured if t.value is not None and _feasible(t)
                      and any(_same(run, c) for c in candidates + [incumbent])]
            if scored:
                best = max(scored, key=lambda s: s[0]) if maximize else min(scored, key=lambda s: s[0])
                incumbent = {**incumbent, **best[1]}
        return incumbent

    def _at_defaults(self, config: dict[str, Any]) -> dict[str, Any]:
        """``config`` with its engine's own defaults, where the space gives them, and its knobs
        without one left to the engine."""
        engine = config.get(ENGINE_PARAM, self._sole_engine)
        return {**config, **self.engine_defaults.get(engine, {}),
                **dict.fromkeys(self._undocumented.get(engine, ()), _LEFT)}


# A knob launched without its flag: the engine chose its value, so no ladder value matches it.
_LEFT = "<engine's own>"


def _as_run(t: FrozenTrial) -> dict[str, Any]:
    """A trial's params with the knobs it left to the engine (user attr ``omit``) marked so."""
    omitted = t.user_attrs.get(schema.OMIT) or ()
    return {**t.params, **{k: _LEFT for k in omitted if k not in t.params}}


def _distributions(study: optuna.Study) -> dict[str, BaseDistribution]:
    """Params in first-seen order: the order in which the space suggests them."""
    out: dict[str, BaseDistribution] = {}
    for t in study.get_trials(deepcopy=False):
        for name, dist in t.distributions.items():
            out.setdefault(name, dist)
    return out


def _feasible(t: FrozenTrial) -> bool:
    return all(v <= 0 for v in t.constraints.values())


def _same(params: dict, config: dict) -> bool:
    return all(params.get(k) == v for k, v in config.items() if k in params)


def _seen(config: dict, tried: Sequence[dict]) -> bool:
    return any(_same(p, config) for p in tried)


def screen_threshold(study: optuna.Study, *, margin: float, n_startup: int) -> float | None:
    """Multi-fidelity: the screening value a new trial must reach to earn the full benchmark.

    Configs within ``margin`` of the best screen so far go on (0.1 keeps anything within 10 %);
    None while fewer than ``n_startup`` screens exist, so the first trials always run in full. The
    threshold is computed before the trial starts, so a remote worker (Ray) can apply it alone.
    """
    screens = [t.intermediate_values[0] for t in study.get_trials(
        deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED))
        if 0 in t.intermediate_values and not math.isnan(t.intermediate_values[0])
        and launched(t)]  # a reused trial repeats its source's screen: not one more screen
    if len(screens) < n_startup:
        return None
    if study.direction == optuna.study.StudyDirection.MAXIMIZE:
        return max(screens) * (1 - margin)
    return min(screens) * (1 + margin)


def sampler_for(space: Space, *, worker_seed: bool = False,
                predictions: Sequence[Prediction] = ()) -> optuna.samplers.BaseSampler:
    """The space's sampler; with ``predictions`` (prior knowledge), wrapped by the prior sampler.
    ``worker_seed``: a process joining or resuming a study draws its own random stream, or two
    workers with the space's seed would propose the very same configs."""
    engines = list(space.engines)
    engine_defaults = {name: {p: param.default for p, param in choice.params.items()
                              if param.default is not None}
                       for name, choice in space.engines.items()}
    # One value per knob name: the first engine's default where several engines search it.
    defaults: dict = {ENGINE_PARAM: engines[0]} if len(engines) > 1 else {}
    for own in engine_defaults.values():
        defaults = {**own, **defaults}
    grid: dict[str, list] | None = {ENGINE_PARAM: engines} if len(engines) > 1 else {}
    for choice in space.engines.values():
        for pname, p in choice.params.items():
            values = grid_values(p)
            if values is None or grid is None:
                grid = None
            else:
                grid[pname] = sorted(set(grid.get(pname, [])) | set(values), key=repr)
    seed = space.seed
    if worker_seed and seed is not None:
        seed += psutil.Process().pid
    base = make_sampler(space.sampler, SamplerSpec(seed, defaults, grid, space.objective.multi,
                                                   space.budget.n_trials, study_seed=space.seed,
                                                   engine_defaults=engine_defaults,
                                                   engine_knobs={name: list(choice.params) for name, choice
                                                                 in space.engines.items()}))
    if not predictions:
        return base
    return PriorSampler(base, predictions, maximize=space.objective.direction == "maximize",
                        seed=seed, engine_param=ENGINE_PARAM)
