"""From a space to an Optuna trial's params: define-by-run suggestion (a knob exists only where its
conditions hold), the grid of discrete values, and the params of a baseline arm."""

from __future__ import annotations

import itertools
import math

import numpy as np
import optuna

from tuner.record.schema import QUALITY_REFERENCE_ARM
from tuner.space.model import Baseline, Param, Scalar, Space
from tuner.space.precision import precision_of

ENGINE_PARAM = "engine"


def suggest(trial: optuna.Trial, space: Space,
            omit: frozenset[str] = frozenset()) -> tuple[str, dict[str, Scalar]]:
    """Define-by-run suggestion: the engine first, then its params in file order (conditions apply).

    Knobs in ``omit`` are left to the engine (a defaults baseline): one with a documented
    ``default`` is recorded at that value, one without is not suggested at all, so the trial never
    claims a value that did not run.
    """
    engines = list(space.engines)
    engine = trial.suggest_categorical(ENGINE_PARAM, engines) if len(engines) > 1 else engines[0]
    choice = space.engines[engine]
    values: dict[str, Scalar] = {}
    for pname, p in choice.params.items():
        if any(values.get(k) != v for k, v in p.when.items()):
            continue
        if pname in omit and p.default is None:
            continue
        values[pname] = _suggest_one(trial, pname, p)
    values.update({k: v for k, v in choice.fixed.items() if k not in omit})
    return engine, values


def grid_values(p: Param) -> list[Scalar] | None:
    """Every value of a param, when there is a finite set (for the grid sampler)."""
    if p.type == "bool":
        return [True, False]
    if p.type == "categorical":
        return list(p.choices)
    if p.type == "int" and p.step:
        return list(range(int(p.low), int(p.high) + 1, int(p.step)))
    return None


def _suggest_one(trial: optuna.Trial, name: str, p: Param) -> Scalar:
    if p.type == "int":
        return trial.suggest_int(name, int(p.low), int(p.high), step=int(p.step or 1), log=p.log)
    if p.type == "float":
        value = trial.suggest_float(name, p.low, p.high, step=p.step, log=p.log)
        # 0.1 steps come back as 0.9400000000000001: keep the command line as the user wrote it
        return round(value, 10) if p.step else value
    if p.type == "bool":
        return trial.suggest_categorical(name, [True, False])
    return trial.suggest_categorical(name, p.choices)


def baseline_params(space: Space, baseline: Baseline) -> tuple[dict[str, Scalar], list[str]]:
    """Params to enqueue for a baseline, and the knobs to leave to the engine's own defaults.

    A knob the baseline does not set is launched without its flag; the enqueued value is the
    engine's documented default (``default:`` in the space) so the sampler learns what was run, and
    a knob without a documented default is not recorded at all.
    """
    choice = space.engines[baseline.engine]
    params: dict[str, Scalar] = {}
    if len(space.engines) > 1:
        params[ENGINE_PARAM] = baseline.engine
    # Fixed knobs are flags too: the engine-defaults arm leaves them out unless it names them.
    omitted = [k for k in choice.fixed if k not in baseline.params]
    for pname, p in choice.params.items():
        if pname in baseline.params:
            params[pname] = baseline.params[pname]
        else:
            omitted.append(pname)
            if p.default is not None:
                params[pname] = p.default
    return params, omitted


def sample_configs(space: Space, engine: str, n: int, seed: int = 0,
                   fixed: dict[str, Scalar] | None = None) -> list[tuple[dict, dict]]:
    """``n`` random configs of one engine as the define-by-run suggestion draws them: (trial params,
    knobs), with the params in ``fixed`` held at those values. For showing and predicting configs;
    nothing is launched, and no study is made."""
    rng = np.random.default_rng(seed)
    params = space.engines[engine].params
    out = []
    for _ in range(n):
        drawn: dict[str, Scalar] = {ENGINE_PARAM: engine}
        drawn.update({name: _draw(p, rng) for name, p in params.items()})
        drawn.update(fixed or {})
        trial = optuna.trial.FixedTrial(drawn)
        _, knobs = suggest(trial, space)
        out.append((dict(trial.params), knobs))
    return out


def candidate_configs(space: Space, engine: str, n: int, seed: int = 0,
                      fixed: dict[str, Scalar] | None = None) -> list[tuple[dict, dict]]:
    """The configs to ask a performance model about: every config of the engine when its params
    are all discrete and number at most ``n``, else ``n`` random ones. Random draws of a small
    grid repeat themselves (16 draws of a 16-config grid gave 6 distinct), which left
    most of the grid without a prediction."""
    params = space.engines[engine].params
    values = {name: grid_values(p) for name, p in params.items() if name not in (fixed or {})}
    if any(v is None for v in values.values()) or math.prod(map(len, values.values())) > n:
        return sample_configs(space, engine, n, seed, fixed=fixed)
    out = []
    for combo in itertools.product(*values.values()):
        trial = optuna.trial.FixedTrial({ENGINE_PARAM: engine, **dict(zip(values, combo)),
                                         **(fixed or {})})
        _, knobs = suggest(trial, space)
        out.append((dict(trial.params), knobs))
    return out


def _draw(p: Param, rng: np.random.Generator) -> Scalar:
    """One value of a param, uniform over its choices or range (log-uniform with ``log``)."""
    if p.type == "bool":
        return bool(rng.integers(2))
    if p.type == "categorical":
        return p.choices[int(rng.integers(len(p.choices)))]
    low, high = float(p.low), float(p.high)
    x = math.exp(rng.uniform(math.log(low), math.log(high))) if p.log else rng.uniform(low, high)
    if p.step:
        x = low + round((x - low) / p.step) * p.step
    if p.type == "int":
        return int(min(max(round(x), p.low), p.high))
    return round(min(max(x, low), high), 10)

def reference_baseline(space: Space) -> Baseline | None:
    """The quality guardrail's reference arm: the baseline ``quality.reference_arm`` names, or else
    the space's first engine with the reference's knob values and the fixed knobs, everything else
    at the engine's defaults (as a baseline)."""
    if space.quality is None:
        return None
    if space.quality.reference_arm is not None:
        return next(b for b in space.baselines if b.name == space.quality.reference_arm)
    engine, choice = next(iter(space.engines.items()))
    params = {**choice.fixed, **{k: v for k, v in space.quality.reference.items()
                                 if k in choice.params or k in choice.fixed}}
    return Baseline(name=QUALITY_REFERENCE_ARM, engine=engine, params=params)


def arms(space: Space) -> list[Baseline]:
    """Every control arm in launch order: the quality reference first (the probe of every later
    trial compares with its answers), then the space's baselines."""
    reference = reference_baseline(space)
    return ([reference] if reference else []) + [b for b in space.baselines if b is not reference]


def config_precision(space: Space, engine: str, knobs: dict[str, Scalar]) -> dict[str, str]:
    """The precision a launched config computes with (``knobs``: what the launch sets)."""
    return precision_of(engine, knobs, space.model.resolved_path())


def reference_precision(space: Space) -> dict[str, str] | None:
    reference = reference_baseline(space)
    if reference is None:
        return None
    choice = space.engines[reference.engine]
    launched = {k: v for k, v in reference.params.items() if k in choice.params or k in choice.fixed}
    return config_precision(space, reference.engine, launched)
