"""The Optuna side: create, join or resume a study, enqueue baselines, run trials, record everything.

A config the engine refuses is recorded COMPLETE with a pessimistic value and the constraint
``engine_start = 1``: every Optuna sampler learns from that, while FAIL trials are ignored by all of
them. FAIL is kept for interruptions and harness errors; each FAIL trial is retried once. Trials
answered without a launch (a config known to be infeasible, or one measured before) are told to
Optuna the same way, and cost no budget.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import optuna
from optuna.trial import FrozenTrial, TrialState

from tuner.errors import InputError
from tuner.fingerprint import environment
from tuner.record import results, schema
from tuner.record.storage import check_study_name, load_optuna_study, open_storage, study_names
from tuner.redact import redact_space
from tuner.runtime.launcher import check_launchable
from tuner.space import Space, arms, baseline_params, space_from_dict
from tuner.study import knowledge
from tuner.study.knowledge import Knowledge, merge, model_predictions, queue
from tuner.study.samplers import sampler_for
from tuner.trial import lm_eval
from tuner.trial.metric_names import check_metrics

FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)
# What must match for measurements to be comparable; the host name may differ (resume elsewhere).
FINGERPRINT_KEYS = ("device", "gpu", "gpu_count", "gpu_memory_mib", "driver", "cpu")


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
        return self.study.user_attrs.get(schema.N_TRIALS) or self.space.budget.n_trials


def _create_optuna_study(space: Space, storage, name: str) -> optuna.Study:
    targets = space.objective.targets()
    study = optuna.create_study(storage=storage, study_name=name,
                                directions=[t.direction for t in targets], sampler=sampler_for(space),
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


def _check_inputs(space: Space) -> None:
    """What would fail every trial, checked before the study exists and before any launch."""
    check_metrics(space)
    for engine, choice in space.engines.items():
        check_launchable(engine, choice)
    if space.quality is not None and space.quality.lm_eval is not None:
        lm_eval.check_tasks(space.quality.lm_eval)


def create(space: Space, name: str, url: str, *, join: bool = False,
           linked_from: str | None = None,
           warm_start: Sequence[tuple[str, optuna.Study]] = (), warm_top_k: int = 3,
           prior_file: Path | None = None, use_prior: bool = True) -> StudyHandle:
    """A new study, or with ``join`` the same-space study other workers already run.

    ``use_prior=False`` leaves the space's ``prior:`` out, stored space included, so the study is
    the control of a comparison with the prior whatever the host has installed, and a worker that
    joins it must leave it out too.

    Creation is atomic in the database, so when several workers start at once exactly one creates
    the study and enqueues the baselines; the others join it. Prior knowledge (the space's
    ``prior:``, earlier studies in ``warm_start``) is gathered before the study exists, so a bad
    estimator or source study fails without leaving a half-made study.
    """
    check_study_name(name)  # with any --storage: the name also names the study's files folder
    _check_inputs(space)
    if not use_prior:
        if prior_file is not None:
            raise InputError("--no-prior and --prior-file contradict each other: give one of them")
        space = space.model_copy(update={"prior": None})
    if name in study_names(url):
        if not join:
            raise InputError(f"study {name!r} already exists in {url}; continue it with "
                             f"`tune resume {name}` or pick another --study name")
        return _join(space, name, url)
    model = (knowledge.carried_predictions(space, prior_file) if prior_file is not None
             else model_predictions(space, seed=space.seed or 0))
    found = merge(model, knowledge.warm_start(space, warm_start, fingerprint_here=fingerprint()))
    storage = open_storage(url, create=True)
    try:
        study = _create_optuna_study(space, storage, name)
    except optuna.exceptions.DuplicatedStudyError:
        if not join:
            raise InputError(f"study {name!r} was just created by another process") from None
        return _join(space, name, url)
    study.set_user_attr(schema.SPACE, redact_space(space.model_dump(mode="json")))
    study.set_user_attr(schema.N_TRIALS, space.budget.n_trials)
    study.set_user_attr(schema.FINGERPRINT, fingerprint())
    if linked_from:
        study.set_user_attr(schema.LINKED_FROM, linked_from)
    handle = StudyHandle(study, space, url)
    enqueue_baselines(handle)
    if found.predictions:
        study.set_user_attr(schema.PRIOR, found.to_attr())
        queue(study, space, found, warm_top_k=warm_top_k)
        study.sampler = sampler_for(space, predictions=found.predictions)
    study.set_user_attr(schema.READY, True)
    return handle


def _join(space: Space, name: str, url: str) -> StudyHandle:
    handle = load(name, url)
    if handle.study.user_attrs[schema.SPACE] != redact_space(space.model_dump(mode="json")):
        raise InputError(f"study {name!r} exists with a different space; workers of one study "
                         "must use the same space file")
    handle.space = space  # the caller's copy still holds the secrets the stored one masks
    return handle


def load(name: str, url: str) -> StudyHandle:
    stored = load_optuna_study(name, url)
    storage = stored._storage
    deadline = time.monotonic() + 30
    while not stored.user_attrs.get(schema.READY) and time.monotonic() < deadline:
        time.sleep(0.5)  # another worker is creating it right now
        stored = optuna.load_study(study_name=name, storage=storage)
    if stored.user_attrs.get(schema.SPACE) is None:
        raise InputError(f"study {name!r} was not created by tune (no stored space)")
    space = space_from_dict(stored.user_attrs[schema.SPACE], f"space stored in study {name!r}")
    known = Knowledge.from_attr(stored.user_attrs.get(schema.PRIOR))
    study = optuna.load_study(study_name=name, storage=storage,
                              sampler=sampler_for(space, worker_seed=True,
                                                  predictions=known.predictions),
                              pruner=optuna.pruners.NopPruner())
    return StudyHandle(study, space, url)


def fingerprint_mismatch(handle: StudyHandle) -> dict[str, tuple]:
    """Keys whose value here differs from the study's; empty when measurements can be mixed."""
    stored = handle.study.user_attrs.get(schema.FINGERPRINT) or {}
    here = fingerprint()
    return {k: (stored.get(k), here.get(k)) for k in FINGERPRINT_KEYS
            if k in stored and stored.get(k) != here.get(k)}


def link_new_hardware(handle: StudyHandle, top_k: int = 3) -> StudyHandle:
    """A new study for this hardware, warm-started from the old study: its best configs first, its
    measurements as the prior (a Pareto front is only queued)."""
    base = f"{handle.name}-{fingerprint()['device']}"
    name, n = base, 1
    while name in study_names(handle.url):
        n += 1
        name = f"{base}-{n}"
    if not handle.space.objective.multi:  # the old study's measurements become the prior
        return create(handle.space, name, handle.url, linked_from=handle.name,
                      warm_start=[(handle.name, handle.study)], warm_top_k=top_k)
    new = create(handle.space, name, handle.url, linked_from=handle.name)
    for t in results.pareto_front(handle.study)[:top_k]:
        new.study.enqueue_trial(t.params, user_attrs={schema.ARM: schema.SEARCH,
                                                      schema.WARM_START_OF: f"{handle.name}#{t.number}"},
                                skip_if_exists=True)
    return new


def enqueue_baselines(handle: StudyHandle) -> None:
    """Each control arm once per study, first in line: the quality reference, then the baselines."""
    present = {t.user_attrs.get(schema.ARM) for t in handle.study.get_trials(deepcopy=False)}
    for b in arms(handle.space):
        if b.name in present:
            continue
        params, omitted = baseline_params(handle.space, b)
        handle.study.enqueue_trial(params, user_attrs={schema.ARM: b.name, schema.ENGINE: b.engine,
                                                       schema.OMIT: omitted})


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
            attrs = {schema.ARM: g.arm, schema.REPEAT_OF: g.first.number}
            attrs.update({k: g.first.user_attrs[k] for k in (schema.ENGINE, schema.OMIT)
                          if k in g.first.user_attrs})
            handle.study.enqueue_trial(g.first.params, user_attrs=attrs)
    added = repeats * len(picked)
    # The budget grows with the repeats, so other workers (`tune resume`) help run them.
    handle.study.set_user_attr(schema.N_TRIALS, finished_count(handle.study) + added)
    return added


def finished_count(study: optuna.Study) -> int:
    """Trials that used up the budget: launched and finished. Configs pruned by a rule or by what
    an earlier launch taught, and configs answered with an earlier measurement, cost no launch, so
    they don't count."""
    return len([t for t in study.get_trials(deepcopy=False, states=FINISHED)
                if schema.launched(t)])


def trials_table(study: optuna.Study) -> list[FrozenTrial]:
    return sorted(study.get_trials(deepcopy=False), key=lambda t: t.number)
