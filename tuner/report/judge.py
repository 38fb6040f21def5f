"""The verdict of ``tune judge`` (tuner.study.judge): each entrant's launches with the interval of
their geometric mean, each pick against the others, and what each pick's search spent to find it."""

from __future__ import annotations

from dataclasses import dataclass, field

import optuna
from optuna.trial import FrozenTrial, TrialState

from tuner.record import schema
from tuner.report.data import load_scales, lowest_miss
from tuner.report.stats import Change, Interval, change, log_t_interval
from tuner.study.judge import DEFAULTS_SUFFIX, ORIGINS_SEP
from tuner.study.lifecycle import FINISHED, trials_table


@dataclass
class Standing:
    """One entrant's launches in the judge: the values measured, refusals, GPU time."""

    label: str
    origin: str
    engine: str
    params: dict
    values: list[float] = field(default_factory=list)
    missed: list[float | None] = field(default_factory=list)  # max load: each launch's lowest miss
    refused: int = 0
    seconds: float = 0.0

    @property
    def interval(self) -> Interval:
        return log_t_interval(self.values)


def standings(study: optuna.Study) -> list[Standing]:
    """Each entrant's finished launches, in the order they were entered."""
    rows: dict[str, Standing] = {}
    scales = load_scales(study)
    for t in sorted(study.get_trials(deepcopy=False), key=lambda t: t.number):
        label = t.user_attrs.get(schema.ARM)
        if schema.JUDGED not in t.user_attrs or label is None:
            continue
        row = rows.setdefault(label, Standing(label, t.user_attrs[schema.JUDGED],
                                              t.user_attrs.get(schema.ENGINE, ""), dict(t.params)))
        if t.state != TrialState.COMPLETE or not schema.launched(t):
            continue
        row.seconds += _seconds(t)
        if schema.is_feasible(t) and t.value is not None:
            row.values.append(float(t.value))
            if t.user_attrs.get(schema.LOAD_CURVE):
                row.missed.append(lowest[0] if (lowest := lowest_miss(t, scales)) else None)
        else:
            row.refused += 1
    return list(rows.values())


def resolution(row: Standing) -> str:
    """What brackets a max-load entrant's values from above: the lowest load each launch missed.
    Values on the search's grid can agree exactly, and an interval of identical values has no
    width; this says how far the next load tried was."""
    if not row.missed:
        return ""
    shown = ["none" if m is None else f"{m:g}" for m in row.missed]
    if len(set(shown)) > 1:
        return "lowest loads missed " + ", ".join(shown)
    return f"lowest load missed {shown[0]}" + (" (each launch)" if len(shown) > 1 else "")


def _seconds(t: FrozenTrial) -> float:
    if t.datetime_start is None or t.datetime_complete is None:
        return 0.0
    return (t.datetime_complete - t.datetime_start).total_seconds()


def head_to_head(rows: list[Standing]) -> list[tuple[Standing, Standing, Change]]:
    """Each pick against each pick entered after it and against each engine's defaults: the
    pick's change over the other, with the interval of the ratio of their geometric means."""
    picks = [r for r in rows if not r.label.endswith(DEFAULTS_SUFFIX)]
    defaults = [r for r in rows if r.label.endswith(DEFAULTS_SUFFIX)]
    return [(pick, base, change(base.values, pick.values))
            for i, pick in enumerate(picks) for base in picks[i + 1:] + defaults]


@dataclass(frozen=True)
class SearchCost:
    """What a search spent: a pick is worth as much as the launches it took to find it."""

    study: str
    launches: int          # trials that started an engine
    refused: int           # of those, launches the engine refused (it did not start)
    ruled_out: int         # configs refused before a launch (known infeasible), no GPU time
    gpu_minutes: float     # the launched trials' wall time: launch, benchmark, teardown
    found_at: int | None   # the launch (1-based) that measured the pick; None if not launched


def search_cost(study: optuna.Study, pick_trial: int) -> SearchCost:
    """The cost of ``study``'s search up to its end, and at which launch it measured trial
    ``pick_trial`` (the pick the judge names as ``<study>#<trial>``). Launches are those its budget
    counts (``finished_count``); GPU minutes also hold launches cut short, which used the GPU."""
    trials = trials_table(study)
    counted = [t for t in trials if t.state in FINISHED and schema.launched(t)]
    order = [t.number for t in counted]
    return SearchCost(
        study=study.study_name,
        launches=len(counted),
        refused=sum(1 for t in counted if schema.status(t) == "infeasible"),
        ruled_out=sum(1 for t in trials if schema.PRUNED_RULE in t.user_attrs),
        gpu_minutes=sum(_seconds(t) for t in trials if schema.launched(t)) / 60,
        found_at=order.index(pick_trial) + 1 if pick_trial in order else None)


def origins_of(row: Standing) -> list[tuple[str, int]]:
    """The studies and trials a pick came from (``<study>#<trial>``, several for searches that
    picked the same config); none for an engine's defaults."""
    found = []
    for origin in row.origin.split(ORIGINS_SEP):
        study, sep, number = origin.rpartition("#")
        if sep and number.isdigit():
            found.append((study, int(number)))
    return found
