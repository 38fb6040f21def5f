"""The tables of a report, computed once from a study so the HTML and Markdown say the same thing.

Everything comes from what the study recorded (user attrs, constraints, the ``evaluation`` study
attr written by ``tune evaluate``), so a report can be made anywhere the storage can be read, long
after the engines are gone.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from .. import __version__, results
from ..telemetry import derived
from .stats import Change, change

# (metric, label, higher is better): the columns of the motivating study's per-workload table.
WORKLOAD_METRICS = (
    ("total_token_throughput", "total tok/s", True),
    ("output_throughput", "output tok/s", True),
    ("mean_tpot_ms", "mean TPOT ms", False),
    ("p99_ttft_ms", "p99 TTFT ms", False),
)
MIN_TRIALS_FOR_IMPORTANCE = 4


@dataclass(frozen=True)
class TrialRow:
    number: int
    arm: str
    status: str
    value: float | tuple[float, ...] | None  # a tuple in multi-objective studies
    params: dict[str, Any]
    p99_ttft_ms: float | None
    mean_tpot_ms: float | None
    failure: str


@dataclass(frozen=True)
class WorkloadRow:
    workload: str
    label: str
    higher_is_better: bool
    baseline: float | None
    best: float | None
    change: Change
    failed_requests: int  # over both arms and all repeats: a config that cannot serve a workload


@dataclass(frozen=True)
class FailureGroup:
    kind: str  # "infeasible" or "pruned"
    failure_class: str
    trials: list[int]
    reason: str
    evidence: list[str]


@dataclass(frozen=True)
class TelemetryRow:
    number: int
    arm: str
    device: str
    energy_j_per_token: float | None
    peak_memory_mib: float | None
    mean_load_pct: float | None
    peak_kv_cache_pct: float | None
    peak_waiting: float | None
    preemptions: float | None
    mean_queue_ms: float | None


@dataclass
class ReportData:
    study: str
    generated: str
    objective: str
    directions: list[str]
    counts: dict[str, int]
    best: TrialRow | None  # the winner: what to run
    best_command: str | None
    contender: int | None  # the trial compared with the baseline per workload
    baseline_arm: str | None
    comparison_source: str
    workload_rows: list[WorkloadRow]
    failures: list[FailureGroup]
    trials: list[TrialRow]
    environment: dict[str, Any]
    telemetry: list[TelemetryRow]
    pareto: list[int] = field(default_factory=list)  # multi-objective: the trials to choose from
    importances: dict[str, float] = field(default_factory=dict)
    importance_note: str = ""
    notes: list[str] = field(default_factory=list)

    @property
    def params(self) -> list[str]:
        return list(dict.fromkeys(k for t in self.trials for k in t.params))


def trial_row(t: FrozenTrial) -> TrialRow:
    ua = t.user_attrs
    failure = (ua.get("failure_class") or ua.get("pruned_rule") or ua.get("harness_error")
               or ("interrupted" if ua.get("interrupted") else ""))
    feasible = results.is_feasible(t)
    values = t.values if feasible else None
    value = None if not values else values[0] if len(values) == 1 else tuple(values)
    return TrialRow(t.number, ua.get("arm", "search"), results.status_label(t), value, dict(t.params),
                    ua.get("p99_ttft_ms"), ua.get("mean_tpot_ms"), str(failure))


def feasible_copy(study: optuna.Study) -> optuna.Study:
    """An in-memory study of the feasible trials only.

    Refused configs carry a made-up pessimistic value; importances and parallel coordinates drawn
    with them would rank knobs by how often they broke the engine, not by what they do to speed.
    """
    copy = optuna.create_study(directions=study.directions)
    copy.add_trials([t for t in study.get_trials(deepcopy=False) if results.is_feasible(t)])
    return copy


def importances(study: optuna.Study) -> tuple[dict[str, float], str]:
    """PED-ANOVA importances over feasible trials, or why there are none yet."""
    if len(study.directions) > 1:
        return {}, "parameter importances are computed for single-objective studies only"
    feasible = feasible_copy(study)
    n = len(feasible.trials)
    if n < MIN_TRIALS_FOR_IMPORTANCE:
        return {}, (f"{n} feasible trial(s): too few for parameter importances "
                    f"(needs {MIN_TRIALS_FOR_IMPORTANCE})")
    varied = [p for p in dict.fromkeys(k for t in feasible.trials for k in t.params)
              if len({repr(t.params.get(p)) for t in feasible.trials}) > 1]
    if not varied:
        return {}, "no parameter varied among the feasible trials"
    try:
        return dict(optuna.importance.get_param_importances(feasible)), ""
    except (ValueError, RuntimeError, ZeroDivisionError) as exc:
        return {}, f"parameter importances could not be computed: {exc}"


def _failures(trials: list[FrozenTrial]) -> list[FailureGroup]:
    groups: dict[tuple[str, str], list[FrozenTrial]] = {}
    for t in trials:
        ua = t.user_attrs
        if ua.get("failure_class"):
            groups.setdefault(("infeasible", ua["failure_class"]), []).append(t)
        elif t.state == TrialState.PRUNED or ua.get("pruned_rule"):
            groups.setdefault(("pruned", ua.get("pruned_rule", "pruner")), []).append(t)
    out = []
    for (kind, cls), members in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        key = "failure" if kind == "infeasible" else "pruned"
        reason = next((m.user_attrs.get(f"{key}_reason") for m in members
                       if m.user_attrs.get(f"{key}_reason")), "")
        evidence = [e for m in members if (e := (m.user_attrs.get("failure_evidence") or "").strip())]
        out.append(FailureGroup(kind, cls, [m.number for m in members], reason,
                                list(dict.fromkeys(evidence))[:3]))
    return out


def _mean(values: list[float]) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.fmean(values) if values else None


def evaluation_rows(evaluation: dict) -> list[WorkloadRow]:
    rows = []
    for w in evaluation.get("workloads", []):
        base, best = w.get("baseline", {}), w.get("best", {})
        failed = int(sum(base.get("failed", [])) + sum(best.get("failed", [])))
        for metric, label, higher in WORKLOAD_METRICS:
            b, a = base.get(metric, []), best.get(metric, [])
            rows.append(WorkloadRow(w["name"], label, higher, _mean(b), _mean(a), change(b, a),
                                    failed))
    return rows


def _search_rows(name: str, best: FrozenTrial, base: FrozenTrial) -> list[WorkloadRow]:
    rows = []
    for metric, label, higher in WORKLOAD_METRICS:
        b, a = base.user_attrs.get(metric), best.user_attrs.get(metric)
        rows.append(WorkloadRow(name, label, higher, b, a,
                                change([b] if b is not None else [], [a] if a is not None else []),
                                int(base.user_attrs.get("failed") or 0)
                                + int(best.user_attrs.get("failed") or 0)))
    return rows


def _telemetry(t: FrozenTrial) -> TelemetryRow | None:
    tel = t.user_attrs.get("telemetry")
    if not isinstance(tel, dict):
        return None
    d = derived(tel, int((t.user_attrs.get("metrics") or {}).get("total_output_tokens") or 0))
    view = (tel.get("engine_metrics") or {}).get("summary", {})
    kv = (view.get("kv_cache_usage") or {}).get("max")
    queue = (view.get("queue_time_s") or {}).get("mean")
    gpu = bool(tel.get("gpu"))
    names = {g.get("name") for g in tel.get("gpus", [])}
    return TelemetryRow(
        t.number, t.user_attrs.get("arm", "search"),
        f"{len(tel['gpus'])}× {', '.join(sorted(names))}" if gpu else "CPU",
        d["joules_per_output_token"],
        d["gpu_memory_peak_mib"] if gpu else d["engine_rss_peak_mib"],
        d["gpu_utilization_mean_pct"] if gpu else d["engine_cpu_mean_pct"],
        100.0 * kv if kv is not None else None,
        (view.get("requests_waiting") or {}).get("max"),
        (view.get("preemptions") or {}).get("delta"),
        1000.0 * queue if queue is not None else None)


def contenders(study: optuna.Study) -> tuple[FrozenTrial | None, FrozenTrial | None, str]:
    """The config to set against the baseline, the baseline (first feasible arm), and a note.

    When the baseline itself is best, the best searched config is compared instead: that says how
    far the search fell short, and on other workloads it may still win.
    """
    best = results.best_trial(study)
    bases = results.baseline_trials(study)
    base = bases[0] if bases else None
    if best is None or base is None or best.number != base.number:
        return best, base, ""
    searched = [t for t in study.get_trials(deepcopy=False)
                if results.is_feasible(t) and t.user_attrs.get("arm", "search") == "search"]
    arm = base.user_attrs.get("arm")
    if not searched:
        return None, base, f"the baseline {arm} is the only feasible config"
    pick = (max if study.direction == optuna.study.StudyDirection.MAXIMIZE else min)(
        searched, key=lambda t: t.value)
    return pick, base, (f"the baseline {arm} is the best config measured; compared with it here: "
                        f"the best searched config, trial {pick.number}")


@dataclass(frozen=True)
class _Comparison:
    rows: list[WorkloadRow]
    source: str
    contender: int | None
    baseline_arm: str | None


def _comparison(study: optuna.Study, best: FrozenTrial | None, base: FrozenTrial | None,
                notes: list[str]) -> _Comparison:
    """The per-workload table: from `tune evaluate` when it ran, else the two search trials."""
    evaluation = study.user_attrs.get("evaluation")
    if isinstance(evaluation, dict) and evaluation.get("workloads"):
        measured = evaluation["best"]["trial"]
        if best is not None and measured != best.number:
            notes.append(f"the evaluation measured trial {measured}, but the best trial is now "
                         f"{best.number}: run `tune evaluate` again")
        base_info = evaluation["baseline"]
        return _Comparison(
            evaluation_rows(evaluation),
            f"`tune evaluate`: trial {measured} vs baseline {base_info['arm']} (trial "
            f"{base_info['trial']}), {evaluation['repeats']} repeat(s) each, interleaved; "
            f"finished {evaluation.get('finished_at', '?')}", measured, base_info["arm"])
    if best is None or base is None:
        if base is None and len(study.directions) == 1:
            notes.append("no feasible baseline trial to compare with")
        return _Comparison([], "", None, None)
    workload = ((study.user_attrs.get("space") or {}).get("workload") or {}).get("name", "default")
    return _Comparison(_search_rows(workload, best, base),
                       f"search trials {best.number} and {base.number}, one run each: run "
                       "`tune evaluate` for repeats, intervals and more workloads",
                       best.number, base.user_attrs.get("arm"))


def build(study: optuna.Study) -> ReportData:
    """Every table of the report, from the study alone."""
    trials = sorted(study.get_trials(deepcopy=False), key=lambda t: t.number)
    counts: dict[str, int] = {}
    for t in trials:
        label = results.status_label(t)
        counts[label] = counts.get(label, 0) + 1
    notes: list[str] = []
    pareto: list[int] = []
    if len(study.directions) > 1:
        pareto = sorted(t.number for t in study.best_trials)
        notes.append(f"{len(pareto)} trial(s) on the Pareto front; the per-workload table needs "
                     "a single best config")
        winner, best, base = None, None, None
    else:
        winner = results.best_trial(study)
        best, base, note = contenders(study)
        if note:
            notes.append(note)
    cmp = _comparison(study, best, base, notes)
    imp, imp_note = importances(study)
    return ReportData(
        study=study.study_name,
        generated=datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC") + f", tuner {__version__}",
        objective=(study.user_attrs.get("objective") or {}).get("metric", "value"),
        directions=[d.name.lower() for d in study.directions],
        counts=counts,
        best=trial_row(winner) if winner else None,
        best_command=winner.user_attrs.get("command") if winner else None,
        contender=cmp.contender,
        baseline_arm=cmp.baseline_arm,
        comparison_source=cmp.source,
        workload_rows=cmp.rows,
        failures=_failures(trials),
        trials=[trial_row(t) for t in trials],
        environment=dict(winner.user_attrs.get("environment") or {}) if winner else {},
        telemetry=[row for t in trials if (row := _telemetry(t)) is not None],
        pareto=pareto,
        importances=imp,
        importance_note=imp_note,
        notes=notes,
    )
