"""`tune plan`: what a study would do on given hardware, without launching anything.

Before spending GPU hours the user sees the space, which regions of it are known to fail here (and
why, with the rule's source), and the exact command line and generated config each engine would get
for its baselines and a few sampled configurations.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace

import optuna

from tuner.configs.predict import predict_objective
from tuner.configs.rules import PrunedRegion, check, launched_knobs, pruned_regions
from tuner.configs.translate import LaunchPlan, UnsupportedValue, build_plan
from tuner.engines.conditions import Verdict
from tuner.engines.hardware import Hardware
from tuner.engines.spec import load_engine
from tuner.estimate import Estimate, Estimator
from tuner.space import ENGINE_PARAM, Scalar, Space, arms, baseline_params
from tuner.space.suggest import candidate_configs, sample_configs

PLAN_PORT = 8000  # the real port is picked per trial
_MAX_DRAWS_PER_SAMPLE = 20


@dataclass(frozen=True)
class PlannedConfig:
    label: str
    engine: str
    knobs: dict[str, Scalar]        # what changes the launch (see rules.launched_knobs)
    omitted: tuple[str, ...] = ()   # left to the engine's defaults
    verdicts: tuple[Verdict, ...] = ()
    plan: LaunchPlan | None = None  # None when pruned or not translatable
    error: str | None = None
    estimate: Estimate | None = None  # with --estimate; None for a pruned config (never launched)

    @property
    def pruned_by(self) -> Verdict | None:
        return next((v for v in self.verdicts if v.severity == "prune"), None)


@dataclass(frozen=True)
class EnginePlan:
    engine: str
    display_name: str
    configs: list[PlannedConfig]
    pruned_draws: Counter = field(default_factory=Counter)  # rule id → sampled configs it pruned
    draws: int = 0
    predicted_top: list[PlannedConfig] = field(default_factory=list)  # with --estimate


@dataclass(frozen=True)
class PlanReport:
    space: Space
    hardware: Hardware
    regions: list[PrunedRegion]
    engines: list[EnginePlan]


def build_plan_report(space: Space, hardware: Hardware, n_samples: int = 3, seed: int = 0,
                      estimator: Estimator | None = None, top: int = 3,
                      candidates: int = 256) -> PlanReport:
    """Everything `tune plan` shows; pure apart from reading model configs that are on disk. With an
    ``estimator``, every config shown gets its prediction, and each engine its ``top`` predicted
    configs among ``candidates`` sampled ones."""
    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # no "new study created" per engine
    try:
        engines = [_engine_plan(space, hardware, name, n_samples, seed) for name in space.engines]
        if estimator is not None:
            engines = [_with_estimates(space, hardware, ep, estimator, top, candidates, seed)
                       for ep in engines]
    finally:
        optuna.logging.set_verbosity(verbosity)
    return PlanReport(space, hardware, pruned_regions(space, hardware), engines)


def _with_estimates(space: Space, hardware: Hardware, ep: EnginePlan, estimator: Estimator,
                    top: int, candidates: int, seed: int) -> EnginePlan:
    fixed = space.engines[ep.engine].fixed

    def estimated(c: PlannedConfig) -> tuple[PlannedConfig, float | None]:
        if c.pruned_by is not None or c.plan is None:
            return c, None
        est, value = predict_objective(estimator, space, ep.engine, {**fixed, **c.knobs}, hardware)
        return replace(c, estimate=est), value

    ranked = []
    modelled = getattr(estimator, "modelled", None)
    pinned = {k: p.default for k, p in space.engines[ep.engine].params.items()
              if modelled is not None and k not in modelled and p.default is not None}
    for _, knobs in candidate_configs(space, ep.engine, candidates, seed + 1, fixed=pinned):
        c, value = estimated(_planned(space, hardware, "predicted", ep.engine, knobs, ()))
        if value is not None:
            ranked.append((value, c))
    ranked.sort(key=lambda vc: vc[0], reverse=space.objective.direction == "maximize")
    best: list[PlannedConfig] = []
    for _, c in ranked:
        if len(best) == top:
            break
        if all(b.knobs != c.knobs for b in best):
            best.append(replace(c, label=f"predicted #{len(best) + 1}"))
    return replace(ep, configs=[estimated(c)[0] for c in ep.configs], predicted_top=best)


def _engine_plan(space: Space, hardware: Hardware, engine: str, n_samples: int, seed: int) -> EnginePlan:
    spec = load_engine(engine)
    choice = space.engines[engine]
    configs = []
    baselines = [b for b in arms(space) if b.engine == engine]
    for b in baselines:
        params, omitted = baseline_params(space, b)
        params.pop(ENGINE_PARAM, None)
        configs.append(_planned(space, hardware, f"baseline {b.name}", engine,
                                {**params, **choice.fixed}, tuple(omitted)))
    if not baselines:
        omitted = tuple(choice.params)
        defaults = {k: p.default for k, p in choice.params.items() if p.default is not None}
        configs.append(_planned(space, hardware, "engine defaults", engine,
                                {**defaults, **choice.fixed}, omitted))

    pruned: Counter = Counter()
    draws = 0
    samples = 0
    for _, knobs in sample_configs(space, engine, n_samples * _MAX_DRAWS_PER_SAMPLE, seed):
        if samples >= n_samples:
            break
        draws += 1
        config = _planned(space, hardware, f"sample {samples + 1}", engine, knobs, ())
        if config.pruned_by:
            pruned[config.pruned_by.rule_id] += 1
            continue
        samples += 1
        configs.append(config)
    return EnginePlan(engine, spec.display_name, configs, pruned, draws)


def _planned(space: Space, hardware: Hardware, label: str, engine: str, knobs: dict[str, Scalar],
             omitted: tuple[str, ...]) -> PlannedConfig:
    launched = launched_knobs(engine, knobs, frozenset(omitted), space)
    verdicts = tuple(check(engine, knobs, hardware=hardware, space=space, omit=frozenset(omitted)))
    if any(v.severity == "prune" for v in verdicts):
        return PlannedConfig(label, engine, launched, omitted, verdicts)
    try:
        plan = build_plan(load_engine(engine), space.engines[engine], space.model, knobs,
                          port=PLAN_PORT, omit=frozenset(omitted))
    except UnsupportedValue as exc:
        return PlannedConfig(label, engine, launched, omitted, verdicts, error=str(exc))
    return PlannedConfig(label, engine, launched, omitted, verdicts, plan)


# ---- rendering ---------------------------------------------------------------------------------











