"""The Optuna side: create or resume a study, enqueue baselines, run trials, record everything.

A config the engine refuses is recorded COMPLETE with a pessimistic value and the constraint
``engine_start = 1``: every Optuna sampler learns from that, while FAIL trials are ignored by all of
them. FAIL is kept for harness errors and interruptions, which are retried on resume.
"""

from __future__ import annotations

import json
import os
import platform
import signal
import contextlib
import time
from dataclasses import dataclass
from typing import Protocol

import optuna
import psutil
from optuna.artifacts import upload_artifact
from optuna.trial import TrialState

from .fingerprint import environment, model_revision
from .launcher import check_command, kill_group
from .paths import expand
from .engine_spec import load_engine
from .redact import redact_argv, redact_env, redact_text, secret_values
from .space import Space, baseline_params, space_from_dict, suggest
from .storage import artifact_store, open_storage, study_names, trial_dir
from .trial_runner import TrialOutcome, run_trial
from .yaml_io import InputError

# Attributes kept flat on each trial so the dashboard shows them as (sortable) columns.
HEADLINE_METRICS = (
    "total_token_throughput", "output_throughput", "request_throughput", "mean_ttft_ms",
    "median_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "median_tpot_ms", "p99_tpot_ms",
    "mean_itl_ms", "p99_itl_ms", "completed", "failed", "duration",
)
FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)


class Reporter(Protocol):
    def trial_started(self, number: int, index: int, total: int, label: str) -> None: ...
    def phase(self, phase: str) -> None: ...
    def trial_finished(self, trial: optuna.trial.FrozenTrial) -> None: ...


class _Quiet:
    def trial_started(self, number, index, total, label): pass
    def phase(self, phase): pass
    def trial_finished(self, trial): pass


@dataclass
class StudyHandle:
    study: optuna.Study
    space: Space
    url: str

    @property
    def name(self) -> str:
        return self.study.study_name


def _sampler(space: Space) -> optuna.samplers.BaseSampler:
    if space.sampler == "random":
        return optuna.samplers.RandomSampler(seed=space.seed)
    return optuna.samplers.TPESampler(seed=space.seed)


def create(space: Space, name: str, url: str) -> StudyHandle:
    """A new study; an existing name is refused so two spaces never mix in one study."""
    for engine, choice in space.engines.items():
        check_command(expand((choice.command or load_engine(engine).command)[0]))
    if name in study_names(url):
        raise InputError(f"study {name!r} already exists in {url}; continue it with "
                         f"`tune resume {name}` or pick another --study name")
    storage = open_storage(url, create=True)
    study = optuna.create_study(storage=storage, study_name=name,
                                direction=space.objective.direction, sampler=_sampler(space))
    study.set_user_attr("space", space.model_dump(mode="json"))
    study.set_user_attr("n_trials", space.budget.n_trials)
    study.set_user_attr("objective", space.objective.model_dump())
    handle = StudyHandle(study, space, url)
    enqueue_baselines(handle)
    return handle


def load(name: str, url: str) -> StudyHandle:
    names = study_names(url)
    if name not in names:
        raise InputError(f"no study named {name!r} in {url}; studies there: "
                         f"{', '.join(names) or '(none)'}")
    storage = open_storage(url)
    probe = optuna.load_study(study_name=name, storage=storage)
    stored = probe.user_attrs.get("space")
    if stored is None:
        raise InputError(f"study {name!r} was not created by tune (no stored space)")
    space = space_from_dict(stored, f"space stored in study {name!r}")
    study = optuna.load_study(study_name=name, storage=storage, sampler=_sampler(space))
    return StudyHandle(study, space, url)


def enqueue_baselines(handle: StudyHandle) -> None:
    """Each baseline once per study, first in line."""
    present = {t.user_attrs.get("arm") for t in handle.study.get_trials(deepcopy=False)}
    for b in handle.space.baselines:
        if b.name in present:
            continue
        params, omitted = baseline_params(handle.space, b)
        handle.study.enqueue_trial(params, user_attrs={"arm": b.name, "engine": b.engine,
                                                       "omit": omitted})


def finished_count(study: optuna.Study) -> int:
    return len(study.get_trials(deepcopy=False, states=FINISHED))


def recover(handle: StudyHandle) -> list[str]:
    """Make an interrupted study runnable again; returns what was done, for the terminal.

    RUNNING trials whose worker on this host is gone are failed (their recorded engine process
    group is killed first), and every interrupted trial is re-enqueued once with its params.
    """
    notes = []
    study = handle.study
    host = platform.node()
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if t.user_attrs.get("worker_host") not in (None, host):
            continue  # another machine's worker: its own resume handles it
        worker = t.user_attrs.get("worker_pid")
        if worker and psutil.pid_exists(worker) and worker != os.getpid():
            try:
                if psutil.Process(worker).create_time() == t.user_attrs.get("worker_started"):
                    continue  # still running elsewhere on this host
            except psutil.NoSuchProcess:
                pass
        pgid = t.user_attrs.get("engine_pgid")
        if pgid and _is_our_engine(pgid, t.user_attrs.get("engine_started")):
            kill_group(pgid, grace_s=5)
            notes.append(f"killed orphaned engine process group {pgid} of trial {t.number}")
        study._storage.set_trial_user_attr(t._trial_id, "interrupted", True)
        study._storage.set_trial_state_values(t._trial_id, TrialState.FAIL)
        notes.append(f"trial {t.number} was running when the tuner died: marked FAIL")
    retried = {t.user_attrs.get("retry_of") for t in study.get_trials(deepcopy=False)}
    for t in study.get_trials(deepcopy=False, states=(TrialState.FAIL,)):
        if t.user_attrs.get("interrupted") and t.number not in retried:
            attrs = {"retry_of": t.number}
            for key in ("arm", "engine", "omit"):
                if key in t.user_attrs:
                    attrs[key] = t.user_attrs[key]
            study.enqueue_trial(t.params, user_attrs=attrs)
            notes.append(f"trial {t.number} was interrupted: re-queued")
    return notes


def _is_our_engine(pgid: int, started: float | None) -> bool:
    """Only a process group whose leader is the very process we launched (same start time)."""
    try:
        leader = psutil.Process(pgid)
        return started is not None and abs(leader.create_time() - started) < 0.01
    except psutil.NoSuchProcess:
        return False


@contextlib.contextmanager
def _sigterm_as_interrupt():
    """SIGTERM (e.g. from a scheduler) takes the same clean path as Ctrl-C."""
    def handler(signum, frame):
        raise KeyboardInterrupt
    try:
        previous = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def run(handle: StudyHandle, *, n_trials: int | None = None, timeout_s: float | None = None,
        reporter: Reporter | None = None) -> None:
    """Run until the study has ``n_trials`` finished trials (the space's budget by default).

    Interrupted and harness-failed trials do not use up the budget, so trials are run one at a
    time until enough have finished; three harness errors in a row stop the study.
    """
    reporter = reporter or _Quiet()
    total = n_trials or handle.study.user_attrs.get("n_trials") or handle.space.budget.n_trials
    timeout_s = timeout_s or handle.space.budget.timeout_s
    deadline = time.monotonic() + timeout_s if timeout_s else None
    objective = _Objective(handle, reporter, total)
    harness_errors = 0

    def finished(_study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        nonlocal harness_errors
        reporter.trial_finished(trial)
        harness_errors = harness_errors + 1 if trial.state == TrialState.FAIL else 0
        if harness_errors >= 3:
            raise HarnessError(
                f"three trials in a row failed in the tuner itself; last: "
                f"{trial.user_attrs.get('harness_error', 'see the trial logs')}")

    with _sigterm_as_interrupt():
        while finished_count(handle.study) < total:
            if deadline is not None and time.monotonic() >= deadline:
                break
            handle.study.optimize(objective, n_trials=1, catch=(HarnessError,), callbacks=[finished])


class HarnessError(RuntimeError):
    """A failure of the tuner's own machinery (not of the config): recorded FAIL, study goes on."""


class _Objective:
    def __init__(self, handle: StudyHandle, reporter: Reporter, total: int):
        self.handle = handle
        self.reporter = reporter
        self.total = total
        self.env = environment()
        self.model_rev = model_revision(handle.space.model.resolved_path())

    def __call__(self, trial: optuna.Trial) -> float:
        space = self.handle.space
        engine, knobs = suggest(trial, space)
        omit = frozenset(trial.user_attrs.get("omit", []))
        arm = trial.user_attrs.get("arm", "search")
        me = psutil.Process()
        trial.set_user_attr("worker_host", platform.node())
        trial.set_user_attr("worker_pid", me.pid)
        trial.set_user_attr("worker_started", me.create_time())
        trial.set_user_attr("engine", engine)
        trial.set_user_attr("arm", arm)
        label = f"{engine} " + " ".join(f"{k}={v}" for k, v in knobs.items() if k not in omit)
        if omit:
            label += " (engine defaults for " + ", ".join(sorted(omit)) + ")"
        self.reporter.trial_started(trial.number, finished_count(self.handle.study) + 1,
                                    self.total, label)

        def started(server) -> None:
            trial.set_user_attr("engine_pgid", server.pgid)
            trial.set_user_attr("engine_started", psutil.Process(server.pgid).create_time())

        tdir = trial_dir(self.handle.url, self.handle.name, trial.number)
        try:
            outcome = run_trial(space, engine, knobs, tdir, omit=omit, on_phase=self.reporter.phase,
                                on_started=started)
        except KeyboardInterrupt:
            trial.set_user_attr("interrupted", True)
            raise
        except InputError:
            raise
        except Exception as exc:
            trial.set_user_attr("harness_error", f"{type(exc).__name__}: {exc}")
            raise HarnessError(str(exc)) from exc
        return self._record(trial, outcome)

    def _record(self, trial: optuna.Trial, outcome: TrialOutcome) -> float:
        plan = outcome.plan
        secrets = secret_values(plan.argv, plan.env)
        attrs = {
            "argv": redact_argv(plan.argv),
            "env_vars": redact_env(plan.env),
            "command": redact_text(plan.command_line(), secrets),
            "knobs": plan.knobs,
            "environment": {**self.env, "engine_version": outcome.engine_version,
                            "model_revision": self.model_rev},
            "engine_version": outcome.engine_version,
            "timings": {k: round(v, 2) for k, v in outcome.timings.items()},
            "feasible": outcome.ok,
            "client_saturated": outcome.client_saturated,
        }
        if outcome.metrics:
            attrs["metrics"] = outcome.metrics
            attrs.update({k: outcome.metrics[k] for k in HEADLINE_METRICS if k in outcome.metrics})
        if outcome.failure:
            f = outcome.failure
            attrs.update({"failure_class": f.failure_class,
                          "failure_reason": redact_text(f.reason, secrets),
                          "failure_evidence": redact_text(f.evidence, secrets)})
        for key, value in attrs.items():
            trial.set_user_attr(key, value)
        self._upload(trial, outcome, secrets)
        trial.set_constraint("engine_start", 0.0 if outcome.ok else 1.0)
        if outcome.ok:
            value = outcome.metrics.get(self.handle.space.objective.metric)
            if value is None:
                raise HarnessError(f"benchmark result has no metric "
                                   f"{self.handle.space.objective.metric!r}")
            return float(value)
        return self._pessimistic_value()

    def _pessimistic_value(self) -> float:
        """A plausible worst value: samplers that model the objective should not be skewed."""
        if self.handle.space.objective.direction == "maximize":
            return 0.0
        values = [t.value for t in self.handle.study.get_trials(deepcopy=False,
                                                                states=(TrialState.COMPLETE,))
                  if t.user_attrs.get("feasible")]
        return 2.0 * max(values) if values else 1e6

    def _upload(self, trial: optuna.Trial, outcome: TrialOutcome, secrets: list[str]) -> None:
        store = artifact_store(self.handle.url, self.handle.name)
        log = outcome.log_path
        if log.exists():
            if secrets:  # the stored copy never holds a credential
                log.write_text(redact_text(log.read_text(errors="replace"), secrets))
            upload_artifact(artifact_store=store, file_path=str(log), study_or_trial=trial,
                            mimetype="text/plain", encoding="utf-8")
        if outcome.result_path and outcome.result_path.exists():
            upload_artifact(artifact_store=store, file_path=str(outcome.result_path),
                            study_or_trial=trial, mimetype="application/json")
        argv_file = log.parent / "launch.json"
        argv_file.write_text(json.dumps({"argv": redact_argv(outcome.plan.argv),
                                         "env": redact_env(outcome.plan.env),
                                         "config_file": outcome.plan.config_file}, indent=2))
        upload_artifact(artifact_store=store, file_path=str(argv_file), study_or_trial=trial,
                        mimetype="application/json")


def trials_table(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    return sorted(study.get_trials(deepcopy=False), key=lambda t: t.number)
