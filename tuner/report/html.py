"""The report as one self-contained HTML file: plotly.js inlined, no network needed to open it.

Reports are attached to PRs, mailed and opened on air-gapped machines next to the GPUs, so nothing
is fetched at view time.
"""

from __future__ import annotations

import html
import json
import re
from typing import Any

import optuna
import plotly.graph_objects as go
import plotly.offline

from tuner.report.data import ReportData, TrialRow, feasible_copy
from tuner.report.markdown import (LAUNCH_HEAD, LOAD_HEAD, LOAD_NOTE, best_value, fmt, launch_rows,
                                   launch_summary, load_rows, runs_note)
from tuner.report.stats import METHOD

_CSS = """
body{font-family:system-ui,-apple-system,"DejaVu Sans",sans-serif;margin:2rem auto;max-width:1200px;
color:#1d2330;padding:0 1rem}
h1{font-size:1.6rem;margin-bottom:.2rem}h2{font-size:1.2rem;margin-top:2rem;border-bottom:1px solid #d5d9e0}
.meta{color:#5b6475;font-size:.9rem}.note{background:#fff7e0;border-left:3px solid #e0a800;padding:.4rem .8rem}
table{border-collapse:collapse;font-size:.85rem;margin:.5rem 0}
th,td{border:1px solid #d5d9e0;padding:.25rem .5rem;text-align:left;vertical-align:top}
th{background:#f1f3f7}td.num{text-align:right;font-variant-numeric:tabular-nums}
.good{color:#11772d;font-weight:600}.bad{color:#b3261e;font-weight:600}
pre{background:#f6f8fa;border:1px solid #d5d9e0;padding:.6rem;white-space:pre-wrap;word-break:break-all}
.plot{min-height:420px}.ok{color:#11772d}.infeasible,.error,.quality-failed{color:#b3261e}.pruned{color:#8a6d00}
"""


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _prose(text: str) -> str:
    """Escaped text whose `backticked` spans (written for Markdown too) become <code>."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", _e(text))


def _table(head: list[str], rows: list[list[Any]], numeric: set[int] | None = None,
           cls: str = "") -> str:
    numeric = numeric or set()
    out = [f'<table class="{cls}"><thead><tr>' + "".join(f"<th>{_e(h)}</th>" for h in head)
           + "</tr></thead><tbody>"]
    for row in rows:
        cells = []
        for i, cell in enumerate(row):
            raw = cell if isinstance(cell, _Raw) else _e(cell)
            cells.append(f'<td class="num">{raw}</td>' if i in numeric else f"<td>{raw}</td>")
        out.append("<tr>" + "".join(cells) + "</tr>")
    out.append("</tbody></table>")
    return "".join(out)


class _Raw(str):
    """Cell content that is already HTML."""


def _figure(fig: go.Figure, div_id: str) -> str:
    fig.update_layout(margin={"l": 60, "r": 30, "t": 50, "b": 50}, height=420,
                      template="plotly_white")
    return fig.to_html(full_html=False, include_plotlyjs=False, div_id=div_id,
                       config={"displaylogo": False, "responsive": True})


def _plots(study: optuna.Study, data: ReportData) -> list[tuple[str, str]]:
    """(title, HTML) per plot; a plot that cannot be drawn says why instead of failing the report."""
    out: list[tuple[str, str]] = []
    multi = len(study.directions) > 1

    def attempt(title: str, div_id: str, make) -> None:
        try:
            fig = make()
        except (ValueError, RuntimeError, KeyError) as exc:
            out.append((title, f'<p class="note">not drawn: {_e(exc)}</p>'))
            return
        if fig is not None:
            out.append((title, f'<div class="plot">{_figure(fig, div_id)}</div>'))

    if multi:
        names = study.metric_names or [f"objective {i}" for i in range(len(study.directions))]
        attempt("Pareto front (feasible trials)", "plot-pareto",
                lambda: optuna.visualization.plot_pareto_front(study, target_names=names))
    else:
        attempt("Optimization history", "plot-history",
                lambda: optuna.visualization.plot_optimization_history(
                    study, target_name=data.objective))
    feasible = feasible_copy(study)
    if len(feasible.trials) >= 2 and not multi:
        attempt("Parallel coordinates (feasible trials)", "plot-parallel",
                lambda: optuna.visualization.plot_parallel_coordinate(
                    feasible, target_name=data.objective))
    if data.importances:
        names = list(data.importances)[::-1]
        attempt("Parameter importances (PED-ANOVA, feasible trials)", "plot-importance",
                lambda: go.Figure(go.Bar(x=[data.importances[n] for n in names], y=names,
                                         orientation="h"))
                .update_layout(title="Parameter importances", xaxis_title="importance"))
    return out


def _change_cell(text: str, pct: float | None, low: float | None, high: float | None,
                 higher_is_better: bool) -> _Raw:
    """Green or red only when the interval excludes zero: colour is a claim."""
    cls = ""
    if pct is not None and low is not None and high is not None and (low > 0 or high < 0):
        cls = "good" if (low > 0) == higher_is_better else "bad"
    return _Raw(f'<span class="{cls}">{_e(text)}</span>')


def _trial_cells(t: TrialRow, params: list[str], quality: bool) -> list[Any]:
    return [t.number, t.arm, _Raw(f'<span class="{t.status}">{_e(t.status)}</span>'), fmt(t.value),
            *([t.quality] if quality else []), *(t.params.get(p, "") for p in params),
            fmt(t.p99_ttft_ms), fmt(t.mean_tpot_ms), t.failure]


def render(study: optuna.Study, data: ReportData) -> str:
    parts = [f"<h1>{_e(data.study)}: tuning report</h1>",
             f'<p class="meta">objective {_e(data.objective)} ({_e(", ".join(data.directions))})'
             f" · trials: {_e(', '.join(f'{v} {k}' for k, v in data.counts.items()))}"
             f" · generated {_e(data.generated)}</p>"]
    parts += [f'<p class="note">{_prose(n)}</p>' for n in data.notes]

    parts.append('<h2 id="answer">What to run</h2>')
    if data.pareto:
        parts.append(f"<p>Pick from the Pareto front: trials {_e(', '.join(map(str, data.pareto)))}"
                     " (their configs are in the trials table below).</p>")
    elif data.best is None:
        parts.append("<p>No feasible trial yet.</p>")
    else:
        b = data.best
        parts.append(f"<p>Best feasible config: trial {b.number} ({_e(b.arm)}), {_e(data.objective)}"
                     f" = <b>{_e(fmt(best_value(data)))}</b>{_e(runs_note(data))}; "
                     + _e(", ".join(f"{k}={v}" for k, v in b.params.items())) + "</p>")
        parts.append(f"<pre><code>{_e(data.best_command or '(no command recorded)')}</code></pre>")
        if data.quality:
            parts.append(f"<p>Quality against the reference precision: {_e(data.best_quality)}.</p>")

    parts.append('<h2 id="workloads">Per workload: baseline vs best</h2>')
    if data.workload_rows:
        parts.append(f'<p class="meta">{_prose(data.comparison_source)}. Values are geometric '
                     f"means over the repeats; change is their ratio, with a {_e(METHOD)}.</p>")
        rows = [[r.workload, r.label, fmt(r.baseline), fmt(r.best),
                 _change_cell(r.change.text(), r.change.pct, r.change.low, r.change.high,
                              r.higher_is_better),
                 f"{r.change.n_base}/{r.change.n_best}",
                 r.failed_requests or ""] for r in data.workload_rows]
        parts.append(_table(["workload", "metric", f"baseline ({data.baseline_arm})", f"best (trial {data.contender})",
                             "change", "n base/best", "failed requests"], rows, {2, 3},
                            "workloads"))
    else:
        parts.append("<p>No comparison: see the notes above.</p>")

    if data.loads:
        parts.append('<h2 id="loads">Load within the SLOs</h2>')
        parts.append(f'<p class="meta">{_e(LOAD_NOTE)}</p>')
        parts.append(_table(LOAD_HEAD, load_rows(data), {2, 4}, "loads"))

    parts.append('<h2 id="plots">Search</h2>')
    for title, body in _plots(study, data):
        parts.append(f"<h3>{_e(title)}</h3>{body}")
    if data.importance_note:
        parts.append(f'<p class="note">{_e(data.importance_note)}</p>')

    parts.append('<h2 id="failures">Failures by class</h2>')
    if data.failures:
        parts.append(_table(["kind", "class", "trials", "rule", "log line"],
                            [[f.kind, f.failure_class, ", ".join(map(str, f.trials)), f.reason,
                              _Raw("<br>".join(f"<code>{_e(_clip(e))}</code>" for e in f.evidence))]
                             for f in data.failures], cls="failures"))
    else:
        parts.append("<p>No trial failed or was pruned.</p>")

    if data.telemetry:
        parts.append('<h2 id="telemetry">Telemetry</h2>')
        parts.append(_table(
            ["trial", "arm", "device", "J / output token", "peak memory MiB", "mean load %",
             "peak KV cache %", "peak waiting", "preemptions", "mean queue ms"],
            [[r.number, r.arm, r.device, fmt(r.energy_j_per_token, 3), fmt(r.peak_memory_mib),
              fmt(r.mean_load_pct), fmt(r.peak_kv_cache_pct), fmt(r.peak_waiting),
              fmt(r.preemptions, 0), fmt(r.mean_queue_ms)] for r in data.telemetry],
            set(range(3, 10)), "telemetry"))
        parts.append('<p class="meta">On CPU machines memory is the engine\'s RSS and load its CPU%'
                     " (100 = one core); on GPUs, memory used and utilisation.</p>")

    if data.launches:
        parts.append('<h2 id="launches">Where the launches\' time went</h2>')
        parts.append(f'<p class="meta">{_e(launch_summary(data))}</p>')
        parts.append(_table(LAUNCH_HEAD, launch_rows(data), {2, 3, 4, 6, 7, 8, 9, 10}, "launches"))

    parts.append('<h2 id="trials">All trials</h2>')
    params = data.params
    parts.append(_table(["#", "arm", "status", data.objective,
                         *(["quality"] if data.quality else []), *params, "p99 TTFT ms",
                         "mean TPOT ms", "failure"],
                        [_trial_cells(t, params, data.quality) for t in data.trials], {3}, "trials"))

    parts.append('<h2 id="environment">Environment of the winner</h2>')
    if data.environment:
        parts.append(_table(["key", "value"], [[k, v if isinstance(v, str) else json.dumps(v)]
                                               for k, v in data.environment.items()],
                            cls="environment"))
    else:
        parts.append("<p>No environment recorded.</p>")

    return ("<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{_e(data.study)}: tuning report</title><style>{_CSS}</style>"
            f"<script>{plotly.offline.get_plotlyjs()}</script></head><body>"
            + "\n".join(parts) + "</body></html>")


def _clip(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
