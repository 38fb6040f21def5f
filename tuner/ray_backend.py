"""Run a study's trials on a Ray cluster, several at once, one per free GPU slot.

Design: Ray *tasks* driven by our own ask/tell loop, not Ray Tune + OptunaSearch. The driver is the
only process that touches the Optuna storage, so trials are recorded exactly as in local runs
(constraints, user attrs, artifacts — OptunaSearch drops constraints), baselines are enqueued once
by ``tune start`` (OptunaSearch re-enqueues points_to_evaluate on every restore), and there is no
searcher state to pickle: restoring after the driver dies is ``tune resume --backend ray``, which
fails the orphaned RUNNING trials, reaps their engines and re-queues them. Each task asks Ray for
``tensor_parallel`` GPUs; Ray sets its CUDA_VISIBLE_DEVICES, and the task picks its own port.
"""

from __future__ import annotations

import os

import optuna
from optuna.trial import TrialState

from .recording import TrialRecorder
from .study import (EXHAUSTED, MAX_PRUNED_IN_A_ROW, HarnessError, Reporter, StudyHandle, TrialTask,
                    _Quiet, _sigterm_as_interrupt, checks_rules, execute, finished_count, prepare,
                    recover, single_writer)
from .trial_runner import TrialOutcome
from .yaml_io import InputError

# Files a task sends back, so a driver on another node can attach them as artifacts.
_RETURNED_FILES = 8 << 20


def _run_task(task: TrialTask) -> tuple[TrialOutcome, dict[str, str], dict[str, bytes]]:
    """Body of the Ray task: runs on a worker node, in a worker process."""
    placement = {"node": os.uname().nodename,
                 "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES", "")}
    outcome = execute(task)
    files = {}
    for path in task.trial_dir.glob("*"):
        if path.is_file() and path.stat().st_size <= _RETURNED_FILES:
            files[path.name] = path.read_bytes()
    return outcome, placement, files


def _materialize(task: TrialTask, files: dict[str, bytes]) -> None:
    task.trial_dir.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        target = task.trial_dir / name
        if not target.exists():
            target.write_bytes(data)


def run(handle: StudyHandle, *, address: str | None = None, max_concurrent: int | None = None,
        n_trials: int | None = None, reporter: Reporter | None = None) -> None:
    try:
        import ray
    except ImportError:
        raise InputError("--backend ray needs Ray: pip install 'tuner[ray]'") from None
    reporter = reporter or _Quiet()
    ray.init(address=address, include_dashboard=False, log_to_driver=False,
             ignore_reinit_error=True, runtime_env={"env_vars": _forwarded_env()})
    try:
        _loop(ray, handle, max_concurrent, n_trials or handle.budget, reporter)
    finally:
        ray.shutdown()


def _forwarded_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k in ("TUNER_CACHE", "TUNER_STUDIES_DIR")}


def _gpus(task: TrialTask) -> int:
    return int(task.knobs.get("tensor_parallel", 1) or 1)


def _loop(ray, handle: StudyHandle, max_concurrent: int | None, total: int,
          reporter: Reporter) -> None:
    cluster_gpus = int(ray.cluster_resources().get("GPU", 0))
    slots = max_concurrent or max(1, cluster_gpus)
    remote = ray.remote(_run_task)
    recorder = TrialRecorder(handle.study, handle.space, handle.url)
    in_flight: dict = {}
    unlaunched_in_a_row = 0
    with single_writer(handle.url), _sigterm_as_interrupt():
        for note in recover(handle):
            reporter.note(note)
        try:
            while True:
                while len(in_flight) < slots and finished_count(handle.study) + len(in_flight) < total:
                    trial = handle.study.ask()
                    task = prepare(handle, trial, recorder)
                    answer = recorder.without_launch(
                        trial, task.engine, task.knobs, task.omit,
                        check_rules=checks_rules(handle.space, trial, task.engine))
                    if answer is not None:  # never launched
                        handle.study.tell(trial, answer.values, state=answer.state)
                        reporter.trial_finished(handle.study._storage.get_trial(trial._trial_id))
                        unlaunched_in_a_row += 1
                        if unlaunched_in_a_row >= MAX_PRUNED_IN_A_ROW:
                            reporter.note(EXHAUSTED)
                            break
                        continue
                    unlaunched_in_a_row = 0
                    gpus = _gpus(task) if cluster_gpus else 0
                    ref = remote.options(num_gpus=gpus, num_cpus=0.5).remote(task)
                    in_flight[ref] = (trial, task)
                    reporter.trial_started(task.number, finished_count(handle.study) + len(in_flight),
                                           total, task.label)
                if not in_flight:
                    return
                if unlaunched_in_a_row >= MAX_PRUNED_IN_A_ROW:
                    total = 0  # let the running trials finish, start no more
                (ref,), _ = ray.wait(list(in_flight), num_returns=1)
                trial, task = in_flight.pop(ref)
                _finish(ray, handle, recorder, trial, task, ref)
                reporter.trial_finished(handle.study._storage.get_trial(trial._trial_id))
        except KeyboardInterrupt:
            for ref, (trial, _) in in_flight.items():
                ray.cancel(ref, force=True)
                trial.set_user_attr("interrupted", True)
                handle.study.tell(trial, state=TrialState.FAIL)
            _reap_cancelled(ray, list(in_flight))
            raise


def _finish(ray, handle, recorder, trial: optuna.Trial, task: TrialTask, ref) -> None:
    try:
        outcome, placement, files = ray.get(ref)
    except Exception as exc:  # a HarnessError in the task, or the worker died
        cause = getattr(exc, "cause", None) or exc
        trial.set_user_attr("harness_error", f"{type(cause).__name__}: {cause}")
        handle.study.tell(trial, state=TrialState.FAIL)
        return
    _materialize(task, files)
    trial.set_user_attr("placement", placement)
    try:
        value = recorder.record(trial, outcome)
    except HarnessError as exc:
        trial.set_user_attr("harness_error", str(exc))
        handle.study.tell(trial, state=TrialState.FAIL)
        return
    if value is None:  # stopped after the screening run
        handle.study.tell(trial, state=TrialState.PRUNED)
    else:
        handle.study.tell(trial, value)


def _reap_cancelled(ray, refs: list, timeout_s: float = 15) -> None:
    """Force-cancelled tasks die without their cleanup; reap the engines they left on this node."""
    from . import orphans
    ray.wait(refs, num_returns=len(refs), timeout=timeout_s)
    orphans.reap()
