"""One study's config against configs of other studies: the gain `tune best` gives within a study,
across studies.

Each study measures on its own machine and at its own time, so a pick confirmed in one study is
often judged against baselines repeated in another. The interval then also holds the difference
between the two runs' machines, which a single study's interval does not.
"""

from __future__ import annotations

from dataclasses import dataclass

from tuner.errors import InputError
from tuner.record import results
from tuner.record.results import ConfigStats
from tuner.report.stats import Change, change
from tuner.study.lifecycle import StudyHandle


@dataclass(frozen=True)
class Config:
    """The launches of one config of one study (its `tune confirm` repeats included)."""

    study: str
    stats: ConfigStats

    @property
    def label(self) -> str:
        return f"{self.study} trial {self.stats.first.number} ({self.stats.arm}, n={self.stats.n})"


def config_of(handle: StudyHandle, trial: int) -> Config:
    """The config that trial ``trial`` of the study launched, with all its launches."""
    group = results.config_of_trial(handle.study, trial)
    if group is not None:
        return Config(handle.name, group)
    raise InputError(f"{handle.name}:{trial}: trial {trial} is no feasible launch of study {handle.name!r}")


def pick_of(handle: StudyHandle, trial: int | None) -> Config:
    """The given trial's config, or the study's best (what `tune best` reports)."""
    if trial is not None:
        return config_of(handle, trial)
    best = results.best_config(handle.study)
    if best is None:
        raise InputError(f"study {handle.name!r} has no feasible trial to compare")
    return Config(handle.name, best)


def bases_of(handle: StudyHandle, trial: int | None) -> list[Config]:
    """The given trial's config, or every baseline the study measured."""
    if trial is not None:
        return [config_of(handle, trial)]
    found = results.baseline_configs(handle.study)
    if not found:
        raise InputError(f"study {handle.name!r} measured no feasible baseline; name a config as "
                         f"{handle.name}:TRIAL")
    return [Config(handle.name, b) for b in found]


def compare(pick: StudyHandle, pick_trial: int | None,
            others: list[tuple[StudyHandle, int | None]]) -> tuple[Config, list[tuple[Config, Change]]]:
    """The pick and its gain over each other config; the studies must share one objective."""
    metric = pick.space.objective.name
    for handle, _ in others:
        if handle.space.objective.name != metric:
            raise InputError(f"study {handle.name!r} measures {handle.space.objective.name}, "
                             f"study {pick.name!r} measures {metric}: no common objective to compare")
    best = pick_of(pick, pick_trial)
    return best, [(base, change(base.stats.values, best.stats.values))
                  for handle, trial in others for base in bases_of(handle, trial)]
