"""Read answers out of a study: the best feasible config and the baselines, with the repeated
measurements of one config grouped (tuner.report.stats judges the change between two groups)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

import optuna
from optuna.trial import FrozenTrial, TrialState

from tuner.record import schema
from tuner.record.schema import is_feasible, launched


def best_trial(study: optuna.Study) -> FrozenTrial | None:
    try:
        return study.best_trial  # Optuna 5: feasible trials only
    except ValueError:
        return None


def pareto_front(study: optuna.Study) -> list[FrozenTrial]:
    """Feasible launched trials only: a reused trial would repeat its source on the front."""
    return sorted((t for t in study.best_trials if launched(t)), key=lambda t: t.number)


def baseline_trials(study: optuna.Study) -> list[FrozenTrial]:
    """Feasible measurements of the baseline arms, in trial order."""
    return [t for t in study.get_trials(deepcopy=False)
            if t.user_attrs.get(schema.ARM, "search") != "search" and is_feasible(t)]


@dataclass
class ConfigStats:
    """All feasible measurements of one launched configuration (repeats included)."""

    arm: str
    params: dict
    trials: list[FrozenTrial] = field(default_factory=list)

    @property
    def values(self) -> list[float]:
        return [t.value for t in self.trials]

    @property
    def n(self) -> int:
        return len(self.trials)

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    @property
    def mad(self) -> float:
        """Median absolute deviation: a spread that one outlier run cannot inflate."""
        m = self.median
        return statistics.median(abs(v - m) for v in self.values)

    @property
    def first(self) -> FrozenTrial:
        return self.trials[0]


def config_key(t: FrozenTrial) -> tuple:
    arm = t.user_attrs.get(schema.ARM, "search")
    # A baseline launches without knob flags: it is a different command than the same values set
    # explicitly, so it stays its own group.
    return (arm if arm != "search" else "search", tuple(sorted((k, repr(v)) for k, v in t.params.items())))


def group_configs(study: optuna.Study) -> list[ConfigStats]:
    groups: dict[tuple, ConfigStats] = {}
    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        if not is_feasible(t) or t.value is None or not launched(t):
            continue  # a reused trial is not a repeat: it would fake a second measurement
        key = config_key(t)
        groups.setdefault(key, ConfigStats(key[0], dict(t.params))).trials.append(t)
    return list(groups.values())


def config_of_trial(study: optuna.Study, number: int) -> ConfigStats | None:
    """The config trial ``number`` launched, with all its launches; None when that trial is no
    feasible launch."""
    return next((g for g in group_configs(study) if number in (t.number for t in g.trials)), None)


def best_config(study: optuna.Study) -> ConfigStats | None:
    """The config to recommend: the best median. Once `tune confirm` has repeated configs, only
    repeated ones compete: a single lucky launch must not beat a median of several (seen in the
    head-to-head with vLLM's sweep, docs/findings/h200-vllm-vs-sweep.md, where load drifted between launches).
    A config whose repeats were queued but are not all measured yet (the confirm was stopped) still
    competes: a study stopped while the best config's repeat ran, and the repeated
    baselines would otherwise have been recommended over a config a third faster."""
    groups = group_configs(study)
    if not groups:
        return None
    pending = confirm_pending(study)
    repeated = [g for g in groups if g.n > 1 or g.first.number in pending]
    groups = repeated or groups
    maximize = study.direction == optuna.study.StudyDirection.MAXIMIZE
    return max(groups, key=lambda g: g.median if maximize else -g.median)


def confirm_pending(study: optuna.Study) -> set[int]:
    """First trials of the configs whose `tune confirm` repeats are queued, running, or failed in
    a way `tune resume` retries: it still measures them."""
    trials = study.get_trials(deepcopy=False)
    open_ = [t for t in trials if t.state in (TrialState.WAITING, TrialState.RUNNING)]
    return {t.user_attrs[schema.REPEAT_OF] for t in open_ + schema.awaiting_retry(trials)
            if schema.REPEAT_OF in t.user_attrs}


def baseline_config(study: optuna.Study) -> ConfigStats | None:
    """The first baseline arm with a feasible measurement; the quality reference arm only when no
    baseline of the space served (it is a precision anchor, not a tuning baseline)."""
    groups = [g for g in group_configs(study) if g.arm != "search"]
    return min(groups, key=lambda g: (g.arm == schema.QUALITY_REFERENCE_ARM, g.first.number),
               default=None)


def baseline_configs(study: optuna.Study) -> list[ConfigStats]:
    """Every baseline arm's measurements (each engine's defaults in a cross-engine study), in the
    order they first ran: a pick is judged against each. The model's pick and the quality reference
    are controls, not baselines."""
    controls = (schema.SEARCH, schema.MODEL_PICK_ARM, schema.QUALITY_REFERENCE_ARM)
    return sorted((g for g in group_configs(study) if g.arm not in controls),
                  key=lambda g: g.first.number)


def describe_quality(record: dict | None) -> str:
    """A trial's quality verdict in a few words, for tables (the full record is user attr
    ``quality``): the reference, not probed, not measured, or the token mismatch and any bound
    it broke."""
    if not record:
        return ""
    if record.get("skipped"):
        return "= reference precision"
    metrics, slack = record.get("metrics") or {}, record.get("slack") or {}
    failed = [name for name, value in slack.items() if value > 0]
    missing = [name for name in failed if name in (record.get("not_measured") or {})
               or (name == "lm_eval" and "error" in (record.get("lm_eval") or {}))]
    if record.get("role") == "reference":
        head = "reference"
    elif "token_mismatch" in metrics:
        head = f"mismatch {metrics['token_mismatch']:.3f}"
    else:
        head = "not measured"
    if missing:
        return f"{head}; not measured: {', '.join(missing)}"
    broke = [name for name in failed if name not in missing]
    return head + (f"; over bound: {', '.join(broke)}" if broke else "")


# The launch phases a status line names, with their short labels, in the order an engine runs them.
LAUNCH_PHASE_LABELS = (("weights_s", "weights"), ("compile_s", "compile"), ("kernels_s", "kernels"),
                       ("cuda_graphs_s", "graphs"), ("kv_profile_s", "kv"))


def describe_launch(user_attrs: dict) -> str:
    """Where a trial's launch went, in a few words: "122 s (weights 2, compile 41 miss, graphs 9,
    kv 23)", whole seconds, only the phases the engine's log timed (user attr ``launch_phases``);
    hit/miss is the compile cache. The rest of the launch is in the report's table."""
    total = user_attrs.get(schema.LAUNCH_S)
    phases = user_attrs.get(schema.LAUNCH_PHASES) or {}
    hit = phases.get("compile_cache_hit")
    cache = "" if hit is None else " hit" if hit else " miss"
    parts = [f"{label} {phases[key]:.0f}" + (cache if key == "compile_s" else "")
             for key, label in LAUNCH_PHASE_LABELS if key in phases]
    if hit is not None and "compile_s" not in phases:
        parts.append(f"compile cache{cache}")
    if total is None and not parts:
        return ""
    head = f"{total:.0f} s" if total is not None else "not ready"
    return head + (f" ({', '.join(parts)})" if parts else "")


@dataclass(frozen=True)
class ModelPick:
    """The performance model's own top config, measured like a baseline: how far the prediction
    was from the measurement, and from the searched best."""

    predicted: float
    measured: float
    best: float

    @property
    def error_pct(self) -> float:
        return 100.0 * (self.predicted - self.measured) / self.measured

    @property
    def below_best_pct(self) -> float:
        return 100.0 * (self.best - self.measured) / self.best

    def describe(self, maximize: bool = True) -> str:
        gap = self.below_best_pct if maximize else -self.below_best_pct
        return (f"model pick: predicted {self.predicted:,.2f}, measured {self.measured:,.2f} "
                f"(prediction {self.error_pct:+.0f}%), {gap:.1f}% "
                f"{'below' if maximize else 'above'} the best found")


def model_pick(study: optuna.Study, arm: str = schema.MODEL_PICK_ARM) -> ModelPick | None:
    best = best_config(study)
    groups = [g for g in group_configs(study) if g.arm == arm]
    if best is None or not groups:
        return None
    predicted = groups[0].first.user_attrs.get(schema.PREDICTION)
    if predicted is None:
        return None
    return ModelPick(float(predicted), groups[0].median, best.median)

def quality_summary(record: dict | None) -> str:
    """A feasible config's quality against the reference, in one line: every metric measured (and
    lm-eval's drop per task); the guardrail passed, or the config would not be shown."""
    if not record:
        return "not recorded"
    if record.get("skipped"):
        return f"not probed: {record['skipped']}"
    metrics = record.get("metrics") or {}
    parts = [f"{name} {value:.3f}" for name, value in metrics.items()]
    scores = record.get("lm_eval") or {}
    for task, drop in (scores.get("drop") or {}).items():
        parts.append(f"lm-eval {task} drop {drop:+.3f}")
    who = ("this is the reference" if record.get("role") == "reference"
           else f"vs reference trial {record.get('reference_trial')}")
    return f"{', '.join(parts) or 'nothing measured'} ({who}; guardrail passed)"
