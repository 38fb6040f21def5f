"""The Optuna side: create, join or resume a study, enqueue baselines, run trials, record everything.

A config the engine refuses is recorded COMPLETE with a pessimistic value and the constraint
``engine_start = 1``: every Optuna sampler learns from that, while FAIL trials are ignored by all of
them. FAIL is kept for interruptions and harness errors; each FAIL trial is retried once. Trials
answered without a launch (a config known to be infeasible, or one measured before) are told to
Optuna the same way, and cost no budget.
"""

from __future__ import annotations

import contextlib
import fcntl
import platform
import signal
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Protocol

import optuna
import psutil
from optuna.trial import FrozenTrial, TrialState

from . import orphans, results
from .fingerprint import environment
from .launcher import check_launchable
from .recording import SCREEN, TrialRecorder
from .redact import redact_space
from .search import GreedySampler, make_sampler, screen_threshold
from .space import ENGINE_PARAM, Space, Workload, baseline_params, grid_values, space_from_dict, suggest
from .storage import open_storage, sqlite_path, study_names, trial_dir
from .trial_runner import HarnessError, TrialOutcome, run_trial
from .yaml_io import InputError

FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)
# Proposals answered without a launch (known infeasible, or measured before) in a row that stop a
# study: the sampler has little new left to propose.
MAX_PRUNED_IN_A_ROW = 50
EXHAUSTED = (f"the last {MAX_PRUNED_IN_A_ROW} proposals were all known to be infeasible or "
             "measured already: the space has little left to launch; stopping (`tune confirm` "
             "re-measures the best configs)")
# What must match for measurements to be comparable; the host name may differ (resume elsewhere).
FINGERPRINT_KEYS = ("device", "gpu", "gpu_count", "gpu_memory_mib", "driver", "cpu")


class Reporter(Protocol):
    def trial_started(self, number: int, index: int, total: int, label: str) -> None: ...
    def phase(self, phase: str) -> None: ...
    def trial_finished(self, trial: FrozenTrial) -> None: ...
    def note(self, message: str) -> None: ...


class _Quiet:
    def trial_started(self, number, index, total, label): pass
    def phase(self, phase): pass
    def trial_finished(self, trial): pass
    def note(self, message): pass


@dataclass
class StudyHandle:
    study: optuna.Study
    space: Space
    url: str

    @property
    def name(self) -> str:
        return self.study.study_name

    @property
    def budget(self) -> int:
        return self.study.user_attrs.get("n_trials") or self.space.budget.n_trials


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


def _sampler(space: Space, *, worker_seed: bool = False) -> optuna.samplers.BaseSampler:
    """The space's sampler. ``worker_seed``: a process joining or resuming a study draws its own
    random stream, or two workers with the space's seed would propose the very same configs."""
    engines = list(space.engines)
    defaults: dict = {ENGINE_PARAM: engines[0]} if len(engines) > 1 else {}
    grid: dict[str, list] | None = {ENGINE_PARAM: engines} if len(engines) > 1 else {}
    for choice in space.engines.values():
        for pname, p in choice.params.items():
            if p.default is not None:
                defaults.setdefault(pname, p.default)
            values = grid_values(p)
            if values is None or grid is None:
                grid = None
            else:
                grid[pname] = sorted(set(grid.get(pname, [])) | set(values), key=repr)
    seed = space.seed
    if worker_seed and seed is not None:
        seed += psutil.Process().pid
    return make_sampler(space.sampler, seed=seed, defaults=defaults, grid=grid,
                        multi_objective=space.objective.multi, n_trials=space.budget.n_trials)


def _create_optuna_study(space: Space, storage, name: str) -> optuna.Study:
    targets = space.objective.targets()
    study = optuna.create_study(storage=storage, study_name=name,
                                directions=[t.direction for t in targets], sampler=_sampler(space),
                                pruner=optuna.pruners.NopPruner())
    if len(targets) > 1:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            study.set_metric_names([t.metric for t in targets])
    return study


def fingerprint() -> dict:
    env = environment()
    return {"device": env["device"], "gpu": env["gpu"], "gpu_count": len(env["gpus"]),
            "gpu_memory_mib": env["gpus"][0]["memory_mib"] if env["gpus"] else None,
            "driver": env["driver"], "cpu": None if env["gpus"] else env["cpu"]}


def _check_commands(space: Space) -> None:
    for engine, choice in space.engines.items():
        check_launchable(engine, choice)


def create(space: Space, name: str, url: str, *, join: bool = False,
           linked_from: str | None = None) -> StudyHandle:
    """A new study, or with ``join`` the same-space study other workers already run.

    Creation is atomic in the database, so when several workers start at once exactly one creates
    the study and enqueues the baselines; the others join it.
    """
    _check_commands(space)
    if name in study_names(url):
        if not join:
            raise InputError(f"study {name!r} already exists in {url}; continue it with "
                             f"`tune resume {name}` or pick another --study name")
        return _join(space, name, url)
    storage = open_storage(url, create=True)
    try:
        study = _create_optuna_study(space, storage, name)
    except optuna.exceptions.DuplicatedStudyError:
        if not join:
            raise InputError(f"study {name!r} was just created by another process") from None
        return _join(space, name, url)
    study.set_user_attr("space", redact_space(space.model_dump(mode="json")))
    study.set_user_attr("n_trials", space.budget.n_trials)
    study.set_user_attr("fingerprint", fingerprint())
    if linked_from:
        study.set_user_attr("linked_from", linked_from)
    handle = StudyHandle(study, space, url)
    enqueue_baselines(handle)
    study.set_user_attr("ready", True)
    return handle


def _join(space: Space, name: str, url: str) -> StudyHandle:
    handle = load(name, url)
    if handle.study.user_attrs["space"] != redact_space(space.model_dump(mode="json")):
        raise InputError(f"study {name!r} exists with a different space; workers of one study "
                         "must use the same space file")
    handle.space = space  # the caller's copy still holds the secrets the stored one masks
    return handle


def load(name: str, url: str) -> StudyHandle:
    names = study_names(url)
    if name not in names:
        raise InputError(f"no study named {name!r} in {url}; studies there: "
                         f"{', '.join(names) or '(none)'}")
    storage = open_storage(url)
    stored = optuna.load_study(study_name=name, storage=storage)
    deadline = time.monotonic() + 30
    while not stored.user_attrs.get("ready") and time.monotonic() < deadline:
        time.sleep(0.5)  # another worker is creating it right now
        stored = optuna.load_study(study_name=name, storage=storage)
    if stored.user_attrs.get("space") is None:
        raise InputError(f"study {name!r} was not created by tune (no stored space)")
    space = space_from_dict(stored.user_attrs["space"], f"space stored in study {name!r}")
    study = optuna.load_study(study_name=name, storage=storage,
                              sampler=_sampler(space, worker_seed=True),
                              pruner=optuna.pruners.NopPruner())
    return StudyHandle(study, space, url)


def fingerprint_mismatch(handle: StudyHandle) -> dict[str, tuple]:
    """Keys whose value here differs from the study's; empty when measurements can be mixed."""
    stored = handle.study.user_attrs.get("fingerprint") or {}
    here = fingerprint()
    return {k: (stored.get(k), here.get(k)) for k in FINGERPRINT_KEYS
            if k in stored and stored.get(k) != here.get(k)}


def link_new_hardware(handle: StudyHandle, top_k: int = 3) -> StudyHandle:
    """A new study for this hardware, warm-started with the old study's best configs."""
    base = f"{handle.name}-{fingerprint()['device']}"
    name, n = base, 1
    while name in study_names(handle.url):
        n += 1
        name = f"{base}-{n}"
    new = create(handle.space, name, handle.url, linked_from=handle.name)
    if handle.space.objective.multi:
        best = results.pareto_front(handle.study)[:top_k]
    else:
        feasible = [t for t in handle.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
                    if t.user_attrs.get("feasible") and results.launched(t)
                    and t.user_attrs.get("arm", "search") == "search"]
        reverse = handle.space.objective.direction == "maximize"
        best = sorted(feasible, key=lambda t: t.value, reverse=reverse)[:top_k]
    for t in best:
        new.study.enqueue_trial(t.params, user_attrs={"arm": "search", "warm_start_of":
                                                      f"{handle.name}#{t.number}"},
                                skip_if_exists=True)
    return new


def enqueue_baselines(handle: StudyHandle) -> None:
    """Each baseline once per study, first in line."""
    present = {t.user_attrs.get("arm") for t in handle.study.get_trials(deepcopy=False)}
    for b in handle.space.baselines:
        if b.name in present:
            continue
        params, omitted = baseline_params(handle.space, b)
        handle.study.enqueue_trial(params, user_attrs={"arm": b.name, "engine": b.engine,
                                                       "omit": omitted})


def enqueue_repeats(handle: StudyHandle, *, top_k: int, repeats: int) -> int:
    """Queue ``repeats`` more launches of the top-k searched configs and of each baseline,
    interleaved (A B A B ...) so slow drift of the machine does not favour one of them."""
    if handle.space.objective.multi:
        raise InputError("tune confirm needs a single objective")
    groups = results.group_configs(handle.study)
    maximize = handle.space.objective.direction == "maximize"
    searched = sorted((g for g in groups if g.arm == "search"), key=lambda g: g.median,
                      reverse=maximize)[:top_k]
    picked = [g for g in groups if g.arm != "search"] + searched
    if not picked:
        raise InputError(f"study {handle.name!r} has no feasible trial to repeat")
    for _ in range(repeats):
        for g in picked:
            attrs = {"arm": g.arm, "repeat_of": g.first.number}
            attrs.update({k: g.first.user_attrs[k] for k in ("engine", "omit")
                          if k in g.first.user_attrs})
            handle.study.enqueue_trial(g.first.params, user_attrs=attrs)
    added = repeats * len(picked)
    # The budget grows with the repeats, so other workers (`tune resume`) help run them.
    handle.study.set_user_attr("n_trials", finished_count(handle.study) + added)
    return added


def finished_count(study: optuna.Study) -> int:
    """Trials that used up the budget: launched and finished. Configs pruned by a rule or by what
    an earlier launch taught, and configs answered with an earlier measurement, cost no launch, so
    they don't count."""
    return len([t for t in study.get_trials(deepcopy=False, states=FINISHED)
                if results.launched(t)])


def _owner_alive(t: FrozenTrial, *, exclusive: bool) -> bool:
    """Is the worker that owns this RUNNING trial still alive? Other hosts are assumed alive
    (the storage heartbeat, where there is one, fails their stale trials), and so is a trial just
    asked for whose worker has not stamped it yet — unless this process holds the study alone
    (SQLite), in which case nobody else can be running it."""
    if t.user_attrs.get("worker_host") not in (None, platform.node()):
        return True
    pid, started = t.user_attrs.get("worker_pid"), t.user_attrs.get("worker_started")
    if pid is None:
        return not exclusive
    return started is not None and orphans.same_process(pid, started)


def recover(handle: StudyHandle) -> list[str]:
    """Make an interrupted study runnable again; returns what was done, for the terminal.

    Engines left by dead tuner processes on this host are killed; RUNNING trials whose worker is
    gone are failed; every FAIL trial that is not itself a retry is re-queued once.
    """
    notes = [f"killed orphaned engine process group {e.pgid} ({e.label})" for e in orphans.reap()]
    study = handle.study
    exclusive = sqlite_path(handle.url) is not None  # run() holds the single-writer lock
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if _owner_alive(t, exclusive=exclusive):
            continue
        study._storage.set_trial_user_attr(t._trial_id, "interrupted", True)
        study._storage.set_trial_state_values(t._trial_id, TrialState.FAIL)
        notes.append(f"trial {t.number} was running when its tuner process died: marked FAIL")
    trials = study.get_trials(deepcopy=False)
    retried = {t.user_attrs.get("retry_of") for t in trials}
    for t in trials:
        if t.state != TrialState.FAIL or t.number in retried or "retry_of" in t.user_attrs:
            continue
        attrs = {"retry_of": t.number}
        attrs.update({k: t.user_attrs[k] for k in ("arm", "engine", "omit") if k in t.user_attrs})
        study.enqueue_trial(t.params, user_attrs=attrs)
        why = "was interrupted" if t.user_attrs.get("interrupted") else "failed in the tuner"
        notes.append(f"trial {t.number} {why}: re-queued")
    return notes


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
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


@contextlib.contextmanager
def single_writer(url: str) -> Iterator[None]:
    """Refuse a second process on one SQLite study: SQLite has no row locks, and concurrent
    workers race for enqueued trials ("database is locked", duplicated baselines)."""
    db = sqlite_path(url)
    if db is None:
        yield
        return
    lock_path = db.with_name(db.name + ".lock")
    with open(lock_path, "a+") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.seek(0)
            holder = lock.read().strip() or "another process"
            raise InputError(
                f"{db} is in use by {holder}. SQLite is not safe for several workers: run one "
                "process per SQLite study, or share a PostgreSQL (--storage postgresql://...) "
                "or journal-file (--storage journal:///path/study.journal) storage") from None
        lock.seek(0)
        lock.truncate()
        lock.write(f"pid {psutil.Process().pid} on {platform.node()}")
        lock.flush()
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def run(handle: StudyHandle, *, n_trials: int | None = None, timeout_s: float | None = None,
        reporter: Reporter | None = None) -> None:
    """Run until the study has ``n_trials`` finished trials (the budget by default).

    Interrupted and harness-failed trials do not use up the budget, nor do trials answered without
    a launch; MAX_PRUNED_IN_A_ROW of those in a row, or three harness errors in a row, stop the
    study. Several workers may run one study (PostgreSQL, journal file): each starts a trial only
    while finished + running trials are below the budget.
    """
    reporter = reporter or _Quiet()
    total = n_trials or handle.budget
    timeout_s = timeout_s or handle.space.budget.timeout_s
    deadline = time.monotonic() + timeout_s if timeout_s else None
    recorder = TrialRecorder(handle.study, handle.space, handle.url)
    harness_errors = 0
    unlaunched_in_a_row = 0

    def objective(trial: optuna.Trial) -> float | list[float]:
        task = prepare(handle, trial, recorder)
        reporter.trial_started(task.number, finished_count(handle.study) + 1, total, task.label)
        answer = recorder.without_launch(trial, task.engine, task.knobs, task.omit,
                                         check_rules=checks_rules(handle.space, trial, task.engine))
        if answer is not None:
            if answer.state == TrialState.PRUNED:
                raise optuna.TrialPruned()
            return answer.values
        try:
            outcome = execute(task, on_phase=reporter.phase,
                              on_started=lambda server: recorder.engine_started(trial, server))
        except KeyboardInterrupt:
            trial.set_user_attr("interrupted", True)
            raise
        except HarnessError as exc:
            trial.set_user_attr("harness_error", str(exc))
            raise
        values = recorder.record(trial, outcome)
        if values is None:
            raise optuna.TrialPruned()
        return values

    def finished(_study: optuna.Study, trial: FrozenTrial) -> None:
        nonlocal harness_errors, unlaunched_in_a_row
        reporter.trial_finished(trial)
        unlaunched_in_a_row = 0 if results.launched(trial) else unlaunched_in_a_row + 1
        harness_errors = harness_errors + 1 if trial.state == TrialState.FAIL else 0
        if harness_errors >= 3:
            raise HarnessError("three trials in a row failed in the tuner itself; last: "
                               f"{trial.user_attrs.get('harness_error', 'see the trial logs')}")

    with single_writer(handle.url), _sigterm_as_interrupt():
        while True:
            for note in recover(handle):
                reporter.note(note)
            done = finished_count(handle.study)
            running = len(handle.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)))
            if done >= total or (deadline is not None and time.monotonic() >= deadline):
                return
            if done + running >= total:
                time.sleep(2)  # other workers are finishing the budget
                continue
            if unlaunched_in_a_row >= MAX_PRUNED_IN_A_ROW:
                reporter.note(EXHAUSTED)
                return
            if isinstance(handle.study.sampler, GreedySampler) and handle.study.sampler.done(handle.study):
                reporter.note("the greedy procedure has measured every knob's ladder: done")
                return
            handle.study.optimize(objective, n_trials=1, catch=(HarnessError,),
                                  callbacks=[finished])


def checks_rules(space: Space, trial: optuna.Trial, engine: str) -> bool:
    """A baseline or a whole engine may opt out (``check_rules: false``): a probe launched to
    confirm that a rule still holds on this engine version."""
    arm = trial.user_attrs.get("arm", "search")
    baseline = next((b.check_rules for b in space.baselines if b.name == arm), True)
    return baseline and space.engines[engine].check_rules


def prepare(handle: StudyHandle, trial: optuna.Trial, recorder: TrialRecorder) -> TrialTask:
    """Suggest the config and stamp the trial with who runs it (for crash recovery)."""
    space = handle.space
    omit = frozenset(trial.user_attrs.get("omit", []))
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


def trials_table(study: optuna.Study) -> list[FrozenTrial]:
    return sorted(study.get_trials(deepcopy=False), key=lambda t: t.number)
