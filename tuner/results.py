"""Read answers out of a study: the best feasible config, the baselines, how they compare."""

from __future__ import annotations

from dataclasses import dataclass

import optuna
from optuna.trial import FrozenTrial, TrialState


def is_feasible(t: FrozenTrial) -> bool:
    return t.state == TrialState.COMPLETE and all(v <= 0 for v in t.constraints.values())


def status_label(t: FrozenTrial) -> str:
    """One word per trial that says what happened: the dashboard alone cannot show constraints."""
    if t.state == TrialState.COMPLETE:
        return "ok" if is_feasible(t) else "infeasible"
    if t.state == TrialState.PRUNED:
        return "pruned"
    if t.state == TrialState.FAIL:
        return "interrupted" if t.user_attrs.get("interrupted") else "error"
    return t.state.name.lower()


def best_trial(study: optuna.Study) -> FrozenTrial | None:
    try:
        return study.best_trial  # Optuna 5: feasible trials only
    except ValueError:
        return None


def baseline_trials(study: optuna.Study) -> list[FrozenTrial]:
    return [t for t in study.get_trials(deepcopy=False)
            if t.user_attrs.get("arm", "search") != "search" and is_feasible(t)]


@dataclass(frozen=True)
class Comparison:
    metric: str
    best: float
    baseline: float
    baseline_arm: str

    @property
    def change_pct(self) -> float:
        return 100.0 * (self.best - self.baseline) / self.baseline if self.baseline else float("nan")


def compare_to_baseline(study: optuna.Study, best: FrozenTrial, metric: str) -> Comparison | None:
    bases = baseline_trials(study)
    if not bases:
        return None
    base = bases[0]
    return Comparison(metric, float(best.value), float(base.value), base.user_attrs["arm"])
