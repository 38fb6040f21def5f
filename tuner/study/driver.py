"""The one trial loop: ask → decide without a launch where possible → execute → record → tell.

Every way of running a study goes through ``run``: trials here (local executor), on a Ray cluster,
or replayed from measured data (benchmarks/replay.py). The stop rules live here once: the budget
(launched trials only), the wall-clock timeout (no trial starts that the study's typical trial
would carry past it), three harness errors in a row, a sampler with nothing
left to propose, and ``MAX_PRUNED_IN_A_ROW`` proposals in a row answered without a launch. SIGTERM
takes Ctrl-C's path: running trials are stopped, marked interrupted and FAIL, for ``tune resume``.

A config the engine refuses is recorded COMPLETE with a pessimistic value and the constraint
``engine_start = 1``: every Optuna sampler learns from that, while FAIL trials are ignored by all of
them. Trials answered without a launch (a config known to be infeasible, or one measured before) are
told to Optuna the same way, and cost no budget.
"""

from __future__ import annotations

import statistics
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Protocol

import optuna
from optuna.trial import FrozenTrial, TrialState

from tuner.errors import HarnessError, InputError
from tuner.record import schema
from tuner.runtime import interrupts
from tuner.study.executors import Executor, Finished, Hooks, make_executor
from tuner.study.heartbeat import Heartbeat
from tuner.study.lifecycle import StudyHandle, finished_count
from tuner.study.prelaunch import PreLaunch
from tuner.study.recorder import TrialRecorder
from tuner.study.recovery import recover, sigterm_as_interrupt, single_writer
from tuner.study.samplers import exhausted
from tuner.study.task import TrialTask, checks_rules, prepare

# Proposals answered without a launch (known infeasible, or measured before) in a row that stop a
# study: the sampler has little new left to propose.
MAX_PRUNED_IN_A_ROW = 50
EXHAUSTED = (f"the last {MAX_PRUNED_IN_A_ROW} proposals were all known to be infeasible or "
             "measured already: the space has little left to launch; stopping (`tune confirm` "
             "re-measures the best configs)")
SAMPLER_DONE = ("the sampler has nothing left to propose (the greedy procedure has measured every "
                "knob's ladder, or the grid is measured): done")
MAX_HARNESS_ERRORS = 3
# Another worker holds the rest of the budget: poll the storage this often until it is done.
_OTHERS_POLL_S = 2.0


class Reporter(Protocol):
    def trial_started(self, number: int, index: int, total: int, label: str) -> None: ...
    def phase(self, phase: str) -> None: ...
    def trial_finished(self, trial: FrozenTrial) -> None: ...
    def note(self, message: str) -> None: ...


class QuietReporter:
    def trial_started(self, number: int, index: int, total: int, label: str) -> None: pass
    def phase(self, phase: str) -> None: pass
    def trial_finished(self, trial: FrozenTrial) -> None: pass
    def note(self, message: str) -> None: pass


@dataclass
class _State:
    harness_errors: int = 0
    unlaunched_in_a_row: int = 0
    stop: str | None = None  # why no new trial starts (running ones still finish)
    # Proposals of a config that is running right now (several trials at once): answered with its
    # measurement when it ends, instead of launching it twice.
    held: list[tuple[optuna.Trial, TrialTask]] = field(default_factory=list)
    # Every trial asked and not told yet, by number: Ctrl-C may land anywhere (between ``ask`` and
    # the submit, or while a finished trial is being recorded), and none of them may stay RUNNING.
    asked: dict[int, optuna.Trial] = field(default_factory=dict)


def run(handle: StudyHandle, *, executor: Executor | str = "local", n_trials: int | None = None,
        timeout_s: float | None = None, reporter: Reporter | None = None,
        recorder: TrialRecorder | None = None, **executor_options: Any) -> None:
    """Run until the study has ``n_trials`` finished launches (the budget by default).

    Several workers may run one study (PostgreSQL, journal file): each starts a trial only while
    finished + running trials are below the budget, and waits while others finish the rest.
    """
    reporter = reporter or QuietReporter()
    if isinstance(executor, str):
        executor = make_executor(executor, handle, **executor_options)
    total = n_trials or handle.budget
    timeout_s = timeout_s or handle.space.budget.timeout_s
    deadline = time.monotonic() + timeout_s if timeout_s else None
    recorder = recorder or TrialRecorder(handle.study, handle.space, handle.url)
    prelaunch = PreLaunch(recorder)
    study = handle.study
    state = _State()
    in_flight: dict[Any, tuple[optuna.Trial, TrialTask]] = {}
    with single_writer(handle.url), sigterm_as_interrupt():
        beats = Heartbeat(study._storage, lambda: [t._trial_id for t in state.asked.copy().values()])
        try:
            while True:
                if not in_flight:
                    for note in executor.reap() + recover(handle):
                        reporter.note(note)
                while state.stop is None and len(in_flight) < executor.slots:
                    done = finished_count(study)
                    running = len(study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)))
                    if deadline is not None and (why := _past_deadline(study, deadline)):
                        state.stop = "timeout"
                        reporter.note(why)
                    elif state.unlaunched_in_a_row >= MAX_PRUNED_IN_A_ROW:
                        state.stop = "exhausted"
                        reporter.note(EXHAUSTED)
                    elif exhausted(study.sampler, study) and not study.get_trials(
                            deepcopy=False, states=(TrialState.WAITING,)):
                        # queued trials (`tune confirm`'s repeats, baselines) still launch
                        state.stop = "sampler"
                        reporter.note(SAMPLER_DONE)
                    elif done + running >= total:
                        break  # the budget is reached, or other workers are running the rest
                    else:
                        _start_one(handle, executor, recorder, prelaunch, reporter, state, in_flight, total)
                if not in_flight:
                    if state.stop is not None or finished_count(study) >= total:
                        return
                    time.sleep(_OTHERS_POLL_S)
                    continue
                ended = executor.wait()
                trial, _ = in_flight.pop(ended.key)
                frozen = _finish(study, recorder, trial, ended)
                state.asked.pop(trial.number, None)
                reporter.trial_finished(frozen)
                _release_held(study, executor, recorder, prelaunch, reporter, state, in_flight, frozen)
                state.harness_errors = state.harness_errors + 1 if frozen.state == TrialState.FAIL else 0
                if state.harness_errors >= MAX_HARNESS_ERRORS:
                    raise HarnessError(
                        f"{MAX_HARNESS_ERRORS} trials in a row failed in the tuner itself; last: "
                        f"{frozen.user_attrs.get(schema.HARNESS_ERROR, 'see the trial logs')}")
        except (KeyboardInterrupt, InputError) as exc:
            # Nothing may stay RUNNING: the trials that were out are FAIL in the storage before
            # this process exits (a second Ctrl-C waits for that), and `tune resume` re-queues
            # the interrupted ones.
            with interrupts.deferred():
                executor.cancel(list(in_flight))
                for trial in state.asked.values():
                    if study._storage.get_trial(trial._trial_id).state != TrialState.RUNNING:
                        continue  # told already, in the instant before the interrupt
                    if isinstance(exc, KeyboardInterrupt):
                        trial.set_user_attr(schema.INTERRUPTED, True)
                    _tell(study, trial, TrialState.FAIL)
                    reporter.note(f"trial {trial.number} marked interrupted" if isinstance(
                        exc, KeyboardInterrupt) else f"trial {trial.number} marked FAIL")
            raise
        finally:
            executor.close()
            beats.close()


def typical_trial_s(study: optuna.Study) -> float | None:
    """The median wall-clock of the study's launched trials (``timings.total_s``: launch,
    benchmark, teardown), the best guess of the next one's; None before the first."""
    lengths = [float(t.user_attrs[schema.TIMINGS]["total_s"]) for t in study.get_trials(
        deepcopy=False, states=(TrialState.COMPLETE,))
        if (t.user_attrs.get(schema.TIMINGS) or {}).get("total_s")]
    return statistics.median(lengths) if lengths else None


def _past_deadline(study: optuna.Study, deadline: float) -> str | None:
    """Why no trial may start now: the timeout is reached, or a typical trial would end after it
    (a trial cut by the deadline would be lost, and its GPU time with it)."""
    now = time.monotonic()
    if now >= deadline:
        return "the timeout is reached: no new trial starts"
    typical = typical_trial_s(study)
    if typical is not None and now + typical > deadline:
        return (f"no new trial starts: a trial of this study takes about {typical:.0f} s (the "
                f"median of its launches), more than the {deadline - now:.0f} s left before the timeout")
    return None


def _start_one(handle: StudyHandle, executor: Executor, recorder: TrialRecorder, prelaunch: PreLaunch,
               reporter: Reporter, state: _State, in_flight: dict, total: int) -> None:
    """Ask for one trial; answer it without a launch if its config is known, else submit it."""
    study = handle.study
    with warnings.catch_warnings():
        # Optuna warns that its heartbeat belongs to Study.optimize: tuner.study.heartbeat keeps it.
        warnings.filterwarnings("ignore", message="Heartbeat of storage")
        trial = study.ask()
    state.asked[trial.number] = trial
    task = prepare(handle, trial, recorder)
    reporter.trial_started(task.number, finished_count(study) + len(in_flight) + 1, total, task.label)
    answer = prelaunch.decide(trial, task.engine, task.knobs, task.omit,
                              check_rules=checks_rules(handle.space, trial, task.engine))
    if answer is not None:
        frozen = _tell(study, trial, answer.state, answer.values)
        state.asked.pop(trial.number, None)
        reporter.trial_finished(frozen)
        state.unlaunched_in_a_row += 1
        return
    if not prelaunch.queued(trial) and any(t.params == trial.params for t, _ in in_flight.values()):
        state.held.append((trial, task))
        state.unlaunched_in_a_row += 1
        return
    state.unlaunched_in_a_row = 0
    _submit(executor, recorder, reporter, in_flight, trial, task)


def _submit(executor: Executor, recorder: TrialRecorder, reporter: Reporter, in_flight: dict,
            trial: optuna.Trial, task: TrialTask) -> None:
    hooks = Hooks(on_phase=reporter.phase, on_started=lambda server: recorder.engine_started(trial, server))
    in_flight[executor.submit(task, hooks)] = (trial, task)


def _release_held(study: optuna.Study, executor: Executor, recorder: TrialRecorder,
                  prelaunch: PreLaunch, reporter: Reporter, state: _State, in_flight: dict,
                  ended: FrozenTrial) -> None:
    """The trials held for ``ended``'s config repeat its measurement; if it measured nothing (the
    tuner failed), the first of them launches instead."""
    twins = [(t, task) for t, task in state.held if t.params == ended.params]
    state.held = [h for h in state.held if h not in twins]
    for trial, task in twins:
        answer = prelaunch.reuse(trial, task.engine)
        if answer is None:
            _submit(executor, recorder, reporter, in_flight, trial, task)
            continue
        reporter.trial_finished(_tell(study, trial, answer.state, answer.values))
        state.asked.pop(trial.number, None)


def _finish(study: optuna.Study, recorder: TrialRecorder, trial: optuna.Trial,
            ended: Finished) -> FrozenTrial:
    """Record what the trial returned and tell Optuna: COMPLETE with the value(s), PRUNED when the
    screen stopped it, FAIL when the tuner itself failed (retried once by ``recover``).

    A trial another worker's ``recover`` failed meanwhile (its heartbeat went stale, say after this
    host was suspended) stays as it is: a finished trial cannot be updated, and it is re-queued."""
    stored = study._storage.get_trial(trial._trial_id)
    if stored.state.is_finished():
        return stored
    if ended.placement:
        trial.set_user_attr(schema.PLACEMENT, ended.placement)
    if ended.error is not None:
        cause = getattr(ended.error, "cause", None) or ended.error
        message = str(cause) if isinstance(cause, HarnessError) else f"{type(cause).__name__}: {cause}"
        trial.set_user_attr(schema.HARNESS_ERROR, message)
        return _tell(study, trial, TrialState.FAIL)
    try:
        values = recorder.record(trial, ended.outcome)
    except HarnessError as exc:
        trial.set_user_attr(schema.HARNESS_ERROR, str(exc))
        return _tell(study, trial, TrialState.FAIL)
    if values is None:
        return _tell(study, trial, TrialState.PRUNED)
    return _tell(study, trial, TrialState.COMPLETE, values)


def _tell(study: optuna.Study, trial: optuna.Trial, state: TrialState,
          values: float | list[float] | None = None) -> FrozenTrial:
    """Tell Optuna, with the trial's ``status`` stored first: the dashboard shows user attrs but
    not Optuna 5 constraints, and a finished trial's attrs can no longer be set."""
    pending = study._storage.get_trial(trial._trial_id)  # its constraints, as set so far
    trial.set_user_attr(schema.STATUS, schema.status_of(state, pending.user_attrs, pending.constraints))
    return study.tell(trial, values, state=state)
