"""One trial as a unit of work: what the driver decides before a launch (the config, its label, the
workloads and the screening threshold), and running it wherever an executor puts it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import optuna

from tuner.errors import HarnessError, InputError
from tuner.record import schema
from tuner.record.storage import trial_dir
from tuner.runtime import marker
from tuner.space import (
    Scalar,
    Space,
    Workload,
    config_precision,
    reference_precision,
    suggest,
)
from tuner.study.lifecycle import StudyHandle
from tuner.study.recorder import SCREEN, TrialRecorder
from tuner.study.samplers import left_to_engine, screen_threshold
from tuner.trial.quality import CANDIDATE, REFERENCE, SAME_PRECISION, ProbeTask
from tuner.trial.runner import TrialOutcome, run_trial


@dataclass(frozen=True)
class TrialTask:
    """Everything a worker needs to run one trial; picklable, so Ray workers can take it."""

    number: int
    engine: str
    knobs: dict
    omit: frozenset[str]
    trial_dir: Path
    space: Space
    label: str = ""
    workloads: tuple[Workload, ...] = ()
    # Multi-fidelity: the first workload is a screen; the trial goes on only if the objective
    # metric on it passes this threshold (computed by the driver, applied by the worker).
    screen_threshold: float | None = None
    quality: ProbeTask | None = None  # the quality probe's role here (None: no guardrail)
    marker: str | None = None  # TUNER_TRIAL_MARKER for its engine (tuner.runtime.marker)

    def gate(self, metrics: dict) -> bool:
        if self.screen_threshold is None:
            return True
        objective = self.space.objective
        value = metrics.get(objective.metric)
        if value is None:
            return True
        if objective.direction == "maximize":
            return value >= self.screen_threshold
        return value <= self.screen_threshold


def checks_rules(space: Space, trial: optuna.Trial, engine: str) -> bool:
    """A baseline or a whole engine may opt out (``check_rules: false``): a probe launched to
    confirm that a rule still holds on this engine version."""
    arm = trial.user_attrs.get(schema.ARM, "search")
    baseline = next((b.check_rules for b in space.baselines if b.name == arm), True)
    return baseline and space.engines[engine].check_rules


def probe_task(handle: StudyHandle, engine: str, knobs: dict[str, Scalar]) -> ProbeTask | None:
    """The quality probe's role for a config: the first launch with the reference's precision
    records the reference; configs with another precision are compared with it; later ones with
    the reference's precision are not probed unless ``probe_reference`` (the noise floor)."""
    space = handle.space
    if space.quality is None:
        return None
    reference = handle.study.user_attrs.get(schema.QUALITY_REFERENCE)
    if config_precision(space, engine, knobs) != reference_precision(space):
        return ProbeTask(CANDIDATE, reference)
    if reference is None:
        return ProbeTask(REFERENCE)
    if space.quality.probe_reference:
        return ProbeTask(CANDIDATE, reference)
    return ProbeTask(SAME_PRECISION, why=f"the reference's precision (trial {reference['trial']}): "
                                         "not probed (quality.probe_reference: true probes it)")


def prepare(handle: StudyHandle, trial: optuna.Trial, recorder: TrialRecorder) -> TrialTask:
    """Suggest the config and stamp the trial with who runs it (for crash recovery)."""
    space = handle.space
    omitted = trial.user_attrs.get(schema.OMIT)
    if omitted is None:  # a sampled trial: the sampler may leave knobs to the engine (greedy)
        omitted = left_to_engine(handle.study.sampler, handle.study, trial.number)
        if omitted:
            trial.set_user_attr(schema.OMIT, omitted)
    omit = frozenset(omitted)
    engine, knobs = suggest(trial, space, omit)
    recorder.claim(trial, engine)
    # Chosen here, not by the worker: a resume after the worker died must know it from the storage.
    engine_marker = marker.new(handle.name, f"trial-{trial.number:04d}")
    trial.set_user_attr(schema.ENGINE_MARKER, engine_marker)
    label = f"{engine} " + " ".join(f"{k}={v}" for k, v in knobs.items() if k not in omit)
    if omit:
        label += " (engine defaults for " + ", ".join(sorted(omit)) + ")"
    workloads = space.all_workloads()
    threshold = None
    if space.fidelity:
        f = space.fidelity
        # Its own seed: the screen's prompts must not be the first prompts of the full run, or the
        # server's prefix cache would flatter the full benchmark.
        workloads = [workloads[0].model_copy(update={"name": SCREEN, "num_prompts": f.screen_prompts,
                                                     "seed": workloads[0].seed + 1}),
                     *workloads]
        threshold = screen_threshold(handle.study, margin=f.margin, n_startup=f.n_startup)
    launched = {k: v for k, v in knobs.items() if k not in omit}
    return TrialTask(trial.number, engine, knobs, omit,
                     trial_dir(handle.url, handle.name, trial.number), space, label,
                     tuple(workloads), threshold, probe_task(handle, engine, launched),
                     engine_marker)


def execute(task: TrialTask, *, on_phase=lambda _: None, on_started=None) -> TrialOutcome:
    """Run one trial where this function is called (the local process or a Ray worker)."""
    try:
        return run_trial(task.space, task.engine, task.knobs, task.trial_dir, omit=task.omit,
                         on_phase=on_phase, on_started=on_started,
                         workloads=list(task.workloads) or None,
                         gate=task.gate if task.screen_threshold is not None else None,
                         quality=task.quality, marker_value=task.marker)
    except (KeyboardInterrupt, InputError, HarnessError):
        raise
    except Exception as exc:
        raise HarnessError(f"{type(exc).__name__}: {exc}") from exc
