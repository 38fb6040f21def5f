"""The tables of a report, computed once from a study so the HTML and Markdown say the same thing.

Everything comes from what the study recorded (user attrs, constraints, the ``evaluation`` study
attr written by ``tune evaluate``), so a report can be made anywhere the storage can be read, long
after the engines are gone.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from tuner import __version__
from tuner.deploy import serve_command
from tuner.errors import InputError
from tuner.record import results, schema
from tuner.record.results import ConfigStats
from tuner.record.slo import metric_value
from tuner.report.stats import MIN_RUNS, Change, change
from tuner.space import Space, space_from_dict
from tuner.trial.telemetry import derived

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
    quality: str = ""  # the quality guardrail's verdict (results.describe_quality)


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


@dataclass(frozen=True)
class LaunchRow:
    """Where one trial's launch went (user attrs ``launch_s``, ``launch_phases``): the engine's own
    phase timings; a phase its log did not time is absent from ``phases``."""

    number: int
    arm: str
    launch_s: float | None         # None: the engine never got ready
    phases: dict[str, Any]
    trial_s: float | None          # the whole trial: launch, benchmark, probe, teardown

    @property
    def share_pct(self) -> float | None:
        if self.launch_s is None or not self.trial_s:
            return None
        return 100.0 * self.launch_s / self.trial_s


@dataclass(frozen=True)
class LoadRow:
    """A max-load trial (user attrs ``max_load``, ``load_curve``): the load it sustained with every
    workload inside the SLOs, what capped it, and the benchmark runs its search took."""

    number: int
    arm: str
    sustained: float
    capped_by: str     # "WORKLOAD at LOAD: SLO VALUE > BOUND", or "" when no run missed
    runs: int


def lowest_miss(t: FrozenTrial, scales: dict[str, float]) -> tuple[float, dict] | None:
    """The run of a max-load trial that missed the SLOs at the lowest load, with that load in the
    first workload's units: with the value, it brackets the load the config sustains (the search's
    resolution there). None when no run missed. ``scales``: each workload's load_scale."""
    missed = [(p["load"] / scales.get(p.get("workload", ""), 1.0), p)
              for p in t.user_attrs.get(schema.LOAD_CURVE) or [] if not p.get("met")]
    return min(missed, key=lambda m: m[0]) if missed else None


def load_scales(study: optuna.Study) -> dict[str, float]:
    """Each workload's load_scale in the study's stored space (none: every run in one unit)."""
    return workload_scales(_stored_space(study))


def workload_scales(space: Space | None) -> dict[str, float]:
    """Each workload's load_scale, by name (none without a space: every run in one unit)."""
    return {w.name: w.load_scale for w in space.all_workloads()} if space else {}


def load_row(t: FrozenTrial, scales: dict[str, float]) -> LoadRow | None:
    """A max-load trial's row; None for a trial without a load curve."""
    curve = t.user_attrs.get(schema.LOAD_CURVE)
    if not curve:
        return None
    capped = ""
    if (lowest := lowest_miss(t, scales)) is not None:
        last = lowest[1]
        over = ", ".join(_over(last, name, by) for name, by in (last.get("slack") or {}).items()
                         if by > 0)
        capped = f"{last.get('workload', '')} at {last['load']:g}: {over}".strip()
    return LoadRow(t.number, t.user_attrs.get(schema.ARM, "search"), _sustained(t), capped, len(curve))


def _over(run: dict, name: str, by: float) -> str:
    """One missed SLO of a run: its value against its bound."""
    value = metric_value(run, name)
    if value is None:
        return f"{name} over by {by:,.1f}"
    return f"{name} {value:,.1f} > {value - by:,.4g}"


@dataclass
class ReportData:
    study: str
    generated: str
    objective: str
    directions: list[str]
    counts: dict[str, int]
    best: TrialRow | None  # the winner: what to run
    best_runs: list[float]  # its objective over every run (repeats included)
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
    quality: bool = False     # the study has a quality guardrail: tables show its column
    best_quality: str = ""    # the winner's quality against the reference
    launches: list[LaunchRow] = field(default_factory=list)
    loads: list[LoadRow] = field(default_factory=list)   # max-load trials

    @property
    def launch_share(self) -> tuple[float, int] | None:
        """The launches' share of the trials' time (their sums, over trials that got ready) and
        how many trials that is."""
        both = [r for r in self.launches if r.share_pct is not None]
        if not both:
            return None
        return 100.0 * sum(r.launch_s for r in both) / sum(r.trial_s for r in both), len(both)

    @property
    def params(self) -> list[str]:
        return list(dict.fromkeys(k for t in self.trials for k in t.params))


def objective_name(study: optuna.Study) -> str:
    """The objective's metric name(s), from the study's metric names or its stored space."""
    if study.metric_names:
        return " / ".join(study.metric_names)
    for holder in ((study.user_attrs.get(schema.SPACE) or {}).get("objective"),
                   study.user_attrs.get("objective")):
        if isinstance(holder, dict) and holder.get("max_load"):
            return "max_load"
        if isinstance(holder, dict) and holder.get("metric"):
            return holder["metric"]
    return "value"


def trial_row(t: FrozenTrial) -> TrialRow:
    ua = t.user_attrs
    over = ", ".join(f"slo:{m}" for m, v in (ua.get(schema.SLO_SLACK) or {}).items() if v > 0)
    failure = (ua.get(schema.FAILURE_CLASS) or ua.get(schema.PRUNED_RULE) or ua.get(schema.HARNESS_ERROR)
               or ("interrupted" if ua.get(schema.INTERRUPTED) else "")
               or (f"= trial {ua[schema.REUSED_FROM]}" if schema.REUSED_FROM in ua else "") or over)
    values = t.values if schema.is_feasible(t) else None
    value = None if not values else values[0] if len(values) == 1 else tuple(values)
    return TrialRow(t.number, ua.get(schema.ARM, "search"), schema.status(t), value,
                    dict(t.params), ua.get("p99_ttft_ms"), ua.get("mean_tpot_ms"), str(failure),
                    results.describe_quality(ua.get(schema.QUALITY)))


def feasible_copy(study: optuna.Study) -> optuna.Study:
    """An in-memory study of the feasible trials only.

    Refused configs carry a made-up pessimistic value; importances and parallel coordinates drawn
    with them would rank knobs by how often they broke the engine, not by what they do to speed.
    Reused trials would count their source twice.
    """
    copy = optuna.create_study(directions=study.directions)
    copy.add_trials([t for t in study.get_trials(deepcopy=False)
                     if schema.is_feasible(t) and schema.launched(t)])
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
        if schema.REUSED_FROM in ua:
            continue  # its source is listed
        if ua.get(schema.FAILURE_CLASS):
            groups.setdefault(("infeasible", ua[schema.FAILURE_CLASS]), []).append(t)
        elif t.state == TrialState.PRUNED or ua.get(schema.PRUNED_RULE):
            rule = ua.get(schema.PRUNED_RULE) or ("screened-out" if ua.get(schema.FIDELITY) == "screen"
                                             else "pruner")
            groups.setdefault(("pruned", rule), []).append(t)
        else:
            for metric, slack in (ua.get(schema.SLO_SLACK) or {}).items():
                if slack > 0:
                    groups.setdefault(("slo-violated", metric), []).append(t)
            for metric, slack in ((ua.get(schema.QUALITY) or {}).get("slack") or {}).items():
                if slack > 0:
                    groups.setdefault(("quality-failed", metric), []).append(t)
    out = []
    for (kind, cls), members in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        if kind == "slo-violated":
            over = [m.user_attrs[schema.SLO_SLACK][cls] for m in members]
            reason = f"over its bound by {min(over):,.1f} to {max(over):,.1f} (worst workload)"
        elif kind == "quality-failed":
            records = [m.user_attrs[schema.QUALITY] for m in members]
            unmeasured = [r["not_measured"][cls] for r in records
                          if cls in (r.get("not_measured") or {})]
            over = [r["slack"][cls] for r in records if cls not in (r.get("not_measured") or {})]
            reason = "; ".join(
                ([f"past its bound by {min(over):.3f} to {max(over):.3f}"] if over else [])
                + [f"not measured: {u}" for u in dict.fromkeys(unmeasured)])
        else:
            key = "failure" if kind == "infeasible" else "pruned"
            reason = next((m.user_attrs.get(f"{key}_reason") for m in members
                           if m.user_attrs.get(f"{key}_reason")), "")
        evidence = [e for m in members
                    if (e := (m.user_attrs.get(schema.FAILURE_EVIDENCE) or "").strip())]
        out.append(FailureGroup(kind, cls, [m.number for m in members], reason,
                                list(dict.fromkeys(evidence))[:3]))
    return out


def evaluation_rows(evaluation: dict) -> list[WorkloadRow]:
    rows = []
    for w in evaluation.get("workloads", []):
        base, best = w.get("baseline", {}), w.get("best", {})
        failed = int(sum(base.get("failed", [])) + sum(best.get("failed", [])))
        for metric, label, higher in WORKLOAD_METRICS:
            c = change(base.get(metric, []), best.get(metric, []))
            rows.append(WorkloadRow(w["name"], label, higher, c.base, c.best, c, failed))
    return rows


def _search_rows(study: optuna.Study, best: ConfigStats, base: ConfigStats) -> list[WorkloadRow]:
    """Per search workload, over every run of each config (`tune confirm` adds repeats): user
    attr ``workload_metrics`` when there are several workloads, else the flat headline attrs."""
    space = study.user_attrs.get(schema.SPACE) or {}
    names = [w.get("name", "default")
             for w in space.get("workloads") or [space.get("workload") or {}]]

    def runs(group: ConfigStats, name: str) -> list[dict]:
        return [(t.user_attrs.get(schema.WORKLOAD_METRICS) or {}).get(name, t.user_attrs)
                for t in group.trials]

    rows = []
    for name in names:
        b_runs, a_runs = runs(base, name), runs(best, name)
        failed = int(sum((m.get("failed") or 0) for m in b_runs + a_runs))
        for metric, label, higher in WORKLOAD_METRICS:
            c = change([v for m in b_runs if (v := m.get(metric)) is not None],
                       [v for m in a_runs if (v := m.get(metric)) is not None])
            rows.append(WorkloadRow(name, label, higher, c.base, c.best, c, failed))
    return rows


def _telemetry(t: FrozenTrial) -> TelemetryRow | None:
    """The first workload's telemetry (the search workload): user attr ``telemetry`` holds one
    summary per workload, as recorded by tuner.recording."""
    per_workload = t.user_attrs.get(schema.TELEMETRY)
    if not isinstance(per_workload, dict) or not per_workload:
        return None
    tel = next(iter(per_workload.values()))
    d = derived(tel, int((t.user_attrs.get(schema.METRICS) or {}).get("total_output_tokens") or 0))
    view = tel.get("engine_metrics") or {}
    kv = (view.get("kv_cache_usage") or {}).get("max")
    queue = (view.get("queue_time_s") or {}).get("mean")
    gpu = bool(tel.get("gpu"))
    names = sorted({g.get("name") for g in tel.get("gpus", [])})
    return TelemetryRow(
        t.number, t.user_attrs.get(schema.ARM, "search"),
        f"{len(tel['gpus'])}× {', '.join(names)}" if gpu else "CPU",
        d["joules_per_output_token"],
        d["gpu_memory_peak_mib"] if gpu else d["engine_rss_peak_mib"],
        d["gpu_utilization_mean_pct"] if gpu else d["engine_cpu_mean_pct"],
        100.0 * kv if kv is not None else None,
        (view.get("requests_waiting") or {}).get("max"),
        (view.get("preemptions") or {}).get("delta"),
        1000.0 * queue if queue is not None else None)


def _launch(t: FrozenTrial) -> LaunchRow | None:
    ua = t.user_attrs
    if schema.LAUNCH_S not in ua and not ua.get(schema.LAUNCH_PHASES):
        return None
    return LaunchRow(t.number, ua.get(schema.ARM, "search"), ua.get(schema.LAUNCH_S),
                     dict(ua.get(schema.LAUNCH_PHASES) or {}),
                     (ua.get(schema.TIMINGS) or {}).get("total_s"))


def contenders(study: optuna.Study) -> tuple[ConfigStats | None, ConfigStats | None, str]:
    """The config to set against the baseline, the baseline (first feasible arm), and a note.

    Configs are grouped with their repeats and ranked by median (tuner.results). When the
    baseline itself is best, the best searched config is compared instead: that says how far the
    search fell short, and on other workloads it may still win.
    """
    best, base = results.best_config(study), results.baseline_config(study)
    if best is None or base is None or (results.config_key(best.first)
                                        != results.config_key(base.first)):
        return best, base, ""
    maximize = study.direction == optuna.study.StudyDirection.MAXIMIZE
    searched = [g for g in results.group_configs(study) if g.arm == "search"]
    if not searched:
        return None, base, (f"no searched config is feasible yet; the best config measured is "
                            f"the baseline {base.arm}")
    pick = max(searched, key=lambda g: g.median if maximize else -g.median)
    return pick, base, (f"the baseline {base.arm} is the best config measured; compared with it "
                        f"here: the best searched config, trial {pick.first.number}")


@dataclass(frozen=True)
class _Comparison:
    rows: list[WorkloadRow]
    source: str
    contender: int | None
    baseline_arm: str | None


def _comparison(study: optuna.Study, best: ConfigStats | None, base: ConfigStats | None,
                notes: list[str]) -> _Comparison:
    """The per-workload table: from `tune evaluate` when it ran, else the search's own runs."""
    evaluation = study.user_attrs.get(schema.EVALUATION)
    if isinstance(evaluation, dict) and evaluation.get("workloads"):
        measured = evaluation["best"]["trial"]
        if best is not None and measured != best.first.number:
            notes.append(f"the evaluation measured trial {measured}, but the best config is now "
                         f"trial {best.first.number}: run `tune evaluate` again")
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
    source = (f"search: trial {best.first.number} ({best.n} run(s)) vs trial "
              f"{base.first.number} ({base.n} run(s))")
    if min(best.n, base.n) < MIN_RUNS:
        source += "; `tune confirm` or `tune evaluate` adds repeats and intervals"
    if schema.MAX_LOAD in best.first.user_attrs:
        source += ("; each config's metrics are its runs at the load it sustained "
                   f"({_sustained(base.first):g} and {_sustained(best.first):g}), not at one shared load")
    return _Comparison(_search_rows(study, best, base), source, best.first.number, base.arm)


def _sustained(t: FrozenTrial) -> float:
    """The load a max-load trial sustained within the SLOs (0 where it met none)."""
    return float(t.user_attrs.get(schema.MAX_LOAD) or 0.0)


def _stored_space(study: optuna.Study) -> Space | None:
    try:
        return space_from_dict(study.user_attrs[schema.SPACE])
    except (KeyError, InputError):
        return None  # a study not made by tune, or by a version whose space no longer loads


def build(study: optuna.Study) -> ReportData:
    """Every table of the report, from the study alone."""
    trials = sorted(study.get_trials(deepcopy=False), key=lambda t: t.number)
    counts: dict[str, int] = {}
    for t in trials:
        label = schema.status(t)
        counts[label] = counts.get(label, 0) + 1
    notes: list[str] = []
    pareto: list[int] = []
    if len(study.directions) > 1:
        pareto = [t.number for t in results.pareto_front(study)]
        notes.append(f"{len(pareto)} trial(s) on the Pareto front; the per-workload table needs "
                     "a single best config")
        winner, best, base, group = None, None, None, None
    else:
        group = results.best_config(study)
        winner = group.first if group else None
        best, base, note = contenders(study)
        if note:
            notes.append(note)
    cmp = _comparison(study, best, base, notes)
    imp, imp_note = importances(study)
    space = _stored_space(study)
    scales = workload_scales(space)
    return ReportData(
        study=study.study_name,
        generated=f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, tuner {__version__}",
        objective=objective_name(study),
        directions=[d.name.lower() for d in study.directions],
        counts=counts,
        best=trial_row(winner) if winner else None,
        best_runs=group.values if winner else [],
        best_command=serve_command(winner, space) if winner else None,
        contender=cmp.contender,
        baseline_arm=cmp.baseline_arm,
        comparison_source=cmp.source,
        workload_rows=cmp.rows,
        failures=_failures(trials),
        trials=[trial_row(t) for t in trials],
        environment=dict(winner.user_attrs.get(schema.ENVIRONMENT) or {}) if winner else {},
        telemetry=[row for t in trials if (row := _telemetry(t)) is not None],
        launches=[row for t in trials if (row := _launch(t)) is not None],
        loads=[row for t in trials if (row := load_row(t, scales)) is not None],
        pareto=pareto,
        importances=imp,
        importance_note=imp_note,
        notes=notes,
        quality=bool((study.user_attrs.get(schema.SPACE) or {}).get("quality")),
        best_quality=(results.quality_summary(winner.user_attrs.get(schema.QUALITY))
                      if winner else ""),
    )
