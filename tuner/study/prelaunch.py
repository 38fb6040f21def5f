"""What is decided before an engine starts: a config a rule or an earlier failure says cannot run
here (answered as refused, without a launch), and a config this study measured already (answered
with that measurement). The recorder then stores the answer like any other trial's."""

from __future__ import annotations

from dataclasses import dataclass

import optuna
from optuna.trial import FrozenTrial, TrialState

from tuner.configs import rules
from tuner.record import schema
from tuner.study.recorder import TrialRecorder


@dataclass(frozen=True)
class NoLaunch:
    """A trial decided before launching, and what Optuna is told for it: COMPLETE with
    ``values``, or PRUNED (the config it repeats was screened out)."""

    state: TrialState
    values: float | list[float] | None = None


class PreLaunch:
    """The pre-launch decisions of one study, on the hardware its recorder judges configs for."""

    def __init__(self, recorder: TrialRecorder):
        self.recorder = recorder
        self.study = recorder.study
        self.space = recorder.space
        self.hardware = recorder.hardware

    def decide(self, trial: optuna.Trial, engine: str, knobs: dict, omit: frozenset[str],
                       *, check_rules: bool = True) -> NoLaunch | None:
        """Whether this trial can be answered without starting an engine, and how: a config known
        to be infeasible, or one this study has measured already. None: launch it."""
        if self.known_infeasible(trial, engine, knobs, omit, check_rules=check_rules):
            return NoLaunch(TrialState.COMPLETE, self.recorder.refused_values(trial))
        return self.reuse(trial, engine)

    def known_infeasible(self, trial: optuna.Trial, engine: str, knobs: dict, omit: frozenset[str],
                         *, check_rules: bool = True) -> bool:
        """Decide before launching: a rule of the engine's YAML, or a failure an earlier launch
        taught, says this config cannot run here. Records why (``pruned_rule``); the caller tells
        the trial COMPLETE with ``refused_values``, as if the engine had refused it: GPSampler
        ignores PRUNED trials and would keep proposing the config."""
        version = self._engine_version(engine)
        verdicts = rules.check(engine, knobs, hardware=self.hardware, space=self.space,
                               engine_version=version, omit=omit)
        notes = [f"{v.rule_id}: {v.reason}" for v in verdicts if v.severity == "note"]
        if notes:
            trial.set_user_attr(schema.RULE_NOTES, notes)
        prune = next((v for v in verdicts if v.severity == "prune"), None)
        learned = rules.covered_by(self._learned(), engine, knobs, self.hardware.device_key)
        if prune is not None:
            trial.set_user_attr(schema.PREDICTED_BY_RULE, prune.rule_id)
        if prune is not None and check_rules:
            why = {schema.PRUNED_RULE: prune.rule_id, schema.PRUNED_REASON: prune.reason,
                   schema.PRUNED_SOURCE: prune.source}
        elif learned is not None:
            key, number = learned
            why = {schema.PRUNED_RULE: "learned", schema.PRUNED_SOURCE: f"trial {number}",
                   schema.PRUNED_REASON: f"trial {number} failed for {rules.describe_key(key)}: "
                                    "the same failure applies here"}
        else:
            return False
        for k, v in {**why, schema.FEASIBLE: False, schema.KNOBS: dict(knobs)}.items():
            trial.set_user_attr(k, v)
        return True

    def reuse(self, trial: optuna.Trial, engine: str) -> NoLaunch | None:
        """A config the sampler proposes again after this study launched it is not launched
        again: the trial repeats the latest measurement of it, marked ``reused_from``.

        In small discrete spaces samplers re-propose measured configs often (a third of TPE's
        trials in the replay benchmark), and each relaunch costs a whole engine start. Repeats
        that measure noise are `tune confirm`'s: queued trials (baselines, repeats, retries, warm
        starts) always launch. None: the config is new, launch it.
        """
        if self.queued(trial):
            return None
        earlier = self._measured(trial.params, engine)
        if earlier is None:
            return None
        trial.set_user_attr(schema.REUSED_FROM, earlier.number)
        for key in (schema.FEASIBLE, schema.KNOBS, schema.FIDELITY):
            if key in earlier.user_attrs:
                trial.set_user_attr(key, earlier.user_attrs[key])
        for key, value in earlier.constraints.items():
            trial.set_constraint(key, value)
        if 0 in earlier.intermediate_values:  # its screen, under multi-fidelity
            trial.report(earlier.intermediate_values[0], step=0)
        if earlier.state == TrialState.PRUNED:
            return NoLaunch(TrialState.PRUNED)
        return NoLaunch(TrialState.COMPLETE, earlier.values if self.space.objective.multi
                        else earlier.value)

    def queued(self, trial: optuna.Trial) -> bool:
        """Was the trial enqueued (a baseline, a repeat, a retry, a seed)? Those always launch."""
        return bool(self.study._storage.get_trial_system_attrs(trial._trial_id).get("fixed_params"))

    def _measured(self, params: dict, engine: str) -> FrozenTrial | None:
        """The latest finished launch of this searched config: served, refused or screened out."""
        for t in reversed(self.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,
                                                                         TrialState.PRUNED))):
            served_or_screened = (t.state == TrialState.COMPLETE
                                  or t.user_attrs.get(schema.FIDELITY) == "screen")
            if (t.params == params and t.user_attrs.get(schema.ENGINE) == engine and served_or_screened
                    and t.user_attrs.get(schema.ARM, "search") == "search" and schema.launched(t)):
                return t
        return None

    def _engine_version(self, engine: str) -> str | None:
        for t in reversed(self.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))):
            if t.user_attrs.get(schema.ENGINE) == engine and t.user_attrs.get(schema.ENGINE_VERSION):
                return t.user_attrs[schema.ENGINE_VERSION]
        return None

    def _learned(self) -> dict[str, int]:
        return {t.user_attrs[schema.LEARNED_KEY]: t.number
                for t in self.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
                if t.user_attrs.get(schema.LEARNED_KEY)}
