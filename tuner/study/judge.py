"""One judge for configs that different searches picked: each pick and each engine's defaults,
launched the same number of times, interleaved, on one machine, in a study of its own.

Searches that ran apart (greedy on one day, TPE on another, or on another host) cannot be compared
by their own measurements: machines and their load drift. The judge measures every entrant again
under the same conditions: round r launches entrant 1, 2, ... before round r + 1 starts, so a slow
drift of the machine lands on every entrant alike; every launch is a new server, and the space's
prefix-cache reset empties the cache before each benchmark run, so each measurement starts from
the same cache state. Only the engines' compile caches differ: the first round compiles, later
rounds reuse, which changes the launch time, not what is measured.

Searches that picked the same config are one entrant (label "greedy+tpe"): launching one config
under two names would spend launches on a comparison whose answer is known.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from tuner.errors import InputError
from tuner.record import results, schema
from tuner.record.results import ConfigStats
from tuner.space import Baseline, Space, baseline_params
from tuner.space.model import Budget
from tuner.study.lifecycle import StudyHandle, create

DEFAULTS_SUFFIX = "-defaults"
JOINED = "+"      # between the labels of searches that picked the same config
ORIGINS_SEP = ", "  # between their "<study>#<trial>" origins


@dataclass(frozen=True)
class Entrant:
    """A config the judge launches: a search's pick, or an engine at its defaults."""

    label: str
    engine: str
    params: dict
    omit: list[str]
    origins: tuple[str, ...]  # "<study>#<trial>" of each search that picked it, or ("<engine> defaults",)

    @property
    def origin(self) -> str:
        """As the judge's trials record it (``schema.JUDGED``)."""
        return ORIGINS_SEP.join(self.origins)


def entrants(picks: list[tuple[str, StudyHandle, int | None]], *,
             defaults: Iterable[str] | None = None) -> tuple[Space, list[Entrant]]:
    """The picks (LABEL, study, trial or None for the study's recommendation), picks of the same
    config joined into one entrant, then the engines in ``defaults`` (None: every engine of the
    first study's space) at their own defaults. The studies must score the same objective on the
    same workloads, or their picks answer different questions."""
    if not picks:
        raise InputError("name at least one pick: LABEL=STUDY or LABEL=STUDY:TRIAL")
    space = picks[0][1].space
    found: list[Entrant] = []
    labels: set[str] = set()
    for label, handle, trial in picks:
        _same_question(space, picks[0][1].name, handle)
        if (label == schema.SEARCH or label.endswith(DEFAULTS_SUFFIX) or label in labels
                or JOINED in label or "," in label):
            raise InputError(f"pick label {label!r}: use a distinct name that is not 'search', has no "
                             f"{JOINED!r} or ',' and does not end in {DEFAULTS_SUFFIX!r}")
        labels.add(label)
        first = _pick(handle, trial).first
        engine = first.user_attrs.get(schema.ENGINE) or next(iter(handle.space.engines))
        if engine not in space.engines:
            raise InputError(f"pick {label!r}: engine {engine!r} is not in the space of study "
                             f"{picks[0][1].name!r}")
        pick = Entrant(label, engine, dict(first.params), list(first.user_attrs.get(schema.OMIT) or []),
                       (f"{handle.name}#{first.number}",))
        same = next((i for i, e in enumerate(found) if _same_config(e, pick)), None)
        if same is None:
            found.append(pick)
        else:
            e = found[same]
            found[same] = Entrant(e.label + JOINED + label, e.engine, e.params, e.omit,
                                  tuple(dict.fromkeys(e.origins + pick.origins)))
    for engine in space.engines if defaults is None else defaults:
        if engine not in space.engines:
            raise InputError(f"--defaults-of {engine}: not an engine of the space of study "
                             f"{picks[0][1].name!r} ({', '.join(space.engines)})")
        params, omitted = baseline_params(space, Baseline(name=engine + DEFAULTS_SUFFIX, engine=engine))
        found.append(Entrant(engine + DEFAULTS_SUFFIX, engine, params, omitted, (f"{engine} defaults",)))
    return space, found


def _same_config(a: Entrant, b: Entrant) -> bool:
    return a.engine == b.engine and a.params == b.params and sorted(a.omit) == sorted(b.omit)


def _pick(handle: StudyHandle, trial: int | None) -> ConfigStats:
    """The config trial ``trial`` launched, or the study's recommendation (what `tune best` says)."""
    found = (results.config_of_trial(handle.study, trial) if trial is not None
             else results.best_config(handle.study))
    if found is None:
        raise InputError(f"study {handle.name!r}: " + (f"trial {trial} is no feasible launch" if trial is not None
                                                      else "no feasible trial to judge"))
    return found


def _same_question(space: Space, name: str, handle: StudyHandle) -> None:
    if differ := space.differences(handle.space):
        raise InputError(f"study {handle.name!r} has another {' and '.join(differ)} than study "
                         f"{name!r}: their picks answer different questions")


def create_judge(space: Space, name: str, url: str, field_: list[Entrant], launches: int) -> StudyHandle:
    """A study that launches every entrant ``launches`` times, round by round."""
    if launches < 1:
        raise InputError(f"--launches {launches}: at least 1 (3 for an interval)")
    judged = space.model_copy(update={"name": name, "baselines": [], "prior": None, "sampler": "random",
                                      "budget": Budget(n_trials=launches * len(field_))})
    handle = create(judged, name, url, use_prior=False)
    for _ in range(launches):
        for e in field_:
            handle.study.enqueue_trial(e.params, user_attrs={
                schema.ARM: e.label, schema.ENGINE: e.engine, schema.OMIT: e.omit, schema.JUDGED: e.origin})
    return handle
