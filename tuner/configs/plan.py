"""`tune plan`: what a study would do on given hardware, without launching anything.

Before spending GPU hours the user sees the space, which regions of it are known to fail here (and
why, with the rule's source), and the exact command line and generated config each engine would get
for its baselines and a few sampled configurations.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import optuna

from tuner.configs.rules import PrunedRegion, check, launched_knobs, pruned_regions
from tuner.configs.translate import LaunchPlan, UnsupportedValue, build_plan
from tuner.engines.conditions import Verdict
from tuner.engines.hardware import Hardware
from tuner.engines.spec import load_engine
from tuner.space import ENGINE_PARAM, Scalar, Space, arms, baseline_params, suggest

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


@dataclass(frozen=True)
class PlanReport:
    space: Space
    hardware: Hardware
    regions: list[PrunedRegion]
    engines: list[EnginePlan]


def build_plan_report(space: Space, hardware: Hardware, n_samples: int = 3, seed: int = 0) -> PlanReport:
    """Everything `tune plan` shows; pure apart from reading model configs that are on disk."""
    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # no "new study created" per engine
    try:
        engines = [_engine_plan(space, hardware, name, n_samples, seed) for name in space.engines]
    finally:
        optuna.logging.set_verbosity(verbosity)
    return PlanReport(space, hardware, pruned_regions(space, hardware), engines)


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

    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed))
    pruned: Counter = Counter()
    draws = 0
    samples = 0
    while samples < n_samples and draws < n_samples * _MAX_DRAWS_PER_SAMPLE:
        if len(space.engines) > 1:
            study.enqueue_trial({ENGINE_PARAM: engine})
        trial = study.ask()
        _, knobs = suggest(trial, space)
        study.tell(trial, state=optuna.trial.TrialState.PRUNED)
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











