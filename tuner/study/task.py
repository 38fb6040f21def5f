"""One trial as a unit of work: what the driver decides before a launch (the config, its label, the
workloads and the screening threshold), and running it wherever an executor puts it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import optuna

from tuner.errors import HarnessError, InputError
from tuner.record import schema
from tuner.record.storage import trial_dir
from tuner.space import Space, Workload, suggest
from tuner.study.lifecycle import StudyHandle
from tuner.study.recorder import SCREEN, TrialRecorder
from tuner.study.samplers import screen_threshold
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


def prepare(handle: StudyHandle, trial: optuna.Trial, recorder: TrialRecorder) -> TrialTask:
    """Suggest the config and stamp the trial with who runs it (for crash recovery)."""
    space = handle.space
    omit = frozenset(trial.user_attrs.get(schema.OMIT, []))
    engine, knobs = suggest(trial, space, omit)
    recorder.claim(trial, engine)
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
    return TrialTask(trial.number, engine, knobs, omit,
                     trial_dir(handle.url, handle.name, trial.number), space, label,
                     tuple(workloads), threshold)


def execute(task: TrialTask, *, on_phase=lambda _: None, on_started=None) -> TrialOutcome:
    """Run one trial where this function is called (the local process or a Ray worker)."""
    try:
        return run_trial(task.space, task.engine, task.knobs, task.trial_dir, omit=task.omit,
                         on_phase=on_phase, on_started=on_started,
                         workloads=list(task.workloads) or None,
                         gate=task.gate if task.screen_threshold is not None else None)
    except (KeyboardInterrupt, InputError, HarnessError):
        raise
    except Exception as exc:
        raise HarnessError(f"{type(exc).__name__}: {exc}") from exc
